// SPDX-License-Identifier: GPL-2.0
#include "daemon/metrics.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>

#include "mercury/uapi.h"
#include "common/printable.hpp"

namespace mercury {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

ClientMetric value_of(MetricType type, double value, Labels labels = {})
{
    ClientMetric m;
    m.label = std::move(labels);
    if (type == MetricType::Counter)
        m.counter.value = value;
    else
        m.gauge.value = value;
    return m;
}

// The datapath's per-netns counters (mercuryctl stats) and their metrics.
struct DatapathMetric {
    const char* stat;
    const char* name;
    MetricType type;
    const char* help;
};
constexpr std::array kDatapathMetrics{
    DatapathMetric{"holds", "mercury_datapath_holds_total", MetricType::Counter,
                   "Flows held at the cwnd floor for a more urgent rank (transitions into held)."},
    DatapathMetric{"releases", "mercury_datapath_releases_total", MetricType::Counter,
                   "Held flows released (transitions out of held)."},
    DatapathMetric{"delay_backoffs", "mercury_datapath_delay_yields_total", MetricType::Counter,
                   "Times a flow yielded to queueing delay caused by more urgent traffic elsewhere."},
    DatapathMetric{"starve_grants", "mercury_datapath_starvation_grants_total", MetricType::Counter,
                   "Holds lifted by the starvation guard (max_hold_ms)."},
    DatapathMetric{"yield_grants", "mercury_datapath_yield_grants_total", MetricType::Counter,
                   "Delay yields a job's flow skipped: it had yielded for max_hold_ms at a stretch."},
    DatapathMetric{"job_cuts", "mercury_datapath_job_cuts_total", MetricType::Counter,
                   "Back-offs a job's flow made with another flow of its job that lost a packet."},
    DatapathMetric{"pacing_cleared", "mercury_datapath_pacing_cleared_total", MetricType::Counter,
                   "Flows switched to mercury whose previous CC's internal pacing (bbr's) was turned off."},
    DatapathMetric{"loss_events", "mercury_datapath_loss_events_total", MetricType::Counter,
                   "Window reductions on loss, recovery or CWR (ssthresh calls)."},
    DatapathMetric{"recoveries", "mercury_datapath_recoveries_total", MetricType::Counter,
                   "Entries of mercury flows into fast recovery."},
    DatapathMetric{"hold_leaks", "mercury_datapath_hold_leaks_total", MetricType::Counter,
                   "Held flows found above the floor outside a window reduction (should stay 0)."},
    DatapathMetric{"zero_windows", "mercury_datapath_zero_windows_total", MetricType::Counter,
                   "Windows found at 0 (or ssthresh at 0 or past 2^31), which the kernel WARNs about; "
                   "repaired (should stay 0)."},
    DatapathMetric{"flows_init", "mercury_datapath_flows_started_total", MetricType::Counter,
                   "Connections that started using mercury in this netns."},
    DatapathMetric{"flows_released", "mercury_datapath_flows_ended_total", MetricType::Counter,
                   "Connections that stopped using mercury in this netns."},
    DatapathMetric{"expired", "mercury_datapath_expired_entries_total", MetricType::Counter,
                   "Table entries removed because their TTL ran out."},
    DatapathMetric{"global_entries", "mercury_datapath_host_entries", MetricType::Gauge,
                   "Table entries of every network namespace on this host."},
};

// Quantile @q of sorted @v (nearest rank).
double quantile(const std::vector<double>& v, double q)
{
    const auto i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

// One job's learned per-layer times (those with a sample) as a summary:
// quantiles over its layers, sum = the whole pass, count = layers timed.
ClientMetric layer_summary(const Job& job, bool forward, const Labels& labels)
{
    std::vector<double> seconds;
    for (size_t i = 0; i < job.timings.layers(); ++i) {
        const uint32_t us = forward ? job.timings.forward_us(i) : job.timings.backward_us(i);
        if (us > 0)
            seconds.push_back(us / 1e6);
    }
    ClientMetric m;
    m.label = labels;
    m.label.push_back({"pass", forward ? "forward" : "backward"});
    std::sort(seconds.begin(), seconds.end());
    m.summary.sample_count = seconds.size();
    for (const double s : seconds)
        m.summary.sample_sum += s;
    if (!seconds.empty())
        for (const double q : {0.5, 0.9, 1.0})
            m.summary.quantile.push_back({q, quantile(seconds, q)});
    return m;
}

std::string errno_name(int error)
{
    const char* name = strerrorname_np(error < 0 ? -error : error);
    return name ? name : "E" + std::to_string(error < 0 ? -error : error);
}

}  // namespace

void MetricsSnapshot::replace(std::vector<MetricFamily> families)
{
    const std::lock_guard lock(mutex_);
    families_ = std::move(families);
}

std::vector<MetricFamily> MetricsSnapshot::Collect() const
{
    const std::lock_guard lock(mutex_);
    auto out = events_->Collect();
    out.insert(out.end(), families_.begin(), families_.end());
    return out;
}

Metrics::Metrics(boost::asio::io_context& io, const std::string& address, const JobRegistry& jobs,
                 KernelSync& kernel, std::chrono::milliseconds every)
    : jobs_(jobs),
      kernel_(kernel),
      every_(every),
      timer_(io),
      registry_(std::make_shared<prometheus::Registry>()),
      pushes_(prometheus::BuildCounter()
                  .Name("mercury_pushes_total")
                  .Help("Entry sets and deletes the agent sent to the datapath.")
                  .Register(*registry_)),
      push_errors_(prometheus::BuildCounter()
                       .Name("mercury_push_errors_total")
                       .Help("Entry sets and deletes the datapath refused, by error (ENOSPC: its table is full).")
                       .Register(*registry_)),
      push_seconds_(prometheus::BuildHistogram()
                        .Name("mercury_push_duration_seconds")
                        .Help("Time to set or delete one entry in the datapath.")
                        .Register(*registry_)
                        .Add({}, prometheus::Histogram::BucketBoundaries{1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2,
                                                                          3e-2, 1e-1})),
      snapshot_(std::make_shared<MetricsSnapshot>(registry_))
{
    pushes_.Add({});
    push_errors_.Add({{"error", "ENOSPC"}});  // a full table: there from the start, to alert on
    try {
        exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
    } catch (const std::exception& e) {
        throw std::runtime_error("cannot serve metrics on " + address + ": " + e.what());
    }
    exposer_->RegisterCollectable(snapshot_);
    kernel_.set_push_observer([this](std::chrono::nanoseconds took, int error) { observe_push(took, error); });
    refresh();
    schedule();
}

Metrics::~Metrics()
{
    kernel_.set_push_observer(nullptr);
    exposer_.reset();  // no scrape runs past this point
}

int Metrics::port() const
{
    const auto ports = exposer_->GetListeningPorts();
    return ports.empty() ? -1 : ports.front();
}

void Metrics::observe_push(std::chrono::nanoseconds took, int error)
{
    snapshot_->update_events([&] {
        pushes_.Add({}).Increment();
        push_seconds_.Observe(std::chrono::duration<double>(took).count());
        if (error != 0)
            push_errors_.Add({{"error", errno_name(error)}}).Increment();
    });
}

void Metrics::schedule()
{
    timer_.expires_after(every_);
    timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec)
            return;
        refresh();
        schedule();
    });
}

