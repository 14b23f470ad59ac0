/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * Mercury's eBPF datapath: the maps shared by the struct_ops program
 * (kmod/bpf/tcp_mercury.bpf.c) and user space (mercuryd, mercuryctl). The
 * BPF twin of the generic netlink contract in uapi.h: same ranks, weights and
 * expiry, but user space writes the maps directly instead of sending
 * commands.
 *
 * The congestion control is global, so every key carries the network
 * namespace it belongs to, by its cookie (getsockopt(SO_NETNS_COOKIE) on any
 * socket; unlike the netns inode, never reused): each netns has its own
 * table, parameters and counters, as with the module. Times are
 * CLOCK_MONOTONIC (bpf_ktime_get_ns()).
 *
 * Every struct is laid out with explicit padding: clang's BPF target and
 * x86-64 user space must agree byte for byte.
 */
#ifndef _UAPI_MERCURY_BPF_MAPS_H
#define _UAPI_MERCURY_BPF_MAPS_H

#ifndef __bpf__
#include <linux/types.h>
#endif
#include "cc_core.h"	/* struct mercury_job_census; includes uapi.h */

/* The loading agent mounts a bpffs here and pins every map in it, by the
 * names below. Not under /sys/fs/bpf: `ip netns exec` mounts a fresh /sys
 * and would hide the pins from agents in other namespaces. */
#define MERCURY_BPF_PIN_DIR	"/run/mercury/bpf"
/* The loading agent's pid: agents in another mount namespace (a loader
 * started by `ip netns exec` mounts its bpffs privately) reach the pins
 * through /proc/PID/root. */
#define MERCURY_BPF_OWNER_FILE	"/run/mercury/bpf.owner"
/* flock()ed around every read-modify-write of a netns's config entry. */
#define MERCURY_BPF_LOCK_FILE	"/run/mercury/bpf.lock"
#define MERCURY_BPF_MAP_TAGS	"mercury_tags"
#define MERCURY_BPF_MAP_FLOWS	"mercury_flows"
#define MERCURY_BPF_MAP_CONFIG	"mercury_config"
#define MERCURY_BPF_MAP_STATE	"mercury_state"
#define MERCURY_BPF_MAP_SOCKS	"mercury_socks"

/* Capacity, shared by all namespaces; each netns may also hold at most its
 * max_entries (as with the module). The loading agent frees the config slot
 * and state of a netns that had no entries, default parameters and no
 * mercury socket for 50 of its sweeps in a row (--check-ms: 50 s by default);
 * such a netns's counters start again from zero. */
#define MERCURY_BPF_MAX_TAGS	16384
#define MERCURY_BPF_MAX_FLOWS	65536
#define MERCURY_BPF_MAX_NETNS	4096
/* mercury_state key of the host-wide counters: no netns has cookie 0. */
#define MERCURY_BPF_GLOBAL_STATE	0

/* mercury_tags: which rank and weight a tag (SO_PRIORITY) has. */
struct mercury_bpf_tag_key {
	__u64 netns;
	__u32 tag;
	__u32 pad;
};

enum mercury_bpf_key_kind {
	MERCURY_BPF_KEY_COOKIE = 1,
	MERCURY_BPF_KEY_TUPLE = 2,
};

/* mercury_flows: a flow by socket cookie or by local/remote address and
 * port. Unused fields are zero; IPv4 addresses are stored v4-mapped. */
