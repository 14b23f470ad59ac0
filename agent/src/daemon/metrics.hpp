// SPDX-License-Identifier: GPL-2.0
// Prometheus exposition of what mercuryd does (--metrics=ADDR:PORT, off by
// default): jobs, flows per rank, pushes and their latency, the datapath's
// counters for this netns, and a summary of the learned per-layer timings.
//
// Scrapes run on prometheus-cpp's HTTP threads; the agent's state lives on
// the io thread. So the io thread copies what it knows into a snapshot every
// refresh, and a scrape reads only that snapshot (at most one refresh old).
// Push counts and latencies are updated as pushes happen, under the
// snapshot's lock.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "daemon/jobs.hpp"
#include "daemon/kernel_sync.hpp"

namespace mercury {

// What a scrape sees: the io thread's latest copy of the agent's and the
// datapath's state, and the event metrics (pushes, their latency), which
// change only under the same lock, so a scrape never sees half an update.
class MetricsSnapshot : public prometheus::Collectable {
public:
    explicit MetricsSnapshot(std::shared_ptr<prometheus::Registry> events) : events_(std::move(events)) {}
    void replace(std::vector<prometheus::MetricFamily> families);
    template <typename Change>
    void update_events(Change&& change)
    {
        const std::lock_guard lock(mutex_);
        change();
    }
    std::vector<prometheus::MetricFamily> Collect() const override;

private:
    mutable std::mutex mutex_;
    std::shared_ptr<prometheus::Registry> events_;
    std::vector<prometheus::MetricFamily> families_;
};

class Metrics {
public:
    // Listens on @address ("ADDR:PORT"); throws std::runtime_error naming
    // the address when it cannot.
    Metrics(boost::asio::io_context& io, const std::string& address, const JobRegistry& jobs, KernelSync& kernel,
            std::chrono::milliseconds every);
    ~Metrics();

    // The port it listens on (useful with port 0).
    int port() const;

private:
    void schedule();
    void refresh();
    void observe_push(std::chrono::nanoseconds took, int error);

    const JobRegistry& jobs_;
    KernelSync& kernel_;
    std::chrono::milliseconds every_;
    boost::asio::steady_timer timer_;
    std::shared_ptr<prometheus::Registry> registry_;
    prometheus::Family<prometheus::Counter>& pushes_;
    prometheus::Family<prometheus::Counter>& push_errors_;
    prometheus::Histogram& push_seconds_;
    std::shared_ptr<MetricsSnapshot> snapshot_;
    std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace mercury
