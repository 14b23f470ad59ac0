#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench-jobs` (also the last part of `make bench`): two training jobs
# at once on the same emulated hosts, natively with the BPF datapath. Worker
# i of both jobs runs on host mc-wi, shard j of both on mc-sj (ports 7000 and
# 7001), and one mercuryd per host serves both jobs.
#
# For every pair in PAIRS ("A+B:GBPS"), REPEATS rounds, interleaved, of:
#   alone:    each job by itself: fifo (BASELINE_CC), mercury with
#             isolate_jobs = false, and mercury with isolate_jobs = auto
#             (the default: a job alone on its hosts gets no job id);
#   together: both jobs at once, fifo; mercury as before jobs existed
#             (isolate_jobs = false: one precedence for every flow on a
#             host, "mercury-shared"); mercury with isolate_jobs = auto
#             (two jobs on every host: each its own id, "mercury-isolated").
# Job B runs more iterations than A when its iterations are shorter (by the
# ratio of their bounds), so that it covers A's whole run; a job's time
# together counts only iterations inside the span both jobs were measuring.
# Every run's worker lines go to OUT.runs.jsonl; experiment/report/bench-jobs-report.py
# writes OUT.md and OUT.json: each job's time against running alone (its
# slowdown), Jain's fairness index of the two slowdowns, and the targets.
#
# usage: bench-jobs.sh OUT_PREFIX
# env: W, S (4, 4), RATE (50 Mbit/s per link), PAIRS, ITER (job A's
#      iterations, 6), REPEATS (3), BASELINE_CC (cubic)
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$1
. "$top/experiment/bench/bench-env.sh"
PAIRS=${PAIRS-"vgg16+resnet50:2.5 vgg16+vgg16:2.5"}
ITER=${ITER:-6}
REPEATS=${REPEATS:-3}
BASELINE_CC=${BASELINE_CC:-cubic}
bench_log_start

