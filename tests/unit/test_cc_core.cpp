// SPDX-License-Identifier: GPL-2.0
// The congestion-control core (include/mercury/cc_core.h) as the module
// compiles it, checked on hand-computed cases.
#include <catch2/catch.hpp>

extern "C" {
#include "mercury/cc_core.h"
}

TEST_CASE("slow start grows by acked packets up to ssthresh", "[core]")
{
    mercury_window w{10, 100, 0};
    mercury_increase(&w, 5, MERCURY_WEIGHT_UNIT, 1, 10000);
    CHECK(w.cwnd == 15);
    mercury_increase(&w, 200, MERCURY_WEIGHT_UNIT, 1, 10000);
    CHECK(w.cwnd >= 100);   // reached ssthresh, leftover went to AI
    CHECK(w.cwnd <= 102);
}

TEST_CASE("additive increase is weight/UNIT packets per window", "[core]")
{
    for (uint32_t weight : {4u, 16u, 64u}) {
        mercury_window w{100, 50, 0};
        // Ten round trips: each acks the window it started with, one at a time.
        for (int rtt = 0; rtt < 10; ++rtt) {
            const __u32 window = w.cwnd;
            for (__u32 i = 0; i < window; ++i)
                mercury_increase(&w, 1, weight, 1, 100000);
        }
        const double per_rtt = (w.cwnd - 100) / 10.0;
        CHECK(per_rtt == Approx(weight / 16.0).margin(0.35));
    }
}

TEST_CASE("increase never exceeds the clamp", "[core]")
{
    mercury_window w{90, 1000, 0};
    mercury_increase(&w, 500, MERCURY_WEIGHT_UNIT, 1, 100);
    CHECK(w.cwnd == 100);
}

TEST_CASE("loss backs off like Reno at unit weight, less when heavier", "[core]")
{
    CHECK(mercury_ssthresh_after_loss(100, MERCURY_WEIGHT_UNIT) == 50);
    CHECK(mercury_ssthresh_after_loss(100, 12) == 34);         // 3/4 unit: 1/(2N) = 2/3 cut
    CHECK(mercury_ssthresh_after_loss(100, 4) == 25);          // 1/4 unit: capped at a 3/4 cut
    CHECK(mercury_ssthresh_after_loss(100, 1) == 25);
    CHECK(mercury_ssthresh_after_loss(100, 64) == 88);         // 4 units: 1/8 cut
    CHECK(mercury_ssthresh_after_loss(3, MERCURY_WEIGHT_UNIT) == 2);
    CHECK(mercury_ssthresh_after_loss(0, MERCURY_WEIGHT_UNIT) == 2);
}

TEST_CASE("a flow is preempted only by a more urgent rank active within the window", "[core]")
{
    __u64 last[MERCURY_NUM_RANKS] = {};
    const __u64 now = 1'000'000;
    last[2] = now - 500;   // rank 2 active 0.5 ms ago

    CHECK(mercury_ranks_ahead(last, 3, now, 1000) > 0);    // less urgent: held
    CHECK(mercury_ranks_ahead(last, 7, now, 1000) > 0);
    CHECK(mercury_ranks_ahead(last, 2, now, 1000) == 0);   // same rank: shares
    CHECK(mercury_ranks_ahead(last, 1, now, 1000) == 0);   // more urgent: not held
    CHECK(mercury_ranks_ahead(last, MERCURY_RANK_NONE, now, 1000) == 0);  // unranked
    CHECK(mercury_ranks_ahead(last, 3, now + 600, 1000) == 0);   // rank 2 went quiet
    CHECK(mercury_ranks_ahead(last, 3, now - 100, 1000) > 0);   // stamp ahead of our clock
}

TEST_CASE("a rank whose flow ran out of data preempts nobody, until it sends again", "[core]")
{
    __u64 last[MERCURY_NUM_RANKS] = {};
    const __u64 now = 1'000'000;

    last[2] = (now - 200) | MERCURY_STAMP_IDLE;   // rank 2's flow went idle 0.2 ms ago
    CHECK(mercury_ranks_ahead(last, 3, now, 1000) == 0);   // within the window, yet quiet
    CHECK(mercury_ranks_held(last, 1, now, 1000) == 0);
    CHECK_FALSE(mercury_stamp_active(last[2], now, 1000));
    last[2] = now - 100;   // it sends again
    CHECK(mercury_ranks_ahead(last, 3, now, 1000) > 0);
    CHECK(mercury_stamp_active(last[2], now, 1000));
    last[1] = (now - 50) | MERCURY_STAMP_IDLE;   // another quiet rank changes nothing
    CHECK(mercury_ranks_ahead(last, 3, now, 1000) > 0);
}

