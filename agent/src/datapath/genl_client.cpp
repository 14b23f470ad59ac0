// SPDX-License-Identifier: GPL-2.0
#include "datapath/genl_client.hpp"

#include <linux/netlink.h>
#include <netlink/attr.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/family.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "datapath/sock_diag.hpp"
#include "mercury/uapi.h"

namespace mercury {

namespace {

struct StatField {
    const char* name;
    int attr;
};
// The shared events (uapi.h), then the module's gauges and expiries.
#define MERCURY_STAT_FIELD(NAME, name) {#name, MERCURY_STAT_##NAME},
constexpr auto kStatFields = std::to_array<StatField>({
    MERCURY_EVENTS(MERCURY_STAT_FIELD)
    {"tag_entries", MERCURY_STAT_TAG_ENTRIES},
    {"flow_entries", MERCURY_STAT_FLOW_ENTRIES},
    {"expired", MERCURY_STAT_EXPIRED},
    {"table_gen", MERCURY_STAT_TABLE_GEN},
    {"global_entries", MERCURY_STAT_GLOBAL_ENTRIES},
});
#undef MERCURY_STAT_FIELD

// What a request's callbacks collect.
struct Transaction {
    Status status;
    bool done = false;
};

int on_error(sockaddr_nl*, nlmsgerr* err, void* arg)
{
    auto* tx = static_cast<Transaction*>(arg);
    tx->status.error = err->error;
    tx->done = true;

    // Extended ACK: TLVs after the (possibly capped) echoed request.
    const auto* hdr = reinterpret_cast<const nlmsghdr*>(reinterpret_cast<const char*>(err) - NLMSG_HDRLEN);
    if (!(hdr->nlmsg_flags & NLM_F_ACK_TLVS))
        return NL_STOP;
    size_t offset = sizeof(*err);
    if (!(hdr->nlmsg_flags & NLM_F_CAPPED))
        offset += err->msg.nlmsg_len - NLMSG_HDRLEN;
    const int payload = static_cast<int>(hdr->nlmsg_len) - NLMSG_HDRLEN;
    if (offset >= static_cast<size_t>(payload))
        return NL_STOP;
    auto* tlvs = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(err) + offset);
    nlattr* tb[NLMSGERR_ATTR_MAX + 1] = {};
    if (nla_parse(tb, NLMSGERR_ATTR_MAX, tlvs, payload - static_cast<int>(offset), nullptr) != 0)
        return NL_STOP;
    if (tb[NLMSGERR_ATTR_MSG])
        tx->status.message = nla_get_string(tb[NLMSGERR_ATTR_MSG]);
    // Out-of-range values: the kernel echoes the attribute's policy; name its bounds.
    nlattr* pol[NL_POLICY_TYPE_ATTR_MAX + 1] = {};
    if (tb[NLMSGERR_ATTR_POLICY] && nla_parse_nested(pol, NL_POLICY_TYPE_ATTR_MAX, tb[NLMSGERR_ATTR_POLICY], nullptr) == 0 &&
        pol[NL_POLICY_TYPE_ATTR_MIN_VALUE_U] && pol[NL_POLICY_TYPE_ATTR_MAX_VALUE_U])
        tx->status.message += " (allowed " + std::to_string(nla_get_u64(pol[NL_POLICY_TYPE_ATTR_MIN_VALUE_U])) + ".." +
                              std::to_string(nla_get_u64(pol[NL_POLICY_TYPE_ATTR_MAX_VALUE_U])) + ")";
    return NL_STOP;
}

int on_ack(nl_msg*, void* arg)
{
    static_cast<Transaction*>(arg)->done = true;
    return NL_STOP;
}

nlattr** parse_reply(nl_msg* msg, nlattr** tb)
{
    auto* gnlh = static_cast<genlmsghdr*>(nlmsg_data(nlmsg_hdr(msg)));
    if (nla_parse(tb, MERCURY_ATTR_MAX, genlmsg_attrdata(gnlh, 0), genlmsg_attrlen(gnlh, 0), nullptr))
        return nullptr;
    return tb;
}

std::optional<FlowKey> parse_flow_key(nlattr* nest)
{
    nlattr* tb[MERCURY_FLOW_ATTR_MAX + 1] = {};
    if (nla_parse_nested(tb, MERCURY_FLOW_ATTR_MAX, nest, nullptr))
        return std::nullopt;
    if (tb[MERCURY_FLOW_ATTR_COOKIE])
        return FlowKey::by_cookie(nla_get_u64(tb[MERCURY_FLOW_ATTR_COOKIE]));
    if (!tb[MERCURY_FLOW_ATTR_FAMILY] || !tb[MERCURY_FLOW_ATTR_SADDR] || !tb[MERCURY_FLOW_ATTR_DADDR] ||
        !tb[MERCURY_FLOW_ATTR_SPORT] || !tb[MERCURY_FLOW_ATTR_DPORT])
        return std::nullopt;
    Endpoint local, remote;
    local.family = remote.family = nla_get_u8(tb[MERCURY_FLOW_ATTR_FAMILY]);
    const size_t len = local.addr_len();
    if (static_cast<size_t>(nla_len(tb[MERCURY_FLOW_ATTR_SADDR])) != len ||
        static_cast<size_t>(nla_len(tb[MERCURY_FLOW_ATTR_DADDR])) != len)
        return std::nullopt;
    std::memcpy(local.addr.data(), nla_data(tb[MERCURY_FLOW_ATTR_SADDR]), len);
    std::memcpy(remote.addr.data(), nla_data(tb[MERCURY_FLOW_ATTR_DADDR]), len);
    local.port = nla_get_u16(tb[MERCURY_FLOW_ATTR_SPORT]);
    remote.port = nla_get_u16(tb[MERCURY_FLOW_ATTR_DPORT]);
    return FlowKey::by_tuple(local, remote);
}

void fill_entry_common(nlattr** tb, uint8_t& rank, uint16_t& weight, uint8_t& job, uint32_t& expires_ms)
{
    if (tb[MERCURY_ATTR_JOB])
        job = nla_get_u8(tb[MERCURY_ATTR_JOB]);
    if (tb[MERCURY_ATTR_RANK])
        rank = nla_get_u8(tb[MERCURY_ATTR_RANK]);
    if (tb[MERCURY_ATTR_WEIGHT])
        weight = nla_get_u16(tb[MERCURY_ATTR_WEIGHT]);
    if (tb[MERCURY_ATTR_EXPIRES_MS])
        expires_ms = nla_get_u32(tb[MERCURY_ATTR_EXPIRES_MS]);
}

int collect_tag(nl_msg* msg, void* arg)
{
    nlattr* tb[MERCURY_ATTR_MAX + 1] = {};
    if (!parse_reply(msg, tb) || !tb[MERCURY_ATTR_TAG])
        return NL_SKIP;
    TagEntry e;
    e.tag = nla_get_u32(tb[MERCURY_ATTR_TAG]);
    fill_entry_common(tb, e.rank, e.weight, e.job, e.expires_ms);
    static_cast<std::vector<TagEntry>*>(arg)->push_back(e);
    return NL_OK;
}

int collect_flow(nl_msg* msg, void* arg)
{
    nlattr* tb[MERCURY_ATTR_MAX + 1] = {};
    if (!parse_reply(msg, tb) || !tb[MERCURY_ATTR_FLOW])
        return NL_SKIP;
    auto key = parse_flow_key(tb[MERCURY_ATTR_FLOW]);
    if (!key)
        return NL_SKIP;
    FlowEntry e;
    e.key = *key;
    fill_entry_common(tb, e.rank, e.weight, e.job, e.expires_ms);
    static_cast<std::vector<FlowEntry>*>(arg)->push_back(e);
    return NL_OK;
}

int collect_params(nl_msg* msg, void* arg)
{
    nlattr* tb[MERCURY_ATTR_MAX + 1] = {};
    nlattr* pb[MERCURY_PARAM_MAX + 1] = {};
    if (!parse_reply(msg, tb) || !tb[MERCURY_ATTR_PARAMS] ||
        nla_parse_nested(pb, MERCURY_PARAM_MAX, tb[MERCURY_ATTR_PARAMS], nullptr))
        return NL_SKIP;
    auto& params = *static_cast<Params*>(arg);
    for (const auto& f : param_fields()) {
        if (!pb[f.id])
            continue;
        if (f.is_u8)
            params.debug = nla_get_u8(pb[f.id]);
        else
            params.*param_member(f.id) = nla_get_u32(pb[f.id]);
    }
    return NL_OK;
}

int collect_stats(nl_msg* msg, void* arg)
{
    nlattr* tb[MERCURY_ATTR_MAX + 1] = {};
    nlattr* sb[MERCURY_STAT_MAX + 1] = {};
    if (!parse_reply(msg, tb) || !tb[MERCURY_ATTR_STATS] ||
        nla_parse_nested(sb, MERCURY_STAT_MAX, tb[MERCURY_ATTR_STATS], nullptr))
        return NL_SKIP;
    auto& stats = *static_cast<Stats*>(arg);
    for (const auto& f : kStatFields)
        if (sb[f.attr])
            stats[f.name] = nla_get_u64(sb[f.attr]);
    return NL_OK;
}

Status from_libnl(int nl_error, const char* what)
{
    // libnl reports its own codes; map the common ones back to errno.
    Status s;
    s.error = nl_error == -NLE_OBJ_NOTFOUND ? -ENOENT : nl_error == -NLE_PERM ? -EPERM : -EIO;
    s.message = std::string(what) + ": " + nl_geterror(nl_error);
    return s;
}

int put_flow_key(nl_msg* msg, const FlowKey& key)
{
    nlattr* nest = nla_nest_start(msg, MERCURY_ATTR_FLOW);
    if (!nest)
        return -1;
    int err = 0;
    if (key.cookie) {
        err = nla_put_u64(msg, MERCURY_FLOW_ATTR_COOKIE, *key.cookie);
    } else {
        err = nla_put_u8(msg, MERCURY_FLOW_ATTR_FAMILY, static_cast<uint8_t>(key.local.family));
        err = err ?: nla_put(msg, MERCURY_FLOW_ATTR_SADDR, static_cast<int>(key.local.addr_len()), key.local.addr.data());
        err = err ?: nla_put(msg, MERCURY_FLOW_ATTR_DADDR, static_cast<int>(key.remote.addr_len()), key.remote.addr.data());
        err = err ?: nla_put_u16(msg, MERCURY_FLOW_ATTR_SPORT, key.local.port);
        err = err ?: nla_put_u16(msg, MERCURY_FLOW_ATTR_DPORT, key.remote.port);
    }
    nla_nest_end(msg, nest);
    return err;
}

int put_priority(nl_msg* msg, const Priority& prio)
{
    int err = nla_put_u8(msg, MERCURY_ATTR_RANK, prio.rank);
    if (!err && prio.weight)
        err = nla_put_u16(msg, MERCURY_ATTR_WEIGHT, *prio.weight);
    if (!err && prio.ttl_ms)
        err = nla_put_u32(msg, MERCURY_ATTR_TTL_MS, *prio.ttl_ms);
    // Only when asked for: a version 1 module refuses the attribute.
    if (!err && prio.job != MERCURY_JOB_NONE)
        err = nla_put_u8(msg, MERCURY_ATTR_JOB, prio.job);
    return err;
}

Status too_big()
{
    return Status{-EMSGSIZE, "request does not fit a netlink message"};
}

}  // namespace

