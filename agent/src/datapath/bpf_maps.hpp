// SPDX-License-Identifier: GPL-2.0
// The BPF datapath, from user space: the maps the running struct_ops program
// reads (include/mercury/bpf_maps.h), opened from where mercuryd pinned them.
// Every entry is keyed by the caller's netns, so each netns sees its own
// table, parameters and counters, as with the module.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <map>
#include <string_view>

#include "datapath/datapath.hpp"
#include "mercury/bpf_maps.h"
#include "common/unique_fd.hpp"

namespace mercury {

// Whether tcp_available_congestion_control lists @name (the list is global).
bool congestion_control_registered(std::string_view name);

// True when the program's maps are pinned and a CC named "mercury" is
// registered: a BPF datapath is running (loaded by some mercuryd).
bool bpf_datapath_running();

// Nanoseconds of CLOCK_MONOTONIC: the clock of bpf_ktime_get_ns().
uint64_t monotonic_ns();

class BpfMaps final : public Datapath {
public:
    // What one write did to a netns's table.
    struct TableChange {
        bool moved = true;     // false: only an entry's lifetime changed
        int64_t entries = 0;   // entries added (negative: removed)
    };

    // Fails with -ENOENT when no BPF datapath is running.
    static Status open(std::unique_ptr<BpfMaps>& out);

    std::string_view name() const override { return "bpf"; }
    bool supports_jobs() const override { return true; }
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

    // Deletes the entries of every netns that expired, frees the config slots
    // and the state of namespaces that no longer use them; returns how many
    // entries expired. Run by the mercuryd that loaded the program.
    size_t collect_expired();

    // What socket @fd (one of the caller's) resolved to, from the program's
    // socket storage; nullopt if it is not a BPF mercury socket.
    static std::optional<mercury_bpf_sock_state> socket_state(int fd);

private:
    BpfMaps() = default;
    mercury_bpf_config config() const;
    Status store_config(const mercury_bpf_config& cfg);
    Status change_table(const std::function<Status(const mercury_bpf_config&, TableChange&)>& write);
    bool unused(uint64_t netns) const;
    void reclaim_unused_netns();
    Status update_config(const std::function<void(mercury_bpf_config&)>& change);
    Status entry_for(const Priority& prio, mercury_bpf_entry& out) const;
    std::optional<mercury_bpf_flow_key> flow_key(const FlowKey& key) const;

    uint64_t netns_ = 0;   // cookie of the caller's netns
    UniqueFd tags_, flows_, config_, state_;
    // Sweeps (collect_expired calls) in a row that found a netns unused.
    static constexpr unsigned kReclaimSweeps = 50;
    std::map<uint64_t, unsigned> unused_sweeps_;
};

}  // namespace mercury
