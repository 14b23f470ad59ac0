// SPDX-License-Identifier: GPL-2.0
#include "ps/server.hpp"

#include <netinet/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <malloc.h>
#include <openssl/rand.h>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <list>
#include <stdexcept>

#include <mercury/client.hpp>

namespace mercury::ps {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

std::string worker_list(const std::vector<uint32_t>& workers)
{
    std::string out;
    for (uint32_t w : workers)
        out += (out.empty() ? "" : ",") + std::to_string(w);
    return out;
}

}  // namespace

// One worker connection: challenge, hello, then pushes in and sums out.
// Every transfer's completion goes through then(), which checks acting(): once
// the connection is closing or closed, or its job has ended, no handler
// touches the job. (write_next's goes on while closing: the refusal is written.)
class Peer : public std::enable_shared_from_this<Peer> {
public:
    Peer(Server& server, tcp::socket socket, std::string address, std::string host)
        : server_(server), socket_(std::move(socket)), timer_(server.io_), address_(std::move(address)),
          host_(std::move(host))
    {
    }

private:
    // A read's or write's completion handler: @next runs only while the
    // connection may act (acting()) and the transfer succeeded; an error
    // closes it. Every handler of a transfer goes through here.
    auto then(void (Peer::*next)())
    {
        return [self = shared_from_this(), next](const boost::system::error_code& ec, size_t) {
            if (!self->acting())
                return;
            if (ec)
                return self->close();
            ((*self).*next)();
        };
    }

public:
    void start()
    {
        boost::system::error_code ignored;
        socket_.set_option(tcp::no_delay(true), ignored);
        if (RAND_bytes(challenge_.nonce, sizeof(challenge_.nonce)) != 1) {
            close();
            return;
        }
        challenge_.magic = kMagic;
        challenge_.version = kVersion;
        challenge_.flags = server_.options_.payload_tags ? 0 : kUntaggedPayloads;
        challenge_.chunk_elems = server_.options_.chunk_elems;
        timer_.expires_after(server_.options_.handshake_timeout);
        timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
            if (!ec && !self->admitted_)
                self->fail("no handshake within " + std::to_string(self->server_.options_.handshake_timeout.count()) +
                           " ms");
        });
        asio::async_write(socket_, asio::buffer(&challenge_, sizeof(challenge_)), then(&Peer::read_hello));
    }

    // Tells the worker why, then closes: once it has closed its end, or
    // after a second (a member) or a fifth of one (a peer that never
    // authenticated: its slot is bounded and short).
    void refuse(const std::string& why)
    {
        if (closing_ || closed_)
            return;
        closing_ = true;
        end_handshake();
        // Whatever was queued behind the write in flight is moot now.
        if (out_.size() > 1)
            out_.erase(std::next(out_.begin()), out_.end());
        Out e{};
        e.header.type = Type::kError;
        e.text = why.substr(0, kMaxErrorText);
        e.header.count = static_cast<uint32_t>(e.text.size());
        out_.push_back(std::move(e));
        if (out_.size() == 1)
            write_next();
        timer_.expires_after(admitted_ ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(200));
        timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
            if (!ec)
                self->close();
        });
    }

    void send_sum(const Job& job, const Aggregator::Sum& sum, uint64_t from, uint64_t count)
    {
        if (!acting())
            return;
        // A worker pushes a chunk again only after it has its sum, so one
        // round of the job's sums is all a reading worker ever has queued.
        if (queued_bytes_ + count * sizeof(float) > job.sums.shape().bytes() + sizeof(Header) * 1024)
            return fail("does not read its sums");
        queued_bytes_ += count * sizeof(float);
        Out o{};
        o.header.type = Type::kPull;
        o.header.key = sum.key;
        o.header.offset = static_cast<uint32_t>(sum.offset + from);
        o.header.count = static_cast<uint32_t>(count);
        o.header.iteration = sum.iteration;
        o.values = sum.values;
        o.from = from;
        out_.push_back(std::move(o));
        if (out_.size() == 1)
            write_next();
    }

    void close()
    {
        if (closed_)
            return;
        closed_ = true;
        end_handshake();
        timer_.cancel();
        // libmercury would pass a registered socket again to a restarted
        // agent: forget it before its number can name another.
        if (server_.agent_ && member_or_was_)
            server_.agent_->release_socket(socket_.native_handle());
        boost::system::error_code ec;
        socket_.shutdown(tcp::socket::shutdown_both, ec);
        socket_.close(ec);
        auto self = shared_from_this();
        if (job_)
            server_.left(*this, said_bye_);
        server_.forget(*this);
    }

    int fd() { return socket_.native_handle(); }
    const std::string& address() const { return address_; }
    uint32_t worker() const { return hello_.worker; }
    uint32_t lane() const { return hello_.lane; }
    // The job this connection is a member of, or none.
    const std::shared_ptr<Job>& job() const { return job_; }
    void join_job(std::shared_ptr<Job> job)
    {
        job_ = std::move(job);
        member_or_was_ = true;
    }
    void leave_job() { job_.reset(); }

