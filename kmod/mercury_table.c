// SPDX-License-Identifier: GPL-2.0
/*
 * Mercury per-netns priority table.
 *
 * Entries map a tag (SO_PRIORITY) or a flow (socket cookie or 4-tuple) to a
 * rank and weight. Readers are flows on the ACK path, under RCU; writers are
 * the netlink handlers and the expiry work, under mn->lock. Every change bumps
 * mn->gen so flows know to look their priority up again; between changes a
 * flow uses what it cached.
 */

#include <linux/hash.h>
#include <linux/jhash.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <net/netns/generic.h>
#include <net/sock.h>
#include <net/ipv6.h>

#include "tcp_mercury.h"

#define MERCURY_GC_INTERVAL	HZ

static unsigned int mercury_net_id __read_mostly;
static struct kmem_cache *mercury_entry_cache __read_mostly;
/* Entries alive in all namespaces; reported for leak checks. */
static atomic_long_t mercury_entries_alive = ATOMIC_LONG_INIT(0);

/* Every netns has its own max_entries, but namespaces are cheap to make. */
static unsigned int max_global_entries = 1 << 20;
module_param(max_global_entries, uint, 0644);
MODULE_PARM_DESC(max_global_entries,
		 "table entries in all network namespaces together (default 1048576)");

struct mercury_net *mercury_pernet(const struct net *net)
{
	return net_generic(net, mercury_net_id);
}

long mercury_global_entries(void)
{
	return atomic_long_read(&mercury_entries_alive);
}

static u32 mercury_key_hash(const struct mercury_key *key)
{
	BUILD_BUG_ON(sizeof(*key) % sizeof(u32));
	return jhash2((const u32 *)key, sizeof(*key) / sizeof(u32), 0);
}

static bool mercury_entry_live(const struct mercury_entry *e)
{
	return time_before(jiffies, READ_ONCE(e->expires));
}

static struct hlist_head *mercury_bucket(struct mercury_buckets *b,
					 const struct mercury_key *key)
{
	return &b->head[hash_32(mercury_key_hash(key), MERCURY_HASH_BITS)];
}

/* Under rcu_read_lock() or mn->lock. */
static struct mercury_entry *mercury_find_rcu(struct mercury_net *mn,
					      const struct mercury_key *key)
{
	struct mercury_buckets *b;
	struct mercury_entry *e;

	b = rcu_dereference_check(mn->buckets, lockdep_is_held(&mn->lock));
	if (!b)
		return NULL;
	hlist_for_each_entry_rcu(e, mercury_bucket(b, key), node,
				 lockdep_is_held(&mn->lock))
		if (!memcmp(&e->key, key, sizeof(*key)))
			return e;
	return NULL;
}

static struct mercury_buckets *mercury_buckets_locked(struct mercury_net *mn)
{
	return rcu_dereference_protected(mn->buckets, lockdep_is_held(&mn->lock));
}

static void mercury_sock_keys(const struct sock *sk, struct mercury_key *tuple,
			      struct mercury_key *cookie)
{
	memset(tuple, 0, sizeof(*tuple));
	memset(cookie, 0, sizeof(*cookie));

	cookie->kind = MERCURY_KEY_COOKIE;
	/* Set once user space read SO_COOKIE; 0 means nobody can name it. */
	cookie->cookie = atomic64_read(&sk->sk_cookie);

	tuple->kind = MERCURY_KEY_TUPLE;
	tuple->sport = sk->sk_num;
	tuple->dport = ntohs(sk->sk_dport);
#if IS_ENABLED(CONFIG_IPV6)
	if (sk->sk_family == AF_INET6 &&
	    !ipv6_addr_v4mapped(&sk->sk_v6_daddr)) {
		tuple->family = AF_INET6;
		tuple->saddr = sk->sk_v6_rcv_saddr;
		tuple->daddr = sk->sk_v6_daddr;
		return;
	}
#endif
	tuple->family = AF_INET;
	ipv6_addr_set_v4mapped(sk->sk_rcv_saddr, &tuple->saddr);
	ipv6_addr_set_v4mapped(sk->sk_daddr, &tuple->daddr);
}

/* Resolve @sk's priority: its flow entry, else its tag's, else unranked. */
void mercury_lookup(struct mercury_net *mn, const struct sock *sk,
		    struct mercury_prio *prio)
{
	struct mercury_entry *e = NULL;
	struct mercury_key tuple, cookie, tag;
	u32 priority = READ_ONCE(sk->sk_priority);

	prio->found = false;
	prio->rank = MERCURY_RANK_NONE;
	prio->weight = MERCURY_WEIGHT_UNIT;
	prio->job = MERCURY_JOB_NONE;

