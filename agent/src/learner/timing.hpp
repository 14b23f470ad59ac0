// SPDX-License-Identifier: GPL-2.0
// Per-layer compute-time estimates from the timings trainers report.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mercury {

// Median of the last kWindow samples: the first sample is used at once, a
// stall or GC pause (one wild sample) moves nothing, and a real change of
// level is followed after kWindow/2 + 1 iterations.
class RobustEstimate {
public:
    static constexpr size_t kWindow = 9;

    void add(uint32_t sample_us);
    uint32_t value_us() const { return estimate_; }

private:
    std::array<uint32_t, kWindow> ring_{};
    size_t next_ = 0;
    size_t count_ = 0;
    uint32_t estimate_ = 0;
};

// Forward and backward estimates for every layer of one model.
class LayerTimings {
public:
    explicit LayerTimings(size_t layers = 0) : forward_(layers), backward_(layers) {}

    // Ignores reports for another number of layers (the model changed).
    bool add(const std::vector<uint32_t>& forward_us, const std::vector<uint32_t>& backward_us);
    size_t layers() const { return forward_.size(); }
    uint32_t forward_us(size_t layer) const { return forward_[layer].value_us(); }
    uint32_t backward_us(size_t layer) const { return backward_[layer].value_us(); }
    size_t iterations() const { return iterations_; }

private:
    std::vector<RobustEstimate> forward_;
    std::vector<RobustEstimate> backward_;
    size_t iterations_ = 0;
};

}  // namespace mercury