private:
    struct Out {
        Header header;
        std::shared_ptr<const std::vector<float>> values;
        uint64_t from = 0;
        std::string text;
        Tag tag{};
    };

    // What of a frame's payload its tag covers.
    std::span<const uint8_t> tagged(std::span<const uint8_t> payload) const
    {
        return challenge_.flags & kUntaggedPayloads ? std::span<const uint8_t>() : payload;
    }

    bool acting() const { return !closing_ && !closed_ && (!admitted_ || (job_ && !job_->ended)); }

    void end_handshake()
    {
        if (std::exchange(in_handshake_, false))
            server_.admission_.handshake_over(host_);
    }

    // A member that breaks the rules ends the job (the others would wait
    // for its chunks); anyone else is only refused.
    void fail(const std::string& why)
    {
        if (closing_ || closed_)
            return;
        if (!admitted_) {
            server_.refused(host_, address_, why);
            server_.observer_->connection(false);
        } else {
            server_.log_.warn("dropping worker connection", {{"peer", address_}, {"reason", why}});
        }
        if (job_ && !job_->ended)
            server_.end_job("worker " + std::to_string(worker()) + " lane " + std::to_string(lane()) + ": " + why);
        refuse(why);
    }

    void read_hello()
    {
        // The first bytes alone: another version's Hello has another length,
        // and it must hear why, not wait for the deadline.
        asio::async_read(socket_, asio::buffer(&hello_, kHelloPrefix), then(&Peer::on_hello_prefix));
    }

    void on_hello_prefix()
    {
        if (hello_.magic != kMagic)
            return fail("not a mercury-ps client");
        // Version 1's frames had a 16-byte header and no tag: its worker
        // reads our refusal in its own layout.
        v1_peer_ = hello_.version == 1;
        if (hello_.version != kVersion)
            return fail("this mercury-ps speaks version " + std::to_string(kVersion) + ", the worker version " +
                        std::to_string(hello_.version) + ": upgrade both to the same release");
        if (hello_.job_len == 0 || hello_.job_len > kMaxJobName)
            return fail("job name must be 1.." + std::to_string(kMaxJobName) + " bytes");
        job_name_.resize(hello_.job_len);
        auto* rest = reinterpret_cast<uint8_t*>(&hello_) + kHelloPrefix;
        const std::array<asio::mutable_buffer, 2> buffers{asio::buffer(rest, sizeof(Hello) - kHelloPrefix),
                                                          asio::buffer(job_name_)};
        asio::async_read(socket_, buffers, then(&Peer::authenticate));
    }

    void authenticate()
    {
        const auto& o = server_.options_;
        // Our frames' tags from now on: a worker that holds the secret can
        // check even a refusal.
        down_.emplace(o.secret, challenge_.nonce, hello_.nonce, FrameMac::Direction::kToWorker);
        const auto want = hello_mac(o.secret, challenge_.nonce, hello_, job_name_);
        // The MAC covers the job name, so a wrong job fails here too; say which.
        if (job_name_ != o.job)
            return fail("this server serves job '" + o.job + "', not '" + job_name_ + "'");
        if (!same_mac(want, hello_.mac))
            return fail("authentication failed: wrong secret for job '" + o.job + "'");
        up_.emplace(o.secret, challenge_.nonce, hello_.nonce, FrameMac::Direction::kToServer);
        if (hello_.flags != challenge_.flags)
            return fail(o.payload_tags ? "the worker asked for frames without payload tags; this server tags them"
                                       : "this server runs with --payload-tags off (a trusted testbed's); the worker "
                                         "did not accept it");
        if (!hello_.workers || hello_.workers > o.max_workers)
            return fail(std::to_string(hello_.workers) + " workers (1.." + std::to_string(o.max_workers) + ")");
        if (hello_.worker >= hello_.workers)
            return fail("worker " + std::to_string(hello_.worker) + " of " + std::to_string(hello_.workers));
        if (!hello_.lanes || hello_.lanes > kMaxLanes || hello_.lane >= hello_.lanes)
            return fail("lane " + std::to_string(hello_.lane) + " of " + std::to_string(hello_.lanes));
        if (!hello_.key_count || hello_.key_count > kMaxKeys)
            return fail("1.." + std::to_string(kMaxKeys) + " keys, not " + std::to_string(hello_.key_count));
        keys_.resize(hello_.key_count);
        const std::array<asio::mutable_buffer, 2> buffers{asio::buffer(keys_), asio::buffer(in_tag_)};
        asio::async_read(socket_, buffers, then(&Peer::on_keys));
    }

    void on_keys()
    {
        const auto* keys = reinterpret_cast<const uint8_t*>(keys_.data());
        if (!same_mac(up_->next({keys, keys_.size() * sizeof(uint64_t)}), in_tag_))
            return fail("the key sizes failed authentication");
        join();
    }

    void join()
    {
        JobShape shape{hello_.workers, std::move(keys_)};
        if (const std::string why = server_.admit(shared_from_this(), hello_, std::move(shape)); !why.empty())
            return fail(why);
        admitted_ = true;
        end_handshake();
        timer_.cancel();
        Out ready{};
        ready.header.type = Type::kReady;
        out_.push_back(std::move(ready));
        if (out_.size() == 1)
            write_next();
        read_header();
    }

    void read_header()
    {
        asio::async_read(socket_, asio::buffer(&in_, sizeof(in_)), then(&Peer::on_header));
    }

    // A frame's header: its length is checked against the job before a
    // byte of its payload is read; nothing is acted on before its tag.
    void on_header()
    {
        size_t payload = 0;
        if (in_.type == Type::kPush) {
            try {
                job_->sums.check(in_.key, in_.offset, in_.count);
            } catch (const ProtocolError& e) {
                return fail(e.what());
            }
            payload = in_.count;
        } else if (in_.type != Type::kBye && in_.type != Type::kAckPushes) {
            return fail("unexpected message type " + std::to_string(static_cast<unsigned>(in_.type)));
        }
        payload_.resize(payload);
        const std::array<asio::mutable_buffer, 2> buffers{asio::buffer(payload_), asio::buffer(in_tag_)};
        asio::async_read(socket_, buffers, then(&Peer::on_frame));
    }

    void on_frame()
    {
        const auto* payload = reinterpret_cast<const uint8_t*>(payload_.data());
        const auto tag = up_->next({reinterpret_cast<const uint8_t*>(&in_), sizeof(in_)},
                                   tagged({payload, payload_.size() * sizeof(float)}));
        if (!same_mac(tag, in_tag_))
            return fail("a message failed authentication (frame " + std::to_string(up_->frames() - 1) + ")");
        if (in_.type == Type::kBye) {
            // Out of the job now; the close tells the worker so (it waits
            // for it before the next run can start).
            said_bye_ = true;
            server_.log_.debug("worker said bye", {{"peer", address_}, {"worker", std::to_string(worker())}});
            return close();
        }
        if (in_.type == Type::kAckPushes) {
            ack_pushes_ = true;
            return read_header();
        }
        // The handler's own hold on the job: whatever the push ends (this
        // connection, the job), its state outlives this call.
        const std::shared_ptr<Job> job = job_;
        try {
            server_.pushed(*job, shared_from_this(), in_.key, in_.offset, in_.iteration, payload_);
        } catch (const ProtocolError& e) {
            return fail(e.what());
        }
        if (!acting())
            return;
        if (ack_pushes_)
            ack(in_);
        read_header();
    }

    // The worker's scheduler (ByteScheduler's credit) learns its push is in:
    // ahead of queued sums, behind the write in flight. At most one round of
    // the job's chunks: a worker pushes a chunk again only after its sum.
    void ack(const Header& push)
    {
        Out a{};
        a.header = push;
        a.header.type = Type::kAck;
        auto at = out_.empty() ? out_.end() : std::next(out_.begin());
        while (at != out_.end() && at->header.type == Type::kAck)
            ++at;
        out_.insert(at, std::move(a));
        if (out_.size() == 1)
            write_next();
    }

    void write_next()
    {
        Out& o = out_.front();
        std::span<const uint8_t> payload;
        if (o.values)
            payload = {reinterpret_cast<const uint8_t*>(o.values->data() + o.from), o.header.count * sizeof(float)};
        else if (!o.text.empty())
            payload = {reinterpret_cast<const uint8_t*>(o.text.data()), o.text.size()};
        // Tagged as it goes out: the frame's number is its place on the wire
        // (an Ack overtakes queued sums). Before the Hello, no worker nonce:
        // zeros (no worker can check that refusal, and it says so).
        if (!down_)
            down_.emplace(server_.options_.secret, challenge_.nonce, std::array<uint8_t, kNonceBytes>{},
                          FrameMac::Direction::kToWorker);
        o.tag = down_->next({reinterpret_cast<const uint8_t*>(&o.header), sizeof(o.header)}, tagged(payload));
        constexpr size_t kV1Header = 16;
        const std::array<asio::const_buffer, 3> buffers{
            asio::buffer(&o.header, v1_peer_ ? kV1Header : sizeof(o.header)),
            asio::buffer(payload.data(), payload.size()), asio::buffer(o.tag, v1_peer_ ? 0 : o.tag.size())};
        asio::async_write(socket_, buffers, [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
            if (self->closed_)
                return;
            if (ec)
                return self->close();
            const bool was_error = self->out_.front().header.type == Type::kError;
            if (self->out_.front().values)
                self->queued_bytes_ -= self->out_.front().header.count * sizeof(float);
            self->out_.pop_front();
            if (was_error) {
                boost::system::error_code ignored;
                self->socket_.shutdown(tcp::socket::shutdown_send, ignored);
                return;  // the worker closes; the timer closes otherwise
            }
            if (!self->out_.empty())
                self->write_next();
        });
    }

    Server& server_;
    tcp::socket socket_;
    asio::steady_timer timer_;
    std::string address_;   // host:port, for the log
    std::string host_;      // whose Admission slot it holds
    Challenge challenge_{};
    Hello hello_{};
    std::string job_name_;
    std::vector<uint64_t> keys_;
    std::optional<FrameMac> up_, down_;   // tags of the worker's frames and of ours
    Header in_{};
    std::vector<float> payload_;
    Tag in_tag_{};
    // A list: an Ack goes in behind the message being written, which must
    // not move (a deque's insert in the middle moves every element, and the
    // write in flight sent whatever then lay at the old address).
    std::list<Out> out_;
    uint64_t queued_bytes_ = 0;   // payload of the sums in out_
    std::shared_ptr<Job> job_;
    bool ack_pushes_ = false;
    bool in_handshake_ = true;    // holds an Admission slot
    bool v1_peer_ = false;        // a version 1 worker, being refused
    bool admitted_ = false, member_or_was_ = false, said_bye_ = false, closing_ = false, closed_ = false;
};

