// SPDX-License-Identifier: GPL-2.0
// The datapaths' hooks (include/mercury/cc_hooks.h), whole, in user space:
// a third glue over plain structs stands in for struct tcp_sock and the
// per-netns state, so a per-ACK step runs through the same code as in
// tcp_mercury.ko and the BPF program.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

extern "C" {
#include "mercury/cc_core.h"
}

namespace {

enum { TCP_CA_Open = 0, TCP_CA_Disorder = 1, TCP_CA_CWR = 2, TCP_CA_Recovery = 3, TCP_CA_Loss = 4 };
// include/net/tcp.h's enum tcp_ca_event, the two the hooks act on.
enum tcp_ca_event { CA_EVENT_TX_START = 0, CA_EVENT_COMPLETE_CWR = 2 };

enum Event {
    FLOWS_INIT, FLOWS_RELEASED, HOLDS, RELEASES, STARVE_GRANTS, DELAY_BACKOFFS, LOSS_EVENTS, CWND_FIXUPS,
    HELD_IN_RECOVERY, HOLD_LEAKS, YIELD_GRANTS, JOB_CUTS, PACING_CLEARED, RECOVERIES, RECOVERIES_FROM_CWR, ZERO_WINDOWS,
    EVENTS
};

struct mercury_sock {
    MERCURY_SOCK_STATE
};

struct tcp_sock {
    __u32 snd_cwnd = 10, snd_ssthresh = 0x7fffffff, snd_cwnd_clamp = 10000;
    __u32 srtt_us = 1000 << 3, snd_una = 0, snd_nxt = 0, prior_cwnd = 10, min_rtt_us = 1000;
    __u64 tcp_mstamp = 0;
};

struct Netns {
    __u32 gen = 1, cwnd_floor = 2, max_hold_ms = 1000, delay_thresh_us = 1000;
    std::array<std::array<__u64, MERCURY_NUM_RANKS>, MERCURY_NUM_JOBS> last_active_us{};
    std::array<__u64, MERCURY_NUM_JOBS> job_active_us{};
    std::array<mercury_job_census, MERCURY_NUM_JOBS> census{};
    std::array<__u64, EVENTS> counters{};
};

struct sock {
    tcp_sock tp;
    mercury_sock ca{};
    Netns* ns = nullptr;
    __u8 rank = MERCURY_RANK_NONE, job = MERCURY_JOB_NONE, ca_state = TCP_CA_Open;
    bool has_data = true, cwnd_limited = true, handshaking = false;
    bool pacing_needed = false, max_pacing_rate_set = false;   // sk_pacing_status, SO_MAX_PACING_RATE
};

struct mercury_ctx {
    Netns* ns;
};

tcp_sock* tcp_sk(sock* sk) { return &sk->tp; }
mercury_sock* mercury_priv(sock* sk) { return &sk->ca; }
void mercury_ctx_of(const sock* sk, mercury_ctx* x) { x->ns = sk->ns; }
void mercury_ctx_find(const sock* sk, mercury_ctx* x) { x->ns = sk->ns; }
__u32 mercury_cwnd_floor(const mercury_ctx* x) { return x->ns->cwnd_floor; }
__u32 mercury_max_hold_ms(const mercury_ctx* x) { return x->ns->max_hold_ms; }
__u32 mercury_delay_thresh_us(const mercury_ctx* x) { return x->ns->delay_thresh_us; }
__u32 mercury_table_gen(const mercury_ctx* x) { return x->ns->gen; }
__u64* mercury_stamps(mercury_ctx* x, __u32 job)
{
    return job < MERCURY_NUM_JOBS ? x->ns->last_active_us[job].data() : nullptr;
}
__u64* mercury_job_active(mercury_ctx* x) { return x->ns->job_active_us.data(); }
mercury_job_census* mercury_census(mercury_ctx* x, __u32 job)
{
    return job < MERCURY_NUM_JOBS ? &x->ns->census[job] : nullptr;
}
// The table says: the rank and job the test gave the socket, one unit of weight.
void mercury_refresh_prio(sock* sk, mercury_sock* ca, mercury_ctx* x)
{
    ca->table_gen = x->ns->gen;
    ca->rank = sk->rank;
    ca->weight = MERCURY_WEIGHT_UNIT;
    ca->job = sk->job;
}
int changes = 0;
void mercury_changed(sock*, const mercury_sock*, mercury_hold_change, __u32) { ++changes; }
__u32 mercury_snd_cwnd(const tcp_sock* tp) { return tp->snd_cwnd; }
void mercury_set_snd_cwnd(tcp_sock* tp, __u32 cwnd) { tp->snd_cwnd = cwnd; }
__u32 mercury_min_rtt(const tcp_sock* tp) { return tp->min_rtt_us; }
int mercury_in_reduction(const sock* sk) { return sk->ca_state == TCP_CA_CWR || sk->ca_state == TCP_CA_Recovery; }
int mercury_has_data(const sock* sk) { return sk->has_data; }
int mercury_handshaking(const sock* sk) { return sk->handshaking; }
int mercury_cwnd_limited(const sock* sk) { return sk->cwnd_limited; }
__u8 mercury_ca_state(const sock* sk) { return sk->ca_state; }
__u64 now_us = 1'000'000;
__u64 mercury_clock_us() { return now_us; }
__u32 mercury_reno_undo_cwnd(sock* sk) { return std::max(sk->tp.snd_cwnd, sk->tp.prior_cwnd); }
bool mercury_drop_inherited_pacing(sock* sk)
{
    if (sk->max_pacing_rate_set || !sk->pacing_needed)
        return false;
    sk->pacing_needed = false;
    return true;
}

#define MERCURY_HOOK static inline
#define MERCURY_COUNT(x, ev) (++(x)->ns->counters[ev])
#define MERCURY_READ(v) (v)
#define MERCURY_WRITE(v, val) ((v) = (val))

#include "mercury/cc_hooks.h"

// One ACK at now_us for sk, with RTT rtt_us.
void ack(sock& s, __s32 rtt_us)
{
    s.tp.tcp_mstamp = now_us;
    mercury_on_acked(&s, mercury_ca(&s), rtt_us);
}

}  // namespace

