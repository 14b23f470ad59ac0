// SPDX-License-Identifier: GPL-2.0
/*
 * Test-only BPF programs for mercury-probe (tests/tools/mercury_probe.cpp):
 *
 *  - drop_sport (tc, meant for the ingress of the next hop): drops the first
 *    drop_count IPv4 TCP data segments from source port drop_sport, then
 *    the first retrans_count retransmissions of that flow (a sequence number
 *    below the highest seen). With until_sport, it goes on dropping them
 *    until a data segment from until_sport has passed (at most
 *    UNTIL_MAX_EXTRA more): the recovery stays open until that flow sends.
 *    Losses on the path, deterministic: this host's kernel has no netem and
 *    no gact. (Dropped at the sender's own egress, a segment would count as
 *    not sent: NET_XMIT_DROP, local congestion.)
 *  - lossy_prog (tc, on the ingress of a link's far end): drops TCP data
 *    segments at random, loss_ppm in a million: losses on the path for
 *    the stress runs (tests/native/stress.sh), without netem.
 *  - count_recoveries (tp_btf/tcp_cong_state_set): counts the sockets of one
 *    netns entering TCP_CA_Recovery, and separately those bound to local
 *    port drop_sport. An observer independent of the CC, to check the CC's
 *    own count against what any BPF program is shown, and to tell a test
 *    when the flow it made lose segments is in recovery.
 *  - window_on_segment (tp_btf/tcp_probe, each segment a socket takes,
 *    before processing it), window_on_state (tcp_cong_state_set) and
 *    window_at_close (tcp_destroy_sock): on any socket of the host whose
 *    CC is mercury, counts a window the kernel would WARN about
 *    (tcp_snd_cwnd_set: snd_cwnd <= 0 as an int) and an ssthresh of 0 or
 *    past 2^31 - 1 (the end of a reduction sets cwnd to it; PRR overflows
 *    on it). A window left by one ACK
 *    (PRR, undo, the end of a reduction, the hooks) is seen on the next
 *    segment, on an RTO's move to Loss, or at close; unlike the kernel's
 *    WARN_ON_ONCE, every one is counted, not the first per boot. (This
 *    host's kernels have no function tracer: fexit cannot be used.)
 *  - trace_segment (tp_btf/tcp_probe) and trace_state (tcp_cong_state_set):
 *    on each segment a mercury socket of one netns takes (before processing
 *    it) and on each change of its congestion state, a record of its window
 *    and of the per-flow state the CC keeps in icsk_ca_priv (rank, job,
 *    held, last back-off), and, where the BPF datapath's pinned state map
 *    is given, when each job last had data out: what each flow saw when it
 *    yielded, held or cut. Sent to user space through a ring buffer.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include <mercury/cc_core.h>
#include <mercury/bpf_maps.h>

#define TC_ACT_OK	0
#define TC_ACT_SHOT	2
#define ETH_HLEN	14
#define ETH_P_IP	0x0800
#define IPPROTO_TCP_	6
#define TCP_CA_RECOVERY	3

const volatile __u16 drop_sport;
const volatile __u64 drop_count;
const volatile __u64 retrans_count;
const volatile __u64 netns_cookie;
const volatile __u16 until_sport;	/* 0: none */

#define UNTIL_MAX_EXTRA	64

__u64 matched;
__u64 new_seen;
__u64 dropped;
__u64 retrans_seen;
__u64 retrans_dropped;
__u64 until_seen;	/* data segments from until_sport */
__u32 highest_seq;	/* host order; 0: none seen */
__u64 recoveries;
__u64 port_recoveries;
__u64 segments_seen;	/* checks of mercury sockets' windows */
__u64 bad_windows;	/* of those, leaving snd_cwnd <= 0 */
__u64 bad_ssthresh;	/* of those, with snd_ssthresh 0 or past 2^31 - 1 */
__s32 last_bad_cwnd;	/* the last bad window, and its socket's state */
__u32 last_bad_ssthresh;
__u8 last_bad_ca_state;
__u16 last_bad_sport;

struct segment {
	__u32 seq;	/* host order */
	__u16 sport;	/* host order */
	__u16 payload;	/* bytes of TCP payload */
};

