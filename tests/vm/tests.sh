#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# tcp_mercury on a real kernel: selection, priority behaviour on real TCP
# flows across rate-limited veth links, netlink control and bad input,
# namespaces, unload. Every check compares flows measured side by side in
# the same run; none asserts an absolute speed.
. ./lib.sh
. ./behaviour.sh
. ./agent.sh
. ./jobs.sh
. ./nccl.sh
NCCL_PLUGIN=/mercury/bin/libnccl-net-mercury.so
. ./replay.sh

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

test_ss_info() {
	topo_same_host
	ctl h1 tag set 12 1 --weight 32
	flow h1 info --cc mercury --prio 12 --seconds 2
	sleep 0.5
	local line
	line=$(in_ns h1 $SS -tin | grep -o 'dctcp:([^)]*)' | head -1)
	wait_flows
	expect info/ss "ss -ti shows $line" sh -c "echo '$line' | grep -q 'ce_state:1,alpha:32,ab_ecn:12'"
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

# Random and mutated messages, as root and as an unprivileged user, in a
# netns of their own; the seed is printed (MERCURY_FUZZ_SEED reproduces it).
test_netlink_random_fuzz() {
	$IP netns add fz
	local out
	out=$(in_ns fz mercury-nltest fuzz "${MERCURY_FUZZ_SEED:-0}" 6000 2>&1)
	echo "$out"
	PASSED=$((PASSED + $(echo "$out" | grep -c '^PASS')))
	FAILED=$((FAILED + $(echo "$out" | grep -c '^FAIL')))
	[ -n "$out" ] || fail nl/random-fuzz "mercury-nltest fuzz printed nothing"
}

global_entries() { mercuryctl stats | awk '$1 == "global_entries" { print $2 }'; }
global_entries_are() { [ "$(global_entries)" = "$1" ]; }

test_netns_delete() {
	local base now i
	base=$(global_entries)
	$IP netns add z
	i=0
	while [ $i -lt 50 ]; do ctl z tag set $((i + 10)) 1; i=$((i + 1)); done
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

# Namespaces are cheap: max_global_entries bounds all their tables together.
GLOBAL_CAP=/sys/module/tcp_mercury/parameters/max_global_entries
test_global_cap() {
	local saved base out rc
	saved=$(cat $GLOBAL_CAP)
	base=$(global_entries)
	echo $((base + 3)) >$GLOBAL_CAP
	$IP netns add g1
	$IP netns add g2
	ctl g1 tag set 11 1 && ctl g1 tag set 12 1 && ctl g2 tag set 11 1
	out=$(ctl g2 tag set 12 1 2>&1)
	rc=$?
	expect memory/global-cap "entry $((base + 4)) with max_global_entries=$((base + 3)) (exit $rc): $out" \
		sh -c "[ $rc = 1 ] && printf '%s' \"\$1\" | grep -q max_global_entries" - "$out"
	expect memory/global-cap-update "an existing entry can still change" ctl g1 tag set 11 2
	echo "$saved" >$GLOBAL_CAP
	expect memory/global-cap-lifted "room again once raised" ctl g2 tag set 12 1
	wait_for 50 global_entries_are $((base + 4))
	expect memory/global-count "global entries $base -> $(global_entries)" [ "$(global_entries)" = $((base + 4)) ]
}

# 10,000 concurrent mercury connections, each with its own flow entry (what
# an agent with 10k flows asks of the module), within the default limits.
SCALE_FLOWS=10000
test_scale() {
	local pid entries init rank2 client server
	$IP netns add big
	$IP -n big link set lo up
	ulimit -n 65536
	$IP netns exec big mercury-flow server --port 5301 --bind 127.0.0.1 >/dev/null 2>&1 &
	server=$!
	wait_for 50 sh -c "$IP netns exec big ss -ltn | grep -q :5301"
	$IP netns exec big mercury-flow client --connect 127.0.0.1:5301 --cc mercury --connections $SCALE_FLOWS \
		--flow-rank 2 --chunk 1448 --seconds 1 --wait-signal >/tmp/flow-scale 2>&1 &
	client=$!
	wait_for 1200 grep -q '^entries=\|mercury-flow:' /tmp/flow-scale
	expect scale/entries-set "$(grep -v '^connected' /tmp/flow-scale | head -2 | tr '\n' ' ')" \
		grep -q "^entries=$SCALE_FLOWS " /tmp/flow-scale
	entries=$(stat_of big flow_entries)
	init=$(stat_of big flows_init)
	rank2=$(ctl big dump | awk '$1 == "flow" && $4 == 2' | wc -l)
	expect scale/entries "flow entries $entries, $rank2 of them at rank 2" \
		[ "$entries" = $SCALE_FLOWS -a "$rank2" = $SCALE_FLOWS ]
	expect scale/flows "mercury flows started: $init" [ "$init" -ge $SCALE_FLOWS ]
	pid=$(connected_field /tmp/flow-scale pid)
	kill -USR1 "$pid"
	wait "$client"
	expect scale/sent "$(grep -E "^result|mercury-flow:" /tmp/flow-scale | cut -d" " -f1-6)" grep -q "^result .* cc=mercury rank=2 " /tmp/flow-scale
	ctl big flush
	expect scale/flushed "flow entries after flush: $(stat_of big flow_entries)" [ "$(stat_of big flow_entries)" = 0 ]
	kill "$server"
	wait "$server" 2>/dev/null
	$IP netns del big
}

# Entries are charged to the memory cgroup of the process that adds them.
test_memcg() {
	local cg=/sys/fs/cgroup/mercury-test one many charged full
	grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup
	echo +memory >/sys/fs/cgroup/cgroup.subtree_control
	mkdir -p $cg
	$IP netns add m1
	$IP netns add m2
	# fill_in_cgroup NS N: memory.current's growth while a fresh process in
	# the cgroup adds N entries in NS (after it exited: only kernel memory).
	fill_in_cgroup() {
		local before after
		before=$(cat $cg/memory.current)
		sh -c "echo \$\$ >$cg/cgroup.procs && exec $IP netns exec $1 mercury-nltest fill $2" >/dev/null
		after=$(cat $cg/memory.current)
		echo $((after - before))
	}
	one=$(fill_in_cgroup m1 1)
	many=$(fill_in_cgroup m2 10000)
	charged=$((many - one))
	# struct mercury_entry is 88 bytes here; any real charge clears 64 each.
	expect memory/memcg-charged "10,000 entries: memory.current +$many bytes, one entry: +$one" \
		[ "$charged" -ge $((10000 * 64)) ]
	full=$(cat $cg/memory.current)
	ctl m2 flush
	# Freed after an RCU grace period.
	expect memory/memcg-uncharged "memory.current from $full down by at least the entries' share" \
		wait_for 100 sh -c "[ \$(cat $cg/memory.current) -le $((full - 10000 * 64)) ]"
	$IP netns del m1
	$IP netns del m2
	rmdir $cg 2>/dev/null
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

# The agent against the module going away and coming back under it.
test_agent_module_reload() {
	topo_same_host
	agent_start
	# cubic sockets: tcp_mercury must be unloadable while the trainer runs.
	trainer --cc cubic --seconds 8
	wait_for 30 has_entries 4
	unload_module 50
	expect agent/module-unloaded "rmmod with the agent running" [ ! -d /sys/module/tcp_mercury ]
	# The agent's family lookup autoloads the module (MODULE_ALIAS_GENL_FAMILY);
	# load it by hand only if that has not happened.
	sleep 0.5
	[ -d /sys/module/tcp_mercury ] || insmod "/lib/modules/$(uname -r)/extra/tcp_mercury.ko"
	wait_for 40 has_entries 4
	expect agent/reload-repushed "entries after insmod: $(flow_entries)" has_entries 4
	expect agent/alive-after-reload "mercuryd survived" kill -0 "$AGENT_PID"

	# Garbage from another client: that client is cut off, nobody else notices.
	local g
	g=$(in_ns h1 mercury-trainer garbage --socket $AGENT_SOCK)
	expect agent/garbage-dropped "$g" sh -c "echo '$g' | grep -q disconnected"
	expect agent/garbage-harmless "agent alive and answering" \
		sh -c "kill -0 $AGENT_PID && mercuryctl status --socket $AGENT_SOCK >/dev/null"
	expect agent/garbage-entries-kept "entries: $(flow_entries)" has_entries 4
	wait "$TRAINER_PID"
	agent_stop
}

# The opt-in boot files, as systemd-modules-load and systemd-sysctl apply
# them at boot: the module loads, mercury stays in the allowed list, and the
# optional default takes.
test_boot_files() {
	local m
	for m in $(grep -v '^#' /mercury/boot/mercury-modules-load.conf); do modprobe "$m"; done
	expect boot/modules-load "modules-load.d file loads tcp_mercury" [ -d /sys/module/tcp_mercury ]
	sysctl -p /mercury/boot/mercury-sysctl.conf >/dev/null
	expect boot/sysctl-allowed "allowed: $(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)" \
		grep -qw mercury /proc/sys/net/ipv4/tcp_allowed_congestion_control
	sed 's/^# net.ipv4.tcp_congestion_control/net.ipv4.tcp_congestion_control/' /mercury/boot/mercury-sysctl.conf \
		>/tmp/sysctl-default.conf
	sysctl -p /tmp/sysctl-default.conf >/dev/null
	expect boot/sysctl-default "default: $(cat /proc/sys/net/ipv4/tcp_congestion_control)" \
		[ "$(cat /proc/sys/net/ipv4/tcp_congestion_control)" = mercury ]
	echo cubic >/proc/sys/net/ipv4/tcp_congestion_control
}

# mercuryd.service's capabilities, for real: the agent as uid 65534 (the
# unit's DynamicUser) with only its AmbientCapabilities pushes a trainer's
# entries into the module; with none, the module refuses them.
agent_as_nobody() {	# agent_as_nobody CAPS: mercuryd in h1 as uid 65534 with CAPS only
	$IP netns exec h1 /usr/bin/setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps=-all$1 \
		--ambient-caps=-all$1 --bounding-set=-all$1 \
		mercuryd --datapath kmod --socket /tmp/mercury-caps.sock --check-ms 200 2>/tmp/mercury-caps.log &
	AGENT_PID=$!
	wait_for 50 test -S /tmp/mercury-caps.sock
}
test_unit_caps() {
	local caps
	caps=$(unit_caps /mercury/systemd/mercuryd.service AmbientCapabilities)
	topo_same_host
	agent_as_nobody ",$caps"
	MERCURY_SOCKET=/tmp/mercury-caps.sock $IP netns exec h1 mercury-trainer run --job caps --connect "$SERVER" \
		--forward-us 1000,1000,1000,1000 --seconds 3 >/tmp/trainer.out 2>&1 &
	TRAINER_PID=$!
	wait_for 50 has_entries 4
	expect unit/caps-suffice "uid 65534 with $caps: $(flow_entries) entries pushed; $(tail -1 /tmp/mercury-caps.log)" \
		has_entries 4
	wait "$TRAINER_PID"
	agent_stop
	rm -f /tmp/mercury-caps.sock
	# The killed agent may not have withdrawn its entries yet (they would
	# expire with their TTL): start the second half from an empty table.
	ctl h1 flush
	agent_as_nobody ""
	MERCURY_SOCKET=/tmp/mercury-caps.sock $IP netns exec h1 mercury-trainer run --job caps --connect "$SERVER" \
		--forward-us 1000,1000,1000,1000 --seconds 2 >/tmp/trainer.out 2>&1
	expect unit/caps-needed "without them: $(flow_entries) entries, $(grep -c 'Operation not permitted' /tmp/mercury-caps.log) EPERM in the log" \
		sh -c "[ $(flow_entries) = 0 ] && grep -q 'Operation not permitted' /tmp/mercury-caps.log"
	agent_stop
	rm -f /tmp/mercury-caps.sock
}

TESTS="module_params autoload $BEHAVIOUR_TESTS ss_info netlink_bad_input netlink_random_fuzz netns_delete global_cap
	scale memcg $AGENT_TESTS $JOBS_TESTS $NCCL_TESTS unit_caps agent_module_reload replay_modes unload boot_files"
# MERCURY_VM_TESTS=a,b MERCURY_VM_REPEAT=N make vmtest (scripts/vm/run.sh):
# only those, N times over, after autoload (which loads the module).
only=$(sed -n 's/.*mercury\.tests=\([^ ]*\).*/\1/p' /proc/cmdline | tr , ' ')
if [ -n "$only" ]; then
	picked=
	for t in $only; do
		if type "test_$t" >/dev/null 2>&1; then
			picked="$picked $t"
		else
			fail vm/tests "no test named $t"
		fi
	done
	TESTS=autoload
	for i in $(seq "$(sed -n 's/.*mercury\.repeat=\([0-9]*\).*/\1/p' /proc/cmdline)"); do
		TESTS="$TESTS$picked"
	done
fi
dmesg -c >/dev/null
for t in $TESTS; do
	run_test $t
done
kernel_clean final && pass vm/kernel-log "no WARNING/BUG/Oops/leak in dmesg"
summary
