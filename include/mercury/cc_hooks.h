/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The congestion-control hooks of both datapaths, written once: what each
 * hook does, in which order, per ACK. The arithmetic is cc_core.h; this is
 * the order of calls around it. tcp_mercury.ko (kmod/mercury_cc.c) and the
 * BPF struct_ops program (kmod/bpf/tcp_mercury.bpf.c) include it after
 * defining their glue, and turn each mercury_on_*() into their hook.
 *
 * The glue a datapath defines first:
 *
 *   struct mercury_sock       per-flow state in icsk_ca_priv, with at least
 *                             the fields used below
 *   struct mercury_ctx        the flow's per-netns state and parameters
 *   MERCURY_HOOK              how these functions are declared (the BPF
 *                             program inlines everything)
 *   MERCURY_COUNT(x, EVENT)   count EVENT (HOLDS, RELEASES, ...) in x's netns
 *   MERCURY_READ(v), MERCURY_WRITE(v, val)
 *                             a per-netns word other flows write too
 *   MERCURY_FENCE(p)          after a NULL check the verifier must keep
 *   mercury_priv(sk)          the flow's struct mercury_sock (icsk_ca_priv)
 *   mercury_ctx_of(sk, x)     fills x for sk's netns (may create its state);
 *   mercury_ctx_find(sk, x)   the same, creating nothing (release())
 *   mercury_cwnd_floor(x), mercury_max_hold_ms(x), mercury_delay_thresh_us(x),
 *   mercury_table_gen(x)      parameters and the table generation
 *   mercury_stamps(x, job)    when each rank of the job last had data out
 *                             (u64[MERCURY_NUM_RANKS]), or NULL
 *   mercury_job_active(x)     when each job last had data out, or NULL
 *   mercury_census(x, job)    the job's census of sending flows, or NULL
 *   mercury_refresh_prio(sk, ca, x)   look the flow's rank, weight, job up
 *   mercury_changed(sk, ca, change, cwnd)   after a hold changed
 *   mercury_snd_cwnd(tp), mercury_set_snd_cwnd(tp, v), mercury_min_rtt(tp),
 *   mercury_in_reduction(sk), mercury_has_data(sk), mercury_cwnd_limited(sk),
 *   mercury_ca_state(sk), mercury_clock_us(), mercury_reno_undo_cwnd(sk),
 *   mercury_handshaking(sk)   (SYN_SENT or SYN_RECV)
 *                             the kernel's TCP state, as each datapath may
 *                             read it
 *   mercury_drop_inherited_pacing(sk)   see mercury_do_init()
 */
#ifndef _MERCURY_CC_HOOKS_H
#define _MERCURY_CC_HOOKS_H

MERCURY_HOOK void mercury_load(const struct tcp_sock *tp,
			       const struct mercury_sock *ca,
			       struct mercury_window *w)
{
	w->cwnd = mercury_snd_cwnd(tp);
	w->ssthresh = tp->snd_ssthresh;
	w->cnt = ca->cnt;
}

/* The one way the hooks write a window: never one the kernel WARNs about
 * or turns into one (mercury_window_clamp, cc_core.h). */
MERCURY_HOOK void mercury_store(struct tcp_sock *tp, struct mercury_sock *ca,
				const struct mercury_window *w)
{
	mercury_set_snd_cwnd(tp, mercury_window_clamp(w->cwnd));
	tp->snd_ssthresh = mercury_window_clamp(w->ssthresh);
	ca->cnt = w->cnt;
}

MERCURY_HOOK void mercury_do_init(struct sock *sk, struct mercury_sock *ca)
{
	struct mercury_ctx x;

	mercury_ctx_of(sk, &x);
	__builtin_memset(ca, 0, sizeof(*ca));
	ca->flags = MERCURY_F_INIT;
	ca->table_gen = mercury_table_gen(&x) - 1;	/* force a lookup */
	mercury_refresh_prio(sk, ca, &x);
	MERCURY_COUNT(&x, FLOWS_INIT);
	/*
	 * A socket switched to mercury from bbr keeps the internal pacing
	 * bbr's init() asked for (a switch of CC never clears it): a lane
	 * released from a hold was then paced at 1.2 x cwnd / srtt with srtt
	 * still inflated by the hold, and crept (bench-torch, BERT-base: 2-6
	 * Mbit/s of 50 for 65 ms). Mercury does not pace; a user's
	 * SO_MAX_PACING_RATE and fq's own pacing are left alone.
	 */
	if (mercury_drop_inherited_pacing(sk))
		MERCURY_COUNT(&x, PACING_CLEARED);
}

