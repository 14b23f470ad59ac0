#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench-gap`: where a mode loses time against the bound. For every
# point (model at an emulated bandwidth) and mode, one training run on the
# cluster of `make bench` (BPF datapath) while every link the bound names
# is sampled: the busiest server's downlink and uplink, and every worker's
# uplink and downlink (tbf byte counters, SAMPLE_S apart). Each worker
# reports how long its forward pass waited for which layer's parameters;
# `mercury-replay sim` reports the same for a schedule a transport could
# carry out on the same links, with priority per layer and (for mercury)
# with mercuryd's ranks. experiment/report/bench-gap-report.py turns it into OUT.md
# (utilisation during the measured iterations, waits by layer, run against
# sim) and OUT.png (busiest link's utilisation over time).
#
# The sampling costs CPU (one tc call per namespace and sample): the
# iteration times here are a diagnosis, the comparison is `make bench`.
#
# usage: bench-gap.sh OUT_PREFIX
# env: POINTS ("vgg16:2.5 resnet50:2.5"), MODES ("mercury fifo"), W, S (4, 4),
#      RATE (Mbit/s per link, 50), ITER (8), SAMPLE_S (0.1), BASELINE_CC (cubic)
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$1
. "$top/experiment/bench/bench-env.sh"
POINTS=${POINTS:-"vgg16:2.5 resnet50:2.5"}
MODES=${MODES:-"mercury fifo"}
ITER=${ITER:-8} SAMPLE_S=${SAMPLE_S:-0.1}
BASELINE_CC=${BASELINE_CC:-cubic}
: >"$out.jsonl"
sampler=""
cleanup() {
	[ -n "$sampler" ] && kill "$sampler" 2>/dev/null
	sh "$top/experiment/cluster.sh" down 2>/dev/null
	bpf_loader_stop
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bpf_loader_start gap "$out.agent.log" || exit 1

tag() { sed "s/^{/{\"point\":\"$1\",\"mode\":\"$2\",/"; }	# tag POINT MODE: label a JSON line

failed=0
for point in $POINTS; do
	model=${point%%:*} gbps=${point#*:}
	common="--profile $profiles/$model.graph.txt --workers $W --servers-count $S --byte-divisor $(divisor_of "$gbps")
		--rate-mbit $RATE --iterations $ITER"
	bound=$(mercury-replay bound $common --mode mercury) || exit 1
	echo "$bound" | tag "$point" bound >>"$out.jsonl"
	busiest=$(echo "$bound" | sed -n 's/.*"busiest_link":"server \([0-9]*\) link".*/\1/p')
	links="mc-sw:p-s${busiest:-0}:down-s${busiest:-0} mc-s${busiest:-0}:eth0:up-s${busiest:-0}"
	for i in $(seq 0 $((W - 1))); do links="$links mc-w$i:eth0:up-w$i mc-sw:p-w$i:down-w$i"; done
	for mode in $MODES; do
		cc=mercury
		[ "$mode" = mercury ] || [ "$mode" = prio-only ] || cc=$BASELINE_CC
		mercury-replay sim $common --mode "$mode" | tag "$point" "$mode" >>"$out.jsonl"
		[ "$cc" = mercury ] && mercury-replay sim $common --mode "$mode" --sim-ranks agent |
			sed 's/"role":"sim"/"role":"sim-ranks"/' | tag "$point" "$mode" >>"$out.jsonl"
		sh "$top/experiment/cluster.sh" up $W $S "$RATE"
		/usr/bin/python3 "$top/experiment/bench/link-sampler.py" "$SAMPLE_S" $links >"$out.$model-$gbps-$mode.samples" &
		sampler=$!
		REPLAY_ARGS="--cc $cc" timeout 600 sh "$top/experiment/train.sh" "$profiles/$model.graph.txt" "$mode" $W $S \
			"$(divisor_of "$gbps")" "$ITER" | grep '"role":"worker"' | tag "$point" "$mode" >>"$out.jsonl" ||
			{ echo "FAIL bench-gap: $model $mode at $gbps Gbit/s did not finish"; failed=1; }
		kill "$sampler"
		wait "$sampler"
		sampler=""
		sh "$top/experiment/cluster.sh" down
		echo "INFO bench-gap: $model at $gbps Gbit/s, $mode done"
	done
done
/usr/bin/python3 "$top/experiment/report/bench-gap-report.py" "$out" "$RATE" || failed=1
exit $failed
