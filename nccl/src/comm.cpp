// SPDX-License-Identifier: GPL-2.0
#include "comm.hpp"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "endpoint.hpp"
#include "lanes.hpp"
#include "log.hpp"

namespace mercury::nccl {
namespace {

// Listeners keep at most this many sockets that have not finished their
// Hello, and give each the timeout to do so: a stray or hostile connector
// cannot pile them up.
constexpr size_t kMaxArriving = 1024;

std::string errno_text(int err)
{
    return std::strerror(err);
}

// Bytes moved by one non-blocking call: >0 moved, 0 would block, <0 failed
// (-errno; -EPIPE for a peer's orderly close while reading).
ssize_t io(int fd, char* p, size_t n, bool write)
{
    for (;;) {
        const ssize_t r = write ? ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recv(fd, p, n, MSG_DONTWAIT);
        if (r > 0)
            return r;
        if (r == 0)
            return n == 0 ? 0 : -EPIPE;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return -errno;
    }
}

std::vector<int> raw(const std::vector<UniqueFd>& fds)
{
    std::vector<int> out;
    for (const auto& f : fds)
        out.push_back(f.get());
    return out;
}

}  // namespace

uint64_t random_u64()
{
    uint64_t v = 0;
    while (::getrandom(&v, sizeof(v), 0) != sizeof(v)) {
    }
    return v;
}

std::string peer_name(int fd)
{
    const auto e = Endpoint::peer(fd);
    return e ? e->text() : "?";
}

bool configure_socket(int fd, uint32_t timeout_ms)
{
    const int one = 1;
    const int idle_s = std::max<int>(1, static_cast<int>(timeout_ms / 3000));
    const int count = 3;
    const unsigned user_timeout = timeout_ms;
    return ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0 &&
           ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s)) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle_s, sizeof(idle_s)) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout)) == 0;
}

// ---- Comm -----------------------------------------------------------------

Comm::Comm(std::vector<UniqueFd> sockets, uint32_t min_chunk, uint8_t lane, uint32_t timeout_ms, std::string peer)
    : sockets_(std::move(sockets)), queues_(sockets_.size() - 1), min_chunk_(min_chunk), lane_(lane),
      timeout_ms_(timeout_ms), peer_(std::move(peer))
{
    // The connector selected it before connecting; the acceptor's sockets
    // (which carry the ACKs) run it too.
    for (const auto& fd : sockets_)
        select_mercury(fd.get());
    register_lane(raw(sockets_), lane_);
}

Comm::~Comm()
{
    release_sockets(raw(sockets_));
}

Request* Comm::take_request()
{
    for (auto& r : requests_)
        if (!r.used) {
            r = Request{};
            r.comm = this;
            r.used = true;
            return &r;
        }
    return nullptr;
}

uint32_t Comm::deal(char* data, uint64_t size, Request* owner)
{
    const uint32_t n = data_sockets();
    const uint64_t chunk = chunk_size(size, n, min_chunk_);
    uint32_t chunks = 0;
    for (uint64_t at = 0; at < size; at += chunk) {
        queues_[next_socket_].push_back(Piece{data + at, std::min(chunk, size - at), 0, owner});
        next_socket_ = (next_socket_ + 1) % n;
        ++chunks;
    }
    return chunks;
}

bool Comm::move(int fd, Piece& p, bool write)
{
    while (p.done < p.size) {
        const ssize_t r = io(fd, p.data + p.done, p.size - p.done, write);
        if (r == 0)
            return false;
        if (r < 0) {
            fail(ncclRemoteError, std::string(write ? "sending to " : "receiving from ") + peer_ + ": " +
                                      (r == -EPIPE ? "the peer closed the connection" : errno_text(static_cast<int>(-r))));
            return false;
        }
        p.done += static_cast<uint64_t>(r);
        progressed();
    }
    return true;
}

void Comm::move_data(bool write)
{
    for (uint32_t i = 0; i < data_sockets() && !failure_; ++i) {
        auto& q = queues_[i];
        while (!q.empty() && move(data_socket(i), q.front(), write)) {
            --q.front().owner->chunks_left;
            q.pop_front();
        }
    }
}

void Comm::fail(ncclResult_t code, std::string reason)
{
    if (failure_)
        return;
    failure_ = Failure{code, std::move(reason)};
    Log::warn(failure_.reason);
}

