/* SPDX-License-Identifier: GPL-2.0 */
/*
 * tcp_mercury.ko internals shared by the congestion-control hooks
 * (mercury_cc.c), the per-netns table (mercury_table.c) and the generic
 * netlink family (mercury_netlink.c).
 */
#ifndef _TCP_MERCURY_H
#define _TCP_MERCURY_H

#include <linux/hashtable.h>
#include <linux/in6.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>
#include <net/net_namespace.h>

#include <mercury/cc_core.h>

/* Parameters, per netns; new netns copy the module parameters. */
struct mercury_params {
	u32 cwnd_floor;		/* packets */
	u32 delay_thresh_us;	/* us over base RTT; 0 disables yielding */
	u32 entry_ttl_ms;	/* default entry lifetime */
	u32 max_entries;	/* entries per netns */
	u32 max_hold_ms;	/* longest continuous hold */
	u32 debug;		/* 0 or 1: log hold/release transitions */
};

extern struct mercury_params mercury_defaults;

/* What an entry is keyed by. Zero-filled before use: compared by memcmp. */
enum mercury_key_kind {
	MERCURY_KEY_TAG = 1,
	MERCURY_KEY_COOKIE,
	MERCURY_KEY_TUPLE,
};

struct mercury_key {
	u32 tag;
	u16 sport;		/* host order */
	u16 dport;		/* host order */
	u8 kind;		/* enum mercury_key_kind */
	u8 family;		/* AF_INET or AF_INET6, tuples only */
	u8 pad[6];
	u64 cookie;
	struct in6_addr saddr;	/* IPv4 stored v4-mapped */
	struct in6_addr daddr;
};

struct mercury_entry {
	struct hlist_node node;
	struct rcu_head rcu;
	struct mercury_key key;
	unsigned long expires;	/* jiffies */
	u16 weight;
	u8 rank;
	u8 job;
};

/* What a flow resolved its priority to. */
struct mercury_prio {
	unsigned long expires;	/* jiffies; meaningful if found */
	u16 weight;
	u8 rank;		/* MERCURY_RANK_NONE if not found */
	u8 job;			/* MERCURY_JOB_NONE if not found */
	bool found;
};

/* The shared events (MERCURY_EVENTS in uapi.h), then the module's own. */
enum mercury_counter {
#define MERCURY_CNT_ENUM(NAME, name) MERCURY_CNT_##NAME,
	MERCURY_EVENTS(MERCURY_CNT_ENUM)
#undef MERCURY_CNT_ENUM
	MERCURY_CNT_EXPIRED,	/* entries removed by expiry */
	MERCURY_CNT_MAX
};

#define MERCURY_HASH_BITS	12

/* A netns's table, allocated when it gets its first entry: most namespaces
 * on a host never use mercury, and should not pay for it. */
struct mercury_buckets {
	struct rcu_head rcu;
	struct hlist_head head[1 << MERCURY_HASH_BITS];
};

struct mercury_net {
	struct mercury_params params;
	u32 gen;				/* bumped on every table change */
	/* tcp_clock_us() a rank of a job last had data out: precedence is per job */
	u64 last_active_us[MERCURY_NUM_JOBS][MERCURY_NUM_RANKS];
	u64 job_active_us[MERCURY_NUM_JOBS];	/* any rank of the job */
	struct mercury_job_census census[MERCURY_NUM_JOBS]; /* sending flows */
	atomic64_t counters[MERCURY_CNT_MAX];

	spinlock_t lock;			/* writers of the table below */
	struct mercury_buckets __rcu *buckets;	/* RCU readers; NULL: empty */
	u32 n_tags;
	u32 n_flows;
	struct delayed_work gc;			/* queued while entries exist */
};

struct mercury_net *mercury_pernet(const struct net *net);

static inline void mercury_count(struct mercury_net *mn,
				 enum mercury_counter c)
{
	atomic64_inc(&mn->counters[c]);
}

/* mercury_table.c */
int mercury_table_init(void);
void mercury_table_exit(void);
void mercury_lookup(struct mercury_net *mn, const struct sock *sk,
		    struct mercury_prio *prio);
int mercury_entry_set(struct mercury_net *mn, const struct mercury_key *key,
		      u8 rank, u16 weight, u8 job, u32 ttl_ms,
		      struct netlink_ext_ack *extack);
int mercury_entry_del(struct mercury_net *mn, const struct mercury_key *key);
void mercury_flush(struct mercury_net *mn);
long mercury_global_entries(void);

/* mercury_netlink.c */
int mercury_netlink_init(void);
void mercury_netlink_exit(void);

#endif /* _TCP_MERCURY_H */
