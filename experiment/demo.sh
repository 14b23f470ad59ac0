#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The demo: an emulated parameter-server cluster (4 workers, 4 servers, every
# host link 50 Mbit/s, bytes scaled /200: a 10 Gbit/s cluster) trains
# VGG-16 and ResNet-50 shapes over real TCP, vanilla (fifo) and with Mercury
# (the datapath + mercuryd on every host, immediate aggregation). Prints one
# RESULT line per run and the lower bound (mercury-replay bound). Runs in the VM
# with tcp_mercury.ko (make demo's second half) and natively with the BPF
# datapath a loader mercuryd registered (experiment/demo-native.sh).
. ./lib.sh
SCRIPTS=${SCRIPTS:-/mercury/scripts}
PROFILES=${PROFILES:-/mercury/profiles}
KO=/lib/modules/$(uname -r)/extra/tcp_mercury.ko
[ -e "$KO" ] && [ ! -d /sys/module/tcp_mercury ] && insmod "$KO"
export IP TC
W=${DEMO_WORKERS:-4} S=${DEMO_SERVERS:-4} RATE=${DEMO_RATE:-50} ITER=${DEMO_ITERATIONS:-8}
DIV=$((10000 / RATE))
DATAPATH=$([ -d /sys/module/tcp_mercury ] && echo "tcp_mercury.ko" || echo "BPF struct_ops")
echo "INFO demo: $W workers, $S servers, ${RATE} Mbit/s links, bytes /$DIV (= 10 Gbit/s), $ITER iterations (2 warm-up), datapath $DATAPATH"
# In the VM (qemu TCG, no SHA extensions) HMAC over every byte of every
# frame costs more CPU than the emulated cluster has: it would measure the
# emulation. The servers and workers there tag frame headers only.
if [ "$DATAPATH" = "tcp_mercury.ko" ]; then
	export PS_PAYLOAD_TAGS=${PS_PAYLOAD_TAGS:-off}
fi
[ "${PS_PAYLOAD_TAGS:-on}" = off ] && echo "INFO demo: mercury-ps --payload-tags off (a trusted testbed: frames' tags cover their headers only)"

bound() {	# bound PROFILE: the iteration time no run can beat on this topology (JSON)
	mercury-replay bound --profile "$1" --mode mercury --workers "$W" --servers-count "$S" \
		--byte-divisor "$DIV" --rate-mbit "$RATE" --iterations "$ITER"
}
field() { echo "$1" | sed "s/.*\"$2\":\([0-9.]*\).*/\1/"; }	# field JSON NAME

# headroom MODEL MEAN BOUND_JSON: a compute-bound model (its busiest link
# busy for less than half its compute) that fifo runs above its bound says
# the hosts' CPUs, not the links, set the pace: the comparison then measures
# the emulation.
headroom() {
	local compute link
	compute=$(field "$3" compute_s)
	link=$(field "$3" link_s)
	awk -v c="$compute" -v l="$link" -v m="$2" 'BEGIN { exit !(l < c / 2 && m > 1.05 * c) }' || return 0
	echo "INFO demo: CPU-bound here: fifo ran $1, which is compute-bound (links busy ${link} s of ${compute} s)," \
		"at $(awk -v m="$2" -v c="$compute" 'BEGIN { printf "%.2f", m / c }')x its bound; Mercury's mode runs more" \
		"connections, agents and per-chunk sums on the same cores, so this comparison measures the emulation, not the datapath (doc/experiment.md)"
}

# datapath_counters: what the datapath did on every host of the cluster, summed
# (mercuryctl stats in each netns): which flows were held, yielded to delay,
# lost packets, and whether any window went out of bounds.
DATAPATH_COUNTERS="holds releases starve_grants delay_backoffs yield_grants loss_events recoveries zero_windows"
datapath_counters() {
	local host
	for host in $($IP netns list | awk '{ print $1 }' | grep -E '^mc-(w|s)[0-9]+$'); do
		$IP netns exec "$host" mercuryctl stats 2>/dev/null
	done | awk -v want="$DATAPATH_COUNTERS" 'BEGIN { n = split(want, k, " ") }
		{ sum[$1] += $2 } END { for (i = 1; i <= n; i++) printf "%s%s=%d", (i > 1 ? " " : ""), k[i], sum[k[i]] }'
}

