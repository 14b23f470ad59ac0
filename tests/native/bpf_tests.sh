#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The eBPF struct_ops datapath on this host's own kernel, in network
# namespaces: the behaviour checks shared with the module's VM suite
# (tests/cc/behaviour.sh, agent.sh), plus what only the BPF datapath has: loading and
# registration by mercuryd, sharing between agents, clean unregistration
# (sockets using it keep working), recovery after the loader is killed.
#
# usage: bpf_tests.sh BUILD_DIR    (the CMake build, build/user; as root;
#                                   prints PASS/FAIL lines)
# env: ONLY="jobs_agent weights ..." runs just those tests (test_NAME), for
#      working on them; make test runs them all.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
export PATH=$build/bin:$build/tests/bin:$PATH
cd "$top/tests/cc"
. ./lib.sh
. ./behaviour.sh
. ./agent.sh
. ./jobs.sh
. ./nccl.sh
NCCL_PLUGIN=$build/lib/libnccl-net-mercury.so
SCRIPTS=$top/experiment PROFILES=$top/experiment/profiles
. ./replay.sh
SUITE=bpf

# Natively the veth ceiling is far higher than in the VM; the checks compare
# flows, so the same rate keeps the two suites alike.
RATE=${RATE:-50mbit}
LOADER_LOG=/tmp/mercury-bpf-agent.log
LOADER_PID=""

root_has_no_tags() { [ "$(mercuryctl dump | grep -c '^tag')" = 0 ]; }
registered() { grep -qw mercury /proc/sys/net/ipv4/tcp_available_congestion_control; }
not_registered() { ! registered; }
loader_gone() { ! kill -0 "$LOADER_PID" 2>/dev/null; }

# start_loader [NS]: the mercuryd that loads, registers and owns the
# program; in the root namespaces, or through ip netns exec (which gives it a
# mount namespace of its own).
start_loader() {
	if [ -n "${1:-}" ]; then
		$IP netns exec "$1" mercuryd --datapath=bpf --socket /run/mercury-bpf-test.sock --check-ms 200 \
			>"$LOADER_LOG" 2>&1 &
	else
		mercuryd --datapath=bpf --socket /run/mercury-bpf-test.sock --check-ms 200 >"$LOADER_LOG" 2>&1 &
	fi
	LOADER_PID=$!
	wait_for 100 registered
}

stop_loader() {	# stop_loader SIGNAL
	kill -"$1" "$LOADER_PID" 2>/dev/null
	wait_for 100 loader_gone
	wait "$LOADER_PID" 2>/dev/null
}

# Host kernel warnings since the last check, without clearing the host's log
# (lib.sh's kernel_clean does, inside the VM). The kernel warns once per
# call site per boot: after a check, its WARN_ON_ONCEs are re-armed, so a
# host that warned once still shows the next test's warnings (debugfs's
# clear_warn_once, where debugfs is mounted: the suite mounts nothing).
KLOG_MARK=/tmp/mercury-bpf-klog
WARN_ONCE_RESET=/sys/kernel/debug/clear_warn_once
WARN_ONCE_REARMS=""	# yes, or why not: tried once (a refusal is logged)
rearm_warn_once() {
	if [ -z "$WARN_ONCE_REARMS" ]; then
		if { echo 1 >"$WARN_ONCE_RESET"; } 2>/dev/null; then
			WARN_ONCE_REARMS=yes
		else
			WARN_ONCE_REARMS="no (kernel lockdown or no debugfs): the windows probe and zero_windows count instead"
			echo "INFO the kernel's WARN_ON_ONCEs cannot be re-armed here: $WARN_ONCE_REARMS"
		fi
		return
	fi
	[ "$WARN_ONCE_REARMS" = yes ] && echo 1 >"$WARN_ONCE_RESET"
}
kernel_clean() {
	local out
	dmesg >"$KLOG_MARK.now" 2>/dev/null || return 0
	out=$(diff "$KLOG_MARK" "$KLOG_MARK.now" | grep '^>' | grep -E "$KERNEL_BAD")
	mv "$KLOG_MARK.now" "$KLOG_MARK"
	rearm_warn_once
	if [ -n "$out" ]; then
		fail "$1/dmesg" "$(echo "$out" | head -3 | tr '\n' ' ')"
		return 1
	fi
	return 0
}

