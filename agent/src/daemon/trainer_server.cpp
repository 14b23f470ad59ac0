// SPDX-License-Identifier: GPL-2.0
#include "daemon/trainer_server.hpp"

#include <grp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "daemon/authorization.hpp"
#include "daemon/job_views.hpp"

namespace mercury {

namespace asio = boost::asio;
using stream = asio::local::stream_protocol;

namespace {

constexpr size_t kMaxFdsPerMessage = 16;
constexpr size_t kMaxPendingFds = 64;
// Replies a client has not read yet: beyond this it is dropped, not buffered.
constexpr size_t kMaxQueuedBytes = 16 << 20;
// Requests are handled only while less than this waits to be written, so a
// client that sends faster than it reads makes the agent wait, not work.
constexpr size_t kPauseInputBytes = 64 << 10;
// Frames handled per turn before other clients get theirs.
constexpr unsigned kFramesPerTurn = 32;

// A path left by a daemon that died is reused; one that answers is not.
void remove_stale_socket(const std::string& path)
{
    if (!std::filesystem::exists(path))
        return;
    asio::io_context probe_io;
    stream::socket probe(probe_io);
    boost::system::error_code ec;
    probe.connect(stream::endpoint(path), ec);
    if (!ec)
        throw std::runtime_error("another mercuryd is listening on " + path);
    std::filesystem::remove(path);
}

}  // namespace

TrainerServer::TrainerServer(asio::io_context& io, const Logger& log, JobRegistry& jobs)
    : io_(io), log_(log), jobs_(jobs), acceptor_(io), accept_retry_(io)
{
    jobs_.set_notifier([this](uint32_t session, const proto::Ranks& ranks) {
        if (const auto it = sessions_.find(session); it != sessions_.end())
            it->second->send(ranks);
    });
}

void TrainerServer::listen(const SocketOptions& options)
{
    const std::filesystem::path path(options.path);
    std::error_code fec;
    if (path.has_parent_path())
        std::filesystem::create_directories(path.parent_path(), fec);
    remove_stale_socket(options.path);

    boost::system::error_code ec;
    acceptor_.open(stream(), ec);
    if (!ec)
        acceptor_.bind(stream::endpoint(options.path), ec);
    if (!ec)
        acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
        throw std::runtime_error("cannot listen on " + options.path + ": " + ec.message());
    path_ = options.path;

    if (!options.group.empty()) {
        const group* g = getgrnam(options.group.c_str());
        if (!g)
            throw std::runtime_error("socket_group '" + options.group + "' does not exist");
        if (chown(options.path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0)
            throw std::runtime_error("cannot chown " + options.path + ": " + std::strerror(errno));
    }
    if (chmod(options.path.c_str(), options.mode) != 0)
        throw std::runtime_error("cannot chmod " + options.path + ": " + std::strerror(errno));
    log_.info("listening for trainers", {{"socket", options.path}});
    serve(options);
}

void TrainerServer::adopt(int fd, const SocketOptions& options)
{
    boost::system::error_code ec;
    acceptor_.assign(stream(), fd, ec);
    if (ec)
        throw std::runtime_error("cannot use the socket systemd passed: " + ec.message());
    const auto local = acceptor_.local_endpoint(ec);
    log_.info("listening for trainers", {{"socket", ec ? std::string("?") : local.path()}, {"from", "systemd"}});
    serve(options);
}

void TrainerServer::serve(const SocketOptions& options)
{
    max_clients_ = options.max_clients;
    frame_timeout_ = std::chrono::milliseconds(options.frame_timeout_ms);
    accept();
}

void TrainerServer::stop()
{
    boost::system::error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
    auto sessions = sessions_;
    for (auto& [id, session] : sessions)
        session->close();
    std::error_code ignored;
    if (!path_.empty())
        std::filesystem::remove(path_, ignored);
}

void TrainerServer::accept()
{
    acceptor_.async_accept([this](const boost::system::error_code& ec, stream::socket socket) {
        if (ec == asio::error::operation_aborted)
            return;
        if (ec) {
            // Out of descriptors (or memory): retrying at once would spin;
            // wait, and say so at most once a second.
            const auto now = std::chrono::steady_clock::now();
            if (now - last_accept_warning_ >= std::chrono::seconds(1)) {
                log_.warn("accept failed; retrying in 100 ms", {{"error", ec.message()}});
                last_accept_warning_ = now;
            }
            accept_retry_.expires_after(std::chrono::milliseconds(100));
            accept_retry_.async_wait([this](const boost::system::error_code& wait_ec) {
                if (!wait_ec)
                    accept();
            });
            return;
        }
        if (sessions_.size() >= max_clients_) {
            const auto frame = proto::encode(proto::Error{EBUSY, "too many clients (max_clients)"});
            boost::system::error_code ignored;
            socket.non_blocking(true, ignored);
            ::send(socket.native_handle(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        } else {
            const uint32_t id = next_id_++;
            auto session = std::make_shared<Session>(*this, std::move(socket), id);
            sessions_.emplace(id, session);
            session->start();
        }
        accept();
    });
}

void TrainerServer::closed(uint32_t id)
{
    jobs_.close(id);
    sessions_.erase(id);
}

Session::Session(TrainerServer& server, stream::socket socket, uint32_t id)
    : server_(server), socket_(std::move(socket)), id_(id), frame_timer_(server.io_)
{
}

Session::~Session() = default;

void Session::start()
{
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        peer_pid_ = cred.pid;
        peer_uid_ = cred.uid;
    }
    socket_.non_blocking(true);
    server_.log_.debug("client connected",
                       {{"session", std::to_string(id_)}, {"pid", std::to_string(peer_pid_)},
                        {"uid", std::to_string(peer_uid_)}});
    wait_readable();
}

void Session::close()
{
    if (closed_)
        return;
    closed_ = true;
    frame_timer_.cancel();
    boost::system::error_code ec;
    socket_.close(ec);
    auto self = shared_from_this();  // outlive our own removal
    server_.closed(id_);
}

void Session::wait_readable()
{
    socket_.async_wait(stream::socket::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec || self->closed_) {
            self->close();
            return;
        }
        self->on_readable();
    });
}

void Session::on_readable()
{
    uint8_t chunk[65536];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
    iovec iov{chunk, sizeof(chunk)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);

    const ssize_t n = ::recvmsg(socket_.native_handle(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        wait_readable();
        return;
    }
    if (n <= 0) {
        close();
        return;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            fds_.emplace_back(fd);
        }
    }
    if (msg.msg_flags & MSG_CTRUNC) {
        fail(EINVAL, "too many file descriptors in one message");
        return;
    }
    if (fds_.size() > kMaxPendingFds) {
        fail(EINVAL, "passed sockets without Register messages");
        return;
    }

    buffer_.insert(buffer_.end(), chunk, chunk + n);
    process_input();
}

void Session::process_input()
{
    enum class Next { kRead, kWaitForWrites, kYield } next = Next::kRead;
    size_t offset = 0;
    for (unsigned handled = 0;; ++handled) {
        if (out_bytes_ >= kPauseInputBytes) {
            next = Next::kWaitForWrites;
            break;
        }
        if (handled == kFramesPerTurn) {
            next = Next::kYield;
            break;
        }
        const auto d = proto::decode(std::span(buffer_).subspan(offset));
        if (d.status == proto::DecodeStatus::kNeedMore)
            break;
        if (d.status != proto::DecodeStatus::kOk) {
            fail(EPROTO, proto::describe(d.status));
            return;
        }
        offset += d.consumed;
        if (!handle(d.message))
            return;
    }
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(offset));
    input_paused_ = next == Next::kWaitForWrites;  // write_next() resumes
    arm_frame_timer(offset > 0);
    switch (next) {
    case Next::kRead:
        wait_readable();
        break;
    case Next::kWaitForWrites:
        break;
    case Next::kYield:
        asio::post(socket_.get_executor(), [self = shared_from_this()] {
            if (!self->closed_)
                self->process_input();
        });
        break;
    }
}

