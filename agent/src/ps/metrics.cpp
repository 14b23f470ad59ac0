// SPDX-License-Identifier: GPL-2.0
#include "ps/metrics.hpp"

#include <stdexcept>

namespace mercury::ps {

namespace {

prometheus::Counter& counter(prometheus::Registry& r, const std::string& name, const std::string& help,
                             const prometheus::Labels& labels = {})
{
    return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Gauge& gauge(prometheus::Registry& r, const std::string& name, const std::string& help)
{
    return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

Metrics::Metrics(const std::string& address)
    : registry_(std::make_shared<prometheus::Registry>()),
      accepted_(counter(*registry_, "mercury_ps_connections_total", "worker connections by outcome",
                        {{"result", "accepted"}})),
      refused_(counter(*registry_, "mercury_ps_connections_total", "worker connections by outcome",
                       {{"result", "refused"}})),
      finished_(counter(*registry_, "mercury_ps_jobs_total", "jobs by how they ended", {{"end", "finished"}})),
      failed_(counter(*registry_, "mercury_ps_jobs_total", "jobs by how they ended", {{"end", "failed"}})),
      members_(gauge(*registry_, "mercury_ps_members", "connections in the running job")),
      job_bytes_(gauge(*registry_, "mercury_ps_job_bytes", "gradient bytes the running job declared")),
      pushed_(counter(*registry_, "mercury_ps_pushed_bytes_total", "gradient bytes workers pushed")),
      answered_(counter(*registry_, "mercury_ps_answered_bytes_total", "summed bytes sent back to workers"))
{
    try {
        exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
    } catch (const std::exception& e) {
        throw std::runtime_error("cannot serve metrics on " + address + ": " + e.what());
    }
    exposer_->RegisterCollectable(registry_);
}

Metrics::~Metrics() = default;

int Metrics::port() const
{
    return exposer_->GetListeningPorts().front();
}

void Metrics::connection(bool accepted)
{
    (accepted ? accepted_ : refused_).Increment();
}

void Metrics::job_started(uint64_t bytes)
{
    job_bytes_.Set(static_cast<double>(bytes));
}

void Metrics::job_ended(bool failed)
{
    (failed ? failed_ : finished_).Increment();
    job_bytes_.Set(0);
}

void Metrics::members(size_t n)
{
    members_.Set(static_cast<double>(n));
}

void Metrics::pushed(uint64_t bytes)
{
    pushed_.Increment(static_cast<double>(bytes));
}

void Metrics::answered(uint64_t bytes)
{
    answered_.Increment(static_cast<double>(bytes));
}

}  // namespace mercury::ps
