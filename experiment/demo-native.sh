#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The demo natively on this host with the BPF datapath (experiment/demo.sh):
# registers it with a loader mercuryd unless a mercury CC is already there,
# and keeps the RESULT lines in LOG for experiment/report/report.sh.
# usage: demo-native.sh LOG
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$(dirname "$1")"
log=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
export PATH=${BIN:-$top/build/user/bin:$top/build/user/tests/bin}:$PATH
. "$top/scripts/bpf-loader.sh"
cleanup() {
	sh "$top/experiment/cluster.sh" down 2>/dev/null
	bpf_loader_stop
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bpf_loader_start demo || exit 1
# From tests/cc: demo.sh uses the shared harness library (lib.sh) there.
cd "$top/tests/cc" &&
	SCRIPTS=$top/experiment PROFILES=$top/experiment/profiles sh "$top/experiment/demo.sh" 2>&1 | tee "$log" |
	grep --line-buffered -E '^(RESULT|INFO demo|INFO datapath)'