/* An IPv4 TCP segment's source port, sequence number and payload size. */
static __always_inline int parse_segment(struct __sk_buff *skb, struct segment *seg)
{
	struct iphdr ip;
	struct tcphdr tcp;
	__u32 ihl, doff, tot;

	if (skb->protocol != bpf_htons(ETH_P_IP) ||
	    bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) ||
	    ip.protocol != IPPROTO_TCP_)
		return -1;
	ihl = ip.ihl * 4;
	if (ihl < sizeof(ip) || ihl > 60 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + ihl, &tcp, sizeof(tcp)))
		return -1;
	doff = tcp.doff * 4;
	tot = bpf_ntohs(ip.tot_len);
	seg->seq = bpf_ntohl(tcp.seq);
	seg->sport = bpf_ntohs(tcp.source);
	seg->payload = tot > ihl + doff ? tot - ihl - doff : 0;
	return 0;
}

SEC("tc")
int drop_sport_prog(struct __sk_buff *skb)
{
	struct segment seg;
	__u64 n;

	if (parse_segment(skb, &seg) || !seg.payload)
		return TC_ACT_OK;
	if (until_sport && seg.sport == until_sport)
		__sync_fetch_and_add(&until_seen, 1);
	if (seg.sport != drop_sport)
		return TC_ACT_OK;
	__sync_fetch_and_add(&matched, 1);
	if (!highest_seq || (__s32)(seg.seq - highest_seq) > 0) {
		highest_seq = seg.seq;
		if (__sync_fetch_and_add(&new_seen, 1) >= drop_count)
			return TC_ACT_OK;
		__sync_fetch_and_add(&dropped, 1);
		return TC_ACT_SHOT;
	}
	/* Below the highest sequence seen: a retransmission. */
	n = __sync_fetch_and_add(&retrans_seen, 1);
	if (n >= retrans_count &&
	    (!until_sport || until_seen || n >= retrans_count + UNTIL_MAX_EXTRA))
		return TC_ACT_OK;
	__sync_fetch_and_add(&retrans_dropped, 1);
	return TC_ACT_SHOT;
}

/* lossy: drops each TCP data segment with probability loss_ppm / 10^6. */
const volatile __u32 loss_ppm;
__u64 lossy_seen;
__u64 lossy_dropped;