# An observer of windows independent of the datapath (mercury-probe
# windows: every segment a mercury socket of the host takes, its state
# changes and its close), for the whole suite; probe_windows_clean reads
# what it counted since the last test and fails on a window <= 0. lib.sh's
# windows_clean calls it after each test.
WINDOWS_LOG=/tmp/mercury-probe-windows
WINDOWS_PID=""
WINDOWS_SEQ=0
WINDOWS_BAD=0
WINDOWS_BAD_SS=0
start_windows_probe() {
	mercury-probe windows >"$WINDOWS_LOG" 2>&1 &
	WINDOWS_PID=$!
	wait_for 100 grep -q '^ready' "$WINDOWS_LOG"
}
windows_line() {	# the probe's answer to the SIGUSR1 numbered $1
	grep "^windows seq=$1 " "$WINDOWS_LOG"
}
probe_windows_clean() {
	local line bad ss
	[ -n "$WINDOWS_PID" ] || return 0
	WINDOWS_SEQ=$((WINDOWS_SEQ + 1))
	kill -USR1 "$WINDOWS_PID" 2>/dev/null
	if ! wait_for 50 windows_line "$WINDOWS_SEQ"; then
		fail "$1/windows-probe" "mercury-probe windows did not answer: $(tail -2 "$WINDOWS_LOG" | tr '\n' ' ')"
		return 1
	fi
	line=$(windows_line "$WINDOWS_SEQ")
	bad=$(echo "$line" | sed -n 's/.* bad_windows=\([0-9]*\).*/\1/p')
	ss=$(echo "$line" | sed -n 's/.* bad_ssthresh=\([0-9]*\).*/\1/p')
	# An ssthresh of 0 or past 2^31 is what a skipped ssthresh() can leave
	# (above); the hooks put it back before PRR uses it. A window <= 0 the
	# kernel holds is what it WARNs about, whoever caused it.
	[ "${ss:-0}" -gt "$WINDOWS_BAD_SS" ] &&
		echo "INFO $1/bad-ssthresh-seen: $((ss - WINDOWS_BAD_SS)) times on mercury sockets (a skipped ssthresh()): ${line#windows }"
	WINDOWS_BAD_SS=${ss:-0}
	if [ "${bad:-0}" -gt "$WINDOWS_BAD" ]; then
		fail "$1/zero-windows-seen" "$((bad - WINDOWS_BAD)) windows <= 0 held by mercury sockets: ${line#windows }"
		WINDOWS_BAD=$bad
		return 1
	fi
	return 0
}
stop_windows_probe() {
	[ -n "$WINDOWS_PID" ] || return 0
	kill "$WINDOWS_PID" 2>/dev/null
	wait "$WINDOWS_PID" 2>/dev/null
	WINDOWS_PID=""
}

test_register() {
	expect bpf/registered "loader lists 'mercury' in tcp_available_congestion_control" registered
	expect bpf/link-mode "registered through a BPF link: $(grep -o 'unregisters_on_crash=[a-z]*' "$LOADER_LOG")" \
		grep -q 'unregisters_on_crash=yes' "$LOADER_LOG"
	expect bpf/pinned "maps pinned: $(ls /run/mercury/bpf | tr '\n' ' ')" [ -e /run/mercury/bpf/mercury_flows ]
	# A second agent on the host shares the program instead of failing.
	$IP netns add join
	in_ns join mercuryd --datapath=bpf --socket /run/mercury-bpf-join.sock >/tmp/mercury-bpf-join.log 2>&1 &
	local pid=$!
	sleep 1
	expect bpf/second-agent-shares "second mercuryd in netns join: $(grep -o 'msg="using the datapath" datapath=[a-z]*' /tmp/mercury-bpf-join.log)" \
		sh -c "kill -0 $pid && grep -q 'using the datapath\" datapath=bpf' /tmp/mercury-bpf-join.log && ! grep -q 'loaded the BPF' /tmp/mercury-bpf-join.log"
	kill "$pid"
	wait "$pid" 2>/dev/null
	expect bpf/joiner-leaves-it "still registered after the second agent exits" registered
	expect bpf/datapath-flag "mercuryctl --datapath=kmod finds no module: exit 3" \
		sh -c 'mercuryctl --datapath=kmod stats >/dev/null 2>&1; [ $? = 3 ]'
}