AGENT_PIDS=""
agents_stop() {
	local p
	for p in $AGENT_PIDS; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	AGENT_PIDS=""
}
cleanup() {
	agents_stop
	sh "$top/experiment/cluster.sh" down 2>/dev/null
	bpf_loader_stop
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bpf_loader_start bench-jobs "$out.agent.log" || exit 1

# agents_start ISOLATE: one mercuryd per host, isolate_jobs = ISOLATE.
agents_start() {
	local host
	for host in $($IP netns list | awk '{ print $1 }' | grep -E '^mc-(w|s)[0-9]+$'); do
		$IP netns exec "$host" mercuryd --socket "/run/$host.sock" --log-level warn --isolate-jobs "$1" \
			2>>"$out.agent.log" &
		AGENT_PIDS="$AGENT_PIDS $!"
	done
	for host in $($IP netns list | awk '{ print $1 }' | grep -E '^mc-(w|s)[0-9]+$'); do
		for _ in $(seq 50); do [ -S "/run/$host.sock" ] && break; sleep 0.1; done
	done
}

# bound_of MODEL GBPS JOB: the job's bound (s); its whole bound line (with
# its busiest link, for the report's link load) goes to OUT.runs.jsonl.
bound_of() {
	local line
	line=$(mercury-replay bound --profile "$profiles/$1.graph.txt" --mode mercury --workers $W --servers-count $S \
		--byte-divisor "$(divisor_of "$2")" --rate-mbit "$RATE") || return 1
	echo "$line" | sed "s/^{/{\"pair\":\"$PAIR\",\"job\":\"$3\",/" >>"$out.runs.jsonl"
	echo "$line" | sed -n 's/.*"bound_s":\([0-9.]*\).*/\1/p'
}

# job ROLE_TAG MODEL ITERS MODE PORT JOBNAME CC: one job's training in the
# background (agents already up for priority modes), lines tagged.
job() {
	local tag=$1 model=$2 iters=$3 mode=$4 port=$5 name=$6 cc=$7
	(
		AGENTS=external PORT=$port REPLAY_ARGS="--job $name --cc $cc" timeout 900 \
			sh "$top/experiment/train.sh" "$profiles/$model.graph.txt" "$mode" $W $S "$DIVISOR" "$iters" |
			sed "s/^{/{$tag,\"job\":\"$name\",/" >>"$out.runs.jsonl"
	) &
	JOB_PIDS="$JOB_PIDS $!"
}

# run SETTING LABEL REPEAT ISOLATE JOBS...: cluster up, agents for mercury
# modes, the given jobs (each "MODEL:ITERS:MODE:PORT:NAME:CC") at once.
run() {
	local setting=$1 label=$2 repeat=$3 isolate=$4 spec
	shift 4
	sh "$top/experiment/cluster.sh" up $W $S "$RATE"
	[ "$isolate" = none ] || agents_start "$isolate"
	JOB_PIDS=""
	for spec in "$@"; do
		IFS=: read -r model iters mode port name cc <<<"$spec"
		job "\"pair\":\"$PAIR\",\"setting\":\"$setting\",\"label\":\"$label\",\"repeat\":$repeat" \
			"$model" "$iters" "$mode" "$port" "$name" "$cc"
	done
	local p rc=0
	for p in $JOB_PIDS; do wait "$p" || rc=1; done
	agents_stop
	sh "$top/experiment/cluster.sh" down
	say "RUN pair=$PAIR setting=$setting mode=$label repeat=$repeat jobs=$# ok=$([ $rc = 0 ] && echo yes || echo no)"
	[ $rc = 0 ] || failed=1
}

say "INFO bench-jobs: $W workers + $S servers, ${RATE} Mbit/s per link, two jobs per host, $REPEATS repeats," \
	"fifo on $BASELINE_CC, mercury on mercury (BPF datapath)"
for pair in $PAIRS; do
	PAIR=$pair
	models=${pair%%:*} gbps=${pair#*:}
	a=${models%%+*} b=${models#*+}
	DIVISOR=$(divisor_of "$gbps")
	ja="job-a-$a" jb="job-b-$b"
	ba=$(bound_of "$a" "$gbps" "$ja") bb=$(bound_of "$b" "$gbps" "$jb")
	# B covers A's run: as many iterations as fit in A's, and a quarter more.
	iters_b=$(awk -v i="$ITER" -v a="$ba" -v b="$bb" 'BEGIN { n = int(i * a / b * 1.25 + 0.999); print (n < i ? i : n) }')
	say "INFO pair $pair: job A $a ($ITER iterations, bound $ba s), job B $b ($iters_b iterations, bound $bb s)"
	for r in $(seq 1 "$REPEATS"); do
		run alone fifo "$r" none "$a:$ITER:fifo:7000:$ja:$BASELINE_CC"
		run alone fifo "$r" none "$b:$iters_b:fifo:7001:$jb:$BASELINE_CC"
		run alone mercury "$r" false "$a:$ITER:mercury:7000:$ja:mercury"
		run alone mercury "$r" false "$b:$iters_b:mercury:7001:$jb:mercury"
		run alone mercury-isolated "$r" auto "$a:$ITER:mercury:7000:$ja:mercury"
		run alone mercury-isolated "$r" auto "$b:$iters_b:mercury:7001:$jb:mercury"
		run together fifo "$r" none "$a:$ITER:fifo:7000:$ja:$BASELINE_CC" "$b:$iters_b:fifo:7001:$jb:$BASELINE_CC"
		run together mercury-shared "$r" false "$a:$ITER:mercury:7000:$ja:mercury" "$b:$iters_b:mercury:7001:$jb:mercury"
		run together mercury-isolated "$r" auto "$a:$ITER:mercury:7000:$ja:mercury" "$b:$iters_b:mercury:7001:$jb:mercury"
	done
done
python3 "$top/experiment/report/bench-jobs-report.py" "$out" || failed=1
[ "$failed" = 0 ] || say "FAIL bench-jobs: see the lines above"
exit $failed
