// SPDX-License-Identifier: GPL-2.0
// What every role of mercury-replay derives from the same options: the
// model, its placement on the servers, the keys mercury-ps declares, the
// ranks and lanes. The roles, options and modes: replay/main.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model.hpp"
#include "ps/wire.hpp"

namespace mercury::replay {

using experiment::Model;
using experiment::Placement;

constexpr uint64_t kChunk = 16384;  // wire bytes per chunk (after scaling)
constexpr uint32_t kChunkElems = kChunk / sizeof(float);   // mercury-ps --chunk-bytes kChunk
// What a chunk costs on the wire beyond its payload: its header and tag
// (the bound and the simulator count them).
constexpr uint64_t kFrameBytes = sizeof(ps::Header) + ps::kTagBytes;
// What tbf counts per payload byte: full-sized segments, 1448 payload bytes
// (with timestamps) in a 1514-byte frame.
constexpr double kWirePerPayload = 1514.0 / 1448.0;

struct Mode {
    bool priority = false;      // connections per rank, ranked by the agent
    bool immediate = false;     // servers aggregate per chunk, not per tensor shard
    bool partitioned = false;   // ByteScheduler: application-level partitions and credit
};

Mode parse_mode(const std::string& m);

struct Options {
    std::string role, profile, mode_name = "fifo", servers_csv;
    std::string cc;                          // empty: by mode (Plan::cc)
    std::string placement = "mxnet";         // or "balanced"
    std::string sim_ranks = "layer";         // sim: per-layer priority, or "agent": mercuryd's ranks
    std::string job;                         // the job name the agents see; empty: the model's
    std::string secret_file;                 // the servers' secret; empty: $MERCURY_PS_SECRET
    uint64_t run = 0;                        // the run's id (mercury-ps refuses a worker of another run)
    bool payload_tags = true;                // --payload-tags off: accept a server that runs so
    uint32_t id = 0, workers = 1, servers = 1, iterations = 10, warmup = 2;
    double byte_divisor = 1, rate_mbit = 100;
    uint64_t partition_bytes = 4 * kChunk;   // bytescheduler, after scaling
    uint32_t credit = 4;                     // bytescheduler: partitions outstanding
};

// A key as mercury-ps sees it: a shard, or (bytescheduler) one partition of
// a shard, which the server then aggregates as a unit (BytePS's keys).
struct Key {
    uint32_t shard = 0, server = 0, id = 0;   // id: its index in that server's declared keys
    uint32_t first_chunk = 0, chunks = 0;     // the shard's chunks it covers
    uint64_t elems = 0;                       // float32s
};

// The shared view every worker derives from the profile: model, placement,
// keys, ranks.
struct Plan {
    Model model;
    Placement placement;
    std::vector<uint32_t> chunks;           // per shard
    std::vector<Key> keys;
    std::vector<std::vector<uint32_t>> keys_of_shard;    // indices into keys
    std::vector<std::vector<uint32_t>> keys_of_server;   // by id on that server
    std::vector<uint8_t> rank_of_tensor;    // per tensor, from its layer's rank
    std::vector<uint32_t> layer_of_rank;    // a layer holding each rank, for registration
    Mode mode;
    std::string cc;                         // every data connection's, set per socket
    std::string job;                        // the agents' and the servers' job name
    std::vector<bool> lanes;                // per lane: does any tensor travel on it?
    uint32_t partition_chunks = 1;          // bytescheduler: chunks per partition

    explicit Plan(const Options& o);
    // Which rank each layer has: from the agent (workers), or from the
    // agent's rule (the simulator, which has no agent).
    void assign_ranks(const std::vector<uint8_t>& layer_rank);
    std::pair<std::vector<uint32_t>, std::vector<uint32_t>> timings_us() const
    {
        std::vector<uint32_t> f, b;
        for (const auto& l : model.layers) {
            f.push_back(static_cast<uint32_t>(std::lround(l.forward_ms * 1000)));
            b.push_back(static_cast<uint32_t>(std::lround(l.backward_ms * 1000)));
        }
        return {f, b};
    }
    uint8_t lane(uint32_t shard) const
    {
        return mode.priority ? rank_of_tensor[placement.shards[shard].tensor] : 0;
    }
    uint64_t chunk_bytes(uint32_t shard, uint32_t c) const
    {
        return std::min<uint64_t>(kChunk, placement.shards[shard].bytes - uint64_t{c} * kChunk);
    }
    // float32s carry the bytes: a shard's last chunk rounds up to whole ones.
    uint32_t chunk_elems(uint32_t shard, uint32_t c) const
    {
        return static_cast<uint32_t>((chunk_bytes(shard, c) + sizeof(float) - 1) / sizeof(float));
    }
    // What mercury-ps aggregates before it answers: each chunk (immediate)
    // or each key (a whole shard, or a bytescheduler partition).
    std::string aggregation() const { return mode.immediate ? "chunk" : "tensor"; }
    uint64_t elems_per_iteration() const
    {
        uint64_t n = 0;
        for (const auto& k : keys)
            n += k.elems;
        return n;
    }
};

}  // namespace mercury::replay
