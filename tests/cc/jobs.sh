# SPDX-License-Identifier: GPL-2.0
# Two jobs on one host: an entry's job id scopes its rank. Precedence and
# holds apply only among flows of the same job; flows of different jobs
# share by weight, and do not yield to each other's queueing delay. Sourced
# by both suites (the module in the VM, the BPF datapath natively), with
# lib.sh and agent.sh.

# jobs_handover JOB_URGENT JOB_BULK: on h1, a bulk flow (tag 13, rank 3) for
# 7 s, joined at 1.5 s by an urgent one (tag 11, rank 0) for 3 s.
jobs_handover() {
	ctl h1 tag set 11 0 --job "$1"
	ctl h1 tag set 13 3 --job "$2"
	flow h1 bulk --cc mercury --prio 13 --seconds 7 --interval-ms 100
	sleep 1.5
	flow h1 urgent --cc mercury --prio 11 --seconds 3 --interval-ms 100
	wait_flows
}

# Job 2's flow beside job 1's rank 0 is never held; within one job, it is.
test_jobs_not_held() {
	local holds
	topo_same_host
	jobs_handover 1 2
	holds=$(stat_of h1 holds)
	expect jobs/other-job-not-held "job 2's rank 3 beside job 1's rank 0: holds=$holds" [ "$holds" = 0 ]
	expect jobs/other-job-flows-ran "both flows acked data: $(result_field /tmp/flow-bulk acked) and \
$(result_field /tmp/flow-urgent acked) bytes" \
		[ "$(result_field /tmp/flow-bulk acked)" -gt 0 -a "$(result_field /tmp/flow-urgent acked)" -gt 0 ]
	ctl h1 flush
	jobs_handover 1 1
	holds=$(stat_of h1 holds)
	expect jobs/same-job-held "the same flows, both of job 1: holds=$holds" [ "$holds" -ge 1 ]
}

# jobs_pair LABEL ARGS_1 ARGS_2: two flows from host a through the router's
# queue for 8 s, tags 14 and 15 set with the given mercuryctl options (none:
# no entry, an unranked flow).
# Prints the first's share over the second's. a's delay_backoffs 6 s in,
# while both still send, go to /tmp/jobs-LABEL-backoffs (once one flow has
# ended the other's queue is its own, and it may yield to it). With
# JOBS_TRACE set, a's trace (trace_start) goes to /tmp/trace-jobs-LABEL
# (only where a check reads it: tracing costs CPU on every segment).
jobs_pair() {
	ctl a flush
	[ "$2" = none ] || ctl a tag set 14 $2
	ctl a tag set 15 $3
	[ -z "${JOBS_TRACE:-}" ] || trace_start a "/tmp/trace-jobs-$1"
	flow a "$1-1" --cc mercury --prio 14 --seconds 8 --interval-ms 100
	flow a "$1-2" --cc mercury --prio 15 --seconds 8 --interval-ms 100
	sleep 6
	stat_of a delay_backoffs >"/tmp/jobs-$1-backoffs"
	wait_flows
	trace_stop
	ratio "$(result_field "/tmp/flow-$1-1" acked)" "$(result_field "/tmp/flow-$1-2" acked)"
}

# The router's queue cut to 5 ms, as in fair/untagged: enough congestion
# epochs in 8 s for AIMD to settle.
jobs_router() {
	topo_incast
	$TC -n r qdisc change dev rs root tbf rate "$RATE" burst 20kb latency 5ms
}

