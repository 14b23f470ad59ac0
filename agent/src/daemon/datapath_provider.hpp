// SPDX-License-Identifier: GPL-2.0
// How mercuryd reaches its datapath (--datapath=auto|kmod|bpf): opens the
// module's netlink family, or the BPF program's maps, loading and
// registering that program first when no mercuryd on this host has. auto
// settles on the first one it reaches and stays with it. The mercuryd that
// loaded the program keeps it registered while it runs, collects its
// expired entries, and unregisters it on exit.
#pragma once

#include <memory>

#include "common/log.hpp"
#include "datapath/bpf_maps.hpp"
#include "datapath/bpf_program.hpp"
#include "datapath/datapath.hpp"

namespace mercury {

class DatapathProvider {
public:
    DatapathProvider(DatapathKind kind, const Logger& log) : kind_(kind), log_(log) {}

    Status open(std::unique_ptr<Datapath>& out);
    // Periodic upkeep; only the loading mercuryd has any.
    void maintain();
    // Unregisters a BPF program this process loaded.
    void release();

private:
    Status load_bpf_if_absent();

    DatapathKind kind_;
    const Logger& log_;
    std::unique_ptr<BpfProgram> program_;
    std::unique_ptr<BpfMaps> collector_;   // the loaded program's maps, for expiry
};

}  // namespace mercury