# Writers in parallel (agents, mercuryctl) must not lose table_gen bumps:
# flows re-resolve their entry only when it moves.
test_concurrent_writers() {
	$IP netns add gen
	local before after w i pids=""
	in_ns gen mercuryctl tag set 11 1	# the netns's config slot, at a random first gen
	before=$(in_ns gen mercuryctl stats | awk '$1 == "table_gen" { print $2 }')
	for w in 1 2 3 4; do
		(for i in $(seq 1 50); do in_ns gen mercuryctl tag set $((w * 100 + i)) 1 >/dev/null || exit 1; done) &
		pids="$pids $!"
	done
	local ok=1
	for w in $pids; do wait "$w" || ok=0; done
	after=$(in_ns gen mercuryctl stats | awk '$1 == "table_gen" { print $2 }')
	expect bpf/table-gen-atomic "200 tag sets from 4 writers at once: table_gen $before -> $after" \
		[ "$ok" = 1 -a "$after" = $((before + 200)) ]
}

# Stopping the loader unregisters the CC; a socket still using it keeps
# sending, and new sockets can no longer select it.
test_unregister() {
	topo_same_host
	flow h1 survivor --cc mercury --seconds 4 --interval-ms 100
	sleep 1.5
	stop_loader TERM
	local t_stop
	t_stop=$(last_t /tmp/flow-survivor)
	expect bpf/unregistered "SIGTERM: 'mercury' no longer available" not_registered
	expect bpf/pins-kept "pins kept for the next loader" [ -e /run/mercury/bpf/mercury_flows ]
	local rc
	in_ns h1 mercury-flow client --connect "$SERVER" --cc mercury --seconds 1 >/tmp/flow-late 2>&1
	rc=$?
	expect bpf/new-sockets-refused "TCP_CONGESTION=mercury after unregistration: $(head -1 /tmp/flow-late)" [ "$rc" != 0 ]
	wait_flows
	local after
	after=$(rate /tmp/flow-survivor $((t_stop + 200)) "$(last_t /tmp/flow-survivor)")
	expect bpf/sockets-keep-working "survivor: $(result_field /tmp/flow-survivor cc), $after B/ms after unregistration" \
		sh -c "[ '$(result_field /tmp/flow-survivor cc)' = mercury ] && awk 'BEGIN { exit !($after > 100) }'"
}

tag_has_rank() { [ "$(ctl "$1" dump | awk -v t="$2" '$1 == "tag" && $2 == t { print $4 }')" = "$3" ]; }

# A restarted loader takes over the pinned maps: the entries survive, and a
# socket still running the killed loader's program obeys entries set after.
test_restart_keeps_state() {
	topo_same_host
	ctl h1 tag set 17 2 --ttl 30000
	flow h1 live --cc mercury --prio 17 --seconds 4 --interval-ms 100
	wait_for 50 grep -q '^sample' /tmp/flow-live
	stop_loader KILL
	wait_for 50 not_registered
	start_loader
	expect bpf/restart-takes-over "loader log: $(grep -o 'maps=[^,]*' "$LOADER_LOG" | head -1)" \
		grep -q 'taken over' "$LOADER_LOG"
	expect bpf/restart-keeps-entries "after kill -9 and restart: $(entries_of h1 | tr '\n' ';')" \
		tag_has_rank h1 17 2
	ctl h1 tag set 17 1
	wait_flows
	expect bpf/restart-keeps-control "old program's socket after a new entry: $(grep -o 'rank=[^ ]*' /tmp/flow-live | tail -1)" \
		[ "$(result_field /tmp/flow-live rank)" = 1 ]
}

