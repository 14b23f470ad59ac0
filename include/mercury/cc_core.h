/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Mercury congestion-control core.
 *
 * The arithmetic of the algorithm as pure functions over plain integers: no
 * kernel structures, no allocation, no locks, no floating point, loops bounded
 * by constants. The kernel module (kmod/mercury_cc.c), an eBPF struct_ops
 * variant and the user-space unit tests compile this same file, so the
 * datapaths cannot drift apart.
 *
 * The model, per flow:
 *  - Loss-based base: slow start (left on loss, or on a delay rise as in
 *    HyStart: without it a sender whose own NIC is the bottleneck never
 *    loses a packet and the largest window keeps doubling), then additive
 *    increase of weight/UNIT
 *    packets per RTT; on loss the window shrinks like Reno, and less for
 *    heavier flows (MulTCP: a weight-N flow backs off by 1/(2N)), so weights
 *    set the split within a rank under loss, not just the growth.
 *  - Precedence: while a more urgent rank was active on this host within the
 *    hold window (about an RTT), the flow is *held*: its cwnd is clamped to a
 *    small floor that keeps the ACK clock alive; the window it had is restored
 *    at once when the urgent rank goes quiet. Only the flow next in line needs
 *    that clock to be quick: one with two or more ranks ahead is held at a
 *    single packet, and takes the floor back when it is next in line
 *    (mercury_held_floor). A rank goes quiet at once when
 *    its flow has nothing left to send or to be acked (a ring step waiting on
 *    its neighbour), not a hold window later: precedence is work-conserving.
 *  - No starvation: a flow held for max_hold is let go for max_hold/8, so a
 *    held flow always gets some share.
 *  - Across hosts: ranked flows other than rank 0 yield to queueing delay
 *    (TCP-LP style): when an RTT sample exceeds the base RTT by a threshold
 *    (smaller for less urgent ranks) the window halves, at most once an RTT.
 *    A flow that holds others on its host yields no lower than a window in
 *    proportion to their floors, which are queue too (mercury_preempt_window).
 *  - Jobs: precedence is kept per job (each job has its own activity stamps),
 *    so one job's urgent rank never holds another job's flows; between jobs
 *    flows share by weight. Delay cannot say whose queue it is: a job's flow
 *    does not yield while another job has data out on this host (the queue
 *    is theirs too), and yields for at most max_hold at a stretch, then not
 *    for max_hold/8, like the starvation guard of holds (other jobs' traffic
 *    from other hosts). Job 0 (no job) keeps yielding as before. A job's
 *    sending flows on a host share its weight (mercury_job_census_count),
 *    so shares go per job, not per flow.
 */
#ifndef MERCURY_CC_CORE_H
#define MERCURY_CC_CORE_H

#ifndef __bpf__
#include <linux/types.h>
#endif

/* @a mod @b; a 64-bit division is a helper call on 32-bit kernels. */
#ifdef __KERNEL__
#include <linux/math64.h>
static inline __u32 mercury_mod64(__u64 a, __u32 b)
{
	__u32 rem;

	div_u64_rem(a, b, &rem);
	return rem;
}
#else
static inline __u32 mercury_mod64(__u64 a, __u32 b)
{
	return (__u32)(a % b);
}
#endif

#include "uapi.h"

/* struct mercury_sock's flags, in both datapaths. */
#define MERCURY_F_INIT		0x01	/* init() ran (or we did it lazily) */
#define MERCURY_F_HELD		0x02	/* cwnd clamped to the floor */
#define MERCURY_F_FOUND		0x04	/* priority came from an entry */
#define MERCURY_F_FAR		0x08	/* held at MERCURY_FAR_FLOOR */

/* A job's flows sending from one host; more count as this many. */
#define MERCURY_JOB_MAX_FLOWS	16

/* The window a flow is sent with, in packets, plus the AI accumulator. */
struct mercury_window {
	__u32 cwnd;	/* packets */
	__u32 ssthresh;	/* packets */
	__u32 cnt;	/* acked packets * weight, toward the next +1 */
};

