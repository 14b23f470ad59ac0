// SPDX-License-Identifier: GPL-2.0
// libmercury: the trainer side of the agent protocol (<mercury/client.h>).
//
// Calls only touch memory and attempt a non-blocking send; a background
// thread connects, reconnects, flushes what the socket could not take and
// replays the job's state (hello, model, last timings, registrations,
// subscription) to a restarted agent.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <mercury/client.h>
#include "protocol/wire.hpp"

namespace {

using namespace mercury;

constexpr auto kRetryPeriod = std::chrono::milliseconds(200);
constexpr size_t kMaxPending = 4 << 20;  // give up on a stuck agent beyond this

uint64_t cookie_of(int fd)
{
    uint64_t cookie = 0;
    socklen_t len = sizeof(cookie);
    return getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) == 0 ? cookie : 0;
}

// The caller's socket, by number and cookie: no duplicate (a job's
// sockets would take twice the descriptors). The cookie tells whether the
// number still names that socket when it is passed (again): if the caller
// closed it without releasing it, the number may name another by then.
struct SocketRef {
    int fd = -1;
    uint64_t cookie = 0;
    bool live() const { return fd >= 0 && cookie && cookie_of(fd) == cookie; }
};

// One frame waiting to be written; a passed socket rides on its first byte.
struct OutFrame {
    std::vector<uint8_t> bytes;
    SocketRef pass;
    size_t sent = 0;
};

struct LaneSocket {
    uint32_t lane, lanes;
    SocketRef socket;  // to prove ownership again to a restarted agent
};

struct LayerSocket {
    uint32_t layer;
    SocketRef socket;  // to prove ownership again to a restarted agent
};

}  // namespace

struct mercury_client {
    std::mutex mu;
    std::condition_variable wake;
    std::thread worker;
    bool stopping = false;

    std::string path;
    proto::Hello hello;
    std::optional<proto::Model> model;
    std::optional<proto::Timings> last_timings;
    std::vector<LayerSocket> registrations;
    std::vector<LaneSocket> lanes;
    bool subscribed = false;

    int fd = -1;
    std::atomic<bool> connected{false};
    std::deque<OutFrame> out;  // frames the socket did not take yet
    size_t out_bytes = 0;
    std::vector<uint8_t> in;  // bytes from the agent not yet decoded
    std::optional<proto::Ranks> ranks;
    std::optional<proto::Error> last_error;

    // All below: caller holds mu.
    void disconnect()
    {
        if (fd >= 0)
            ::close(fd);
        fd = -1;
        connected = false;
        out.clear();
        out_bytes = 0;
        in.clear();
    }