void Metrics::refresh()
{
    std::vector<MetricFamily> out;
    const KernelSyncStats k = kernel_.stats();

    out.push_back({"mercury_datapath_connected", "1 while the agent reaches a datapath (module or BPF).",
                   MetricType::Gauge, {value_of(MetricType::Gauge, k.connected ? 1 : 0)}});
    out.push_back({"mercury_datapath_reconnects_total", "Times the agent (re)connected to a datapath.",
                   MetricType::Counter, {value_of(MetricType::Counter, static_cast<double>(k.reconnects))}});
    out.push_back({"mercury_entries", "Flow entries the agent wants in the datapath.", MetricType::Gauge,
                   {value_of(MetricType::Gauge, static_cast<double>(k.entries))}});

    const Stats& d = kernel_.datapath_stats();
    if (!d.empty()) {
        MetricFamily entries{"mercury_datapath_entries", "Table entries in this netns, by kind.", MetricType::Gauge, {}};
        for (const char* kind : {"tag", "flow"}) {
            const auto it = d.find(std::string(kind) + "_entries");
            if (it != d.end())
                entries.metric.push_back(value_of(MetricType::Gauge, static_cast<double>(it->second), {{"kind", kind}}));
        }
        out.push_back(std::move(entries));
        for (const auto& m : kDatapathMetrics)
            if (const auto it = d.find(m.stat); it != d.end())
                out.push_back({m.name, m.help, m.type, {value_of(m.type, static_cast<double>(it->second))}});
    }

    std::array<size_t, MERCURY_NUM_RANKS> flows_by_rank{};
    MetricFamily iteration{"mercury_job_iteration", "The iteration a trainer last reported.", MetricType::Gauge, {}};
    MetricFamily layers{"mercury_learned_layer_seconds",
                        "Learned compute time per layer: quantiles over a job's layers; sum is the whole pass.",
                        MetricType::Summary, {}};
    for (const auto& [session, job] : jobs_.all()) {
        const Labels labels{{"job", printable(job.name)}, {"worker", std::to_string(job.worker_rank)},
                            {"session", std::to_string(session)}};
        for (const auto& [layer, key] : job.flows)
            if (layer < job.priorities.size())
                ++flows_by_rank[std::min<size_t>(job.priorities[layer].rank, MERCURY_NUM_RANKS - 1)];
        for (const auto& [key, rank] : job.lane_flows)
            ++flows_by_rank[std::min<size_t>(rank, MERCURY_NUM_RANKS - 1)];
        iteration.metric.push_back(value_of(MetricType::Gauge, static_cast<double>(job.iteration), labels));
        layers.metric.push_back(layer_summary(job, true, labels));
        layers.metric.push_back(layer_summary(job, false, labels));
    }
    out.push_back({"mercury_jobs", "Trainers connected to the agent.", MetricType::Gauge,
                   {value_of(MetricType::Gauge, static_cast<double>(jobs_.jobs()))}});
    MetricFamily flows{"mercury_flows", "Registered connections, by the rank they carry.", MetricType::Gauge, {}};
    for (size_t rank = 0; rank < flows_by_rank.size(); ++rank)
        flows.metric.push_back(value_of(MetricType::Gauge, static_cast<double>(flows_by_rank[rank]),
                                        {{"rank", std::to_string(rank)}}));
    out.push_back(std::move(flows));
    for (auto* per_job : {&iteration, &layers})
        if (!per_job->metric.empty())
            out.push_back(std::move(*per_job));
    snapshot_->replace(std::move(out));
}

}  // namespace mercury
