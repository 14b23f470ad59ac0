// SPDX-License-Identifier: GPL-2.0
#include "daemon/jobs.hpp"

#include "printable.hpp"

#include <cerrno>
#include <cstdio>

namespace mercury {

namespace {

std::string json_string(const std::string& s)
{
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

}  // namespace

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
    Job job;
    job.name = hello.job;
    job.worker_rank = hello.worker_rank;
    job.pid = hello.pid;
    job.uid = uid;
    jobs_.emplace(session, std::move(job));
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
    kernel_.set(key, EntryValue{p.rank, p.weight});
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
    kernel_.set(key, EntryValue{rank, EntryValue{}.weight});
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
    jobs_.erase(session);
    kernel_.flush();
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
        kernel_.set(key, EntryValue{p.rank, p.weight});
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
    const auto k = kernel_.stats();
    std::string out = "{\"protocol\":" + std::to_string(proto::kVersion) + ",\"kernel\":{\"connected\":" +
                      (k.connected ? "true" : "false") + ",\"entries\":" + std::to_string(k.entries) +
                      ",\"pushes\":" + std::to_string(k.pushes) + ",\"errors\":" + std::to_string(k.errors) +
                      ",\"reconnects\":" + std::to_string(k.reconnects) + "},\"jobs\":[";
    bool first_job = true;
    for (const auto& [session, job] : jobs_) {
        out += first_job ? "" : ",";
        first_job = false;
        out += "{\"session\":" + std::to_string(session) + ",\"job\":" + json_string(job.name) +
               ",\"worker\":" + std::to_string(job.worker_rank) + ",\"pid\":" + std::to_string(job.pid) +
               ",\"iteration\":" + std::to_string(job.iteration) +
               ",\"timing_reports\":" + std::to_string(job.timing_reports) + ",\"lanes\":[";
        bool first_lane = true;
        for (const auto& [key, rank] : job.lane_flows) {
            out += first_lane ? "" : ",";
            first_lane = false;
            out += "{\"flow\":" + json_string(key.to_string()) + ",\"rank\":" + std::to_string(rank) + "}";
        }
        out += "],\"layers\":[";
        for (size_t i = 0; i < job.model.layers.size(); ++i) {
            const auto& p = job.priorities[i];
            out += i ? "," : "";
            out += "{\"name\":" + json_string(job.model.layers[i].name) +
                   ",\"param_bytes\":" + std::to_string(job.model.layers[i].param_bytes) +
                   ",\"forward_us\":" + std::to_string(job.timings.forward_us(i)) +
                   ",\"backward_us\":" + std::to_string(job.timings.backward_us(i)) +
                   ",\"deadline_us\":" + std::to_string(p.deadline_us) + ",\"rank\":" + std::to_string(p.rank) +
                   ",\"weight\":" + std::to_string(p.weight) + ",\"flows\":[";
            bool first_flow = true;
            const auto [lo, hi] = job.flows.equal_range(static_cast<uint32_t>(i));
            for (auto it = lo; it != hi; ++it) {
                out += first_flow ? "" : ",";
                first_flow = false;
                out += json_string(it->second.to_string());
            }
            out += "]}";
        }
        out += "]}";
    }
    return out + "]}";
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
               " lane connections\n";
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
