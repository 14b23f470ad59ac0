# SPDX-License-Identifier: GPL-2.0
# mercuryd + libmercury + a datapath together: a trainer (mercury-trainer,
# linked with libmercury) declares a model, reports timings and registers one
# real TCP connection per layer; the agent runs in the trainer's namespace
# and finds the datapath itself (the module in the VM, the BPF program a
# loader mercuryd registered natively). Sourced by both suites.

AGENT_SOCK=/run/mercury-test.sock
AGENT_PID=""

# Started with ip netns exec directly (not the in_ns function) so that $! is
# the daemon itself, not a subshell: the tests kill it. ARGS: more options.
agent_start() {
	$IP netns exec h1 mercuryd --socket $AGENT_SOCK --entry-ttl-ms 1500 --check-ms 200 "$@" 2>>/tmp/mercuryd.log &
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
	# The file is TOML (toml++): errors name the line, a key set twice is
	# refused, and "#" inside a quoted value is part of the value.
	printf 'socket = "/run/x#1.sock"  # a comment\nbogus_key = 1\n' >/tmp/bad.conf
	mercuryd --config /tmp/bad.conf >/tmp/cfg.out 2>&1
	rc=$?
	expect agent/bad-config-file "unknown key: exit $rc ($(head -1 /tmp/cfg.out))" \
		sh -c "[ $rc = 2 ] && grep -q 'bad.conf:2: unknown setting .bogus_key.' /tmp/cfg.out"
	printf 'log_level = "info"\nmax_clients = 8\nlog_level = "debug"\n' >/tmp/bad.conf
	mercuryd --config /tmp/bad.conf >/tmp/cfg.out 2>&1
	rc=$?
	expect agent/config-duplicate-key "key set twice: exit $rc ($(head -1 /tmp/cfg.out))" \
		sh -c "[ $rc = 2 ] && grep -q 'bad.conf:3:.*log_level' /tmp/cfg.out"
	printf 'log_level = debug\n' >/tmp/bad.conf
	mercuryd --config /tmp/bad.conf >/tmp/cfg.out 2>&1
	rc=$?
	expect agent/config-bare-word "an unquoted value: exit $rc ($(head -1 /tmp/cfg.out))" \
		sh -c "[ $rc = 2 ] && grep -q 'bad.conf:1:.*quoted' /tmp/cfg.out"
	mercuryd --isolate-jobs maybe >/tmp/cfg.out 2>&1
	rc=$?
	expect agent/config-isolate-jobs "isolate_jobs = maybe: exit $rc ($(head -1 /tmp/cfg.out))" \
		sh -c "[ $rc = 2 ] && grep -q 'isolate_jobs must be auto, true or false' /tmp/cfg.out"
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

# Prometheus metrics (--metrics): scraped over HTTP while a trainer runs;
# the names and types doc/operations.md lists, values that follow the job, and the
# datapath's own counters as mercuryctl stats gives them.
METRICS=/tmp/metrics.txt
metric() {	# metric NAME_AND_LABELS: its value in the last scrape
	awk -v k="$1" '$1 == k { print $2 }' $METRICS
}
metric_is() {	# metric_is NAME VALUE: scrapes, then compares
	in_ns h1 sh -c "busybox wget -q -O - http://127.0.0.1:$METRICS_PORT/metrics" >$METRICS 2>/dev/null &&
	[ "$(metric "$1")" = "$2" ]; }
has_type() { grep -q "^# TYPE $1 $2\$" $METRICS; }
test_agent_metrics() {
	local missing="" sum rank line holds rc
	topo_same_host
	$IP netns exec h1 mercuryd --socket $AGENT_SOCK --entry-ttl-ms 1500 --check-ms 200 --metrics 127.0.0.1:0 \
		2>/tmp/mercuryd-metrics.log &
	AGENT_PID=$!
	wait_for 50 grep -q 'msg="serving metrics"' /tmp/mercuryd-metrics.log
	METRICS_PORT=$(sed -n 's/.*msg="serving metrics".* port=\([0-9]*\).*/\1/p' /tmp/mercuryd-metrics.log)
	trainer --cc mercury --send-layers 0,3 --seconds 6
	wait_for 30 has_entries 4
	# One snapshot holds all of it: once it has the 4 entries, it has the job.
	wait_for 50 metric_is 'mercury_datapath_entries{kind="flow"}' 4
	expect metrics/jobs "mercury_jobs while the trainer runs: $(metric mercury_jobs)" [ "$(metric mercury_jobs)" = 1 ]
	for line in mercury_jobs:gauge mercury_flows:gauge mercury_entries:gauge mercury_pushes_total:counter \
		mercury_push_errors_total:counter mercury_push_duration_seconds:histogram \
		mercury_datapath_connected:gauge mercury_datapath_entries:gauge mercury_datapath_holds_total:counter \
		mercury_datapath_releases_total:counter mercury_datapath_delay_yields_total:counter \
		mercury_datapath_loss_events_total:counter mercury_datapath_recoveries_total:counter \
		mercury_datapath_starvation_grants_total:counter mercury_job_iteration:gauge \
		mercury_learned_layer_seconds:summary; do
		has_type "${line%%:*}" "${line#*:}" || missing="$missing $line"
	done
	expect metrics/names-and-types "missing:${missing:- none}" [ -z "$missing" ]
	sum=""
	for rank in 0 1 2 3 4 5 6 7; do sum="$sum$(metric "mercury_flows{rank=\"$rank\"}") "; done
	expect metrics/flows-by-rank "connections by rank 0..7: $sum" [ "$sum" = "1 0 1 0 1 0 1 0 " ]
	expect metrics/datapath-entries "connected $(metric mercury_datapath_connected), flow entries $(metric 'mercury_datapath_entries{kind="flow"}')" \
		[ "$(metric mercury_datapath_connected)" = 1 -a "$(metric 'mercury_datapath_entries{kind="flow"}')" = 4 ]
	expect metrics/pushes "pushes $(metric mercury_pushes_total), timed $(metric mercury_push_duration_seconds_count)" \
		[ "$(metric mercury_pushes_total)" -ge 4 -a "$(metric mercury_pushes_total)" = "$(metric mercury_push_duration_seconds_count)" ]
	line=$(grep '^mercury_learned_layer_seconds_count{.*pass="forward"' $METRICS)
	expect metrics/learned "forward layers timed: $line" sh -c "echo '$line' | grep -q 'job=\"test\".* 4\$'"
	wait "$TRAINER_PID"
	# Once the flows are gone the datapath's counters stand still: the
	# metric is what mercuryctl stats says.
	holds=$(stat_of h1 holds)
	wait_for 50 metric_is mercury_datapath_holds_total "$holds"
	expect metrics/datapath-holds "holds: mercuryctl stats $holds, metric $(metric mercury_datapath_holds_total)" \
		[ "$(metric mercury_datapath_holds_total)" = "$holds" ]
	expect metrics/holds-counted "holds $(metric mercury_datapath_holds_total) while rank 0 ran beside rank 6" \
		[ "$(metric mercury_datapath_holds_total)" -ge 1 ]
	$IP netns exec h1 mercuryd --socket /run/mercury-test2.sock --metrics "127.0.0.1:$METRICS_PORT" >/tmp/metrics-busy.out 2>&1
	rc=$?
	expect metrics/port-taken "second agent on the same port: exit $rc, $(grep -o 'reason=.*' /tmp/metrics-busy.out)" \
		sh -c "[ $rc = 1 ] && grep -q 'cannot serve metrics on 127.0.0.1:$METRICS_PORT' /tmp/metrics-busy.out"
	rm -f /run/mercury-test2.sock
	mercuryd --metrics 127.0.0.1:99999 >/tmp/metrics-bad.out 2>&1
	rc=$?
	expect metrics/bad-address "port 99999: exit $rc ($(head -1 /tmp/metrics-bad.out))" \
		sh -c "[ $rc = 2 ] && grep -q 'metrics port' /tmp/metrics-bad.out"
	agent_stop
}

# mercuryctl flows: every mercury socket of the netns, from sock_diag (the
# module's get_info, or the BPF program's socket storage), joined with the
# agent's registrations. Columns: local remote job id layer rank weight
# tag held holds cwnd srtt_us bytes_acked (id: the job id the datapath has).
FLOWS=/tmp/flows.txt
job_rows() { awk '$3 == "test"' $FLOWS; }
flows_now() { ctl h1 flows --socket $AGENT_SOCK >$FLOWS 2>&1; }
layer_held() {	# layer_held LAYER: flows shows it held at least once
	flows_now && [ "$(job_rows | awk -v l="$1" '$5 == l { print $10 }')" -ge 1 ]
}
test_agent_flows() {
	local ranks unsent
	topo_same_host
	agent_start
	trainer --cc mercury --send-layers 0,3 --seconds 8
	wait_for 30 has_entries 4
	flows_now
	expect flows/listed "sockets the agent knows as job test: $(job_rows | wc -l)" [ "$(job_rows | wc -l)" = 4 ]
	# Layers 1 and 2 send nothing: their sockets have not looked up a rank
	# yet ("-"); the sending ones run at theirs.
	ranks=$(job_rows | awk '{ print $5 ":" $6 }' | sort -n | tr '\n' ' ')
	expect flows/layers-and-ranks "layer:rank $ranks" \
		sh -c "echo '$ranks' | grep -Eq '^0:0 1:[-2] 2:[-4] 3:6 \$'"
	expect flows/tcp-info "cwnd of every one > 0: $(job_rows | awk '{ printf "%s ", $11 }')" \
		[ -z "$(job_rows | awk '$11 < 1')" ]
	# Layer 3 (rank 6) sends beside layer 0 (rank 0): held, and counted.
	wait_for 50 layer_held 3
	expect flows/held-counted "layer 3's holds: $(job_rows | awk '$5 == 3 { print $10 }')" layer_held 3
	unsent=$(job_rows | awk '($5 == 0 || $5 == 3) && $13 < 1')
	expect flows/bytes-acked "layers 0 and 3 have bytes acked${unsent:+: not $unsent}" [ -z "$unsent" ]
	ctl h1 --json flows --socket $AGENT_SOCK >/tmp/flows.json 2>&1
	expect flows/json "4 objects of job test: $(grep -o '"job":"test"' /tmp/flows.json | wc -l)" \
		sh -c '[ "$(grep -o "\"job\":\"test\"" /tmp/flows.json | wc -l)" = 4 ] && grep -q "\"layer\":3," /tmp/flows.json'
	ctl h1 top --count 2 --interval-ms 100 --socket $AGENT_SOCK >/tmp/top.txt 2>&1
	expect flows/top "two refreshes: $(grep -c 'local .*remote' /tmp/top.txt) headers" \
		[ "$(grep -c 'local .*remote' /tmp/top.txt)" = 2 ]
	wait "$TRAINER_PID"
	agent_stop
}

AGENT_TESTS="agent_priorities agent_restart agent_sigterm agent_config agent_many_fds agent_metrics agent_flows"
