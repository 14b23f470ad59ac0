# SPDX-License-Identifier: GPL-2.0
# Sourced by the suites that print their own checks (tests/packaging/run.sh,
# tests/systemd/suite.sh): set CHECK_PREFIX first.
#
# check NAME DETAIL CMD...: runs CMD and prints "PASS $CHECK_PREFIX/NAME  # DETAIL"
# or "FAIL $CHECK_PREFIX/NAME: DETAIL", counting it in $passed or $failed; returns
# CMD's success, so that "check ... || tail LOG" shows a failure's log.
passed=0 failed=0
check() {
	local name=$1 detail=$2
	shift 2
	if "$@"; then
		echo "PASS $CHECK_PREFIX/$name  # $detail"
		passed=$((passed + 1))
	else
		echo "FAIL $CHECK_PREFIX/$name: $detail"
		failed=$((failed + 1))
		return 1
	fi
}
