// SPDX-License-Identifier: GPL-2.0
// An IPv4 or IPv6 address and port: what a device, a socket's name, a peer
// and NCCL's handle each hold, converted in one place so that no caller
// branches on the family.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>

#include "wire.hpp"

namespace mercury::nccl {

class Endpoint {
public:
    // @addr as the sockets API gives it (AF_INET or AF_INET6; anything
    // else is an endpoint whose text is "?").
    explicit Endpoint(const sockaddr_storage& addr);
    // The listener's endpoint a handle names; nullopt if its family is
    // neither IPv4 nor IPv6.
    static std::optional<Endpoint> from_handle(const Handle& h);
    // This socket's own name, or its peer's; nullopt if the call fails.
    static std::optional<Endpoint> local(int fd);
    static std::optional<Endpoint> peer(int fd);

    // Writes the family, address and port into @h.
    void to_handle(Handle* h) const;
    // The same address with @port (host order; 0: any).
    Endpoint with_port(uint16_t port) const;

    int family() const { return addr_.ss_family; }
    const sockaddr* sockaddr_ptr() const { return reinterpret_cast<const sockaddr*>(&addr_); }
    socklen_t length() const;
    uint16_t port() const;   // host order
    std::string text() const;   // "10.0.0.1:5000", "[fe80::1]:5000", "?"

private:
    sockaddr_storage addr_{};
};

}  // namespace mercury::nccl
