// SPDX-License-Identifier: GPL-2.0
// C++ RAII wrapper over libmercury's C ABI (<mercury/client.h>).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <mercury/client.h>

namespace mercury {

class Client {
public:
    Client(const std::string& job, uint32_t worker_rank, const char* socket_path = nullptr)
        : client_(mercury_open(socket_path, job.c_str(), worker_rank))
    {
    }

    bool valid() const { return client_ != nullptr; }
    bool connected() const { return client_ && mercury_connected(client_.get()); }

    int declare_model(const std::vector<std::string>& names, const std::vector<uint64_t>& param_bytes)
    {
        std::vector<const char*> c_names;
        for (const auto& n : names)
            c_names.push_back(n.c_str());
        if (names.size() != param_bytes.size())
            return MERCURY_E_INVAL;
        return mercury_declare_model(client_.get(), static_cast<uint32_t>(names.size()), c_names.data(),
                                     param_bytes.data());
    }
    int report_timings(uint64_t iteration, const std::vector<uint32_t>& forward_us,
                       const std::vector<uint32_t>& backward_us)
    {
        if (forward_us.size() != backward_us.size())
            return MERCURY_E_INVAL;
        return mercury_report_timings(client_.get(), iteration, static_cast<uint32_t>(forward_us.size()),
                                      forward_us.data(), backward_us.data());
    }
    int register_socket(uint32_t layer, int fd) { return mercury_register_socket(client_.get(), layer, fd); }
    int release_socket(int fd) { return mercury_release_socket(client_.get(), fd); }
    int begin_iteration(uint64_t iteration) { return mercury_begin_iteration(client_.get(), iteration); }
    int register_lane(uint32_t lane, uint32_t lanes, int fd)
    {
        return mercury_register_lane(client_.get(), lane, lanes, fd);
    }
    int subscribe_ranks() { return mercury_subscribe_ranks(client_.get()); }
    // The agent's latest per-layer ranks; empty if none arrived yet.
    std::vector<uint8_t> layer_ranks(uint32_t layers, uint32_t* generation = nullptr)
    {
        std::vector<uint8_t> ranks(layers);
        const int n = mercury_layer_ranks(client_.get(), ranks.data(), layers, generation, nullptr);
        ranks.resize(n > 0 ? static_cast<size_t>(n) : 0);
        return ranks;
    }

private:
    struct Closer {
        void operator()(mercury_client* c) const { mercury_close(c); }
    };
    std::unique_ptr<mercury_client, Closer> client_;
};

// The congestion control TCP socket @fd runs, or "?" if it cannot say.
inline std::string congestion_control(int fd)
{
    char name[32];
    return mercury_congestion_control(fd, name, sizeof(name)) == MERCURY_OK ? std::string(name) : "?";
}

// Sets congestion control @cc on TCP socket @fd and reads it back: the
// reason it did not take, or "".
inline std::string set_congestion_control(int fd, const std::string& cc)
{
    const int rc = mercury_set_congestion_control(fd, cc.c_str());
    if (rc == MERCURY_OK)
        return "";
    if (rc == MERCURY_E_INVAL)
        return fd < 0 ? "not a socket: " + std::to_string(fd) : "bad congestion control name \"" + cc + "\"";
    if (errno == EPROTO)
        return "congestion control reads back " + congestion_control(fd) + ", not " + cc;
    return "cannot set congestion control " + cc + ": " + std::strerror(errno);
}

}  // namespace mercury
