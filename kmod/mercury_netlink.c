// SPDX-License-Identifier: GPL-2.0
/*
 * Mercury generic netlink family: how mercuryd sets, clears and dumps
 * per-tag and per-flow priorities, tunes parameters and reads statistics.
 * The contract (commands, attributes, limits) is include/mercury/uapi.h.
 *
 * Policies are strict and checked by the netlink core before a handler
 * runs: unknown attributes and wrong lengths fail with -EINVAL, values out of
 * range with -ERANGE, each with an extack message (and the policy's bounds).
 * Mutations need CAP_NET_ADMIN in the netns's user namespace.
 */

#include <linux/module.h>
#include <net/genetlink.h>
#include <net/ipv6.h>

#include "tcp_mercury.h"

/*
 * Integer ranges are policy data (NLA_POLICY_RANGE and friends), checked by
 * the netlink core before a handler runs: out of range is -ERANGE with the
 * bounds echoed in the extended ack. A validate function is used only on the
 * binary address attributes: on an integer its pointer would share a union
 * with min/max, and the policy echo in an error reply (or a
 * CTRL_CMD_GETPOLICY dump, which anyone may ask for) would read it as a
 * range and WARN (see upstream 9e17f99220d1, act_mpls).
 */
static int mercury_check_addr(const struct nlattr *attr,
			      struct netlink_ext_ack *extack)
{
	if (nla_len(attr) != 4 && nla_len(attr) != 16) {
		NL_SET_ERR_MSG_ATTR(extack, attr, "address must be 4 or 16 bytes");
		return -EINVAL;
	}
	return 0;
}

static struct netlink_range_validation mercury_ttl_range = {
	.min = MERCURY_TTL_MS_MIN,
	.max = MERCURY_TTL_MS_MAX,
};

static struct netlink_range_validation mercury_thresh_range = {
	.max = MERCURY_DELAY_THRESH_US_MAX,
};

static struct netlink_range_validation mercury_entries_range = {
	.min = MERCURY_MAX_ENTRIES_MIN,
	.max = MERCURY_MAX_ENTRIES_MAX,
};

static struct netlink_range_validation mercury_hold_range = {
	.min = MERCURY_MAX_HOLD_MS_MIN,
	.max = MERCURY_MAX_HOLD_MS_MAX,
};

static const struct nla_policy mercury_flow_policy[MERCURY_FLOW_ATTR_MAX + 1] = {
	[MERCURY_FLOW_ATTR_PAD]		= { .type = NLA_REJECT },
	[MERCURY_FLOW_ATTR_COOKIE]	= NLA_POLICY_MIN(NLA_U64, 1),
	[MERCURY_FLOW_ATTR_FAMILY]	= NLA_POLICY_RANGE(NLA_U8, AF_INET, AF_INET6),
	[MERCURY_FLOW_ATTR_SADDR]	= NLA_POLICY_VALIDATE_FN(NLA_BINARY, mercury_check_addr, 16),
	[MERCURY_FLOW_ATTR_DADDR]	= NLA_POLICY_VALIDATE_FN(NLA_BINARY, mercury_check_addr, 16),
	[MERCURY_FLOW_ATTR_SPORT]	= NLA_POLICY_MIN(NLA_U16, 1),
	[MERCURY_FLOW_ATTR_DPORT]	= NLA_POLICY_MIN(NLA_U16, 1),
};

static const struct nla_policy mercury_param_policy[MERCURY_PARAM_MAX + 1] = {
	[MERCURY_PARAM_CWND_FLOOR]	= NLA_POLICY_RANGE(NLA_U32, MERCURY_CWND_FLOOR_MIN,
							   MERCURY_CWND_FLOOR_MAX),
	[MERCURY_PARAM_DELAY_THRESH_US]	= NLA_POLICY_FULL_RANGE(NLA_U32, &mercury_thresh_range),
	[MERCURY_PARAM_ENTRY_TTL_MS]	= NLA_POLICY_FULL_RANGE(NLA_U32, &mercury_ttl_range),
	[MERCURY_PARAM_MAX_ENTRIES]	= NLA_POLICY_FULL_RANGE(NLA_U32, &mercury_entries_range),
	[MERCURY_PARAM_MAX_HOLD_MS]	= NLA_POLICY_FULL_RANGE(NLA_U32, &mercury_hold_range),
	[MERCURY_PARAM_DEBUG]		= NLA_POLICY_MAX(NLA_U8, 1),
};