TEST_CASE("hooks: a less urgent flow is held while a more urgent one sends, then released", "[hooks]")
{
    Netns ns;
    sock urgent, bulk;
    urgent.ns = bulk.ns = &ns;
    urgent.rank = 0;
    bulk.rank = 3;
    bulk.tp.snd_cwnd = 100;
    mercury_on_init(&urgent);
    mercury_on_init(&bulk);
    CHECK(ns.counters[FLOWS_INIT] == 2);

    ack(urgent, 1000);   // rank 0 has data out: its stamp is now
    ack(bulk, 1000);
    CHECK((bulk.ca.flags & MERCURY_F_HELD));
    CHECK(bulk.tp.snd_cwnd == ns.cwnd_floor);
    CHECK(ns.counters[HOLDS] == 1);
    const int held_changes = changes;

    // A held flow does not grow.
    mercury_on_cong_avoid(&bulk, mercury_ca(&bulk), 10);
    CHECK(bulk.tp.snd_cwnd == ns.cwnd_floor);

    // The urgent rank goes quiet for longer than the hold window: released.
    urgent.has_data = false;
    now_us += 10 * mercury_hold_window_us(bulk.tp.srtt_us >> 3);
    ack(bulk, 1000);
    CHECK(!(bulk.ca.flags & MERCURY_F_HELD));
    CHECK(ns.counters[RELEASES] == 1);
    CHECK(bulk.tp.snd_cwnd > ns.cwnd_floor);   // its window back
    CHECK(changes == held_changes + 1);

    mercury_on_release(&bulk, &bulk.ca);
    CHECK(ns.counters[FLOWS_RELEASED] == 1);
}

