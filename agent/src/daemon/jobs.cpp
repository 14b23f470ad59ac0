// SPDX-License-Identifier: GPL-2.0
#include "daemon/jobs.hpp"

#include <cerrno>

#include "mercury/uapi.h"

namespace mercury {

Job* JobRegistry::find(uint32_t session)
{
    const auto it = jobs_.find(session);
    return it == jobs_.end() ? nullptr : &it->second;
}

int JobRegistry::open(uint32_t session, const proto::Hello& hello, uint32_t uid)
{
    if (hello.job.empty())
        return EINVAL;
    if (jobs_.count(session))
        return EALREADY;
    const bool isolating_before = policy_.isolating();
    Job job;
    job.name = hello.job;
    job.id = policy_.acquire_id(JobOwner{uid, hello.job});
    job.worker_rank = hello.worker_rank;
    job.pid = hello.pid;
    job.uid = uid;
    jobs_.emplace(session, std::move(job));
    isolation_changed(isolating_before);
    return 0;
}

int JobRegistry::set_model(uint32_t session, const proto::Model& model)
{
    Job* job = find(session);
    if (!job)
        return EPROTO;
    if (model.layers.empty())
        return EINVAL;
    // A new model invalidates what was learned and registered for the old one.
    for (const auto& [layer, key] : job->flows) {
        kernel_.remove(key);
        owners_.erase(key);
    }
    job->flows.clear();
    job->priorities.clear();
    job->model = model;
    job->timings = LayerTimings(model.layers.size());
    publish(session, *job);
    return 0;
}

int JobRegistry::add_timings(uint32_t session, const proto::Timings& timings)
{
    Job* job = find(session);
    if (!job || job->model.layers.empty())
        return EPROTO;
    if (!job->timings.add(timings.forward_us, timings.backward_us))
        return EINVAL;
    ++job->timing_reports;
    publish(session, *job);
    return 0;
}

void JobRegistry::forget_flow(const FlowKey& key)
{
    // A connection belongs to one job and one layer or lane: the latest claim
    // (proven by its fd) wins.
    const auto owner = owners_.find(key);
    if (owner == owners_.end())
        return;
    if (Job* other = find(owner->second.session)) {
        if (owner->second.lane) {
            other->lane_flows.erase(key);
        } else {
            const auto [lo, hi] = other->flows.equal_range(owner->second.layer);
            for (auto it = lo; it != hi; ++it) {
                if (it->second == key) {
                    other->flows.erase(it);
                    break;
                }
            }
        }
    }
    owners_.erase(owner);
}

void JobRegistry::forget_flows(const Job& job)
{
    for (const auto& [layer, key] : job.flows)
        owners_.erase(key);
    for (const auto& [key, rank] : job.lane_flows)
        owners_.erase(key);
}

// Auto: a second job arrived, or only one is left. Every entry changes id.
void JobRegistry::isolation_changed(bool before)
{
    if (policy_.isolating() == before)
        return;
    for (const auto& [session, job] : jobs_)
        push_all_entries(job);
    kernel_.flush();
}

void JobRegistry::set_job_weight(const std::string& name, uint16_t weight)
{
    policy_.set_weight(name, weight);
    for (const auto& [session, job] : jobs_)
        if (job.name == name)
            push_all_entries(job);
    kernel_.flush();
}

EntryValue JobRegistry::entry(const Job& job, uint8_t rank, uint16_t weight) const
{
    return policy_.entry(job.name, job.id, rank, weight);
}

void JobRegistry::push_all_entries(const Job& job)
{
    for (const auto& [layer, key] : job.flows)
        if (layer < job.priorities.size())
            kernel_.set(key, entry(job, job.priorities[layer].rank, job.priorities[layer].weight));
    for (const auto& [key, rank] : job.lane_flows)
        kernel_.set(key, entry(job, rank, kLaneWeight));
}

bool JobRegistry::full(const Job& job) const
{
    return job.flows.size() + job.lane_flows.size() >= max_flows_per_session_;
}

int JobRegistry::register_flow(uint32_t session, uint32_t layer, const FlowKey& key)
{
    Job* job = find(session);
    if (!job || job->model.layers.empty())
        return EPROTO;
    if (layer >= job->model.layers.size())
        return EINVAL;
    forget_flow(key);
    if (full(*job))
        return ENOSPC;
    job->flows.emplace(layer, key);
    owners_[key] = Owner{session, false, layer};
    // Only this connection's entry: the layer's priority is already known.
    const auto& p = job->priorities[layer];
    kernel_.set(key, entry(*job, p.rank, p.weight));
    kernel_.flush();
    return 0;
}

int JobRegistry::register_lane(uint32_t session, uint8_t lane, uint8_t lanes, const FlowKey& key)
{
    Job* job = find(session);
    if (!job)
        return EPROTO;
    if (lanes == 0 || lanes > proto::kMaxLanes || lane >= lanes)
        return EINVAL;
    forget_flow(key);
    if (full(*job))
        return ENOSPC;
    const uint8_t rank = proto::lane_rank(lane, lanes);
    job->lane_flows[key] = rank;
    owners_[key] = Owner{session, true, 0};
    kernel_.set(key, entry(*job, rank, kLaneWeight));
    kernel_.flush();
    return 0;
}

int JobRegistry::subscribe_ranks(uint32_t session)
{
    Job* job = find(session);
    if (!job)
        return EPROTO;
    job->subscribed = true;
    notify_ranks(session, *job);
    return 0;
}

int JobRegistry::begin_iteration(uint32_t session, uint64_t iteration)
{
    Job* job = find(session);
    if (!job)
        return EPROTO;
    job->iteration = iteration;
    return 0;
}

void JobRegistry::close(uint32_t session)
{
    Job* job = find(session);
    if (!job)
        return;
    for (const auto& [layer, key] : job->flows)
        kernel_.remove(key);
    for (const auto& [key, rank] : job->lane_flows)
        kernel_.remove(key);
    forget_flows(*job);
    const bool isolating_before = policy_.isolating();
    policy_.release_id(JobOwner{job->uid, job->name});
    jobs_.erase(session);
    kernel_.flush();
    isolation_changed(isolating_before);
}

// New priorities from the job's timings: only the connections of layers
// whose rank or weight moved are pushed again (lanes keep their lane's rank).
void JobRegistry::publish(uint32_t session, Job& job)
{
    auto fresh = compute_priorities(job.timings, job.model.layers.size());
    for (const auto& [layer, key] : job.flows) {
        const auto& p = fresh[layer];
        if (layer < job.priorities.size() && job.priorities[layer].rank == p.rank &&
            job.priorities[layer].weight == p.weight)
            continue;
        kernel_.set(key, entry(job, p.rank, p.weight));
    }
    job.priorities = std::move(fresh);
    kernel_.flush();
    notify_ranks(session, job);
}

void JobRegistry::notify_ranks(uint32_t session, Job& job)
{
    if (!job.subscribed || !notify_ || job.model.layers.empty())
        return;
    proto::Ranks ranks;
    ranks.datapath = kernel_.stats().connected;
    for (const auto& p : job.priorities)
        ranks.ranks.push_back(p.rank);
    if (job.sent && job.sent->ranks == ranks.ranks && job.sent->datapath == ranks.datapath)
        return;
    ranks.generation = job.sent ? job.sent->generation + 1 : 1;
    job.sent = ranks;
    notify_(session, ranks);
}

}  // namespace mercury