/*
 * Slow start up to ssthresh, then additive increase of weight/UNIT packets
 * per window's worth of ACKs, divided by @flows for one of @flows flows of
 * a job sharing its weight (see mercury_job_census_count). Never exceeds
 * @clamp.
 */
static inline void mercury_increase(struct mercury_window *w, __u32 acked,
				    __u32 weight, __u32 flows, __u32 clamp)
{
	__u32 step;

	if (w->cwnd < w->ssthresh) {
		__u32 room = w->ssthresh - w->cwnd;
		__u32 inc = acked < room ? acked : room;

		w->cwnd += inc;
		acked -= inc;
	}
	if (acked) {
		if (!flows || flows > MERCURY_JOB_MAX_FLOWS)
			flows = flows ? MERCURY_JOB_MAX_FLOWS : 1;
		step = (w->cwnd ? w->cwnd : 1) * MERCURY_WEIGHT_UNIT * flows;
		/* A flow idle in CA for long cannot wrap the accumulator. */
		if (w->cnt >= step)
			w->cnt = step - 1;
		w->cnt += acked * weight;
		if (w->cnt >= step) {
			w->cwnd += w->cnt / step;
			w->cnt %= step;
		}
	}
	if (w->cwnd > clamp)
		w->cwnd = clamp;
}

/*
 * HyStart's delay test, as tcp_cubic does it: leave slow start once the
 * smallest of a round's first MERCURY_SS_SAMPLES RTT samples exceeds the
 * minimum by clamp(min/8, 4 ms, 16 ms), for windows of at least 16 packets.
 * A round ends when what was in flight at its start is acked. Taking the
 * round's minimum, not any one sample, keeps a single delayed ACK (a
 * scheduling stall) from ending slow start for one flow of a pair, which
 * then starts congestion avoidance at a fraction of the other's window.
 */
#define MERCURY_SS_LOW_WINDOW		16
#define MERCURY_SS_SAMPLES		8
#define MERCURY_SS_DELAY_MIN_US		4000
#define MERCURY_SS_DELAY_MAX_US		16000

struct mercury_ss_round {
	__u32 end_seq;		/* snd_nxt when the round began */
	__u32 rtt_us;		/* smallest sample of the round so far */
	__u32 samples;		/* samples taken this round, up to MERCURY_SS_SAMPLES */
};

static inline int mercury_slow_start_done(struct mercury_ss_round *r, __u32 cwnd,
					  __u32 ssthresh, __u32 rtt_us,
					  __u32 min_rtt_us, __u32 snd_una,
					  __u32 snd_nxt)
{
	__u32 eta = min_rtt_us / 8;

	if (cwnd >= ssthresh || !min_rtt_us)
		return 0;
	/* Zeroed state, or everything sent when the round began acked: a new round. */
	if ((!r->samples && !r->rtt_us) || (__s32)(snd_una - r->end_seq) >= 0) {
		r->end_seq = snd_nxt;
		r->rtt_us = ~0U;
		r->samples = 0;
	}
	if (r->samples < MERCURY_SS_SAMPLES) {
		r->samples++;
		if (rtt_us < r->rtt_us)
			r->rtt_us = rtt_us;
	}
	if (cwnd < MERCURY_SS_LOW_WINDOW || r->samples < MERCURY_SS_SAMPLES)
		return 0;
	if (eta < MERCURY_SS_DELAY_MIN_US)
		eta = MERCURY_SS_DELAY_MIN_US;
	if (eta > MERCURY_SS_DELAY_MAX_US)
		eta = MERCURY_SS_DELAY_MAX_US;
	return r->rtt_us > min_rtt_us + eta;
}

/*
 * ssthresh after a loss, MulTCP's rule for a flow worth N Reno flows (N =
 * weight / UNIT): cut by 1/(2N). Above one unit that is gentler than Reno;
 * below it, harsher, but never more than 3/4, so a light flow keeps a
 * quarter of its window. Without the harsher cut a light flow, which grows
 * slowly and so rarely overflows a drop-tail queue, kept most of its window
 * while the losses landed on the heavy one: 64:4 came out near 1:1.
 */
