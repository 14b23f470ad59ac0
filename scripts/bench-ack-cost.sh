#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Per-ACK CPU cost of the BPF mercury CC next to cubic and reno, side by side
# in one run (this machine has no hardware counters for perf):
#  - end to end: one flow between two namespaces through a 1 Gbit/s tbf, the
#    same for every CC, ROUNDS rounds of SECONDS each, CCs interleaved; the
#    machine's kernel CPU time (system + irq + softirq, /proc/stat) divided
#    by the ACK segments the sender took in (TcpInSegs of its netns);
#  - the BPF programs' own cost: run time per call from the kernel's BPF
#    statistics (kernel.bpf_stats_enabled), for every mercury hook.
# Prints ACK and BPF lines. usage: bench-ack-cost.sh  (root; env ROUNDS,
# SECONDS_PER_RUN)
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export PATH=${BIN:-$top/build/user/guest-bin}:$PATH
IP=/usr/sbin/ip TC=/usr/sbin/tc
ROUNDS=${ROUNDS:-3} SECS=${SECONDS_PER_RUN:-5}

. "$top/scripts/bpf-loader.sh"
cleanup() {
	$IP netns del ack1 2>/dev/null
	$IP netns del ack2 2>/dev/null
	sysctl -qw kernel.bpf_stats_enabled="$stats_before" 2>/dev/null
	bpf_loader_stop
}
stats_before=$(sysctl -n kernel.bpf_stats_enabled 2>/dev/null || echo 0)
trap cleanup EXIT
bpf_loader_start bench-ack-cost || exit 1

$IP netns add ack1
$IP netns add ack2
$IP link add v1 netns ack1 type veth peer name v2 netns ack2
$IP -n ack1 addr add 10.9.0.1/24 dev v1
$IP -n ack2 addr add 10.9.0.2/24 dev v2
$IP -n ack1 link set v1 up
$IP -n ack2 link set v2 up
$TC -n ack1 qdisc add dev v1 root tbf rate 1gbit burst 64kb latency 5ms
$IP netns exec ack2 mercury-flow server --port 5201 >/dev/null 2>&1 &
sleep 0.3

kernel_ticks() { awk '/^cpu / { print $4 + $7 + $8 }' /proc/stat; }
in_segs() { $IP netns exec ack1 awk '/^Tcp:/ { if (!n) { for (i = 1; i <= NF; i++) if ($i == "InSegs") c = i; n = 1 } else print $c }' /proc/net/snmp; }

declare -A ticks acks bytes
sysctl -qw kernel.bpf_stats_enabled=1
for _ in $(seq "$ROUNDS"); do
	for cc in cubic reno mercury; do
		t0=$(kernel_ticks) a0=$(in_segs)
		b=$($IP netns exec ack1 mercury-flow client --connect 10.9.0.2:5201 --cc "$cc" --seconds "$SECS" |
			sed -n 's/^result .*acked=\([0-9]*\).*/\1/p')
		t1=$(kernel_ticks) a1=$(in_segs)
		bytes[$cc]=$(( ${bytes[$cc]:-0} + b ))
		ticks[$cc]=$(( ${ticks[$cc]:-0} + t1 - t0 ))
		acks[$cc]=$(( ${acks[$cc]:-0} + a1 - a0 ))
	done
done
hz=$(getconf CLK_TCK)
for cc in cubic reno mercury; do
	awk -v cc="$cc" -v t="${ticks[$cc]}" -v a="${acks[$cc]}" -v b="${bytes[$cc]}" -v hz="$hz" \
		'BEGIN { printf "ACK cc=%s acks=%d MB=%.0f kernel_cpu_s=%.2f us_per_ack=%.1f us_per_MB=%.1f\n",
			cc, a, b / 1e6, t / hz, t / hz * 1e6 / a, t / hz * 1e12 / b }'
done
# The mercury programs' own time (struct_ops progs are named after the hooks).
bpftool prog show -j 2>/dev/null | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    name = p.get("name", "")
    if name.startswith("mercury_") and p.get("run_cnt"):
        calls, ns = p["run_cnt"], p["run_time_ns"]
        print(f"BPF prog={name} calls={calls} ns_per_call={ns / calls:.0f}")
'