void GenlClient::SockDeleter::operator()(nl_sock* s) const
{
    nl_socket_free(s);
}

void GenlClient::MsgDeleter::operator()(nl_msg* m) const
{
    nlmsg_free(m);
}

GenlClient::~GenlClient() = default;

Status GenlClient::open(std::unique_ptr<GenlClient>& out)
{
    std::unique_ptr<GenlClient> client(new GenlClient());
    client->sock_.reset(nl_socket_alloc());
    if (!client->sock_)
        return Status{-ENOMEM, "cannot allocate a netlink socket"};
    if (int err = genl_connect(client->sock_.get()))
        return from_libnl(err, "cannot open a generic netlink socket");

    // Ask for extended ACKs (the kernel's reason for a rejection).
    const int one = 1;
    const int fd = nl_socket_get_fd(client->sock_.get());
    setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
    setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));

    client->family_ = genl_ctrl_resolve(client->sock_.get(), MERCURY_GENL_NAME);
    if (client->family_ < 0)
        return Status{-ENOENT, "generic netlink family '" MERCURY_GENL_NAME "' not found: is tcp_mercury loaded?"};
    // Which contract the loaded module speaks: an older one lacks jobs. A
    // second request: the by-name lookup above is what autoloads the module,
    // and libnl returns only the id from it; the family list has the version.
    nl_cache* raw_cache = nullptr;
    if (int err = genl_ctrl_alloc_cache(client->sock_.get(), &raw_cache))
        return from_libnl(err, "cannot list the generic netlink families");
    const std::unique_ptr<nl_cache, decltype(&nl_cache_free)> cache(raw_cache, &nl_cache_free);
    const std::unique_ptr<genl_family, decltype(&genl_family_put)> family(
        genl_ctrl_search_by_name(cache.get(), MERCURY_GENL_NAME), &genl_family_put);
    if (!family)
        return Status{-ENOENT, "generic netlink family '" MERCURY_GENL_NAME "' went away: was tcp_mercury unloaded?"};
    client->version_ = genl_family_get_version(family.get());
    out = std::move(client);
    return {};
}