static inline __u32 mercury_ssthresh_after_loss(__u32 cwnd, __u32 weight)
{
	__u32 units = weight ? weight : 1;
	__u64 cut = ((__u64)cwnd * MERCURY_WEIGHT_UNIT) / (2 * units);
	__u32 max_cut = cwnd - cwnd / 4;
	__u32 ss = cwnd - (cut < max_cut ? (__u32)cut : max_cut);

	return ss > 2 ? ss : 2;
}

/* How long an urgent rank's last activity keeps others held: about an RTT. */
#define MERCURY_HOLD_WINDOW_MIN_US	1000
#define MERCURY_HOLD_WINDOW_MAX_US	200000

static inline __u32 mercury_hold_window_us(__u32 srtt_us)
{
	__u32 w = srtt_us * 2;

	if (w < MERCURY_HOLD_WINDOW_MIN_US)
		return MERCURY_HOLD_WINDOW_MIN_US;
	if (w > MERCURY_HOLD_WINDOW_MAX_US)
		return MERCURY_HOLD_WINDOW_MAX_US;
	return w;
}

/*
 * A rank's activity stamp, per job: when a flow of the rank last had data
 * out, or, with MERCURY_STAMP_IDLE set, when one of its flows last ran out
 * of data (0: never). An idle stamp ends the rank's precedence at once:
 * otherwise a latency-bound urgent flow (each step of a ring waits on a
 * neighbour) held the less urgent ones through every gap between its
 * steps, for a hold window each time, and the link sat idle (VGG-16 in
 * bench-torch: the classifier's bucket held at the floor while the conv
 * buckets' rings left the link 80% idle). Another flow of the rank that is
 * still sending stamps it active again on its next ACK.
 */
#define MERCURY_STAMP_IDLE	(1ULL << 63)

/* Whether stamp @t says its rank was active within @window_us of @now_us. */
static inline int mercury_stamp_active(__u64 t, __u64 now_us, __u32 window_us)
{
	if (!t || (t & MERCURY_STAMP_IDLE))
		return 0;
	/* A stamp slightly ahead of our clock is fresh, too. */
	return t > now_us || now_us - t < window_us;
}

/*
 * How many of ranks @from .. @to - 1 were active within @window_us of
 * @now_us (@last_active_us: the job's stamps, above).
 */
static inline __u32 mercury_ranks_active(const __u64 *last_active_us,
					 __u32 from, __u32 to, __u64 now_us,
					 __u32 window_us)
{
	__u32 r, n = 0;

	/* Constant bounds: the BPF verifier must see every index in range. */
	for (r = 0; r < MERCURY_NUM_RANKS; r++) {
		if (r < from)
			continue;
		if (r >= to)
			break;
		if (mercury_stamp_active(last_active_us[r], now_us, window_us))
			n++;
	}
	return n;
}

/*
 * How many ranks more urgent than @rank were active: if any, the flow is
 * held; next in line for the link if one, further back if more. Unranked
 * flows are never held.
 */
static inline __u32 mercury_ranks_ahead(const __u64 *last_active_us, __u32 rank,
					__u64 now_us, __u32 window_us)
{
	if (rank >= MERCURY_NUM_RANKS)
		return 0;
	return mercury_ranks_active(last_active_us, 0, rank, now_us, window_us);
}

/*
 * The window a held flow keeps. The flow next in line keeps @floor (the
 * cwnd_floor parameter): its release is seen on an ACK, and with one packet
 * out the receiver delays that ACK (40 ms and more), so a 1-packet floor
 * made every hand-over late (bench-torch, BERT-base at 25 Mbit/s: 2.59 s
 * against 2.35 s). A flow with two or more ranks ahead is not released
 * before it is next in line, and takes @floor back on the first ACK after
 * that; until then it keeps one packet out. Every held flow's floor is
 * queue in front of the most urgent one, which on a small bandwidth-delay
 * product is a share of the link: six held lanes at 2 packets took 22% of
 * it from rank 0 in that run.
 */
#define MERCURY_FAR_FLOOR	1

