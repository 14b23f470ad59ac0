// SPDX-License-Identifier: GPL-2.0
#include "daemon/jobs.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>

#include "mercury/uapi.h"
#include "printable.hpp"

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
    const bool isolating_before = isolating();
    Job job;
    job.name = hello.job;
    job.id = acquire_id(JobOwner{uid, hello.job});
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

uint8_t JobRegistry::acquire_id(const JobOwner& name)
{
    if (isolate_jobs_ == JobIsolation::kOff)
        return MERCURY_JOB_NONE;
    if (auto it = ids_.find(name); it != ids_.end()) {
        ++it->second.sessions;
        return it->second.id;
    }
    std::array<bool, MERCURY_NUM_JOBS> used{};
    for (const auto& [other, use] : ids_)
        used[use.id] = true;
    for (uint8_t id = 1; id < MERCURY_NUM_JOBS; ++id) {
        if (!used[id]) {
            ids_[name] = IdUse{id, 1};
            return id;
        }
    }
    // More jobs than ids: this one shares job 0's precedence (as without isolation).
    return MERCURY_JOB_NONE;
}

void JobRegistry::release_id(const JobOwner& name)
{
    const auto it = ids_.find(name);
    if (it != ids_.end() && --it->second.sessions == 0)
        ids_.erase(it);
}

bool JobRegistry::isolating() const
{
    return isolate_jobs_ == JobIsolation::kOn || (isolate_jobs_ == JobIsolation::kAuto && ids_.size() >= 2);
}

uint8_t JobRegistry::datapath_id(const Job& job) const
{
    return isolating() ? job.id : MERCURY_JOB_NONE;
}

// Auto: a second job arrived, or only one is left. Every entry changes id.
void JobRegistry::isolation_changed(bool before)
{
    if (isolating() == before)
        return;
    for (const auto& [session, job] : jobs_)
        push_all_entries(job);
    kernel_.flush();
}

void JobRegistry::set_job_weight(const std::string& name, uint16_t weight)
{
    weights_[name] = weight;
    for (const auto& [session, job] : jobs_)
        if (job.name == name)
            push_all_entries(job);
    kernel_.flush();
}

uint16_t JobRegistry::job_weight(const std::string& name) const
{
    const auto it = weights_.find(name);
    return it == weights_.end() ? default_weight_ : it->second;
}

EntryValue JobRegistry::entry(const Job& job, uint8_t rank, uint16_t weight) const
{
    const uint32_t scaled = uint32_t{weight} * job_weight(job.name);
    return {rank, static_cast<uint16_t>(std::clamp<uint32_t>(scaled, MERCURY_WEIGHT_MIN, MERCURY_WEIGHT_MAX)),
            datapath_id(job)};
}

void JobRegistry::push_all_entries(const Job& job)
{
    for (const auto& [layer, key] : job.flows)
        if (layer < job.priorities.size())
            kernel_.set(key, entry(job, job.priorities[layer].rank, job.priorities[layer].weight));
    for (const auto& [key, rank] : job.lane_flows)
        kernel_.set(key, entry(job, rank, EntryValue{}.weight));
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
    kernel_.set(key, entry(*job, rank, EntryValue{}.weight));
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
    const bool isolating_before = isolating();
    release_id(JobOwner{job->uid, job->name});
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

std::string JobRegistry::status_json() const
{
    using Json = nlohmann::ordered_json;  // fields in the order PROTOCOL.md lists them
    const auto k = kernel_.stats();
    Json status{{"protocol", proto::kVersion},
                {"kernel", {{"connected", k.connected}, {"entries", k.entries}, {"pushes", k.pushes},
                            {"errors", k.errors}, {"reconnects", k.reconnects}}},
                {"jobs", Json::array()}};
    for (const auto& [session, job] : jobs_) {
        Json lanes = Json::array();
        for (const auto& [key, rank] : job.lane_flows)
            lanes.push_back({{"flow", key.to_string()}, {"rank", rank}});
        Json layers = Json::array();
        for (size_t i = 0; i < job.model.layers.size(); ++i) {
            const auto& p = job.priorities[i];
            Json flows = Json::array();
            const auto [lo, hi] = job.flows.equal_range(static_cast<uint32_t>(i));
            for (auto it = lo; it != hi; ++it)
                flows.push_back(it->second.to_string());
            layers.push_back({{"name", job.model.layers[i].name}, {"param_bytes", job.model.layers[i].param_bytes},
                              {"forward_us", job.timings.forward_us(i)}, {"backward_us", job.timings.backward_us(i)},
                              {"deadline_us", p.deadline_us}, {"rank", p.rank}, {"weight", p.weight},
                              {"flows", std::move(flows)}});
        }
        status["jobs"].push_back({{"session", session}, {"job", job.name}, {"job_id", datapath_id(job)},
                                  {"job_weight", job_weight(job.name)}, {"worker", job.worker_rank},
                                  {"pid", job.pid}, {"iteration", job.iteration},
                                  {"timing_reports", job.timing_reports}, {"lanes", std::move(lanes)},
                                  {"layers", std::move(layers)}});
    }
    // Names come from trainers: bytes that are not UTF-8 become U+FFFD.
    return status.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string JobRegistry::status_text() const
{
    const auto k = kernel_.stats();
    std::string out = std::string("kernel: ") + (k.connected ? "connected" : "NOT CONNECTED (tcp_mercury loaded?)") +
                      ", " + std::to_string(k.entries) + " entries, " + std::to_string(k.pushes) + " pushes, " +
                      std::to_string(k.errors) + " errors\n";
    if (jobs_.empty())
        out += "no trainers connected\n";
    for (const auto& [session, job] : jobs_) {
        out += "\njob " + printable(job.name) + " worker " + std::to_string(job.worker_rank) + " pid " +
               std::to_string(job.pid) + ": iteration " + std::to_string(job.iteration) + ", " +
               std::to_string(job.timing_reports) + " timing reports, " + std::to_string(job.lane_flows.size()) +
               " lane connections, job weight " + std::to_string(job_weight(job.name)) +
               (datapath_id(job) ? ", job id " + std::to_string(datapath_id(job)) : "") + "\n";
        char line[256];
        std::snprintf(line, sizeof(line), "  %-4s %-24s %12s %9s %9s %10s %4s %6s %s\n", "#", "layer", "param_bytes",
                      "fwd_us", "bwd_us", "deadline", "rank", "weight", "flows");
        out += line;
        for (size_t i = 0; i < job.model.layers.size(); ++i) {
            const auto& p = job.priorities[i];
            const auto n = job.flows.count(static_cast<uint32_t>(i));
            std::snprintf(line, sizeof(line), "  %-4zu %-24.24s %12llu %9u %9u %10u %4u %6u %zu\n", i,
                          printable(job.model.layers[i].name).c_str(),
                          static_cast<unsigned long long>(job.model.layers[i].param_bytes), job.timings.forward_us(i),
                          job.timings.backward_us(i), p.deadline_us, p.rank, p.weight, n);
            out += line;
        }
    }
    return out;
}

}  // namespace mercury