static const struct nla_policy mercury_policy[MERCURY_ATTR_MAX + 1] = {
	[MERCURY_ATTR_PAD]		= { .type = NLA_REJECT },
	[MERCURY_ATTR_TAG]		= NLA_POLICY_MIN(NLA_U32, MERCURY_TAG_MIN),
	[MERCURY_ATTR_RANK]		= NLA_POLICY_MAX(NLA_U8, MERCURY_NUM_RANKS - 1),
	[MERCURY_ATTR_WEIGHT]		= NLA_POLICY_RANGE(NLA_U16, MERCURY_WEIGHT_MIN,
							   MERCURY_WEIGHT_MAX),
	[MERCURY_ATTR_TTL_MS]		= NLA_POLICY_FULL_RANGE(NLA_U32, &mercury_ttl_range),
	[MERCURY_ATTR_EXPIRES_MS]	= { .type = NLA_REJECT },
	[MERCURY_ATTR_FLOW]		= NLA_POLICY_NESTED(mercury_flow_policy),
	[MERCURY_ATTR_PARAMS]		= NLA_POLICY_NESTED(mercury_param_policy),
	[MERCURY_ATTR_STATS]		= { .type = NLA_REJECT },
	[MERCURY_ATTR_JOB]		= NLA_POLICY_MAX(NLA_U8, MERCURY_NUM_JOBS - 1),
};

static struct genl_family mercury_family;

static struct mercury_net *mercury_info_net(struct genl_info *info)
{
	return mercury_pernet(genl_info_net(info));
}

/* Address attribute of @family's length into a v4-mapped/IPv6 address. */
static int mercury_parse_addr(const struct nlattr *attr, u8 family,
			      struct in6_addr *addr,
			      struct netlink_ext_ack *extack)
{
	if (family == AF_INET && nla_len(attr) == 4) {
		ipv6_addr_set_v4mapped(nla_get_in_addr(attr), addr);
		return 0;
	}
	if (family == AF_INET6 && nla_len(attr) == 16) {
		*addr = nla_get_in6_addr(attr);
		if (ipv6_addr_v4mapped(addr)) {
			NL_SET_ERR_MSG_ATTR(extack, attr,
					    "use FAMILY AF_INET for IPv4 flows");
			return -EINVAL;
		}
		return 0;
	}
	NL_SET_ERR_MSG_ATTR(extack, attr,
			    "address length does not match FAMILY (4 for AF_INET, 16 for AF_INET6)");
	return -EINVAL;
}

