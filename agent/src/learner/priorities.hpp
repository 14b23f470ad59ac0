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
    uint8_t rank = 0;          // 0 .. MERCURY_NUM_RANKS-1, lower is more urgent
    uint16_t weight = MERCURY_WEIGHT_UNIT;   // share within the rank (the unit: one Reno flow)
};

// The next forward pass needs layer i's parameters when layers 0..i-1 have
// run: deadline(i) = sum of their forward times. Ranks split the forward
// pass into MERCURY_NUM_RANKS equal slices of time, so layers needed at nearly the same
// moment share a rank whatever their index, and a long layer pushes all later
// ones back. Within a rank, earlier deadlines get larger weights (twice the
// unit down to half of it). Without timings yet, layers are spread over ranks by index.
std::vector<LayerPriority> compute_priorities(const LayerTimings& timings, size_t layers);

// Within a rank, the layer needed first gets twice the unit, the last half
// of it (compute_priorities).
constexpr uint16_t kWeightFirst = 2 * MERCURY_WEIGHT_UNIT;
constexpr uint16_t kWeightLast = MERCURY_WEIGHT_UNIT / 2;

// A lane carries every layer of its rank, the one needed first first: it
// takes that layer's weight, which needs no knowledge of the layers (a
// parameter server's host has none). With the unit instead, mercury-ps's
// connections made the replayer's mercury mode 1.14x slower (VGG-16:
// 2.27 s against 2.00 s with the layer's weight, doc/experiment.md): a
// unit flow halves on a loss where this one backs off a quarter.
constexpr uint16_t kLaneWeight = kWeightFirst;

}  // namespace mercury
