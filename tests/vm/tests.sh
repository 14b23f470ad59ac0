#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# tcp_mercury on a real kernel: selection, priority behaviour on real TCP
# flows across rate-limited veth links, netlink control and bad input,
# namespaces, unload. Every check compares flows measured side by side in
# the same run; none asserts an absolute speed.
. ./lib.sh
. ./agent_tests.sh

KO=/lib/modules/$(uname -r)/extra/tcp_mercury.ko
SYS=/sys/module/tcp_mercury/parameters

test_module_params() {
	insmod $KO cwnd_floor=0 2>/dev/null
	expect params/range-rejected "insmod cwnd_floor=0 refused" [ ! -d /sys/module/tcp_mercury ]
	insmod $KO max_hold_ms=70000 2>/dev/null
	expect params/range-rejected-hold "insmod max_hold_ms=70000 refused" [ ! -d /sys/module/tcp_mercury ]

	insmod $KO cwnd_floor=4 max_hold_ms=500
	expect params/loaded "cwnd_floor=$(cat $SYS/cwnd_floor)" [ "$(cat $SYS/cwnd_floor)" = 4 ]
	local floor
	floor=$(mercuryctl params | awk '$1 == "cwnd_floor" { print $2 }')
	expect params/netns-default "init_net cwnd_floor=$floor" [ "$floor" = 4 ]
	expect params/read-only "sysfs parameter not writable" sh -c "! echo 9 2>/dev/null >$SYS/cwnd_floor"
	rmmod tcp_mercury
	expect params/unloaded "rmmod with no users" [ ! -d /sys/module/tcp_mercury ]
}

test_autoload() {
	echo /bin/modprobe >/proc/sys/kernel/modprobe
	echo mercury >/proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null
	expect select/autoload "sysctl=mercury loads tcp_mercury.ko" [ -d /sys/module/tcp_mercury ]
	expect select/available "listed in tcp_available_congestion_control" \
		grep -qw mercury /proc/sys/net/ipv4/tcp_available_congestion_control
	echo cubic >/proc/sys/net/ipv4/tcp_congestion_control
	# Everything after this needs the module; load it if autoload did not.
	[ -d /sys/module/tcp_mercury ] || insmod $KO
}

test_select_sysctl() {
	topo_same_host
	set_default_cc h1 mercury
	flow h1 dflt --seconds 1
	wait_flows
	local cc
	cc=$(result_field /tmp/flow-dflt cc)
	expect select/sysctl-netns "default cc of h1 gives cc=$cc" [ "$cc" = mercury ]
	expect select/sysctl-per-netns "h2 keeps its own default" \
		[ "$(in_ns h2 cat /proc/sys/net/ipv4/tcp_congestion_control)" != mercury ]
}

test_select_socket() {
	topo_same_host
	set_default_cc h1 cubic
	flow h1 mine --seconds 1 --cc mercury
	flow h1 plain --seconds 1
	wait_flows
	local a b
	a=$(result_field /tmp/flow-mine cc)
	b=$(result_field /tmp/flow-plain cc)
	expect select/per-socket "TCP_CONGESTION gives $a, neighbour keeps $b" [ "$a" = mercury -a "$b" = cubic ]
}

# fair_pair CC LABEL: two flows of CC from host a through the router queue.
fair_pair() {
	# 8 s: long enough for AIMD to converge through TCG's noise.
	flow a "$2-1" --cc "$1" --seconds 8
	flow a "$2-2" --cc "$1" --seconds 8
	wait_flows
	local x y t
	x=$(result_field "/tmp/flow-$2-1" acked)
	y=$(result_field "/tmp/flow-$2-2" acked)
	[ "$x" -lt "$y" ] && { t=$x; x=$y; y=$t; }
	ratio "$x" "$y"
}