static int mercury_parse_flow(struct genl_info *info, struct mercury_key *key)
{
	struct netlink_ext_ack *extack = info->extack;
	struct nlattr *tb[MERCURY_FLOW_ATTR_MAX + 1];
	static const int tuple[] = {
		MERCURY_FLOW_ATTR_FAMILY, MERCURY_FLOW_ATTR_SADDR,
		MERCURY_FLOW_ATTR_DADDR, MERCURY_FLOW_ATTR_SPORT,
		MERCURY_FLOW_ATTR_DPORT,
	};
	int i, n_tuple = 0, err;

	if (GENL_REQ_ATTR_CHECK(info, MERCURY_ATTR_FLOW))
		return -EINVAL;
	err = nla_parse_nested(tb, MERCURY_FLOW_ATTR_MAX,
			       info->attrs[MERCURY_ATTR_FLOW],
			       mercury_flow_policy, extack);
	if (err)
		return err;

	memset(key, 0, sizeof(*key));
	for (i = 0; i < ARRAY_SIZE(tuple); i++)
		n_tuple += !!tb[tuple[i]];

	if (tb[MERCURY_FLOW_ATTR_COOKIE]) {
		if (n_tuple) {
			NL_SET_ERR_MSG_ATTR(extack, info->attrs[MERCURY_ATTR_FLOW],
					    "name a flow by COOKIE or by address tuple, not both");
			return -EINVAL;
		}
		key->kind = MERCURY_KEY_COOKIE;
		key->cookie = nla_get_u64(tb[MERCURY_FLOW_ATTR_COOKIE]);
		return 0;
	}
	if (n_tuple != ARRAY_SIZE(tuple)) {
		NL_SET_ERR_MSG_ATTR(extack, info->attrs[MERCURY_ATTR_FLOW],
				    "flow needs COOKIE or all of FAMILY, SADDR, DADDR, SPORT, DPORT");
		return -EINVAL;
	}
	key->kind = MERCURY_KEY_TUPLE;
	key->family = nla_get_u8(tb[MERCURY_FLOW_ATTR_FAMILY]);
	if (key->family != AF_INET && key->family != AF_INET6) {
		NL_SET_ERR_MSG_ATTR(extack, tb[MERCURY_FLOW_ATTR_FAMILY],
				    "FAMILY must be AF_INET or AF_INET6");
		return -EINVAL;
	}
	err = mercury_parse_addr(tb[MERCURY_FLOW_ATTR_SADDR], key->family,
				 &key->saddr, extack);
	if (!err)
		err = mercury_parse_addr(tb[MERCURY_FLOW_ATTR_DADDR],
					 key->family, &key->daddr, extack);
	key->sport = nla_get_u16(tb[MERCURY_FLOW_ATTR_SPORT]);
	key->dport = nla_get_u16(tb[MERCURY_FLOW_ATTR_DPORT]);
	return err;
}

static int mercury_parse_tag(struct genl_info *info, struct mercury_key *key)
{
	if (GENL_REQ_ATTR_CHECK(info, MERCURY_ATTR_TAG))
		return -EINVAL;
	memset(key, 0, sizeof(*key));
	key->kind = MERCURY_KEY_TAG;
	key->tag = nla_get_u32(info->attrs[MERCURY_ATTR_TAG]);
	return 0;
}

static int mercury_do_set(struct genl_info *info, const struct mercury_key *key)
{
	struct mercury_net *mn = mercury_info_net(info);
	u16 weight = MERCURY_WEIGHT_UNIT;
	u8 job = MERCURY_JOB_NONE;
	u32 ttl_ms;

	if (GENL_REQ_ATTR_CHECK(info, MERCURY_ATTR_RANK))
		return -EINVAL;
	if (info->attrs[MERCURY_ATTR_WEIGHT])
		weight = nla_get_u16(info->attrs[MERCURY_ATTR_WEIGHT]);
	if (info->attrs[MERCURY_ATTR_JOB])
		job = nla_get_u8(info->attrs[MERCURY_ATTR_JOB]);
	ttl_ms = info->attrs[MERCURY_ATTR_TTL_MS] ?
		 nla_get_u32(info->attrs[MERCURY_ATTR_TTL_MS]) :
		 READ_ONCE(mn->params.entry_ttl_ms);
	return mercury_entry_set(mn, key, nla_get_u8(info->attrs[MERCURY_ATTR_RANK]),
				 weight, job, ttl_ms, info->extack);
}

static int mercury_tag_set(struct sk_buff *skb, struct genl_info *info)
{
	struct mercury_key key;

	return mercury_parse_tag(info, &key) ?: mercury_do_set(info, &key);
}

static int mercury_flow_set(struct sk_buff *skb, struct genl_info *info)
{
	struct mercury_key key;

	return mercury_parse_flow(info, &key) ?: mercury_do_set(info, &key);
}

static int mercury_do_del(struct genl_info *info, const struct mercury_key *key)
{
	int err = mercury_entry_del(mercury_info_net(info), key);

	if (err == -ENOENT)
		GENL_SET_ERR_MSG(info, "no such entry");
	return err;
}

static int mercury_tag_del(struct sk_buff *skb, struct genl_info *info)
{
	struct mercury_key key;

	return mercury_parse_tag(info, &key) ?: mercury_do_del(info, &key);
}

static int mercury_flow_del(struct sk_buff *skb, struct genl_info *info)
{
	struct mercury_key key;

	return mercury_parse_flow(info, &key) ?: mercury_do_del(info, &key);
}

