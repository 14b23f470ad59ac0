// SPDX-License-Identifier: GPL-2.0
/*
 * TCP Mercury as an eBPF struct_ops congestion control.
 *
 * The same algorithm as tcp_mercury.ko (see kmod/mercury_cc.c for the
 * model), for kernels that refuse out-of-tree modules. The hooks are
 * include/mercury/cc_hooks.h and their arithmetic include/mercury/cc_core.h,
 * compiled unchanged; this file is only the glue to struct tcp_sock and to
 * the maps of include/mercury/bpf_maps.h, which mercuryd loads, pins and
 * fills.
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

/* Look the priority up again at least this often, even without a table
 * change: user space bumps gen with a read-modify-write that can race. */
#define MERCURY_REVALIDATE_NS	(20 * 1000 * 1000ULL)

/* Per-flow state; lives in icsk_ca_priv, like the module's. */
struct mercury_sock {
	__u64 valid_until_ns;	/* look the priority up again after this */
	MERCURY_SOCK_STATE
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

static __always_inline int mercury_cwnd_limited(const struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	if (tp->snd_cwnd < tp->snd_ssthresh)
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return !!BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited);
}

/* tcp_in_cwnd_reduction(): the kernel drives cwnd toward ssthresh (PRR). */
static __always_inline int mercury_in_reduction(const struct sock *sk)
{
	const struct inet_connection_sock *icsk = (const void *)sk;
	__u8 state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);

	return !!(((1 << TCP_CA_CWR) | (1 << TCP_CA_Recovery)) & (1 << state));
}

