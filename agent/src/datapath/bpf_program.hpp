// SPDX-License-Identifier: GPL-2.0
// Loads the BPF datapath (kmod/bpf/tcp_mercury.bpf.c) into the kernel,
// registers it as the congestion control "mercury" and pins its maps for
// BpfMaps, taking over the maps an earlier loader pinned. Destroying it
// unregisters the CC but keeps the pins: sockets already using the program
// keep it (and the maps), new ones can no longer select it, and the next
// loader carries on with the same entries and sockets.
#pragma once

#include <memory>
#include <vector>

#include "datapath/bpf_maps.hpp"

struct tcp_mercury;   // the bpftool skeleton
struct bpf_link;
struct bpf_map;

namespace mercury {

class BpfProgram {
public:
    // Clear errors for a kernel without BTF or struct_ops (-EOPNOTSUPP) and
    // for a CC of that name already registered (-EEXIST).
    static Status load(std::unique_ptr<BpfProgram>& out);

    ~BpfProgram();
    BpfProgram(const BpfProgram&) = delete;
    BpfProgram& operator=(const BpfProgram&) = delete;

    // Registered through a BPF link (kernel >= 6.4): unregistered by the
    // kernel even if this process dies. Otherwise only our destructor does.
    bool link_mode() const { return link_fd_.get() >= 0; }
    // The maps an earlier loader pinned were taken over.
    bool reused_pins() const { return reused_; }
    // Pins of an incompatible layout (another version) were replaced.
    bool discarded_pins() const { return discarded_; }

private:
    struct SkeletonDeleter { void operator()(tcp_mercury* skel) const; };
    struct LinkDeleter { void operator()(bpf_link* link) const; };

    BpfProgram() = default;
    Status open_and_load(bool reuse_pins);
    Status attach();
    std::vector<bpf_map*> data_maps() const;
    static bool pins_present();
    static void unpin();

    std::unique_ptr<tcp_mercury, SkeletonDeleter> skel_;
    std::unique_ptr<bpf_link, LinkDeleter> map_link_;   // libbpf's own: map update / delete
    UniqueFd link_fd_;                                   // the kernel's struct_ops link
    bool reused_ = false;
    bool discarded_ = false;
};

}  // namespace mercury
