// SPDX-License-Identifier: GPL-2.0
#include "datapath/sock_diag.hpp"

#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace mercury {

namespace {

struct Dump {
    std::vector<DiagSocket>* out;
    Status status;
};

Endpoint endpoint(int family, const __be32* addr, __be16 port)
{
    Endpoint e;
    e.family = family;
    std::memcpy(e.addr.data(), addr, family == AF_INET ? 4 : 16);
    e.port = ntohs(port);
    return e;
}

// The value of the one map asked for, in INET_DIAG_SK_BPF_STORAGES.
std::vector<uint8_t> storage_value(nlattr* storages)
{
    nlattr* storage = nullptr;
    int rem = 0;
    nla_for_each_nested(storage, storages, rem) {
        if (nla_type(storage) != SK_DIAG_BPF_STORAGE)
            continue;
        nlattr* tb[SK_DIAG_BPF_STORAGE_MAX + 1] = {};
        if (nla_parse_nested(tb, SK_DIAG_BPF_STORAGE_MAX, storage, nullptr) == 0 && tb[SK_DIAG_BPF_STORAGE_MAP_VALUE]) {
            const auto* v = static_cast<const uint8_t*>(nla_data(tb[SK_DIAG_BPF_STORAGE_MAP_VALUE]));
            return {v, v + nla_len(tb[SK_DIAG_BPF_STORAGE_MAP_VALUE])};
        }
    }
    return {};
}

int on_socket(nl_msg* msg, void* arg)
{
    auto* dump = static_cast<Dump*>(arg);
    nlmsghdr* hdr = nlmsg_hdr(msg);
    if (hdr->nlmsg_type != SOCK_DIAG_BY_FAMILY || nlmsg_datalen(hdr) < static_cast<int>(sizeof(inet_diag_msg)))
        return NL_SKIP;
    const auto* m = static_cast<const inet_diag_msg*>(nlmsg_data(hdr));
    nlattr* tb[INET_DIAG_MAX + 1] = {};
    if (nlmsg_parse(hdr, sizeof(*m), tb, INET_DIAG_MAX, nullptr) != 0)
        return NL_SKIP;
    DiagSocket s;
    s.local = endpoint(m->idiag_family, m->id.idiag_src, m->id.idiag_sport);
    s.remote = endpoint(m->idiag_family, m->id.idiag_dst, m->id.idiag_dport);
    s.cookie = uint64_t{m->id.idiag_cookie[0]} | uint64_t{m->id.idiag_cookie[1]} << 32;
    s.state = m->idiag_state;
    if (tb[INET_DIAG_CONG])
        s.cc = nla_get_string(tb[INET_DIAG_CONG]);
    if (tb[INET_DIAG_INFO])
        read_tcp_info(nla_data(tb[INET_DIAG_INFO]), static_cast<size_t>(nla_len(tb[INET_DIAG_INFO])), s);
    if (tb[INET_DIAG_DCTCPINFO] && nla_len(tb[INET_DIAG_DCTCPINFO]) >= static_cast<int>(sizeof(tcp_dctcp_info))) {
        tcp_dctcp_info info{};
        std::memcpy(&info, nla_data(tb[INET_DIAG_DCTCPINFO]), sizeof(info));
        s.cc_info = info;
    }
    if (tb[INET_DIAG_SK_BPF_STORAGES])
        s.storage = storage_value(tb[INET_DIAG_SK_BPF_STORAGES]);
    dump->out->push_back(std::move(s));
    return NL_OK;
}

int on_error(sockaddr_nl*, nlmsgerr* err, void* arg)
{
    auto* dump = static_cast<Dump*>(arg);
    dump->status = Status{err->error, "sock_diag refused the dump"};
    return NL_STOP;
}

struct SockDeleter {
    void operator()(nl_sock* s) const { nl_socket_free(s); }
};

Status dump_family(nl_sock* sock, int family, int storage_map_fd, std::vector<DiagSocket>& out)
{
    std::unique_ptr<nl_msg, decltype(&nlmsg_free)> msg(nlmsg_alloc_simple(SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP),
                                                       &nlmsg_free);
    inet_diag_req_v2 req{};
    req.sdiag_family = static_cast<uint8_t>(family);
    req.sdiag_protocol = IPPROTO_TCP;
    req.idiag_states = ~(1u << TCP_LISTEN);  // all but listeners
    // The CC's info is asked for with the Vegas bit: the DCTCP bit does not fit
    // in idiag_ext, and get_info (ss does the same) answers either.
    req.idiag_ext = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1)) | (1 << (INET_DIAG_VEGASINFO - 1));
    if (!msg || nlmsg_append(msg.get(), &req, sizeof(req), NLMSG_ALIGNTO) < 0)
        return Status{-ENOMEM, "cannot build a sock_diag request"};
    if (storage_map_fd >= 0) {
        nlattr* storages = nla_nest_start(msg.get(), INET_DIAG_REQ_SK_BPF_STORAGES);
        if (!storages || nla_put_u32(msg.get(), SK_DIAG_BPF_STORAGE_REQ_MAP_FD, static_cast<uint32_t>(storage_map_fd)) < 0)
            return Status{-ENOMEM, "cannot build a sock_diag request"};
        nla_nest_end(msg.get(), storages);
    }
    Dump dump{&out, {}};
    std::unique_ptr<nl_cb, decltype(&nl_cb_put)> cb(nl_cb_alloc(NL_CB_DEFAULT), &nl_cb_put);
    if (!cb)
        return Status{-ENOMEM, "cannot allocate netlink callbacks"};
    nl_cb_set(cb.get(), NL_CB_VALID, NL_CB_CUSTOM, on_socket, &dump);
    nl_cb_err(cb.get(), NL_CB_CUSTOM, on_error, &dump);
    if (const int err = nl_send_auto(sock, msg.get()); err < 0)
        return Status{-EIO, std::string("cannot send a sock_diag request: ") + nl_geterror(err)};
    if (const int err = nl_recvmsgs(sock, cb.get()); err < 0 && dump.status)
        return Status{-EIO, std::string("cannot read the sock_diag dump: ") + nl_geterror(err)};
    return dump.status;
}

}  // namespace

SocketView tcp_view(const DiagSocket& d)
{
    SocketView v;
    v.local = d.local;
    v.remote = d.remote;
    v.cookie = d.cookie;
    v.cwnd = d.cwnd;
    v.srtt_us = d.srtt_us;
    v.bytes_acked = d.bytes_acked;
    return v;
}

Status diag_tcp_sockets(std::vector<DiagSocket>& out, int storage_map_fd)
{
    std::unique_ptr<nl_sock, SockDeleter> sock(nl_socket_alloc());
    if (!sock)
        return Status{-ENOMEM, "cannot allocate a netlink socket"};
    nl_socket_disable_auto_ack(sock.get());
    if (const int err = nl_connect(sock.get(), NETLINK_SOCK_DIAG); err < 0)
        return Status{-EIO, std::string("cannot open sock_diag: ") + nl_geterror(err)};
    for (const int family : {AF_INET, AF_INET6})
        if (Status s = dump_family(sock.get(), family, storage_map_fd, out); !s)
            return s;
    return {};
}

}  // namespace mercury
