// SPDX-License-Identifier: GPL-2.0
/*
 * TCP Mercury as an eBPF struct_ops congestion control.
 *
 * The same algorithm as tcp_mercury.ko (see kmod/mercury_cc.c for the
 * model), for kernels that refuse out-of-tree modules. The arithmetic is
 * include/mercury/cc_core.h, compiled unchanged; this file is only the glue
 * to struct tcp_sock and to the maps of include/mercury/bpf_maps.h, which
 * mercuryd loads, pins and fills.
 *
 * Differences from the module, all forced by what BPF may do:
 *  - the tables are global maps keyed by netns cookie, not per-netns kernel
 *    memory; expired entries are ignored at once and deleted by the agent;
 *  - get_info is not available, so a flow's rank/weight/held state is kept
 *    in socket storage (mercury_socks) for its owner to read by fd;
 *  - the table size is the maps' capacity, not a per-netns parameter.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include <mercury/cc_core.h>
#include <mercury/bpf_maps.h>

char _license[] SEC("license") = "GPL";

#define AF_INET		2
#define AF_INET6	10

/* include/net/tcp.h: any user may select it (see kmod/mercury_cc.c). */
#define TCP_CONG_NON_RESTRICTED	0x1

#define MERCURY_F_INIT		0x01
#define MERCURY_F_HELD		0x02
#define MERCURY_F_FOUND		0x04

/* Look the priority up again at least this often, even without a table
 * change: user space bumps gen with a read-modify-write that can race. */
#define MERCURY_REVALIDATE_NS	(20 * 1000 * 1000ULL)

/* Per-flow state; lives in icsk_ca_priv, like the module's. */
struct mercury_sock {
	__u64 valid_until_ns;	/* look the priority up again after this */
	struct mercury_hold_state hold;
	struct mercury_ss_round ss;	/* HyStart's delay test, this round */
	__u32 table_gen;	/* config gen the priority was resolved at */
	__u32 tag;		/* sk_priority the priority was resolved for */
	__u32 cnt;		/* weighted-AI accumulator */
	__u32 last_backoff_us;	/* low 32 bits of tcp_mstamp at last yield or cut */
	__u32 holds;		/* times held */
	__u64 yield_since_us;	/* this run of delayed samples began; 0: none */
	__u32 census_seen;	/* epoch of its job's census it last counted in */
	__u32 cut_seen;		/* its job's last loss cut it followed or made */
	__u16 weight;
	__u8 flows;		/* its job's flows here sending, it included */
	__u8 rank;
	__u8 job;		/* < MERCURY_NUM_JOBS */
	__u8 flags;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MERCURY_BPF_MAX_TAGS);
	__type(key, struct mercury_bpf_tag_key);
	__type(value, struct mercury_bpf_entry);
} mercury_tags SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MERCURY_BPF_MAX_FLOWS);
	__type(key, struct mercury_bpf_flow_key);
	__type(value, struct mercury_bpf_entry);
} mercury_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MERCURY_BPF_MAX_NETNS);
	__type(key, __u64);
	__type(value, struct mercury_bpf_config);
} mercury_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MERCURY_BPF_MAX_NETNS);
	__type(key, __u64);
	__type(value, struct mercury_bpf_state);
} mercury_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mercury_bpf_sock_state);
} mercury_socks SEC(".maps");