	rcu_read_lock();
	if (READ_ONCE(mn->n_flows)) {
		mercury_sock_keys(sk, &tuple, &cookie);
		if (cookie.cookie)
			e = mercury_find_rcu(mn, &cookie);
		if (!e || !mercury_entry_live(e))
			e = mercury_find_rcu(mn, &tuple);
	}
	/* Any process may set SO_PRIORITY below MERCURY_TAG_MIN: no rank. */
	if ((!e || !mercury_entry_live(e)) && READ_ONCE(mn->n_tags) &&
	    priority >= MERCURY_TAG_MIN) {
		memset(&tag, 0, sizeof(tag));
		tag.kind = MERCURY_KEY_TAG;
		tag.tag = priority;
		e = mercury_find_rcu(mn, &tag);
	}
	if (e && mercury_entry_live(e)) {
		prio->found = true;
		prio->rank = READ_ONCE(e->rank);
		prio->weight = READ_ONCE(e->weight);
		prio->job = READ_ONCE(e->job);
		prio->expires = READ_ONCE(e->expires);
	}
	rcu_read_unlock();
}

static void mercury_entry_free_rcu(struct rcu_head *head)
{
	kmem_cache_free(mercury_entry_cache,
			container_of(head, struct mercury_entry, rcu));
	atomic_long_dec(&mercury_entries_alive);
}

static u32 *mercury_kind_count(struct mercury_net *mn, u8 kind)
{
	return kind == MERCURY_KEY_TAG ? &mn->n_tags : &mn->n_flows;
}

/* Caller holds mn->lock. */
static void mercury_entry_remove(struct mercury_net *mn, struct mercury_entry *e)
{
	u32 *count = mercury_kind_count(mn, e->key.kind);

	hlist_del_rcu(&e->node);
	WRITE_ONCE(*count, *count - 1);
	call_rcu(&e->rcu, mercury_entry_free_rcu);
}

/*
 * Publishes a change: pairs with the smp_load_acquire() in
 * mercury_refresh_prio(), so a flow that sees the new gen also sees the
 * table as it is after the change. Caller holds mn->lock.
 */
static void mercury_bump_gen(struct mercury_net *mn)
{
	smp_store_release(&mn->gen, mn->gen + 1);
}

int mercury_entry_set(struct mercury_net *mn, const struct mercury_key *key,
		      u8 rank, u16 weight, u8 job, u32 ttl_ms,
		      struct netlink_ext_ack *extack)
{
	unsigned long expires = jiffies + msecs_to_jiffies(ttl_ms);
	struct mercury_buckets *spare = NULL, *b;
	struct mercury_entry *e, *fresh, *unused = NULL;
	u32 *count = mercury_kind_count(mn, key->kind);
	int err = 0;

	/*
	 * Allocate outside the lock, charged to the caller's memory cgroup.
	 * The table exists from the first entry to the netns's exit, which
	 * cannot overlap a request from inside the netns.
	 */
	if (!rcu_access_pointer(mn->buckets)) {
		spare = kvzalloc(sizeof(*spare), GFP_KERNEL_ACCOUNT);
		if (!spare)
			return -ENOMEM;
	}
	fresh = kmem_cache_zalloc(mercury_entry_cache, GFP_KERNEL_ACCOUNT);
	if (!fresh) {
		kvfree(spare);
		return -ENOMEM;
	}
	atomic_long_inc(&mercury_entries_alive);
	fresh->key = *key;
	fresh->rank = rank;
	fresh->weight = weight;
	fresh->job = job;
	fresh->expires = expires;

	spin_lock_bh(&mn->lock);
	b = mercury_buckets_locked(mn);
	if (!b) {
		rcu_assign_pointer(mn->buckets, spare);
		b = spare;
		spare = NULL;
	}
	e = mercury_find_rcu(mn, key);
	if (e && e->rank == rank && e->weight == weight && e->job == job) {
		/*
		 * The agent's periodic refresh: only the lifetime moves, in
		 * place, and gen stays, so flows keep what they resolved
		 * (they look again when their cached expiry passes).
		 */
		WRITE_ONCE(e->expires, expires);
		unused = fresh;
		goto out;
	}
	if (e) {
		/* Readers see either the old or the new entry, never a mix. */
		hlist_replace_rcu(&e->node, &fresh->node);
		call_rcu(&e->rcu, mercury_entry_free_rcu);
	} else {
		if (mn->n_tags + mn->n_flows >= READ_ONCE(mn->params.max_entries)) {
			NL_SET_ERR_MSG_MOD(extack, "mercury table is full (max_entries)");
			err = -ENOSPC;
		} else if (atomic_long_read(&mercury_entries_alive) >
			   READ_ONCE(max_global_entries)) {
			NL_SET_ERR_MSG_MOD(extack,
					   "mercury tables of all namespaces are full (max_global_entries)");
			err = -ENOSPC;
		}
		if (err) {
			unused = fresh;
			goto out;
		}
		hlist_add_head_rcu(&fresh->node, mercury_bucket(b, key));
		WRITE_ONCE(*count, *count + 1);
		/* No-op while queued; the work stops when the table empties. */
		schedule_delayed_work(&mn->gc, MERCURY_GC_INTERVAL);
	}
	mercury_bump_gen(mn);
out:
	spin_unlock_bh(&mn->lock);
	if (unused)
		mercury_entry_free_rcu(&unused->rcu);
	kvfree(spare);
	return err;
}

