#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench-torch`: real PyTorch data-parallel training over the emulated
# cluster (experiment/cluster.sh: one netns per worker on a bridge, tbf both
# ways on every link), natively with the BPF datapath and one mercuryd per
# worker. Modes side by side, interleaved in every repeat
# (experiment/bench/torch_worker.py): DDP, mercury.torch on one lane, on lanes
# with cubic, and on lanes with kernel priorities. Every baseline socket is
# pinned to $BASELINE_CC per socket, never the host's default.
#
#   1. emulated compute, 4 workers, at each of $RATES Mbit/s
#   2. real compute, 2 workers, at $REAL_RATE Mbit/s (2 cores: CPU-bound;
#      reported with CPU utilisation, not tuned for)
#
# The emulated runs shrink every parameter tensor by $BYTE_DIVISOR and so
# emulate links that many times faster (2 cores cannot move more than about
# 100 Mbit/s on each of 8 shaped links at once): at the defaults, 25-100
# Mbit/s with bytes /16 stand for 400-1600 Mbit/s. A ring link check at each
# rate comes first and is reported.
#
# Output: OUT/bench-torch.jsonl (every run), OUT/bench-torch.{json,md,png}.
# usage: bench-torch.sh OUT_DIR    (as root)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$1
bin=$top/build/user/bin:$top/build/user/tests/bin
export PATH=$bin:$PATH
. "$top/scripts/bpf-loader.sh"

MODEL=${MODEL:-resnet18}
RATES=${RATES:-"25 50 100"}
BYTE_DIVISOR=${BYTE_DIVISOR:-16}
COMPUTE_S=${COMPUTE_S:-0.7}
REPEATS=${REPEATS:-5}
WARMUP=${WARMUP:-2}
ITERATIONS=${ITERATIONS:-5}
BASELINE_CC=${BASELINE_CC:-cubic}
REAL_RATE=${REAL_RATE:-800}
MODES=${MODES:-ddp,one-lane,lanes-cubic,full}
LANES=${LANES:-8}
# Queueing delay is not scaled down with the bytes: a packet at 50 Mbit/s
# queues 16 times longer than at 800. Delay thresholds scale up to match.
DELAY_THRESH_US=${DELAY_THRESH_US:-$((1000 * BYTE_DIVISOR))}
REAL_REPEATS=${REAL_REPEATS:-3}

# Every mode opens process groups of its own (closed again after it).
ulimit -n "$(ulimit -Hn)"
mkdir -p "$out"
runs=$out/bench-torch.jsonl
: >"$runs"
log=$out/bench-torch.log
: >"$log"
: >"$out/bench-torch-links.txt"
agents=()
cleanup() {
	for pid in "${agents[@]}"; do kill "$pid" 2>/dev/null || true; done
	"$top/experiment/cluster.sh" down
	bpf_loader_stop
}
trap cleanup EXIT

bpf_loader_start bench-torch "$log"
grep -qw "$BASELINE_CC" /proc/sys/net/ipv4/tcp_available_congestion_control || {
	echo "bench-torch: baseline CC $BASELINE_CC is not available on this host" >&2
	exit 1
}

# linkcheck WORKERS RATE: every worker sends to the next, as a ring all-reduce
# does; prints each uplink's utilisation over 3 s. The minimum must be >= 0.9.
linkcheck() {
	local workers=$1 rate=$2 i flows=() a b
	for i in $(seq 0 $((workers - 1))); do
		ip netns exec "mc-w$i" mercury-flow server --port 5201 >/dev/null 2>&1 &
		flows+=($!)
	done
	sleep 0.3
	for i in $(seq 0 $((workers - 1))); do
		ip netns exec "mc-w$i" mercury-flow client --connect "10.3.0.$((10 + (i + 1) % workers)):5201" \
			--seconds 5 --cc "$BASELINE_CC" >/dev/null 2>&1 &
		flows+=($!)
	done
	sleep 1
	# Bytes each uplink's tbf sent, with the time each was read.
	sent() { for i in $(seq 0 $((workers - 1))); do
		tc -n "mc-w$i" -s qdisc show dev eth0 | awk -v t="$(date +%s.%N)" '/Sent/ { print t, $2; exit }'; done; }
	a=$(sent)
	sleep 3
	b=$(sent)
	for pid in "${flows[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
	paste -d' ' <(echo "$a") <(echo "$b") | awk -v r="$rate" '{ u = ($4 - $2) * 8 / (($3 - $1) * r * 1e6); if (NR == 1 || u < m) m = u }
		END { printf "link check: min uplink utilisation %.3f at %d Mbit/s (%s)\n", m, r, (m >= 0.9) ? "ok" : "LOW: CPU-bound, results suspect" }'
}

# run_point LABEL WORKERS RATE_MBIT DELAY_THRESH_US ARGS...: one cluster,
# every mode, repeats.
run_point() {
	local label=$1 workers=$2 rate=$3 i pids=()
	shift 3
	"$top/experiment/cluster.sh" up "$workers" 0 "$rate"
	linkcheck "$workers" "$rate" | tee -a "$out/bench-torch-links.txt"
	agents=()
	for i in $(seq 0 $((workers - 1))); do
		ip netns exec "mc-w$i" mercuryd --datapath=bpf --socket "/run/mercury-bench-w$i.sock" \
			--log-level warn 2>>"$log" &
		agents+=($!)
	done
	for i in $(seq 0 $((workers - 1))); do
		for _ in $(seq 100); do [ -S "/run/mercury-bench-w$i.sock" ] && break; sleep 0.05; done
		ip netns exec "mc-w$i" mercuryctl params "delay_thresh_us=$1" >/dev/null
	done
	echo "bench-torch: $label: $workers workers at $rate Mbit/s"
	for i in $(seq 0 $((workers - 1))); do
		ip netns exec "mc-w$i" env MERCURY_SOCKET="/run/mercury-bench-w$i.sock" MERCURY_JOB=bench \
			${TRACE_DIR:+MERCURY_TORCH_TRACE=$TRACE_DIR/trace-w$i.jsonl} GLOO_SOCKET_IFNAME=eth0 LIBMERCURY="$top/build/user/agent/libmercury.so" \
			/usr/bin/python3 "$top/experiment/bench/torch_worker.py" --rank "$i" --world "$workers" \
			--master 10.3.0.10:29500 --model "$MODEL" --baseline-cc "$BASELINE_CC" --label "$label" \
			--warmup "$WARMUP" --iterations "$ITERATIONS" --modes "$MODES" --lanes "$LANES" "${@:2}" \
			> >(if [ "$i" = 0 ]; then sed -u "s/}\$/, \"rate_mbit\": $rate}/" | tee -a "$runs"; else cat >>"$log"; fi) \
			2>>"$log" &
		pids+=($!)
	done
	local rc=0
	for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
	for pid in "${agents[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
	agents=()
	[ $rc = 0 ] || { echo "bench-torch: $label at $rate Mbit/s failed (see $log)" >&2; exit 1; }
}

for rate in $RATES; do
	run_point emulated-4w 4 "$rate" "$DELAY_THRESH_US" --compute emulated --compute-s "$COMPUTE_S" --byte-divisor "$BYTE_DIVISOR" \
		--repeats "$REPEATS"
done
[ "${SKIP_REAL:-0}" = 1 ] || run_point real-2w 2 "$REAL_RATE" 1000 --compute real --repeats "$REAL_REPEATS"

/usr/bin/python3 "$top/experiment/report/bench-torch-report.py" "$runs" "$out/bench-torch"
