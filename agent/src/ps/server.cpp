// SPDX-License-Identifier: GPL-2.0
#include "ps/server.hpp"

#include <netinet/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <openssl/rand.h>

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

std::string congestion_control_of(int fd)
{
    char name[16] = {};  // TCP_CA_NAME_MAX
    socklen_t len = sizeof(name);
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0)
        return "?";
    return std::string(name, strnlen(name, sizeof(name)));
}

// Sets @cc on @fd and reads it back; the reason it did not take, or "".
std::string pin_congestion_control(int fd, const std::string& cc)
{
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.data(), static_cast<socklen_t>(cc.size())) != 0)
        return "cannot set congestion control " + cc + ": " + std::strerror(errno);
    if (const std::string got = congestion_control_of(fd); got != cc)
        return "congestion control reads back " + got + ", not " + cc;
    return "";
}

std::string worker_list(const std::vector<uint32_t>& workers)
{
    std::string out;
    for (uint32_t w : workers)
        out += (out.empty() ? "" : ",") + std::to_string(w);
    return out;
}

}  // namespace

// One worker connection: challenge, hello, then pushes in and sums out.
class Peer : public std::enable_shared_from_this<Peer> {
public:
    Peer(Server& server, tcp::socket socket) : server_(server), socket_(std::move(socket)), timer_(server.io_)
    {
        boost::system::error_code ec;
        const auto remote = socket_.remote_endpoint(ec);
        address_ = ec ? "?" : remote.address().to_string() + ":" + std::to_string(remote.port());
    }