/* For a netns without a config entry: the module parameters' defaults. */
const volatile struct mercury_bpf_config mercury_defaults = {
	.cwnd_floor = MERCURY_DEFAULT_CWND_FLOOR,
	.delay_thresh_us = MERCURY_DEFAULT_DELAY_THRESH_US,
	.entry_ttl_ms = MERCURY_DEFAULT_ENTRY_TTL_MS,
	.max_hold_ms = MERCURY_DEFAULT_MAX_HOLD_MS,
};

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct mercury_sock *mercury_priv(const struct sock *sk)
{
	return (void *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline __u64 mercury_netns(const struct sock *sk)
{
	return sk->__sk_common.skc_net.net->net_cookie;
}

static __always_inline const struct mercury_bpf_config *
mercury_config_of(__u64 netns)
{
	const struct mercury_bpf_config *cfg;

	cfg = bpf_map_lookup_elem(&mercury_config, &netns);
	return cfg ? cfg : (const struct mercury_bpf_config *)&mercury_defaults;
}

static __always_inline struct mercury_bpf_state *mercury_state_find(__u64 netns)
{
	return bpf_map_lookup_elem(&mercury_state, &netns);
}

/* A new netns's state, all zero: too big for the 512-byte BPF stack. */
static struct mercury_bpf_state mercury_zero_state;

/* Created on first use: the agent deletes a netns's state only while it has
 * no mercury sockets. */
static __always_inline struct mercury_bpf_state *mercury_state_of(__u64 netns)
{
	struct mercury_bpf_state *st;

	st = bpf_map_lookup_elem(&mercury_state, &netns);
	if (st)
		return st;
	bpf_map_update_elem(&mercury_state, &netns, &mercury_zero_state, BPF_NOEXIST);
	return bpf_map_lookup_elem(&mercury_state, &netns);
}

/* Counts @c in @st; without a state (mercury_state full), in the host-wide
 * "uncounted" counter, so that no event goes missing without a trace. */
static __always_inline void mercury_count(struct mercury_bpf_state *st,
					  enum mercury_bpf_counter c)
{
	__u64 global = MERCURY_BPF_GLOBAL_STATE;

	if (!st) {
		st = bpf_map_lookup_elem(&mercury_state, &global);
		c = MERCURY_BPF_CNT_UNCOUNTED;
	}
	if (st && c < MERCURY_BPF_CNT_MAX)
		__sync_fetch_and_add(&st->counters[c], 1);
}

static __always_inline __u32 tcp_min_rtt(const struct tcp_sock *tp)
{
	return tp->rtt_min.s[0].v;
}

static __always_inline int tcp_is_cwnd_limited(const struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	if (tp->snd_cwnd < tp->snd_ssthresh)
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return !!BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited);
}

/* tcp_in_cwnd_reduction(): the kernel drives cwnd toward ssthresh (PRR). */
static __always_inline int mercury_in_cwnd_reduction(const struct sock *sk)
{
	const struct inet_connection_sock *icsk = (const void *)sk;
	__u8 state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);

	return !!(((1 << TCP_CA_CWR) | (1 << TCP_CA_Recovery)) & (1 << state));
}

static __always_inline int mercury_has_data(const struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	return tp->packets_out || tp->write_seq != tp->snd_nxt;
}

static __always_inline int mercury_entry_live(const struct mercury_bpf_entry *e,
					      __u64 now_ns)
{
	return e && now_ns < e->expires_ns;
}

static __always_inline void mercury_v4_mapped(__u8 *dst, __be32 addr)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(dst + 12, &addr, 4);
}

/* The flow entries this socket can be named by: cookie, then tuple. */
static __always_inline const struct mercury_bpf_entry *
mercury_find_flow(const struct sock *sk, __u64 netns, __u64 now_ns)
{
	const struct sock_common *c = &sk->__sk_common;
	const struct mercury_bpf_entry *e = NULL;
	struct mercury_bpf_flow_key key;

	__builtin_memset(&key, 0, sizeof(key));
	key.netns = netns;
	key.cookie = c->skc_cookie.counter;
	if (key.cookie) {
		key.kind = MERCURY_BPF_KEY_COOKIE;
		e = bpf_map_lookup_elem(&mercury_flows, &key);
		if (mercury_entry_live(e, now_ns))
			return e;
		key.cookie = 0;
	}
	key.kind = MERCURY_BPF_KEY_TUPLE;
	key.sport = c->skc_num;
	key.dport = bpf_ntohs(c->skc_dport);
	if (c->skc_family == AF_INET6 &&
	    !(c->skc_v6_daddr.in6_u.u6_addr32[0] == 0 &&
	      c->skc_v6_daddr.in6_u.u6_addr32[1] == 0 &&
	      c->skc_v6_daddr.in6_u.u6_addr32[2] == bpf_htonl(0xffff))) {
		key.family = AF_INET6;
		__builtin_memcpy(key.saddr, &c->skc_v6_rcv_saddr, 16);
		__builtin_memcpy(key.daddr, &c->skc_v6_daddr, 16);
	} else {
		key.family = AF_INET;
		mercury_v4_mapped(key.saddr, c->skc_rcv_saddr);
		mercury_v4_mapped(key.daddr, c->skc_daddr);
	}
	e = bpf_map_lookup_elem(&mercury_flows, &key);
	return mercury_entry_live(e, now_ns) ? e : NULL;
}

