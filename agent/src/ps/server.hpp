// SPDX-License-Identifier: GPL-2.0
// mercury-ps's network side: accepts workers, proves each knows the job's
// secret, checks every push against the declared shape and answers each
// unit's sum on the connection every worker pushed it on. One job at a
// time; when a member vanishes or a unit waits too long, every member is
// told why and the job ends, so no worker hangs.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "daemon/log.hpp"
#include "ps/aggregator.hpp"
#include "ps/wire.hpp"

namespace mercury {
class Client;
}

namespace mercury::ps {

struct ServerOptions {
    std::string job;
    std::string secret;
    std::string cc = "mercury";          // every connection's congestion control, read back
    Aggregation aggregation = Aggregation::kChunk;
    uint32_t chunk_elems = 16384;        // 64 KiB of float32
    std::chrono::milliseconds stall_timeout{60000};
    std::chrono::milliseconds handshake_timeout{10000};
    uint64_t max_model_bytes = uint64_t{4} << 30;
    uint32_t max_workers = 256;
    uint32_t max_connections = 1024;
    bool use_agent = true;               // rank connections through the local mercuryd
    std::string agent_socket;            // empty: libmercury's default ($MERCURY_SOCKET)
};

// What the server reports as it happens (metrics.hpp counts it); every
// call is on the io thread.
class ServerObserver {
public:
    virtual ~ServerObserver() = default;
    virtual void connection(bool /*accepted*/) {}   // once per connection: joined a job, or refused
    virtual void job_started(uint64_t /*bytes*/) {}
    virtual void job_ended(bool /*failed*/) {}
    virtual void members(size_t /*n*/) {}
    virtual void pushed(uint64_t /*bytes*/) {}
    virtual void answered(uint64_t /*bytes*/) {}
};

class Peer;

class Server {
public:
    Server(boost::asio::io_context& io, const Logger& log, ServerOptions options);
    ~Server();
    // Throws std::runtime_error with the reason if it cannot listen or set the CC.
    void listen(const boost::asio::ip::tcp::endpoint& at);
    boost::asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
    void stop();
    // @observer (not owned) hears of connections, jobs and bytes from now on.
    void set_observer(ServerObserver* observer) { observer_ = observer ? observer : &no_observer_; }

private:
    friend class Peer;
    void accept();
    void tick();
    // Adds an authenticated peer to the job (starting one if none runs); the
    // reason it cannot join, or "".
    std::string admit(const std::shared_ptr<Peer>& peer, const Hello& hello, JobShape shape);
    void pushed(const std::shared_ptr<Peer>& peer, uint32_t key, uint64_t offset, std::span<const float> data);
    void left(Peer& peer, bool said_bye);
    void end_job(const std::string& why);
    void forget(Peer& peer);

    boost::asio::io_context& io_;
    const Logger& log_;
    ServerOptions options_;
    boost::asio::ip::tcp::acceptor acceptor_;
    boost::asio::steady_timer ticker_;
    std::unique_ptr<Client> agent_;
    bool agent_warned_ = false;
    std::set<std::shared_ptr<Peer>> peers_;
    // The job: its aggregator, members by (worker, lane), and per key and
    // worker the connection that worker pushes it on (answers go there).
    std::optional<Aggregator> job_;
    std::map<std::pair<uint32_t, uint32_t>, std::weak_ptr<Peer>> members_;
    std::vector<std::weak_ptr<Peer>> reply_to_;
    uint64_t job_pushed_bytes_ = 0, job_answered_bytes_ = 0;   // this job's payload, for its last log line
    ServerObserver no_observer_;
    ServerObserver* observer_ = &no_observer_;
};

}  // namespace mercury::ps
