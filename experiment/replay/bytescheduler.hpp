// SPDX-License-Identifier: GPL-2.0
// ByteScheduler, the bytescheduler mode's worker side.
#pragma once

#include <cstdint>
#include <set>

#include "replay/plan.hpp"

namespace mercury::replay {

// ByteScheduler's worker side: gradient partitions (keys) wait in a priority
// queue (the layer the next forward pass needs first goes first) and at most
// `credit` partitions are outstanding; a partition's credit comes back when
// the server has taken its last chunk (mercury-ps's Ack), as a BytePS server
// answers a push on receipt. Holding it until the pull would deadlock:
// workers that produced gradients at different times would each hold
// partitions the others have not sent.
class PartitionScheduler {
public:
    PartitionScheduler(const Plan& plan, uint32_t credit) : plan_(plan), credit_(credit) {}

    void add(uint32_t iteration, uint32_t tensor)
    {
        for (uint32_t s : plan_.placement.tensors[tensor].shards)
            for (uint32_t k : plan_.keys_of_shard[s])
                queue_.insert({plan_.placement.tensors[tensor].layer, iteration, k});
    }

    // Hands partitions (keys) to @send while credit lasts.
    template <typename Send>
    void pump(Send&& send)
    {
        while (unacked_.size() < credit_ && !queue_.empty()) {
            const Partition p = *queue_.begin();
            queue_.erase(queue_.begin());
            send(p.key, p.iteration);
            unacked_.insert(p.key);
        }
    }

    // The server took the push of @key's chunk ending at element @end.
    void acked(uint32_t key, uint64_t end)
    {
        if (end == plan_.keys[key].elems)
            unacked_.erase(key);
    }

    bool idle() const { return queue_.empty(); }

private:
    struct Partition {
        uint32_t layer, iteration, key;
        auto operator<=>(const Partition&) const = default;
    };
    const Plan& plan_;
    uint32_t credit_;
    std::set<Partition> queue_;
    std::set<uint32_t> unacked_;   // the credit in use; a key is pushed again only after its sum came back
};

}  // namespace mercury::replay
