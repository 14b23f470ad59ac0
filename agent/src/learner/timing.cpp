// SPDX-License-Identifier: GPL-2.0
#include "learner/timing.hpp"

#include <algorithm>

namespace mercury {

void RobustEstimate::add(uint32_t sample_us)
{
    ring_[next_] = sample_us;
    next_ = (next_ + 1) % kWindow;
    count_ = std::min(count_ + 1, kWindow);
    std::array<uint32_t, kWindow> sorted = ring_;
    const auto end = sorted.begin() + static_cast<std::ptrdiff_t>(count_);
    const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(count_ / 2);
    std::nth_element(sorted.begin(), mid, end);
    estimate_ = *mid;
}

bool LayerTimings::add(const std::vector<uint32_t>& forward_us, const std::vector<uint32_t>& backward_us)
{
    if (forward_us.size() != forward_.size() || backward_us.size() != backward_.size())
        return false;
    for (size_t i = 0; i < forward_.size(); ++i) {
        forward_[i].add(forward_us[i]);
        backward_[i].add(backward_us[i]);
    }
    ++iterations_;
    return true;
}

}  // namespace mercury