static inline __u32 mercury_held_floor(__u32 floor, __u32 ranks_ahead)
{
	return ranks_ahead > 1 && floor > MERCURY_FAR_FLOOR ?
		MERCURY_FAR_FLOOR : floor;
}

/*
 * How many ranks less urgent than @rank were active: this
 * flow holds at least one flow of each, and the queue it sees is partly
 * theirs (so slow start must not end on that delay, and yielding stops at
 * mercury_preempt_window()).
 */
static inline __u32 mercury_ranks_held(const __u64 *last_active_us, __u32 rank,
				       __u64 now_us, __u32 window_us)
{
	if (rank >= MERCURY_NUM_RANKS)
		return 0;
	return mercury_ranks_active(last_active_us, rank + 1, MERCURY_NUM_RANKS,
				    now_us, window_us);
}

/*
 * The window a flow that holds @held_ranks ranks keeps against queueing
 * delay: MERCURY_PREEMPT_SHARE times the floors of the flows it holds (one
 * per rank, at least: @floor for the next in line, a packet for the rest,
 * mercury_held_floor), so it keeps at least two thirds of what is in
 * flight. The held flows' floors are a queue of their own, and where the
 * link's bandwidth-delay product is a packet or two they alone exceed the
 * delay threshold: yielding below this window, the most urgent flow yielded
 * to the flows it held (bench-torch, BERT-base at 25 Mbit/s: rank 1 ran at
 * a window of 3-5 packets, a quarter of the link, behind five held lanes).
 * Up to it, it slow-starts (mercury_preempt_ssthresh).
 */
#define MERCURY_PREEMPT_SHARE	2

static inline __u32 mercury_preempt_window(__u32 floor, __u32 held_ranks)
{
	__u32 floors;

	if (!held_ranks)
		return floor;
	floors = mercury_held_floor(floor, 1) +
		 (held_ranks - 1) * mercury_held_floor(floor, 2);
	return floors * MERCURY_PREEMPT_SHARE;
}

/*
 * ssthresh for a flow that holds others, outside a reduction: at least its
 * preempt window, so a window left small by yields or a loss regains it in
 * a few RTTs, not one packet an RTT. Returns 1 if it was raised.
 */
static inline int mercury_preempt_ssthresh(struct mercury_window *w,
					   __u32 preempt_window)
{
	if (w->ssthresh >= preempt_window)
		return 0;
	w->ssthresh = preempt_window;
	return 1;
}

/*
 * Starvation guard. A flow held continuously since @held_since_us gets a
 * grace period of max_hold/8 after every max_hold of holding. True while the
 * flow is inside a grace period and must not be held.
 */
static inline int mercury_in_grace(__u64 held_since_us, __u64 now_us,
				   __u32 max_hold_ms)
{
	__u32 hold_us = max_hold_ms * 1000;	/* <= 60 s: fits */
	__u32 period_us = hold_us + hold_us / 8;

	if (!max_hold_ms || now_us <= held_since_us)
		return 0;
	/* Where in its period the hold is, on the full 64-bit elapsed time:
	 * capping it to 32 bits froze the guard after 71.6 minutes. */
	return mercury_mod64(now_us - held_since_us, period_us) >= hold_us;
}

/* Delay over the base RTT a flow of @rank tolerates; 0: never yields. */
static inline __u32 mercury_delay_threshold_us(__u32 rank, __u32 thresh_us)
{
	if (rank == 0 || rank >= MERCURY_NUM_RANKS || !thresh_us)
		return 0;
	return thresh_us * (MERCURY_NUM_RANKS - rank) / (MERCURY_NUM_RANKS - 1);
}

static inline int mercury_should_yield(__u32 rank, __u32 rtt_us,
				       __u32 base_rtt_us, __u32 thresh_us)
{
	__u32 thr = mercury_delay_threshold_us(rank, thresh_us);

	return thr && base_rtt_us && rtt_us > base_rtt_us + thr;
}

/*
 * True if a job other than @job had a ranked flow with data out within
 * @window_us of @now_us. @job_active_us[j]: when job j last did.
 */