# Namespaces come and go; their config slots and counters must go with
# them, or the shared maps fill up (E2BIG for every new netns). The loader
# here sweeps every 200 ms: 50 sweeps make 10 s.
cookie_hex() {	# cookie_hex NS: the netns cookie as bpftool key bytes
	in_ns "$1" /usr/bin/python3 -c 'import socket; s = socket.socket(); print(" ".join("%02x" % b for b in s.getsockopt(socket.SOL_SOCKET, 71, 8)))'
}
has_key() { bpftool map lookup pinned "/run/mercury/bpf/$1" key hex $2 >/dev/null 2>&1; }
no_key() { ! has_key "$@"; }
global_stat() { mercuryctl stats | awk -v k="$1" '$1 == k { print $2 }'; }
test_netns_reclaimed() {
	topo_same_host
	ctl h1 tag set 11 1 --ttl 300
	flow h1 short --cc mercury --seconds 1
	wait_flows
	local key base i
	key=$(cookie_hex h1)
	expect bpf/netns-slot-used "h1 ($key) has a config slot" has_key mercury_config "$key"
	expect bpf/netns-state-used "h1 has counters" has_key mercury_state "$key"
	topo_clear
	expect bpf/netns-slot-freed "h1's slot freed once it was gone and its entries expired" \
		wait_for 200 no_key mercury_config "$key"
	expect bpf/netns-state-freed "h1's counters freed" wait_for 200 no_key mercury_state "$key"
	base=$(global_stat global_netns_slots)
	for i in $(seq 1 30); do
		$IP netns add churn$i
		ctl churn$i tag set 11 1 --ttl 300 || break
	done
	expect bpf/netns-slots-used "30 namespaces with an entry: slots $base -> $(global_stat global_netns_slots)" \
		[ "$(global_stat global_netns_slots)" -ge $((base + 30)) ]
	topo_clear
	wait_for 200 slots_at_most "$base"
	local now
	now=$(global_stat global_netns_slots)
	expect bpf/netns-slots-freed "after they are gone: $now slots (base $base)" [ "$now" -le "$base" ]
}
slots_at_most() { [ "$(global_stat global_netns_slots)" -le "$1" ]; }

# Once every config slot is taken (MERCURY_BPF_MAX_NETNS namespaces with an
# entry), a new netns's tag set is refused with a reason and writes nothing.
# The entry used to go in before the config that failed: the tag showed in
# the table of a netns whose `tag set` had exited 1. Last in the suite: the
# slots stay taken until their entries expire; the suite's end clears them.
all_tags() { bpftool map dump pinned /run/mercury/bpf/mercury_tags 2>/dev/null | grep -c '"key"'; }
test_netns_slots_full() {
	local max i out rc tags0
	max=$(sed -n 's/^#define MERCURY_BPF_MAX_NETNS[[:space:]]*//p' "$top/include/mercury/bpf_maps.h")
	# Throwaway namespaces (gone when mercuryctl exits), each holding a slot.
	for i in $(seq "$max"); do
		unshare --net mercuryctl tag set 11 1 --ttl 600000 >/dev/null 2>&1 || break
	done
	expect bpf/netns-slots-fill "slots taken: $(global_stat global_netns_slots) of $max" \
		[ "$(global_stat global_netns_slots)" = "$max" ]
	$IP netns add full
	tags0=$(all_tags)
	out=$(ctl full tag set 12 1 2>&1)
	rc=$?
	expect bpf/netns-slots-full-refused "tag set in netns $((max + 1)) (exit $rc): $out" \
		sh -c "[ $rc = 1 ] && printf '%s' \"\$1\" | grep -q 'no room for another network namespace'" - "$out"
	expect bpf/netns-slots-full-unchanged "its table: '$(entries_of full)'; tags host-wide $tags0 -> $(all_tags)" \
		[ -z "$(entries_of full)" -a "$(all_tags)" = "$tags0" ]
}