Server::Server(asio::io_context& io, const Logger& log, ServerOptions options)
    : io_(io), log_(log), options_(std::move(options)), acceptor_(io), ticker_(io), admission_(options_.admission)
{
    if (const std::string why = weak_secret(options_.secret); !why.empty())
        throw std::runtime_error(why);
    if (options_.use_agent)
        agent_ = std::make_unique<Client>(options_.job, 1000,
                                          options_.agent_socket.empty() ? nullptr : options_.agent_socket.c_str());
}

Server::~Server() = default;

void Server::listen(const tcp::endpoint& at)
{
    acceptor_.open(at.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    // Accepted connections inherit the listener's congestion control; each
    // is read back all the same.
    if (const std::string why = mercury::set_congestion_control(acceptor_.native_handle(), options_.cc); !why.empty())
        throw std::runtime_error(why + " (is it loaded and in net.ipv4.tcp_allowed_congestion_control?)");
    boost::system::error_code ec;
    acceptor_.bind(at, ec);
    if (!ec)
        acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
        throw std::runtime_error("cannot listen on " + at.address().to_string() + ":" + std::to_string(at.port()) +
                                 ": " + ec.message());
    accept();
    tick();
}

void Server::stop()
{
    boost::system::error_code ec;
    acceptor_.close(ec);
    ticker_.cancel();
    for (const auto& p : std::vector(peers_.begin(), peers_.end()))
        p->close();
}

void Server::accept()
{
    acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted)
            return;
        if (ec) {
            // Out of descriptors or memory: the pending connection stays in
            // the backlog, so accepting again at once would spin. Back off.
            refused("", "?", "cannot accept: " + ec.message());
            accept_backoff_ = true;
            return;
        }
        boost::system::error_code ep_ec;
        const auto remote = socket.remote_endpoint(ep_ec);
        const std::string host = ep_ec ? "?" : remote.address().to_string();
        const std::string address = ep_ec ? "?" : host + ":" + std::to_string(remote.port());
        std::string why;
        if (peers_.size() >= options_.max_connections)
            why = "at max connections (" + std::to_string(options_.max_connections) + ")";
        else
            why = admission_.open(host, Admission::Clock::now());
        if (why.empty() && mercury::congestion_control(socket.native_handle()) != options_.cc)
            if ((why = mercury::set_congestion_control(socket.native_handle(), options_.cc)); !why.empty())
                admission_.handshake_over(host);
        if (why.empty()) {
            auto peer = std::make_shared<Peer>(*this, std::move(socket), address, host);
            peers_.insert(peer);
            peer->start();
        } else {
            boost::system::error_code ignored;
            socket.close(ignored);
            refused(host, address, "connection closed at accept: " + why);
            observer_->connection(false);
        }
        accept();
    });
}

