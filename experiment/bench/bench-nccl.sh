#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench-nccl`: what one connection of the NCCL plugin moves on an
# unshaped link between two network namespaces, against iperf3 with as
# many streams (the plugin's data sockets; 1 where it has none), both on
# the same congestion control: CC, made each namespace's default and read
# back (a namespace may only pick one of tcp_allowed_congestion_control),
# else the default the namespaces got; iperf3 pins it per socket. REPEATS
# interleaved runs of DURATION seconds each per point; prints each run and, per
# point, the mean ratio plugin / iperf3 with a 95% confidence interval.
# The plugin is driven by mercury-nccl-harness (8 messages of 1 MiB in
# flight, as NCCL keeps its steps), iperf3 with 1 MiB writes and reads
# (its default, 128 KiB, costs it more system calls); a benchmark, not a
# test.
#
# usage: bench-nccl.sh BUILD_DIR
# env: SOCKETS ("0 1x2 2x4": NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD),
#      REPEATS (5), DURATION (5 s), CC (default: the namespaces')
set -uo pipefail
build=$(cd "$1" && pwd)
PLUGIN=$build/lib/libnccl-net-mercury.so
HARNESS=$build/tests/bin/mercury-nccl-harness
IP=${IP:-/usr/sbin/ip}
SOCKETS=${SOCKETS:-"0 1x2 2x4"} REPEATS=${REPEATS:-5} SECONDS_EACH=${DURATION:-5} CC=${CC:-}
command -v iperf3 >/dev/null || { echo "bench-nccl: needs iperf3 (apt-get install iperf3)" >&2; exit 2; }
[ -x "$HARNESS" ] && [ -e "$PLUGIN" ] || { echo "bench-nccl: build first (make user)" >&2; exit 2; }

cleanup() { $IP netns del bn-x 2>/dev/null; $IP netns del bn-y 2>/dev/null; }
trap cleanup EXIT
cleanup
$IP netns add bn-x && $IP netns add bn-y || exit 1
$IP link add eth0 netns bn-x type veth peer name eth0 netns bn-y
$IP -n bn-x addr add 10.9.0.1/24 dev eth0
$IP -n bn-y addr add 10.9.0.2/24 dev eth0
for ns in bn-x bn-y; do
	$IP -n $ns link set lo up
	$IP -n $ns link set eth0 up
	[ -n "$CC" ] && $IP netns exec $ns sh -c "echo $CC >/proc/sys/net/ipv4/tcp_congestion_control" 2>/dev/null
	got=$($IP netns exec $ns cat /proc/sys/net/ipv4/tcp_congestion_control)
	[ -z "$CC" ] || [ "$got" = "$CC" ] || {
		echo "bench-nccl: netns $ns runs $got, not $CC (not in tcp_allowed_congestion_control?)" >&2
		exit 1
	}
done
CC=${CC:-$got}
# The plugin selects mercury where it can: compare like with like.
grep -qw mercury /proc/sys/net/ipv4/tcp_available_congestion_control && CC=mercury

plugin_run() {	# plugin_run THREADS SOCKS: Mbit/s received in the window
	local h=/tmp/bench-nccl.handle
	rm -f $h
	$IP netns exec bn-y env NCCL_SOCKET_IFNAME=eth0 NCCL_SOCKET_NTHREADS=$1 NCCL_NSOCKS_PERTHREAD=$2 \
		"$HARNESS" listen "$PLUGIN" --handle $h --seconds "$SECONDS_EACH" >/tmp/bench-nccl.listen 2>&1 &
	local l=$!
	$IP netns exec bn-x env NCCL_SOCKET_IFNAME=eth0 NCCL_SOCKET_NTHREADS=$1 NCCL_NSOCKS_PERTHREAD=$2 \
		"$HARNESS" send "$PLUGIN" --handle $h --seconds $((SECONDS_EACH + 1)) >/dev/null 2>&1
	wait $l
	sed -n 's/^bytes=[0-9]* in_window=\([0-9]*\) .*/\1/p' /tmp/bench-nccl.listen |
		awk -v s="$SECONDS_EACH" '{ printf "%.1f", $1 * 8 / s / 1e6 }'
}

iperf_run() {	# iperf_run STREAMS: Mbit/s received
	$IP netns exec bn-y iperf3 -s -1 -B 10.9.0.2 >/dev/null 2>&1 &
	local s=$!
	sleep 0.3
	$IP netns exec bn-x iperf3 -c 10.9.0.2 -P "$1" -t "$SECONDS_EACH" -C "$CC" -l 1M -J 2>/dev/null |
		python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e6))'
	wait $s
}

echo "bench-nccl: one plugin connection vs iperf3, $REPEATS x ${SECONDS_EACH} s, interleaved, CC $CC, unshaped veth"
for point in $SOCKETS; do
	case $point in
	0) t=0 k=0 streams=1 ;;
	*x*) t=${point%x*} k=${point#*x} streams=$((t * k)) ;;
	esac
	ratios=""
	for i in $(seq "$REPEATS"); do
		p=$(plugin_run "$t" "$k")
		q=$(iperf_run "$streams")
		r=$(awk -v p="$p" -v q="$q" 'BEGIN { printf "%.3f", (q > 0 ? p / q : 0) }')
		echo "RUN sockets=$point streams=$streams plugin_mbit=$p iperf3_mbit=$q ratio=$r"
		ratios="$ratios $r"
	done
	echo "$ratios" | awk -v point="$point" -v streams="$streams" '{
		for (i = 1; i <= NF; i++) { s += $i; ss += $i * $i } n = NF; m = s / n
		sd = n > 1 ? sqrt((ss - n * m * m) / (n - 1)) : 0
		t = (n == 5 ? 2.776 : 2.0)
		printf "RESULT sockets=%s streams=%d ratio_mean=%.3f ci95=+-%.3f n=%d\n", point, streams, m, t * sd / sqrt(n), n }'
done
