# SPDX-License-Identifier: GPL-2.0
# mercuryd + libmercury + a datapath together: a trainer (mercury-trainer,
# linked with libmercury) declares a model, reports timings and registers one
# real TCP connection per layer; the agent runs in the trainer's namespace
# and finds the datapath itself (the module in the VM, the BPF program a
# loader mercuryd registered natively). Sourced by both suites.

AGENT_SOCK=/run/mercury-test.sock
AGENT_PID=""

# Started with ip netns exec directly (not the in_ns function) so that $! is
# the daemon itself, not a subshell: the tests kill it.
agent_start() {
	$IP netns exec h1 mercuryd --socket $AGENT_SOCK --entry-ttl-ms 1500 --check-ms 200 2>>/tmp/mercuryd.log &
	AGENT_PID=$!
	wait_for 50 test -S $AGENT_SOCK
}

agent_stop() {
	[ -n "$AGENT_PID" ] && kill -9 "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null
	AGENT_PID=""
	rm -f $AGENT_SOCK
}

flow_entries() { ctl h1 dump | grep -c '^flow '; }
has_entries() { [ "$(flow_entries)" = "$1" ]; }

# trainer ARGS...: four layers of 1 ms forward each -> deadlines 0,1,2,3 ms
# of a 4 ms pass -> ranks 0,2,4,6.
trainer() {
	MERCURY_SOCKET=$AGENT_SOCK $IP netns exec h1 mercury-trainer run --job test --connect "$SERVER" \
		--forward-us 1000,1000,1000,1000 "$@" >/tmp/trainer.out 2>&1 &
	TRAINER_PID=$!
}

test_agent_priorities() {
	topo_same_host
	agent_start
	trainer --cc mercury --send-layers 0,3 --seconds 4
	wait_for 30 has_entries 4
	local ranks status
	ranks=$(ctl h1 dump | awk '/^flow/ { print $4 }' | sort -n | tr '\n' ' ')
	status=$(mercuryctl --json status --socket $AGENT_SOCK)
	wait "$TRAINER_PID"
	expect agent/kernel-ranks "kernel ranks from learned deadlines: $ranks" [ "$ranks" = "0 2 4 6 " ]
	expect agent/status "mercuryctl status shows the job's layers" \
		sh -c "echo '$status' | grep -q '\"job\":\"test\"' && echo '$status' | grep -q '\"deadline_us\":3000,\"rank\":6'"
	local a0 a3 r
	a0=$(awk '/^layer 0 / { sub("acked=", "", $3); print $3 }' /tmp/trainer.out)
	a3=$(awk '/^layer 3 / { sub("acked=", "", $3); print $3 }' /tmp/trainer.out)
	r=$(ratio "$a0" "$a3")
	expect agent/shares "layer 0 (rank 0) : layer 3 (rank 6) ${r}:1" ge "$r" 4
	wait_for 10 has_entries 0
	expect agent/trainer-exit-cleans "entries withdrawn when the trainer left: $(flow_entries) left" has_entries 0
	agent_stop
}

test_agent_restart() {
	topo_same_host
	agent_start
	trainer --cc mercury --send-layers 0 --seconds 15
	wait_for 30 has_entries 4
	agent_stop
	# The agent is gone: the flows go on, entries expire (TTL 1.5 s) to fair.
	wait_for 40 has_entries 0
	expect agent/killed-entries-expire "entries after kill -9: $(flow_entries)" has_entries 0
	expect agent/killed-flows-continue "trainer still running" kill -0 "$TRAINER_PID"
	agent_start
	wait_for 40 has_entries 4
	expect agent/restart-restores "entries after restart: $(flow_entries)" has_entries 4
	wait "$TRAINER_PID"
	expect agent/trainer-unharmed "trainer finished: $(grep -c acked= /tmp/trainer.out) layers reported" \
		grep -q '^iterations=' /tmp/trainer.out
	agent_stop
}

# SIGTERM (a restart, an upgrade) leaves the entries to expire on their own,
# as a crash does, so priorities do not drop mid-training; a new agent takes
# over when the trainer's library reconnects.
test_agent_sigterm() {
	topo_same_host
	agent_start
	trainer --cc mercury --send-layers 0 --seconds 15
	wait_for 30 has_entries 4
	kill -TERM "$AGENT_PID"
	wait "$AGENT_PID"
	local rc=$? left
	AGENT_PID=""
	left=$(flow_entries)
	expect agent/sigterm-clean-exit "exit status $rc" [ "$rc" = 0 ]
	expect agent/sigterm-keeps-entries "entries right after SIGTERM: $left" [ "$left" = 4 ]
	wait_for 40 has_entries 0
	expect agent/sigterm-entries-expire "entries after the TTL: $(flow_entries)" has_entries 0
	agent_start
	wait_for 40 has_entries 4
	expect agent/sigterm-restart-restores "entries after restart: $(flow_entries)" has_entries 4
	wait "$TRAINER_PID"
	agent_stop
}

test_agent_config() {
	mercuryd --help >/tmp/help.out 2>&1
	expect agent/help "--help exits 0 and documents --socket" grep -q -- '--socket' /tmp/help.out
	local rc
	mercuryd --entry-ttl-ms 5 >/tmp/cfg.out 2>&1
	rc=$?
	expect agent/bad-config "bad value: exit $rc ($(head -1 /tmp/cfg.out))" [ "$rc" = 2 ]
	printf 'socket = /run/x.sock\nbogus_key = 1\n' >/tmp/bad.conf
	mercuryd --config /tmp/bad.conf >/tmp/cfg.out 2>&1
	rc=$?
	expect agent/bad-config-file "unknown key: exit $rc ($(head -1 /tmp/cfg.out))" [ "$rc" = 2 ]
}

# Registrations pile up faster than the agent reads them: each queued
# Register frame keeps its own socket (SCM_RIGHTS with that frame), so none
# is lost or paired with another's socket.
AGENT_MANY_FDS=2000
test_agent_many_fds() {
	local fwd
	ulimit -n 16384	# the trainer holds each socket and a dup for replay
	# The trainer stays 12 s after registering: its entries go when it does,
	# and under TCG the agent takes seconds to push 2,000 of them.
	topo_same_host
	agent_start
	fwd=$(awk -v n=$AGENT_MANY_FDS 'BEGIN { for (i = 0; i < n; i++) printf "%s100", i ? "," : "" }')
	MERCURY_SOCKET=$AGENT_SOCK $IP netns exec h1 mercury-trainer run --job many --connect "$SERVER" \
		--forward-us "$fwd" --seconds 12 --period-ms 1000 >/tmp/trainer.out 2>&1 &
	TRAINER_PID=$!
	wait_for 300 has_entries $AGENT_MANY_FDS
	expect agent/many-fds "flow entries for $AGENT_MANY_FDS sockets registered back to back: $(flow_entries)" \
		has_entries $AGENT_MANY_FDS
	wait "$TRAINER_PID"
	expect agent/many-fds-trainer "trainer: $(grep -c acked= /tmp/trainer.out) layers reported" \
		grep -q '^iterations=' /tmp/trainer.out
	agent_stop
}

AGENT_TESTS="agent_priorities agent_restart agent_sigterm agent_config agent_many_fds"
