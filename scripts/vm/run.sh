#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boots Debian's 6.1 cloud kernel under qemu (TCG: no KVM here) with an
# initramfs holding tcp_mercury.ko and the tests, runs one guest suite
# (tests/vm/<suite>.sh) and reports its PASS/FAIL lines.
#
# usage: [MERCURY_VM_TESTS=a,b [MERCURY_VM_REPEAT=N]] run.sh SUITE INITRAMFS [LOG]
# MERCURY_VM_TESTS picks tests of the 'tests' suite (test_NAME), run N times.
# Exit 0 only if the guest finished the suite, nothing failed (tests also
# check the kernel log) and it produced checks or BENCH numbers. The serial log is kept in LOG.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
suite=$1 initrd=$2 log=${3:-$top/build/vm-$suite.log}
timeout_s=${MERCURY_VM_TIMEOUT:-900}

case ${MERCURY_VM_TESTS:-} in *[!a-z0-9_,]*)
	echo "run.sh: MERCURY_VM_TESTS takes test names separated by commas, e.g. hold_through_loss,weights" >&2
	exit 2
esac
case ${MERCURY_VM_REPEAT:-1} in '' | *[!0-9]* | 0)
	echo "run.sh: MERCURY_VM_REPEAT must be a positive number" >&2
	exit 2
esac

guest=$("$top/scripts/fetch-guest-kernel.sh") || exit 1
mkdir -p "$(dirname "$log")"
echo "vm: booting $(basename "$guest") under qemu TCG, suite '$suite' (log: $log)"

# A locked-up guest panics (softlockup_panic) and qemu exits at once, not at
# the timeout; loglevel=5 (not quiet) puts the report's stack on the console.
timeout --foreground "$timeout_s" qemu-system-x86_64 \
	-accel tcg -cpu max -smp 2 -m 1024 \
	-nodefaults -no-reboot -display none -serial stdio \
	-kernel "$guest/vmlinuz" -initrd "$initrd" \
	-append "console=ttyS0 panic=-1 oops=panic softlockup_panic=1 loglevel=5 mercury.suite=$suite mercury.tests=${MERCURY_VM_TESTS:-} mercury.repeat=${MERCURY_VM_REPEAT:-1}" \
	</dev/null 2>&1 | sed -u 's/\r$//' | tee "$log" | grep --line-buffered -E '^(PASS|FAIL|SKIP|INFO|BENCH|RESULT|==)'
qemu_rc=${PIPESTATUS[0]}

passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
if ! grep -q '^MERCURY-VM-DONE' "$log"; then
	echo "FAIL vm/$suite: guest did not finish (qemu exit $qemu_rc; kernel panic or timeout?)"
	# The first report whole (loglevel=5 puts its stack on the console).
	awk '/Kernel panic|BUG:|WARNING:|Oops|rcu: INFO/ { n = 60 } n-- > 0' "$log" | head -60
	failed=$((failed + 1))
fi
echo "vm/$suite: $passed passed, $failed failed"
# A test suite must have run checks; a benchmark must have reported numbers.
[ "$failed" -eq 0 ] && { [ "$passed" -gt 0 ] || grep -qE '^(BENCH|RESULT) ' "$log"; }
