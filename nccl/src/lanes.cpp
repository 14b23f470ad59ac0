// SPDX-License-Identifier: GPL-2.0
#include "lanes.hpp"

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>

#include <mercury/client.hpp>

#include "log.hpp"
#include "nccl_net.h"
#include "wire.hpp"

namespace mercury::nccl {
namespace {

// $MERCURY_WORKER (mercury.torch sets it), else torchrun's $RANK, else 0.
uint32_t worker_rank()
{
    for (const char* name : {"MERCURY_WORKER", "RANK"}) {
        const char* rank = std::getenv(name);
        if (!rank || !*rank)
            continue;
        const std::string_view s(rank);
        uint32_t r = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), r);
        if (ec == std::errc() && end == s.data() + s.size())
            return r;
    }
    return 0;
}

// One libmercury session per process, opened on first use: every
// communicator's sockets are lanes of the same trainer.
mercury::Client& client()
{
    static std::once_flag once;
    static std::unique_ptr<mercury::Client> c;
    std::call_once(once, [] {
        const char* job = std::getenv("MERCURY_JOB");
        c = std::make_unique<mercury::Client>(job && *job ? job : "nccl", worker_rank());
    });
    return *c;
}

std::atomic<bool> cc_warned{false}, agent_warned{false};

}  // namespace

int lane_of_class(int traffic_class, std::string* error)
{
    if (traffic_class == NCCL_NET_TRAFFIC_CLASS_UNDEF)
        return kDefaultLane;
    if (traffic_class < 0 || traffic_class >= kLanes) {
        *error = "traffic class " + std::to_string(traffic_class) + " is not a Mercury lane (0 most urgent .. " +
                 std::to_string(kLanes - 1) + " least; unset: " + std::to_string(kDefaultLane) + ")";
        return -1;
    }
    return traffic_class;
}

void select_mercury(int fd)
{
    const std::string why = mercury::set_congestion_control(fd, "mercury");
    if (!why.empty() && !cc_warned.exchange(true))
        Log::warn(why + "; this process's connections run the host's default congestion control "
                        "(modprobe tcp_mercury, or run mercuryd --datapath=bpf), without priorities");
}

void register_lane(const std::vector<int>& fds, uint8_t lane)
{
    mercury::Client& c = client();
    if (!c.valid()) {
        if (!agent_warned.exchange(true))
            Log::warn("libmercury could not start a session (out of memory?): no lanes registered");
        return;
    }
    for (const int fd : fds) {
        const int rc = c.register_lane(lane, kLanes, fd);
        if (rc == MERCURY_OK || rc == MERCURY_E_NOAGENT) {
            if (rc == MERCURY_E_NOAGENT && !agent_warned.exchange(true))
                Log::warn("no mercuryd reachable ($MERCURY_SOCKET, else /run/mercury/mercuryd.sock): lanes are "
                          "registered when one starts; until then no priorities");
            continue;
        }
        if (!agent_warned.exchange(true))
            Log::warn(std::string("registering a socket as lane ") + std::to_string(lane) + ": " +
                      mercury_strerror(rc));
    }
}

void release_sockets(const std::vector<int>& fds)
{
    mercury::Client& c = client();
    if (!c.valid())
        return;
    for (const int fd : fds)
        c.release_socket(fd);
}

}  // namespace mercury::nccl