// A frame begun must be complete in time (counted from the last complete
// one): a client cannot pin a partial frame's buffer (up to 1 MiB) forever.
void Session::arm_frame_timer(bool progressed)
{
    const bool waiting = !buffer_.empty() && !input_paused_;
    if (frame_timer_armed_ && (!waiting || progressed)) {
        frame_timer_armed_ = false;
        frame_timer_.cancel();
    }
    if (!waiting || frame_timer_armed_)
        return;
    frame_timer_armed_ = true;
    frame_timer_.expires_after(server_.frame_timeout_);
    frame_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec || self->closed_ || !self->frame_timer_armed_)
            return;
        self->fail(ETIMEDOUT, "incomplete frame for longer than frame_timeout_ms");
    });
}

bool Session::fail(int error, const std::string& why)
{
    server_.log_.warn("dropping client", {{"session", std::to_string(id_)}, {"pid", std::to_string(peer_pid_)},
                                          {"reason", why}});
    send(proto::Error{static_cast<uint32_t>(error), why});
    closing_ = true;  // stop reading; close once the Error is written
    if (out_.empty())
        close();
    return false;
}

void Session::send(const proto::Message& msg)
{
    if (closed_)
        return;
    auto frame = proto::encode(msg);
    if (out_bytes_ + frame.size() > kMaxQueuedBytes) {
        server_.log_.warn("dropping client", {{"session", std::to_string(id_)}, {"reason", "does not read replies"}});
        close();
        return;
    }
    out_bytes_ += frame.size();
    out_.push_back(std::move(frame));
    if (out_.size() == 1)
        write_next();
}

