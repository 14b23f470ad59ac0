// SPDX-License-Identifier: GPL-2.0
// What a parameter server does with pushed gradients, without the network:
// sums each worker's float32 chunks per key and hands back a unit's sum once
// every worker has pushed all of it. The unit is a chunk (immediate
// aggregation: the pull of a key's first chunk overlaps the push of its
// last) or the whole key (the vanilla parameter server).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mercury::ps {

enum class Aggregation { kChunk, kTensor };

// A push that breaks the job's rules; the job cannot go on.
class ProtocolError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// What every worker of a job declares, identically.
struct JobShape {
    uint32_t workers = 0;
    std::vector<uint64_t> key_elems;   // float32 elements per key
    bool operator==(const JobShape&) const = default;
    uint64_t bytes() const;
    // What a job of this shape pins at most, in bytes: its sums and every
    // per-chunk and per-worker record (Aggregator's and the server's).
    uint64_t footprint(uint32_t chunk_elems) const;
};

class Aggregator {
public:
    using Clock = std::chrono::steady_clock;

    // The sum of one unit: key elements [offset, offset + sum->size()), of
    // the unit's @iteration-th round (counted from 0).
    struct Sum {
        uint32_t key;
        uint64_t offset;
        uint32_t iteration;
        std::shared_ptr<const std::vector<float>> values;
    };
    // The unit waited for longest, and the workers it still waits for.
    struct Stall {
        uint32_t key;
        uint64_t offset;
        Clock::time_point since;
        std::vector<uint32_t> missing;
    };

    Aggregator(JobShape shape, uint32_t chunk_elems, Aggregation aggregation);

    // Checks where @data goes: a whole chunk of @key at chunk-aligned @offset
    // (the last one may be short). Throws ProtocolError.
    void check(uint32_t key, uint64_t offset, size_t count) const;

    // Adds @worker's chunk of the unit's @iteration-th round; the unit's sum
    // once it is complete. Throws ProtocolError, and sums nothing, for a bad
    // place, a push of another round than the unit's current one (a
    // re-delivered push, a worker ahead or behind), or a second push of the
    // chunk in this round.
    std::optional<Sum> add(uint32_t worker, uint32_t key, uint64_t offset, uint32_t iteration,
                           std::span<const float> data, Clock::time_point now);

    std::optional<Stall> oldest_incomplete() const;
    const JobShape& shape() const { return shape_; }
    uint32_t chunk_elems() const { return chunk_elems_; }

private:
    struct Key {
        std::vector<float> sum;
        std::vector<uint64_t> pushed;    // chunk c, worker w: bit w % 64 of word c * words + w / 64
        std::vector<uint32_t> arrived;   // per unit: (worker, chunk) pushes so far
        std::vector<uint32_t> round;     // per unit: the iteration its pushes are for
    };
    uint64_t chunks(uint32_t key) const;
    std::pair<uint64_t, uint64_t> unit_chunks(uint32_t key, uint64_t chunk) const;  // [first, end)

    JobShape shape_;
    uint32_t chunk_elems_;
    Aggregation aggregation_;
    size_t words_;                       // bitmap words per chunk
    std::vector<Key> keys_;
    std::map<std::pair<uint32_t, uint64_t>, Clock::time_point> started_;   // (key, unit's first chunk)
};

}  // namespace mercury::ps
