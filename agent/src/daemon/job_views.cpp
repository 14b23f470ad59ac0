// SPDX-License-Identifier: GPL-2.0
#include "daemon/job_views.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "common/printable.hpp"

namespace mercury {

std::string status_json(const JobRegistry& registry)
{
    using Json = nlohmann::ordered_json;  // fields in the order PROTOCOL.md lists them
    const auto k = registry.datapath();
    Json status{{"protocol", proto::kVersion},
                {"kernel", {{"connected", k.connected}, {"entries", k.entries}, {"pushes", k.pushes},
                            {"errors", k.errors}, {"reconnects", k.reconnects}}},
                {"jobs", Json::array()}};
    for (const auto& [session, job] : registry.all()) {
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
        status["jobs"].push_back({{"session", session}, {"job", job.name}, {"job_id", registry.datapath_id(job)},
                                  {"job_weight", registry.job_weight(job.name)}, {"worker", job.worker_rank},
                                  {"pid", job.pid}, {"iteration", job.iteration},
                                  {"timing_reports", job.timing_reports}, {"lanes", std::move(lanes)},
                                  {"layers", std::move(layers)}});
    }
    // Names come from trainers: bytes that are not UTF-8 become U+FFFD.
    return status.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string status_text(const JobRegistry& registry)
{
    const auto k = registry.datapath();
    std::string out = std::string("kernel: ") + (k.connected ? "connected" : "NOT CONNECTED (tcp_mercury loaded?)") +
                      ", " + std::to_string(k.entries) + " entries, " + std::to_string(k.pushes) + " pushes, " +
                      std::to_string(k.errors) + " errors\n";
    if (registry.all().empty())
        out += "no trainers connected\n";
    for (const auto& [session, job] : registry.all()) {
        out += "\njob " + printable(job.name) + " worker " + std::to_string(job.worker_rank) + " pid " +
               std::to_string(job.pid) + ": iteration " + std::to_string(job.iteration) + ", " +
               std::to_string(job.timing_reports) + " timing reports, " + std::to_string(job.lane_flows.size()) +
               " lane connections, job weight " + std::to_string(registry.job_weight(job.name)) +
               (registry.datapath_id(job) ? ", job id " + std::to_string(registry.datapath_id(job)) : "") + "\n";
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