void Session::write_next()
{
    asio::async_write(socket_, asio::buffer(out_.front()),
                      [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                          if (ec || self->closed_) {
                              self->close();
                              return;
                          }
                          self->out_bytes_ -= self->out_.front().size();
                          self->out_.pop_front();
                          if (!self->out_.empty())
                              self->write_next();
                          else if (self->closing_)
                              self->close();
                          if (self->input_paused_ && self->out_bytes_ < kPauseInputBytes && !self->closed_ &&
                              !self->closing_) {
                              self->input_paused_ = false;
                              self->process_input();
                          }
                      });
}

bool Session::take_passed_socket(FlowKey& key)
{
    if (fds_.empty())
        return false;
    const UniqueFd fd = std::move(fds_.front());
    fds_.pop_front();
    int protocol = 0;
    uint64_t cookie = 0;
    socklen_t len = sizeof(protocol), clen = sizeof(cookie);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP ||
        getsockopt(fd.get(), SOL_SOCKET, SO_COOKIE, &cookie, &clen) != 0)
        return false;
    key = FlowKey::by_cookie(cookie);
    return true;
}

bool Session::handle(const proto::Message& msg)
{
    JobRegistry& jobs = server_.jobs_;
    if (const Refusal refused = authorize(Caller{peer_uid_}, msg))
        return fail(refused.error, refused.why);
    if (const auto* req = std::get_if<proto::StatusRequest>(&msg)) {
        send(proto::StatusReply{req->format == proto::StatusFormat::kText ? status_text(jobs) : status_json(jobs)});
        return true;
    }
    if (const auto* weight = std::get_if<proto::JobWeight>(&msg)) {
        jobs.set_job_weight(weight->job, weight->weight);
        server_.log_.info("job weight set", {{"job", weight->job}, {"weight", std::to_string(weight->weight)}});
        return true;
    }
    if (const auto* hello = std::get_if<proto::Hello>(&msg)) {
        if (hello_)
            return fail(EPROTO, "second Hello");
        // Who is calling comes from SO_PEERCRED, never from the message: a
        // trainer in a container sends the pid of its own PID namespace.
        proto::Hello checked = *hello;
        if (peer_pid_)
            checked.pid = static_cast<uint32_t>(peer_pid_);
        if (int err = jobs.open(id_, checked, peer_uid_))
            return fail(err, "Hello needs a job name");
        hello_ = true;
        server_.log_.info("trainer joined", {{"session", std::to_string(id_)}, {"job", hello->job},
                                             {"worker", std::to_string(hello->worker_rank)},
                                             {"pid", std::to_string(peer_pid_)}});
        send(proto::HelloAck{id_});
        return true;
    }
    if (!hello_)
        return fail(EPROTO, "Hello must come first");

    int err = 0;
    if (const auto* model = std::get_if<proto::Model>(&msg)) {
        err = jobs.set_model(id_, *model);
    } else if (const auto* timings = std::get_if<proto::Timings>(&msg)) {
        err = jobs.add_timings(id_, *timings);
    } else if (const auto* reg = std::get_if<proto::Register>(&msg)) {
        FlowKey key = reg->flow;
        if (reg->kind == proto::ConnKind::kPassedFd && !take_passed_socket(key))
            return fail(EINVAL, "Register by socket needs a passed TCP socket");
        err = jobs.register_flow(id_, reg->layer, key);
    } else if (const auto* lane = std::get_if<proto::RegisterLane>(&msg)) {
        FlowKey key;
        if (!take_passed_socket(key))
            return fail(EINVAL, "RegisterLane needs a passed TCP socket");
        err = jobs.register_lane(id_, lane->lane, lane->lanes, key);
    } else if (std::holds_alternative<proto::SubscribeRanks>(msg)) {
        err = jobs.subscribe_ranks(id_);
    } else if (const auto* it = std::get_if<proto::Iteration>(&msg)) {
        err = jobs.begin_iteration(id_, it->iteration);
    } else {
        return fail(EPROTO, "message type not accepted from trainers");
    }
    if (err)
        return fail(err, std::string("rejected: ") + std::strerror(err));
    return true;
}

}  // namespace mercury