static int mercury_flush_doit(struct sk_buff *skb, struct genl_info *info)
{
	mercury_flush(mercury_info_net(info));
	return 0;
}

static int mercury_put_addr(struct sk_buff *skb, int type, u8 family,
			    const struct in6_addr *addr)
{
	if (family == AF_INET)
		return nla_put_in_addr(skb, type, addr->s6_addr32[3]);
	return nla_put_in6_addr(skb, type, addr);
}

static int mercury_put_key(struct sk_buff *skb, const struct mercury_key *key)
{
	struct nlattr *nest;

	if (key->kind == MERCURY_KEY_TAG)
		return nla_put_u32(skb, MERCURY_ATTR_TAG, key->tag);

	nest = nla_nest_start(skb, MERCURY_ATTR_FLOW);
	if (!nest)
		return -EMSGSIZE;
	if (key->kind == MERCURY_KEY_COOKIE) {
		if (nla_put_u64_64bit(skb, MERCURY_FLOW_ATTR_COOKIE, key->cookie,
				      MERCURY_FLOW_ATTR_PAD))
			goto cancel;
	} else if (nla_put_u8(skb, MERCURY_FLOW_ATTR_FAMILY, key->family) ||
		   mercury_put_addr(skb, MERCURY_FLOW_ATTR_SADDR, key->family,
				    &key->saddr) ||
		   mercury_put_addr(skb, MERCURY_FLOW_ATTR_DADDR, key->family,
				    &key->daddr) ||
		   nla_put_u16(skb, MERCURY_FLOW_ATTR_SPORT, key->sport) ||
		   nla_put_u16(skb, MERCURY_FLOW_ATTR_DPORT, key->dport)) {
		goto cancel;
	}
	nla_nest_end(skb, nest);
	return 0;
cancel:
	nla_nest_cancel(skb, nest);
	return -EMSGSIZE;
}

static int mercury_fill_entry(struct sk_buff *skb, struct netlink_callback *cb,
			      u8 cmd, const struct mercury_entry *e)
{
	unsigned long expires = READ_ONCE(e->expires);
	void *hdr;

	hdr = genlmsg_put(skb, NETLINK_CB(cb->skb).portid, cb->nlh->nlmsg_seq,
			  &mercury_family, NLM_F_MULTI, cmd);
	if (!hdr)
		return -EMSGSIZE;
	if (mercury_put_key(skb, &e->key) ||
	    nla_put_u8(skb, MERCURY_ATTR_RANK, READ_ONCE(e->rank)) ||
	    nla_put_u16(skb, MERCURY_ATTR_WEIGHT, READ_ONCE(e->weight)) ||
	    nla_put_u8(skb, MERCURY_ATTR_JOB, READ_ONCE(e->job)) ||
	    nla_put_u32(skb, MERCURY_ATTR_EXPIRES_MS,
			jiffies_to_msecs(expires - jiffies))) {
		genlmsg_cancel(skb, hdr);
		return -EMSGSIZE;
	}
	genlmsg_end(skb, hdr);
	return 0;
}

/* Dump live entries of one kind; cb->args[0] counts what was already sent. */
static int mercury_dump_kind(struct sk_buff *skb, struct netlink_callback *cb,
			     bool tags, u8 cmd)
{
	struct mercury_net *mn = mercury_pernet(sock_net(skb->sk));
	long skip = cb->args[0], idx = 0;
	struct mercury_buckets *b;
	struct mercury_entry *e;
	int bkt;

	rcu_read_lock();
	b = rcu_dereference(mn->buckets);
	for (bkt = 0; b && bkt < ARRAY_SIZE(b->head); bkt++) {
		hlist_for_each_entry_rcu(e, &b->head[bkt], node) {
			if ((e->key.kind == MERCURY_KEY_TAG) != tags ||
			    !time_before(jiffies, READ_ONCE(e->expires)))
				continue;
			if (idx++ < skip)
				continue;
			if (mercury_fill_entry(skb, cb, cmd, e)) {
				idx--;
				goto out;
			}
		}
	}
out:
	rcu_read_unlock();
	cb->args[0] = idx;
	return skb->len;
}

static int mercury_tag_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	return mercury_dump_kind(skb, cb, true, MERCURY_CMD_TAG_GET);
}

