# SPDX-License-Identifier: GPL-2.0
# check_job_yields.awk -v job=J [-v window_us=W] TRACE
#
# Reads a `mercury-probe trace` of one host (tests/tools/mercury_probe.cpp)
# and checks the rule of cc_core.h (mercury_other_job_active): a flow of job
# J backs off on delay only while no other job has had a ranked flow with
# data out on this host within the job window (MERCURY_JOB_WINDOW_MIN_US,
# 100 ms, at this test's RTTs). A back-off shows in the trace as a change
# of the flow's last_backoff_us while it stays in Open (a loss's cut comes
# with Recovery, CWR or Loss). Another job's activity: a segment its ranked
# flow takes with data still to send (the CC stamps the job active as it
# processes that ACK).
#
# Prints one line: "yields=N beside=B first_ms=F other_first_ms=O lost=L worst=..."
#   N  back-offs of job J's flows (counted with the CC's own delay_backoffs)
#   B  of those, taken while another job's flow had been active less than
#      window_us before (the rule says 0)
#   F, O  when job J's and the other jobs' flows first took a segment, ms
#      from the trace's start (yields before O were alone on the host)
#   L  records the probe had no room for ("-": the trace did not end
#      cleanly); a trace with gaps proves nothing
#   worst  the back-off beside another job with the shortest gap
# Times are the trace's (bpf_ktime_get_ns, µs); window_us defaults to 90 ms,
# the job window less a margin for the CC's 100 µs stamp granularity and
# the moment between the tracepoint and the hook.
BEGIN {
	if (window_us == "")
		window_us = 90000
	rank_none = 8
}
/^# t_us / {
	for (i = 2; i <= NF; i++)
		col[$i] = i - 1
	next
}
/^# lost=/ {
	lost = substr($2, 6)
	next
}
/^[0-9]/ && ("t_us" in col) {
	t = $col["t_us"]
	if (t0 == "")
		t0 = t
	sp = $col["sport"]
	if ($col["kind"] == "state") {
		changed[sp] = 1
		next
	}
	if ($col["job"] == job) {
		if (first == "")
			first = t
		lb = $col["last_backoff_us"]
		st = $col["ca_state"]
		if ((sp in prev_lb) && lb != prev_lb[sp] && st == 0 && prev_st[sp] == 0 && !changed[sp]) {
			yields++
			if (other != "" && t - other < window_us) {
				beside++
				if (worst == "" || t - other < worst) {
					worst = t - other
					worst_at = t
				}
			}
		}
		prev_lb[sp] = lb
		prev_st[sp] = st
		changed[sp] = 0
	} else if ($col["rank"] < rank_none && ($col["packets_out"] > 0 || $col["unsent"] > 0)) {
		other = t
		if (other_first == "")
			other_first = t
	}
}
END {
	printf "yields=%d beside=%d first_ms=%s other_first_ms=%s lost=%s", yields, beside,
		first == "" ? "-" : sprintf("%.1f", (first - t0) / 1000),
		other_first == "" ? "-" : sprintf("%.1f", (other_first - t0) / 1000),
		lost == "" ? "-" : lost
	if (worst != "")
		printf " worst=%.1fms_after_the_other_job_at_%.1fms", worst / 1000, (worst_at - t0) / 1000
	printf "\n"
}
