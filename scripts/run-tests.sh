#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make test`: build everything, run the unit tests (ctest), the BPF datapath
# natively in network namespaces, mercury.torch on real PyTorch, the VM tests (tcp_mercury in Debian's 6.1
# kernel under qemu), and close with one
# "total: N passed, M failed" line. Exit non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
passed=0 failed=0

step() { echo; echo "=== $*"; }

step "build: module (W=1) and user space (-Wall -Wextra -Werror)"
if ! make --no-print-directory kmod user; then
	echo "total: 0 passed, 1 failed"
	exit 1
fi

step "unit tests (ctest)"
ctest_log=$(mktemp)
(cd "$BUILD/user" && ctest --output-on-failure) | tee "$ctest_log"
# "100% tests passed, 0 tests failed out of 15"
unit_total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$ctest_log")
unit_failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed.*/\1/p' "$ctest_log")
if [ -z "$unit_total" ]; then
	unit_total=1 unit_failed=1
	echo "FAIL unit: ctest did not report"
fi
passed=$((passed + unit_total - unit_failed))
failed=$((failed + unit_failed))
rm -f "$ctest_log"

step "fuzzing the agent protocol decoder (libFuzzer, bounded)"
if fuzz_out=$(scripts/fuzz.sh "${MERCURY_FUZZ_SECONDS:-30}"); then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi
echo "$fuzz_out"

step "BPF datapath: the eBPF struct_ops program on this host's kernel, in netns"
bpf_log="$BUILD/bpf-tests.log"
tests/native/bpf_tests.sh "$BUILD/user/guest-bin" 2>&1 | tee "$bpf_log" | grep -E '^(PASS|FAIL|==|bpf:)'
bpf_passed=$(grep -c '^PASS ' "$bpf_log" || true)
bpf_failed=$(grep -c '^FAIL ' "$bpf_log" || true)
if ! grep -q '^bpf: ' "$bpf_log"; then
	echo "FAIL bpf: the suite did not finish"
	bpf_failed=$((bpf_failed + 1))
fi
passed=$((passed + bpf_passed))
failed=$((failed + bpf_failed))

step "PyTorch: mercury.torch against DDP, lanes in the BPF datapath"
torch_log="$BUILD/torch-tests.log"
tests/torch/run.sh "$BUILD/user/guest-bin" 2>&1 | tee "$torch_log" | grep -E '^(PASS|FAIL|torch:)'
torch_passed=$(grep -c '^PASS ' "$torch_log" || true)
torch_failed=$(grep -c '^FAIL ' "$torch_log" || true)
if ! grep -q '^torch: ' "$torch_log"; then
	echo "FAIL torch: the checks did not finish"
	torch_failed=$((torch_failed + 1))
fi
passed=$((passed + torch_passed))
failed=$((failed + torch_failed))

step "VM tests: tcp_mercury in Debian's 6.1 cloud kernel under qemu"
vm_log="$BUILD/vm-tests.log"
make --no-print-directory vmtest
vm_passed=$(grep -c '^PASS ' "$vm_log" 2>/dev/null || true)
vm_failed=$(grep -c '^FAIL ' "$vm_log" 2>/dev/null || true)
if ! grep -q '^MERCURY-VM-DONE' "$vm_log" 2>/dev/null; then
	vm_failed=$((vm_failed + 1))
fi
passed=$((passed + vm_passed))
failed=$((failed + vm_failed))

echo
echo "total: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