# cpu_ticks: the machine's busy and idle jiffies (/proc/stat), for
# cpu_busy BEFORE AFTER: the busy fraction between two readings.
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat; }
cpu_busy() {
	echo "$1 $2" | awk '{ b = $3 - $1; i = $4 - $2; printf "%.2f", (b + i) ? b / (b + i) : 0 }'
}

run() {	# run MODEL MODE[:CC]
	local profile=$PROFILES/$1.graph.txt out mean mode=${2%%:*} cc= limits before busy
	[ "$mode" = "$2" ] || cc=${2#*:}
	limits=$(bound "$profile")
	sh "$SCRIPTS/cluster.sh" up "$W" "$S" "$RATE"
	before=$(cpu_ticks)
	out=$(REPLAY_ARGS="${cc:+--cc $cc}" sh "$SCRIPTS/train.sh" "$profile" "$mode" "$W" "$S" "$DIV" "$ITER")
	busy=$(cpu_busy "$before" "$(cpu_ticks)")
	# The machine's CPUs, not only the links, set the pace near saturation
	# (in the VM, Mercury's mode then loses what its extra processes cost).
	echo "INFO cpu model=$1 mode=$2: the machine's CPUs were ${busy} busy during the run$(awk -v b="$busy" \
		'BEGIN { if (b >= 0.8) printf " (CPU-bound: the comparison measures the emulation too; doc/experiment.md)" }')"
	[ -d /sys/module/tcp_mercury ] || grep -qw mercury /proc/sys/net/ipv4/tcp_available_congestion_control &&
		echo "INFO datapath model=$1 mode=$2: $(datapath_counters)"
	sh "$SCRIPTS/cluster.sh" down
	mean=$(echo "$out" | awk -F'"mean_s":' '/"role":"worker"/ { split($2, a, ","); s += a[1]; n++ } END { if (n) printf "%.4f", s / n }')
	local bytes_ok
	bytes_ok=$(echo "$out" | awk -F'[:,]' '/"role":"worker"/ {
		for (i = 1; i < NF; i++) { k[$i] = $(i + 1) }
		if (k["\"pushed_bytes\""] != k["\"expected_push_bytes\""] || k["\"pulled_bytes\""] != k["\"expected_pull_bytes\""]) bad++ }
		END { print bad ? "no" : "yes" }')
	echo "RESULT model=$1 mode=$2 cc=$(echo "$out" | grep -o '"cc":"[a-z0-9_]*"' | sort -u | cut -d'"' -f4 | paste -sd+)" \
		"mean_s=${mean:-nan} bound_s=$(field "$limits" bound_s) bytes_accounted=$bytes_ok"
	echo "$out" | grep '"role":"worker"' | head -1 | sed 's/^/INFO /'
	[ "$2" != fifo ] || [ -z "$mean" ] || headroom "$1" "$mean" "$limits"
	# A run without results says why (the replayer's errors are in its output).
	[ -n "$mean" ] || echo "$out" | grep -v '^{' | head -5 | sed 's/^/INFO failed: /'
}

# DEMO_MODES: modes of mercury-replay, MODE:CC to pin another CC (e.g.
# mercury:cubic, Mercury's connections and servers without its datapath).
for model in ${DEMO_MODELS:-vgg16 resnet50}; do
	for mode in ${DEMO_MODES:-fifo mercury}; do run "$model" "$mode"; done
done
# In the VM the log is the guest's own; on the host it is not ours to clear.
if [ -e "$KO" ]; then
	kernel_clean demo && echo "INFO kernel log clean"
fi
exit 0
