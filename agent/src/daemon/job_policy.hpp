// SPDX-License-Identifier: GPL-2.0
// How mercuryd treats jobs against each other on this host: which job ids
// they get (isolation), their weights, and so the entry each flow of a job
// gets. No sessions, no datapath: JobRegistry asks it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "daemon/kernel_sync.hpp"

namespace mercury {

// Whether jobs get datapath job ids (mercuryd's isolate_jobs).
enum class JobIsolation {
    kOff,    // no ids: one precedence for every flow on the host
    kAuto,   // ids while two or more jobs run here; none while one does
    kOn,     // an id for every job
};

// A job is its name and its user's uid: another user's trainer that says
// the same name is another job, and can neither hold this one's flows nor
// make them back off with its own.
using JobOwner = std::pair<uint32_t, std::string>;   // uid, job name

class JobPolicy {
public:
    // Set before the first job arrives.
    void set_isolation(JobIsolation mode) { isolation_ = mode; }
    // Jobs without a weight of their own get @weight.
    void set_default_weight(uint16_t weight) { default_weight_ = weight; }
    void set_weight(const std::string& name, uint16_t weight) { weights_[name] = weight; }
    uint16_t weight(const std::string& name) const;

    // One id per job however many of its sessions (workers) run here; 0 when
    // isolation is off or all ids are taken (the job then shares job 0's
    // precedence, as without isolation).
    uint8_t acquire_id(const JobOwner& owner);
    void release_id(const JobOwner& owner);
    // Entries carry job ids now.
    bool isolating() const;
    // The job id entries of a job with id @id carry: it, or 0 while not isolating.
    uint8_t datapath_id(uint8_t id) const { return isolating() ? id : 0; }
    // The entry for a flow of job @name (id @id) at @rank with weight @weight:
    // the job's weight multiplies it, clamped to the datapath's range.
    EntryValue entry(const std::string& name, uint8_t id, uint8_t rank, uint16_t weight) const;

private:
    struct IdUse {
        uint8_t id = 0;
        size_t sessions = 0;
    };
    JobIsolation isolation_ = JobIsolation::kAuto;
    std::map<JobOwner, IdUse> ids_;
    std::map<std::string, uint16_t> weights_;   // set by mercuryctl job set
    uint16_t default_weight_ = 1;
};

}  // namespace mercury