void Server::refused(const std::string& host, const std::string& address, const std::string& why)
{
    const auto now = Admission::Clock::now();
    if (!host.empty())
        admission_.refused(host, now);
    uint64_t suppressed = 0;
    const bool log = admission_.log_now(now, suppressed);
    if (suppressed)
        log_.warn("refusals not logged (at most " + std::to_string(options_.admission.log_lines_per_second) +
                      " a second)",
                  {{"count", std::to_string(suppressed)}});
    if (log)
        log_.warn("refusing connection", {{"peer", address}, {"reason", why}});
}

void Server::tick()
{
    ticker_.expires_after(std::chrono::milliseconds(250));
    ticker_.async_wait([this](const boost::system::error_code& ec) {
        if (ec)
            return;
        if (std::exchange(accept_backoff_, false))
            accept();
        if (job_) {
            if (const auto stall = job_->sums.oldest_incomplete();
                stall && Aggregator::Clock::now() - stall->since > options_.stall_timeout)
                end_job("timed out: key " + std::to_string(stall->key) + " offset " + std::to_string(stall->offset) +
                        " waited " + std::to_string(options_.stall_timeout.count()) + " ms for worker(s) " +
                        worker_list(stall->missing));
        }
        tick();
    });
}

std::string Server::admit(const std::shared_ptr<Peer>& peer, const Hello& hello, JobShape shape)
{
    // Offsets are 32-bit element counts: no key may be larger.
    const bool key_sizes_ok = std::all_of(shape.key_elems.begin(), shape.key_elems.end(),
                                          [](uint64_t n) { return n > 0 && n <= UINT32_MAX; });
    const uint64_t footprint = shape.footprint(options_.chunk_elems);
    if (footprint > options_.max_model_bytes || !key_sizes_ok)
        return "declared " + std::to_string(shape.bytes()) + " bytes in " + std::to_string(shape.key_elems.size()) +
               " keys for " + std::to_string(shape.workers) + " workers, " + std::to_string(footprint) +
               " bytes with their records (every key 1.." + std::to_string(UINT32_MAX) + " elements, at most " +
               std::to_string(options_.max_model_bytes) + " bytes: --max-model-mb)";
    if (ended_runs_.count(hello.run))
        return "run " + std::to_string(hello.run) + " has ended; a worker of a new run needs the new run's id";
    if (job_ && hello.run != job_->run)
        return "worker of run " + std::to_string(hello.run) + ", but the server runs run " +
               std::to_string(job_->run) + " of job '" + options_.job + "' (one run at a time)";
    if (job_ && !(job_->sums.shape() == shape))
        return "declared a different shape from the job's other workers (" + std::to_string(shape.workers) +
               " workers, " + std::to_string(shape.key_elems.size()) + " keys, " + std::to_string(shape.bytes()) +
               " bytes; the job has " + std::to_string(job_->sums.shape().workers) + ", " +
               std::to_string(job_->sums.shape().key_elems.size()) + ", " +
               std::to_string(job_->sums.shape().bytes()) + ")";
    if (job_) {
        if (job_->members.count({hello.worker, hello.lane}))
            return "worker " + std::to_string(hello.worker) + " lane " + std::to_string(hello.lane) +
                   " is connected already";
        if (const auto it = job_->instances.find(hello.worker);
            it != job_->instances.end() && it->second != hello.instance)
            return "worker " + std::to_string(hello.worker) + " is a member already, from another process";
    }
    if (!job_) {
        try {
            job_ = std::make_shared<Job>(std::move(shape), options_.chunk_elems, options_.aggregation, hello.run);
            job_->reply_lane.assign(job_->sums.shape().key_elems.size() * job_->sums.shape().workers, 0);
        } catch (const std::bad_alloc&) {
            job_.reset();
            return "the server cannot allocate the job's " + std::to_string(footprint) + " bytes";
        }
        observer_->job_started(job_->sums.shape().bytes());
        log_.info("job started", {{"job", options_.job},
                                  {"run", std::to_string(hello.run)},
                                  {"workers", std::to_string(job_->sums.shape().workers)},
                                  {"keys", std::to_string(job_->sums.shape().key_elems.size())},
                                  {"bytes", std::to_string(job_->sums.shape().bytes())}});
    }
    job_->members[{hello.worker, hello.lane}] = peer;
    job_->instances.emplace(hello.worker, hello.instance);
    peer->join_job(job_);
    observer_->connection(true);
    observer_->members(job_->members.size());
    if (agent_) {
        // Registered or not, libmercury keeps the socket's number (for a
        // restarted agent) until the peer's close releases it.
        if (const int rc = agent_->register_lane(hello.lane, hello.lanes, peer->fd()); rc < 0 && !agent_warned_) {
            agent_warned_ = true;
            log_.warn("cannot rank connections through mercuryd; serving them unranked",
                      {{"error", std::to_string(rc)}});
        }
    }
    log_.debug("worker joined", {{"peer", peer->address()}, {"worker", std::to_string(hello.worker)},
                                 {"lane", std::to_string(hello.lane)}});
    return "";
}