TEST_CASE("only the held flow next in line keeps the full floor", "[core]")
{
    __u64 last[MERCURY_NUM_RANKS] = {};
    const __u64 now = 1'000'000;

    last[0] = now - 100;
    CHECK(mercury_ranks_ahead(last, 3, now, 1000) == 1);
    CHECK(mercury_held_floor(2, 1) == 2);   // next in line: its ACK clock hands over
    last[1] = now - 200;
    last[2] = (now - 50) | MERCURY_STAMP_IDLE;   // quiet: not ahead
    last[5] = now;                                // behind: not ahead
    CHECK(mercury_ranks_ahead(last, 3, now, 1000) == 2);
    CHECK(mercury_ranks_ahead(last, 0, now, 1000) == 0);
    CHECK(mercury_ranks_ahead(last, MERCURY_RANK_NONE, now, 1000) == 0);
    CHECK(mercury_held_floor(2, 2) == MERCURY_FAR_FLOOR);
    CHECK(mercury_held_floor(8, 5) == MERCURY_FAR_FLOOR);
    CHECK(mercury_held_floor(1, 5) == 1);
    CHECK(mercury_held_floor(4, 0) == 4);
}

TEST_CASE("a never-active rank preempts nobody", "[core]")
{
    __u64 last[MERCURY_NUM_RANKS] = {};
    CHECK(mercury_ranks_ahead(last, 7, 500, 1000) == 0);
}

TEST_CASE("hold window is about an RTT, bounded", "[core]")
{
    CHECK(mercury_hold_window_us(100) == MERCURY_HOLD_WINDOW_MIN_US);
    CHECK(mercury_hold_window_us(5000) == 10000);
    CHECK(mercury_hold_window_us(1'000'000) == MERCURY_HOLD_WINDOW_MAX_US);
}

TEST_CASE("hold clamps to the floor and release restores the window", "[core]")
{
    mercury_window w{80, 40, 7};
    mercury_hold_state h{};
    mercury_hold(&w, &h, 2);
    CHECK(w.cwnd == 2);
    CHECK(h.saved_cwnd == 80);
    mercury_unhold(&w, &h);
    CHECK(w.cwnd == 80);
    CHECK(w.ssthresh == 40);

    mercury_window small{1, 40, 0};
    mercury_hold(&small, &h, 2);
    CHECK(small.cwnd == 1);   // never raised by a hold
}

TEST_CASE("hold step: enter, keep at the floor, grant, release", "[core]")
{
    mercury_window w{80, 40, 7};
    mercury_hold_state h{};
    const __u64 t0 = 5'000'000;

    CHECK(mercury_hold_step(&w, &h, 0, 0, 0, t0, 1000, 2) == MERCURY_HOLD_UNCHANGED);
    CHECK(w.cwnd == 80);

    CHECK(mercury_hold_step(&w, &h, 0, 1, 0, t0, 1000, 2) == MERCURY_HOLD_ENTERED);
    CHECK(w.cwnd == 2);
    CHECK(w.ssthresh == 40);   // Open: ssthresh is not the kernel's target
    CHECK(h.saved_cwnd == 80);
    CHECK(h.held_since_us == t0);

    w.cwnd = 9;   // something else moved it
    CHECK(mercury_hold_step(&w, &h, 1, 1, 0, t0 + 1000, 1000, 2) == MERCURY_HOLD_KEPT);
    CHECK(w.cwnd == 2);
    CHECK(h.held_since_us == t0);   // the hold goes on from when it began

    // The floor grew (next in line now): a held flow never grows, so the hold
    // raises it, outside a reduction only.
    w.cwnd = 1;
    CHECK(mercury_hold_step(&w, &h, 1, 1, 0, t0 + 2000, 1000, 2) == MERCURY_HOLD_KEPT);
    CHECK(w.cwnd == 2);
    w.cwnd = 1;
    CHECK(mercury_hold_step(&w, &h, 1, 1, 1, t0 + 3000, 1000, 2) == MERCURY_HOLD_KEPT);
    CHECK(w.cwnd == 1);   // CWR/Recovery own cwnd
    CHECK(mercury_hold_step(&w, &h, 1, 1, 0, t0 + 4000, 1000, 1) == MERCURY_HOLD_KEPT);
    CHECK(w.cwnd == 1);

    // Still preempted after max_hold: the starvation guard lets it go.
    CHECK(mercury_hold_step(&w, &h, 1, 1, 0, t0 + 1'000'000, 1000, 2) == MERCURY_HOLD_GRANTED);
    CHECK(w.cwnd == 80);

    CHECK(mercury_hold_step(&w, &h, 0, 1, 0, t0 + 1'125'000, 1000, 2) == MERCURY_HOLD_ENTERED);
    CHECK(mercury_hold_step(&w, &h, 1, 0, 0, t0 + 1'200'000, 1000, 2) == MERCURY_HOLD_RELEASED);
    CHECK(w.cwnd == 80);
    CHECK(h.held_since_us == 0);
}