# Rank 0 of job 1 and rank 5 of job 2, equal weights: about equal shares.
# The same two ranks in one job: rank 0 takes the link.
test_jobs_equal_split() {
	local r s c even beside control alone before
	jobs_router || { fail jobs/equal-split "could not shorten the router's queue"; return 1; }
	JOBS_TRACE=1
	r=$(jobs_pair jobs "0 --job 1" "5 --job 2")
	even=$(awk -v r="$r" 'BEGIN { printf "%.2f", (r >= 1 ? r : 1 / r) }')
	expect jobs/no-holds "holds=$(stat_of a holds)" [ "$(stat_of a holds)" = 0 ]
	# Yielding: the same rank-5 flow of job 2 beside job 1's flow, and beside
	# an unranked flow (which marks no job active: its queue is yielded to).
	# Beside job 1, every back-off is checked against the trace: job 2 may
	# yield only while job 1's flow has had no ACK with data out for the job
	# window (before it starts, in an RTO, after it ends: the queue is job
	# 2's own then). A count of back-offs cannot tell those apart from
	# yields to job 1 (an RTO of job 1's, or a slow start of its process,
	# let 20 to 79 honest ones through in loaded runs).
	before=$(stat_of a delay_backoffs)
	jobs_pair control none "5 --job 2" >/dev/null
	JOBS_TRACE=
	alone=$(($(cat /tmp/jobs-control-backoffs) - before))
	beside=$(awk -v job=2 -f check_job_yields.awk /tmp/trace-jobs-jobs)
	control=$(awk -v job=2 -f check_job_yields.awk /tmp/trace-jobs-control)
	expect jobs/no-yield-to-other-job "job 2's rank 5 beside job 1: $beside; beside an unranked flow: \
$control ($alone counted in 6 s)" \
		sh -c "echo '$beside' | grep -q ' beside=0 .* other_first_ms=[0-9.]* lost=0' &&
			echo '$control' | grep -q ' lost=0' && [ $alone -ge 10 ] &&
			[ $(echo "$control" | sed 's/^yields=\([0-9]*\).*/\1/') -ge 10 ]"
	c=$(fair_pair cubic jobs-cubic)
	s=$(jobs_pair one "0 --job 1" "5 --job 1")
	# About equal, and no less fair than two cubic flows on the same link.
	expect jobs/equal-split "job 1 rank 0 : job 2 rank 5 ${r}:1 (cubic pair ${c}:1 on the same link)" \
		awk -v r="$even" -v c="$c" 'BEGIN { exit !(r <= 2.0 || r <= 1.3 * c) }'
	expect jobs/one-job-precedence "the same ranks in one job ${s}:1" ge "$s" 4
}

# Weights 3:1 between two jobs move the split toward the heavier, once
# slow start is over (the last 4 s), on the router's 30 ms queue, as
# weights/direction measures. (On the 5 ms one the windows are a handful
# of packets and the split stays near 1:1 whatever the weights.) What a
# weight W:1 promises on a drop-tail queue is the direction, not W:1: a
# weight-W flow grows W packets an RTT and backs off by 1/(2W) (MulTCP),
# which splits about W:1 when losses land on the flows at random and W^2:1
# when both lose in the same overflow; traced over 32 runs, quiet and beside
# busy loops (experiment/bench/trace-job-weights.sh), 1.6 to 6.9:1, the
# heavier flow taking more of the losses in the low runs. Hence >= 1.3:1.
test_jobs_weights() {
	local r t0 t1 h l
	topo_incast
	jobs_pair weights "2 --job 1 --weight 48" "0 --job 2 --weight 16" >/dev/null
	t1=$(last_t /tmp/flow-weights-1)
	t0=$((t1 - 4000))
	h=$(rate /tmp/flow-weights-1 "$t0" "$t1")
	l=$(rate /tmp/flow-weights-2 "$t0" "$t1")
	r=$(ratio "$h" "$l")
	expect jobs/weights "job 1 (weight 48, rank 2) : job 2 (weight 16, rank 0), last 4 s: ${r}:1 ($h vs $l B/ms)" \
		ge "$r" 1.3
}

# jobs_count LABEL OPTS_1 OPTS_2: five flows of tag 14 and one of tag 15
# (both rank 0: neither holds nor yields) from a through the router's 30 ms
# queue for 14 s, tags set with the given mercuryctl options. Prints the
# five flows' rate over the one's, over the last 10 s (after slow start).
# One flow's share of this queue swings widely even over 10 s (three flows
# against one came out anywhere from 1.9:1 to 4.6:1 with no job): five
# against one keeps per flow and per job far apart. a's job_cuts during the
# run go to /tmp/jobs-LABEL-cuts.
jobs_count() {
	local i t0 t1 many one cuts
	ctl a flush
	cuts=$(stat_of a job_cuts)
	ctl a tag set 14 0 $2
	ctl a tag set 15 0 $3
	for i in 1 2 3 4 5; do
		flow a "$1-$i" --cc mercury --prio 14 --seconds 14 --interval-ms 100
	done
	flow a "$1-6" --cc mercury --prio 15 --seconds 14 --interval-ms 100
	wait_flows
	echo $(($(stat_of a job_cuts) - cuts)) >"/tmp/jobs-$1-cuts"
	t1=$(last_t "/tmp/flow-$1-6")
	t0=$((t1 - 10000))
	for i in 1 2 3 4 5 6; do rate "/tmp/flow-$1-$i" "$t0" "$t1"; echo; done >"/tmp/jobs-$1-rates"
	many=$(awk 'NR <= 5 { s += $1 } END { printf "%.1f", s }' "/tmp/jobs-$1-rates")
	one=$(sed -n 6p "/tmp/jobs-$1-rates")
	ratio "$many" "$one"
}
rates_of() { tr '\n' ' ' <"/tmp/jobs-$1-rates"; }	# rates_of LABEL: B/ms of each flow

