// SPDX-License-Identifier: GPL-2.0
/*
 * TCP Mercury: transport-layer priority scheduling for distributed training.
 *
 * Data-parallel training sends gradients back to front and needs parameters
 * front to back. Mercury lets the bytes the next forward pass needs first go
 * first: each flow gets a rank (strict precedence, lower is more urgent) and
 * a weight (share within a rank), from its SO_PRIORITY tag or a per-flow
 * entry that the agent (mercuryd) pushes over generic netlink.
 *
 * On one host, a flow whose rank is less urgent than one that has data in
 * flight holds its cwnd at a small floor that keeps its ACK clock, and gets
 * the window it had back within about an RTT of the urgent rank going quiet.
 * Holding by cwnd (not by AIMD weights) is what works when the sender's own
 * NIC is the bottleneck: TCP Small Queues then keep losses rare and loss-
 * driven weighting does nothing. Across hosts, less urgent ranks yield to
 * queueing delay (TCP-LP style), so urgent flows from other hosts win an
 * incast bottleneck. A held flow is let go for max_hold/8 after every
 * max_hold, so nothing starves; entries the agent stops refreshing expire
 * and the flow falls back to plain fair behaviour. Unranked flows behave as
 * Reno with HyStart's delay-based slow-start exit. Entries may name a job:
 * precedence then holds only among flows of the same job, a job's flows on
 * a host grow and back off together as one flow of its weight, and other
 * jobs' traffic cannot keep a job's flows yielding to delay for good.
 *
 * The arithmetic lives in include/mercury/cc_core.h, shared with the eBPF
 * variant and unit tests; this file is the glue to struct tcp_sock.
 */

#include <linux/module.h>
#include <linux/inet_diag.h>
#include <net/genetlink.h>
#include <net/tcp.h>

#include <mercury/cc_core.h>
#include "tcp_mercury.h"

#define MERCURY_F_INIT		0x01	/* init() ran (or we did it lazily) */
#define MERCURY_F_HELD		0x02	/* cwnd clamped to the floor */
#define MERCURY_F_FOUND		0x04	/* priority came from an entry */

/* Per-flow state; lives in icsk_ca_priv. */
struct mercury_sock {
	struct mercury_ss_round ss;	/* HyStart's delay test, this round */
	u32 table_gen;		/* mn->gen the priority was resolved at */
	u32 tag;		/* sk_priority the priority was resolved for */
	unsigned long expires;	/* jiffies: entry lifetime, if FOUND */
	struct mercury_hold_state hold;
	u64 yield_since_us;	/* this run of delayed samples began; 0: none */
	u32 cnt;		/* weighted-AI accumulator */
	u32 last_backoff_us;	/* low 32 bits of tcp_mstamp at last yield or cut */
	u32 holds;		/* times held */
	u32 census_seen;	/* epoch of its job's census it last counted in */
	u32 cut_seen;		/* its job's last loss cut it followed or made */
	u16 weight;		/* MERCURY_WEIGHT_UNIT = one Reno flow */
	u8 flows;		/* its job's flows here sending, it included */
	u8 rank;		/* MERCURY_RANK_NONE = unranked */
	u8 job;			/* MERCURY_JOB_NONE = no job */
	u8 flags;		/* MERCURY_F_* */
};

struct mercury_params mercury_defaults = {
	.cwnd_floor = MERCURY_DEFAULT_CWND_FLOOR,
	.delay_thresh_us = MERCURY_DEFAULT_DELAY_THRESH_US,
	.entry_ttl_ms = MERCURY_DEFAULT_ENTRY_TTL_MS,
	.max_entries = MERCURY_DEFAULT_MAX_ENTRIES,
	.max_hold_ms = MERCURY_DEFAULT_MAX_HOLD_MS,
	.debug = 0,
};