TEST_CASE("hold step in CWR/Recovery: ssthresh at the floor too, restored on release", "[core]")
{
    // Recovery began before the hold: ssthresh (the kernel's PRR target, and
    // cwnd when the reduction ends) came from the full window.
    mercury_window w{60, 30, 0};
    mercury_hold_state h{};
    const __u64 t0 = 7'000'000;

    CHECK(mercury_hold_step(&w, &h, 0, 1, 1, t0, 1000, 2) == MERCURY_HOLD_ENTERED);
    CHECK(w.cwnd == 2);
    CHECK(w.ssthresh == 2);
    CHECK(h.saved_ssthresh == 30);

    // PRR raised cwnd again; the next ACK puts both back.
    w.cwnd = 17;
    w.ssthresh = 2;
    CHECK(mercury_hold_step(&w, &h, 1, 1, 1, t0 + 100, 1000, 2) == MERCURY_HOLD_KEPT);
    CHECK(w.cwnd == 2);
    CHECK(h.saved_ssthresh == 30);   // the first value is the one to restore

    // Undo restored a large ssthresh while held: clamped again in reduction.
    w.ssthresh = 45;
    CHECK(mercury_hold_step(&w, &h, 1, 1, 1, t0 + 200, 1000, 2) == MERCURY_HOLD_KEPT);
    CHECK(w.ssthresh == 2);
    CHECK(h.saved_ssthresh == 30);

    CHECK(mercury_hold_step(&w, &h, 1, 0, 1, t0 + 300, 1000, 2) == MERCURY_HOLD_RELEASED);
    CHECK(w.cwnd == 60);
    CHECK(w.ssthresh == 30);
    CHECK(h.saved_ssthresh == 0);

    // A held flow that entered recovery already small keeps its ssthresh.
    mercury_window small{2, 2, 0};
    mercury_hold_state hs{};
    CHECK(mercury_hold_step(&small, &hs, 0, 1, 1, t0, 1000, 2) == MERCURY_HOLD_ENTERED);
    CHECK(small.ssthresh == 2);
    CHECK(hs.saved_ssthresh == 0);
}

TEST_CASE("a loss while held cuts the saved window, not the floor", "[core]")
{
    mercury_window w{84, 49, 0};
    mercury_hold_state h{};
    const __u64 t0 = 9'000'000;

    CHECK(mercury_hold_step(&w, &h, 0, 1, 0, t0, 1000, 2) == MERCURY_HOLD_ENTERED);
    // The kernel enters recovery and asks for ssthresh: the floor while held.
    w.ssthresh = mercury_held_loss(&h, MERCURY_WEIGHT_UNIT, 2);
    CHECK(w.ssthresh == 2);
    CHECK(h.saved_cwnd == 42);   // Reno's cut of the window it comes back to
    CHECK(h.saved_ssthresh == 42);
    // PRR took cwnd to the floor; released inside recovery, the flow gets the
    // cut window back, and recovery ends at it instead of at 2.
    CHECK(mercury_hold_step(&w, &h, 1, 1, 1, t0 + 100, 1000, 2) == MERCURY_HOLD_KEPT);
    CHECK(mercury_hold_step(&w, &h, 1, 0, 1, t0 + 200, 1000, 2) == MERCURY_HOLD_RELEASED);
    CHECK(w.cwnd == 42);
    CHECK(w.ssthresh == 42);

    // A saved window at the floor already stays there.
    mercury_hold_state tiny{0, 2, 0};
    CHECK(mercury_held_loss(&tiny, MERCURY_WEIGHT_UNIT, 4) == 2);
}