/* Mirror what the flow resolved to where its owner can read it. */
static __always_inline void mercury_publish(struct sock *sk,
					    const struct mercury_sock *ca)
{
	struct mercury_bpf_sock_state *pub;

	pub = bpf_sk_storage_get(&mercury_socks, sk, NULL,
				 BPF_SK_STORAGE_GET_F_CREATE);
	if (!pub)
		return;
	pub->tag = ca->tag;
	pub->rank = ca->rank;
	pub->job = ca->job;
	pub->weight = ca->weight;
	pub->held = !!(ca->flags & MERCURY_F_HELD);
	pub->holds = ca->holds;
}

static __always_inline void mercury_refresh_prio(struct sock *sk,
						 struct mercury_sock *ca,
						 __u64 netns,
						 const struct mercury_bpf_config *cfg)
{
	__u64 now_ns = bpf_ktime_get_ns();
	__u32 tag = sk->sk_priority;
	const struct mercury_bpf_entry *e;
	struct mercury_bpf_tag_key tkey;

	if (ca->table_gen == cfg->gen && ca->tag == tag &&
	    now_ns < ca->valid_until_ns)
		return;

	e = mercury_find_flow(sk, netns, now_ns);
	/* Any process may set SO_PRIORITY below MERCURY_TAG_MIN: no rank. */
	if (!e && tag >= MERCURY_TAG_MIN) {
		__builtin_memset(&tkey, 0, sizeof(tkey));
		tkey.netns = netns;
		tkey.tag = tag;
		e = bpf_map_lookup_elem(&mercury_tags, &tkey);
		if (!mercury_entry_live(e, now_ns))
			e = NULL;
	}
	ca->table_gen = cfg->gen;
	ca->tag = tag;
	ca->valid_until_ns = now_ns + MERCURY_REVALIDATE_NS;
	if (e) {
		ca->rank = e->rank < MERCURY_NUM_RANKS ? e->rank : MERCURY_RANK_NONE;
		ca->weight = e->weight ? e->weight : MERCURY_WEIGHT_UNIT;
		ca->job = e->job < MERCURY_NUM_JOBS ? e->job : MERCURY_JOB_NONE;
		if (e->expires_ns < ca->valid_until_ns)
			ca->valid_until_ns = e->expires_ns;
		ca->flags |= MERCURY_F_FOUND;
	} else {
		ca->rank = MERCURY_RANK_NONE;
		ca->weight = MERCURY_WEIGHT_UNIT;
		ca->job = MERCURY_JOB_NONE;
		ca->flags &= ~MERCURY_F_FOUND;
	}
	mercury_publish(sk, ca);
}

static __always_inline void mercury_do_init(struct sock *sk)
{
	struct mercury_sock *ca = mercury_priv(sk);
	__u64 netns = mercury_netns(sk);
	const struct mercury_bpf_config *cfg = mercury_config_of(netns);

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->flags = MERCURY_F_INIT;
	ca->table_gen = cfg->gen - 1;	/* force a lookup */
	mercury_refresh_prio(sk, ca, netns, cfg);
	mercury_count(mercury_state_of(netns), MERCURY_BPF_CNT_FLOWS_INIT);
}

/* Hooks can run before init() (passive open); make state valid first. */
static __always_inline struct mercury_sock *mercury_ca(struct sock *sk)
{
	struct mercury_sock *ca = mercury_priv(sk);

	if (!(ca->flags & MERCURY_F_INIT))
		mercury_do_init(sk);
	return ca;
}

static __always_inline void mercury_load(const struct tcp_sock *tp,
					 const struct mercury_sock *ca,
					 struct mercury_window *w)
{
	w->cwnd = tp->snd_cwnd;
	w->ssthresh = tp->snd_ssthresh;
	w->cnt = ca->cnt;
}

static __always_inline void mercury_store(struct tcp_sock *tp,
					  struct mercury_sock *ca,
					  const struct mercury_window *w)
{
	tp->snd_cwnd = w->cwnd;
	tp->snd_ssthresh = w->ssthresh;
	ca->cnt = w->cnt;
}

/* When each rank of this flow's job last had data out: its precedence. */
static __always_inline __u64 *mercury_job_stamps(const struct mercury_sock *ca,
						 struct mercury_bpf_state *st)
{
	__u32 job = ca->job;