/* Hooks can run before init() (passive open); make state valid first. */
MERCURY_HOOK struct mercury_sock *mercury_ca(struct sock *sk)
{
	struct mercury_sock *ca = mercury_priv(sk);

	if (!(ca->flags & MERCURY_F_INIT))
		mercury_do_init(sk, ca);
	return ca;
}

/* init(): a lazy init from an early ACK hook may have run already. */
MERCURY_HOOK void mercury_on_init(struct sock *sk)
{
	mercury_ca(sk);
}

/*
 * A window out of bounds found as a hook starts (cc_core.h,
 * mercury_window_ok): a cwnd the kernel WARNs about, or an ssthresh its
 * next step turns into one. Counted, never expected (zero_windows): the
 * kernel warns once per call site and boot, this counts every one, whoever
 * set it. Repaired when @repair (mercury_repair_window).
 */
MERCURY_HOOK void mercury_check_window(struct sock *sk, struct mercury_sock *ca,
				       struct mercury_ctx *x, int repair)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mercury_window w;

	mercury_load(tp, ca, &w);
	if (mercury_window_ok(w.cwnd) && mercury_window_ok(w.ssthresh))
		return;
	MERCURY_COUNT(x, ZERO_WINDOWS);
	if (repair && mercury_repair_window(&w, ca->weight, tp->prior_cwnd,
					    mercury_in_reduction(sk)))
		mercury_store(tp, ca, &w);
}

/* Note that this flow's rank has data outstanding right now. */
MERCURY_HOOK void mercury_mark_active(struct mercury_ctx *x,
				      const struct mercury_sock *ca,
				      __u64 now_us)
{
	__u32 rank = ca->rank, job = ca->job;
	__u64 *stamps = mercury_stamps(x, job);
	__u64 *active = mercury_job_active(x);

	__u64 t;

	if (!stamps || !active || rank >= MERCURY_NUM_RANKS || job >= MERCURY_NUM_JOBS)
		return;
	/* Shared by all flows of the rank: write rarely to spare the cache
	 * line, but at once over a stamp of the rank gone idle. */
	t = MERCURY_READ(stamps[rank]);
	if ((t & MERCURY_STAMP_IDLE) || now_us - t >= 100) {
		MERCURY_WRITE(stamps[rank], now_us);
		MERCURY_WRITE(active[job], now_us);
	}
}

/* This flow's last byte was acked and it has nothing queued: its rank goes
 * quiet now, not a hold window later (cc_core.h, MERCURY_STAMP_IDLE). */
MERCURY_HOOK void mercury_mark_idle(struct mercury_ctx *x,
				    const struct mercury_sock *ca, __u64 now_us)
{
	__u32 rank = ca->rank, job = ca->job;
	__u64 *stamps = mercury_stamps(x, job);

	if (!stamps || rank >= MERCURY_NUM_RANKS || job >= MERCURY_NUM_JOBS)
		return;
	if (!(MERCURY_READ(stamps[rank]) & MERCURY_STAMP_IDLE))
		MERCURY_WRITE(stamps[rank], now_us | MERCURY_STAMP_IDLE);
}

/* The floor a held flow was last held at (mercury_held_floor). */
MERCURY_HOOK __u32 mercury_hold_floor_of(const struct mercury_sock *ca,
					 struct mercury_ctx *x)
{
	return (ca->flags & MERCURY_F_FAR) ? MERCURY_FAR_FLOOR :
					     mercury_cwnd_floor(x);
}

