#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# mercury-ps's own suite: tests/integration/ps_hostile.py (peers that break
# the protocol's rules) and ps_safety.py (a kill loop, a fuzzer, floods,
# impostor servers, limits) against a build of the server with
# AddressSanitizer and UndefinedBehaviorSanitizer, which it builds in
# BUILD/asan; then ps_safety's memory check (a finished job's memory goes
# back) against the ordinary build, where no sanitizer's quarantine holds
# freed memory. Each in a network namespace of its own (127.0.0.2 and .3
# play other hosts). Closes with "ps: N passed, M failed".
#
# usage: run-ps.sh BUILD_DIR USER_BUILD_DIR   (as root)
# env:   PS_KILLS (default 200), PS_FUZZ_ROUNDS (default 300), PS_SEED
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(mkdir -p "${1:?usage: run-ps.sh BUILD_DIR USER_BUILD_DIR}" && cd "$1" && pwd)
user=$(cd "${2:?usage: run-ps.sh BUILD_DIR USER_BUILD_DIR}" && pwd)
asan=$build/asan
log=$build/ps-tests.log
: >"$log"

. "$top/tests/integration/asan-build.sh"
if ! asan_build "$build" mercury-ps; then
	tail -20 "$build/asan-build.log"
	echo "FAIL ps/asan-build: mercury-ps does not build with the sanitizers (see $build/asan-build.log)"
	echo "ps: 0 passed, 1 failed"
	exit 1
fi

. "$top/scripts/lib/netns.sh"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99
export UBSAN_OPTIONS=print_stacktrace=1
seed=${PS_SEED:-$(date +%s)}
in_netns /usr/bin/python3 "$top/tests/integration/ps_hostile.py" "$asan/bin/mercury-ps" 2>&1 | tee -a "$log"
in_netns /usr/bin/python3 "$top/tests/integration/ps_safety.py" "$asan/bin/mercury-ps" \
	--kills "${PS_KILLS:-200}" --fuzz-rounds "${PS_FUZZ_ROUNDS:-300}" --seed "$seed" 2>&1 | tee -a "$log"
in_netns /usr/bin/python3 "$top/tests/integration/ps_safety.py" "$user/bin/mercury-ps" --only memory --rss 2>&1 |
	sed 's#^\(PASS\|FAIL\) ps-safety/#\1 ps-safety/unsanitized/#' | tee -a "$log"
echo "ps: $(grep -c '^PASS ' "$log") passed, $(grep -c '^FAIL ' "$log") failed"