/* Module parameters: defaults for new netns; range-checked at load. */
#define MERCURY_PARAM(field, lo, hi, desc)					\
static int mercury_set_##field(const char *val, const struct kernel_param *kp) \
{										\
	return param_set_uint_minmax(val, kp, lo, hi);				\
}										\
static const struct kernel_param_ops mercury_ops_##field = {			\
	.set = mercury_set_##field,						\
	.get = param_get_uint,							\
};										\
module_param_cb(field, &mercury_ops_##field, &mercury_defaults.field, 0444); \
MODULE_PARM_DESC(field, desc " [" #lo ".." #hi "]")

MERCURY_PARAM(cwnd_floor, 1, 64,
	      "packets a held (preempted) flow keeps in flight (default 2)");
MERCURY_PARAM(delay_thresh_us, 0, 1000000,
	      "queueing delay (us over base RTT) at which rank-1 flows yield; less urgent ranks yield earlier; 0 disables (default 1000)");
MERCURY_PARAM(entry_ttl_ms, 100, 3600000,
	      "lifetime of a table entry not set again (default 10000)");
MERCURY_PARAM(max_entries, 1, 65536,
	      "table entries per network namespace (default 16384)");
MERCURY_PARAM(max_hold_ms, 10, 60000,
	      "longest continuous hold; then the flow is let go for max_hold/8 (default 1000)");
MERCURY_PARAM(debug, 0, 1, "log hold/release transitions (default 0)");

static struct mercury_net *mercury_net_of(const struct sock *sk)
{
	return mercury_pernet(sock_net(sk));
}

static void mercury_refresh_prio(struct sock *sk, struct mercury_sock *ca,
				 struct mercury_net *mn)
{
	u32 gen = smp_load_acquire(&mn->gen);	/* then the table it publishes */
	u32 tag = READ_ONCE(sk->sk_priority);
	struct mercury_prio prio;

	if (ca->table_gen == gen && ca->tag == tag &&
	    (!(ca->flags & MERCURY_F_FOUND) || time_before(jiffies, ca->expires)))
		return;

	mercury_lookup(mn, sk, &prio);
	ca->table_gen = gen;
	ca->tag = tag;
	ca->rank = prio.rank;
	ca->weight = prio.weight;
	ca->job = prio.job < MERCURY_NUM_JOBS ? prio.job : MERCURY_JOB_NONE;
	ca->expires = prio.expires;
	if (prio.found)
		ca->flags |= MERCURY_F_FOUND;
	else
		ca->flags &= ~MERCURY_F_FOUND;
}

static void mercury_init(struct sock *sk)
{
	struct mercury_sock *ca = inet_csk_ca(sk);
	struct mercury_net *mn = mercury_net_of(sk);

	/* A lazy init from an early ACK hook may have run already. */
	if (ca->flags & MERCURY_F_INIT)
		return;
	memset(ca, 0, sizeof(*ca));
	ca->flags = MERCURY_F_INIT;
	ca->table_gen = READ_ONCE(mn->gen) - 1;	/* force a lookup */
	mercury_refresh_prio(sk, ca, mn);
	mercury_count(mn, MERCURY_CNT_FLOWS_INIT);
}

/* Hooks can run before init() (passive open); make state valid first. */
static struct mercury_sock *mercury_ca(struct sock *sk)
{
	struct mercury_sock *ca = inet_csk_ca(sk);

	if (unlikely(!(ca->flags & MERCURY_F_INIT)))
		mercury_init(sk);
	return ca;
}

static void mercury_release(struct sock *sk)
{
	struct mercury_sock *ca = inet_csk_ca(sk);

	/* release() also runs on sockets whose init() never did. */
	if (ca->flags & MERCURY_F_INIT)
		mercury_count(mercury_net_of(sk), MERCURY_CNT_FLOWS_RELEASED);
}

static void mercury_load(const struct tcp_sock *tp,
			 const struct mercury_sock *ca,
			 struct mercury_window *w)
{
	w->cwnd = tcp_snd_cwnd(tp);
	w->ssthresh = tp->snd_ssthresh;
	w->cnt = ca->cnt;
}

static void mercury_store(struct tcp_sock *tp, struct mercury_sock *ca,
			  const struct mercury_window *w)
{
	tcp_snd_cwnd_set(tp, w->cwnd);
	tp->snd_ssthresh = w->ssthresh;
	ca->cnt = w->cnt;
}

/* When each rank of this flow's job last had data out: its precedence. */
static const u64 *mercury_job_stamps(const struct mercury_sock *ca,
				     const struct mercury_net *mn)
{
	return mn->last_active_us[ca->job];
}

/* Note that this flow's rank has data outstanding right now. */
static void mercury_mark_active(struct sock *sk, struct mercury_sock *ca,
				struct mercury_net *mn, u64 now_us)
{
	u64 *stamp;

	if (ca->rank >= MERCURY_NUM_RANKS)
		return;
	stamp = &mn->last_active_us[ca->job][ca->rank];
	/* Shared by all flows of the rank: write rarely to spare the cache line. */
	if (now_us - READ_ONCE(*stamp) >= 100) {
		WRITE_ONCE(*stamp, now_us);
		WRITE_ONCE(mn->job_active_us[ca->job], now_us);
	}
}

static bool mercury_has_data(const struct sock *sk)
{
	return tcp_sk(sk)->packets_out || !tcp_write_queue_empty(sk);
}

/* A job's flows here share its weight: shares go per job, not per flow. */
static void mercury_update_share(struct sock *sk, struct mercury_sock *ca,
				 struct mercury_net *mn, u64 now_us,
				 u32 window_us)
{
	if (ca->job == MERCURY_JOB_NONE || (ca->flags & MERCURY_F_HELD) ||
	    !mercury_has_data(sk)) {
		ca->flows = 1;
		return;
	}
	ca->flows = mercury_job_census_count(&mn->census[ca->job],
					     &ca->census_seen, now_us, window_us);
}

/* Another flow of the job backed off on a loss: back off with it. */
static void mercury_follow_job_cut(struct sock *sk, struct mercury_sock *ca,
				   struct mercury_net *mn, u64 now_us,
				   u32 window_us)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mercury_window w;

	if (ca->job == MERCURY_JOB_NONE || (ca->flags & MERCURY_F_HELD) ||
	    tcp_in_cwnd_reduction(sk) ||
	    !mercury_job_cut_due(&mn->census[ca->job], &ca->cut_seen,
				 &ca->last_backoff_us, now_us, window_us,
				 tp->srtt_us >> 3))
		return;
	mercury_load(tp, ca, &w);
	mercury_job_cut(&w, ca->weight);
	mercury_store(tp, ca, &w);
	mercury_count(mn, MERCURY_CNT_JOB_CUTS);
}

static void mercury_update_hold(struct sock *sk, struct mercury_sock *ca,
				struct mercury_net *mn, u64 now_us,
				u32 window_us)
{
	struct tcp_sock *tp = tcp_sk(sk);
	u32 floor = READ_ONCE(mn->params.cwnd_floor);
	bool held = ca->flags & MERCURY_F_HELD;
	bool in_reduction = tcp_in_cwnd_reduction(sk);
	enum mercury_hold_change change;
	struct mercury_window w;

	mercury_load(tp, ca, &w);
	if (mercury_hold_leaked(&w, held, in_reduction, floor))
		mercury_count(mn, MERCURY_CNT_HOLD_LEAKS);
	else if (held && in_reduction)
		mercury_count(mn, MERCURY_CNT_HELD_IN_RECOVERY);
	change = mercury_hold_step(&w, &ca->hold, held,
				   mercury_preempted(mercury_job_stamps(ca, mn),
						     ca->rank, now_us, window_us),
				   in_reduction, now_us,
				   READ_ONCE(mn->params.max_hold_ms), floor);
	switch (change) {
	case MERCURY_HOLD_UNCHANGED:
		return;
	case MERCURY_HOLD_ENTERED:
		ca->flags |= MERCURY_F_HELD;
		ca->holds++;
		mercury_count(mn, MERCURY_CNT_HOLDS);
		break;
	case MERCURY_HOLD_KEPT:
		break;
	case MERCURY_HOLD_RELEASED:
	case MERCURY_HOLD_GRANTED:
		ca->flags &= ~MERCURY_F_HELD;
		mercury_count(mn, change == MERCURY_HOLD_GRANTED ?
				  MERCURY_CNT_STARVE_GRANTS : MERCURY_CNT_RELEASES);
		break;
	}
	mercury_store(tp, ca, &w);
	if (READ_ONCE(mn->params.debug) && change != MERCURY_HOLD_KEPT)
		net_info_ratelimited("tcp_mercury: %pI4:%u rank %u %s cwnd %u\n",
				     &sk->sk_daddr, ntohs(sk->sk_dport), ca->rank,
				     change == MERCURY_HOLD_ENTERED ? "held" : "released",
				     w.cwnd);
}

static void mercury_pkts_acked(struct sock *sk, const struct ack_sample *sample)
{
	struct mercury_sock *ca = mercury_ca(sk);
	struct mercury_net *mn = mercury_net_of(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	u64 now_us = tp->tcp_mstamp;
	/* About an RTT: how long activity counts, for every rule below. */
	u32 window_us = mercury_hold_window_us(tp->srtt_us >> 3);
	struct mercury_window w;
	bool delayed;

	mercury_refresh_prio(sk, ca, mn);
	/* Before this ACK's PRR step, which runs after us (see cc_core.h). */
	mercury_load(tp, ca, &w);
	if (mercury_repair_ssthresh(&w, tcp_in_cwnd_reduction(sk), ca->weight)) {
		mercury_store(tp, ca, &w);
		mercury_count(mn, MERCURY_CNT_CWND_FIXUPS);
	}
	/* Delay seen while holding others is their queue draining. */
	if (sample->rtt_us > 0 &&
	    mercury_slow_start_done(&ca->ss, tcp_snd_cwnd(tp), tp->snd_ssthresh,
				    sample->rtt_us, tcp_min_rtt(tp), tp->snd_una,
				    tp->snd_nxt) &&
	    !mercury_preempting(mercury_job_stamps(ca, mn), ca->rank, now_us,
				window_us))
		tp->snd_ssthresh = tcp_snd_cwnd(tp);
	if (ca->rank >= MERCURY_NUM_RANKS) {
		if (ca->flags & MERCURY_F_HELD)	/* lost its rank while held */
			mercury_update_hold(sk, ca, mn, now_us, window_us);
		return;
	}
	if (mercury_has_data(sk))
		mercury_mark_active(sk, ca, mn, now_us);
	mercury_update_hold(sk, ca, mn, now_us, window_us);
	mercury_update_share(sk, ca, mn, now_us, window_us);
	mercury_follow_job_cut(sk, ca, mn, now_us, window_us);

	if ((ca->flags & MERCURY_F_HELD) || sample->rtt_us <= 0)
		return;
	delayed = mercury_should_yield(ca->rank, sample->rtt_us, tcp_min_rtt(tp),
				       READ_ONCE(mn->params.delay_thresh_us));
	/* Another job sending from this host: the queue is theirs too. */
	if (delayed && ca->job != MERCURY_JOB_NONE &&
	    mercury_other_job_active(mn->job_active_us, ca->job, now_us,
				     window_us))
		delayed = false;
	/* At most once an RTT, like TCP-LP. */
	if (delayed && mercury_backed_off_within_rtt(ca->last_backoff_us, now_us,
						     tp->srtt_us >> 3))
		return;
	/* The queue may be another job's: a job's flow yields for a while only. */
	if (ca->job != MERCURY_JOB_NONE &&
	    !mercury_yield_allowed(&ca->yield_since_us, delayed, now_us,
				   READ_ONCE(mn->params.max_hold_ms))) {
		if (delayed) {
			ca->last_backoff_us = (u32)now_us;
			mercury_count(mn, MERCURY_CNT_YIELD_GRANTS);
		}
		return;
	}
	if (!delayed)
		return;
	ca->last_backoff_us = (u32)now_us;
	mercury_load(tp, ca, &w);
	mercury_yield(&w, READ_ONCE(mn->params.cwnd_floor));
	mercury_store(tp, ca, &w);
	mercury_count(mn, MERCURY_CNT_DELAY_BACKOFFS);
}

static void mercury_cong_avoid(struct sock *sk, u32 ack, u32 acked)
{
	struct mercury_sock *ca = mercury_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct mercury_window w;

	if (!tcp_is_cwnd_limited(sk) || (ca->flags & MERCURY_F_HELD))
		return;
	mercury_load(tp, ca, &w);
	if (mercury_sanitize(&w, tp->snd_cwnd_clamp))
		mercury_count(mercury_net_of(sk), MERCURY_CNT_CWND_FIXUPS);
	mercury_increase(&w, acked, ca->weight, ca->flows, tp->snd_cwnd_clamp);
	mercury_store(tp, ca, &w);
}

static u32 mercury_ssthresh(struct sock *sk)
{
	struct mercury_sock *ca = mercury_ca(sk);
	struct mercury_net *mn = mercury_net_of(sk);
	struct tcp_sock *tp = tcp_sk(sk);

	mercury_count(mn, MERCURY_CNT_LOSS_EVENTS);
	/* The job's other flows back off with this one (cc_core.h). */
	if (ca->job != MERCURY_JOB_NONE && ca->rank < MERCURY_NUM_RANKS &&
	    !(ca->flags & MERCURY_F_HELD)) {
		WRITE_ONCE(mn->census[ca->job].cut_us, tp->tcp_mstamp);
		ca->cut_seen = (u32)tp->tcp_mstamp;
		ca->last_backoff_us = (u32)tp->tcp_mstamp;
	}
	return mercury_ssthresh_after_loss(tcp_snd_cwnd(tp), ca->weight);
}

/*
 * Runs before icsk_ca_state changes. Recovery entered from CWR calls no
 * ssthresh() (the reduction is under way): counting both lets the tests
 * match the CC's view against the kernel's own recovery count exactly.
 */
static void mercury_set_state(struct sock *sk, u8 new_state)
{
	struct mercury_net *mn;

	if (new_state != TCP_CA_Recovery)
		return;
	mn = mercury_net_of(sk);
	mercury_count(mn, MERCURY_CNT_RECOVERIES);
	if (inet_csk(sk)->icsk_ca_state == TCP_CA_CWR)
		mercury_count(mn, MERCURY_CNT_RECOVERIES_FROM_CWR);
}

static u32 mercury_undo_cwnd(struct sock *sk)
{
	struct mercury_sock *ca = mercury_ca(sk);

	/* A held flow must not get its pre-loss window back by undo. */
	if (ca->flags & MERCURY_F_HELD)
		return tcp_snd_cwnd(tcp_sk(sk));
	return tcp_reno_undo_cwnd(sk);
}

static void mercury_cwnd_event(struct sock *sk, enum tcp_ca_event ev)
{
	struct mercury_sock *ca;
	struct mercury_net *mn;

	if (ev != CA_EVENT_TX_START)
		return;
	/* Data after idle: claim precedence now, not one ACK later. */
	ca = mercury_ca(sk);
	mn = mercury_net_of(sk);
	mercury_refresh_prio(sk, ca, mn);
	mercury_mark_active(sk, ca, mn, tcp_clock_us());
}

static size_t mercury_get_info(struct sock *sk, u32 ext, int *attr,
			       union tcp_cc_info *info)
{
	const struct mercury_sock *ca = inet_csk_ca(sk);

	if (ext & (1 << (INET_DIAG_DCTCPINFO - 1)) ||
	    ext & (1 << (INET_DIAG_VEGASINFO - 1))) {
		memset(&info->dctcp, 0, sizeof(info->dctcp));
		info->dctcp.dctcp_enabled = 1;
		info->dctcp.dctcp_ce_state =
			((ca->flags & MERCURY_F_INIT) ? ca->rank : MERCURY_RANK_NONE) |
			((ca->flags & MERCURY_F_HELD) ? MERCURY_INFO_HELD : 0) |
			(ca->job << MERCURY_INFO_JOB_SHIFT);
		info->dctcp.dctcp_alpha = ca->weight;
		info->dctcp.dctcp_ab_ecn = READ_ONCE(sk->sk_priority);
		info->dctcp.dctcp_ab_tot = ca->holds;
		*attr = INET_DIAG_DCTCPINFO;
		return sizeof(info->dctcp);
	}
	return 0;
}

/*
 * Any user may select mercury for a socket, as with reno: that alone gives
 * no precedence (an unranked flow is a fair loss-based flow); a rank needs a
 * privileged tag or mercuryd, which checks ownership. Writing
 * net.ipv4.tcp_allowed_congestion_control without mercury restricts it again.
 */
static bool unrestricted = true;
module_param(unrestricted, bool, 0444);
MODULE_PARM_DESC(unrestricted,
		 "let unprivileged processes select mercury per socket, as if listed in net.ipv4.tcp_allowed_congestion_control (default Y)");

static struct tcp_congestion_ops mercury __read_mostly = {
	.init		= mercury_init,
	.release	= mercury_release,
	.ssthresh	= mercury_ssthresh,
	.cong_avoid	= mercury_cong_avoid,
	.undo_cwnd	= mercury_undo_cwnd,
	.set_state	= mercury_set_state,
	.cwnd_event	= mercury_cwnd_event,
	.pkts_acked	= mercury_pkts_acked,
	.get_info	= mercury_get_info,
	.owner		= THIS_MODULE,
	.name		= MERCURY_CA_NAME,
};

static int __init mercury_register(void)
{
	int err;

	BUILD_BUG_ON(sizeof(struct mercury_sock) > ICSK_CA_PRIV_SIZE);

	err = mercury_table_init();
	if (err)
		return err;
	err = mercury_netlink_init();
	if (err)
		goto err_table;
	if (unrestricted)
		mercury.flags |= TCP_CONG_NON_RESTRICTED;
	err = tcp_register_congestion_control(&mercury);
	if (err)
		goto err_netlink;
	return 0;

err_netlink:
	mercury_netlink_exit();
err_table:
	mercury_table_exit();
	return err;
}

static void __exit mercury_unregister(void)
{
	tcp_unregister_congestion_control(&mercury);
	mercury_netlink_exit();
	mercury_table_exit();
}

module_init(mercury_register);
module_exit(mercury_unregister);

MODULE_AUTHOR("The Mercury authors");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("TCP Mercury: priority-driven congestion control for distributed DNN training");
MODULE_ALIAS_GENL_FAMILY(MERCURY_GENL_NAME);