MERCURY_HOOK void mercury_update_hold(struct sock *sk, struct mercury_sock *ca,
				      struct mercury_ctx *x, __u64 now_us,
				      __u32 window_us)
{
	struct tcp_sock *tp = tcp_sk(sk);
	int held = !!(ca->flags & MERCURY_F_HELD);
	int in_reduction = mercury_in_reduction(sk);
	const __u64 *stamps = mercury_stamps(x, ca->job);
	__u32 held_at = mercury_hold_floor_of(ca, x);
	enum mercury_hold_change change;
	struct mercury_window w;
	__u32 ahead, floor;

	ahead = stamps ? mercury_ranks_ahead(stamps, ca->rank, now_us, window_us) : 0;
	floor = mercury_held_floor(mercury_cwnd_floor(x), ahead);
	mercury_load(tp, ca, &w);
	if (mercury_hold_leaked(&w, held, in_reduction, held_at))
		MERCURY_COUNT(x, HOLD_LEAKS);
	else if (held && in_reduction)
		MERCURY_COUNT(x, HELD_IN_RECOVERY);
	change = mercury_hold_step(&w, &ca->hold, held, ahead > 0, in_reduction,
				   now_us, mercury_max_hold_ms(x), floor);
	switch (change) {
	case MERCURY_HOLD_UNCHANGED:
		return;
	case MERCURY_HOLD_ENTERED:
		ca->flags |= MERCURY_F_HELD;
		ca->holds++;
		MERCURY_COUNT(x, HOLDS);
		break;
	case MERCURY_HOLD_KEPT:
		break;
	case MERCURY_HOLD_RELEASED:
	case MERCURY_HOLD_GRANTED:
		ca->flags &= ~(MERCURY_F_HELD | MERCURY_F_FAR);
		if (change == MERCURY_HOLD_GRANTED)
			MERCURY_COUNT(x, STARVE_GRANTS);
		else
			MERCURY_COUNT(x, RELEASES);
		break;
	}
	if (ca->flags & MERCURY_F_HELD) {
		if (floor < mercury_cwnd_floor(x))
			ca->flags |= MERCURY_F_FAR;
		else
			ca->flags &= ~MERCURY_F_FAR;
	}
	mercury_store(tp, ca, &w);
	if (change != MERCURY_HOLD_KEPT)
		mercury_changed(sk, ca, change, w.cwnd);
}

/* A job's flows here share its weight: shares go per job, not per flow. */
MERCURY_HOOK void mercury_update_share(struct sock *sk, struct mercury_sock *ca,
				       struct mercury_ctx *x, __u64 now_us,
				       __u32 window_us)
{
	__u32 job = ca->job;
	struct mercury_job_census *census = mercury_census(x, job);

	if (!census || job == MERCURY_JOB_NONE || (ca->flags & MERCURY_F_HELD) ||
	    !mercury_has_data(sk)) {
		ca->flows = 1;
		return;
	}
	ca->flows = mercury_job_census_count(census, &ca->census_seen, now_us,
					     window_us);
}

/* Another flow of the job backed off on a loss: back off with it. */
MERCURY_HOOK void mercury_follow_job_cut(struct sock *sk, struct mercury_sock *ca,
					 struct mercury_ctx *x, __u64 now_us,
					 __u32 window_us)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 job = ca->job;
	struct mercury_job_census *census = mercury_census(x, job);
	struct mercury_window w;

	if (!census || job == MERCURY_JOB_NONE || (ca->flags & MERCURY_F_HELD) ||
	    mercury_in_reduction(sk) ||
	    !mercury_job_cut_due(census, &ca->cut_seen, &ca->last_backoff_us,
				 now_us, window_us, tp->srtt_us >> 3))
		return;
	mercury_load(tp, ca, &w);
	mercury_job_cut(&w, ca->weight);
	mercury_store(tp, ca, &w);
	MERCURY_COUNT(x, JOB_CUTS);
}

/*
 * Delay-based yielding, for a ranked flow that is not held. A flow holding
 * others yields no lower than its @preempt_window (cc_core.h; 0: it holds
 * nothing, and yields down to the cwnd floor).
 */
MERCURY_HOOK void mercury_maybe_yield(struct sock *sk, struct mercury_sock *ca,
				      struct mercury_ctx *x, __s32 rtt_us,
				      __u64 now_us, __u32 window_us,
				      __u32 preempt_window)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 *active = mercury_job_active(x);
	struct mercury_window w;
	int delayed;

	delayed = mercury_should_yield(ca->rank, rtt_us, mercury_min_rtt(tp),
				       mercury_delay_thresh_us(x));
	/* Another job sending from this host: the queue is theirs too. */
	if (delayed && ca->job != MERCURY_JOB_NONE && active &&
	    mercury_other_job_active(active, ca->job, now_us,
				     mercury_job_window_us(window_us)))
		delayed = 0;
	/* At most once an RTT, like TCP-LP. */
	if (delayed && mercury_backed_off_within_rtt(ca->last_backoff_us, now_us,
						     tp->srtt_us >> 3))
		return;
	/* The queue may be another job's: a job's flow yields for a while only. */
	if (ca->job != MERCURY_JOB_NONE &&
	    !mercury_yield_allowed(&ca->yield_since_us, delayed, now_us,
				   mercury_max_hold_ms(x))) {
		if (delayed) {
			ca->last_backoff_us = (__u32)now_us;
			MERCURY_COUNT(x, YIELD_GRANTS);
		}
		return;
	}
	if (!delayed)
		return;
	/* The queue is the held flows' floors. */
	if (preempt_window && mercury_snd_cwnd(tp) <= preempt_window)
		return;
	ca->last_backoff_us = (__u32)now_us;
	mercury_load(tp, ca, &w);
	mercury_yield(&w, preempt_window ? preempt_window : mercury_cwnd_floor(x));
	mercury_store(tp, ca, &w);
	MERCURY_COUNT(x, DELAY_BACKOFFS);
}

