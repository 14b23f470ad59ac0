#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boots Debian's 6.1 cloud kernel under qemu (TCG: no KVM here) with an
# initramfs holding tcp_mercury.ko and the tests, runs one guest suite
# (tests/vm/<suite>.sh) and reports its PASS/FAIL lines.
#
# usage: run.sh SUITE INITRAMFS [LOG]
# Exit 0 only if the guest finished the suite, nothing failed (tests also
# check the kernel log) and it produced checks or BENCH numbers. The serial log is kept in LOG.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
suite=$1 initrd=$2 log=${3:-$top/build/vm-$suite.log}
timeout_s=${MERCURY_VM_TIMEOUT:-900}

guest=$("$top/scripts/fetch-guest-kernel.sh") || exit 1
mkdir -p "$(dirname "$log")"
echo "vm: booting $(basename "$guest") under qemu TCG, suite '$suite' (log: $log)"

timeout --foreground "$timeout_s" qemu-system-x86_64 \
	-accel tcg -cpu max -smp 2 -m 1024 \
	-nodefaults -no-reboot -display none -serial stdio \
	-kernel "$guest/vmlinuz" -initrd "$initrd" \
	-append "console=ttyS0 panic=-1 oops=panic quiet mercury.suite=$suite" \
	</dev/null 2>&1 | sed -u 's/\r$//' | tee "$log" | grep --line-buffered -E '^(PASS|FAIL|SKIP|INFO|BENCH|RESULT|==)'
qemu_rc=${PIPESTATUS[0]}

passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
if ! grep -q '^MERCURY-VM-DONE' "$log"; then
	echo "FAIL vm/$suite: guest did not finish (qemu exit $qemu_rc; kernel panic or timeout?)"
	grep -E 'Kernel panic|BUG|WARNING|Oops|Call Trace' "$log" | head -20
	failed=$((failed + 1))
fi
echo "vm/$suite: $passed passed, $failed failed"
# A test suite must have run checks; a benchmark must have reported numbers.
[ "$failed" -eq 0 ] && { [ "$passed" -gt 0 ] || grep -qE '^(BENCH|RESULT) ' "$log"; }
