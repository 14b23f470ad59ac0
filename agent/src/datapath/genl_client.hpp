// SPDX-License-Identifier: GPL-2.0
// Client for tcp_mercury.ko's generic netlink family (include/mercury/uapi.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flow_key.hpp"

struct nl_sock;
struct nl_msg;

namespace mercury {

// Outcome of a request: 0 or a negative errno, plus the kernel's extack text.
struct Status {
    int error = 0;
    std::string message;

    explicit operator bool() const { return error == 0; }
    std::string describe() const;
};

struct TagEntry {
    uint32_t tag = 0;
    uint8_t rank = 0;
    uint16_t weight = 0;
    uint32_t expires_ms = 0;
};

struct FlowEntry {
    FlowKey key;
    uint8_t rank = 0;
    uint16_t weight = 0;
    uint32_t expires_ms = 0;
};

struct Priority {
    uint8_t rank = 0;
    std::optional<uint16_t> weight;   // kernel default: one Reno flow
    std::optional<uint32_t> ttl_ms;   // kernel default: entry_ttl_ms
};

// Per-netns parameters; unset fields are left alone by set_params().
struct Params {
    std::optional<uint32_t> cwnd_floor;
    std::optional<uint32_t> delay_thresh_us;
    std::optional<uint32_t> entry_ttl_ms;
    std::optional<uint32_t> max_entries;
    std::optional<uint32_t> max_hold_ms;
    std::optional<uint8_t> debug;
};

// Parameter and counter names as users type and see them.
const std::vector<std::string>& param_names();
Status set_param_by_name(Params& params, const std::string& name, uint64_t value);
std::map<std::string, uint64_t> params_as_map(const Params& params);

using Stats = std::map<std::string, uint64_t>;

class GenlClient {
public:
    // Opens a generic netlink socket in the caller's netns and resolves the
    // family. Fails with -ENOENT when tcp_mercury.ko is not loaded.
    static Status open(std::unique_ptr<GenlClient>& out);

    Status set_tag(uint32_t tag, const Priority& prio);
    Status del_tag(uint32_t tag);
    Status set_flow(const FlowKey& key, const Priority& prio);
    Status del_flow(const FlowKey& key);
    Status flush();
    Status dump_tags(std::vector<TagEntry>& out);
    Status dump_flows(std::vector<FlowEntry>& out);
    Status get_params(Params& out);
    Status set_params(const Params& params);
    Status get_stats(Stats& out);

    // Sends @cmd with @attrs copied verbatim as the attribute payload and the
    // given genl version. For negative tests of the kernel's validation.
    Status send_raw(uint8_t cmd, std::span<const uint8_t> attrs, uint8_t version);

    ~GenlClient();
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
};

}  // namespace mercury