# 10,000 concurrent mercury connections, each with its own flow entry set
# through mercuryd: every one is a flow of the datapath, every entry is in,
# and nothing is left once they close.
SCALE_FLOWS=${SCALE_FLOWS:-10000}
test_scale() {
	$IP netns add big
	$IP -n big link set lo up
	local stats init0 entries init agent server holder
	init0=$(stat_of big flows_init)
	in_ns big /usr/bin/python3 "$top/tests/integration/many_flows.py" serve 127.0.0.1 5301 &
	server=$!
	in_ns big mercuryd --datapath=bpf --socket /run/mercury-scale.sock --max-flows-per-client $((SCALE_FLOWS + 100)) \
		--log-level warn 2>/tmp/mercury-scale-agent.log &
	agent=$!
	wait_for 50 [ -S /run/mercury-scale.sock ]
	wait_for 50 sh -c "$IP netns exec big ss -ltn | grep -q :5301"
	mkfifo /tmp/mercury-scale.hold
	in_ns big /usr/bin/python3 "$top/tests/integration/many_flows.py" connect 127.0.0.1 5301 \
		/run/mercury-scale.sock "$SCALE_FLOWS" </tmp/mercury-scale.hold >/tmp/mercury-scale.out 2>&1 &
	holder=$!
	exec 7>/tmp/mercury-scale.hold	# open until we are done checking
	wait_for 1200 grep -q '^registered\|refused\|Error\|reads back' /tmp/mercury-scale.out
	expect scale/registered "$(head -2 /tmp/mercury-scale.out | tr '\n' ' ')" grep -q "^registered $SCALE_FLOWS" /tmp/mercury-scale.out
	wait_for 100 sh -c "[ \$($IP netns exec big mercuryctl stats | awk '\$1 == \"flow_entries\" { print \$2 }') -ge $SCALE_FLOWS ]"
	entries=$(stat_of big flow_entries)
	init=$(stat_of big flows_init)
	expect scale/entries "flow entries in the datapath: $entries" [ "$entries" = "$SCALE_FLOWS" ]
	# The client ends select mercury (the servers keep the netns default).
	expect scale/flows "mercury flows started in the netns: $((init - init0))" [ $((init - init0)) -ge "$SCALE_FLOWS" ]
	exec 7>&-
	wait "$holder"
	rm -f /tmp/mercury-scale.hold
	expect scale/withdrawn "entries withdrawn once the trainer left" \
		wait_for 100 sh -c "[ \$($IP netns exec big mercuryctl stats | awk '\$1 == \"flow_entries\" { print \$2 }') = 0 ]"
	kill "$agent" "$server" 2>/dev/null
	wait "$agent" "$server" 2>/dev/null
}

# A killed loader cannot clean up; the kernel unregisters the link, and the
# next mercuryd takes over the pins it left behind.
test_crash_recovery() {
	start_loader
	stop_loader KILL
	expect bpf/crash-unregisters "SIGKILL: 'mercury' gone with the link" wait_for 50 not_registered
	$IP netns add loader
	$IP netns add other
	start_loader loader
	expect bpf/restart "a new mercuryd (in netns loader) loads again over stale pins" registered
	# Its bpffs is private to its mount namespace; others find it anyway.
	expect bpf/restart-usable "mercuryctl in another netns reaches the new maps" \
		in_ns other mercuryctl --datapath=bpf tag set 11 0
	expect bpf/netns-separate "the entry is in netns other only" root_has_no_tags
	stop_loader TERM
	start_loader
}

