# SPDX-License-Identifier: GPL-2.0
# Helpers for Mercury's datapath tests: topologies, flows, samples, checks.
# Sourced by the VM suites (busybox sh, tcp_mercury.ko) and the native BPF
# suite (bash, on the host), which share behaviour.sh.
#
# iproute2 by full path: busybox's sh prefers its own `ip` applet.
IP=/usr/sbin/ip
TC=/usr/sbin/tc
SS=$(command -v ss || echo /usr/sbin/ss)
PORT=5201
# Bottleneck rate: TCG's veth tops out near 1 Gbit/s; stay far below.
RATE=${RATE:-50mbit}

PASSED=0
FAILED=0
CURRENT=""

pass() {
	echo "PASS $1${2:+  # $2}"
	PASSED=$((PASSED + 1))
}

fail() {
	echo "FAIL $1: $2"
	FAILED=$((FAILED + 1))
}

# expect NAME DETAIL CONDITION... : pass if the command succeeds.
expect() {
	local name=$1 detail=$2
	shift 2
	if "$@"; then pass "$name" "$detail"; else fail "$name" "$detail"; fi
}

# Kernel log since the last check must hold no warning, bug, oops or leak.
KERNEL_BAD='WARNING:|BUG:|Oops|general protection|Call Trace|refcount_t|still has objects|kmemleak|UBSAN|KASAN|list_add corruption|list_del corruption|INFO: task .* blocked'
kernel_clean() {
	local out
	out=$(dmesg -c 2>/dev/null | grep -E "$KERNEL_BAD")
	if [ -n "$out" ]; then
		fail "$1/dmesg" "$(echo "$out" | head -3 | tr '\n' ' ')"
		return 1
	fi
	return 0
}

# Float helpers (busybox awk).
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
mul() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a * b }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b <= 0) b = 1; printf "%.2f", a / b }'; }

# result_field FILE KEY: KEY=value from mercury-flow's "result" line.
result_field() {
	sed -n "s/^result .*[ ]$2=\([^ ]*\).*/\1/p" "$1" | tail -1
}

# wait_for TENTHS CMD...: poll CMD every 0.1 s until it succeeds.
wait_for() {
	local n=$1
	shift
	while [ "$n" -gt 0 ]; do
		"$@" 2>/dev/null && return 0
		sleep 0.1
		n=$((n - 1))
	done
	return 1
}

# connected_field FILE KEY: from the "connected" line, waiting for it.
connected_field() {
	wait_for 50 grep -q '^connected ' "$1" || return 1
	sed -n "s/^connected .*[ ]$2=\([^ ]*\).*/\1/p" "$1" | head -1
}

# samples FILE [FIELD...]: mercury-flow's "sample" lines as "t_ms value..."
# lines, one value per FIELD (default acked); the helpers below read only these.
samples() {
	local file=$1
	shift
	awk -v fields="${*:-acked}" 'BEGIN { n = split(fields, want, " ") } /^sample/ {
		for (i = 1; i <= NF; i++) {
			eq = index($i, "=")
			if (eq) v[substr($i, 1, eq - 1)] = substr($i, eq + 1)
		}
		line = v["t_ms"]
		for (j = 1; j <= n; j++) line = line " " v[want[j]]
		print line
	}' "$file"
}

# first_t/last_t FILE: time (ms) of the first/last sample.
first_t() { samples "$1" | awk 'NR == 1 { print $1 }'; }
last_t() { samples "$1" | awk 'END { print $1 }'; }

# rate FILE T0 T1: bytes acked per ms between two times, from samples.
rate() {
	samples "$1" | awk -v t0="$2" -v t1="$3" '
	{ if ($1 + 0 <= t0 + 0) a0 = $2; if ($1 + 0 <= t1 + 0) a1 = $2 }
	END { if (t1 <= t0) { print 0; exit } printf "%.1f", (a1 - a0) / (t1 - t0) }'
}

in_ns() {
	local ns=$1
	shift
	$IP netns exec "$ns" "$@"
}

# set_default_cc NS CC: the netns's default CC, written, checked and read
# back. A netns other than the initial one may only pick a CC listed in
# tcp_allowed_congestion_control (reno always is); a refusal fails the run
# here instead of letting a test measure the host's default.
set_default_cc() {
	local got
	if ! in_ns "$1" sh -c "echo $2 >/proc/sys/net/ipv4/tcp_congestion_control" 2>/dev/null; then
		fail "setup/default-cc" "netns $1 refused default $2 (allowed: $(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control))"
		return 1
	fi
	got=$(in_ns "$1" cat /proc/sys/net/ipv4/tcp_congestion_control)
	if [ "$got" != "$2" ]; then
		fail "setup/default-cc" "netns $1 default reads $got after writing $2"
		return 1
	fi
}

