// SPDX-License-Identifier: GPL-2.0
// The ideal bound: parameter-server training on the emulated topology as a
// discrete-event simulation at chunk granularity (small chunks: a fluid
// model). Every host has one full-duplex link of `link_bytes_per_s`; a chunk
// crosses the sender's uplink, then the receiver's downlink. With
// `priority`, every link serves the most urgent chunk first (earliest
// iteration, then the layer the next forward pass needs first), with zero
// overhead; otherwise first come, first served. With `immediate`, servers
// return each chunk once every worker's copy arrived; otherwise once the
// whole shard did.
#pragma once

#include <cstdint>
#include <vector>

#include "model.hpp"

namespace mercury::experiment {

struct SimConfig {
    uint32_t workers = 4;
    uint32_t servers = 4;
    double link_bytes_per_s = 12.5e6;  // 100 Mbit/s
    uint64_t chunk_bytes = 16384;
    bool priority = true;
    bool immediate = true;
    uint32_t iterations = 8;
    uint32_t warmup = 2;
};

struct SimResult {
    double mean_iteration_s = 0;
    std::vector<double> iteration_s;
};

// @model: times in ms as replayed; @placement: wire bytes per shard.
SimResult simulate(const Model& model, const Placement& placement, const SimConfig& config);

}  // namespace mercury::experiment