/* pkts_acked: the per-ACK step, with the sample's RTT (<= 0: none). */
MERCURY_HOOK void mercury_on_acked(struct sock *sk, struct mercury_sock *ca,
				   __s32 rtt_us)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 now_us = tp->tcp_mstamp;
	/* About an RTT: how long activity counts, for every rule below. */
	__u32 window_us = mercury_hold_window_us(tp->srtt_us >> 3);
	const __u64 *stamps;
	struct mercury_window w;
	struct mercury_ctx x;
	__u32 held_ranks, preempt_window;

	/*
	 * The handshake's ACK: the kernel sets the initial window after it
	 * (tcp_init_transfer), over a hold entered here, and the flow sent
	 * that window while held. The first ACK of data decides.
	 */
	if (mercury_handshaking(sk))
		return;
	mercury_ctx_of(sk, &x);
	/* Before this ACK's PRR step, which runs after us (see cc_core.h). */
	mercury_check_window(sk, ca, &x, 1);
	mercury_refresh_prio(sk, ca, &x);
	stamps = mercury_stamps(&x, ca->job);
	held_ranks = stamps ? mercury_ranks_held(stamps, ca->rank, now_us,
						 window_us) : 0;
	/*
	 * Delay seen while holding others is their queue draining. In CWR and
	 * Recovery cwnd is PRR's, and slow start is not what it runs.
	 */
	if (rtt_us > 0 &&
	    mercury_slow_start_done(&ca->ss, mercury_snd_cwnd(tp), tp->snd_ssthresh,
				    rtt_us, mercury_min_rtt(tp), tp->snd_una,
				    tp->snd_nxt) &&
	    !held_ranks && !mercury_in_reduction(sk)) {
		mercury_load(tp, ca, &w);
		w.ssthresh = w.cwnd;
		mercury_store(tp, ca, &w);
	}
	if (ca->rank >= MERCURY_NUM_RANKS) {
		if (ca->flags & MERCURY_F_HELD)	/* lost its rank while held */
			mercury_update_hold(sk, ca, &x, now_us, window_us);
		return;
	}
	if (mercury_has_data(sk))
		mercury_mark_active(&x, ca, now_us);
	else
		mercury_mark_idle(&x, ca, now_us);
	mercury_update_hold(sk, ca, &x, now_us, window_us);
	mercury_update_share(sk, ca, &x, now_us, window_us);
	mercury_follow_job_cut(sk, ca, &x, now_us, window_us);
	if (ca->flags & MERCURY_F_HELD)
		return;
	preempt_window = held_ranks ?
		mercury_preempt_window(mercury_cwnd_floor(&x), held_ranks) : 0;
	/* Holding others: slow-start back to the preempt window. */
	if (preempt_window && !mercury_in_reduction(sk)) {
		mercury_load(tp, ca, &w);
		if (mercury_preempt_ssthresh(&w, preempt_window))
			mercury_store(tp, ca, &w);
	}
	if (rtt_us > 0)
		mercury_maybe_yield(sk, ca, &x, rtt_us, now_us, window_us,
				    preempt_window);
}

MERCURY_HOOK void mercury_on_cong_avoid(struct sock *sk, struct mercury_sock *ca,
					__u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mercury_window w;
	struct mercury_ctx x;

	if (!mercury_cwnd_limited(sk) || (ca->flags & MERCURY_F_HELD))
		return;
	mercury_load(tp, ca, &w);
	if (mercury_sanitize(&w, tp->snd_cwnd_clamp)) {
		mercury_ctx_of(sk, &x);
		MERCURY_COUNT(&x, CWND_FIXUPS);
	}
	mercury_increase(&w, acked, ca->weight, ca->flows, tp->snd_cwnd_clamp);
	mercury_store(tp, ca, &w);
}