    // Writes queued frames until the socket would block.
    void flush()
    {
        while (fd >= 0 && !out.empty()) {
            OutFrame& f = out.front();
            iovec iov{f.bytes.data() + f.sent, f.bytes.size() - f.sent};
            msghdr msg{};
            msg.msg_iov = &iov;
            msg.msg_iovlen = 1;
            alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
            if (f.pass.fd >= 0 && f.sent == 0 && !f.pass.live()) {
                out_bytes -= f.bytes.size();   // its socket is gone: nothing to register
                out.pop_front();
                continue;
            }
            if (f.pass.fd >= 0 && f.sent == 0) {
                msg.msg_control = control;
                msg.msg_controllen = sizeof(control);
                cmsghdr* c = CMSG_FIRSTHDR(&msg);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                const int pass = f.pass.fd;
                std::memcpy(CMSG_DATA(c), &pass, sizeof(int));
            }
            const ssize_t n = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n < 0) {
                if (errno != EAGAIN && errno != EINTR)
                    disconnect();
                return;
            }
            f.sent += static_cast<size_t>(n);
            if (f.sent == f.bytes.size()) {
                out_bytes -= f.bytes.size();
                out.pop_front();
            }
        }
    }

    // Queues @frame (with @pass as SCM_RIGHTS, if given and still that
    // socket when it goes) and writes what it can.
    int send_frame(std::vector<uint8_t> frame, SocketRef pass = {})
    {
        if (fd < 0)
            return MERCURY_E_NOAGENT;
        if (out_bytes + frame.size() > kMaxPending) {
            disconnect();
            return MERCURY_E_NOAGENT;
        }
        OutFrame f{std::move(frame), pass, 0};
        out_bytes += f.bytes.size();
        out.push_back(std::move(f));
        flush();
        if (fd >= 0 && !out.empty())
            wake.notify_one();
        return fd >= 0 ? MERCURY_OK : MERCURY_E_NOAGENT;
    }

    int send(const proto::Message& m) { return send_frame(proto::encode(m)); }

    void try_connect()
    {
        const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s < 0)
            return;
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
        if (::connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
            ::close(s);
            return;
        }
        fd = s;
        connected = true;
        // Replay: the agent may be new and know nothing of us. Timings
        // before registrations and the subscription, as a live session
        // sends them: the first entries and Ranks must already use them.
        send(hello);
        if (model)
            send(*model);
        if (last_timings)
            send(*last_timings);
        // Sockets closed without a release are forgotten here.
        std::erase_if(registrations, [](const LayerSocket& r) { return !r.socket.live(); });
        std::erase_if(lanes, [](const LaneSocket& l) { return !l.socket.live(); });
        for (const auto& r : registrations)
            send_frame(proto::encode(proto::Register{r.layer, proto::ConnKind::kPassedFd, {}}), r.socket);
        for (const auto& l : lanes)
            send_frame(proto::encode(proto::RegisterLane{static_cast<uint8_t>(l.lane), static_cast<uint8_t>(l.lanes)}),
                       l.socket);
        if (subscribed)
            send(proto::SubscribeRanks{});
    }

    // Reads what the agent sent: Ranks are kept, an Error is kept for the
    // caller (the agent closes after it), EOF disconnects.
    void poll_agent()
    {
        uint8_t buf[16384];
        for (;;) {
            const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                disconnect();
                return;
            }
            if (n < 0)
                break;
            in.insert(in.end(), buf, buf + n);
        }
        size_t offset = 0;
        for (;;) {
            const auto d = proto::decode(std::span(in).subspan(offset));
            if (d.status == proto::DecodeStatus::kNeedMore)
                break;
            if (d.status != proto::DecodeStatus::kOk) {
                last_error = proto::Error{EPROTO, std::string("agent sent ") + proto::describe(d.status)};
                disconnect();
                return;
            }
            offset += d.consumed;
            if (const auto* r = std::get_if<proto::Ranks>(&d.message))
                ranks = *r;
            else if (const auto* e = std::get_if<proto::Error>(&d.message))
                last_error = *e;
        }
        in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(offset));
    }

    void run()
    {
        std::unique_lock lock(mu);
        while (!stopping) {
            if (fd < 0)
                try_connect();
            if (fd >= 0)
                poll_agent();
            if (fd >= 0)
                flush();
            wake.wait_for(lock, kRetryPeriod);
        }
        disconnect();
    }
};

namespace {
constexpr size_t kCaNameMax = 16;   // the kernel's TCP_CA_NAME_MAX, NUL included
}

