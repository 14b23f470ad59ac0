#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The demo natively on this host with the BPF datapath (tests/cc/demo.sh):
# registers it with a loader mercuryd unless a mercury CC is already there,
# and keeps the RESULT lines in LOG for scripts/report.sh.
# usage: demo-native.sh LOG
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$(dirname "$1")"
log=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
export PATH=${BIN:-$top/build/user/guest-bin}:$PATH
registered() { grep -qw mercury /proc/sys/net/ipv4/tcp_available_congestion_control; }
loader=""
cleanup() {
	sh "$top/scripts/cluster.sh" down 2>/dev/null
	[ -n "$loader" ] && kill "$loader" 2>/dev/null && wait "$loader" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ! registered; then
	mercuryd --datapath=bpf --socket /run/mercury-demo.sock --log-level warn &
	loader=$!
	for _ in $(seq 50); do registered && break; sleep 0.1; done
	registered || { echo "demo: the BPF datapath did not register" >&2; exit 1; }
fi
cd "$top/tests/cc" &&
	SCRIPTS=$top/scripts PROFILES=$top/tests/experiment/profiles sh ./demo.sh 2>&1 | tee "$log" |
	grep --line-buffered -E '^(RESULT|INFO demo)'
