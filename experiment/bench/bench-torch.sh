#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench-torch`: real PyTorch data-parallel training over the emulated
# cluster (experiment/cluster.sh: one netns per worker on a bridge, tbf both
# ways on every link), natively with the BPF datapath and one mercuryd per
# worker. Modes side by side, interleaved in every repeat
# (experiment/bench/torch_worker.py): DDP (a grid of bucket sizes),
# ByteScheduler-style priority scheduling in user space (a grid of partition
# sizes and credits), mercury.torch on one lane, on lanes with cubic, and on lanes with kernel
# priorities. Every baseline socket is pinned to $BASELINE_CC per socket,
# never the host's default. The report puts each mode beside its simulated
# schedule (experiment/torchsim.py) and the bound.
#
#   1. emulated compute, 4 workers, at each of $RATES Mbit/s
#   2. real compute, 2 workers, at $REAL_RATE Mbit/s (2 cores: CPU-bound;
#      reported with CPU utilisation, not tuned for)
#
# MODELS: names of profiles in experiment/profiles (PipeDream graphs, or the
# simple format `name forward_ms backward_ms param_bytes`), paths to
# profile files, or torchvision:NAME (worker 0 measures the real model's
# layers at --image 224, batch $CALIBRATE_BATCH). The replayer reads the
# same profiles: `mercury-replay layers` turns each into the simple format.
#
# The emulated runs shrink every parameter tensor by a byte divisor and so
# emulate links that many times faster (2 cores cannot move more than about
# 100 Mbit/s on each of 8 shaped links at once). BYTE_DIVISOR=auto (the
# default) picks, per model, the divisor at which a ring all-reduce of the
# model takes as long as its compute at $BALANCE_MBIT Mbit/s: at the default
# RATES the points are communication = 2x, 1x and 0.5x compute. A ring link
# check at each rate comes first and is reported.
#
# Parameter servers: PS_TOPOLOGY=separate (as many server hosts as workers,
# mc-s*, each link shaped like a worker's) or colocated (a server in every
# worker's namespace) starts mercury-ps on those hosts, three per host (the
# ps modes' aggregation and CC, torch_worker.py's PS_PORTS), each with a
# mercuryd beside it; add ps-vanilla, ps-cubic and ps-full to MODES.
#
# Diagnosis, not measurement: TRACE_DIR=DIR keeps every worker's per-bucket
# timeline (MERCURY_TORCH_TRACE); FLOW_SAMPLES=DIR samples worker 0's
# connections with ss throughout each point (experiment/bench/flow-sampler.py;
# `flow-sampler.py timeline FILE --peer 10.3.0.13` prints what each rank
# sent to its ring neighbour, interval by interval).
#
# Output: OUT/bench-torch.jsonl (every run), OUT/bench-torch.{json,md,png};
# OUT/bench-torch-stats.txt: the datapath's counters as worker 0 sees them
# after each point (`mercuryctl stats`; they accumulate over the points).
# usage: bench-torch.sh OUT_DIR    (as root)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$1
bin=$top/build/user/bin:$top/build/user/tests/bin
export PATH=$bin:$PATH
. "$top/scripts/bpf-loader.sh"

MODELS=${MODELS:-${MODEL:-"vgg16 bert-base resnet50 alexnet resnet18"}}
RATES=${RATES:-"25 50 100"}
BYTE_DIVISOR=${BYTE_DIVISOR:-auto}
BALANCE_MBIT=${BALANCE_MBIT:-50}
CALIBRATE_BATCH=${CALIBRATE_BATCH:-2}
COMPUTE_S=${COMPUTE_S:-1.0}
WORKERS=${WORKERS:-4}
REPEATS=${REPEATS:-5}
WARMUP=${WARMUP:-2}
ITERATIONS=${ITERATIONS:-5}
BASELINE_CC=${BASELINE_CC:-cubic}
REAL_RATE=${REAL_RATE:-800}
# DDP tuned on a grid of bucket_cap_mb (of the real model; see torch_worker.py),
# and the ByteScheduler-style baseline on a grid of partition MB x credit
# (experiment/bench/bytescheduler.py; 1 MB partitions were twice as slow on
# VGG-16 at 50 Mbit/s, 64 MB ones 1.2x): the report pairs every "vs DDP" and
# "vs ByteScheduler" with the best of each grid at each point.
MODES=${MODES:-ddp@5,ddp@25,ddp@100,bytesched@4x2,bytesched@8x2,bytesched@16x2,one-lane,lanes-cubic,full}
LANES=${LANES:-8}
# The datapath's delay threshold for yielding (DELAY_THRESH_US): its
# default, 1000 µs, unscaled. The emulation keeps times and shrinks bytes,
# so a queue that delays a ring step by 1 ms here delays it by 1 ms in the
# cluster it stands for. (Scaled up by the divisor, as it once was, low
# lanes kept 15-20 ms standing queues that every step of the urgent rings
# waited behind: VGG-16 at 50 Mbit/s then ran 1.33 s against 1.22 s for
# lanes on cubic.)
DELAY_THRESH_US=${DELAY_THRESH_US:-1000}
# The window a held flow keeps (CWND_FLOOR, packets): the datapath's default.
CWND_FLOOR=${CWND_FLOOR:-2}
REAL_REPEATS=${REAL_REPEATS:-3}
PS_TOPOLOGY=${PS_TOPOLOGY:-}
case $PS_TOPOLOGY in
"" | separate | colocated) ;;
*) echo "bench-torch: PS_TOPOLOGY is separate or colocated, not '$PS_TOPOLOGY'" >&2; exit 2 ;;
esac