# Untagged mercury flows share a router bottleneck about equally. (With the
# limit on the sender's own egress no flow ever loses a packet and even cubic
# splits 8:1 there; bench-cc reports that case side by side.)
test_fair_untagged() {
	topo_incast
	# Receiver on mercury too: passive opens run hooks before init().
	set_default_cc s mercury
	local r c
	r=$(fair_pair mercury m)
	c=$(fair_pair cubic c)
	# About equal, and no less fair than cubic measured on the same link.
	expect fair/untagged "mercury split ${r}:1 (cubic ${c}:1 on the same link)" \
		awk -v r="$r" -v c="$c" 'BEGIN { exit !(r <= 2.0 || r <= 1.3 * c) }'
	expect fair/unranked "no holds for untagged flows" [ "$(stat_of a holds)" = 0 ]
	expect fair/passive-open "receiver-side mercury sockets counted: $(stat_of s flows_init)" \
		[ "$(stat_of s flows_init)" -ge 2 ]
}

test_precedence_same_host() {
	run_handover same_host mercury 100
	local u0 u1 b1 urgent during after before r1 r2 r3
	u0=$(first_t /tmp/flow-urgent)
	u1=$(last_t /tmp/flow-urgent)
	b1=$(last_t /tmp/flow-bulk)
	urgent=$(rate /tmp/flow-urgent $((u0 + 300)) "$u1")
	during=$(rate /tmp/flow-bulk $((u0 + 300)) "$u1")
	after=$(rate /tmp/flow-bulk $((u1 + 500)) "$b1")
	before=$(rate /tmp/flow-bulk $((u0 - 1000)) "$u0")
	r1=$(ratio "$urgent" "$during")
	r2=$(ratio "$after" "$during")
	r3=$(ratio "$after" "$urgent")
	expect precedence/urgent-wins "urgent:bulk ${r1}:1 (B/ms $urgent vs $during)" ge "$r1" 4
	expect precedence/bulk-recovers "bulk after/during ${r2}, after/urgent ${r3}" \
		sh -c "awk 'BEGIN { exit !($r2 >= 4 && $r3 >= 0.6) }'"
	expect precedence/counters "holds=$(stat_of h1 holds) releases=$(stat_of h1 releases)" \
		[ "$(stat_of h1 holds)" -ge 1 -a "$(stat_of h1 releases)" -ge 1 ]
	echo "INFO precedence bulk before=$before during=$during after=$after urgent=$urgent B/ms"
}

test_weights() {
	run_weights 6
	local h l r rec loss
	h=$(result_field /tmp/flow-heavy acked)
	l=$(result_field /tmp/flow-light acked)
	r=$(ratio "$h" "$l")
	expect weights/direction "weight 64 vs 4 across a router bottleneck: ${r}:1" ge "$r" 1.3
	# The CC saw every recovery the kernel entered (ssthresh() ran each time).
	rec=$(in_ns a awk '/^TcpExt:/ { if (!n) { for (i = 1; i <= NF; i++) k[i] = $i; n = 1 } else for (i = 1; i <= NF; i++) if (k[i] ~ /^TCP(Sack|Reno)Recovery$/) s += $i } END { print s + 0 }' /proc/net/netstat)
	loss=$(stat_of a loss_events)
	expect cc/recoveries-seen "loss_events=$loss kernel recoveries=$rec" [ "$loss" -ge "$rec" ]
	expect cc/no-fixups "cwnd_fixups=$(stat_of a cwnd_fixups)" [ "$(stat_of a cwnd_fixups)" = 0 ]
}

test_cross_host() {
	run_handover incast mercury 100
	local u0 u1 urgent during r
	u0=$(first_t /tmp/flow-urgent)
	u1=$(last_t /tmp/flow-urgent)
	urgent=$(rate /tmp/flow-urgent $((u0 + 500)) "$u1")
	during=$(rate /tmp/flow-bulk $((u0 + 500)) "$u1")
	r=$(ratio "$urgent" "$during")
	expect cross-host/urgent-wins "urgent (host a) : bulk (host b) ${r}:1" ge "$r" 2
	expect cross-host/yielded "delay_backoffs on b: $(stat_of b delay_backoffs)" [ "$(stat_of b delay_backoffs)" -ge 1 ]
}