void Comm::check_stall(bool work_pending)
{
    if (!work_pending) {
        progressed();
        return;
    }
    if (Clock::now() - last_progress_ > std::chrono::milliseconds(timeout_ms_))
        fail(ncclRemoteError, "connection with " + peer_ + ": no progress for " + std::to_string(timeout_ms_) +
                                  " ms with a message under way (MERCURY_NCCL_TIMEOUT_MS)");
}

// ---- SendComm ---------------------------------------------------------------

Failure SendComm::isend(void* data, uint64_t size, int tag, Request** out)
{
    *out = nullptr;
    if (failure_)
        return failure_;
    Request* r = take_request();
    if (!r)
        return {};   // all in use: NCCL calls again
    r->send = true;
    r->n = 1;
    r->data[0] = static_cast<char*>(data);
    r->capacity[0] = size;
    r->tag[0] = tag;
    Outgoing o;
    o.header = Header{kMagic, tag, size};
    if (data_sockets())
        r->chunks_left = deal(static_cast<char*>(data), size, r);
    else
        o.inline_data = Piece{static_cast<char*>(data), size, 0, r};
    o.inline_data.owner = r;
    control_queue_.push_back(o);
    *out = r;
    return progress();
}

Failure SendComm::progress()
{
    while (!failure_ && !control_queue_.empty()) {
        Outgoing& o = control_queue_.front();
        Piece header{reinterpret_cast<char*>(&o.header), sizeof(o.header), o.header_done, o.inline_data.owner};
        const bool header_sent = move(control(), header, true);
        o.header_done = header.done;
        if (!header_sent || !move(control(), o.inline_data, true))
            break;
        o.inline_data.owner->control_done = true;
        control_queue_.pop_front();
    }
    move_data(true);
    // No stall timeout here: a peer that is alive but not receiving yet (a
    // rank still computing) holds the bytes back legitimately; one that is
    // gone stops ACKing, and TCP_USER_TIMEOUT ends the connection.
    return failure_;
}

// ---- RecvComm ---------------------------------------------------------------

Failure RecvComm::irecv(int n, void** data, const size_t* sizes, const int* tags, Request** out)
{
    *out = nullptr;
    if (failure_)
        return failure_;
    Request* r = take_request();
    if (!r)
        return {};
    r->n = n;
    for (int i = 0; i < n; ++i) {
        r->data[i] = static_cast<char*>(data[i]);
        r->capacity[i] = sizes[i];
        r->tag[i] = tags ? tags[i] : 0;
    }
    posted_.push_back(r);
    *out = r;
    return progress();
}

bool RecvComm::read_header()
{
    Piece p{reinterpret_cast<char*>(&header_), sizeof(header_), header_done_, nullptr};
    const bool whole = move(control(), p, false);
    header_done_ = p.done;
    if (!whole)
        return false;
    header_done_ = 0;
    if (header_.magic != kMagic) {
        fail(ncclRemoteError, "connection with " + peer_ + ": a message header without the plugin's magic "
                              "(corrupt stream or not this plugin)");
        return false;
    }
    // The first posted receive with an empty slot takes it, by tag.
    Request* r = nullptr;
    for (Request* q : posted_)
        if (q->matched_count < q->n) {
            r = q;
            break;
        }
    int slot = -1;
    for (int i = 0; r && i < r->n && slot < 0; ++i)
        if (!r->matched[i] && r->tag[i] == header_.tag)
            slot = i;
    if (slot < 0) {
        fail(ncclInvalidUsage, "connection with " + peer_ + ": a message with tag " + std::to_string(header_.tag) +
                                   " that no posted receive expects (the ranks' calls differ)");
        return false;
    }
    if (header_.size > r->capacity[slot]) {
        fail(ncclInvalidUsage, "connection with " + peer_ + ": message of " + std::to_string(header_.size) +
                                   " bytes for a receive of " + std::to_string(r->capacity[slot]) +
                                   " (tag " + std::to_string(header_.tag) +
                                   "): the ranks' collectives or NCCL settings differ");
        return false;
    }
    r->matched[slot] = true;
    r->received[slot] = header_.size;
    ++r->matched_count;
    if (data_sockets()) {
        r->chunks_left += deal(r->data[slot], header_.size, r);
        r->control_done = r->matched_count == r->n;
    } else {
        inline_data_ = Piece{r->data[slot], header_.size, 0, r};
        reading_inline_ = true;
    }
    return true;
}