struct mercury_bpf_flow_key {
	__u64 netns;
	__u8 kind;		/* enum mercury_bpf_key_kind */
	__u8 family;		/* AF_INET or AF_INET6, tuples only */
	__u16 sport;		/* host order, local */
	__u16 dport;		/* host order, remote */
	__u8 pad[2];
	__u64 cookie;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* Value of both tables. */
struct mercury_bpf_entry {
	__u64 expires_ns;	/* CLOCK_MONOTONIC; the entry is ignored after */
	__u16 weight;
	__u8 rank;
	__u8 job;		/* 0 .. MERCURY_NUM_JOBS - 1; 0 = no job */
	__u8 pad[4];
};

/* mercury_config (key: netns cookie): written only by user space, under
 * MERCURY_BPF_LOCK_FILE. A netns without an entry uses the defaults (those of
 * the module's parameters) and gen 0; a new slot starts at a random gen, so
 * a flow's cached gen never matches a freed and recreated slot's by chance. */
struct mercury_bpf_config {
	__u32 gen;		/* bumped by every table change: flows look again */
	__u32 cwnd_floor;
	__u32 delay_thresh_us;
	__u32 entry_ttl_ms;
	__u32 max_hold_ms;
	__u32 max_entries;	/* tag + flow entries this netns may hold */
	__u32 entries;		/* tag + flow entries it holds, until collected */
	__u32 pad;
	__u64 expired;		/* entries the loading agent collected */
};

/* The shared events (MERCURY_EVENTS in uapi.h), in their order: the
 * layout of mercury_bpf_state's counters. Expiry is counted in
 * mercury_bpf_config.expired instead, by the agent that collects. */
enum mercury_bpf_counter {
#define MERCURY_BPF_CNT_ENUM(NAME, name) MERCURY_BPF_CNT_##NAME,
	MERCURY_EVENTS(MERCURY_BPF_CNT_ENUM)
#undef MERCURY_BPF_CNT_ENUM
	/* Only in MERCURY_BPF_GLOBAL_STATE: events of a netns whose state
	 * could not be created (mercury_state full), not counted there. */
	MERCURY_BPF_CNT_UNCOUNTED,
	MERCURY_BPF_CNT_MAX
};

/* mercury_state (key: netns cookie): counters written by the datapath. A
 * plain hash, so nothing is evicted behind the agent's back (see above for
 * when the agent frees an entry). The loading agent creates the
 * MERCURY_BPF_GLOBAL_STATE entry. */
struct mercury_bpf_state {
	__u64 last_active_us[MERCURY_NUM_JOBS][MERCURY_NUM_RANKS];	/* per job */
	__u64 job_active_us[MERCURY_NUM_JOBS];	/* any rank of the job */
	__u64 counters[MERCURY_BPF_CNT_MAX];
	struct mercury_job_census census[MERCURY_NUM_JOBS]; /* sending flows */
};

/* mercury_socks (socket storage): what a flow resolved to, for its owner to
 * read by socket fd (BPF CCs cannot implement get_info). */
struct mercury_bpf_sock_state {
	__u32 tag;
	__u32 holds;		/* times held */
	__u16 weight;
	__u8 rank;		/* MERCURY_RANK_NONE if unranked */
	__u8 held;
	__u8 job;
	__u8 pad[3];
};

/* Both compilers must see the same sizes: no implicit padding anywhere. */
#ifdef __cplusplus
#define MERCURY_BPF_SIZE(type, n) static_assert(sizeof(struct type) == (n), #type)
#else
#define MERCURY_BPF_SIZE(type, n) _Static_assert(sizeof(struct type) == (n), #type)
#endif
MERCURY_BPF_SIZE(mercury_bpf_tag_key, 16);
MERCURY_BPF_SIZE(mercury_bpf_flow_key, 56);
MERCURY_BPF_SIZE(mercury_bpf_entry, 16);
MERCURY_BPF_SIZE(mercury_bpf_config, 40);
MERCURY_BPF_SIZE(mercury_bpf_state,
		 8 * (MERCURY_NUM_JOBS * (MERCURY_NUM_RANKS + 4) + MERCURY_BPF_CNT_MAX));
MERCURY_BPF_SIZE(mercury_bpf_sock_state, 16);
#undef MERCURY_BPF_SIZE

#endif /* _UAPI_MERCURY_BPF_MAPS_H */
