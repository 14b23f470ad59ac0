# SPDX-License-Identifier: GPL-2.0
# NCCL's network plugin (libnccl-net-mercury.so) on the datapath, driven by
# mercury-nccl-harness as NCCL's proxy threads drive it: h1 sends, h2
# receives, over the 50 Mbit/s link; the agent runs in h1. Every socket of a
# connection runs mercury and is in the agent's table on its communicator's
# class's lane; of two connections sending at once, the more urgent class
# takes the link, and equal classes share it. Sourced with lib.sh and
# agent.sh; NCCL_PLUGIN is the library's path.

# Three sockets per connection: the control socket and two data sockets.
NCCL_ENV="NCCL_SOCKET_NTHREADS=1 NCCL_NSOCKS_PERTHREAD=2"

# nccl_pair LABEL CLASS_A CLASS_B: two connections (harness pairs), 1 MiB
# messages 8 in flight, sending for 7 s at once with those traffic classes.
# What a's and b's receivers got in their first 6 s, while both sent, in
# /tmp/nccl-LABEL-{a,b}.listen (in_window; what a sender hands the kernel
# is not sent yet); the agent's table 3 s in, in /tmp/nccl-LABEL.dump.
nccl_pair() {
	local side pids=""
	rm -f /tmp/nccl-"$1"-*
	for side in a b; do
		$IP netns exec h2 env $NCCL_ENV NCCL_SOCKET_IFNAME=v2 \
			mercury-nccl-harness listen "$NCCL_PLUGIN" --handle "/tmp/nccl-$1-$side.handle" --seconds 6 \
			>"/tmp/nccl-$1-$side.listen" 2>&1 &
		pids="$pids $!"
	done
	$IP netns exec h1 env $NCCL_ENV NCCL_SOCKET_IFNAME=v1 MERCURY_SOCKET=$AGENT_SOCK MERCURY_JOB=nccl \
		mercury-nccl-harness send "$NCCL_PLUGIN" --handle "/tmp/nccl-$1-a.handle" --class "$2" --seconds 7 \
		>"/tmp/nccl-$1-a.send" 2>&1 &
	pids="$pids $!"
	$IP netns exec h1 env $NCCL_ENV NCCL_SOCKET_IFNAME=v1 MERCURY_SOCKET=$AGENT_SOCK MERCURY_JOB=nccl \
		mercury-nccl-harness send "$NCCL_PLUGIN" --handle "/tmp/nccl-$1-b.handle" --class "$3" --seconds 7 \
		>"/tmp/nccl-$1-b.send" 2>&1 &
	pids="$pids $!"
	sleep 3
	ctl h1 dump >"/tmp/nccl-$1.dump"
	$SS -N h1 -tin state established >"/tmp/nccl-$1.ss" 2>&1
	for side in $pids; do wait "$side"; done
}

nccl_bytes() { sed -n 's/^bytes=[0-9]* in_window=\([0-9]*\) .*/\1/p' "$1"; }
lane_entries() { awk -v r="$2" '$1 == "flow" && $4 == r' "$1" | wc -l; }

test_nccl_lanes() {
	local r e0 e7 socks on_mercury a b
	topo_same_host
	agent_start
	nccl_pair prio 0 7
	e0=$(lane_entries /tmp/nccl-prio.dump 0)
	e7=$(lane_entries /tmp/nccl-prio.dump 7)
	expect nccl/lanes-registered "agent's table: $e0 sockets on lane 0 (class 0), $e7 on lane 7 (class 7), 3 each expected" \
		[ "$e0" = 3 -a "$e7" = 3 ]
	socks=$(grep -c 'cwnd:' /tmp/nccl-prio.ss)
	on_mercury=$(grep -c ' mercury ' /tmp/nccl-prio.ss)
	expect nccl/sockets-on-mercury "h1's established sockets on mercury: $on_mercury of $socks (6 of the plugin's)" \
		[ "$on_mercury" -ge 6 ]
	a=$(nccl_bytes /tmp/nccl-prio-a.listen)
	b=$(nccl_bytes /tmp/nccl-prio-b.listen)
	r=$(ratio "$a" "$b")
	expect nccl/urgent-class-first "class 0 : class 7, received over 6 s while both sent: ${r}:1 ($a vs $b bytes)" ge "$r" 4
	nccl_pair equal 3 3
	a=$(nccl_bytes /tmp/nccl-equal-a.listen)
	b=$(nccl_bytes /tmp/nccl-equal-b.listen)
	r=$(ratio "$a" "$b")
	expect nccl/equal-classes-share "class 3 : class 3: ${r}:1 ($a vs $b bytes)" \
		awk -v r="$r" 'BEGIN { exit !(r >= 0.5 && r <= 2) }'
	agent_stop
}

NCCL_TESTS="nccl_lanes"
