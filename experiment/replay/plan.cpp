// SPDX-License-Identifier: GPL-2.0
#include "replay/plan.hpp"

#include <algorithm>
#include <stdexcept>

#include "mercury/uapi.h"

namespace mercury::replay {

using experiment::load_model;
using experiment::place;
using experiment::place_balanced;

Mode parse_mode(const std::string& m)
{
    if (m == "fifo") return {false, false, false};
    if (m == "bytescheduler") return {false, false, true};
    if (m == "mercury") return {true, true, false};
    if (m == "mercury-noprio") return {false, true, false};
    if (m == "prio-only") return {true, false, false};
    throw std::runtime_error("unknown mode '" + m + "' (fifo, bytescheduler, mercury, mercury-noprio, prio-only)");
}

Plan::Plan(const Options& o)
{
    partition_chunks = static_cast<uint32_t>(std::max<uint64_t>(1, (o.partition_bytes + kChunk - 1) / kChunk));
    model = load_model(o.profile);
    placement = o.placement == "balanced" ? place_balanced(model, o.servers, o.byte_divisor)
                                          : place(model, o.servers, o.byte_divisor);
    for (const auto& s : placement.shards)
        chunks.push_back(static_cast<uint32_t>((s.bytes + kChunk - 1) / kChunk));
    mode = parse_mode(o.mode_name);
    cc = !o.cc.empty() ? o.cc : mode.priority ? "mercury" : "cubic";
    job = o.job.empty() ? model.name : o.job;
    keys_of_shard.resize(placement.shards.size());
    keys_of_server.resize(o.servers);
    for (uint32_t s = 0; s < placement.shards.size(); ++s) {
        const uint32_t step = mode.partitioned ? partition_chunks : std::max<uint32_t>(chunks[s], 1);
        for (uint32_t first = 0; first < chunks[s]; first += step) {
            Key k{s, placement.shards[s].server, 0, first, std::min(step, chunks[s] - first), 0};
            for (uint32_t c = first; c < first + k.chunks; ++c)
                k.elems += chunk_elems(s, c);
            k.id = static_cast<uint32_t>(keys_of_server.at(k.server).size());
            keys_of_server[k.server].push_back(static_cast<uint32_t>(keys.size()));
            keys_of_shard[s].push_back(static_cast<uint32_t>(keys.size()));
            keys.push_back(k);
        }
    }
    assign_ranks(std::vector<uint8_t>(model.layers.size(), 0));
}

void Plan::assign_ranks(const std::vector<uint8_t>& layer_rank)
{
    rank_of_tensor.clear();
    layer_of_rank.assign(MERCURY_NUM_RANKS, UINT32_MAX);
    for (const auto& tensor : placement.tensors) {
        const uint8_t r = layer_rank.at(tensor.layer);
        rank_of_tensor.push_back(r);
        if (layer_of_rank[r] == UINT32_MAX)
            layer_of_rank[r] = tensor.layer;
    }
    // Priority modes: one lane per rank that carries tensors; else one lane.
    lanes.assign(mode.priority ? MERCURY_NUM_RANKS : 1, !mode.priority);
    if (mode.priority)
        for (uint8_t r : rank_of_tensor)
            lanes[r] = true;
}

}  // namespace mercury::replay