static inline int mercury_other_job_active(const __u64 *job_active_us,
					   __u32 job, __u64 now_us,
					   __u32 window_us)
{
	__u32 j;

	for (j = 0; j < MERCURY_NUM_JOBS; j++) {
		__u64 t = job_active_us[j];

		if (j == job || !t)
			continue;
		if (t > now_us || now_us - t < window_us)
			return 1;
	}
	return 0;
}

/*
 * How long another job's last ACK keeps a job's flows from yielding to
 * delay: the hold window (about an RTT), but no less than
 * MERCURY_JOB_WINDOW_MIN_US. A flow stamps only on ACKs, and one that is
 * still sending can go tens of ms without one: a delayed ACK (40 ms), a
 * sender briefly out of data, a busy host: gaps of 20 to 62 ms traced in
 * a loaded test VM, where a window of two RTTs (15 ms) let a job's flow
 * yield up to 35 times in 6 s beside another job's busy flow (118 times in
 * one CI run). The cost: for up to 100 ms after another job's last ACK,
 * this job's less urgent flows do not give way by delay to its urgent
 * flows on other hosts.
 */
#define MERCURY_JOB_WINDOW_MIN_US	100000

static inline __u32 mercury_job_window_us(__u32 hold_window_us)
{
	return hold_window_us > MERCURY_JOB_WINDOW_MIN_US ? hold_window_us :
							    MERCURY_JOB_WINDOW_MIN_US;
}

/*
 * Starvation guard for delay yielding, for flows of a job: another job's
 * traffic can keep a shared queue full for as long as it likes. @since_us is
 * when the flow's current run of delayed samples began (0: none). True if
 * the flow may yield now; false in a grace period (or without delay).
 */
static inline int mercury_yield_allowed(__u64 *since_us, int delayed,
					__u64 now_us, __u32 max_hold_ms)
{
	if (!delayed) {
		*since_us = 0;
		return 0;
	}
	if (!*since_us)
		*since_us = now_us;
	return !mercury_in_grace(*since_us, now_us, max_hold_ms);
}

/*
 * Shares per job, not per flow. A job's flows on this host that are sending
 * (ranked, not held) count themselves once per epoch (an epoch: about an
 * RTT, the counting flow's hold window). Each of n such flows grows by
 * weight/n, and when one of them backs off on a loss, the others back off
 * with it (mercury_job_cut_due): together they grow and shrink as one flow
 * of that weight, so a job does not get more of a link by opening more
 * flows. (Growth by weight/n alone left 3 flows of a job near 1.3x one
 * flow's share, in theory and on the test link; growth by weight/n^2 gets
 * 1x in theory, but converges so slowly that one flow of the 3 kept most of
 * their share.) Counted afresh every epoch, so no count can drift; two
 * flows counting at once on two CPUs may lose one, for that epoch only.
 */
struct mercury_job_census {
	__u64 epoch_us;		/* when the current epoch began */
	__u32 cur;		/* flows counted in it so far */
	__u32 prev;		/* flows counted in the one before */
	__u64 cut_us;		/* when a flow of the job last backed off on a loss */
};

/*
 * Count a sending flow of the job (@seen: the epoch it last counted itself
 * in, low 32 bits) and return the job's flows here, 1 ..
 * MERCURY_JOB_MAX_FLOWS: the larger of this epoch's count so far and the
 * last whole epoch's.
 */
static inline __u32 mercury_job_census_count(struct mercury_job_census *c,
					     __u32 *seen, __u64 now_us,
					     __u32 epoch_len_us)
{
	__u32 n;

	if (now_us >= c->epoch_us + epoch_len_us) {
		/* A whole epoch without any flow: nobody was sending. */
		c->prev = now_us >= c->epoch_us + 2ULL * epoch_len_us ? 0 : c->cur;
		c->cur = 0;
		c->epoch_us = now_us;
	}
	if (*seen != (__u32)c->epoch_us || !c->cur) {
		*seen = (__u32)c->epoch_us;
		c->cur++;
	}
	n = c->cur > c->prev ? c->cur : c->prev;
	if (!n)
		return 1;
	return n < MERCURY_JOB_MAX_FLOWS ? n : MERCURY_JOB_MAX_FLOWS;
}