# Shares go per job, not per flow: job 1's five flows against job 2's one
# come out near 1:1; the same six flows with no job, near 5:1. Job 1's
# flows back off together (job_cuts); flows with no job never do.
test_jobs_flow_count() {
	local jobs nojob moved
	topo_incast
	jobs=$(jobs_count count "--job 1" "--job 2")
	nojob=$(jobs_count control "" "")
	# A ratio means something only if every flow moved data (0:0 would pass).
	moved=$(cat /tmp/jobs-count-rates /tmp/jobs-control-rates | awk '$1 > 0 { n++ } END { print n + 0 }')
	expect jobs/per-job-share "job 1's 5 flows : job 2's 1 flow ${jobs}:1 ($(rates_of count)B/ms); \
the same flows with no job ${nojob}:1 ($(rates_of control)B/ms); flows that moved data: $moved of 12" \
		awk -v j="$jobs" -v n="$nojob" -v m="$moved" 'BEGIN { exit !(m == 12 && j <= 2.5 && j <= 0.6 * n) }'
	expect jobs/cuts-followed "job_cuts: $(cat /tmp/jobs-count-cuts) with jobs, $(cat /tmp/jobs-control-cuts) with no job" \
		[ "$(cat /tmp/jobs-count-cuts)" -ge 1 -a "$(cat /tmp/jobs-control-cuts)" = 0 ]
}

# Out-of-range job ids are refused with the bounds, and change nothing.
test_jobs_bad_input() {
	topo_same_host
	ctl h1 tag set 20 1 --job 16 >/tmp/jobs-range.out 2>&1
	local rc=$?
	expect jobs/range "job 16: exit $rc, $(head -1 /tmp/jobs-range.out)" \
		sh -c "[ $rc = 1 ] && grep -q '0\.\.15' /tmp/jobs-range.out"
	expect jobs/range-unchanged "entries after the refusal: $(ctl h1 dump | grep -c '^tag ')" \
		[ "$(ctl h1 dump | grep -c '^tag ')" = 0 ]
	ctl h1 tag set 20 1 --job 15
	local line
	line=$(ctl h1 dump | grep '^tag 20 ')
	expect jobs/dump-shows-job "$line" sh -c "echo '$line' | grep -q ' job 15\$'"
}

# jobs_trainer NAME SECONDS: a trainer of job NAME (four layers, ranks 0, 2,
# 4, 6) under the agent of h1; output in /tmp/trainer-NAME.out.
jobs_trainer() {
	MERCURY_SOCKET=$AGENT_SOCK $IP netns exec h1 mercury-trainer run --job "$1" --connect "$SERVER" \
		--forward-us 1000,1000,1000,1000 --cc mercury --send-layers 0 --seconds "$2" \
		>"/tmp/trainer-$1.out" 2>&1 &
}
entries_of_job() { ctl h1 dump | grep -c "^flow .* job $1\$"; }
job_entries_are() { [ "$(entries_of_job "$1")" = "$2" ]; }
distinct_job_ids() {
	[ -n "$1" ] && [ -n "$2" ] && [ "$1" != "$2" ] &&
		[ "$1" -ge 1 ] && [ "$1" -le 15 ] && [ "$2" -ge 1 ] && [ "$2" -le 15 ]
}
weights_of_job() {	# the weights of job ID's flow entries, sorted, on one line
	ctl h1 dump | awk -v j="$1" '/^flow/ && $NF == j { print $6 }' | sort -n | tr '\n' ' '
}
entries_with_a_job() { [ "$(ctl h1 dump | grep -c '^flow .* job [0-9]*$')" = "$1" ]; }
weights_of_job_none() {	# the weights of the flow entries without a job id, as weights_of_job
	ctl h1 dump | awk '/^flow/ && $(NF - 1) != "job" { print $6 }' | sort -n | tr '\n' ' '
}

