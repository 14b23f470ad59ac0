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
 * The hooks are include/mercury/cc_hooks.h and their arithmetic
 * include/mercury/cc_core.h, both shared with the eBPF variant; this file is
 * the module's glue: per-netns state, parameters, counters, and the kernel's
 * TCP helpers.
 */

#include <linux/module.h>
#include <linux/stringify.h>
#include <linux/inet_diag.h>
#include <net/genetlink.h>
#include <net/tcp.h>

#include <mercury/cc_core.h>
#include "tcp_mercury.h"

/* Per-flow state; lives in icsk_ca_priv. */
struct mercury_sock {
	unsigned long expires;	/* jiffies: entry lifetime, if FOUND */
	MERCURY_SOCK_STATE
};

struct mercury_params mercury_defaults = {
	.cwnd_floor = MERCURY_DEFAULT_CWND_FLOOR,
	.delay_thresh_us = MERCURY_DEFAULT_DELAY_THRESH_US,
	.entry_ttl_ms = MERCURY_DEFAULT_ENTRY_TTL_MS,
	.max_entries = MERCURY_DEFAULT_MAX_ENTRIES,
	.max_hold_ms = MERCURY_DEFAULT_MAX_HOLD_MS,
	.debug = 0,
};

/* Module parameters: defaults for new netns; range-checked at load, with
 * the ranges and defaults of uapi.h (the netlink policy's too). */