# LOSS_PPM=N (the stress runs, tests/native/stress.sh): every topology's
# far end drops TCP data segments at random, N in a million, on ingress
# (mercury-probe lossy; killed with its netns by topo_clear).
link_loss() {	# link_loss NS DEV
	[ "${LOSS_PPM:-0}" -gt 0 ] || return 0
	in_ns "$1" mercury-probe lossy --dev "$2" --ppm "$LOSS_PPM" >"/tmp/lossy-$1-$2" 2>&1 &
	wait_for 100 grep -q '^ready' "/tmp/lossy-$1-$2" ||
		echo "INFO lossy link on $1/$2 did not start: $(cat "/tmp/lossy-$1-$2")"
}

# Same host: sender h1 -- receiver h2, rate limit on h1's own egress
# (the NIC is the bottleneck; TCP Small Queues keep losses rare).
topo_same_host() {
	local ns
	$IP netns add h1
	$IP netns add h2
	$IP link add v1 netns h1 type veth peer name v2 netns h2
	$IP -n h1 addr add 10.0.0.1/24 dev v1
	$IP -n h2 addr add 10.0.0.2/24 dev v2
	for ns in h1 h2; do $IP -n $ns link set lo up; done
	$IP -n h1 link set v1 up
	$IP -n h2 link set v2 up
	$TC -n h1 qdisc add dev v1 root tbf rate "$RATE" burst 20kb latency 30ms
	$TC -n h2 qdisc add dev v2 root tbf rate "$RATE" burst 20kb latency 30ms
	link_loss h2 v2
	start_server h2
	SERVER=10.0.0.2:$PORT
}

# Incast: senders a and b -> router r -> receiver s, rate limit on r's
# egress toward s (a router queue: loss- and delay-based control work).
topo_incast() {
	local i=1 ns
	for ns in a b r s; do
		$IP netns add $ns
		$IP -n $ns link set lo up
	done
	for ns in a b s; do
		$IP link add "r$ns" netns r type veth peer name eth0 netns $ns
		$IP -n r addr add "10.1.$i.1/24" dev "r$ns"
		$IP -n $ns addr add "10.1.$i.2/24" dev eth0
		$IP -n r link set "r$ns" up
		$IP -n $ns link set eth0 up
		$IP -n $ns route add default via "10.1.$i.1"
		i=$((i + 1))
	done
	in_ns r sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
	$TC -n r qdisc add dev rs root tbf rate "$RATE" burst 20kb latency 30ms
	link_loss s eth0
	start_server s
	SERVER=10.1.3.2:$PORT
}

# bottleneck_bytes: bytes the rate limiter of the current topology has sent.
bottleneck_bytes() {
	if $IP netns list | grep -q '^r\b'; then
		$TC -n r -s qdisc show dev rs
	else
		$TC -n h1 -s qdisc show dev v1
	fi | awk '/Sent/ { print $2; exit }'
}

server_listening() { in_ns "$1" $SS -ltn | grep -q ":$PORT "; }

start_server() {
	in_ns "$1" mercury-flow server --port $PORT >/dev/null 2>&1 &
	wait_for 50 server_listening "$1" || { echo "INFO server in $1 did not start"; return 1; }
}

# unload_module TENTHS: rmmod tcp_mercury, retrying while a dying netns or a
# closing socket still holds it.
module_gone() { rmmod tcp_mercury 2>/dev/null; [ ! -d /sys/module/tcp_mercury ]; }
unload_module() { wait_for "$1" module_gone; }

