// SPDX-License-Identifier: GPL-2.0
// How user space names a flow to the kernel: a socket cookie, or the local
// and remote address and port as the local socket sees them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mercury {

struct Endpoint {
    int family = 0;                      // AF_INET or AF_INET6
    std::array<uint8_t, 16> addr{};      // first 4 bytes used for AF_INET
    uint16_t port = 0;

    // "10.0.0.1:5201" or "[fd00::1]:5201"; nullopt if malformed.
    static std::optional<Endpoint> parse(std::string_view text);
    std::string to_string() const;
    size_t addr_len() const;
    bool operator==(const Endpoint&) const = default;
};

struct FlowKey {
    std::optional<uint64_t> cookie;      // set: named by cookie
    Endpoint local;                      // otherwise by tuple
    Endpoint remote;

    static FlowKey by_cookie(uint64_t cookie);
    static std::optional<FlowKey> by_tuple(const Endpoint& local, const Endpoint& remote);
    std::string to_string() const;
    bool operator==(const FlowKey&) const = default;
};

}  // namespace mercury
