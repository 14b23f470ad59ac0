# SPDX-License-Identifier: GPL-2.0
# Sourced by the native scripts (bench, demo, ack cost): registers the BPF
# datapath with a loader mercuryd unless a CC named mercury is already there,
# and stops that loader again. mercuryd must be on PATH.
#   bpf_loader_start NAME [LOG]   0 once registered; the loader logs to LOG
#   bpf_loader_stop               unregisters, if we registered
registered() { grep -qw mercury /proc/sys/net/ipv4/tcp_available_congestion_control; }

BPF_LOADER_PID=""
bpf_loader_start() {
	registered && return 0
	if [ -n "${2:-}" ]; then
		mercuryd --datapath=bpf --socket "/run/mercury-$1.sock" --log-level warn 2>>"$2" &
	else
		mercuryd --datapath=bpf --socket "/run/mercury-$1.sock" --log-level warn &
	fi
	BPF_LOADER_PID=$!
	for _ in $(seq 50); do
		registered && return 0
		sleep 0.1
	done
	echo "$1: the BPF datapath did not register${2:+ (see $2)}" >&2
	return 1
}

bpf_loader_stop() {
	[ -n "$BPF_LOADER_PID" ] && kill "$BPF_LOADER_PID" 2>/dev/null && wait "$BPF_LOADER_PID" 2>/dev/null
	BPF_LOADER_PID=""
}