static int mercury_flow_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	return mercury_dump_kind(skb, cb, false, MERCURY_CMD_FLOW_GET);
}

static int mercury_reply(struct genl_info *info, u8 cmd,
			 int (*fill)(struct sk_buff *, struct mercury_net *),
			 struct mercury_net *mn)
{
	struct sk_buff *msg;
	void *hdr;
	int err;

	msg = genlmsg_new(NLMSG_DEFAULT_SIZE, GFP_KERNEL);
	if (!msg)
		return -ENOMEM;
	hdr = genlmsg_put_reply(msg, info, &mercury_family, 0, cmd);
	if (!hdr)
		goto nospace;
	err = fill(msg, mn);
	if (err)
		goto nospace;
	genlmsg_end(msg, hdr);
	return genlmsg_reply(msg, info);
nospace:
	nlmsg_free(msg);
	return -EMSGSIZE;
}

static int mercury_fill_params(struct sk_buff *msg, struct mercury_net *mn)
{
	const struct mercury_params *p = &mn->params;
	struct nlattr *nest = nla_nest_start(msg, MERCURY_ATTR_PARAMS);

	if (!nest ||
	    nla_put_u32(msg, MERCURY_PARAM_CWND_FLOOR, READ_ONCE(p->cwnd_floor)) ||
	    nla_put_u32(msg, MERCURY_PARAM_DELAY_THRESH_US,
			READ_ONCE(p->delay_thresh_us)) ||
	    nla_put_u32(msg, MERCURY_PARAM_ENTRY_TTL_MS, READ_ONCE(p->entry_ttl_ms)) ||
	    nla_put_u32(msg, MERCURY_PARAM_MAX_ENTRIES, READ_ONCE(p->max_entries)) ||
	    nla_put_u32(msg, MERCURY_PARAM_MAX_HOLD_MS, READ_ONCE(p->max_hold_ms)) ||
	    nla_put_u8(msg, MERCURY_PARAM_DEBUG, READ_ONCE(p->debug)))
		return -EMSGSIZE;
	nla_nest_end(msg, nest);
	return 0;
}

static int mercury_params_get(struct sk_buff *skb, struct genl_info *info)
{
	return mercury_reply(info, MERCURY_CMD_PARAMS_GET, mercury_fill_params,
			     mercury_info_net(info));
}

static int mercury_params_set(struct sk_buff *skb, struct genl_info *info)
{
	struct mercury_net *mn = mercury_info_net(info);
	struct nlattr *tb[MERCURY_PARAM_MAX + 1];
	struct mercury_params *p = &mn->params;
	int err;

	if (GENL_REQ_ATTR_CHECK(info, MERCURY_ATTR_PARAMS))
		return -EINVAL;
	/* Policy checks every value first: all are applied or none. */
	err = nla_parse_nested(tb, MERCURY_PARAM_MAX, info->attrs[MERCURY_ATTR_PARAMS],
			       mercury_param_policy, info->extack);
	if (err)
		return err;
	if (tb[MERCURY_PARAM_CWND_FLOOR])
		WRITE_ONCE(p->cwnd_floor, nla_get_u32(tb[MERCURY_PARAM_CWND_FLOOR]));
	if (tb[MERCURY_PARAM_DELAY_THRESH_US])
		WRITE_ONCE(p->delay_thresh_us,
			   nla_get_u32(tb[MERCURY_PARAM_DELAY_THRESH_US]));
	if (tb[MERCURY_PARAM_ENTRY_TTL_MS])
		WRITE_ONCE(p->entry_ttl_ms, nla_get_u32(tb[MERCURY_PARAM_ENTRY_TTL_MS]));
	if (tb[MERCURY_PARAM_MAX_ENTRIES])
		WRITE_ONCE(p->max_entries, nla_get_u32(tb[MERCURY_PARAM_MAX_ENTRIES]));
	if (tb[MERCURY_PARAM_MAX_HOLD_MS])
		WRITE_ONCE(p->max_hold_ms, nla_get_u32(tb[MERCURY_PARAM_MAX_HOLD_MS]));
	if (tb[MERCURY_PARAM_DEBUG])
		WRITE_ONCE(p->debug, nla_get_u8(tb[MERCURY_PARAM_DEBUG]));
	return 0;
}