# With isolate_jobs = auto (the default), mercuryd gives each job its own id
# while two jobs run: two jobs' entries carry two ids; a job's weight scales
# its entries' weights; a job's entries go when its trainer exits, and the
# job left alone goes back to no id (it pays nothing for isolation). With
# isolate_jobs = true a job alone keeps its id.
test_jobs_agent() {
	local alpha beta ids
	topo_same_host
	agent_start
	jobs_trainer alpha 14
	alpha=$!
	jobs_trainer beta 8
	beta=$!
	wait_for 80 entries_with_a_job 8
	ids=$(mercuryctl --json status --socket $AGENT_SOCK | grep -o '"job":"[a-z]*","job_id":[0-9]*')
	local a b
	a=$(echo "$ids" | sed -n 's/.*"alpha","job_id":\([0-9]*\).*/\1/p')
	b=$(echo "$ids" | sed -n 's/.*"beta","job_id":\([0-9]*\).*/\1/p')
	expect jobs/agent-ids "alpha has job id $a, beta $b" distinct_job_ids "$a" "$b"
	expect jobs/agent-entries "4 entries of job $a, 4 of job $b" sh -c "[ $(entries_of_job "$a") = 4 ] && [ $(entries_of_job "$b") = 4 ]"
	# Weight 3 for alpha: its entries' weights triple; beta's stay.
	local before after other
	before=$(weights_of_job "$a")
	other=$(weights_of_job "$b")
	mercuryctl job set alpha --weight 3 --socket $AGENT_SOCK >/dev/null
	after=$(weights_of_job "$a")
	expect jobs/weight-scales "alpha's entry weights $before-> $after" \
		[ -n "$before" -a "$after" = "$(echo $before | awk '{ for (i = 1; i <= NF; i++) printf "%d ", 3 * $i }')" ]
	expect jobs/weight-others-kept "beta's $other-> $(weights_of_job "$b")" [ "$(weights_of_job "$b")" = "$other" ]
	ctl h1 flows --socket $AGENT_SOCK >/tmp/flows-jobs.txt 2>&1
	# Layer 0 sends, so its socket has looked its entry up (the others have
	# not since they registered: they show the id of no entry, 0).
	local id
	id=$(awk '$3 == "alpha" && $5 == 0 { print $4 }' /tmp/flows-jobs.txt)
	expect jobs/flows-show-id "flows shows alpha's layer 0 socket with job id $id" [ "$id" = "$a" ]
	wait "$beta"
	wait_for 50 job_entries_are "$b" 0
	expect jobs/exited-withdrawn "beta exited: $(entries_of_job "$b") entries of job $b left" job_entries_are "$b" 0
	wait_for 50 entries_with_a_job 0
	expect jobs/auto-alone-no-id "alpha alone: $(flow_entries) entries, $(ctl h1 dump | grep -c '^flow .* job [0-9]*$') with a job id" \
		sh -c "[ $(flow_entries) = 4 ] && [ $(ctl h1 dump | grep -c '^flow .* job [0-9]*$') = 0 ]"
	expect jobs/auto-alone-weight-kept "alpha's entry weights alone: $(weights_of_job_none)" \
		[ "$(weights_of_job_none)" = "$after" ]
	wait "$alpha"
	wait_for 50 has_entries 0
	expect jobs/last-withdrawn "alpha exited: $(flow_entries) entries left" has_entries 0
	agent_stop
	agent_start --isolate-jobs true
	jobs_trainer alpha 3
	alpha=$!
	wait_for 80 entries_with_a_job 4
	expect jobs/isolate-alone-id "isolate_jobs = true, alpha alone: $(ctl h1 dump | grep -c '^flow .* job [0-9]*$') entries with a job id" \
		entries_with_a_job 4
	wait "$alpha"
	agent_stop
}

JOBS_TESTS="jobs_not_held jobs_equal_split jobs_weights jobs_flow_count jobs_bad_input jobs_agent"