Failure RecvComm::progress()
{
    while (!failure_) {
        if (reading_inline_) {
            if (!move(control(), inline_data_, false))
                break;
            reading_inline_ = false;
            Request* r = inline_data_.owner;
            r->control_done = r->matched_count == r->n;
            continue;
        }
        bool waiting = false;
        for (const Request* q : posted_)
            waiting = waiting || q->matched_count < q->n;
        if (!waiting || !read_header())
            break;
    }
    move_data(false);
    bool pending = reading_inline_ || header_done_ > 0;
    for (const auto& q : queues_)
        pending = pending || !q.empty();
    check_stall(pending);
    return failure_;
}

void RecvComm::retire(Request* r)
{
    posted_.erase(std::remove(posted_.begin(), posted_.end(), r), posted_.end());
    Comm::retire(r);
}

// ---- ListenComm -------------------------------------------------------------

ListenComm::ListenComm(const Device& dev, const Settings& settings, Handle* handle, Failure* failure)
    : settings_(settings), secret_(random_u64())
{
    const Endpoint any_port = Endpoint(dev.addr).with_port(0);
    fd_ = UniqueFd(::socket(any_port.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    std::optional<Endpoint> bound;
    if (!fd_ || ::bind(fd_.get(), any_port.sockaddr_ptr(), any_port.length()) != 0 ||
        ::listen(fd_.get(), 4096) != 0 || !(bound = Endpoint::local(fd_.get()))) {
        *failure = Failure{ncclSystemError, "listening on " + dev.name + ": " + errno_text(errno)};
        return;
    }
    *handle = Handle{};
    handle->magic = kMagic;
    handle->version = kVersion;
    bound->to_handle(handle);
    handle->data_sockets = static_cast<uint16_t>(settings_.data_sockets);
    handle->secret = secret_;
}

std::unique_ptr<RecvComm> ListenComm::accept(Failure* failure)
{
    const auto now = Clock::now();
    const auto timeout = std::chrono::milliseconds(settings_.timeout_ms);
    for (;;) {
        UniqueFd fd(::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED) {
                *failure = Failure{ncclSystemError, std::string("accepting a connection: ") + errno_text(errno)};
                return nullptr;
            }
            break;
        }
        if (arriving_.size() >= kMaxArriving) {
            Log::warn("refusing a connection from " + peer_name(fd.get()) + ": " + std::to_string(kMaxArriving) +
                      " others have not finished their handshake");
            continue;
        }
        if (!configure_socket(fd.get(), settings_.timeout_ms)) {
            Log::warn("configuring a socket from " + peer_name(fd.get()) + ": " + errno_text(errno));
            continue;
        }
        Arriving a;
        a.peer = peer_name(fd.get());
        a.fd = std::move(fd);
        a.since = now;
        arriving_.push_back(std::move(a));
    }
    // Read the Hellos that have come; place each socket in its connection.
    for (size_t i = 0; i < arriving_.size();) {
        Arriving& a = arriving_[i];
        const char* refused = nullptr;
        while (a.got < sizeof(a.hello)) {
            const ssize_t r = io(a.fd.get(), reinterpret_cast<char*>(&a.hello) + a.got, sizeof(a.hello) - a.got, false);
            if (r <= 0) {
                if (r < 0)
                    refused = "closed before its handshake";
                break;
            }
            a.got += static_cast<size_t>(r);
        }
        if (!refused && a.got < sizeof(a.hello) && now - a.since > timeout)
            refused = "no handshake within MERCURY_NCCL_TIMEOUT_MS";
        if (!refused && a.got == sizeof(a.hello))
            refused = hello_error(a.hello, secret_, static_cast<uint16_t>(settings_.data_sockets));
        if (!refused && a.got == sizeof(a.hello)) {
            Group& g = groups_[a.hello.connection];
            if (g.sockets.empty()) {
                g.sockets.resize(settings_.data_sockets + 1);
                g.lane = a.hello.lane;
                g.min_chunk = a.hello.min_chunk;
                g.since = now;
                g.peer = a.peer;
            }
            if (g.sockets[a.hello.index] || g.lane != a.hello.lane || g.min_chunk != a.hello.min_chunk) {
                refused = "its connection already has that socket, or another lane or chunk size";
            } else {
                g.sockets[a.hello.index] = std::move(a.fd);
                ++g.present;
                arriving_.erase(arriving_.begin() + static_cast<ptrdiff_t>(i));
                continue;
            }
        }
        if (refused) {
            Log::warn("dropping a connection from " + a.peer + ": " + refused);
            arriving_.erase(arriving_.begin() + static_cast<ptrdiff_t>(i));
            continue;
        }
        ++i;
    }
    for (auto it = groups_.begin(); it != groups_.end();) {
        Group& g = it->second;
        if (g.present == g.sockets.size()) {
            auto comm = std::make_unique<RecvComm>(std::move(g.sockets), g.min_chunk, g.lane, settings_.timeout_ms,
                                                   g.peer);
            groups_.erase(it);
            return comm;
        }
        if (now - g.since > timeout) {
            Log::warn("dropping a connection from " + g.peer + ": only " + std::to_string(g.present) + " of its " +
                      std::to_string(g.sockets.size()) + " sockets arrived within MERCURY_NCCL_TIMEOUT_MS");
            it = groups_.erase(it);
            continue;
        }
        ++it;
    }
    return nullptr;
}

// ---- Connector --------------------------------------------------------------

Connector::Connector(const Handle& handle, const Settings& settings, uint8_t lane, Failure* failure)
    : settings_(settings), lane_(lane)
{
    const std::optional<Endpoint> listener = Endpoint::from_handle(handle);
    if (handle.magic != kMagic || handle.version != kVersion || !listener || handle.data_sockets > kMaxDataSockets) {
        *failure = Failure{ncclInvalidArgument, "connect: the handle is not from this plugin's listen()"};
        return;
    }
    peer_ = listener->text();
    const uint64_t connection = random_u64();
    for (uint16_t i = 0; i <= handle.data_sockets; ++i) {
        Opening o;
        o.fd = UniqueFd(::socket(listener->family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (!o.fd || !configure_socket(o.fd.get(), settings_.timeout_ms)) {
            *failure = Failure{ncclSystemError, "opening a socket to " + peer_ + ": " + errno_text(errno)};
            return;
        }
        select_mercury(o.fd.get());
        if (::connect(o.fd.get(), listener->sockaddr_ptr(), listener->length()) != 0 && errno != EINPROGRESS) {
            *failure = Failure{ncclSystemError, "connecting to " + peer_ + ": " + errno_text(errno)};
            return;
        }
        o.hello = Hello{kMagic, kVersion, i, handle.secret, connection, settings_.min_chunk,
                        handle.data_sockets, lane_, 0};
        sockets_.push_back(std::move(o));
    }
}

std::unique_ptr<SendComm> Connector::step(Failure* failure)
{
    bool all = true;
    for (auto& o : sockets_) {
        if (!o.connected) {
            pollfd p{o.fd.get(), POLLOUT, 0};
            if (::poll(&p, 1, 0) <= 0) {
                all = false;
                continue;
            }
            int err = 0;
            socklen_t len = sizeof(err);
            ::getsockopt(o.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
            if (err) {
                *failure = Failure{ncclSystemError, "connecting to " + peer_ + ": " + errno_text(err)};
                return nullptr;
            }
            o.connected = true;
        }
        while (o.sent < sizeof(o.hello)) {
            const ssize_t r = io(o.fd.get(), reinterpret_cast<char*>(&o.hello) + o.sent, sizeof(o.hello) - o.sent, true);
            if (r < 0) {
                *failure = Failure{ncclSystemError, "handshake with " + peer_ + ": " + errno_text(static_cast<int>(-r))};
                return nullptr;
            }
            if (r == 0)
                break;
            o.sent += static_cast<size_t>(r);
        }
        all = all && o.sent == sizeof(o.hello);
    }
    if (!all) {
        if (Clock::now() - since_ > std::chrono::milliseconds(settings_.timeout_ms))
            *failure = Failure{ncclRemoteError, "connecting to " + peer_ + ": not done within " +
                                                    std::to_string(settings_.timeout_ms) + " ms (MERCURY_NCCL_TIMEOUT_MS)"};
        return nullptr;
    }
    std::vector<UniqueFd> fds;
    for (auto& o : sockets_)
        fds.push_back(std::move(o.fd));
    sockets_.clear();
    return std::make_unique<SendComm>(std::move(fds), settings_.min_chunk, lane_, settings_.timeout_ms, peer_);
}

}  // namespace mercury::nccl