GenlClient::MsgPtr GenlClient::new_request(uint8_t cmd, int flags, uint8_t version) const
{
    MsgPtr msg(nlmsg_alloc());
    if (msg && !genlmsg_put(msg.get(), NL_AUTO_PORT, NL_AUTO_SEQ, family_, 0, flags, cmd, version))
        msg.reset();
    return msg;
}

Status GenlClient::transact(MsgPtr msg, ReplyHandler on_reply, void* arg)
{
    if (!msg)
        return too_big();
    Transaction tx;
    std::unique_ptr<nl_cb, decltype(&nl_cb_put)> cb(nl_cb_alloc(NL_CB_DEFAULT), &nl_cb_put);
    if (!cb)
        return Status{-ENOMEM, "cannot allocate netlink callbacks"};
    nl_cb_err(cb.get(), NL_CB_CUSTOM, on_error, &tx);
    nl_cb_set(cb.get(), NL_CB_ACK, NL_CB_CUSTOM, on_ack, &tx);
    nl_cb_set(cb.get(), NL_CB_FINISH, NL_CB_CUSTOM, on_ack, &tx);
    if (on_reply)
        nl_cb_set(cb.get(), NL_CB_VALID, NL_CB_CUSTOM, on_reply, arg);

    int err = nl_send_auto(sock_.get(), msg.get());
    if (err < 0)
        return from_libnl(err, "cannot send to the kernel");
    while (!tx.done) {
        err = nl_recvmsgs(sock_.get(), cb.get());
        if (err < 0 && !tx.done)
            return from_libnl(err, "cannot read the kernel's answer");
    }
    return tx.status;
}