TEST_CASE("hooks: a held flow keeps one packet until it is next in line, then the floor", "[hooks]")
{
    Netns ns;
    sock top, next, far;
    top.ns = next.ns = far.ns = &ns;
    top.rank = 0;
    next.rank = 1;
    far.rank = 4;
    next.tp.snd_cwnd = far.tp.snd_cwnd = 40;
    for (sock* s : {&top, &next, &far})
        mercury_on_init(s);

    ack(top, 1000);
    ack(next, 1000);
    ack(far, 1000);
    CHECK(next.tp.snd_cwnd == ns.cwnd_floor);
    CHECK(far.tp.snd_cwnd == MERCURY_FAR_FLOOR);   // ranks 0 and 1 ahead
    CHECK((far.ca.flags & MERCURY_F_FAR));

    // A loss while far back: recovery heads for the single packet.
    far.ca_state = TCP_CA_Recovery;
    CHECK(mercury_on_ssthresh(&far, mercury_ca(&far)) == MERCURY_FAR_FLOOR);
    far.ca_state = TCP_CA_Open;

    // Rank 0 is done: rank 1 is released, rank 4 is next in line and takes
    // the floor back on its next ACK, still held.
    top.has_data = false;
    ack(top, 1000);
    now_us += 100;
    ack(next, 1000);
    ack(far, 1000);
    CHECK(!(next.ca.flags & MERCURY_F_HELD));
    CHECK((far.ca.flags & MERCURY_F_HELD));
    CHECK(!(far.ca.flags & MERCURY_F_FAR));
    CHECK(far.tp.snd_cwnd == ns.cwnd_floor);

    // Rank 0 sends again: back to one packet; the floor it was held at a
    // moment ago is no leak.
    top.has_data = true;
    ack(top, 1000);
    ack(far, 1000);
    CHECK(far.tp.snd_cwnd == MERCURY_FAR_FLOOR);
    CHECK(ns.counters[HOLD_LEAKS] == 0);

    // A window above its single packet, though, is one.
    far.tp.snd_cwnd = 2;
    ack(far, 1000);
    CHECK(ns.counters[HOLD_LEAKS] == 1);
    CHECK(far.tp.snd_cwnd == MERCURY_FAR_FLOOR);

    // Released: the window it had, no flag left behind.
    top.has_data = next.has_data = false;
    ack(top, 1000);
    ack(next, 1000);
    ack(far, 1000);
    CHECK(!(far.ca.flags & (MERCURY_F_HELD | MERCURY_F_FAR)));
    CHECK(far.tp.snd_cwnd > ns.cwnd_floor);
}

TEST_CASE("hooks: the handshake's ACK holds nothing (the kernel sets the initial window after it)", "[hooks]")
{
    Netns ns;
    sock urgent, bulk;
    urgent.ns = bulk.ns = &ns;
    urgent.rank = 0;
    bulk.rank = 3;
    bulk.handshaking = true;   // the SYN-ACK, before tcp_init_transfer()
    bulk.tp.snd_cwnd = 10;
    mercury_on_init(&urgent);
    ack(urgent, 1000);
    ack(bulk, 1000);
    CHECK_FALSE((bulk.ca.flags & MERCURY_F_HELD));
    CHECK(bulk.tp.snd_cwnd == 10);
    CHECK(ns.counters[HOLDS] == 0);

    bulk.handshaking = false;   // established: its first ACK of data holds it
    mercury_on_init(&bulk);
    ack(bulk, 1000);
    CHECK((bulk.ca.flags & MERCURY_F_HELD));
    CHECK(bulk.tp.snd_cwnd == ns.cwnd_floor);
    CHECK(ns.counters[HOLD_LEAKS] == 0);
}

TEST_CASE("hooks: init drops the pacing a previous CC asked for, not a user's", "[hooks]")
{
    Netns ns;
    sock from_bbr, capped, plain;
    from_bbr.ns = capped.ns = plain.ns = &ns;
    from_bbr.pacing_needed = capped.pacing_needed = true;
    capped.max_pacing_rate_set = true;
    mercury_on_init(&from_bbr);
    mercury_on_init(&capped);
    mercury_on_init(&plain);
    CHECK_FALSE(from_bbr.pacing_needed);
    CHECK(capped.pacing_needed);
    CHECK(ns.counters[PACING_CLEARED] == 1);
}

