// SPDX-License-Identifier: GPL-2.0
#include "flow_key.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace mercury {

std::optional<Endpoint> Endpoint::parse(std::string_view text)
{
    std::string host;
    std::string_view port_text;
    if (!text.empty() && text.front() == '[') {
        const auto close = text.find("]:");
        if (close == std::string_view::npos)
            return std::nullopt;
        host = std::string(text.substr(1, close - 1));
        port_text = text.substr(close + 2);
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos)
            return std::nullopt;
        host = std::string(text.substr(0, colon));
        if (host.find(':') != std::string::npos)
            return std::nullopt;  // IPv6 needs brackets: "fd00::1:80" is ambiguous
        port_text = text.substr(colon + 1);
    }

    unsigned port = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc{} || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
        return std::nullopt;

    Endpoint ep;
    ep.port = static_cast<uint16_t>(port);
    if (inet_pton(AF_INET, host.c_str(), ep.addr.data()) == 1)
        ep.family = AF_INET;
    else if (inet_pton(AF_INET6, host.c_str(), ep.addr.data()) == 1)
        ep.family = AF_INET6;
    else
        return std::nullopt;
    return ep;
}

size_t Endpoint::addr_len() const
{
    return family == AF_INET ? 4 : 16;
}

std::string Endpoint::to_string() const
{
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(family, addr.data(), buf, sizeof(buf));
    if (family == AF_INET6)
        return "[" + std::string(buf) + "]:" + std::to_string(port);
    return std::string(buf) + ":" + std::to_string(port);
}

FlowKey FlowKey::by_cookie(uint64_t cookie)
{
    FlowKey key;
    key.cookie = cookie;
    return key;
}

std::optional<FlowKey> FlowKey::by_tuple(const Endpoint& local, const Endpoint& remote)
{
    if (local.family != remote.family)
        return std::nullopt;
    FlowKey key;
    key.local = local;
    key.remote = remote;
    return key;
}

std::string FlowKey::to_string() const
{
    if (cookie)
        return "cookie:" + std::to_string(*cookie);
    return local.to_string() + "->" + remote.to_string();
}

}  // namespace mercury