extern "C" {

mercury_client* mercury_open(const char* socket_path, const char* job, uint32_t worker_rank)
{
    if (!job || !*job || std::strlen(job) > proto::kMaxName)
        return nullptr;
    auto* c = new (std::nothrow) mercury_client;
    if (!c)
        return nullptr;
    const char* env = std::getenv("MERCURY_SOCKET");
    c->path = socket_path ? socket_path : env ? env : proto::kDefaultSocketPath;
    c->hello = proto::Hello{job, worker_rank, static_cast<uint32_t>(::getpid())};
    {
        std::lock_guard lock(c->mu);
        c->try_connect();
    }
    c->worker = std::thread([c] { c->run(); });
    return c;
}

void mercury_close(mercury_client* c)
{
    if (!c)
        return;
    {
        std::lock_guard lock(c->mu);
        c->stopping = true;
    }
    c->wake.notify_one();
    c->worker.join();
    delete c;
}

int mercury_declare_model(mercury_client* c, uint32_t n_layers, const char* const* names, const uint64_t* param_bytes)
{
    if (!c || !n_layers || n_layers > proto::kMaxLayers || !param_bytes)
        return MERCURY_E_INVAL;
    proto::Model model;
    for (uint32_t i = 0; i < n_layers; ++i)
        model.layers.push_back({names && names[i] ? names[i] : "layer" + std::to_string(i), param_bytes[i]});
    std::lock_guard lock(c->mu);
    c->model = model;
    c->registrations.clear();  // they named layers of the previous model
    c->last_timings.reset();
    return c->send(model);
}

int mercury_report_timings(mercury_client* c, uint64_t iteration, uint32_t n_layers, const uint32_t* forward_us,
                           const uint32_t* backward_us)
{
    if (!c || !forward_us || !backward_us)
        return MERCURY_E_INVAL;
    std::lock_guard lock(c->mu);
    if (!c->model)
        return MERCURY_E_NOMODEL;
    if (n_layers != c->model->layers.size())
        return MERCURY_E_INVAL;
    proto::Timings t{iteration, {forward_us, forward_us + n_layers}, {backward_us, backward_us + n_layers}};
    c->last_timings = t;
    return c->send(t);
}

int mercury_register_socket(mercury_client* c, uint32_t layer, int fd)
{
    if (!c || fd < 0)
        return MERCURY_E_INVAL;
    const uint64_t cookie = cookie_of(fd);
    if (!cookie)
        return MERCURY_E_INVAL;
    std::lock_guard lock(c->mu);
    if (!c->model)
        return MERCURY_E_NOMODEL;
    if (layer >= c->model->layers.size())
        return MERCURY_E_INVAL;
    c->registrations.push_back(LayerSocket{layer, SocketRef{fd, cookie}});
    // Passing the socket proves we own it, now and to a restarted agent.
    return c->send_frame(proto::encode(proto::Register{layer, proto::ConnKind::kPassedFd, {}}),
                         c->registrations.back().socket);
}

int mercury_release_socket(mercury_client* c, int fd)
{
    if (!c || fd < 0)
        return MERCURY_E_INVAL;
    const uint64_t cookie = cookie_of(fd);
    std::lock_guard lock(c->mu);
    if (!cookie)
        return MERCURY_E_INVAL;
    std::erase_if(c->registrations, [&](const LayerSocket& r) { return r.socket.cookie == cookie; });
    std::erase_if(c->lanes, [&](const LaneSocket& l) { return l.socket.cookie == cookie; });
    // A frame still queued to pass it: the caller may close it now.
    for (auto& f : c->out)
        if (f.pass.cookie == cookie && f.sent == 0)
            f.pass.cookie = 0;   // not live: dropped when its turn comes
    return MERCURY_OK;
}

int mercury_register_lane(mercury_client* c, uint32_t lane, uint32_t lanes, int fd)
{
    if (!c || fd < 0 || lanes == 0 || lanes > proto::kMaxLanes || lane >= lanes)
        return MERCURY_E_INVAL;
    int protocol = 0;
    socklen_t len = sizeof(protocol);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP)
        return MERCURY_E_INVAL;
    const uint64_t cookie = cookie_of(fd);
    if (!cookie)
        return MERCURY_E_INVAL;
    std::lock_guard lock(c->mu);
    c->lanes.push_back(LaneSocket{lane, lanes, SocketRef{fd, cookie}});
    return c->send_frame(proto::encode(proto::RegisterLane{static_cast<uint8_t>(lane), static_cast<uint8_t>(lanes)}),
                         c->lanes.back().socket);
}