/*
 * Whether the flow last backed off (a delay yield or a loss cut; @last_us:
 * low 32 bits of the time) less than an RTT ago: TCP-LP's at most once an
 * RTT, shared by both kinds of back-off.
 */
static inline int mercury_backed_off_within_rtt(__u32 last_us, __u64 now_us,
						__u32 srtt_us)
{
	return (__u32)now_us - last_us < srtt_us;
}

/*
 * True once per loss cut of another flow of the job (@seen: the cut it last
 * followed, or made, low 32 bits) made within @window_us: this flow backs
 * off with it (mercury_job_cut), so the job shrinks as one flow would. At
 * most once an RTT (@srtt_us), its own cuts and yields included: @last_us
 * (low 32 bits) is when it last backed off, and becomes now if it does.
 */
static inline int mercury_job_cut_due(const struct mercury_job_census *c,
				      __u32 *seen, __u32 *last_us,
				      __u64 now_us, __u32 window_us,
				      __u32 srtt_us)
{
	__u64 t = c->cut_us;

	if (!t || (__u32)t == *seen)
		return 0;
	*seen = (__u32)t;
	if (t <= now_us && now_us - t >= window_us)
		return 0;	/* stale */
	if (mercury_backed_off_within_rtt(*last_us, now_us, srtt_us))
		return 0;
	*last_us = (__u32)now_us;
	return 1;
}

/* Back off as after a loss of its own, without one. */
static inline void mercury_job_cut(struct mercury_window *w, __u32 weight)
{
	w->cwnd = mercury_ssthresh_after_loss(w->cwnd, weight);
	w->ssthresh = w->cwnd;
	w->cnt = 0;
}

/* Yield to queueing delay: halve, but never below the floor. */
static inline void mercury_yield(struct mercury_window *w, __u32 floor)
{
	__u32 half = w->cwnd / 2;

	w->cwnd = half > floor ? half : floor;
	w->ssthresh = w->cwnd;
	w->cnt = 0;
}

/* A flow's own hold bookkeeping (per socket, in icsk_ca_priv). */
struct mercury_hold_state {
	__u64 held_since_us;	/* when the current preemption began; 0: none */
	__u32 saved_cwnd;	/* packets: cwnd before the hold */
	__u32 saved_ssthresh;	/* ssthresh before a hold clamped it; 0: not clamped */
};

/* Enter held: remember the window to come back to, clamp to the floor. */
static inline void mercury_hold(struct mercury_window *w,
				struct mercury_hold_state *h, __u32 floor)
{
	h->saved_cwnd = w->cwnd;
	if (w->cwnd > floor)
		w->cwnd = floor;
	w->cnt = 0;
}

/*
 * In CWR and Recovery the kernel sets cwnd itself (PRR, toward ssthresh)
 * after the CC's hooks ran, and sets cwnd = ssthresh when the reduction
 * ends: a held flow's ssthresh must be at the floor too, or it bursts.
 */
static inline void mercury_hold_ssthresh(struct mercury_window *w,
					 struct mercury_hold_state *h,
					 __u32 floor)
{
	if (w->ssthresh <= floor)
		return;
	if (!h->saved_ssthresh)
		h->saved_ssthresh = w->ssthresh;
	w->ssthresh = floor;
}

/* Leave held: take back at once what the flow had before. */
static inline void mercury_unhold(struct mercury_window *w,
				  struct mercury_hold_state *h)
{
	if (h->saved_cwnd > w->cwnd)
		w->cwnd = h->saved_cwnd;
	if (h->saved_ssthresh > w->ssthresh)
		w->ssthresh = h->saved_ssthresh;
	h->saved_ssthresh = 0;
}

/*
 * A loss while held. The window to cut is the one the flow comes back to,
 * not the floor: cutting the floor left ssthresh at 2, and recovery, which
 * drives cwnd to ssthresh, then took the whole window the hold had saved
 * (a bulk flow of bench-torch regrew from 2 packets after every such loss).
 * The saved window shrinks as after a loss of its own; the kernel's
 * reduction works toward the floor (returned: the new ssthresh) while held.
 */
