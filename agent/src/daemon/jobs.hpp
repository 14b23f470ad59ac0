// SPDX-License-Identifier: GPL-2.0
// What mercuryd knows about the trainers on this worker: one Job per
// connected trainer session, with its model, learned timings, registered
// connections and the priorities derived from them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <optional>
#include <string>
#include <vector>

#include "daemon/kernel_sync.hpp"
#include "learner/priorities.hpp"
#include "protocol/wire.hpp"

namespace mercury {

// Whether jobs get datapath job ids (mercuryd's isolate_jobs).
enum class JobIsolation {
    kOff,    // no ids: one precedence for every flow on the host
    kAuto,   // ids while two or more jobs run here; none while one does
    kOn,     // an id for every job
};

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
    void set_isolate_jobs(JobIsolation mode) { isolate_jobs_ = mode; }
    // The job id @job's entries carry: its id, or 0 while isolation is off
    // (or auto, with one job here).
    uint8_t datapath_id(const Job& job) const;
    // A job's weight multiplies its entries' weights (its share against
    // other jobs); jobs without one get @default_weight.
    void set_default_job_weight(uint16_t weight) { default_weight_ = weight; }
    void set_job_weight(const std::string& name, uint16_t weight);
    uint16_t job_weight(const std::string& name) const;

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

    std::string status_json() const;
    std::string status_text() const;
    size_t jobs() const { return jobs_.size(); }
    const std::map<uint32_t, Job>& all() const { return jobs_; }  // by session

private:
    Job* find(uint32_t session);
    void publish(uint32_t session, Job& job);  // kernel entries and Ranks from job's priorities
    void notify_ranks(uint32_t session, Job& job);
    void forget_flow(const FlowKey& key);  // in whichever job holds it
    void forget_flows(const Job& job);     // the owner index's entries of @job
    bool full(const Job& job) const;
    // A job is its name and its user's uid: another user's trainer that says
    // the same name is another job, and can neither hold this one's flows nor
    // make them back off with its own.
    using JobOwner = std::pair<uint32_t, std::string>;   // uid, job name
    uint8_t acquire_id(const JobOwner& name);   // 0 when isolation is off or all ids are taken
    void release_id(const JobOwner& name);
    EntryValue entry(const Job& job, uint8_t rank, uint16_t weight) const;
    void push_all_entries(const Job& job);   // after its weight or id changed
    bool isolating() const;                  // entries carry job ids now
    void isolation_changed(bool before);     // entries again, if isolating() moved

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
    JobIsolation isolate_jobs_ = JobIsolation::kAuto;
    // Job ids in use, by job (uid and name): one per job however many of its
    // sessions (workers) run on this host.
    struct IdUse {
        uint8_t id = 0;
        size_t sessions = 0;
    };
    std::map<JobOwner, IdUse> ids_;
    std::map<std::string, uint16_t> weights_;   // set by mercuryctl job set
    uint16_t default_weight_ = 1;
};

}  // namespace mercury
