// SPDX-License-Identifier: GPL-2.0
#include "learner/priorities.hpp"

#include <algorithm>

namespace mercury {

namespace {

void assign_weights(std::vector<LayerPriority>& out)
{
    // Per rank: the deadline span it covers, then interpolate the weight.
    for (unsigned rank = 0; rank < MERCURY_NUM_RANKS; ++rank) {
        uint32_t lo = UINT32_MAX, hi = 0;
        for (const auto& p : out) {
            if (p.rank == rank) {
                lo = std::min(lo, p.deadline_us);
                hi = std::max(hi, p.deadline_us);
            }
        }
        for (auto& p : out) {
            if (p.rank != rank)
                continue;
            const double pos = hi > lo ? static_cast<double>(p.deadline_us - lo) / (hi - lo) : 0.0;
            p.weight = static_cast<uint16_t>(kWeightFirst - pos * (kWeightFirst - kWeightLast) + 0.5);
        }
    }
}

}  // namespace

std::vector<LayerPriority> compute_priorities(const LayerTimings& timings, size_t layers)
{
    std::vector<LayerPriority> out(layers);
    const bool learned = timings.layers() == layers && timings.iterations() > 0;

    uint64_t total = 0;
    if (learned) {
        for (size_t i = 0; i < layers; ++i) {
            out[i].deadline_us = static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX));
            total += timings.forward_us(i);
        }
    }
    for (size_t i = 0; i < layers; ++i) {
        const uint64_t slice = learned && total > 0 ? out[i].deadline_us * uint64_t{MERCURY_NUM_RANKS} / total
                                                    : i * uint64_t{MERCURY_NUM_RANKS} / std::max<size_t>(layers, 1);
        out[i].rank = static_cast<uint8_t>(std::min<uint64_t>(slice, MERCURY_NUM_RANKS - 1));
        if (!learned)
            out[i].deadline_us = static_cast<uint32_t>(i);
    }
    assign_weights(out);
    return out;
}

}  // namespace mercury