# Every mode opens process groups of its own (closed again after it).
ulimit -n "$(ulimit -Hn)"
mkdir -p "$out" ${TRACE_DIR:+"$TRACE_DIR"}
runs=$out/bench-torch.jsonl
: >"$runs"
log=$out/bench-torch.log
: >"$log"
: >"$out/bench-torch-links.txt"
: >"$out/bench-torch-stats.txt"
agents=() servers=() server_modes=()
ps_secret=$(mktemp)
head -c 32 /dev/urandom | base64 >"$ps_secret"
cleanup() {
	for pid in "${agents[@]}" "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
	rm -f "$ps_secret"
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

# server_cpu: the mercury-ps processes' CPU seconds so far (user + system),
# by the ps mode each serves (servers[] and server_modes[], run_point's).
server_cpu() {
	local hz i mode
	local -A cpu=([ps-vanilla]=0 [ps-cubic]=0 [ps-full]=0)
	hz=$(getconf CLK_TCK)
	for i in "${!servers[@]}"; do
		mode=${server_modes[i]}
		[ -r "/proc/${servers[i]}/stat" ] || continue   # a server that exited early
		cpu[$mode]=$(awk -v hz="$hz" -v sum="${cpu[$mode]}" '{ print sum + ($14 + $15) / hz }' "/proc/${servers[i]}/stat")
	done
	echo "mercury-ps CPU seconds over the point: ps-vanilla ${cpu[ps-vanilla]} ps-cubic ${cpu[ps-cubic]} ps-full ${cpu[ps-full]}"
}

# run_point LABEL WORKERS RATE_MBIT DELAY_THRESH_US ARGS...: one cluster,
# every mode, repeats.
run_point() {
	local label=$1 workers=$2 rate=$3 thresh=$4 i pids=() hosts=() ps_hosts= h port
	shift 4
	"$top/experiment/cluster.sh" up "$workers" "$([ "$PS_TOPOLOGY" = separate ] && echo "$workers" || echo 0)" "$rate"
	linkcheck "$workers" "$rate" | tee -a "$out/bench-torch-links.txt"
	for i in $(seq 0 $((workers - 1))); do hosts+=("w$i"); done
	[ "$PS_TOPOLOGY" != separate ] || for i in $(seq 0 $((workers - 1))); do hosts+=("s$i"); done
	agents=()
	for h in "${hosts[@]}"; do
		ip netns exec "mc-$h" mercuryd --datapath=bpf --socket "/run/mercury-bench-$h.sock" \
			--log-level warn 2>>"$log" &
		agents+=($!)
	done
	for h in "${hosts[@]}"; do
		for _ in $(seq 100); do [ -S "/run/mercury-bench-$h.sock" ] && break; sleep 0.05; done
		ip netns exec "mc-$h" mercuryctl params "delay_thresh_us=$thresh" "cwnd_floor=$CWND_FLOOR" >/dev/null
	done
	# The ps modes' servers: port 7100 ps-vanilla, 7101 ps-cubic, 7102 ps-full.
	servers=() server_modes=()
	if [ -n "$PS_TOPOLOGY" ]; then
		for i in $(seq 0 $((workers - 1))); do
			if [ "$PS_TOPOLOGY" = separate ]; then h=s$i addr=10.3.0.$((100 + i)); else h=w$i addr=10.3.0.$((10 + i)); fi
			ps_hosts=${ps_hosts:+$ps_hosts,}$addr
			for port in 7100 7101 7102; do
				local agg=chunk cc=$BASELINE_CC mode=ps-cubic
				[ $port = 7100 ] && agg=tensor mode=ps-vanilla
				[ $port = 7102 ] && cc=mercury mode=ps-full
				ip netns exec "mc-$h" env MERCURY_SOCKET="/run/mercury-bench-$h.sock" mercury-ps \
					--listen "$addr:$port" --job bench --secret-file "$ps_secret" --cc "$cc" \
					--aggregation $agg --log-level warn 2>>"$log" &
				servers+=($!)
				server_modes+=("$mode")
			done
		done
	fi
	local sampler= name=model prev= a
	for a in "$@"; do [ "$prev" = --model ] && name=$a; prev=$a; done
	if [ -n "${FLOW_SAMPLES:-}" ]; then
		mkdir -p "$FLOW_SAMPLES"
		ip netns exec mc-w0 /usr/bin/python3 "$top/experiment/bench/flow-sampler.py" sample \
			"$FLOW_SAMPLES/flows-$label-$name-$rate.jsonl" \
			--agent /run/mercury-bench-w0.sock &
		sampler=$!
	fi
	echo "bench-torch: $label: $workers workers at $rate Mbit/s"
	for i in $(seq 0 $((workers - 1))); do
		ip netns exec "mc-w$i" env MERCURY_SOCKET="/run/mercury-bench-w$i.sock" MERCURY_JOB=bench \
			MERCURY_PS_SECRET_FILE="$ps_secret" \
			${TRACE_DIR:+MERCURY_TORCH_TRACE=$TRACE_DIR/trace-w$i.jsonl} GLOO_SOCKET_IFNAME=eth0 LIBMERCURY="$top/build/user/agent/libmercury.so" \
			/usr/bin/python3 "$top/experiment/bench/torch_worker.py" --rank "$i" --world "$workers" \
			--master 10.3.0.10:29500 --baseline-cc "$BASELINE_CC" --label "$label" \
			--warmup "$WARMUP" --iterations "$ITERATIONS" --modes "$MODES" --lanes "$LANES" \
			${ps_hosts:+--ps-hosts "$ps_hosts" --ps-topology "$PS_TOPOLOGY"} "$@" \
			> >(if [ "$i" = 0 ]; then sed -u "s/}\$/, \"rate_mbit\": $rate}/" | tee -a "$runs"; else cat >>"$log"; fi) \
			2>>"$log" &
		pids+=($!)
	done
	local rc=0
	for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
	[ -z "$sampler" ] || { kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true; }
	# Worker 0's datapath counters over the point (holds, yields, losses...),
	# and what the servers cost: CPU seconds per ps mode, all hosts' servers.
	{
		echo "== $label $name $rate Mbit/s"
		ip netns exec mc-w0 mercuryctl stats 2>&1
		[ ${#servers[@]} = 0 ] || server_cpu
	} >>"$out/bench-torch-stats.txt"
	for pid in "${agents[@]}" "${servers[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
	agents=() servers=() server_modes=()
	[ $rc = 0 ] || { echo "bench-torch: $label at $rate Mbit/s failed (see $log)" >&2; exit 1; }
}

# model_args NAME: the worker's arguments for a model of MODELS, and its
# parameter bytes on stdout as "bytes N" first.
model_args() {
	local name=$1 file
	case $name in
	torchvision:*)
		local tv=${name#torchvision:}
		bytes=$(/usr/bin/python3 -c "import torchvision; m = getattr(torchvision.models, '$tv')(num_classes=10); print(sum(p.numel() * 4 for p in m.parameters()))")
		args=(--model "$tv" --image 224 --batch "$CALIBRATE_BATCH")
		return ;;
	*/*) file=$name ;;
	*)
		file=
		for f in "$top/experiment/profiles/$name".graph.txt "$top/experiment/profiles/$name".txt; do
			[ -f "$f" ] && { file=$f; break; }
		done ;;
	esac
	[ -n "$file" ] && [ -f "$file" ] || {
		echo "bench-torch: no profile for model '$name' (experiment/profiles/$name.graph.txt or .txt, a path, or torchvision:NAME)" >&2
		exit 1
	}
	local simple=$out/profile-$(basename "${file%%.*}").txt
	mercury-replay layers --profile "$file" >"$simple"
	bytes=$(awk '!/^#/ { b += $4 } END { print b }' "$simple")
	args=(--model "$(basename "${file%%.*}")" --profile "$simple")
}

for model in $MODELS; do
	model_args "$model"
	divisor=$BYTE_DIVISOR
	if [ "$divisor" = auto ]; then
		# comm = 2(N-1)/N x bytes / divisor x 8 / rate = compute
		divisor=$(awk -v b="$bytes" -v n="$WORKERS" -v r="$BALANCE_MBIT" -v c="$COMPUTE_S" \
			'BEGIN { d = int(2 * (n - 1) / n * b * 8 / (r * 1e6 * c) + 0.5); print d < 1 ? 1 : d }')
	fi
	for rate in $RATES; do
		run_point "emulated-${WORKERS}w" "$WORKERS" "$rate" "$DELAY_THRESH_US" "${args[@]}" \
			--compute emulated --compute-s "$COMPUTE_S" --byte-divisor "$divisor" --repeats "$REPEATS"
	done
done
[ "${SKIP_REAL:-0}" = 1 ] || run_point real-2w 2 "$REAL_RATE" "$DELAY_THRESH_US" --model "${REAL_MODEL:-resnet18}" \
	--compute real --repeats "$REAL_REPEATS"

/usr/bin/python3 "$top/experiment/report/bench-torch-report.py" "$runs" "$out/bench-torch"
