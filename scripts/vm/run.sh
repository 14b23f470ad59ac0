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
if [ $# -lt 2 ]; then
	echo "usage: [MERCURY_VM_TESTS=a,b [MERCURY_VM_REPEAT=N]] run.sh SUITE INITRAMFS [LOG]" >&2
	echo "  e.g. run.sh demo build/initramfs.cpio.gz (make kmod-guest guest builds it)" >&2
	exit 2
fi
suite=$1 initrd=$2 log=${3:-$top/build/vm-$suite.log}

case ${MERCURY_VM_TESTS:-} in *[!a-z0-9_,]*)
	echo "run.sh: MERCURY_VM_TESTS takes test names separated by commas, e.g. hold_through_loss,weights" >&2
	exit 2
esac
case ${MERCURY_VM_REPEAT:-1} in '' | *[!0-9]* | 0)
	echo "run.sh: MERCURY_VM_REPEAT must be a positive number" >&2
	exit 2
esac

guest=$("$top/scripts/fetch-guest-kernel.sh") || exit 1
. "$here/lib.sh"
echo "vm: booting $(basename "$guest") under qemu TCG, suite '$suite' (log: $log)"

# A locked-up guest panics (softlockup_panic) and qemu exits at once, not at
# the timeout; loglevel=5 (not quiet) puts the report's stack on the console.
boot_guest "$log" '^(PASS|FAIL|SKIP|INFO|BENCH|RESULT|==)' -m 1024 -initrd "$initrd" \
	-append "console=ttyS0 panic=-1 oops=panic softlockup_panic=1 loglevel=5 mercury.suite=$suite mercury.tests=${MERCURY_VM_TESTS:-} mercury.repeat=${MERCURY_VM_REPEAT:-1}"
guest_tally "vm/$suite" "$log"
# A test suite must have run checks; a benchmark must have reported numbers.
[ "$failed" -eq 0 ] && { [ "$passed" -gt 0 ] || grep -qE '^(BENCH|RESULT) ' "$log"; }
