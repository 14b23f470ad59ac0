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
 *  - count_recoveries (tp_btf/tcp_cong_state_set): counts the sockets of one
 *    netns entering TCP_CA_Recovery, and separately those bound to local
 *    port drop_sport. An observer independent of the CC, to check the CC's
 *    own count against what any BPF program is shown, and to tell a test
 *    when the flow it made lose segments is in recovery.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

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

char LICENSE[] SEC("license") = "GPL";