	/* Checked again here, where the verifier can see it. */
	if (!st || job >= MERCURY_NUM_JOBS)
		return NULL;
	/* Or clang computes st + job's offset before the NULL check, which
	 * the verifier refuses (arithmetic on map_value_or_null). */
	barrier_var(st);
	return st->last_active_us[job];
}

static __always_inline void mercury_mark_active(struct mercury_sock *ca,
						struct mercury_bpf_state *st,
						__u64 now_us)
{
	__u64 *stamps = mercury_job_stamps(ca, st);
	__u32 rank = ca->rank, job = ca->job;

	if (!stamps || rank >= MERCURY_NUM_RANKS || job >= MERCURY_NUM_JOBS)
		return;
	/* Shared by all flows of the rank: write rarely. */
	if (now_us - stamps[rank] >= 100) {
		stamps[rank] = now_us;
		st->job_active_us[job] = now_us;
	}
}

static __always_inline void mercury_update_hold(struct sock *sk,
						struct mercury_sock *ca,
						const struct mercury_bpf_config *cfg,
						struct mercury_bpf_state *st,
						__u64 now_us, __u32 window_us)
{
	struct tcp_sock *tp = tcp_sk(sk);
	int held = !!(ca->flags & MERCURY_F_HELD);
	int in_reduction = mercury_in_cwnd_reduction(sk);
	const __u64 *stamps = mercury_job_stamps(ca, st);
	enum mercury_hold_change change;
	struct mercury_window w;

	mercury_load(tp, ca, &w);
	if (mercury_hold_leaked(&w, held, in_reduction, cfg->cwnd_floor))
		mercury_count(st, MERCURY_BPF_CNT_HOLD_LEAKS);
	else if (held && in_reduction)
		mercury_count(st, MERCURY_BPF_CNT_HELD_IN_RECOVERY);
	change = mercury_hold_step(&w, &ca->hold, held,
				   stamps && mercury_preempted(stamps, ca->rank,
							       now_us, window_us),
				   in_reduction, now_us,
				   cfg->max_hold_ms, cfg->cwnd_floor);
	switch (change) {
	case MERCURY_HOLD_UNCHANGED:
		return;
	case MERCURY_HOLD_ENTERED:
		ca->flags |= MERCURY_F_HELD;
		ca->holds++;
		mercury_count(st, MERCURY_BPF_CNT_HOLDS);
		break;
	case MERCURY_HOLD_KEPT:
		break;
	case MERCURY_HOLD_RELEASED:
	case MERCURY_HOLD_GRANTED:
		ca->flags &= ~MERCURY_F_HELD;
		mercury_count(st, change == MERCURY_HOLD_GRANTED ?
				  MERCURY_BPF_CNT_STARVE_GRANTS :
				  MERCURY_BPF_CNT_RELEASES);
		break;
	}
	mercury_store(tp, ca, &w);
	if (change != MERCURY_HOLD_KEPT)
		mercury_publish(sk, ca);
}

/* A job's flows here share its weight: shares go per job, not per flow. */
static __always_inline void mercury_update_share(struct sock *sk,
						 struct mercury_sock *ca,
						 struct mercury_bpf_state *st,
						 __u64 now_us, __u32 window_us)
{
	__u32 job = ca->job;

	if (!st || job == MERCURY_JOB_NONE || job >= MERCURY_NUM_JOBS ||
	    (ca->flags & MERCURY_F_HELD) || !mercury_has_data(sk)) {
		ca->flows = 1;
		return;
	}
	barrier_var(st);	/* see mercury_job_stamps() */
	ca->flows = mercury_job_census_count(&st->census[job], &ca->census_seen,
					     now_us, window_us);
}

/* Another flow of the job backed off on a loss: back off with it. */
static __always_inline void mercury_follow_job_cut(struct sock *sk,
						   struct mercury_sock *ca,
						   struct mercury_bpf_state *st,
						   __u64 now_us, __u32 window_us)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 job = ca->job;
	struct mercury_window w;

	if (!st || job == MERCURY_JOB_NONE || job >= MERCURY_NUM_JOBS ||
	    (ca->flags & MERCURY_F_HELD) || mercury_in_cwnd_reduction(sk))
		return;
	barrier_var(st);	/* see mercury_job_stamps() */
	if (!mercury_job_cut_due(&st->census[job], &ca->cut_seen,
				 &ca->last_backoff_us, now_us, window_us,
				 tp->srtt_us >> 3))
		return;
	mercury_load(tp, ca, &w);
	mercury_job_cut(&w, ca->weight);
	mercury_store(tp, ca, &w);
	mercury_count(st, MERCURY_BPF_CNT_JOB_CUTS);
}

