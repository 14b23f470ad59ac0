// SPDX-License-Identifier: GPL-2.0
// libmercury: the trainer side of the agent protocol (mercury.h).
//
// Calls only touch memory and attempt a non-blocking send; a background
// thread connects, reconnects, flushes what the socket could not take and
// replays the job's state (hello, model, registrations, last timings) to a
// restarted agent.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mercury.h"
#include "protocol/wire.hpp"

namespace {

using namespace mercury;

constexpr auto kRetryPeriod = std::chrono::milliseconds(200);
constexpr size_t kMaxPending = 4 << 20;  // give up on a stuck agent beyond this
constexpr const char* kDefaultSocket = "/run/mercury/mercuryd.sock";

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
    std::vector<proto::Register> registrations;  // by cookie, for replay

    int fd = -1;
    std::atomic<bool> connected{false};
    std::vector<uint8_t> pending;  // bytes the socket did not take yet

    // All below: caller holds mu.
    void disconnect()
    {
        if (fd >= 0)
            ::close(fd);
        fd = -1;
        connected = false;
        pending.clear();
    }

    // Sends @frame (with @pass_fd as SCM_RIGHTS if >= 0) or queues it.
    int send_frame(const std::vector<uint8_t>& frame, int pass_fd = -1)
    {
        if (fd < 0)
            return MERCURY_E_NOAGENT;
        if (!pending.empty()) {
            if (pending.size() + frame.size() > kMaxPending) {
                disconnect();
                return MERCURY_E_NOAGENT;
            }
            pending.insert(pending.end(), frame.begin(), frame.end());
            return MERCURY_OK;
        }
        iovec iov{const_cast<uint8_t*>(frame.data()), frame.size()};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
        if (pass_fd >= 0) {
            msg.msg_control = control;
            msg.msg_controllen = sizeof(control);
            cmsghdr* c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        }
        const ssize_t n = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            disconnect();
            return MERCURY_E_NOAGENT;
        }
        const size_t sent = n > 0 ? static_cast<size_t>(n) : 0;
        if (sent == 0 && pass_fd >= 0)
            return MERCURY_E_NOAGENT;  // caller falls back to the cookie
        pending.insert(pending.end(), frame.begin() + static_cast<std::ptrdiff_t>(sent), frame.end());
        if (!pending.empty())
            wake.notify_one();
        return MERCURY_OK;
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
        // Replay: the agent may be new and know nothing of us.
        send(hello);
        if (model)
            send(*model);
        for (const auto& r : registrations)
            send(r);
        if (last_timings)
            send(*last_timings);
    }

    void flush_pending()
    {
        const ssize_t n = ::send(fd, pending.data(), pending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            disconnect();
        else if (n > 0)
            pending.erase(pending.begin(), pending.begin() + n);
    }

    // Notices an agent that went away (EOF) or told us why it dropped us.
    void poll_agent()
    {
        uint8_t buf[4096];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            disconnect();
    }

    void run()
    {
        std::unique_lock lock(mu);
        while (!stopping) {
            if (fd < 0)
                try_connect();
            if (fd >= 0)
                poll_agent();
            if (fd >= 0 && !pending.empty())
                flush_pending();
            wake.wait_for(lock, kRetryPeriod);
        }
        disconnect();
    }
};

extern "C" {

mercury_client* mercury_open(const char* socket_path, const char* job, uint32_t worker_rank)
{
    if (!job || !*job || std::strlen(job) > proto::kMaxName)
        return nullptr;
    auto* c = new (std::nothrow) mercury_client;
    if (!c)
        return nullptr;
    const char* env = std::getenv("MERCURY_SOCKET");
    c->path = socket_path ? socket_path : env ? env : kDefaultSocket;
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
    uint64_t cookie = 0;
    socklen_t len = sizeof(cookie);
    if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0)
        return MERCURY_E_INVAL;
    std::lock_guard lock(c->mu);
    if (!c->model)
        return MERCURY_E_NOMODEL;
    if (layer >= c->model->layers.size())
        return MERCURY_E_INVAL;
    proto::Register by_cookie{layer, proto::ConnKind::kCookie, FlowKey::by_cookie(cookie)};
    c->registrations.push_back(by_cookie);
    // Passing the socket proves we own it; replays use the cookie.
    const int rc = c->send_frame(proto::encode(proto::Register{layer, proto::ConnKind::kPassedFd, {}}), fd);
    return rc == MERCURY_OK || c->fd < 0 ? rc : c->send(by_cookie);
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

const char* mercury_strerror(int error)
{
    switch (error) {
    case MERCURY_OK: return "ok";
    case MERCURY_E_NOAGENT: return "mercuryd not connected; kept and sent when it is";
    case MERCURY_E_INVAL: return "invalid argument";
    case MERCURY_E_NOMEM: return "out of memory";
    case MERCURY_E_NOMODEL: return "declare the model first";
    }
    return "unknown error";
}

}  // extern "C"
