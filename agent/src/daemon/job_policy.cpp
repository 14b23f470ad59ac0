// SPDX-License-Identifier: GPL-2.0
#include "daemon/job_policy.hpp"

#include <algorithm>
#include <array>

#include "mercury/uapi.h"

namespace mercury {

uint16_t JobPolicy::weight(const std::string& name) const
{
    const auto it = weights_.find(name);
    return it == weights_.end() ? default_weight_ : it->second;
}

uint8_t JobPolicy::acquire_id(const JobOwner& owner)
{
    if (isolation_ == JobIsolation::kOff)
        return MERCURY_JOB_NONE;
    if (auto it = ids_.find(owner); it != ids_.end()) {
        ++it->second.sessions;
        return it->second.id;
    }
    std::array<bool, MERCURY_NUM_JOBS> used{};
    for (const auto& [other, use] : ids_)
        used[use.id] = true;
    for (uint8_t id = 1; id < MERCURY_NUM_JOBS; ++id) {
        if (!used[id]) {
            ids_[owner] = IdUse{id, 1};
            return id;
        }
    }
    return MERCURY_JOB_NONE;
}

void JobPolicy::release_id(const JobOwner& owner)
{
    const auto it = ids_.find(owner);
    if (it != ids_.end() && --it->second.sessions == 0)
        ids_.erase(it);
}

bool JobPolicy::isolating() const
{
    return isolation_ == JobIsolation::kOn || (isolation_ == JobIsolation::kAuto && ids_.size() >= 2);
}

EntryValue JobPolicy::entry(const std::string& name, uint8_t id, uint8_t rank, uint16_t w) const
{
    const uint32_t scaled = uint32_t{w} * weight(name);
    return {rank, static_cast<uint16_t>(std::clamp<uint32_t>(scaled, MERCURY_WEIGHT_MIN, MERCURY_WEIGHT_MAX)),
            datapath_id(id)};
}

}  // namespace mercury
