// SPDX-License-Identifier: GPL-2.0
// What the agent and mercuryctl need from a Mercury datapath, whichever it
// is: tcp_mercury.ko over generic netlink (GenlClient) or the eBPF struct_ops
// program through its pinned maps (BpfMaps). Both act on the caller's netns.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flow_key.hpp"

namespace mercury {

// Outcome of a request: 0 or a negative errno, plus the datapath's reason.
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
    uint8_t job = 0;
    uint32_t expires_ms = 0;
};

struct FlowEntry {
    FlowKey key;
    uint8_t rank = 0;
    uint16_t weight = 0;
    uint8_t job = 0;
    uint32_t expires_ms = 0;
};

struct Priority {
    uint8_t rank = 0;
    std::optional<uint16_t> weight;   // datapath default: one Reno flow
    std::optional<uint32_t> ttl_ms;   // datapath default: entry_ttl_ms
    uint8_t job = 0;                  // 0: no job (netlink version 1 behaviour)
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

// Parameter names as users type and see them, each with its uapi id
// (enum mercury_param) and its field in Params.
struct ParamField {
    const char* name;
    int id;
    bool is_u8;   // Params::debug; every other field is a u32
};
std::span<const ParamField> param_fields();
std::optional<uint32_t> Params::* param_member(int id);
Status set_param_by_name(Params& params, const std::string& name, uint64_t value);
std::map<std::string, uint64_t> params_as_map(const Params& params);

// The limits of include/mercury/uapi.h, checked in user space: the module
// checks them again, the BPF maps cannot.
Status validate(const Priority& prio);
Status validate(const Params& params);
// Tags below MERCURY_TAG_MIN are SO_PRIORITY values any process may set.
Status validate_tag(uint32_t tag);

using Stats = std::map<std::string, uint64_t>;

// One mercury socket of the caller's netns: what the datapath made of it
// (rank, weight, hold) and what TCP reports (sock_diag).
struct SocketView {
    Endpoint local;
    Endpoint remote;
    uint64_t cookie = 0;
    std::optional<uint8_t> rank;   // nullopt: unranked
    uint16_t weight = 0;
    uint32_t tag = 0;              // its SO_PRIORITY
    uint8_t job = 0;               // the job its entry names (0: none)
    bool held = false;
    uint32_t holds = 0;            // times it was held
    uint32_t cwnd = 0;
    uint32_t srtt_us = 0;
    uint64_t bytes_acked = 0;
};

class Datapath {
public:
    virtual ~Datapath() = default;

    virtual std::string_view name() const = 0;   // "kmod" or "bpf"
    // Entries may name a job (Priority::job): a module of netlink version 2
    // or later, or the BPF datapath. Version 1 refuses the attribute.
    virtual bool supports_jobs() const = 0;
    virtual Status set_tag(uint32_t tag, const Priority& prio) = 0;
    virtual Status del_tag(uint32_t tag) = 0;
    virtual Status set_flow(const FlowKey& key, const Priority& prio) = 0;
    virtual Status del_flow(const FlowKey& key) = 0;
    virtual Status flush() = 0;
    virtual Status dump_tags(std::vector<TagEntry>& out) = 0;
    virtual Status dump_flows(std::vector<FlowEntry>& out) = 0;
    virtual Status get_params(Params& out) = 0;
    virtual Status set_params(const Params& params) = 0;
    virtual Status get_stats(Stats& out) = 0;
    // Every socket of the caller's netns running mercury.
    virtual Status list_sockets(std::vector<SocketView>& out) = 0;
};

enum class DatapathKind { kAuto, kKmod, kBpf };

std::optional<DatapathKind> parse_datapath_kind(std::string_view text);
std::string_view to_string(DatapathKind kind);

// Opens an already running datapath in the caller's netns. kAuto: the module
// if its family resolves (which also autoloads it), else the BPF maps.
Status open_datapath(DatapathKind kind, std::unique_ptr<Datapath>& out);

}  // namespace mercury
