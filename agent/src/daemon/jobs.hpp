// SPDX-License-Identifier: GPL-2.0
// What mercuryd knows about the trainers on this worker: one Job per
// connected trainer session, with its model, learned timings, registered
// connections and the priorities derived from them, and which session owns
// each connection. It publishes the jobs' entries to an EntryTable and
// their ranks to subscribers; how jobs are treated against each other is
// JobPolicy's, and the status views are job_views.hpp's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <optional>
#include <string>
#include <vector>

#include "daemon/job_policy.hpp"
#include "daemon/kernel_sync.hpp"
#include "learner/priorities.hpp"
#include "protocol/wire.hpp"

namespace mercury {

struct Job {
    std::string name;
    uint8_t id = 0;   // its job id (0: none, isolation off or ids used up); see datapath_id
    uint32_t worker_rank = 0;
    uint32_t pid = 0;
    uint32_t uid = 0;
    proto::Model model;
    LayerTimings timings;
    std::vector<LayerPriority> priorities;
    std::multimap<uint32_t, FlowKey> flows;  // layer -> connections carrying it
    std::map<FlowKey, uint8_t, FlowKeyLess> lane_flows;  // lane connection -> its rank
    uint64_t iteration = 0;
    uint64_t timing_reports = 0;
    bool subscribed = false;           // wants Ranks on every change
    std::optional<proto::Ranks> sent;  // last Ranks sent to it
};

class JobRegistry {
public:
    // Delivers a Ranks message to the session that subscribed to it.
    using RanksNotifier = std::function<void(uint32_t session, const proto::Ranks&)>;

    explicit JobRegistry(EntryTable& kernel) : kernel_(kernel) {}
    void set_notifier(RanksNotifier notify) { notify_ = std::move(notify); }
    // Connections one session may register (layers and lanes): ENOSPC beyond.
    void set_max_flows_per_session(size_t n) { max_flows_per_session_ = n; }
    // Give each job (sessions of one name) its own datapath job id, so its
    // ranks order only its own flows. Set before the first session opens.
    void set_isolate_jobs(JobIsolation mode) { policy_.set_isolation(mode); }
    // The job id @job's entries carry: its id, or 0 while isolation is off
    // (or auto, with one job here).
    uint8_t datapath_id(const Job& job) const { return policy_.datapath_id(job.id); }
    // A job's weight multiplies its entries' weights (its share against
    // other jobs); jobs without one get @default_weight.
    void set_default_job_weight(uint16_t weight) { policy_.set_default_weight(weight); }
    void set_job_weight(const std::string& name, uint16_t weight);
    uint16_t job_weight(const std::string& name) const { return policy_.weight(name); }

    // Each returns an errno-style error (0 = fine) the session reports.
    int open(uint32_t session, const proto::Hello& hello, uint32_t uid);
    int set_model(uint32_t session, const proto::Model& model);
    int add_timings(uint32_t session, const proto::Timings& timings);
    int register_flow(uint32_t session, uint32_t layer, const FlowKey& key);
    // @key was proven to be the caller's (a passed socket): it carries lane
    // @lane of @lanes, at that lane's rank (proto::lane_rank).
    int register_lane(uint32_t session, uint8_t lane, uint8_t lanes, const FlowKey& key);
    // Sends the job's ranks now (once it has a model) and whenever they change.
    int subscribe_ranks(uint32_t session);
    int begin_iteration(uint32_t session, uint64_t iteration);
    // Forgets the session's job and withdraws its kernel entries.
    void close(uint32_t session);

    size_t jobs() const { return jobs_.size(); }
    const std::map<uint32_t, Job>& all() const { return jobs_; }  // by session
    KernelSyncStats datapath() const { return kernel_.stats(); }

private:
    Job* find(uint32_t session);
    void publish(uint32_t session, Job& job);  // kernel entries and Ranks from job's priorities
    void notify_ranks(uint32_t session, Job& job);
    void forget_flow(const FlowKey& key);  // in whichever job holds it
    void forget_flows(const Job& job);     // the owner index's entries of @job
    bool full(const Job& job) const;
    EntryValue entry(const Job& job, uint8_t rank, uint16_t weight) const;
    void push_all_entries(const Job& job);   // after its weight or id changed
    void isolation_changed(bool before);     // entries again, if policy_.isolating() moved

    // Which session holds a connection, and as which layer (or lane): a
    // claim is found without walking every job's flows.
    struct Owner {
        uint32_t session = 0;
        bool lane = false;
        uint32_t layer = 0;
    };

    EntryTable& kernel_;
    RanksNotifier notify_;
    std::map<uint32_t, Job> jobs_;
    std::map<FlowKey, Owner, FlowKeyLess> owners_;
    size_t max_flows_per_session_ = 16384;
    JobPolicy policy_;
};

}  // namespace mercury
