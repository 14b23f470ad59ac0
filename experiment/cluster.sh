#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Emulated training cluster: W workers and S parameter-server shards, each a
# network namespace (mc-w0.., mc-s0..) on one bridge (in mc-sw); every host
# link is rate limited in both directions with tbf (host egress = uplink,
# bridge port egress = downlink), so each host's NIC is a real bottleneck
# and incast at a server queues at its downlink.
#
#   cluster.sh up W S RATE_MBIT     addresses: worker i 10.3.0.(10+i), server j 10.3.0.(100+j)
#   cluster.sh down                 removes every mc-* namespace (safe to repeat)
#
# POSIX sh: runs in the test VM's busybox and natively. iproute2 by full path.
set -eu
IP=${IP:-/usr/sbin/ip}
TC=${TC:-/usr/sbin/tc}

down() {
	for ns in $($IP netns list 2>/dev/null | awk '{ print $1 }' | grep '^mc-' || true); do
		for pid in $($IP netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
		$IP netns del "$ns" 2>/dev/null || true
	done
}

# add_host NAME ADDR RATE: a namespace plugged into the bridge.
add_host() {
	$IP netns add "mc-$1"
	$IP -n "mc-$1" link set lo up
	$IP link add eth0 netns "mc-$1" type veth peer name "p-$1" netns mc-sw
	$IP -n "mc-$1" addr add "$2/24" dev eth0
	$IP -n "mc-$1" link set eth0 up
	$IP -n mc-sw link set "p-$1" master br0 up
	# Queue 5 ms of data at the rate, but at least 128 KB (about 90 packets):
	# at the low rates of a scaled-down cluster 5 ms is a handful of packets,
	# and TCP then times out where a real switch port would not.
	local limit=$(($3 * 625))
	[ "$limit" -ge 131072 ] || limit=131072
	$TC -n "mc-$1" qdisc add dev eth0 root tbf rate "${3}mbit" burst 16kb limit "$limit"
	$TC -n mc-sw qdisc add dev "p-$1" root tbf rate "${3}mbit" burst 16kb limit "$limit"
	# The host's default congestion control is copied into every new netns,
	# and every socket starts with it before the experiment sets its own. A
	# bbr default leaves each socket's internal pacing switched on after the
	# switch (bbr asks for it in init(), nothing takes it back), paced at
	# 1.2 x cwnd / srtt: a flow back from a hold, with a small window and an
	# RTT inflated by the queue it waited behind, then crawls for tens of
	# milliseconds. reno is always allowed in a netns: set it, read it back.
	$IP netns exec "mc-$1" sh -c 'echo reno > /proc/sys/net/ipv4/tcp_congestion_control'
	[ "$($IP netns exec "mc-$1" cat /proc/sys/net/ipv4/tcp_congestion_control)" = reno ] || {
		echo "cluster.sh: mc-$1: cannot make reno the default congestion control" >&2
		exit 1
	}
}

up() {
	workers=$1 servers=$2 rate=$3
	down
	$IP netns add mc-sw
	$IP -n mc-sw link set lo up
	$IP -n mc-sw link add br0 type bridge
	$IP -n mc-sw link set br0 up
	i=0
	while [ $i -lt "$workers" ]; do add_host "w$i" "10.3.0.$((10 + i))" "$rate"; i=$((i + 1)); done
	j=0
	while [ $j -lt "$servers" ]; do add_host "s$j" "10.3.0.$((100 + j))" "$rate"; j=$((j + 1)); done
}

case "${1:-}" in
up) shift; up "$@" ;;
down) down ;;
*) echo "usage: cluster.sh up WORKERS SERVERS RATE_MBIT | down" >&2; exit 2 ;;
esac