TEST_CASE("a hold leak is a held flow above the floor outside a reduction", "[core]")
{
    const mercury_window at_floor{2, 2, 0};
    const mercury_window above{40, 2, 0};
    CHECK_FALSE(mercury_hold_leaked(&at_floor, 1, 0, 2));
    CHECK(mercury_hold_leaked(&above, 1, 0, 2));        // e.g. a reduction ended at an old ssthresh
    CHECK_FALSE(mercury_hold_leaked(&above, 1, 1, 2));  // PRR sets cwnd during the reduction
    CHECK_FALSE(mercury_hold_leaked(&above, 0, 0, 2));  // not held: any window is the flow's own

    // Without the ssthresh clamp, the end of a reduction that began before
    // the hold (cwnd = ssthresh) would leak; with it, it cannot.
    mercury_window w{60, 30, 0};
    mercury_hold_state h{};
    mercury_hold_step(&w, &h, 0, 1, 1, 1'000'000, 1000, 2);
    w.cwnd = w.ssthresh;    // tcp_end_cwnd_reduction()
    CHECK_FALSE(mercury_hold_leaked(&w, 1, 0, 2));
}

TEST_CASE("starvation guard: grace of max_hold/8 after every max_hold", "[core]")
{
    const __u64 since = 10'000'000;
    CHECK_FALSE(mercury_in_grace(since, since + 999'000, 1000));
    CHECK(mercury_in_grace(since, since + 1'000'000, 1000));
    CHECK(mercury_in_grace(since, since + 1'124'000, 1000));
    CHECK_FALSE(mercury_in_grace(since, since + 1'125'000, 1000));   // next period
    CHECK(mercury_in_grace(since, since + 2'250'000 + 1'000'000, 1000));
    CHECK_FALSE(mercury_in_grace(since, since - 5, 1000));
    CHECK_FALSE(mercury_in_grace(since, since + 5'000'000, 0));   // disabled
}

TEST_CASE("starvation guard keeps granting after hours of continuous holding", "[core]")
{
    // Past 2^32 us (71.6 min) of holding the guard must still cycle: every
    // period of max_hold + max_hold/8 has a grace at its end.
    const __u64 since = 10'000'000;
    for (const __u32 max_hold_ms : {10u, 1000u, 60000u}) {
        const __u64 period = max_hold_ms * 1125ull;
        for (const __u64 periods : {3'817ull * 1'000'000 / period, 1ull << 32, 10ull << 32}) {
            const __u64 start = since + periods * period;
            CHECK_FALSE(mercury_in_grace(since, start, max_hold_ms));
            CHECK_FALSE(mercury_in_grace(since, start + max_hold_ms * 1000ull - 1, max_hold_ms));
            CHECK(mercury_in_grace(since, start + max_hold_ms * 1000ull, max_hold_ms));
            CHECK(mercury_in_grace(since, start + period - 1, max_hold_ms));
        }
    }
}

TEST_CASE("a window the kernel would WARN about, or turn into one, is put back", "[core][windows]")
{
    CHECK(mercury_window_ok(1));
    CHECK(mercury_window_ok(MERCURY_WINDOW_MAX));   // TCP_INFINITE_SSTHRESH
    CHECK_FALSE(mercury_window_ok(0));
    CHECK_FALSE(mercury_window_ok(0x80000000U));    // negative as PRR's int
    CHECK(mercury_window_clamp(0) == 1);
    CHECK(mercury_window_clamp(0xffffffffU) == MERCURY_WINDOW_MAX);
    CHECK(mercury_window_clamp(17) == 17);

    // Outside a reduction: from the window there is.
    mercury_window w{40, 0, 0};
    CHECK(mercury_repair_window(&w, MERCURY_WEIGHT_UNIT, 80, 0));
    CHECK(w.ssthresh == 20);   // what ssthresh() returns for 40
    CHECK(w.cwnd == 40);       // a good cwnd stays
    CHECK_FALSE(mercury_repair_window(&w, MERCURY_WEIGHT_UNIT, 80, 0));
    // In one: from the window the reduction began at, not PRR's since.
    mercury_window shrunk{3, 0, 0};
    CHECK(mercury_repair_window(&shrunk, MERCURY_WEIGHT_UNIT, 80, 1));
    CHECK(shrunk.ssthresh == 40);
    CHECK(shrunk.cwnd == 3);
    mercury_window garbage{40, 0x90000000U, 0};
    CHECK(mercury_repair_window(&garbage, MERCURY_WEIGHT_UNIT, 0, 1));   // no prior window: the one there is
    CHECK(garbage.ssthresh == 20);
    // cwnd 0 in a reduction: one packet (PRR sets it next); outside, after
    // an undo, the window before the reduction.
    mercury_window zero{0, 0, 0};
    CHECK(mercury_repair_window(&zero, MERCURY_WEIGHT_UNIT, 0, 1));
    CHECK(zero.cwnd == 1);
    CHECK(zero.ssthresh == 2);
    mercury_window undone{0, 30, 0};
    CHECK(mercury_repair_window(&undone, MERCURY_WEIGHT_UNIT, 24, 0));
    CHECK(undone.cwnd == 24);
    CHECK(undone.ssthresh == 30);
    mercury_window negative{0xfffffff0U, 30, 0};
    CHECK(mercury_repair_window(&negative, MERCURY_WEIGHT_UNIT, 0, 0));
    CHECK(negative.cwnd == 1);
    CHECK(negative.ssthresh == 30);
}

TEST_CASE("precedence is per job: another job's urgent rank holds nobody", "[core][jobs]")
{
    // As both datapaths keep it: one row of activity stamps per job.
    __u64 last[MERCURY_NUM_JOBS][MERCURY_NUM_RANKS] = {};
    const __u64 now = 1'000'000;
    last[1][0] = now - 100;   // job 1's rank 0 is sending

    CHECK(mercury_ranks_ahead(last[1], 5, now, 1000) > 0);         // job 1's rank 5: held
    CHECK(mercury_ranks_ahead(last[2], 5, now, 1000) == 0);   // job 2's rank 5: not
    CHECK(mercury_ranks_ahead(last[MERCURY_JOB_NONE], 5, now, 1000) == 0);   // nor a flow with no job
    CHECK(mercury_ranks_held(last[1], 0, now + 1, 1000) == 0);
    last[2][6] = now - 100;
    CHECK(mercury_ranks_held(last[2], 3, now, 1000) > 0);   // job 2's rank 3 holds its rank 6
    CHECK(mercury_ranks_held(last[1], 3, now, 1000) == 0);  // but not in job 1
}

TEST_CASE("another job sending from this host is seen within the window", "[core][jobs]")
{
    __u64 job_active[MERCURY_NUM_JOBS] = {};
    const __u64 now = 5'000'000;
    CHECK_FALSE(mercury_other_job_active(job_active, 1, now, 1000));   // nobody
    job_active[1] = now - 10;
    CHECK_FALSE(mercury_other_job_active(job_active, 1, now, 1000));   // only itself
    CHECK(mercury_other_job_active(job_active, 2, now, 1000));
    CHECK(mercury_other_job_active(job_active, MERCURY_JOB_NONE, now, 1000));
    job_active[1] = now - 1000;                                         // out of the window
    CHECK_FALSE(mercury_other_job_active(job_active, 2, now, 1000));
    job_active[MERCURY_JOB_NONE] = now + 5;                             // a stamp ahead of our clock
    CHECK(mercury_other_job_active(job_active, 2, now, 1000));
}

TEST_CASE("another job counts as sending for an RTT, and never less than 100 ms", "[core][jobs]")
{
    CHECK(mercury_job_window_us(2'000) == 100'000);
    CHECK(mercury_job_window_us(MERCURY_HOLD_WINDOW_MAX_US) == MERCURY_HOLD_WINDOW_MAX_US);
}

TEST_CASE("a job's flow yields to delay for max_hold at a stretch, then gets max_hold/8", "[core][jobs]")
{
    __u64 since = 0;
    const __u64 t0 = 50'000'000;
    CHECK_FALSE(mercury_yield_allowed(&since, 0, t0, 1000));   // no delay: nothing to yield to
    CHECK(since == 0);
    CHECK(mercury_yield_allowed(&since, 1, t0, 1000));         // a run of delay begins
    CHECK(since == t0);
    CHECK(mercury_yield_allowed(&since, 1, t0 + 999'000, 1000));
    CHECK_FALSE(mercury_yield_allowed(&since, 1, t0 + 1'000'000, 1000));   // grace: keeps its window
    CHECK_FALSE(mercury_yield_allowed(&since, 1, t0 + 1'124'000, 1000));
    CHECK(mercury_yield_allowed(&since, 1, t0 + 1'125'000, 1000));         // next period
    // Hours of another job's queue: the grace still comes back.
    CHECK_FALSE(mercury_yield_allowed(&since, 1, t0 + (10ull << 32) * 1'125'000 + 1'000'000, 1000));
    // One sample without delay ends the run; the next starts afresh.
    CHECK_FALSE(mercury_yield_allowed(&since, 0, t0 + 1'130'000, 1000));
    CHECK(since == 0);
    CHECK(mercury_yield_allowed(&since, 1, t0 + 2'000'000, 1000));
    CHECK(since == t0 + 2'000'000);
}

TEST_CASE("delay thresholds: rank 0 never yields, less urgent ranks yield sooner", "[core]")
{
    CHECK(mercury_delay_threshold_us(0, 1000) == 0);
    CHECK(mercury_delay_threshold_us(1, 1000) == 1000);
    CHECK(mercury_delay_threshold_us(7, 1000) == 142);
    CHECK(mercury_delay_threshold_us(MERCURY_RANK_NONE, 1000) == 0);
    CHECK(mercury_delay_threshold_us(3, 0) == 0);

    CHECK(mercury_should_yield(3, 2000, 500, 1000));
    CHECK_FALSE(mercury_should_yield(3, 1000, 500, 1000));
    CHECK_FALSE(mercury_should_yield(0, 50000, 500, 1000));
    CHECK_FALSE(mercury_should_yield(3, 50000, 0, 1000));   // no base RTT yet
}

TEST_CASE("a job's sending flows are counted afresh every epoch", "[core][jobs]")
{
    mercury_job_census census{};
    __u32 seen[4] = {};
    const __u64 t0 = 7'000'000;
    const __u32 epoch = 2000;

    CHECK(mercury_job_census_count(&census, &seen[0], t0, epoch) == 1);
    CHECK(mercury_job_census_count(&census, &seen[0], t0 + 10, epoch) == 1);   // counts once
    CHECK(mercury_job_census_count(&census, &seen[1], t0 + 20, epoch) == 2);
    CHECK(mercury_job_census_count(&census, &seen[2], t0 + 30, epoch) == 3);
    // Next epoch: the first flow sees the whole last epoch's count.
    CHECK(mercury_job_census_count(&census, &seen[0], t0 + epoch, epoch) == 3);
    CHECK(mercury_job_census_count(&census, &seen[1], t0 + epoch + 5, epoch) == 3);
    // Flow 2 stopped: one epoch later the job has two flows here.
    CHECK(mercury_job_census_count(&census, &seen[0], t0 + 2 * epoch, epoch) == 2);
    // Nobody sent for two epochs: the count starts from nothing, not from 2.
    CHECK(mercury_job_census_count(&census, &seen[3], t0 + 5 * epoch, epoch) == 1);
    // A stamp from another CPU slightly behind ours rolls nothing back.
    CHECK(mercury_job_census_count(&census, &seen[0], t0 + 5 * epoch - 1, epoch) == 2);
    // Capped: a job with many flows here counts as MERCURY_JOB_MAX_FLOWS.
    mercury_job_census crowd{};
    __u32 many[MERCURY_JOB_MAX_FLOWS + 4] = {};
    __u32 n = 0;
    for (auto &s : many)
        n = mercury_job_census_count(&crowd, &s, t0, epoch);
    CHECK(n == MERCURY_JOB_MAX_FLOWS);
}

TEST_CASE("each of n flows of a job grows by weight/n", "[core][jobs]")
{
    // From 100 packets in congestion avoidance, one ACK at a time: how many
    // ACKs the first +1 takes. A whole flow: a window's worth (100).
    auto acks_per_packet = [](__u32 flows) {
        mercury_window w{100, 100, 0};
        __u32 acks = 0;
        while (w.cwnd == 100) {
            mercury_increase(&w, 1, MERCURY_WEIGHT_UNIT, flows, 1'000'000);
            acks++;
        }
        return acks;
    };
    CHECK(acks_per_packet(1) == 100);
    CHECK(acks_per_packet(2) == 200);
    CHECK(acks_per_packet(3) == 300);
    CHECK(acks_per_packet(0) == 100);                                   // no job share: a whole flow
    CHECK(acks_per_packet(1000) == 100 * MERCURY_JOB_MAX_FLOWS);        // capped
}

TEST_CASE("a job's flows follow each loss cut of the job once, while it is fresh", "[core][jobs]")
{
    mercury_job_census census{};
    __u32 seen = 0, last = 0;
    const __u64 t0 = 9'000'000;
    const __u32 window = 2000, srtt = 800;
    CHECK_FALSE(mercury_job_cut_due(&census, &seen, &last, t0, window, srtt));          // no cut yet
    census.cut_us = t0;
    CHECK(mercury_job_cut_due(&census, &seen, &last, t0 + 100, window, srtt));
    CHECK(last == static_cast<__u32>(t0 + 100));
    CHECK_FALSE(mercury_job_cut_due(&census, &seen, &last, t0 + 200, window, srtt));    // once per cut
    census.cut_us = t0 + 500;
    __u32 own = static_cast<__u32>(census.cut_us), own_last = own;                        // the flow that made it
    CHECK_FALSE(mercury_job_cut_due(&census, &own, &own_last, t0 + 600, window, srtt));
    // Another cut within an RTT of the last back-off: not followed (once an RTT).
    CHECK_FALSE(mercury_job_cut_due(&census, &seen, &last, t0 + 600, window, srtt));
    CHECK(last == static_cast<__u32>(t0 + 100));
    census.cut_us = t0 + 1000;
    CHECK(mercury_job_cut_due(&census, &seen, &last, t0 + 1000, window, srtt));          // an RTT later: yes
    census.cut_us = t0 + 2000;
    CHECK_FALSE(mercury_job_cut_due(&census, &seen, &last, t0 + 4000, window, srtt));   // stale: not followed
    CHECK_FALSE(mercury_job_cut_due(&census, &seen, &last, t0 + 4001, window, srtt));
    CHECK(last == static_cast<__u32>(t0 + 1000));

    mercury_window w{100, 200, 7};
    mercury_job_cut(&w, MERCURY_WEIGHT_UNIT);
    CHECK(w.cwnd == 50);
    CHECK(w.ssthresh == 50);
    CHECK(w.cnt == 0);
    mercury_window heavy{100, 200, 7};
    mercury_job_cut(&heavy, 4 * MERCURY_WEIGHT_UNIT);                     // as its own loss would
    CHECK(heavy.cwnd == mercury_ssthresh_after_loss(100, 4 * MERCURY_WEIGHT_UNIT));
}

TEST_CASE("yield halves but keeps the floor", "[core]")
{
    mercury_window w{40, 100, 3};
    mercury_yield(&w, 2);
    CHECK(w.cwnd == 20);
    CHECK(w.ssthresh == 20);
    mercury_window tiny{3, 100, 0};
    mercury_yield(&tiny, 2);
    CHECK(tiny.cwnd == 2);
}

TEST_CASE("sanitize repairs windows the CC did not set", "[core]")
{
    mercury_window ok{10, 20, 0};
    CHECK_FALSE(mercury_sanitize(&ok, 1000));

    mercury_window zero{0, 20, 0};
    CHECK(mercury_sanitize(&zero, 1000));
    CHECK(zero.cwnd == 2);

    mercury_window huge{4'000'000, 0, 0};
    CHECK(mercury_sanitize(&huge, 1000));
    CHECK(huge.cwnd == 1000);
    CHECK(huge.ssthresh == 2);
}

namespace {

// One round of @n samples of @rtt_us (snd_una past the previous round's end).
int ss_round(mercury_ss_round& r, __u32 cwnd, __u32 ssthresh, __u32 rtt_us, __u32 min_rtt_us, int n = 8)
{
    static __u32 una = 1000;
    int done = 0;
    una += 100'000;
    for (int i = 0; i < n; ++i)
        done = mercury_slow_start_done(&r, cwnd, ssthresh, rtt_us, min_rtt_us, una + i, una + 50'000);
    return done;
}

}  // namespace

TEST_CASE("slow start ends on a delay rise, as HyStart's delay test", "[core]")
{
    mercury_ss_round r{};
    // min RTT 1 ms: eta is clamped up to 4 ms.
    CHECK_FALSE(ss_round(r, 100, 0xffffffff, 4900, 1000));
    CHECK(ss_round(r, 100, 0xffffffff, 5100, 1000));
    // min RTT 80 ms: eta = 10 ms.
    CHECK_FALSE(ss_round(r, 100, 0xffffffff, 89000, 80000));
    CHECK(ss_round(r, 100, 0xffffffff, 91000, 80000));
    // min RTT 400 ms: eta clamped to 16 ms.
    CHECK(ss_round(r, 100, 0xffffffff, 417000, 400000));
    CHECK_FALSE(ss_round(r, 8, 0xffffffff, 90000, 1000));    // small window
    CHECK_FALSE(ss_round(r, 100, 50, 90000, 1000));          // not in slow start
    CHECK_FALSE(ss_round(r, 100, 0xffffffff, 90000, 0));     // no min RTT yet
    CHECK_FALSE(ss_round(r, 100, 0xffffffff, 90000, 1000, 7));   // fewer than 8 samples
}

TEST_CASE("one delayed ACK does not end slow start; a round of them does", "[core]")
{
    mercury_ss_round r{};
    const __u32 una = 5'000'000, nxt = una + 64'000;
    // A stall: one sample far above the minimum among quick ones.
    for (int i = 0; i < 8; ++i)
        CHECK_FALSE(mercury_slow_start_done(&r, 64, 0xffffffff, i == 3 ? 50'000 : 1'100, 1'000, una + i, nxt));
    // Next round (snd_una past nxt): every sample delayed, a real queue.
    int done = 0;
    for (int i = 0; i < 8; ++i)
        done = mercury_slow_start_done(&r, 64, 0xffffffff, 9'000 + i, 1'000, nxt + i, nxt + 90'000);
    CHECK(done);
    // Samples past the first 8 of a round do not move its minimum.
    CHECK(mercury_slow_start_done(&r, 64, 0xffffffff, 1'000, 1'000, nxt + 20, nxt + 90'000));
}

TEST_CASE("a flow knows when it is holding a less urgent rank", "[core]")
{
    __u64 last[MERCURY_NUM_RANKS] = {};
    const __u64 now = 1'000'000;
    last[5] = now - 300;
    CHECK(mercury_ranks_held(last, 0, now, 1000) > 0);
    CHECK(mercury_ranks_held(last, 4, now, 1000) > 0);
    CHECK(mercury_ranks_held(last, 5, now, 1000) == 0);   // same rank
    CHECK(mercury_ranks_held(last, 6, now, 1000) == 0);   // more urgent is not held by us
    CHECK(mercury_ranks_held(last, 0, now + 2000, 1000) == 0);   // went quiet
    CHECK(mercury_ranks_held(last, MERCURY_RANK_NONE, now, 1000) == 0);
}

TEST_CASE("a flow holding others keeps a window in proportion to their floors", "[core]")
{
    __u64 last[MERCURY_NUM_RANKS] = {};
    const __u64 now = 1'000'000;
    last[2] = now - 300;
    last[5] = now - 300;
    last[6] = (now - 200) | MERCURY_STAMP_IDLE;   // went quiet: not held
    last[7] = now - 5000;                          // stale: not held
    CHECK(mercury_ranks_held(last, 1, now, 1000) == 2);
    CHECK(mercury_ranks_held(last, 2, now, 1000) == 1);
    CHECK(mercury_ranks_held(last, 5, now, 1000) == 0);
    CHECK(mercury_ranks_held(last, MERCURY_RANK_NONE, now, 1000) == 0);

    // Two held ranks at a floor of 2: the next in line keeps 2 packets, the
    // other one; keep 6 packets, two thirds of 9.
    CHECK(mercury_preempt_window(2, 2) == (2 + MERCURY_FAR_FLOOR) * MERCURY_PREEMPT_SHARE);
    CHECK(mercury_preempt_window(2, 1) == 2 * MERCURY_PREEMPT_SHARE);
    CHECK(mercury_preempt_window(1, 3) == 3 * MERCURY_PREEMPT_SHARE);
    CHECK(mercury_preempt_window(2, 0) == 2);   // never below the floor

    mercury_window small{4, 4, 0};
    CHECK(mercury_preempt_ssthresh(&small, 8));  // slow-starts back up to it
    CHECK(small.ssthresh == 8);
    CHECK(small.cwnd == 4);
    mercury_window big{20, 30, 0};
    CHECK_FALSE(mercury_preempt_ssthresh(&big, 8));
    CHECK(big.ssthresh == 30);

    // A yield from above it stops at it.
    mercury_window w{12, 12, 0};
    mercury_yield(&w, mercury_preempt_window(2, 3));
    CHECK(w.cwnd == 8);
}
