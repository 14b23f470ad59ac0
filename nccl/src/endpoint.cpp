// SPDX-License-Identifier: GPL-2.0
#include "endpoint.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

namespace mercury::nccl {
namespace {

sockaddr_in* v4(sockaddr_storage* a)
{
    return reinterpret_cast<sockaddr_in*>(a);
}
const sockaddr_in* v4(const sockaddr_storage* a)
{
    return reinterpret_cast<const sockaddr_in*>(a);
}
sockaddr_in6* v6(sockaddr_storage* a)
{
    return reinterpret_cast<sockaddr_in6*>(a);
}
const sockaddr_in6* v6(const sockaddr_storage* a)
{
    return reinterpret_cast<const sockaddr_in6*>(a);
}

std::optional<Endpoint> named(int fd, int (*name)(int, sockaddr*, socklen_t*))
{
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if (name(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        return std::nullopt;
    return Endpoint(a);
}

}  // namespace

Endpoint::Endpoint(const sockaddr_storage& addr) : addr_(addr) {}

std::optional<Endpoint> Endpoint::from_handle(const Handle& h)
{
    sockaddr_storage a{};
    if (h.family == AF_INET) {
        v4(&a)->sin_family = AF_INET;
        std::memcpy(&v4(&a)->sin_addr, h.addr, 4);
        v4(&a)->sin_port = h.port;
    } else if (h.family == AF_INET6) {
        v6(&a)->sin6_family = AF_INET6;
        std::memcpy(&v6(&a)->sin6_addr, h.addr, 16);
        v6(&a)->sin6_port = h.port;
    } else {
        return std::nullopt;
    }
    return Endpoint(a);
}

std::optional<Endpoint> Endpoint::local(int fd)
{
    return named(fd, ::getsockname);
}

std::optional<Endpoint> Endpoint::peer(int fd)
{
    return named(fd, ::getpeername);
}

void Endpoint::to_handle(Handle* h) const
{
    h->family = addr_.ss_family;
    if (family() == AF_INET) {
        std::memcpy(h->addr, &v4(&addr_)->sin_addr, 4);
        h->port = v4(&addr_)->sin_port;
    } else {
        std::memcpy(h->addr, &v6(&addr_)->sin6_addr, 16);
        h->port = v6(&addr_)->sin6_port;
    }
}

Endpoint Endpoint::with_port(uint16_t port) const
{
    Endpoint e = *this;
    if (family() == AF_INET)
        v4(&e.addr_)->sin_port = htons(port);
    else if (family() == AF_INET6)
        v6(&e.addr_)->sin6_port = htons(port);
    return e;
}

socklen_t Endpoint::length() const
{
    return family() == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

uint16_t Endpoint::port() const
{
    if (family() == AF_INET)
        return ntohs(v4(&addr_)->sin_port);
    if (family() == AF_INET6)
        return ntohs(v6(&addr_)->sin6_port);
    return 0;
}

std::string Endpoint::text() const
{
    char host[INET6_ADDRSTRLEN] = "";
    if (family() == AF_INET && ::inet_ntop(AF_INET, &v4(&addr_)->sin_addr, host, sizeof(host)))
        return std::string(host) + ":" + std::to_string(port());
    if (family() == AF_INET6 && ::inet_ntop(AF_INET6, &v6(&addr_)->sin6_addr, host, sizeof(host)))
        return "[" + std::string(host) + "]:" + std::to_string(port());
    return "?";
}

}  // namespace mercury::nccl