// The module reports each socket's rank, weight, tag and holds through
// get_info, in the DCTCP layout (include/mercury/uapi.h).
Status GenlClient::list_sockets(std::vector<SocketView>& out)
{
    std::vector<DiagSocket> sockets;
    if (Status s = diag_tcp_sockets(sockets); !s)
        return s;
    for (const auto& d : sockets) {
        if (d.cc != MERCURY_CA_NAME)
            continue;
        SocketView v = tcp_view(d);
        if (d.cc_info) {
            const uint16_t rank = d.cc_info->dctcp_ce_state & MERCURY_INFO_RANK;
            if (rank != MERCURY_RANK_NONE)
                v.rank = static_cast<uint8_t>(rank);
            v.held = d.cc_info->dctcp_ce_state & MERCURY_INFO_HELD;
            v.job = static_cast<uint8_t>((d.cc_info->dctcp_ce_state & MERCURY_INFO_JOB) >> MERCURY_INFO_JOB_SHIFT);
            v.weight = static_cast<uint16_t>(d.cc_info->dctcp_alpha);
            v.tag = d.cc_info->dctcp_ab_ecn;
            v.holds = d.cc_info->dctcp_ab_tot;
        }
        out.push_back(v);
    }
    return {};
}

Status GenlClient::set_tag(uint32_t tag, const Priority& prio)
{
    if (Status s = validate_tag(tag); !s)
        return s;
    auto msg = new_request(MERCURY_CMD_TAG_SET, 0, MERCURY_GENL_VERSION);
    if (!msg || nla_put_u32(msg.get(), MERCURY_ATTR_TAG, tag) || put_priority(msg.get(), prio))
        return too_big();
    return transact(std::move(msg), nullptr, nullptr);
}