#define MERCURY_PARAM(field, lo, hi, def, desc)					\
static int mercury_set_##field(const char *val, const struct kernel_param *kp) \
{										\
	return param_set_uint_minmax(val, kp, lo, hi);				\
}										\
static const struct kernel_param_ops mercury_ops_##field = {			\
	.set = mercury_set_##field,						\
	.get = param_get_uint,							\
};										\
module_param_cb(field, &mercury_ops_##field, &mercury_defaults.field, 0444); \
MODULE_PARM_DESC(field, desc " (default " __stringify(def) ") [" __stringify(lo) ".." __stringify(hi) "]")

MERCURY_PARAM(cwnd_floor, MERCURY_CWND_FLOOR_MIN, MERCURY_CWND_FLOOR_MAX, MERCURY_DEFAULT_CWND_FLOOR,
	      "packets a held (preempted) flow keeps in flight");
MERCURY_PARAM(delay_thresh_us, 0, MERCURY_DELAY_THRESH_US_MAX, MERCURY_DEFAULT_DELAY_THRESH_US,
	      "queueing delay (us over base RTT) at which rank-1 flows yield; less urgent ranks yield earlier; 0 disables");
MERCURY_PARAM(entry_ttl_ms, MERCURY_TTL_MS_MIN, MERCURY_TTL_MS_MAX, MERCURY_DEFAULT_ENTRY_TTL_MS,
	      "lifetime of a table entry not set again");
MERCURY_PARAM(max_entries, MERCURY_MAX_ENTRIES_MIN, MERCURY_MAX_ENTRIES_MAX, MERCURY_DEFAULT_MAX_ENTRIES,
	      "table entries per network namespace");
MERCURY_PARAM(max_hold_ms, MERCURY_MAX_HOLD_MS_MIN, MERCURY_MAX_HOLD_MS_MAX, MERCURY_DEFAULT_MAX_HOLD_MS,
	      "longest continuous hold; then the flow is let go for max_hold/8");
MERCURY_PARAM(debug, 0, 1, 0, "log hold/release transitions");

/* The glue include/mercury/cc_hooks.h is written against. */
struct mercury_ctx {
	struct mercury_net *mn;
};

#define MERCURY_HOOK		static inline
#define MERCURY_COUNT(x, ev)	mercury_count((x)->mn, MERCURY_CNT_##ev)
#define MERCURY_READ(v)		READ_ONCE(v)
#define MERCURY_WRITE(v, val)	WRITE_ONCE(v, val)

static inline struct mercury_sock *mercury_priv(struct sock *sk)
{
	return inet_csk_ca(sk);
}

static inline void mercury_ctx_of(const struct sock *sk, struct mercury_ctx *x)
{
	x->mn = mercury_pernet(sock_net(sk));
}

static inline void mercury_ctx_find(const struct sock *sk, struct mercury_ctx *x)
{
	mercury_ctx_of(sk, x);	/* per-netns state exists as long as the netns */
}

static inline u32 mercury_cwnd_floor(const struct mercury_ctx *x)
{
	return READ_ONCE(x->mn->params.cwnd_floor);
}

static inline u32 mercury_max_hold_ms(const struct mercury_ctx *x)
{
	return READ_ONCE(x->mn->params.max_hold_ms);
}

static inline u32 mercury_delay_thresh_us(const struct mercury_ctx *x)
{
	return READ_ONCE(x->mn->params.delay_thresh_us);
}

static inline u32 mercury_table_gen(const struct mercury_ctx *x)
{
	return READ_ONCE(x->mn->gen);
}

/* When each rank of the job last had data out: its precedence. */
static inline u64 *mercury_stamps(struct mercury_ctx *x, u32 job)
{
	return job < MERCURY_NUM_JOBS ? x->mn->last_active_us[job] : NULL;
}

static inline u64 *mercury_job_active(struct mercury_ctx *x)
{
	return x->mn->job_active_us;
}

static inline struct mercury_job_census *mercury_census(struct mercury_ctx *x,
							 u32 job)
{
	return job < MERCURY_NUM_JOBS ? &x->mn->census[job] : NULL;
}

static inline u32 mercury_snd_cwnd(const struct tcp_sock *tp)
{
	return tcp_snd_cwnd(tp);
}

static inline void mercury_set_snd_cwnd(struct tcp_sock *tp, u32 cwnd)
{
	tcp_snd_cwnd_set(tp, cwnd);
}

static inline u32 mercury_min_rtt(const struct tcp_sock *tp)
{
	return tcp_min_rtt(tp);
}

static inline bool mercury_in_reduction(const struct sock *sk)
{
	return tcp_in_cwnd_reduction(sk);
}

static inline bool mercury_handshaking(const struct sock *sk)
{
	return (1 << sk->sk_state) & (TCPF_SYN_SENT | TCPF_SYN_RECV);
}

static inline bool mercury_has_data(const struct sock *sk)
{
	return tcp_sk(sk)->packets_out || !tcp_write_queue_empty(sk);
}

static inline bool mercury_cwnd_limited(const struct sock *sk)
{
	return tcp_is_cwnd_limited(sk);
}

static inline u8 mercury_ca_state(const struct sock *sk)
{
	return inet_csk(sk)->icsk_ca_state;
}

static inline u64 mercury_clock_us(void)
{
	return tcp_clock_us();
}

static inline u32 mercury_reno_undo_cwnd(struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

/* Only a CC's request (NEEDED), never a user's SO_MAX_PACING_RATE or fq's. */
static inline bool mercury_drop_inherited_pacing(struct sock *sk)
{
	if (READ_ONCE(sk->sk_max_pacing_rate) != ~0UL)
		return false;
	return cmpxchg(&sk->sk_pacing_status, SK_PACING_NEEDED,
		       SK_PACING_NONE) == SK_PACING_NEEDED;
}

static void mercury_refresh_prio(struct sock *sk, struct mercury_sock *ca,
				 struct mercury_ctx *x)
{
	struct mercury_net *mn = x->mn;
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

static void mercury_changed(struct sock *sk, const struct mercury_sock *ca,
			    enum mercury_hold_change change, u32 cwnd)
{
	if (READ_ONCE(mercury_pernet(sock_net(sk))->params.debug))
		net_info_ratelimited("tcp_mercury: %pI4:%u rank %u %s cwnd %u\n",
				     &sk->sk_daddr, ntohs(sk->sk_dport), ca->rank,
				     change == MERCURY_HOLD_ENTERED ? "held" : "released",
				     cwnd);
}

#include <mercury/cc_hooks.h>

static void mercury_init(struct sock *sk)
{
	mercury_on_init(sk);
}

static void mercury_release(struct sock *sk)
{
	mercury_on_release(sk, inet_csk_ca(sk));
}

static void mercury_pkts_acked(struct sock *sk, const struct ack_sample *sample)
{
	mercury_on_acked(sk, mercury_ca(sk), sample->rtt_us);
}

static void mercury_cong_avoid(struct sock *sk, u32 ack, u32 acked)
{
	mercury_on_cong_avoid(sk, mercury_ca(sk), acked);
}

static u32 mercury_ssthresh(struct sock *sk)
{
	return mercury_on_ssthresh(sk, mercury_ca(sk));
}

static void mercury_set_state(struct sock *sk, u8 new_state)
{
	mercury_on_set_state(sk, new_state);
}

static u32 mercury_undo_cwnd(struct sock *sk)
{
	return mercury_on_undo_cwnd(sk, mercury_ca(sk));
}

static void mercury_cwnd_event(struct sock *sk, enum tcp_ca_event ev)
{
	mercury_on_cwnd_event(sk, mercury_ca(sk), ev);
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
