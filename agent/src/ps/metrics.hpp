// SPDX-License-Identifier: GPL-2.0
// mercury-ps's Prometheus metrics (--metrics ADDR:PORT, off by default):
// connections accepted and refused, jobs finished and failed, the running
// job's members and declared bytes, bytes pushed and answered. Counters and
// gauges are prometheus-cpp's; the page is served on the server's own io
// thread (Boost.Beast), each connection on its own deadline, so idle or
// slow connections to the port cost a slot each and block no scrape.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <list>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "ps/server.hpp"

namespace mercury::ps {

class Metrics : public ServerObserver {
public:
    // Serves on @io at @at. Throws std::runtime_error naming @at when it
    // cannot listen there.
    Metrics(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& at);
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
    struct Scrape;
    static constexpr size_t kMaxScrapers = 64;   // connections at once; the oldest goes for a new one
    void accept();
    std::string page() const;

    boost::asio::ip::tcp::acceptor acceptor_;
    std::list<std::weak_ptr<Scrape>> scrapes_;   // open connections, oldest first
};

}  // namespace mercury::ps