static __always_inline int mercury_handshaking(const struct sock *sk)
{
	return !!(((1 << TCP_SYN_SENT) | (1 << TCP_SYN_RECV)) &
		  (1 << sk->__sk_common.skc_state));
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

static __always_inline void mercury_resolve_prio(struct sock *sk,
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

/* The glue include/mercury/cc_hooks.h is written against. */
struct mercury_ctx {
	__u64 netns;
	const struct mercury_bpf_config *cfg;
	struct mercury_bpf_state *st;	/* NULL if mercury_state is full */
};

#define MERCURY_HOOK		static __always_inline
#define MERCURY_COUNT(x, ev)	mercury_count((x)->st, MERCURY_BPF_CNT_##ev)
#define MERCURY_READ(v)		(v)
#define MERCURY_WRITE(v, val)	((v) = (val))

static __always_inline void mercury_ctx_of(const struct sock *sk,
					   struct mercury_ctx *x)
{
	x->netns = mercury_netns(sk);
	x->cfg = mercury_config_of(x->netns);
	x->st = mercury_state_of(x->netns);
}

static __always_inline void mercury_ctx_find(const struct sock *sk,
					     struct mercury_ctx *x)
{
	x->netns = mercury_netns(sk);
	x->cfg = mercury_config_of(x->netns);
	x->st = mercury_state_find(x->netns);
}

static __always_inline __u32 mercury_cwnd_floor(const struct mercury_ctx *x)
{
	return x->cfg->cwnd_floor;
}

static __always_inline __u32 mercury_max_hold_ms(const struct mercury_ctx *x)
{
	return x->cfg->max_hold_ms;
}

static __always_inline __u32 mercury_delay_thresh_us(const struct mercury_ctx *x)
{
	return x->cfg->delay_thresh_us;
}

static __always_inline __u32 mercury_table_gen(const struct mercury_ctx *x)
{
	return x->cfg->gen;
}

/* When each rank of the job last had data out: its precedence. */
static __always_inline __u64 *mercury_stamps(struct mercury_ctx *x, __u32 job)
{
	struct mercury_bpf_state *st = x->st;

	/* Checked again here, where the verifier can see it. */
	if (!st || job >= MERCURY_NUM_JOBS)
		return NULL;
	/* Or clang computes st + job's offset before the NULL check, which
	 * the verifier refuses (arithmetic on map_value_or_null). */
	barrier_var(st);
	return st->last_active_us[job];
}

static __always_inline __u64 *mercury_job_active(struct mercury_ctx *x)
{
	struct mercury_bpf_state *st = x->st;

	if (!st)
		return NULL;
	barrier_var(st);	/* see mercury_stamps() */
	return st->job_active_us;
}

static __always_inline struct mercury_job_census *
mercury_census(struct mercury_ctx *x, __u32 job)
{
	struct mercury_bpf_state *st = x->st;

	if (!st || job >= MERCURY_NUM_JOBS)
		return NULL;
	barrier_var(st);	/* see mercury_stamps() */
	return &st->census[job];
}

static __always_inline __u32 mercury_snd_cwnd(const struct tcp_sock *tp)
{
	return tp->snd_cwnd;
}

static __always_inline void mercury_set_snd_cwnd(struct tcp_sock *tp, __u32 cwnd)
{
	tp->snd_cwnd = cwnd;
}

static __always_inline __u32 mercury_min_rtt(const struct tcp_sock *tp)
{
	return tp->rtt_min.s[0].v;
}

static __always_inline __u8 mercury_ca_state(const struct sock *sk)
{
	const struct inet_connection_sock *icsk = (const void *)sk;

	return BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
}

static __always_inline __u64 mercury_clock_us(void)
{
	return bpf_ktime_get_ns() / 1000;
}

/* tcp_reno_undo_cwnd() */
static __always_inline __u32 mercury_reno_undo_cwnd(struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	return tp->snd_cwnd > tp->prior_cwnd ? tp->snd_cwnd : tp->prior_cwnd;
}

/*
 * Cleared by the loader where the kernel refuses a BPF CC's write of
 * sk_pacing_status (before 6.0); the verifier then prunes the write.
 */
const volatile bool mercury_may_write_pacing = true;

/* Only a CC's request (NEEDED), never a user's SO_MAX_PACING_RATE or fq's.
 * No cmpxchg on a kernel struct here: fq, racing, sets FQ again next packet. */
static __always_inline int mercury_drop_inherited_pacing(struct sock *sk)
{
	if (!mercury_may_write_pacing || sk->sk_max_pacing_rate != ~0UL ||
	    sk->sk_pacing_status != SK_PACING_NEEDED)
		return 0;
	sk->sk_pacing_status = SK_PACING_NONE;
	return 1;
}

static __always_inline void mercury_refresh_prio(struct sock *sk,
						 struct mercury_sock *ca,
						 struct mercury_ctx *x)
{
	mercury_resolve_prio(sk, ca, x->netns, x->cfg);
}

/* BPF CCs cannot implement get_info: publish the new state instead. */
static __always_inline void mercury_changed(struct sock *sk,
					    const struct mercury_sock *ca,
					    enum mercury_hold_change change,
					    __u32 cwnd)
{
	mercury_publish(sk, ca);
}

#include <mercury/cc_hooks.h>

SEC("struct_ops/mercury_init")
void BPF_PROG(mercury_init, struct sock *sk)
{
	mercury_on_init(sk);
}

SEC("struct_ops/mercury_release")
void BPF_PROG(mercury_release, struct sock *sk)
{
	mercury_on_release(sk, mercury_priv(sk));
}

SEC("struct_ops/mercury_pkts_acked")
void BPF_PROG(mercury_pkts_acked, struct sock *sk,
	      const struct ack_sample *sample)
{
	mercury_on_acked(sk, mercury_ca(sk), sample->rtt_us);
}

SEC("struct_ops/mercury_cong_avoid")
void BPF_PROG(mercury_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	mercury_on_cong_avoid(sk, mercury_ca(sk), acked);
}

SEC("struct_ops/mercury_ssthresh")
__u32 BPF_PROG(mercury_ssthresh, struct sock *sk)
{
	return mercury_on_ssthresh(sk, mercury_ca(sk));
}

SEC("struct_ops/mercury_set_state")
void BPF_PROG(mercury_set_state, struct sock *sk, __u8 new_state)
{
	mercury_on_set_state(sk, new_state);
}

SEC("struct_ops/mercury_undo_cwnd")
__u32 BPF_PROG(mercury_undo_cwnd, struct sock *sk)
{
	return mercury_on_undo_cwnd(sk, mercury_ca(sk));
}

SEC("struct_ops/mercury_cwnd_event")
void BPF_PROG(mercury_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	mercury_on_cwnd_event(sk, mercury_ca(sk), ev);
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