Status GenlClient::del_tag(uint32_t tag)
{
    auto msg = new_request(MERCURY_CMD_TAG_DEL, 0, MERCURY_GENL_VERSION);
    if (!msg || nla_put_u32(msg.get(), MERCURY_ATTR_TAG, tag))
        return too_big();
    return transact(std::move(msg), nullptr, nullptr);
}

Status GenlClient::set_flow(const FlowKey& key, const Priority& prio)
{
    auto msg = new_request(MERCURY_CMD_FLOW_SET, 0, MERCURY_GENL_VERSION);
    if (!msg || put_flow_key(msg.get(), key) || put_priority(msg.get(), prio))
        return too_big();
    return transact(std::move(msg), nullptr, nullptr);
}

Status GenlClient::del_flow(const FlowKey& key)
{
    auto msg = new_request(MERCURY_CMD_FLOW_DEL, 0, MERCURY_GENL_VERSION);
    if (!msg || put_flow_key(msg.get(), key))
        return too_big();
    return transact(std::move(msg), nullptr, nullptr);
}

Status GenlClient::flush()
{
    return transact(new_request(MERCURY_CMD_FLUSH, 0, MERCURY_GENL_VERSION), nullptr, nullptr);
}

Status GenlClient::dump_tags(std::vector<TagEntry>& out)
{
    out.clear();
    return transact(new_request(MERCURY_CMD_TAG_GET, NLM_F_DUMP, MERCURY_GENL_VERSION), collect_tag, &out);
}

Status GenlClient::dump_flows(std::vector<FlowEntry>& out)
{
    out.clear();
    return transact(new_request(MERCURY_CMD_FLOW_GET, NLM_F_DUMP, MERCURY_GENL_VERSION), collect_flow, &out);
}

Status GenlClient::get_params(Params& out)
{
    out = {};
    return transact(new_request(MERCURY_CMD_PARAMS_GET, 0, MERCURY_GENL_VERSION), collect_params, &out);
}

Status GenlClient::set_params(const Params& params)
{
    auto msg = new_request(MERCURY_CMD_PARAMS_SET, 0, MERCURY_GENL_VERSION);
    if (!msg)
        return too_big();
    nlattr* nest = nla_nest_start(msg.get(), MERCURY_ATTR_PARAMS);
    if (!nest)
        return too_big();
    for (const auto& f : param_fields()) {
        int err = 0;
        if (f.is_u8 && params.debug)
            err = nla_put_u8(msg.get(), f.id, *params.debug);
        else if (!f.is_u8 && (params.*param_member(f.id)))
            err = nla_put_u32(msg.get(), f.id, *(params.*param_member(f.id)));
        if (err)
            return too_big();
    }
    nla_nest_end(msg.get(), nest);
    return transact(std::move(msg), nullptr, nullptr);
}

Status GenlClient::get_stats(Stats& out)
{
    out.clear();
    return transact(new_request(MERCURY_CMD_STATS_GET, 0, MERCURY_GENL_VERSION), collect_stats, &out);
}

Status GenlClient::send_raw(uint8_t cmd, std::span<const uint8_t> attrs, uint8_t version)
{
    auto msg = new_request(cmd, 0, version);
    if (!msg || nlmsg_append(msg.get(), const_cast<uint8_t*>(attrs.data()), attrs.size(), 0))
        return too_big();
    return transact(std::move(msg), nullptr, nullptr);
}

}  // namespace mercury