test_retag_midflight() {
	topo_same_host
	ctl h1 tag set 5 3
	ctl h1 tag set 6 0
	flow h1 A --cc mercury --prio 5 --seconds 6 --interval-ms 100
	flow h1 B --cc mercury --prio 6 --seconds 6 --interval-ms 100
	sleep 3
	ctl h1 tag set 5 0
	ctl h1 tag set 6 3
	local swap
	swap=$(awk '/^sample/ { t = $3 } END { sub("t_ms=", "", t); print t }' /tmp/flow-A)
	wait_flows
	local t0 t1 a1 b1 a2 b2 r1 r2
	t0=$(first_t /tmp/flow-A)
	t1=$(last_t /tmp/flow-A)
	a1=$(rate /tmp/flow-A $((t0 + 700)) "$swap")
	b1=$(rate /tmp/flow-B $((t0 + 700)) "$swap")
	a2=$(rate /tmp/flow-A $((swap + 500)) "$t1")
	b2=$(rate /tmp/flow-B $((swap + 500)) "$t1")
	r1=$(ratio "$b1" "$a1")
	r2=$(ratio "$a2" "$b2")
	expect netlink/retag-before "B (rank 0) : A (rank 3) ${r1}:1" ge "$r1" 3
	expect netlink/retag-after "after swapping ranks A : B ${r2}:1" ge "$r2" 3
}

test_flow_entries() {
	topo_same_host
	flow h1 bycookie --cc mercury --seconds 2
	flow h1 bytuple --cc mercury --seconds 2
	local cookie local_ep
	cookie=$(connected_field /tmp/flow-bycookie cookie)
	local_ep=$(connected_field /tmp/flow-bytuple local)
	ctl h1 flow set --cookie "$cookie" 1 --weight 20
	ctl h1 flow set "$local_ep" "$SERVER" 2 --weight 24
	local dump
	dump=$(ctl h1 dump)
	wait_flows
	expect flow/by-cookie "$(result_field /tmp/flow-bycookie rank) weight $(result_field /tmp/flow-bycookie weight)" \
		[ "$(result_field /tmp/flow-bycookie rank)" = 1 -a "$(result_field /tmp/flow-bycookie weight)" = 20 ]
	expect flow/by-tuple "rank $(result_field /tmp/flow-bytuple rank)" [ "$(result_field /tmp/flow-bytuple rank)" = 2 ]
	expect flow/dump "dump lists both" sh -c "echo '$dump' | grep -q 'cookie:$cookie rank 1' && echo '$dump' | grep -q '$local_ep->$SERVER rank 2'"
	expect flow/delete "delete by cookie" ctl h1 flow del --cookie "$cookie"
	ctl h1 flow del --cookie "$cookie" 2>/dev/null
	expect flow/delete-absent "second delete: exit 1" [ $? = 1 ]
}

test_expiry() {
	topo_same_host
	ctl h1 tag set 7 1 --ttl 1500
	flow h1 exp --cc mercury --prio 7 --seconds 4
	connected_field /tmp/flow-exp cookie >/dev/null
	local early
	early=$(in_ns h1 $SS -tin | grep -o 'ce_state:[0-9]*' | head -1)
	wait_flows
	expect expiry/ranked-while-fresh "$early while the entry lived" [ "$early" = ce_state:1 ]
	expect expiry/falls-back "rank $(result_field /tmp/flow-exp rank) after the TTL" [ "$(result_field /tmp/flow-exp rank)" = none ]
	expect expiry/collected "expired=$(stat_of h1 expired), tag_entries=$(stat_of h1 tag_entries)" \
		[ "$(stat_of h1 expired)" -ge 1 -a "$(stat_of h1 tag_entries)" = 0 ]
}

test_starvation_guard() {
	topo_same_host
	ctl h1 params max_hold_ms=100
	ctl h1 tag set 1 0
	ctl h1 tag set 3 3
	flow h1 urgent --cc mercury --prio 1 --seconds 3
	flow h1 bulk --cc mercury --prio 3 --seconds 3
	wait_flows
	local g
	g=$(stat_of h1 starve_grants)
	expect starvation/grants "starve_grants=$g with max_hold_ms=100" [ "$g" -ge 2 ]
	expect starvation/bulk-progress "bulk acked $(result_field /tmp/flow-bulk acked) B" [ "$(result_field /tmp/flow-bulk acked)" -gt 100000 ]
}