MERCURY_HOOK __u32 mercury_on_ssthresh(struct sock *sk, struct mercury_sock *ca)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mercury_job_census *census;
	struct mercury_ctx x;

	mercury_ctx_of(sk, &x);
	mercury_check_window(sk, ca, &x, 0);
	MERCURY_COUNT(&x, LOSS_EVENTS);
	if (ca->flags & MERCURY_F_HELD)
		return mercury_window_clamp(mercury_held_loss(&ca->hold, ca->weight,
							      mercury_hold_floor_of(ca, &x)));
	/* The job's other flows back off with this one (cc_core.h). */
	census = mercury_census(&x, ca->job);
	if (census && ca->job != MERCURY_JOB_NONE && ca->rank < MERCURY_NUM_RANKS &&
	    !(ca->flags & MERCURY_F_HELD)) {
		MERCURY_WRITE(census->cut_us, tp->tcp_mstamp);
		ca->cut_seen = (__u32)tp->tcp_mstamp;
		ca->last_backoff_us = (__u32)tp->tcp_mstamp;
	}
	return mercury_window_clamp(mercury_ssthresh_after_loss(mercury_snd_cwnd(tp),
								ca->weight));
}

/*
 * Runs before icsk_ca_state changes. Recovery entered from CWR calls no
 * ssthresh() (the reduction is under way): counting both lets the tests
 * match the CC's view against the kernel's own recovery count exactly.
 */
MERCURY_HOOK void mercury_on_set_state(struct sock *sk, __u8 new_state)
{
	struct mercury_ctx x;

	if (new_state != TCP_CA_Recovery)
		return;
	mercury_ctx_of(sk, &x);
	MERCURY_COUNT(&x, RECOVERIES);
	if (mercury_ca_state(sk) == TCP_CA_CWR)
		MERCURY_COUNT(&x, RECOVERIES_FROM_CWR);
}

/*
 * The kernel sets cwnd to what this returns. A held flow must not get its
 * pre-loss window back by undo: it keeps what it has, up to its floor.
 */
MERCURY_HOOK __u32 mercury_on_undo_cwnd(struct sock *sk, struct mercury_sock *ca)
{
	__u32 cwnd = mercury_snd_cwnd(tcp_sk(sk)), floor;
	struct mercury_ctx x;

	mercury_ctx_of(sk, &x);
	mercury_check_window(sk, ca, &x, 0);
	if (!(ca->flags & MERCURY_F_HELD))
		return mercury_window_clamp(mercury_reno_undo_cwnd(sk));
	floor = mercury_hold_floor_of(ca, &x);
	return mercury_window_ok(cwnd) && cwnd < floor ? cwnd : floor;
}

/* Data after idle: claim precedence now, not one ACK later. */
MERCURY_HOOK void mercury_on_tx_start(struct sock *sk, struct mercury_sock *ca)
{
	struct mercury_ctx x;

	mercury_ctx_of(sk, &x);
	mercury_refresh_prio(sk, ca, &x);
	mercury_mark_active(&x, ca, mercury_clock_us());
}

/*
 * The end of CWR or Recovery (CA_EVENT_COMPLETE_CWR): the kernel has just
 * set cwnd to ssthresh, before anything is sent on it.
 */
MERCURY_HOOK void mercury_on_reduction_end(struct sock *sk,
					   struct mercury_sock *ca)
{
	struct mercury_ctx x;

	mercury_ctx_of(sk, &x);
	mercury_check_window(sk, ca, &x, 1);
}

MERCURY_HOOK void mercury_on_cwnd_event(struct sock *sk, struct mercury_sock *ca,
					__u32 ev)
{
	if (ev == CA_EVENT_TX_START)
		mercury_on_tx_start(sk, ca);
	else if (ev == CA_EVENT_COMPLETE_CWR)
		mercury_on_reduction_end(sk, ca);
}

/* release() also runs on sockets whose init() never did; it creates no
 * per-netns state (that of a netns being torn down would linger). */
MERCURY_HOOK void mercury_on_release(struct sock *sk, const struct mercury_sock *ca)
{
	struct mercury_ctx x;

	if (!(ca->flags & MERCURY_F_INIT))
		return;
	mercury_ctx_find(sk, &x);
	MERCURY_COUNT(&x, FLOWS_RELEASED);
}

#endif /* _MERCURY_CC_HOOKS_H */
