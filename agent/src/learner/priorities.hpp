// SPDX-License-Identifier: GPL-2.0
// From learned timings to the ranks and weights the kernel enforces.
#pragma once

#include <cstdint>
#include <vector>

#include "learner/timing.hpp"
#include "mercury/uapi.h"

namespace mercury {

struct LayerPriority {
    uint32_t deadline_us = 0;  // when the next forward pass needs the layer
    uint8_t rank = 0;          // 0 .. kRanks-1, lower is more urgent
    uint16_t weight = MERCURY_WEIGHT_UNIT;   // share within the rank (the unit: one Reno flow)
};

// The next forward pass needs layer i's parameters when layers 0..i-1 have
// run: deadline(i) = sum of their forward times. Ranks split the forward
// pass into kRanks equal slices of time, so layers needed at nearly the same
// moment share a rank whatever their index, and a long layer pushes all later
// ones back. Within a rank, earlier deadlines get larger weights (twice the
// unit down to half of it). Without timings yet, layers are spread over ranks by index.
std::vector<LayerPriority> compute_priorities(const LayerTimings& timings, size_t layers);

constexpr unsigned kRanks = MERCURY_NUM_RANKS;

}  // namespace mercury
