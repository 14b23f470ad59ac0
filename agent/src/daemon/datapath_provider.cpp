// SPDX-License-Identifier: GPL-2.0
#include "daemon/datapath_provider.hpp"

#include <cerrno>
#include <string>

#include "datapath/bpf_maps.hpp"
#include "datapath/genl_client.hpp"

namespace mercury {

Status DatapathProvider::open(std::unique_ptr<Datapath>& out)
{
    if (kind_ == DatapathKind::kBpf)
        return open_bpf(out);
    std::unique_ptr<GenlClient> nl;
    const Status s = GenlClient::open(nl);
    if (s) {
        out = std::move(nl);
        kind_ = DatapathKind::kKmod;   // auto chose: a module reload must not flip us to BPF
        return s;
    }
    if (kind_ == DatapathKind::kKmod)
        return s;
    // auto: the module is preferred but absent (it autoloads when it can).
    const Status b = open_bpf(out);
    if (!b)
        return Status{b.error, "tcp_mercury is not loaded, and the BPF datapath is unavailable: " + b.message};
    kind_ = DatapathKind::kBpf;
    return b;
}

Status DatapathProvider::open_bpf(std::unique_ptr<Datapath>& out)
{
    // Another mercuryd on this host may have loaded it; share it then.
    if (!program_ && !bpf_datapath_running()) {
        const Status s = BpfProgram::load(program_);
        if (!s)
            return s;
        log_.info("loaded the BPF datapath and registered congestion control '" MERCURY_CA_NAME "'",
                  {{"unregisters_on_crash", program_->link_mode() ? "yes" : "no (kernel < 6.4)"}});
        BpfMaps::open(collector_);
    }
    std::unique_ptr<BpfMaps> maps;
    const Status s = BpfMaps::open(maps);
    if (s)
        out = std::move(maps);
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
