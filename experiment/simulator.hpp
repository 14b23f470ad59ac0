// SPDX-License-Identifier: GPL-2.0
// An achievable schedule: parameter-server training on the emulated topology
// as a discrete-event simulation at chunk granularity, every step of which a
// real system could carry out. Every host has one full-duplex link of
// `link_bytes_per_s`; a chunk (payload, `header_bytes`, times
// `wire_per_payload` for framing) crosses the sender's uplink, then the
// receiver's downlink (store-and-forward per chunk, pipelined over chunks).
//
// How a link picks its next chunk:
// - `priority` without `layer_rank` (per layer): the most urgent chunk
//   (earliest iteration, then the layer the next forward pass needs first),
//   preempting at chunk boundaries; a tensor's shards and every worker's
//   copy go chunk by chunk across them (all servers at once).
// - otherwise connections (one per worker-server pair and lane) share the
//   link as TCP flows do: the most urgent class first (the layer's rank in
//   `layer_rank`, as mercury's lanes; one class without `priority`), its
//   connections in turn, each first come, first served.
// With `immediate`, servers return each chunk once every worker's copy
// arrived; otherwise once the whole shard did.
//
// Being achievable, its time is never below `mercury-replay bound`. It
// leaves out what TCP adds (slow start, queueing delay, losses, how fast a
// released flow takes the link back), so real runs may fall on either side.
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
    uint64_t header_bytes = 0;      // per chunk, on the wire
    double wire_per_payload = 1.0;  // framing: wire bytes per payload byte
    bool priority = true;
    // With priority: empty for per-layer priority, else each layer's rank.
    std::vector<uint8_t> layer_rank;
    bool immediate = true;
    uint32_t iterations = 8;
    uint32_t warmup = 2;
};

struct SimResult {
    double mean_iteration_s = 0;
    std::vector<double> iteration_s;
    // Per layer: how long worker 0's forward pass waited for that layer's
    // parameters, mean per iteration after warm-up.
    std::vector<double> forward_wait_s;
};

// @model: times in ms as replayed; @placement: wire bytes per shard.
SimResult simulate(const Model& model, const Placement& placement, const SimConfig& config);

}  // namespace mercury::experiment