# mercuryd-bpf.service's capabilities, for real: a loader bounded to the
# unit's CapabilityBoundingSet (uid 0, as the unit runs it), over the bpffs
# run-mercury-bpf.mount mounts for it (its What/Where/Type/Options, mounted
# here), loads, registers and takes entries; without that mount it cannot
# make its own.
start_bounded_loader() {	# start_bounded_loader CAPS
	/usr/bin/setpriv --inh-caps=-all,$1 --ambient-caps=-all,$1 --bounding-set=-all,$1 \
		mercuryd --datapath=bpf --socket /run/mercury-bpf-test.sock --check-ms 200 >"$LOADER_LOG" 2>&1 &
	LOADER_PID=$!
}
test_unit_caps() {
	local unit=$top/agent/systemd/mercuryd-bpf.service mnt=$top/agent/systemd/run-mercury-bpf.mount caps pre
	caps=$(unit_caps "$unit" CapabilityBoundingSet)
	pre="mount -t $(sed -n 's/^Type=//p' "$mnt") -o $(sed -n 's/^Options=//p' "$mnt") $(sed -n 's/^What=//p' "$mnt") $(sed -n 's/^Where=//p' "$mnt")"
	stop_loader TERM
	umount -l /run/mercury/bpf 2>/dev/null
	mkdir -p /run/mercury/bpf
	$pre
	start_bounded_loader "$caps"
	wait_for 100 registered
	expect unit/bpf-caps-suffice "after '$pre', a loader bounded to $caps registers mercury: $(grep -o 'msg="[^"]*"' "$LOADER_LOG" | tail -1)" registered
	$IP netns add caps
	expect unit/bpf-caps-entries "and serves the table" ctl caps tag set 21 1
	stop_loader TERM
	umount -l /run/mercury/bpf 2>/dev/null
	start_bounded_loader "$caps"
	wait_for 100 grep -q 'cannot mount' "$LOADER_LOG"
	expect unit/bpf-mount-needed "without that mount: $(grep -o 'cannot mount[^"]*' "$LOADER_LOG" | head -1)" \
		sh -c "grep -q 'cannot mount' '$LOADER_LOG' && ! grep -qw mercury /proc/sys/net/ipv4/tcp_available_congestion_control"
	stop_loader TERM
	umount -l /run/mercury/bpf 2>/dev/null
	start_loader
}

dmesg >"$KLOG_MARK" 2>/dev/null
rearm_warn_once
ip netns list | grep -q . && topo_clear
if ! start_windows_probe; then
	fail bpf/windows-probe "mercury-probe windows did not start: $(tail -2 "$WINDOWS_LOG" | tr '\n' ' ')"
	stop_windows_probe	# once, not after every test
fi
trap stop_windows_probe EXIT
if registered; then
	fail bpf/precondition "a CC named mercury is already registered on this host; stop it first"
	summary
	exit 1
fi
rm -f /run/mercury/bpf/mercury_*	# a crashed earlier run's
start_loader || {
	fail bpf/load "mercuryd --datapath=bpf did not register: $(tail -3 "$LOADER_LOG")"
	stop_loader KILL	# it keeps retrying otherwise, and holds the test socket
	summary
	exit 1
}

if [ -n "${ONLY:-}" ]; then
	for t in $ONLY; do run_test "$t"; done
	[ -n "$WINDOWS_PID" ] && probe_windows_clean final && pass bpf/no-zero-windows "the probe saw no window <= 0 on a mercury socket: $(tail -1 "$WINDOWS_LOG")"
	stop_loader TERM
	summary
	exit
fi
run_test register
run_test concurrent_writers
for t in $BEHAVIOUR_TESTS $AGENT_TESTS $JOBS_TESTS $NCCL_TESTS replay_modes; do
	run_test "$t"
done
run_test unregister
run_test crash_recovery
run_test unit_caps
run_test restart_keeps_state
run_test netns_reclaimed
run_test scale
run_test netns_slots_full
expect bpf/nothing-uncounted "host-wide events without a netns state: $(global_stat global_uncounted)" \
	[ "$(global_stat global_uncounted)" = 0 ]
stop_loader TERM
expect bpf/final-unregistered "nothing left registered" not_registered
rm -f /run/mercury/bpf/mercury_*	# this run's state; the next run starts empty
[ -n "$WINDOWS_PID" ] && probe_windows_clean final && pass bpf/no-zero-windows "the probe saw no window <= 0 on a mercury socket: $(tail -1 "$WINDOWS_LOG")"
kernel_clean final && pass bpf/kernel-log "no WARNING/BUG/Oops in the host's dmesg"
summary
