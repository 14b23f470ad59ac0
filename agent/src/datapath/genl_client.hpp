// SPDX-License-Identifier: GPL-2.0
// The module's datapath: tcp_mercury.ko's generic netlink family
// (include/mercury/uapi.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "datapath/datapath.hpp"

struct nl_sock;
struct nl_msg;

namespace mercury {

class GenlClient final : public Datapath {
public:
    // Opens a generic netlink socket in the caller's netns and resolves the
    // family. Fails with -ENOENT when tcp_mercury.ko is not loaded.
    static Status open(std::unique_ptr<GenlClient>& out);

    std::string_view name() const override { return "kmod"; }
    bool supports_jobs() const override { return version_ >= 2; }

    Status set_tag(uint32_t tag, const Priority& prio) override;
    Status del_tag(uint32_t tag) override;
    Status set_flow(const FlowKey& key, const Priority& prio) override;
    Status del_flow(const FlowKey& key) override;
    Status flush() override;
    Status dump_tags(std::vector<TagEntry>& out) override;
    Status dump_flows(std::vector<FlowEntry>& out) override;
    Status get_params(Params& out) override;
    Status set_params(const Params& params) override;
    Status get_stats(Stats& out) override;
    Status list_sockets(std::vector<SocketView>& out) override;

    // Sends @cmd with @attrs copied verbatim as the attribute payload and the
    // given genl version. For negative tests of the kernel's validation.
    Status send_raw(uint8_t cmd, std::span<const uint8_t> attrs, uint8_t version);

    ~GenlClient() override;
    GenlClient(const GenlClient&) = delete;
    GenlClient& operator=(const GenlClient&) = delete;

private:
    struct SockDeleter { void operator()(nl_sock* s) const; };
    struct MsgDeleter { void operator()(nl_msg* m) const; };
    using MsgPtr = std::unique_ptr<nl_msg, MsgDeleter>;
    using ReplyHandler = int (*)(nl_msg*, void*);

    GenlClient() = default;
    MsgPtr new_request(uint8_t cmd, int flags, uint8_t version) const;
    Status transact(MsgPtr msg, ReplyHandler on_reply, void* arg);

    std::unique_ptr<nl_sock, SockDeleter> sock_;
    int family_ = -1;
    unsigned version_ = 0;
};

}  // namespace mercury
