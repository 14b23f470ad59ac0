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

#include "common/log.hpp"
#include "ps/admission.hpp"
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
    std::chrono::milliseconds handshake_timeout{3000};   // from accept to Ready
    uint64_t max_model_bytes = uint64_t{4} << 30;        // a job's footprint, metadata included
    uint32_t max_workers = 256;
    uint32_t max_connections = 4096;
    bool use_agent = true;               // rank connections through the local mercuryd
    std::string agent_socket;            // empty: libmercury's default ($MERCURY_SOCKET)
    Admission::Limits admission;         // before authentication
    bool payload_tags = true;            // false: frames' tags cover headers only (kUntaggedPayloads)
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

// One run of the job: its sums, its members and where each unit's sum goes.
// The server holds it while it runs, and every handler of a member holds it
// for as long as that handler runs: ending a job marks it ended (no handler
// acts on an ended job) and its memory goes with the last holder, never
// from under a handler.
struct Job {
    Job(JobShape shape, uint32_t chunk_elems, Aggregation aggregation, uint64_t run_id)
        : sums(std::move(shape), chunk_elems, aggregation), run(run_id) {}
    Aggregator sums;
    uint64_t run;                                // every member's Hello names it
    std::map<uint32_t, uint64_t> instances;      // worker -> the process its lanes come from
    // Members by (worker, lane), and per key and worker the lane that worker
    // pushes it on (its sum goes back there).
    std::map<std::pair<uint32_t, uint32_t>, std::weak_ptr<Peer>> members;
    std::vector<uint8_t> reply_lane;
    uint64_t pushed_bytes = 0, answered_bytes = 0;   // this run's payload, for its last log line
    bool ended = false;
};

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
    // A member's push into @job (the one it joined, still running).
    void pushed(Job& job, const std::shared_ptr<Peer>& peer, uint32_t key, uint64_t offset, uint32_t iteration,
                std::span<const float> data);
    void left(Peer& peer, bool said_bye);
    void end_job(const std::string& why);
    // Marks @job ended and forgets it; its run may not join again.
    void retire(Job& job);
    // Logs a refusal of @address (host:port; rate-limited), and counts it
    // against @host (none if empty: an accept that failed).
    void refused(const std::string& host, const std::string& address, const std::string& why);
    void forget(Peer& peer);

    boost::asio::io_context& io_;
    const Logger& log_;
    ServerOptions options_;
    boost::asio::ip::tcp::acceptor acceptor_;
    boost::asio::steady_timer ticker_;
    std::unique_ptr<Client> agent_;
    bool agent_warned_ = false;
    std::set<std::shared_ptr<Peer>> peers_;
    std::shared_ptr<Job> job_;   // the running one, or none
    static constexpr size_t kEndedRuns = 1024;
    bool accept_backoff_ = false;   // accept() waits for the next tick
    std::set<uint64_t> ended_runs_;   // the last kEndedRuns runs' ids: none may join again
    std::vector<uint64_t> ended_order_;
    Admission admission_;
    ServerObserver no_observer_;
    ServerObserver* observer_ = &no_observer_;
};

}  // namespace mercury::ps
