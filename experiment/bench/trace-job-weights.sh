#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Traces the weighted split between two jobs that the jobs/weights check
# measures (tests/cc/jobs.sh, test_jobs_weights), run after run, natively
# with the BPF datapath: host a sends one flow of job 1 (rank 2, weight 48)
# and one of job 2 (rank 0, weight 16) through router r's 30 ms queue for
# 8 s. Keeps each run's 100 ms samples of both flows (cwnd, ssthresh,
# congestion state) and netns a's datapath counters, and prints per run the
# split over the last 4 s with what each flow went through there: losses
# (entries into Recovery), RTOs (Loss), the windows it ran at, and the
# datapath's delay yields, yield grants and job cuts in a.
#
# usage: trace-job-weights.sh BUILD_DIR OUT_DIR [RUNS]   (as root; default 20)
# env:   LOAD=N  busy loops beside the runs, niced (default 0)
#
# OUT_DIR/run-N.{1,2}: the two flows' mercury-flow output; OUT_DIR/runs.txt:
# the lines printed.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: trace-job-weights.sh BUILD_DIR OUT_DIR [RUNS]}" && pwd)
out=${2:?usage: trace-job-weights.sh BUILD_DIR OUT_DIR [RUNS]}
runs=${3:-20}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH=$build/bin:$build/tests/bin:$PATH
cd "$top/tests/cc"
. ./lib.sh
. "$top/scripts/bpf-loader.sh"
busy=()
cleanup() {
	topo_clear
	[ "${#busy[@]}" -eq 0 ] || kill "${busy[@]}" 2>/dev/null
	bpf_loader_stop
}
trap cleanup EXIT
bpf_loader_start trace "$out/loader.log" || exit 1
for _ in $(seq "${LOAD:-0}"); do
	nice -n "${LOAD_NICE:-19}" sh -c 'while :; do :; done' &
	busy+=($!)
done

# flow_summary FILE T0 T1: what one flow went through between T0 and T1 (ms).
flow_summary() {
	samples "$1" acked cwnd ssthresh ca_state | awk -v t0="$2" -v t1="$3" '
	$1 < t0 || $1 > t1 { next }
	{ n++; cw += $3; if (!min || $3 < min) min = $3; if ($3 > max) max = $3
	  if ($5 == 3 && prev != 3) rec++; if ($5 == 4 && prev != 4) rto++; prev = $5 }
	END { printf "cwnd mean %.0f [%d..%d] recoveries %d rtos %d", n ? cw / n : 0, min, max, rec, rto }'
}
counter() { stat_of a "$1"; }

echo "trace: $runs runs, ${LOAD:-0} busy loops; samples in $out" | tee "$out/runs.txt"
for i in $(seq "$runs"); do
	topo_incast
	c0=""
	for k in delay_backoffs yield_grants job_cuts loss_events; do c0="$c0 $(counter $k)"; done
	ctl a tag set 14 2 --job 1 --weight 48
	ctl a tag set 15 0 --job 2 --weight 16
	flow a weights-1 --cc mercury --prio 14 --seconds 8 --interval-ms 100
	flow a weights-2 --cc mercury --prio 15 --seconds 8 --interval-ms 100
	wait_flows
	set -- $c0
	d=""
	for k in delay_backoffs yield_grants job_cuts loss_events; do d="$d $k=$(($(counter $k) - $1))"; shift; done
	cp /tmp/flow-weights-1 "$out/run-$i.1"
	cp /tmp/flow-weights-2 "$out/run-$i.2"
	t1=$(last_t "$out/run-$i.1")
	t0=$((t1 - 4000))
	h=$(rate "$out/run-$i.1" "$t0" "$t1")
	l=$(rate "$out/run-$i.2" "$t0" "$t1")
	echo "run $i split $(ratio "$h" "$l"):1 ($h vs $l B/ms) | job 1: $(flow_summary "$out/run-$i.1" "$t0" "$t1") | job 2: $(flow_summary "$out/run-$i.2" "$t0" "$t1") | a:$d" |
		tee -a "$out/runs.txt"
	topo_clear
done