SEC("tc")
int lossy_prog(struct __sk_buff *skb)
{
	struct segment seg;

	if (parse_segment(skb, &seg) || !seg.payload)
		return TC_ACT_OK;
	__sync_fetch_and_add(&lossy_seen, 1);
	if (bpf_get_prandom_u32() % 1000000 >= loss_ppm)
		return TC_ACT_OK;
	__sync_fetch_and_add(&lossy_dropped, 1);
	return TC_ACT_SHOT;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(count_recoveries, struct sock *sk, __u8 ca_state)
{
	if (ca_state != TCP_CA_RECOVERY)
		return 0;
	if (BPF_CORE_READ(sk, __sk_common.skc_net.net, net_cookie) != netns_cookie)
		return 0;
	__sync_fetch_and_add(&recoveries, 1);
	if (BPF_CORE_READ(sk, __sk_common.skc_num) == drop_sport)
		__sync_fetch_and_add(&port_recoveries, 1);
	return 0;
}

static __always_inline int is_mercury(const struct sock *sk)
{
	const struct inet_connection_sock *icsk = (const void *)sk;
	const struct tcp_congestion_ops *ops = BPF_CORE_READ(icsk, icsk_ca_ops);
	char name[8] = {};

	if (!ops || bpf_probe_read_kernel_str(name, sizeof(name), ops->name) != 8)
		return 0;
	return name[0] == 'm' && name[1] == 'e' && name[2] == 'r' &&
	       name[3] == 'c' && name[4] == 'u' && name[5] == 'r' && name[6] == 'y';
}

static __always_inline void check_window(const struct sock *sk)
{
	const struct tcp_sock *tp = (const void *)sk;
	__s32 cwnd;
	__u32 ssthresh;

	if (!is_mercury(sk))
		return;
	__sync_fetch_and_add(&segments_seen, 1);
	cwnd = (__s32)BPF_CORE_READ(tp, snd_cwnd);
	ssthresh = BPF_CORE_READ(tp, snd_ssthresh);
	if (cwnd > 0 && (__s32)ssthresh > 0)
		return;
	if (cwnd <= 0)
		__sync_fetch_and_add(&bad_windows, 1);
	if ((__s32)ssthresh <= 0)
		__sync_fetch_and_add(&bad_ssthresh, 1);
	last_bad_cwnd = cwnd;
	last_bad_ssthresh = ssthresh;
	last_bad_ca_state = BPF_CORE_READ_BITFIELD_PROBED((const struct inet_connection_sock *)sk,
							  icsk_ca_state);
	last_bad_sport = BPF_CORE_READ(sk, __sk_common.skc_num);
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(window_on_segment, struct sock *sk, struct sk_buff *skb)
{
	check_window(sk);
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(window_on_state, struct sock *sk, __u8 ca_state)
{
	check_window(sk);
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(window_at_close, struct sock *sk)
{
	check_window(sk);
	return 0;
}

/*
 * The CC's per-flow state as both datapaths lay it out in icsk_ca_priv: one
 * 8-byte word of glue (the module's expiry, the BPF program's revalidation
 * time), then MERCURY_SOCK_STATE (include/mercury/cc_core.h).
 */
struct traced_sock {
	__u64 glue;
	MERCURY_SOCK_STATE
};

/* The BPF datapath's per-netns state, reused from its pin (or left empty). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MERCURY_BPF_MAX_NETNS);
	__type(key, __u64);
	__type(value, struct mercury_bpf_state);
} mercury_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} trace_events SEC(".maps");

__u64 trace_lost;	/* records the ring buffer had no room for */

struct mercury_trace_record {
	__u64 t_ns;			/* bpf_ktime_get_ns() */
	__u64 job_active_us[MERCURY_NUM_JOBS];	/* 0: unknown */
	__u64 mstamp_us;		/* the socket's tcp_mstamp */
	__u32 cwnd, ssthresh, srtt_us, min_rtt_us, packets_out, unsent;
	__u32 last_backoff_us, holds, delivered;
	__u32 last_rtt_us;		/* the newest RTT sample (RACK's) */
	__u16 sport, dport;
	__u16 weight;
	__u8 rank, job, flags, flows, ca_state, kind;	/* kind: 0 segment, 1 state change */
	__u8 new_state, pad[5];
};

static __always_inline void trace(const struct sock *sk, __u8 kind, __u8 new_state)
{
	const struct inet_connection_sock *icsk = (const void *)sk;
	const struct tcp_sock *tp = (const void *)sk;
	struct mercury_bpf_state *st;
	struct mercury_trace_record *ev;
	struct traced_sock ca;
	__u64 cookie;
	__u32 write_seq, snd_nxt;

	cookie = BPF_CORE_READ(sk, __sk_common.skc_net.net, net_cookie);
	if (cookie != netns_cookie || !is_mercury(sk))
		return;
	if (bpf_probe_read_kernel(&ca, sizeof(ca), icsk->icsk_ca_priv))
		return;
	ev = bpf_ringbuf_reserve(&trace_events, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&trace_lost, 1);
		return;
	}
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->t_ns = bpf_ktime_get_ns();
	st = bpf_map_lookup_elem(&mercury_state, &cookie);
	if (st)
		__builtin_memcpy(ev->job_active_us, st->job_active_us, sizeof(ev->job_active_us));
	ev->mstamp_us = BPF_CORE_READ(tp, tcp_mstamp);
	ev->cwnd = BPF_CORE_READ(tp, snd_cwnd);
	ev->ssthresh = BPF_CORE_READ(tp, snd_ssthresh);
	ev->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;
	ev->min_rtt_us = BPF_CORE_READ(tp, rtt_min.s[0].v);
	ev->packets_out = BPF_CORE_READ(tp, packets_out);
	write_seq = BPF_CORE_READ(tp, write_seq);
	snd_nxt = BPF_CORE_READ(tp, snd_nxt);
	ev->unsent = write_seq - snd_nxt;
	ev->delivered = BPF_CORE_READ(tp, delivered);
	ev->last_rtt_us = BPF_CORE_READ(tp, rack.rtt_us);
	ev->last_backoff_us = ca.last_backoff_us;
	ev->holds = ca.holds;
	ev->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	ev->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	ev->weight = ca.weight;
	ev->rank = ca.rank;
	ev->job = ca.job;
	ev->flags = ca.flags;
	ev->flows = ca.flows;
	ev->ca_state = BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state);
	ev->kind = kind;
	ev->new_state = new_state;
	bpf_ringbuf_submit(ev, 0);
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(trace_segment, struct sock *sk, struct sk_buff *skb)
{
	trace(sk, 0, 0);
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(trace_state, struct sock *sk, __u8 ca_state)
{
	trace(sk, 1, ca_state);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
