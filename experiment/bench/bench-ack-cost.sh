#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Per-ACK CPU cost of the BPF mercury CC against cubic, with 1 and with many
# active flows, side by side in one run (this machine has no hardware counters
# for perf):
#  - end to end: FLOWS connections at once from one namespace to another
#    through a 1 Gbit/s tbf, the same for every CC, ROUNDS rounds of SECONDS
#    each, CCs interleaved within a round; the machine's kernel CPU time
#    (system + irq + softirq, /proc/stat) divided by the ACK segments the
#    sender took in (TcpInSegs of its netns). Mercury's sockets carry a tag
#    with a table entry, so every ACK does the lookups a trainer's would;
#  - the BPF programs' own cost: run time per call from the kernel's BPF
#    statistics (kernel.bpf_stats_enabled), for every mercury hook.
# Each CC runs once unmeasured first (page cache, the last test's namespace
# teardown still in the kernel). Prints ACK lines per CC and flow count,
# RATIO lines (mercury / cubic, per ACK and per MB, each round on its own:
# mean, 95% CI, n) and BPF lines. Per MB as well because the CCs need not
# draw the same number of ACKs for the same bytes.
#
# usage: bench-ack-cost.sh   (root; env FLOWS="1 1000", ROUNDS=5,
#                             SECONDS_PER_RUN=4, BIN=dir with mercury-flow)
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
export PATH=${BIN:-$top/build/user/bin:$top/build/user/tests/bin}:$PATH
IP=/usr/sbin/ip TC=/usr/sbin/tc
ROUNDS=${ROUNDS:-5} SECS=${SECONDS_PER_RUN:-4} FLOWS=${FLOWS:-1 1000}
CCS="cubic mercury"
TAG=11	# a tag >= MERCURY_TAG_MIN with an entry: rank 1

. "$top/scripts/bpf-loader.sh"
cleanup() {
	[ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null
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
$IP netns exec ack1 mercuryctl --datapath=bpf tag set "$TAG" 1 >/dev/null || exit 1
$IP netns exec ack2 mercury-flow server --port 5201 >/dev/null 2>&1 &
SERVER_PID=$!
# Each connection holds a server thread and a few fds on both ends.
ulimit -n "$(ulimit -Hn)"
listening() { $IP netns exec ack2 ss -ltnH 'sport = :5201' | grep -q .; }
for _ in $(seq 50); do listening && break; sleep 0.1; done
listening || { echo "bench-ack-cost: the flow server did not start" >&2; exit 1; }

kernel_ticks() { awk '/^cpu / { print $4 + $7 + $8 }' /proc/stat; }
in_segs() { $IP netns exec ack1 awk '/^Tcp:/ { if (!n) { for (i = 1; i <= NF; i++) if ($i == "InSegs") c = i; n = 1 } else print $c }' /proc/net/snmp; }
no_connections() { [ -z "$($IP netns exec ack2 ss -tnH state established)" ]; }

rounds_file=$(mktemp)
run_flows() {	# CC N: prints the bytes acked
	local prio=()
	[ "$1" = mercury ] && prio=(--prio "$TAG")
	$IP netns exec ack1 mercury-flow client --connect 10.9.0.2:5201 --cc "$1" "${prio[@]}" \
		--connections "$2" --seconds "$SECS" | sed -n 's/^result .*acked=\([0-9]*\).*/\1/p'
	# The next run starts once the server has let go of these.
	for _ in $(seq 100); do no_connections && break; sleep 0.1; done
}
for n in $FLOWS; do
	for cc in $CCS; do run_flows "$cc" "$n" >/dev/null; done
done
sysctl -qw kernel.bpf_stats_enabled=1
for round in $(seq "$ROUNDS"); do
	for n in $FLOWS; do
		for cc in $CCS; do
			t0=$(kernel_ticks) a0=$(in_segs)
			b=$(run_flows "$cc" "$n")
			t1=$(kernel_ticks) a1=$(in_segs)
			[ -n "$b" ] || { echo "bench-ack-cost: $cc with $n flows failed" >&2; exit 1; }
			echo "$round $n $cc $((t1 - t0)) $((a1 - a0)) $b" >>"$rounds_file"
		done
	done
done
hz=$(getconf CLK_TCK)
awk -v hz="$hz" -v flows="$FLOWS" '
	{ key = $2 " " $3; t[key] += $4; a[key] += $5; b[key] += $6
	  per_ack[$1 " " key] = $4 / $5; per_mb[$1 " " key] = $4 / $6; rounds[$1] = 1 }
	function report(what, f, per,    n, s, ss, r, x, m, sd, ci, tq) {
		n = 0; s = 0; ss = 0
		for (r in rounds) {
			x = per[r " " f " mercury"] / per[r " " f " cubic"]
			n++; s += x; ss += x * x
		}
		m = s / n; sd = n > 1 ? sqrt((ss - n * m * m) / (n - 1)) : 0
		# Student t, 95%, two-sided, for n - 1 = 1..9 degrees of freedom.
		split("12.71 4.30 3.18 2.78 2.57 2.45 2.36 2.31 2.26", tq, " ")
		ci = n > 1 ? (n <= 10 ? tq[n - 1] : 1.96) * sd / sqrt(n) : 0
		printf "RATIO flows=%d mercury/cubic kernel CPU per %s=%.3f ci95=%.3f rounds=%d\n", f, what, m, ci, n
	}
	END {
		nf = split(flows, f, " ")
		for (i = 1; i <= nf; i++) for (c = 1; c <= 2; c++) {
			cc = c == 1 ? "cubic" : "mercury"; k = f[i] " " cc
			printf "ACK flows=%d cc=%s acks=%d MB=%.0f kernel_cpu_s=%.2f us_per_ack=%.2f ms_per_MB=%.2f\n",
				f[i], cc, a[k], b[k] / 1e6, t[k] / hz, t[k] / hz * 1e6 / a[k], t[k] / hz * 1e3 / (b[k] / 1e6)
		}
		for (i = 1; i <= nf; i++) {
			report("ACK", f[i], per_ack)
			report("MB", f[i], per_mb)
		}
	}' "$rounds_file"
rm -f "$rounds_file"
# The mercury programs' own time (struct_ops progs are named after the hooks).
bpftool prog show -j 2>/dev/null | /usr/bin/python3 -c '
import json, sys
for p in json.load(sys.stdin):
    name = p.get("name", "")
    if name.startswith("mercury_") and p.get("run_cnt"):
        calls, ns = p["run_cnt"], p["run_time_ns"]
        print(f"BPF prog={name} calls={calls} ns_per_call={ns / calls:.0f}")
'