void Server::pushed(Job& job, const std::shared_ptr<Peer>& peer, uint32_t key, uint64_t offset, uint32_t iteration,
                    std::span<const float> data)
{
    const uint32_t workers = job.sums.shape().workers;
    const auto sum = job.sums.add(peer->worker(), key, offset, iteration, data, Aggregator::Clock::now());
    job.reply_lane[static_cast<size_t>(key) * workers + peer->worker()] = static_cast<uint8_t>(peer->lane());
    observer_->pushed(data.size_bytes());
    job.pushed_bytes += data.size_bytes();
    if (!sum)
        return;
    std::vector<std::shared_ptr<Peer>> to;
    for (uint32_t w = 0; w < workers; ++w) {
        const auto it = job.members.find({w, job.reply_lane[static_cast<size_t>(key) * workers + w]});
        if (it != job.members.end())
            if (auto p = it->second.lock())
                to.push_back(std::move(p));
    }
    // One pull per chunk: a worker places each as it comes. A worker that
    // does not read ends the job, and with it this loop.
    for (const auto& p : to)
        for (uint64_t from = 0; !job.ended && from < sum->values->size(); from += options_.chunk_elems)
            p->send_sum(job, *sum, from, std::min<uint64_t>(options_.chunk_elems, sum->values->size() - from));
    observer_->answered(sum->values->size() * sizeof(float) * to.size());
    job.answered_bytes += sum->values->size() * sizeof(float) * to.size();
}