int mercury_release_lanes(mercury_client* c)
{
    if (!c)
        return MERCURY_E_INVAL;
    std::lock_guard lock(c->mu);
    c->lanes.clear();
    // The agent withdraws a session's entries when it closes: reconnect
    // with everything else, without the lanes.
    c->disconnect();
    c->try_connect();
    return c->fd >= 0 ? MERCURY_OK : MERCURY_E_NOAGENT;
}

int mercury_subscribe_ranks(mercury_client* c)
{
    if (!c)
        return MERCURY_E_INVAL;
    std::lock_guard lock(c->mu);
    c->subscribed = true;
    return c->send(proto::SubscribeRanks{});
}

int mercury_layer_ranks(mercury_client* c, uint8_t* ranks, uint32_t n_layers, uint32_t* generation, int* datapath)
{
    if (!c || (!ranks && n_layers))
        return MERCURY_E_INVAL;
    std::lock_guard lock(c->mu);
    if (c->fd >= 0)
        c->poll_agent();  // fresh, not up to one retry period old
    if (!c->ranks)
        return 0;
    const auto& r = *c->ranks;
    if (n_layers < r.ranks.size())
        return MERCURY_E_INVAL;
    std::copy(r.ranks.begin(), r.ranks.end(), ranks);
    if (generation)
        *generation = r.generation;
    if (datapath)
        *datapath = r.datapath ? 1 : 0;
    return static_cast<int>(r.ranks.size());
}

int mercury_last_error(mercury_client* c, char* message, size_t size)
{
    if (!c)
        return MERCURY_E_INVAL;
    std::lock_guard lock(c->mu);
    if (c->fd >= 0)
        c->poll_agent();
    if (!c->last_error)
        return 0;
    if (message && size) {
        std::strncpy(message, c->last_error->message.c_str(), size - 1);
        message[size - 1] = '\0';
    }
    return static_cast<int>(c->last_error->code);
}

int mercury_begin_iteration(mercury_client* c, uint64_t iteration)
{
    if (!c)
        return MERCURY_E_INVAL;
    std::lock_guard lock(c->mu);
    return c->send(proto::Iteration{iteration});
}

int mercury_connected(const mercury_client* c)
{
    return c && c->connected ? 1 : 0;
}

int mercury_congestion_control(int fd, char* name, size_t size)
{
    if (fd < 0 || !name || size < kCaNameMax)
        return MERCURY_E_INVAL;
    socklen_t len = static_cast<socklen_t>(size - 1);
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0)
        return MERCURY_E_CC;
    name[std::min<size_t>(len, size - 1)] = '\0';
    return MERCURY_OK;
}

int mercury_set_congestion_control(int fd, const char* cc)
{
    if (fd < 0 || !cc || !*cc || strnlen(cc, kCaNameMax) == kCaNameMax)
        return MERCURY_E_INVAL;
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, static_cast<socklen_t>(strlen(cc))) != 0)
        return MERCURY_E_CC;
    char got[kCaNameMax + 1];
    if (mercury_congestion_control(fd, got, sizeof(got)) != MERCURY_OK)
        return MERCURY_E_CC;
    if (strcmp(got, cc) != 0) {
        errno = EPROTO;
        return MERCURY_E_CC;
    }
    return MERCURY_OK;
}

const char* mercury_strerror(int error)
{
    switch (error) {
    case MERCURY_OK: return "ok";
    case MERCURY_E_NOAGENT: return "mercuryd not connected; kept and sent when it is";
    case MERCURY_E_INVAL: return "invalid argument";
    case MERCURY_E_NOMEM: return "out of memory";
    case MERCURY_E_NOMODEL: return "declare the model first";
    case MERCURY_E_CC: return "congestion control not set";
    }
    return "unknown error";
}

}  // extern "C"