static int mercury_fill_stats(struct sk_buff *msg, struct mercury_net *mn)
{
	static const u8 map[MERCURY_CNT_MAX] = {
#define MERCURY_STAT_OF(NAME, name) [MERCURY_CNT_##NAME] = MERCURY_STAT_##NAME,
		MERCURY_EVENTS(MERCURY_STAT_OF)
#undef MERCURY_STAT_OF
		[MERCURY_CNT_EXPIRED] = MERCURY_STAT_EXPIRED,
	};
	struct nlattr *nest = nla_nest_start(msg, MERCURY_ATTR_STATS);
	int i;

	if (!nest)
		return -EMSGSIZE;
	for (i = 0; i < MERCURY_CNT_MAX; i++)
		if (nla_put_u64_64bit(msg, map[i], atomic64_read(&mn->counters[i]),
				      MERCURY_STAT_PAD))
			return -EMSGSIZE;
	if (nla_put_u64_64bit(msg, MERCURY_STAT_TAG_ENTRIES, READ_ONCE(mn->n_tags),
			      MERCURY_STAT_PAD) ||
	    nla_put_u64_64bit(msg, MERCURY_STAT_FLOW_ENTRIES, READ_ONCE(mn->n_flows),
			      MERCURY_STAT_PAD) ||
	    nla_put_u64_64bit(msg, MERCURY_STAT_TABLE_GEN, READ_ONCE(mn->gen),
			      MERCURY_STAT_PAD) ||
	    nla_put_u64_64bit(msg, MERCURY_STAT_GLOBAL_ENTRIES,
			      mercury_global_entries(), MERCURY_STAT_PAD))
		return -EMSGSIZE;
	nla_nest_end(msg, nest);
	return 0;
}

static int mercury_stats_get(struct sk_buff *skb, struct genl_info *info)
{
	return mercury_reply(info, MERCURY_CMD_STATS_GET, mercury_fill_stats,
			     mercury_info_net(info));
}

static const struct genl_ops mercury_ops[] = {
	{ .cmd = MERCURY_CMD_TAG_SET,	 .doit = mercury_tag_set,
	  .flags = GENL_UNS_ADMIN_PERM },
	{ .cmd = MERCURY_CMD_TAG_DEL,	 .doit = mercury_tag_del,
	  .flags = GENL_UNS_ADMIN_PERM },
	{ .cmd = MERCURY_CMD_TAG_GET,	 .dumpit = mercury_tag_dump },
	{ .cmd = MERCURY_CMD_FLOW_SET,	 .doit = mercury_flow_set,
	  .flags = GENL_UNS_ADMIN_PERM },
	{ .cmd = MERCURY_CMD_FLOW_DEL,	 .doit = mercury_flow_del,
	  .flags = GENL_UNS_ADMIN_PERM },
	{ .cmd = MERCURY_CMD_FLOW_GET,	 .dumpit = mercury_flow_dump },
	{ .cmd = MERCURY_CMD_FLUSH,	 .doit = mercury_flush_doit,
	  .flags = GENL_UNS_ADMIN_PERM },
	{ .cmd = MERCURY_CMD_PARAMS_GET, .doit = mercury_params_get },
	{ .cmd = MERCURY_CMD_PARAMS_SET, .doit = mercury_params_set,
	  .flags = GENL_UNS_ADMIN_PERM },
	{ .cmd = MERCURY_CMD_STATS_GET,	 .doit = mercury_stats_get },
};

static struct genl_family mercury_family __ro_after_init = {
	.name		= MERCURY_GENL_NAME,
	.version	= MERCURY_GENL_VERSION,
	.maxattr	= MERCURY_ATTR_MAX,
	.policy		= mercury_policy,
	.netnsok	= true,
	.module		= THIS_MODULE,
	.ops		= mercury_ops,
	.n_ops		= ARRAY_SIZE(mercury_ops),
};

int mercury_netlink_init(void)
{
	return genl_register_family(&mercury_family);
}

void mercury_netlink_exit(void)
{
	genl_unregister_family(&mercury_family);
}