void Server::left(Peer& peer, bool said_bye)
{
    const std::shared_ptr<Job> job = peer.job();
    peer.leave_job();
    if (job->ended)
        return;
    job->members.erase({peer.worker(), peer.lane()});
    observer_->members(job->members.size());
    if (!said_bye) {
        end_job("worker " + std::to_string(peer.worker()) + " (" + peer.address() + ") closed lane " +
                std::to_string(peer.lane()) + " without saying bye");
        return;
    }
    if (job->members.empty()) {
        log_.info("job finished", {{"job", options_.job},
                                   {"run", std::to_string(job->run)},
                                   {"pushed_bytes", std::to_string(job->pushed_bytes)},
                                   {"answered_bytes", std::to_string(job->answered_bytes)}});
        retire(*job);
        observer_->job_ended(false);
    }
}

void Server::end_job(const std::string& why)
{
    if (!job_)
        return;
    const std::shared_ptr<Job> job = job_;
    log_.error("ending job", {{"job", options_.job},
                              {"run", std::to_string(job->run)},
                              {"reason", why},
                              {"pushed_bytes", std::to_string(job->pushed_bytes)},
                              {"answered_bytes", std::to_string(job->answered_bytes)}});
    retire(*job);
    observer_->job_ended(true);
    observer_->members(0);
    for (auto& [_, weak] : std::exchange(job->members, {}))
        if (const auto p = weak.lock()) {
            p->leave_job();
            p->refuse("mercury-ps ended the job: " + why);
        }
}

void Server::retire(Job& job)
{
    // No handler acts on it from now on; its memory goes with the last
    // handler holding it, and the allocator gives it back to the system
    // (glibc keeps freed heap otherwise: a finished job would pin its RSS).
    job.ended = true;
    if (ended_runs_.insert(job.run).second) {
        ended_order_.push_back(job.run);
        if (ended_order_.size() > kEndedRuns) {
            ended_runs_.erase(ended_order_.front());
            ended_order_.erase(ended_order_.begin());
        }
    }
    if (job_.get() == &job)
        job_.reset();
    asio::post(io_, [] { malloc_trim(0); });
}

void Server::forget(Peer& peer)
{
    for (auto it = peers_.begin(); it != peers_.end(); ++it)
        if (it->get() == &peer) {
            peers_.erase(it);
            return;
        }
}

}  // namespace mercury::ps
