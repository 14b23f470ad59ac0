// SPDX-License-Identifier: GPL-2.0
// mercury-ps's Prometheus metrics (--metrics ADDR:PORT, off by default):
// connections accepted and refused, jobs finished and failed, the running
// job's members and declared bytes, bytes pushed and answered. Counters and
// gauges are prometheus-cpp's (thread-safe), updated on the io thread.
#pragma once

#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "ps/server.hpp"

namespace mercury::ps {

class Metrics : public ServerObserver {
public:
    // Throws std::runtime_error naming @address when it cannot listen there.
    explicit Metrics(const std::string& address);
    ~Metrics() override;
    int port() const;

    void connection(bool accepted) override;
    void job_started(uint64_t bytes) override;
    void job_ended(bool failed) override;
    void members(size_t n) override;
    void pushed(uint64_t bytes) override;
    void answered(uint64_t bytes) override;

private:
    std::shared_ptr<prometheus::Registry> registry_;
    prometheus::Counter& accepted_;
    prometheus::Counter& refused_;
    prometheus::Counter& finished_;
    prometheus::Counter& failed_;
    prometheus::Gauge& members_;
    prometheus::Gauge& job_bytes_;
    prometheus::Counter& pushed_;
    prometheus::Counter& answered_;
    std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace mercury::ps