static inline __u32 mercury_held_loss(struct mercury_hold_state *h,
				      __u32 weight, __u32 floor)
{
	__u32 ss = mercury_ssthresh_after_loss(h->saved_cwnd, weight);

	h->saved_cwnd = ss;
	h->saved_ssthresh = ss;
	return floor < ss ? floor : ss;
}

/*
 * A held flow's window above the floor outside CWR/Recovery was raised
 * behind the hold's back (the hold clamps it on every ACK, and only the
 * kernel's end of a reduction or an undo can raise it): the flow may have
 * burst. Checked before the hold clamps it again, against the floor it was
 * held at; counted, never expected (but once per held flow if cwnd_floor is
 * lowered while it is held).
 */
static inline int mercury_hold_leaked(const struct mercury_window *w, int held,
				      int in_reduction, __u32 floor)
{
	return held && !in_reduction && w->cwnd > floor;
}

/* What one hold decision did to a flow's window. */
enum mercury_hold_change {
	MERCURY_HOLD_UNCHANGED,	/* neither held nor to be held: untouched */
	MERCURY_HOLD_ENTERED,	/* clamped to the floor */
	MERCURY_HOLD_KEPT,	/* still held, at the floor unless in a reduction */
	MERCURY_HOLD_RELEASED,	/* the more urgent rank went quiet */
	MERCURY_HOLD_GRANTED,	/* let go by the starvation guard */
};

/*
 * The hold decision, once per ACK: a flow @preempted by a more urgent rank
 * is held at @floor unless the starvation guard grants it a grace period,
 * and gets its window back when it is no longer held. @held says whether
 * it was held before; @in_reduction whether the kernel is in CWR or
 * Recovery (it then drives cwnd toward ssthresh). A held flow below @floor
 * outside a reduction is raised to it: @floor grew (mercury_held_floor) or
 * a timeout left the window at one packet, and a held flow never grows.
 */
static inline enum mercury_hold_change
mercury_hold_step(struct mercury_window *w, struct mercury_hold_state *h,
		  int held, int preempted, int in_reduction, __u64 now_us,
		  __u32 max_hold_ms, __u32 floor)
{
	int hold;

	if (!preempted)
		h->held_since_us = 0;
	else if (!h->held_since_us)
		h->held_since_us = now_us;
	hold = preempted && !mercury_in_grace(h->held_since_us, now_us,
					       max_hold_ms);

	if (hold) {
		if (held) {
			if (w->cwnd > floor || (w->cwnd < floor && !in_reduction))
				w->cwnd = floor;
		} else {
			mercury_hold(w, h, floor);
		}
		if (in_reduction)
			mercury_hold_ssthresh(w, h, floor);
		return held ? MERCURY_HOLD_KEPT : MERCURY_HOLD_ENTERED;
	}
	if (held) {
		mercury_unhold(w, h);
		return preempted ? MERCURY_HOLD_GRANTED : MERCURY_HOLD_RELEASED;
	}
	return MERCURY_HOLD_UNCHANGED;
}

/*
 * The windows the kernel may be handed, by the hooks or by its own steps
 * on what the hooks left: 1 .. MERCURY_WINDOW_MAX packets for cwnd and
 * ssthresh alike. tcp_snd_cwnd_set() WARNs on a window <= 0 as an int (a
 * crash under panic_on_warn), and the kernel's own steps turn a bad
 * ssthresh into one:
 *  - PRR (tcp_cwnd_reduction, in CWR and Recovery) sets cwnd = in_flight +
 *    sndcnt with sndcnt >= 0, and sndcnt = 0 with nothing in flight only
 *    if ssthresh is 0: cwnd 0. An ssthresh of 2^31 or more is negative as
 *    the int PRR computes with, and its sndcnt overflows. (Lowering
 *    ssthresh in mid-reduction only stalls PRR, sndcnt 0: cwnd stays at
 *    what is in flight.)
 *  - The end of a reduction sets cwnd = ssthresh.
 *  - An undo sets cwnd = undo_cwnd().
 */