TEST_CASE("hooks: a ranked flow yields to queueing delay at most once an RTT", "[hooks]")
{
    Netns ns;
    sock s;
    s.ns = &ns;
    s.rank = 4;
    s.tp.snd_cwnd = 50;
    s.tp.snd_ssthresh = 20;   // out of slow start
    mercury_on_init(&s);
    ack(s, 1000 + 5000);      // 5 ms over the base RTT: above every rank's threshold
    CHECK(ns.counters[DELAY_BACKOFFS] == 1);
    const __u32 after = s.tp.snd_cwnd;
    CHECK(after < 50);
    now_us += 100;            // well within the same RTT
    ack(s, 1000 + 5000);
    CHECK(ns.counters[DELAY_BACKOFFS] == 1);
    CHECK(s.tp.snd_cwnd == after);
    now_us += 10'000;         // several RTTs later
    ack(s, 1000 + 5000);
    CHECK(ns.counters[DELAY_BACKOFFS] == 2);

    // Rank 0 never yields.
    sock urgent;
    urgent.ns = &ns;
    urgent.rank = 0;
    urgent.tp.snd_cwnd = 50;
    urgent.tp.snd_ssthresh = 20;
    mercury_on_init(&urgent);
    ack(urgent, 1000 + 50'000);
    CHECK(ns.counters[DELAY_BACKOFFS] == 2);
    CHECK(urgent.tp.snd_cwnd == 50);
}

TEST_CASE("hooks: a job's flow does not yield while another job's flow is between ACKs", "[hooks][jobs]")
{
    Netns ns;
    sock s;
    s.ns = &ns;
    s.rank = 5;
    s.job = 2;
    s.tp.snd_cwnd = 50;
    s.tp.snd_ssthresh = 20;   // out of slow start
    mercury_on_init(&s);
    // Job 1's flow last took an ACK 60 ms ago (a delayed ACK, a busy host):
    // 30 RTTs of this flow, and still sending.
    ns.job_active_us[1] = now_us - 60'000;
    ack(s, 1000 + 5000);
    CHECK(ns.counters[DELAY_BACKOFFS] == 0);
    CHECK(s.tp.snd_cwnd == 50);
    // 100 ms without one: it went quiet, and the queue is this job's.
    now_us += 40'000;
    ack(s, 1000 + 5000);
    CHECK(ns.counters[DELAY_BACKOFFS] == 1);
    CHECK(s.tp.snd_cwnd < 50);
}

TEST_CASE("hooks: a flow holding others yields no lower than twice their floors", "[hooks]")
{
    Netns ns;
    sock top;
    top.ns = &ns;
    top.rank = 1;
    top.tp.snd_cwnd = 6;
    top.tp.snd_ssthresh = 4;
    mercury_on_init(&top);
    // Ranks 3 and 5 have data out: two held ranks (at 2 packets and 1), a
    // preempt window of 6.
    auto& stamps = ns.last_active_us[MERCURY_JOB_NONE];
    const __u32 keep = mercury_preempt_window(ns.cwnd_floor, 2);
    REQUIRE(keep == 6);
    // An RTT later, a delayed ACK at a window of cwnd, ranks 3 and 5 sending or not.
    auto delayed_ack = [&](__u32 cwnd, bool holding) {
        now_us += 10'000;
        top.tp.snd_cwnd = cwnd;
        stamps[3] = stamps[5] = holding ? now_us : 0;
        ack(top, 1000 + 5000);
    };

    delayed_ack(6, true);     // the queue is the held flows' floors
    CHECK(ns.counters[DELAY_BACKOFFS] == 0);
    CHECK(top.tp.snd_cwnd == 6);
    CHECK(top.tp.snd_ssthresh == keep);   // slow-starts back up to it

    delayed_ack(20, true);    // above it: halves, to no lower than it
    CHECK(ns.counters[DELAY_BACKOFFS] == 1);
    CHECK(top.tp.snd_cwnd == 10);

    delayed_ack(10, true);    // half of it would be below it
    CHECK(ns.counters[DELAY_BACKOFFS] == 2);
    CHECK(top.tp.snd_cwnd == keep);

    // Nothing held any more: the plain rule, down to the cwnd floor.
    delayed_ack(6, false);
    CHECK(ns.counters[DELAY_BACKOFFS] == 3);
    CHECK(top.tp.snd_cwnd == 3);
}

TEST_CASE("hooks: loss, recovery and undo follow the shared rules", "[hooks]")
{
    Netns ns;
    sock s;
    s.ns = &ns;
    s.rank = 2;
    s.tp.snd_cwnd = 40;
    mercury_on_init(&s);
    const __u32 ssthresh = mercury_on_ssthresh(&s, mercury_ca(&s));
    CHECK(ns.counters[LOSS_EVENTS] == 1);
    CHECK(ssthresh == mercury_ssthresh_after_loss(40, MERCURY_WEIGHT_UNIT));
    s.ca_state = TCP_CA_CWR;
    mercury_on_set_state(&s, TCP_CA_Recovery);   // from CWR: no ssthresh() call
    CHECK(ns.counters[RECOVERIES] == 1);
    CHECK(ns.counters[RECOVERIES_FROM_CWR] == 1);
    mercury_on_set_state(&s, TCP_CA_Loss);       // only Recovery is counted
    CHECK(ns.counters[RECOVERIES] == 1);

    s.tp.prior_cwnd = 80;
    CHECK(mercury_on_undo_cwnd(&s, mercury_ca(&s)) == 80);
    s.ca.flags |= MERCURY_F_HELD;                // a held flow keeps at most its floor
    CHECK(mercury_on_undo_cwnd(&s, mercury_ca(&s)) == ns.cwnd_floor);
    s.tp.snd_cwnd = 1;                           // or less, if PRR took it there
    CHECK(mercury_on_undo_cwnd(&s, mercury_ca(&s)) == 1);
}

TEST_CASE("hooks: delay ends slow start, but never in CWR or Recovery, where PRR owns ssthresh", "[hooks]")
{
    for (const __u8 state : {TCP_CA_Open, TCP_CA_CWR, TCP_CA_Recovery}) {
        Netns ns;
        sock s;
        s.ns = &ns;
        mercury_on_init(&s);
        s.ca_state = state;
        s.tp.snd_cwnd = 30;          // below ssthresh: slow start, or PRR's reduction
        s.tp.snd_ssthresh = 40;
        s.tp.snd_nxt = 100;          // one round: nothing acked yet
        for (int i = 0; i < MERCURY_SS_SAMPLES; ++i)
            ack(s, 1000 + 10'000);   // 10 ms over the base RTT: above the exit's threshold
        CHECK(s.tp.snd_ssthresh == (state == TCP_CA_Open ? 30u : 40u));
    }
}

TEST_CASE("hooks: an unranked flow is plain Reno growth and is never held", "[hooks]")
{
    Netns ns;
    sock urgent, plain;
    urgent.ns = plain.ns = &ns;
    urgent.rank = 0;
    plain.tp.snd_cwnd = 10;
    plain.tp.snd_ssthresh = 1000;
    mercury_on_init(&urgent);
    mercury_on_init(&plain);
    ack(urgent, 1000);
    ack(plain, 1000);
    CHECK(!(plain.ca.flags & MERCURY_F_HELD));
    mercury_on_cong_avoid(&plain, mercury_ca(&plain), 5);
    CHECK(plain.tp.snd_cwnd == 15);   // slow start: +acked
    plain.cwnd_limited = false;
    mercury_on_cong_avoid(&plain, mercury_ca(&plain), 5);
    CHECK(plain.tp.snd_cwnd == 15);   // not cwnd-limited: no growth
}

namespace {

// The kernel's side of an ACK, as tcp_ack() orders it (net/ipv4/tcp_input.c,
// 6.1 and 6.18 alike): the CC's pkts_acked, then the state machine
// (entering Recovery or CWR calls ssthresh(); their end sets cwnd to
// ssthresh and raises CA_EVENT_COMPLETE_CWR, or an undo takes undo_cwnd()),
// then PRR (tcp_cwnd_reduction) in a reduction, or cong_avoid. Every window
// the kernel sets goes through window(), which records what
// tcp_snd_cwnd_set() WARNs about (<= 0 as an int) instead of storing it.
struct Kernel {
    sock& s;
    __u32 in_flight = 0, prr_out = 0, prr_delivered = 0, prior_ssthresh = 0;
    int bad = 0;          // windows <= 0 the kernel would have WARNed about
    int bad_ssthresh = 0; // ssthresh 0 at the end of a reduction
    bool skip = false;    // run no hook, as a kernel that skips BPF programs: a skipped call returns 0
    explicit Kernel(sock& sk) : s(sk) { in_flight = s.tp.snd_cwnd; }

    bool in_reduction() const { return s.ca_state == TCP_CA_CWR || s.ca_state == TCP_CA_Recovery; }
    void window(long long cwnd)
    {
        if (cwnd <= 0 || cwnd > 0x7fffffff) {
            ++bad;
            return;   // the kernel stores it; keep the last good one to go on
        }
        s.tp.snd_cwnd = static_cast<__u32>(cwnd);
    }
    void set_state(__u8 state)
    {
        if (!skip)
            mercury_on_set_state(&s, state);
        s.ca_state = state;
    }
    // tcp_init_cwnd_reduction(), from tcp_enter_recovery() or tcp_enter_cwr().
    void start_reduction(__u8 state)
    {
        prior_ssthresh = state == TCP_CA_Recovery ? s.tp.snd_ssthresh : 0;
        s.tp.prior_cwnd = s.tp.snd_cwnd;
        prr_delivered = prr_out = 0;
        s.tp.snd_ssthresh = skip ? 0 : mercury_on_ssthresh(&s, mercury_ca(&s));
        set_state(state);
    }
    // tcp_end_cwnd_reduction(), then Open.
    void end_reduction()
    {
        if (s.tp.snd_ssthresh == 0)
            ++bad_ssthresh;
        window(s.tp.snd_ssthresh);
        mercury_on_cwnd_event(&s, mercury_ca(&s), CA_EVENT_COMPLETE_CWR);
        set_state(TCP_CA_Open);
    }
    // tcp_undo_cwnd_reduction(), then Open.
    void undo()
    {
        window(mercury_on_undo_cwnd(&s, mercury_ca(&s)));
        if (prior_ssthresh > s.tp.snd_ssthresh)
            s.tp.snd_ssthresh = prior_ssthresh;
        set_state(TCP_CA_Open);
    }
    // tcp_cwnd_reduction(): PRR, RFC 6937, as the kernel has it.
    void prr(int newly_acked_sacked, bool snd_una_advanced)
    {
        const int delta = static_cast<int>(s.tp.snd_ssthresh) - static_cast<int>(in_flight);
        long long sndcnt;
        if (newly_acked_sacked <= 0 || !s.tp.prior_cwnd)
            return;
        prr_delivered += static_cast<__u32>(newly_acked_sacked);
        if (delta < 0) {
            const unsigned long long dividend =
                static_cast<unsigned long long>(s.tp.snd_ssthresh) * prr_delivered + s.tp.prior_cwnd - 1;
            sndcnt = static_cast<long long>(dividend / s.tp.prior_cwnd) - prr_out;
        } else {
            sndcnt = std::max<long long>(static_cast<long long>(prr_delivered) - prr_out, newly_acked_sacked);
            if (snd_una_advanced)
                ++sndcnt;
            sndcnt = std::min<long long>(delta, sndcnt);
        }
        sndcnt = std::max<long long>(sndcnt, prr_out ? 0 : 1);
        window(static_cast<long long>(in_flight) + sndcnt);
    }
    // One ACK for @acked packets (marking @lost more lost), with an RTT sample.
    void ack(__u32 acked, __u32 lost, __s32 rtt_us)
    {
        acked = std::min(acked, in_flight);
        in_flight -= acked;
        lost = std::min(lost, in_flight);
        in_flight -= lost;   // marked lost: out of flight until retransmitted
        s.tp.tcp_mstamp = now_us;
        s.tp.snd_una += acked;
        if (!skip)
            mercury_on_acked(&s, mercury_ca(&s), rtt_us);
        if (in_reduction())
            prr(static_cast<int>(acked), acked > 0);
        else if (acked && !skip)
            mercury_on_cong_avoid(&s, mercury_ca(&s), acked);
    }
    // tcp_write_xmit(): send what the window allows (the application always has data).
    void send()
    {
        const __u32 cwnd = s.tp.snd_cwnd;
        const __u32 sent = cwnd > in_flight ? std::min<__u32>(cwnd - in_flight, 64) : 0;
        in_flight += sent;
        s.tp.snd_nxt += sent;
        if (in_reduction())
            prr_out += sent;
    }
};

// A flow of @rank in @ns with the window given, its CC initialised.
sock flow_of(Netns& ns, __u8 rank, __u32 cwnd, __u32 ssthresh)
{
    sock s;
    s.ns = &ns;
    s.rank = rank;
    s.tp.snd_cwnd = cwnd;
    s.tp.snd_ssthresh = ssthresh;
    mercury_on_init(&s);
    return s;
}

void rank_active(Netns& ns, __u32 rank, bool active)
{
    ns.last_active_us[MERCURY_JOB_NONE][rank] = active ? now_us : (now_us | MERCURY_STAMP_IDLE);
}

}  // namespace

TEST_CASE("hooks: a hold entered in Recovery never drives PRR to a window of 0", "[hooks][windows]")
{
    Netns ns;
    sock bulk = flow_of(ns, 3, 40, 20);
    Kernel k(bulk);
    k.start_reduction(TCP_CA_Recovery);   // a loss: ssthresh 20, prior_cwnd 40
    k.ack(0, 1, 1000);
    for (int i = 0; i < 30; ++i) {        // PRR sends about half of what is delivered
        now_us += 100;
        k.ack(1, 0, 1000);
        k.send();
    }
    REQUIRE(k.bad == 0);
    rank_active(ns, 0, true);             // an urgent flow starts: bulk is held mid-reduction
    for (int i = 0; i < 40 && k.in_flight; ++i) {
        now_us += 100;
        rank_active(ns, 0, true);
        k.ack(1, 0, 1000);
        k.send();
        CHECK((bulk.ca.flags & MERCURY_F_HELD));
    }
    CHECK(k.bad == 0);
    CHECK(bulk.tp.snd_ssthresh >= 1);
    // The reduction ends: the kernel sets cwnd to ssthresh, and the hold
    // takes it straight back to the floor before anything is sent.
    k.end_reduction();
    CHECK(bulk.tp.snd_cwnd == ns.cwnd_floor);
    CHECK(k.bad == 0);
    now_us += 100;
    k.ack(1, 0, 1000);
    CHECK(ns.counters[HOLD_LEAKS] == 0);
    CHECK(ns.counters[ZERO_WINDOWS] == 0);
}

TEST_CASE("hooks: ssthresh lowered in Recovery stalls PRR but never takes it to 0", "[hooks][windows]")
{
    // What c3b2d02 guarded against: a delay yield in mid-reduction lowers
    // ssthresh under PRR. PRR's sndcnt is never below 0 (the kernel clamps
    // it), so cwnd stays at what is in flight: a stall, not a 0.
    Netns ns;
    sock s = flow_of(ns, 5, 40, 20);
    Kernel k(s);
    k.start_reduction(TCP_CA_Recovery);
    for (int i = 0; i < 60 && k.in_flight; ++i) {
        now_us += 3000;                   // an RTT apart: each may yield
        k.ack(1, 0, 1000 + 20'000);       // far above every threshold
        k.send();
        CHECK(s.tp.snd_cwnd >= 1);
    }
    CHECK(ns.counters[DELAY_BACKOFFS] > 0);
    CHECK(k.bad == 0);
}

TEST_CASE("hooks: an ssthresh of 0 or past 2^31 is put back before PRR's step", "[hooks][windows]")
{
    // The states in which PRR itself sets cwnd <= 0: ssthresh 0 with
    // nothing in flight (sndcnt 0), or ssthresh negative as an int.
    for (const __u32 bad : {0U, 0x80000000U, 0xffffffffU}) {
        Netns ns;
        sock s = flow_of(ns, MERCURY_RANK_NONE, 40, 4);
        Kernel k(s);
        k.start_reduction(TCP_CA_Recovery);
        k.ack(1, 0, 1000);
        k.send();                         // prr_out > 0 from here on
        s.tp.snd_ssthresh = bad;          // what a skipped ssthresh() left
        k.ack(0, k.in_flight, 1000);      // the rest marked lost: nothing in flight
        k.ack(1, 0, 1000);
        CHECK(k.bad == 0);
        CHECK(ns.counters[ZERO_WINDOWS] == 1);
        // What ssthresh() would have said when the reduction began (at 40
        // packets), not what PRR has shrunk the window to since.
        CHECK(s.tp.snd_ssthresh == mercury_ssthresh_after_loss(40, MERCURY_WEIGHT_UNIT));
    }
}

TEST_CASE("hooks: after an ssthresh() the kernel did not run, recovery heads for the window it began at", "[hooks][windows]")
{
    // The CI hosts' kernel now and then runs no BPF program for a stretch
    // of ACKs: ssthresh() "returns" 0, and PRR, with nothing to aim at,
    // sends nothing while the window drains toward what is in flight.
    Netns ns;
    sock s = flow_of(ns, MERCURY_RANK_NONE, 40, 0x7fffffff);
    Kernel k(s);
    k.skip = true;
    k.start_reduction(TCP_CA_Recovery);
    for (int i = 0; i < 30; ++i) {
        now_us += 100;
        k.ack(1, 0, 1000);
        k.send();
    }
    REQUIRE(s.tp.snd_ssthresh == 0);
    REQUIRE(s.tp.snd_cwnd < 15);          // drained
    k.skip = false;                        // the next ACK runs the hooks
    now_us += 100;
    k.ack(1, 0, 1000);
    CHECK(ns.counters[ZERO_WINDOWS] == 1);
    CHECK(s.tp.snd_ssthresh == mercury_ssthresh_after_loss(40, MERCURY_WEIGHT_UNIT));
    for (int i = 0; i < 10; ++i) {         // PRR now grows back toward it
        now_us += 100;
        k.ack(1, 0, 1000);
        k.send();
    }
    k.end_reduction();
    CHECK(s.tp.snd_cwnd == mercury_ssthresh_after_loss(40, MERCURY_WEIGHT_UNIT));
    CHECK(k.bad == 0);
}

TEST_CASE("hooks: an undo never hands back a window of 0", "[hooks][windows]")
{
    Netns ns;
    sock s = flow_of(ns, 3, 10, 0x7fffffff);
    s.ca.flags |= MERCURY_F_HELD;
    s.tp.snd_cwnd = 0;   // what a skipped or faulty step left
    CHECK(mercury_on_undo_cwnd(&s, mercury_ca(&s)) >= 1);
    CHECK(ns.counters[ZERO_WINDOWS] == 1);
    s.ca.flags &= ~MERCURY_F_HELD;
    s.tp.prior_cwnd = 0;
    CHECK(mercury_on_undo_cwnd(&s, mercury_ca(&s)) >= 1);
}

// Random ACK streams through the kernel's order of calls, with ranks coming
// and going, delay, losses, CWR and undo: no step may leave a window the
// kernel WARNs about. Deterministic (fixed seeds).
TEST_CASE("hooks: no sequence of ACKs, holds, yields, losses and undos leaves a window <= 0", "[hooks][windows]")
{
    int bad = 0, bad_ssthresh = 0, reductions = 0, held_in_reduction = 0;
    for (unsigned seed = 1; seed <= 400; ++seed) {
        std::uint64_t rng = seed * 0x9e3779b97f4a7c15ULL;
        auto next = [&rng](unsigned n) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            return static_cast<unsigned>(rng % n);
        };
        Netns ns;
        const auto rank = static_cast<__u8>(1 + next(6));
        const __u32 cwnd = 10 + next(80);
        sock s = flow_of(ns, rank, cwnd, next(2) ? 0x7fffffff : 5 + next(60));
        Kernel k(s);
        for (int step = 0; step < 600; ++step) {
            now_us += 50 + next(3000);
            const unsigned r = next(100);
            if (r < 30)
                rank_active(ns, next(s.rank), next(3) != 0);   // a more urgent rank comes or goes
            if (!k.in_reduction() && r < 4) {
                k.start_reduction(next(3) ? TCP_CA_Recovery : TCP_CA_CWR);
                ++reductions;
            } else if (k.in_reduction() && r < 8) {
                if (next(4) == 0 && s.ca_state == TCP_CA_Recovery)
                    k.undo();
                else
                    k.end_reduction();
            }
            if (k.in_reduction() && (s.ca.flags & MERCURY_F_HELD))
                ++held_in_reduction;
            const __s32 rtt = static_cast<__s32>(1000 + (next(4) ? next(500) : next(30'000)));
            k.ack(next(4), next(10) == 0 ? 1 + next(3) : 0, rtt);
            k.send();
            if (s.tp.snd_ssthresh == 0)
                ++bad_ssthresh;
        }
        bad += k.bad;
        bad_ssthresh += k.bad_ssthresh;
    }
    INFO("reductions " << reductions << ", ACKs held in a reduction " << held_in_reduction);
    CHECK(reductions > 1000);
    CHECK(held_in_reduction > 1000);   // the case that matters was exercised
    CHECK(bad == 0);
    CHECK(bad_ssthresh == 0);
}