# Tear down every namespace (servers die with them).
topo_clear() {
	local ns
	for ns in $($IP netns list | awk '{ print $1 }'); do
		for pid in $($IP netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
		$IP netns del "$ns"
	done
	FLOW_PIDS=""
	rm -f /tmp/flow-*
}

# flow NS LABEL ARGS...: run a client in the background into /tmp/flow-LABEL.
FLOW_PIDS=""
flow() {
	local ns=$1 label=$2
	shift 2
	in_ns "$ns" mercury-flow client --connect "$SERVER" --label "$label" "$@" >"/tmp/flow-$label" 2>&1 &
	FLOW_PIDS="$FLOW_PIDS $!"
}

# trace_start NS FILE: every segment and state change of NS's mercury
# sockets, with the CC's per-flow state, to FILE (mercury-probe trace) until
# trace_stop: what each flow saw when it yielded, held or cut.
TRACE_PID=""
trace_start() {
	$IP netns exec "$1" mercury-probe trace >"$2" 2>&1 &	# $!: the probe itself
	TRACE_PID=$!
	wait_for 100 grep -q '^ready' "$2"
}

trace_stop() {
	[ -n "$TRACE_PID" ] || return 0
	kill "$TRACE_PID"
	wait "$TRACE_PID" 2>/dev/null
	TRACE_PID=""
}

# Wait for the clients started by flow() (not the servers).
wait_flows() {
	local pid
	for pid in $FLOW_PIDS; do wait "$pid"; done
	FLOW_PIDS=""
}

# unit_caps UNIT_FILE KEY: a unit's capabilities (KEY=CAP_A CAP_B) as
# setpriv takes them: +cap_a,+cap_b
unit_caps() { sed -n "s/^$2=//p" "$1" | tr 'A-Z ' 'a-z,' | sed 's/cap_/+/g'; }

ctl() {	# ctl NS ARGS...: mercuryctl in a namespace
	local ns=$1
	shift
	in_ns "$ns" mercuryctl "$@"
}

stat_of() {	# stat_of NS NAME
	ctl "$1" stats | awk -v k="$2" '$1 == k { print $2 }'
}

# Scenarios shared by the tests and bench-cc, so both measure the same thing.

# run_handover TOPOLOGY CC INTERVAL_MS: a bulk flow (tag 3 -> rank 3) runs
# 7 s; an urgent flow (tag 1 -> rank 0) joins at 1.5 s for 3 s; on one host
# (same_host) or from hosts a and b through the router (incast). Samples in
# /tmp/flow-bulk and /tmp/flow-urgent.
run_handover() {
	local nsu=a nsb=b
	[ "$1" = same_host ] && nsu=h1 nsb=h1
	"topo_$1"
	ctl $nsu tag set 11 0
	ctl $nsb tag set 13 3
	flow $nsb bulk --cc "$2" --prio 13 --seconds 7 --interval-ms "$3"
	sleep 1.5
	flow $nsu urgent --cc "$2" --prio 11 --seconds 3 --interval-ms "$3"
	wait_flows
}

# run_weights SECONDS: two rank-0 flows from host a through the router queue,
# weights 64 and 4. Results in /tmp/flow-heavy and /tmp/flow-light.
run_weights() {
	topo_incast
	weights_flows "$1"
}
weights_flows() {
	ctl a tag set 14 0 --weight 64
	ctl a tag set 15 0 --weight 4
	flow a heavy --cc mercury --prio 14 --seconds "$1" --interval-ms 100
	flow a light --cc mercury --prio 15 --seconds "$1" --interval-ms 100
	wait_flows
}

# No window of 0, ever: the kernel WARNs about one (tcp_snd_cwnd_set), once
# per call site per boot, so its log alone misses all but the first. The
# datapath counts every window out of range (cwnd or ssthresh 0, or past
# 2^31 - 1) a hook finds, per netns (zero_windows); read before the
# namespaces go. The hooks never write one (cc_core.h, mercury_store), so
# one found is the kernel's: in the VM that is a failure. The BPF suite's
# host now and then runs no BPF program for an event (doc/testing.md) and
# takes what a hook it skipped left (0, or garbage); there it is reported, repaired as it is,
# and the suite's own observer (probe_windows_clean: a window the kernel
# holds at <= 0) and the kernel's log decide.
windows_clean() {
	local ns n total=0 where=""
	for ns in $($IP netns list | awk '{ print $1 }'); do
		n=$(stat_of "$ns" zero_windows 2>/dev/null)
		[ "${n:-0}" -gt 0 ] 2>/dev/null || continue
		total=$((total + n))
		where="$where $ns:$n"
	done
	if [ "$total" -gt 0 ] && [ "${SUITE:-vm}" = bpf ]; then
		echo "INFO $1/zero-windows: the datapath found and repaired $total windows out of range ($where ): it writes none, so the kernel took them from hooks it did not run"
	elif [ "$total" -gt 0 ]; then
		fail "$1/zero-windows" "the datapath found $total windows out of range:$where"
		return 1
	fi
	command -v probe_windows_clean >/dev/null 2>&1 && ! probe_windows_clean "$1" && return 1
	return 0
}

# run_test NAME: run test_NAME with a clean slate and checks of the
# windows it left and of the kernel's log.
run_test() {
	CURRENT=$1
	echo "== $1"
	"test_$1"
	windows_clean "$1"
	topo_clear
	kernel_clean "$1"
}

summary() {
	echo "${SUITE:-vm}: $PASSED passed, $FAILED failed"
	[ "$FAILED" -eq 0 ]
}