#define MERCURY_WINDOW_MAX	0x7fffffffU	/* TCP_INFINITE_SSTHRESH */

static inline int mercury_window_ok(__u32 packets)
{
	return packets >= 1 && packets <= MERCURY_WINDOW_MAX;
}

static inline __u32 mercury_window_clamp(__u32 packets)
{
	if (!packets)
		return 1;
	return packets > MERCURY_WINDOW_MAX ? MERCURY_WINDOW_MAX : packets;
}

/*
 * A window found out of bounds as a hook starts (the kernel warned, or is
 * about to): put it back in bounds, as the hook the kernel skipped would
 * have left it. pkts_acked runs before PRR on every ACK, so an ssthresh
 * repaired there never reaches PRR's step. It becomes what ssthresh() would
 * have returned when the reduction began, from the window then
 * (@prior_cwnd, the kernel's), not from the one PRR has since shrunk
 * toward what is in flight: repaired from that, a flow left recovery at 2
 * packets (jobs/weights split 0.66:1 in a stress run). Outside a
 * reduction a cwnd of 0 is what a skipped undo_cwnd() left: the window
 * before the reduction again. In one PRR sets cwnd on this ACK anyway.
 * Returns 1 if anything was repaired.
 */
static inline int mercury_repair_window(struct mercury_window *w, __u32 weight,
					__u32 prior_cwnd, int in_reduction)
{
	int repaired = 0;

	if (!mercury_window_ok(w->cwnd)) {
		w->cwnd = !in_reduction && mercury_window_ok(prior_cwnd) ? prior_cwnd : 1;
		repaired = 1;
	}
	if (!mercury_window_ok(w->ssthresh)) {
		w->ssthresh = mercury_ssthresh_after_loss(in_reduction &&
							  mercury_window_ok(prior_cwnd) ?
							  prior_cwnd : w->cwnd, weight);
		repaired = 1;
	}
	return repaired;
}

/*
 * Defence against a window the CC did not set (seen with BPF CCs: recovery
 * entered without ssthresh() having run). Returns 1 if anything was fixed.
 */
static inline int mercury_sanitize(struct mercury_window *w, __u32 clamp)
{
	int fixed = 0;

	if (!clamp)
		clamp = 1;
	if (w->cwnd == 0 || w->cwnd > clamp) {
		w->cwnd = w->cwnd ? clamp : 2;
		fixed = 1;
	}
	if (w->ssthresh == 0) {
		w->ssthresh = 2;
		fixed = 1;
	}
	return fixed;
}

/*
 * The per-flow state every glue keeps in icsk_ca_priv, after what the glue
 * adds itself (the module: its entry's expiry; the BPF program: when to
 * look the priority up again): one list for the module, the BPF program
 * and the unit tests, so that the hooks (cc_hooks.h) find the same fields
 * in each. Largest first, so that no glue pads it.
 */
#define MERCURY_SOCK_STATE						\
	__u64 yield_since_us;	/* this run of delayed samples began; 0: none */ \
	struct mercury_hold_state hold;					\
	struct mercury_ss_round ss;	/* HyStart's delay test, this round */ \
	__u32 table_gen;	/* the table gen the priority was resolved at */ \
	__u32 tag;		/* sk_priority the priority was resolved for */	\
	__u32 cnt;		/* weighted-AI accumulator */			\
	__u32 last_backoff_us;	/* low 32 bits of tcp_mstamp at last yield or cut */ \
	__u32 holds;		/* times held */				\
	__u32 census_seen;	/* epoch of its job's census it last counted in */ \
	__u32 cut_seen;		/* its job's last loss cut it followed or made */ \
	__u16 weight;		/* MERCURY_WEIGHT_UNIT = one Reno flow */	\
	__u8 flows;		/* its job's flows here sending, it included */	\
	__u8 rank;		/* MERCURY_RANK_NONE = unranked */		\
	__u8 job;		/* MERCURY_JOB_NONE = no job */			\
	__u8 flags;		/* MERCURY_F_* */

#endif /* MERCURY_CC_CORE_H */