test_ss_info() {
	topo_same_host
	ctl h1 tag set 2 1 --weight 32
	flow h1 info --cc mercury --prio 2 --seconds 2
	sleep 0.5
	local line
	line=$(in_ns h1 $SS -tin | grep -o 'dctcp:([^)]*)' | head -1)
	wait_flows
	expect info/ss "ss -ti shows $line" sh -c "echo '$line' | grep -q 'ce_state:1,alpha:32,ab_ecn:2'"
}

test_netlink_bad_input() {
	$IP netns add nl
	local out
	out=$(in_ns nl mercury-nltest 2>&1)
	echo "$out"
	PASSED=$((PASSED + $(echo "$out" | grep -c '^PASS')))
	FAILED=$((FAILED + $(echo "$out" | grep -c '^FAIL')))
	[ -n "$out" ] || fail netlink/bad-input "mercury-nltest printed nothing"
}

global_entries() { mercuryctl stats | awk '$1 == "global_entries" { print $2 }'; }
global_entries_are() { [ "$(global_entries)" = "$1" ]; }

test_netns_delete() {
	local base now i
	base=$(global_entries)
	$IP netns add z
	i=0
	while [ $i -lt 50 ]; do ctl z tag set $i 1; i=$((i + 1)); done
	ctl z flow set 10.9.0.1:1000 10.9.0.2:2000 2
	ctl z flow set --cookie 12345 3
	now=$(global_entries)
	expect netns/entries-counted "global entries $base -> $now" [ "$now" = $((base + 52)) ]
	expect netns/isolated "init_net sees none of them" [ "$(mercuryctl stats | awk '$1 == "tag_entries" { print $2 }')" = 0 ]
	$IP netns del z
	wait_for 100 global_entries_are "$base"
	now=$(global_entries)
	expect netns/freed "entries of a deleted netns freed ($now left of base $base)" [ "$now" = "$base" ]
}

# The experiment's replayer end to end in every mode (2 workers, 2 servers,
# ResNet-18 shape, 3 iterations): it finishes, and every byte is accounted
# for: each worker pushed and pulled exactly what the placement says, and the
# servers together received every worker's pushes. No speed is asserted.
test_replay_modes() {
	export IP TC
	local mode verdict rc
	for mode in fifo mercury mercury-noprio prio-only; do
		sh /mercury/scripts/cluster.sh up 2 2 100
		verdict=$(timeout 120 sh /mercury/scripts/train.sh /mercury/profiles/resnet18.graph.txt $mode 2 2 100 3 |
			awk -v workers=2 -f check_replay.awk)
		rc=$?
		expect "replay/$mode" "$verdict" [ "$rc" = 0 ]
		sh /mercury/scripts/cluster.sh down
	done
}

test_unload() {
	# A netns other than init_net may only default to an allowed CC.
	echo "reno cubic mercury" >/proc/sys/net/ipv4/tcp_allowed_congestion_control
	$IP netns add u
	set_default_cc u mercury
	expect unload/netns-default-set "netns u default: $(in_ns u cat /proc/sys/net/ipv4/tcp_congestion_control)" \
		[ "$(in_ns u cat /proc/sys/net/ipv4/tcp_congestion_control)" = mercury ]
	rmmod tcp_mercury 2>/dev/null
	expect unload/busy-while-default "rmmod refused while a netns default uses it" [ -d /sys/module/tcp_mercury ]
	$IP netns del u
	unload_module 100
	expect unload/rmmod "rmmod once nothing uses it (refcnt $(cat /sys/module/tcp_mercury/refcnt 2>/dev/null))" \
		[ ! -d /sys/module/tcp_mercury ]
}

dmesg -c >/dev/null
for t in module_params autoload select_sysctl select_socket fair_untagged precedence_same_host \
	weights cross_host retag_midflight flow_entries expiry starvation_guard ss_info \
	netlink_bad_input netns_delete \
	agent_priorities agent_restart agent_module_reload agent_config replay_modes unload; do
	run_test $t
done
kernel_clean final && pass vm/kernel-log "no WARNING/BUG/Oops/leak in dmesg"
summary