int mercury_entry_del(struct mercury_net *mn, const struct mercury_key *key)
{
	struct mercury_entry *e;
	int err = -ENOENT;

	spin_lock_bh(&mn->lock);
	e = mercury_find_rcu(mn, key);
	if (e) {
		mercury_entry_remove(mn, e);
		mercury_bump_gen(mn);
		err = 0;
	}
	spin_unlock_bh(&mn->lock);
	return err;
}

void mercury_flush(struct mercury_net *mn)
{
	struct mercury_buckets *b;
	struct mercury_entry *e;
	struct hlist_node *tmp;
	int bkt;

	spin_lock_bh(&mn->lock);
	b = mercury_buckets_locked(mn);
	for (bkt = 0; b && bkt < ARRAY_SIZE(b->head); bkt++)
		hlist_for_each_entry_safe(e, tmp, &b->head[bkt], node)
			mercury_entry_remove(mn, e);
	mercury_bump_gen(mn);
	spin_unlock_bh(&mn->lock);
}

/* Expired entries are already ignored by lookups; this frees their memory. */
static void mercury_gc(struct work_struct *work)
{
	struct mercury_net *mn = container_of(to_delayed_work(work),
					      struct mercury_net, gc);
	struct mercury_buckets *b;
	struct mercury_entry *e;
	struct hlist_node *tmp;
	bool changed = false;
	int bkt;

	spin_lock_bh(&mn->lock);
	b = mercury_buckets_locked(mn);
	for (bkt = 0; b && bkt < ARRAY_SIZE(b->head); bkt++) {
		hlist_for_each_entry_safe(e, tmp, &b->head[bkt], node) {
			if (!mercury_entry_live(e)) {
				mercury_entry_remove(mn, e);
				mercury_count(mn, MERCURY_CNT_EXPIRED);
				changed = true;
			}
		}
	}
	if (changed)
		mercury_bump_gen(mn);
	/* An idle netns costs no wakeups; the next entry queues us again. */
	if (mn->n_tags + mn->n_flows)
		schedule_delayed_work(&mn->gc, MERCURY_GC_INTERVAL);
	spin_unlock_bh(&mn->lock);
}

static int __net_init mercury_net_init(struct net *net)
{
	struct mercury_net *mn = mercury_pernet(net);

	mn->params = mercury_defaults;
	spin_lock_init(&mn->lock);
	RCU_INIT_POINTER(mn->buckets, NULL);
	INIT_DELAYED_WORK(&mn->gc, mercury_gc);
	return 0;
}

static void __net_exit mercury_net_exit(struct net *net)
{
	struct mercury_net *mn = mercury_pernet(net);
	struct mercury_buckets *b;

	/* The work requeues itself only under mn->lock, with entries left. */
	mercury_flush(mn);
	cancel_delayed_work_sync(&mn->gc);
	b = rcu_dereference_protected(mn->buckets, true);
	RCU_INIT_POINTER(mn->buckets, NULL);
	if (b)
		kvfree_rcu(b, rcu);
}

static struct pernet_operations mercury_net_ops = {
	.init = mercury_net_init,
	.exit = mercury_net_exit,
	.id = &mercury_net_id,
	.size = sizeof(struct mercury_net),
};

int mercury_table_init(void)
{
	int err;

	mercury_entry_cache = KMEM_CACHE(mercury_entry, 0);
	if (!mercury_entry_cache)
		return -ENOMEM;
	err = register_pernet_subsys(&mercury_net_ops);
	if (err)
		kmem_cache_destroy(mercury_entry_cache);
	return err;
}

void mercury_table_exit(void)
{
	unregister_pernet_subsys(&mercury_net_ops);
	/* Let every call_rcu() free land before the cache goes. */
	rcu_barrier();
	kmem_cache_destroy(mercury_entry_cache);
}
