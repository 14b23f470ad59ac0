// SPDX-License-Identifier: GPL-2.0
#include "daemon/datapath_provider.hpp"

#include <string>

namespace mercury {

Status DatapathProvider::open(std::unique_ptr<Datapath>& out)
{
    // The module first (it autoloads where it can): loading the BPF program
    // registers "mercury" and would keep the module from loading.
    if (kind_ == DatapathKind::kBpf)
        if (const Status loaded = load_bpf_if_absent(); !loaded)
            return loaded;
    Status s = open_datapath(kind_, out);
    if (!s && kind_ == DatapathKind::kAuto) {
        const Status loaded = load_bpf_if_absent();
        s = loaded ? open_datapath(DatapathKind::kBpf, out) : loaded;
    }
    // auto settles on what it found: a module reload must not flip us to BPF.
    if (s && kind_ == DatapathKind::kAuto)
        kind_ = out->name() == "kmod" ? DatapathKind::kKmod : DatapathKind::kBpf;
    return s;
}

// Another mercuryd on this host may have loaded it; share it then.
Status DatapathProvider::load_bpf_if_absent()
{
    if (program_ || bpf_datapath_running())
        return {};
    const Status s = BpfProgram::load(program_);
    if (!s)
        return s;
    log_.info("loaded the BPF datapath and registered congestion control '" MERCURY_CA_NAME "'",
              {{"unregisters_on_crash", program_->link_mode() ? "yes" : "no (kernel < 6.4)"},
               {"maps", program_->reused_pins() ? "taken over from the previous loader" : "new"}});
    if (program_->discarded_pins())
        log_.warn("replaced maps pinned by a loader of another version: their entries are gone",
                  {{"dir", MERCURY_BPF_PIN_DIR}});
    if (const Status c = BpfMaps::open(collector_); !c)
        log_.warn("cannot open the maps to collect expired entries", {{"reason", c.describe()}});
    return s;
}

void DatapathProvider::maintain()
{
    if (!collector_)
        return;
    if (const size_t n = collector_->collect_expired())
        log_.debug("collected expired BPF entries", {{"count", std::to_string(n)}});
}

void DatapathProvider::release()
{
    if (program_)
        log_.info("unregistering the BPF datapath; sockets using it keep it until they close");
    collector_.reset();
    program_.reset();
}

}  // namespace mercury
