#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The NCCL plugin on the sanitizer build: mercury-nccl-harness's selftest
# (tests/tools/) against libnccl-net-mercury.so, both built with
# AddressSanitizer and UndefinedBehaviorSanitizer in BUILD/asan, over
# loopback in a network namespace of its own, with the sender killed
# mid-stream NCCL_KILLS times (default 100) on one listener: every receive
# ends with ncclRemoteError each time, and the sanitizers see nothing
# (leaks included) across the rounds. Closes with "nccl-asan: N passed,
# M failed".
#
# usage: run-nccl-asan.sh BUILD_DIR      (as root)
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(mkdir -p "${1:?usage: run-nccl-asan.sh BUILD_DIR}" && cd "$1" && pwd)
log=$build/nccl-asan.log
. "$top/tests/integration/asan-build.sh"
. "$top/scripts/lib/netns.sh"
if ! asan_build "$build" mercury-nccl-harness nccl-net-mercury; then
	tail -20 "$build/asan-build.log"
	echo "FAIL nccl-asan/build: the plugin or its harness does not build with the sanitizers (see $build/asan-build.log)"
	echo "nccl-asan: 0 passed, 1 failed"
	exit 1
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99
export UBSAN_OPTIONS=print_stacktrace=1
# A stalled peer fails after the timeout: 3 s rather than NCCL's 30 here.
in_netns env NCCL_SOCKET_IFNAME=lo MERCURY_NCCL_TIMEOUT_MS=3000 \
	MERCURY_SOCKET=/nonexistent/mercury-nccl-asan.sock MERCURY_NCCL_KILLS="${NCCL_KILLS:-100}" \
	"$build/asan/tests/bin/mercury-nccl-harness" selftest "$build/asan/lib/libnccl-net-mercury.so" >"$log" 2>&1
rc=$?
sed 's#^\(PASS\|FAIL\) nccl/#\1 nccl-asan/#' "$log" | grep -E '^(PASS|FAIL|    )'
fails=$(grep -c '^FAIL ' "$log")
if [ $rc != 0 ] && [ "$fails" = 0 ]; then
	grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error' "$log" | head -5
	echo "FAIL nccl-asan/sanitizers: the harness exited $rc (see $log)"
	fails=1
fi
echo "nccl-asan: $(grep -c '^PASS ' "$log") passed, $fails failed"
[ "$fails" = 0 ]
