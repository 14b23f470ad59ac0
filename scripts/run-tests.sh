#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make test`: build everything, run the unit tests (ctest) and the Python
# package's (pytest), the BPF datapath
# natively in network namespaces, mercury.torch on real PyTorch (Debian 12's
# 1.13 and Debian 13's 2.6), the VM tests (tcp_mercury in Debian's 6.1
# kernel under qemu), the Debian packages (installed, DKMS, purged), the same packages
# and the systemd units in a Debian 12 guest that boots systemd, and close with one
# "total: N passed, M failed" line. Exit non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
passed=0 failed=0

step() { echo; echo "=== $*"; }

step "build: module (W=1) and user space (-Wall -Wextra -Werror)"
if ! make --no-print-directory kmod-guest user; then
	echo "total: 0 passed, 1 failed"
	exit 1
fi

step "module against Debian's 6.12 cloud headers (compile only: 6.12 does not boot under this qemu)"
if kdir612=$(scripts/fetch-headers-6.12.sh 2>"$BUILD/fetch-headers.log") &&
	scripts/kmod-compile-check.sh "$kdir612"; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
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

# pytest_suite CMD...: runs a pytest command and adds up what it counted.
pytest_suite() {
	local log py_passed py_failed
	log=$(mktemp)
	"$@" 2>&1 | tee "$log"
	# "3 failed, 17 passed, 1 warning in 8.47s" / "20 passed in 6.90s"
	py_passed=$(grep -Eo '[0-9]+ passed' "$log" | tail -1 | cut -d' ' -f1)
	py_failed=$(grep -Eo '[0-9]+ (failed|error)' "$log" | awk '{n += $1} END {print n + 0}')
	if [ -z "$py_passed" ] && [ "$py_failed" -eq 0 ]; then
		echo "FAIL python: pytest did not report"
		py_failed=1
	fi
	passed=$((passed + ${py_passed:-0}))
	failed=$((failed + py_failed))
	rm -f "$log"
}

step "Python package (pytest, no agent)"
pytest_suite /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python

step "fuzzing the agent protocol decoder and the NCCL plugin's receive side (libFuzzer, bounded)"
fuzz_out=$(scripts/fuzz.sh "${MERCURY_FUZZ_SECONDS:-30}")
fuzz_rc=$?
echo "$fuzz_out"
passed=$((passed + $(grep -c '^PASS' <<<"$fuzz_out")))
failed=$((failed + $(grep -c '^FAIL' <<<"$fuzz_out")))
if [ $fuzz_rc != 0 ] && ! grep -q '^FAIL' <<<"$fuzz_out"; then
	failed=$((failed + 1))
	echo "FAIL fuzz: scripts/fuzz.sh exited $fuzz_rc"
fi

# suite NAME LOG CMD...: runs a suite printing PASS/FAIL lines and a closing
# "NAME: ..." line, shows its summary lines and adds up what it counted.
suite() {
	local name=$1 log=$2 p f
	shift 2
	"$@" 2>&1 | tee "$log" | grep -E "^(PASS|FAIL|==|$name:)"
	p=$(grep -c '^PASS ' "$log" || true)
	f=$(grep -c '^FAIL ' "$log" || true)
	if ! grep -q "^$name: " "$log"; then
		echo "FAIL $name: the suite did not finish"
		f=$((f + 1))
	fi
	passed=$((passed + p))
	failed=$((failed + f))
}

step "BPF datapath: the eBPF struct_ops program on this host's kernel, in netns"
suite bpf "$BUILD/bpf-tests.log" tests/native/bpf_tests.sh "$BUILD/user"

step "stress: the jobs tests twice beside busy loops, the second with random loss (no window of 0, no warning)"
suite stress "$BUILD/stress-tests.log" env TESTS="$(cd tests/cc && bash -c '. ./jobs.sh; echo $JOBS_TESTS')" \
	tests/native/stress.sh "$BUILD/user" 2 "$BUILD/stress"

step "mercury-ps: hostile peers, a kill loop, a fuzzer, floods and impostor servers, on an ASan/UBSan build"
suite ps "$BUILD/ps-suite.log" tests/integration/run-ps.sh "$BUILD" "$BUILD/user"

step "NCCL plugin: its harness on the ASan/UBSan build, a sender killed mid-stream 100 times"
suite nccl-asan "$BUILD/nccl-asan-suite.log" tests/integration/run-nccl-asan.sh "$BUILD"

step "PyTorch: mercury.torch against DDP, lanes in the BPF datapath (Debian 12's PyTorch)"
suite torch "$BUILD/torch-tests.log" tests/torch/run.sh "$BUILD/user"

step "PyTorch 2: the same suite and the unit tests that use torch on Debian 13's PyTorch, in a debootstrap root"
if torch_root=$(scripts/torch-root.sh 2>"$BUILD/torch-root.log"); then
	suite torch "$BUILD/torch2-tests.log" tests/torch/run.sh "$BUILD/user" "$torch_root"
	# The unit tests that import torch, on that PyTorch too.
	# shellcheck disable=SC2046 # a list of files
	pytest_suite tests/torch/in-root.sh "$torch_root" "$BUILD/user" /usr/bin/python3 -m pytest -q \
		-p no:cacheprovider $(grep -l '^import torch' tests/python/test_*.py)
else
	tail -5 "$BUILD/torch-root.log"
	echo "FAIL torch/root: no Debian 13 root with PyTorch (see $BUILD/torch-root.log)"
	failed=$((failed + 1))
fi

step "VM tests: tcp_mercury in Debian's 6.1 cloud kernel under qemu"
# run.sh tallies the guest's serial log (build/vm-tests.log) and prints "vm/tests: ...".
suite vm/tests "$BUILD/vm-tests-run.log" make --no-print-directory vmtest

step "packaging: make deb, install with apt (DKMS builds the module), the guest loads it, purge"
suite packaging "$BUILD/packaging-tests.log" tests/packaging/run.sh "$BUILD"

step "systemd: the .debs and units in a Debian 12 guest booting systemd (apt, systemctl, purge)"
suite systemd "$BUILD/systemd-tests.log" scripts/vm/systemd-guest.sh "$BUILD/deb" "$BUILD/vm-systemd.log"

echo
echo "total: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