    void start()
    {
        socket_.set_option(tcp::no_delay(true));
        if (RAND_bytes(challenge_.nonce, sizeof(challenge_.nonce)) != 1) {
            close();
            return;
        }
        challenge_.magic = kMagic;
        challenge_.version = kVersion;
        challenge_.chunk_elems = server_.options_.chunk_elems;
        timer_.expires_after(server_.options_.handshake_timeout);
        timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
            if (!ec && !self->admitted_)
                self->fail("no handshake within " +
                             std::to_string(self->server_.options_.handshake_timeout.count()) + " ms");
        });
        asio::async_write(socket_, asio::buffer(&challenge_, sizeof(challenge_)),
                          [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                              if (ec)
                                  return self->close();
                              self->read_hello();
                          });
    }

    // Tells the worker why, then closes (after at most a second of trying).
    void refuse(const std::string& why)
    {
        if (closing_ || closed_)
            return;
        closing_ = true;
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
        timer_.expires_after(std::chrono::seconds(1));
        timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
            if (!ec)
                self->close();
        });
    }

    void send_sum(const Aggregator::Sum& sum, uint64_t from, uint64_t count)
    {
        if (closing_ || closed_)
            return;
        // A worker pushes a chunk again only after it has its sum, so one
        // round of the job's sums is all a reading worker ever has queued.
        if (queued_bytes_ + count * sizeof(float) > server_.job_->shape().bytes() + sizeof(Header) * 1024)
            return fail("does not read its sums");
        queued_bytes_ += count * sizeof(float);
        Out o{};
        o.header.type = Type::kPull;
        o.header.key = sum.key;
        o.header.offset = static_cast<uint32_t>(sum.offset + from);
        o.header.count = static_cast<uint32_t>(count);
        o.values = sum.values;
        o.from = from;
        out_.push_back(std::move(o));
        if (out_.size() == 1)
            write_next();
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

    void close()
    {
        if (closed_)
            return;
        closed_ = true;
        timer_.cancel();
        // libmercury keeps a duplicate of a registered socket: without the
        // release (and the shutdown) the worker would never see our close.
        if (server_.agent_ && member_or_was_)
            server_.agent_->release_socket(socket_.native_handle());
        boost::system::error_code ec;
        socket_.shutdown(tcp::socket::shutdown_both, ec);
        socket_.close(ec);
        auto self = shared_from_this();
        if (member_)
            server_.left(*this, said_bye_);
        server_.forget(*this);
    }

    int fd() { return socket_.native_handle(); }
    const std::string& address() const { return address_; }
    uint32_t worker() const { return hello_.worker; }
    uint32_t lane() const { return hello_.lane; }
    void set_member(bool member)
    {
        member_ = member;
        member_or_was_ |= member;
    }

private:
    struct Out {
        Header header;
        std::shared_ptr<const std::vector<float>> values;
        uint64_t from = 0;
        std::string text;
    };

    // A member that breaks the rules ends the job (the others would wait
    // for its chunks); anyone else is only refused.
    void fail(const std::string& why)
    {
        server_.log_.warn("dropping worker connection", {{"peer", address_}, {"reason", why}});
        if (!admitted_ && !closing_)
            server_.observer_->connection(false);
        if (member_)
            server_.end_job("worker " + std::to_string(worker()) + " lane " + std::to_string(lane()) + ": " + why);
        refuse(why);
    }

    void read_hello()
    {
        asio::async_read(socket_, asio::buffer(&hello_, sizeof(hello_)),
                         [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                             if (ec)
                                 return self->close();
                             if (self->hello_.magic != kMagic || self->hello_.version != kVersion)
                                 return self->fail("not a mercury-ps version 1 client");
                             if (self->hello_.job_len == 0 || self->hello_.job_len > kMaxJobName)
                                 return self->fail("job name must be 1.." + std::to_string(kMaxJobName) + " bytes");
                             self->job_name_.resize(self->hello_.job_len);
                             asio::async_read(self->socket_, asio::buffer(self->job_name_),
                                              [self](const boost::system::error_code& ec2, size_t) {
                                                  if (ec2)
                                                      return self->close();
                                                  self->authenticate();
                                              });
                         });
    }

    void authenticate()
    {
        const auto& o = server_.options_;
        const auto want = hello_mac(o.secret, std::span<const uint8_t, kNonceBytes>(challenge_.nonce), hello_, job_name_);
        // The MAC covers the job name, so a wrong job fails here too; say which.
        if (job_name_ != o.job)
            return fail("this server serves job '" + o.job + "', not '" + job_name_ + "'");
        if (!same_mac(want, std::span<const uint8_t, kMacBytes>(hello_.mac)))
            return fail("authentication failed: wrong secret for job '" + o.job + "'");
        if (!hello_.workers || hello_.workers > o.max_workers)
            return fail(std::to_string(hello_.workers) + " workers (1.." + std::to_string(o.max_workers) + ")");
        if (hello_.worker >= hello_.workers)
            return fail("worker " + std::to_string(hello_.worker) + " of " + std::to_string(hello_.workers));
        if (!hello_.lanes || hello_.lanes > kMaxLanes || hello_.lane >= hello_.lanes)
            return fail("lane " + std::to_string(hello_.lane) + " of " + std::to_string(hello_.lanes));
        if (!hello_.key_count || hello_.key_count > kMaxKeys)
            return fail("1.." + std::to_string(kMaxKeys) + " keys, not " + std::to_string(hello_.key_count));
        keys_.resize(hello_.key_count);
        asio::async_read(socket_, asio::buffer(keys_),
                         [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                             if (ec)
                                 return self->close();
                             self->join();
                         });
    }

    void join()
    {
        JobShape shape{hello_.workers, std::move(keys_)};
        if (const std::string why = server_.admit(shared_from_this(), hello_, std::move(shape)); !why.empty())
            return fail(why);
        admitted_ = true;
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
        asio::async_read(socket_, asio::buffer(&in_, sizeof(in_)),
                         [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                             if (ec)
                                 return self->close();
                             self->on_header();
                         });
    }

    void on_header()
    {
        if (closing_)
            return;
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
        if (in_.type != Type::kPush)
            return fail("unexpected message type " + std::to_string(static_cast<unsigned>(in_.type)));
        if (!member_)
            return fail("not in a job");
        try {
            server_.job_->check(in_.key, in_.offset, in_.count);
        } catch (const ProtocolError& e) {
            return fail(e.what());
        }
        payload_.resize(in_.count);
        asio::async_read(socket_, asio::buffer(payload_),
                         [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                             if (ec)
                                 return self->close();
                             if (self->closing_)
                                 return;
                             try {
                                 self->server_.pushed(self, self->in_.key, self->in_.offset, self->payload_);
                             } catch (const ProtocolError& e) {
                                 return self->fail(e.what());
                             }
                             if (self->ack_pushes_ && !self->closing_)
                                 self->ack(self->in_);
                             self->read_header();
                         });
    }

    void write_next()
    {
        const Out& o = out_.front();
        std::vector<asio::const_buffer> buffers{asio::buffer(&o.header, sizeof(o.header))};
        if (o.values)
            buffers.push_back(asio::buffer(o.values->data() + o.from, o.header.count * sizeof(float)));
        else if (!o.text.empty())
            buffers.push_back(asio::buffer(o.text));
        asio::async_write(socket_, buffers, [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
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
    std::string address_;
    Challenge challenge_{};
    Hello hello_{};
    std::string job_name_;
    std::vector<uint64_t> keys_;
    Header in_{};
    std::vector<float> payload_;
    // A list: an Ack goes in behind the message being written, which must
    // not move (a deque's insert in the middle moves every element, and the
    // write in flight sent whatever then lay at the old address).
    std::list<Out> out_;
    uint64_t queued_bytes_ = 0;   // payload of the sums in out_
    bool ack_pushes_ = false;
    bool admitted_ = false, member_ = false, member_or_was_ = false, said_bye_ = false, closing_ = false,
         closed_ = false;
};

Server::Server(asio::io_context& io, const Logger& log, ServerOptions options)
    : io_(io), log_(log), options_(std::move(options)), acceptor_(io), ticker_(io)
{
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
    if (const std::string why = pin_congestion_control(acceptor_.native_handle(), options_.cc); !why.empty())
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
        if (!ec) {
            const int fd = socket.native_handle();
            std::string why;
            if (peers_.size() >= options_.max_connections)
                why = "at max connections (" + std::to_string(options_.max_connections) + ")";
            else if (congestion_control_of(fd) != options_.cc)
                why = pin_congestion_control(fd, options_.cc);
            if (why.empty()) {
                auto peer = std::make_shared<Peer>(*this, std::move(socket));
                peers_.insert(peer);
                peer->start();
            } else {
                log_.warn("refusing connection", {{"reason", why}});
                observer_->connection(false);
            }
        }
        accept();
    });
}

void Server::tick()
{
    ticker_.expires_after(std::chrono::milliseconds(250));
    ticker_.async_wait([this](const boost::system::error_code& ec) {
        if (ec)
            return;
        if (job_) {
            if (const auto stall = job_->oldest_incomplete();
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
    if (shape.bytes() > options_.max_model_bytes || !key_sizes_ok)
        return "declared " + std::to_string(shape.bytes()) + " bytes in " + std::to_string(shape.key_elems.size()) +
               " keys (every key 1.." + std::to_string(UINT32_MAX) + " elements, at most " +
               std::to_string(options_.max_model_bytes) + " bytes)";
    if (job_ && !(job_->shape() == shape))
        return "declared a different shape from the job's other workers (" + std::to_string(shape.workers) +
               " workers, " + std::to_string(shape.key_elems.size()) + " keys, " + std::to_string(shape.bytes()) +
               " bytes; the job has " + std::to_string(job_->shape().workers) + ", " +
               std::to_string(job_->shape().key_elems.size()) + ", " + std::to_string(job_->shape().bytes()) + ")";
    if (members_.count({hello.worker, hello.lane}))
        return "worker " + std::to_string(hello.worker) + " lane " + std::to_string(hello.lane) + " is connected already";
    if (!job_) {
        job_.emplace(std::move(shape), options_.chunk_elems, options_.aggregation);
        reply_to_.assign(job_->shape().key_elems.size() * job_->shape().workers, {});
        observer_->job_started(job_->shape().bytes());
        job_pushed_bytes_ = job_answered_bytes_ = 0;
        log_.info("job started", {{"job", options_.job},
                                  {"workers", std::to_string(job_->shape().workers)},
                                  {"keys", std::to_string(job_->shape().key_elems.size())},
                                  {"bytes", std::to_string(job_->shape().bytes())}});
    }
    members_[{hello.worker, hello.lane}] = peer;
    peer->set_member(true);
    observer_->connection(true);
    observer_->members(members_.size());
    if (agent_) {
        // Registered or not, libmercury keeps a duplicate (for a restarted
        // agent) until the peer's close releases it.
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

void Server::pushed(const std::shared_ptr<Peer>& peer, uint32_t key, uint64_t offset, std::span<const float> data)
{
    const uint32_t workers = job_->shape().workers;
    reply_to_[static_cast<size_t>(key) * workers + peer->worker()] = peer;
    const auto sum = job_->add(peer->worker(), key, offset, data, Aggregator::Clock::now());
    observer_->pushed(data.size_bytes());
    job_pushed_bytes_ += data.size_bytes();
    if (!sum)
        return;
    std::vector<std::shared_ptr<Peer>> to;
    for (uint32_t w = 0; w < workers; ++w)
        if (auto p = reply_to_[static_cast<size_t>(key) * workers + w].lock())
            to.push_back(std::move(p));
    // One pull per chunk: a worker places each as it comes. A worker that
    // does not read ends the job, and with it this loop.
    for (const auto& p : to)
        for (uint64_t from = 0; job_ && from < sum->values->size(); from += options_.chunk_elems)
            p->send_sum(*sum, from, std::min<uint64_t>(options_.chunk_elems, sum->values->size() - from));
    observer_->answered(sum->values->size() * sizeof(float) * to.size());
    job_answered_bytes_ += sum->values->size() * sizeof(float) * to.size();
}

void Server::left(Peer& peer, bool said_bye)
{
    peer.set_member(false);
    members_.erase({peer.worker(), peer.lane()});
    observer_->members(members_.size());
    if (!said_bye) {
        end_job("worker " + std::to_string(peer.worker()) + " (" + peer.address() + ") closed lane " +
                std::to_string(peer.lane()) + " without saying bye");
        return;
    }
    if (members_.empty() && job_) {
        log_.info("job finished", {{"job", options_.job},
                                   {"pushed_bytes", std::to_string(job_pushed_bytes_)},
                                   {"answered_bytes", std::to_string(job_answered_bytes_)}});
        job_.reset();
        reply_to_.clear();
        observer_->job_ended(false);
    }
}

void Server::end_job(const std::string& why)
{
    if (!job_)
        return;
    log_.error("ending job", {{"job", options_.job},
                              {"reason", why},
                              {"pushed_bytes", std::to_string(job_pushed_bytes_)},
                              {"answered_bytes", std::to_string(job_answered_bytes_)}});
    auto members = std::move(members_);
    members_.clear();
    job_.reset();
    reply_to_.clear();
    observer_->job_ended(true);
    observer_->members(0);
    for (auto& [_, weak] : members)
        if (const auto p = weak.lock()) {
            p->set_member(false);
            p->refuse("mercury-ps ended the job: " + why);
        }
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