SEC("struct_ops/mercury_init")
void BPF_PROG(mercury_init, struct sock *sk)
{
	/* A lazy init from an early ACK hook may have run already. */
	if (!(mercury_priv(sk)->flags & MERCURY_F_INIT))
		mercury_do_init(sk);
}

SEC("struct_ops/mercury_release")
void BPF_PROG(mercury_release, struct sock *sk)
{
	/* release() also runs on sockets whose init() never did. It never
	 * creates state: that of a netns being torn down would linger. */
	if (mercury_priv(sk)->flags & MERCURY_F_INIT)
		mercury_count(mercury_state_find(mercury_netns(sk)),
			      MERCURY_BPF_CNT_FLOWS_RELEASED);
}

SEC("struct_ops/mercury_pkts_acked")
void BPF_PROG(mercury_pkts_acked, struct sock *sk,
	      const struct ack_sample *sample)
{
	struct mercury_sock *ca = mercury_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 netns = mercury_netns(sk);
	const struct mercury_bpf_config *cfg = mercury_config_of(netns);
	struct mercury_bpf_state *st = mercury_state_of(netns);
	__u64 now_us = tp->tcp_mstamp;
	__u32 window_us = mercury_hold_window_us(tp->srtt_us >> 3);
	__s32 rtt_us = sample->rtt_us;
	const __u64 *stamps;
	struct mercury_window w;
	int delayed;

	mercury_refresh_prio(sk, ca, netns, cfg);
	stamps = mercury_job_stamps(ca, st);
	/* Before this ACK's PRR step, which runs after us. */
	mercury_load(tp, ca, &w);
	if (mercury_repair_ssthresh(&w, mercury_in_cwnd_reduction(sk), ca->weight)) {
		mercury_store(tp, ca, &w);
		mercury_count(st, MERCURY_BPF_CNT_CWND_FIXUPS);
	}
	/* Delay seen while holding others is their queue draining. */
	if (rtt_us > 0 &&
	    mercury_slow_start_done(&ca->ss, tp->snd_cwnd, tp->snd_ssthresh,
				    rtt_us, tcp_min_rtt(tp), tp->snd_una,
				    tp->snd_nxt) &&
	    !(stamps && mercury_preempting(stamps, ca->rank, now_us,
					   window_us)))
		tp->snd_ssthresh = tp->snd_cwnd;
	if (ca->rank >= MERCURY_NUM_RANKS) {
		if (ca->flags & MERCURY_F_HELD)	/* lost its rank while held */
			mercury_update_hold(sk, ca, cfg, st, now_us, window_us);
		return;
	}
	if (mercury_has_data(sk))
		mercury_mark_active(ca, st, now_us);
	mercury_update_hold(sk, ca, cfg, st, now_us, window_us);
	mercury_update_share(sk, ca, st, now_us, window_us);
	mercury_follow_job_cut(sk, ca, st, now_us, window_us);

	if ((ca->flags & MERCURY_F_HELD) || rtt_us <= 0)
		return;
	delayed = mercury_should_yield(ca->rank, rtt_us, tcp_min_rtt(tp),
				       cfg->delay_thresh_us);
	/* Another job sending from this host: the queue is theirs too. */
	if (delayed && ca->job != MERCURY_JOB_NONE && st &&
	    mercury_other_job_active(st->job_active_us, ca->job, now_us,
				     window_us))
		delayed = 0;
	/* At most once an RTT, like TCP-LP. */
	if (delayed && mercury_backed_off_within_rtt(ca->last_backoff_us, now_us,
						     tp->srtt_us >> 3))
		return;
	/* The queue may be another job's: a job's flow yields for a while only. */
	if (ca->job != MERCURY_JOB_NONE &&
	    !mercury_yield_allowed(&ca->yield_since_us, delayed, now_us,
				   cfg->max_hold_ms)) {
		if (delayed) {
			ca->last_backoff_us = (__u32)now_us;
			mercury_count(st, MERCURY_BPF_CNT_YIELD_GRANTS);
		}
		return;
	}
	if (!delayed)
		return;
	ca->last_backoff_us = (__u32)now_us;
	mercury_load(tp, ca, &w);
	mercury_yield(&w, cfg->cwnd_floor);
	mercury_store(tp, ca, &w);
	mercury_count(st, MERCURY_BPF_CNT_DELAY_BACKOFFS);
}

