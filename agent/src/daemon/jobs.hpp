// SPDX-License-Identifier: GPL-2.0
// What mercuryd knows about the trainers on this worker: one Job per
// connected trainer session, with its model, learned timings, registered
// connections and the priorities derived from them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/kernel_sync.hpp"
#include "learner/priorities.hpp"
#include "protocol/wire.hpp"

namespace mercury {

struct Job {
    std::string name;
    uint32_t worker_rank = 0;
    uint32_t pid = 0;
    uint32_t uid = 0;
    proto::Model model;
    LayerTimings timings;
    std::vector<LayerPriority> priorities;
    std::multimap<uint32_t, FlowKey> flows;  // layer -> connections carrying it
    uint64_t iteration = 0;
    uint64_t timing_reports = 0;
};

class JobRegistry {
public:
    explicit JobRegistry(KernelSync& kernel) : kernel_(kernel) {}

    // Each returns an errno-style error (0 = fine) the session reports.
    int open(uint32_t session, const proto::Hello& hello, uint32_t uid);
    int set_model(uint32_t session, const proto::Model& model);
    int add_timings(uint32_t session, const proto::Timings& timings);
    int register_flow(uint32_t session, uint32_t layer, const FlowKey& key);
    int begin_iteration(uint32_t session, uint64_t iteration);
    // Forgets the session's job and withdraws its kernel entries.
    void close(uint32_t session);

    std::string status_json() const;
    std::string status_text() const;
    size_t jobs() const { return jobs_.size(); }

private:
    Job* find(uint32_t session);
    void publish(Job& job);  // desired kernel entries from job's priorities

    KernelSync& kernel_;
    std::map<uint32_t, Job> jobs_;
};

}  // namespace mercury