SEC("struct_ops/mercury_cong_avoid")
void BPF_PROG(mercury_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct mercury_sock *ca = mercury_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct mercury_window w;

	if (!tcp_is_cwnd_limited(sk) || (ca->flags & MERCURY_F_HELD))
		return;
	mercury_load(tp, ca, &w);
	if (mercury_sanitize(&w, tp->snd_cwnd_clamp))
		mercury_count(mercury_state_of(mercury_netns(sk)),
			      MERCURY_BPF_CNT_CWND_FIXUPS);
	mercury_increase(&w, acked, ca->weight, ca->flows, tp->snd_cwnd_clamp);
	mercury_store(tp, ca, &w);
}

SEC("struct_ops/mercury_ssthresh")
__u32 BPF_PROG(mercury_ssthresh, struct sock *sk)
{
	struct mercury_sock *ca = mercury_ca(sk);
	const struct tcp_sock *tp = tcp_sk(sk);
	struct mercury_bpf_state *st = mercury_state_of(mercury_netns(sk));
	__u32 job = ca->job;

	mercury_count(st, MERCURY_BPF_CNT_LOSS_EVENTS);
	/* The job's other flows back off with this one (cc_core.h). */
	if (st && job != MERCURY_JOB_NONE && job < MERCURY_NUM_JOBS &&
	    ca->rank < MERCURY_NUM_RANKS && !(ca->flags & MERCURY_F_HELD)) {
		barrier_var(st);	/* see mercury_job_stamps() */
		st->census[job].cut_us = tp->tcp_mstamp;
		ca->cut_seen = (__u32)tp->tcp_mstamp;
		ca->last_backoff_us = (__u32)tp->tcp_mstamp;
	}
	return mercury_ssthresh_after_loss(tp->snd_cwnd, ca->weight);
}

/* Before icsk_ca_state changes; see mercury_set_state() in mercury_cc.c. */
SEC("struct_ops/mercury_set_state")
void BPF_PROG(mercury_set_state, struct sock *sk, __u8 new_state)
{
	const struct inet_connection_sock *icsk = (const void *)sk;
	struct mercury_bpf_state *st;

	if (new_state != TCP_CA_Recovery)
		return;
	st = mercury_state_of(mercury_netns(sk));
	mercury_count(st, MERCURY_BPF_CNT_RECOVERIES);
	if (BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state) == TCP_CA_CWR)
		mercury_count(st, MERCURY_BPF_CNT_RECOVERIES_FROM_CWR);
}

SEC("struct_ops/mercury_undo_cwnd")
__u32 BPF_PROG(mercury_undo_cwnd, struct sock *sk)
{
	struct mercury_sock *ca = mercury_ca(sk);
	const struct tcp_sock *tp = tcp_sk(sk);

	/* A held flow must not get its pre-loss window back by undo. */
	if (ca->flags & MERCURY_F_HELD)
		return tp->snd_cwnd;
	/* tcp_reno_undo_cwnd() */
	return tp->snd_cwnd > tp->prior_cwnd ? tp->snd_cwnd : tp->prior_cwnd;
}

SEC("struct_ops/mercury_cwnd_event")
void BPF_PROG(mercury_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct mercury_sock *ca;
	__u64 netns;

	if (ev != CA_EVENT_TX_START)
		return;
	/* Data after idle: claim precedence now, not one ACK later. */
	ca = mercury_ca(sk);
	netns = mercury_netns(sk);
	mercury_refresh_prio(sk, ca, netns, mercury_config_of(netns));
	mercury_mark_active(ca, mercury_state_of(netns),
			    bpf_ktime_get_ns() / 1000);
}

SEC(".struct_ops")
struct tcp_congestion_ops mercury = {
	.init		= (void *)mercury_init,
	.release	= (void *)mercury_release,
	.ssthresh	= (void *)mercury_ssthresh,
	.cong_avoid	= (void *)mercury_cong_avoid,
	.undo_cwnd	= (void *)mercury_undo_cwnd,
	.set_state	= (void *)mercury_set_state,
	.cwnd_event	= (void *)mercury_cwnd_event,
	.pkts_acked	= (void *)mercury_pkts_acked,
	.flags		= TCP_CONG_NON_RESTRICTED,
	.name		= MERCURY_CA_NAME,
};
