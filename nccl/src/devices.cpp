// SPDX-License-Identifier: GPL-2.0
#include "devices.hpp"

#include <ifaddrs.h>
#include <net/if.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string_view>

#include "wire.hpp"

namespace mercury::nccl {
namespace {

// NCCL's interface list syntax: "^" excludes, "=" matches names exactly,
// otherwise prefixes; comma-separated.
class IfFilter {
public:
    explicit IfFilter(std::string_view spec)
    {
        if (!spec.empty() && spec.front() == '^') {
            exclude_ = true;
            spec.remove_prefix(1);
        }
        if (!spec.empty() && spec.front() == '=') {
            exact_ = true;
            spec.remove_prefix(1);
        }
        while (!spec.empty()) {
            const size_t comma = spec.find(',');
            if (comma)
                items_.emplace_back(spec.substr(0, comma));
            if (comma == std::string_view::npos)
                break;
            spec.remove_prefix(comma + 1);
        }
    }

    bool admits(const std::string& name) const
    {
        bool match = false;
        for (const auto& item : items_)
            match = match || (exact_ ? name == item : name.starts_with(item));
        return exclude_ ? !match : match;
    }

private:
    bool exclude_ = false, exact_ = false;
    std::vector<std::string> items_;
};

std::string sys_net(const std::string& dev, const char* leaf)
{
    return "/sys/class/net/" + dev + "/" + leaf;
}

int link_speed(const std::string& dev)
{
    std::ifstream in(sys_net(dev, "speed"));
    int speed = 0;
    if (in >> speed && speed > 0)
        return speed;
    return 10000;   // virtual links report none (or -1): NCCL assumes 10 Gbit/s
}

std::string pci_path(const std::string& dev)
{
    std::unique_ptr<char, decltype(&std::free)> real(::realpath(sys_net(dev, "device").c_str(), nullptr), &std::free);
    return real ? std::string(real.get()) : std::string();
}

std::vector<Device> matching(const IfFilter& filter)
{
    std::vector<Device> out;
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0)
        return out;
    std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owned(list, &::freeifaddrs);
    // IPv4 first, then IPv6 for interfaces with no IPv4 address.
    for (const int family : {AF_INET, AF_INET6}) {
        for (ifaddrs* a = list; a; a = a->ifa_next) {
            if (!a->ifa_addr || a->ifa_addr->sa_family != family || !(a->ifa_flags & IFF_UP))
                continue;
            const std::string name = a->ifa_name;
            if (!filter.admits(name))
                continue;
            if (family == AF_INET6) {
                const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
                if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
                    continue;   // needs a scope id on the far side
            }
            bool seen = false;
            for (const auto& d : out)
                seen = seen || d.name == name;
            if (seen)
                continue;
            Device d;
            d.name = name;
            d.addr_len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
            std::memcpy(&d.addr, a->ifa_addr, d.addr_len);
            d.pci_path = pci_path(name);
            d.speed_mbit = link_speed(name);
            out.push_back(std::move(d));
        }
    }
    return out;
}

bool parse_u32(const char* text, uint32_t* out)
{
    if (!text || !*text)
        return false;
    const std::string_view s(text);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size();
}

// NCCL's -2: "auto", by the NIC's vendor.
bool is_auto(const char* text)
{
    return !text || !*text || std::string_view(text) == "-2";
}

}  // namespace

std::vector<Device> find_devices()
{
    if (const char* spec = std::getenv("NCCL_SOCKET_IFNAME"); spec && *spec)
        return matching(IfFilter(spec));
    auto devs = matching(IfFilter("^docker,lo"));
    if (devs.empty())
        devs = matching(IfFilter("lo"));
    return devs;
}

uint32_t nccl_socket_count(const std::string& dev, const char* nthreads, const char* nsocks, std::string* error)
{
    uint32_t auto_threads = 0, auto_socks = 1;
    if (is_auto(nthreads) || is_auto(nsocks)) {
        std::ifstream in(sys_net(dev, "device/vendor"));
        std::string vendor;
        in >> vendor;
        if (vendor == "0x1d0f") {   // AWS
            auto_threads = 2;
            auto_socks = 8;
        } else if (vendor == "0x1ae0") {   // GCP
            auto_threads = 4;
            auto_socks = 1;
        }
    }
    uint32_t threads = auto_threads, socks = auto_socks;
    if (!is_auto(nthreads) && !parse_u32(nthreads, &threads)) {
        *error = std::string("NCCL_SOCKET_NTHREADS=") + nthreads + " is not a count; using " +
                 std::to_string(auto_threads);
        threads = auto_threads;
    }
    if (!is_auto(nsocks) && !parse_u32(nsocks, &socks)) {
        *error = std::string("NCCL_NSOCKS_PERTHREAD=") + nsocks + " is not a count; using " +
                 std::to_string(auto_socks);
        socks = auto_socks;
    }
    threads = std::min<uint32_t>(threads, 16);   // NCCL's MAX_THREADS
    if (uint64_t{threads} * socks > kMaxDataSockets) {
        socks = kMaxDataSockets / threads;
        *error = "more than " + std::to_string(kMaxDataSockets) + " sockets asked for; using " +
                 std::to_string(socks) + " per thread";
    }
    return threads * socks;
}

Settings read_settings(const Device& dev, std::string* error)
{
    Settings s;
    s.data_sockets = nccl_socket_count(dev.name, std::getenv("NCCL_SOCKET_NTHREADS"),
                                       std::getenv("NCCL_NSOCKS_PERTHREAD"), error);
    uint32_t v = 0;
    if (const char* t = std::getenv("NCCL_SOCKET_MIN_TASKSIZE"); t && *t) {
        if (parse_u32(t, &v) && v >= kMinChunkFloor && v <= kMinChunkCeiling)
            s.min_chunk = v;
        else
            *error = std::string("NCCL_SOCKET_MIN_TASKSIZE=") + t + " is not a size in [" +
                     std::to_string(kMinChunkFloor) + ", " + std::to_string(kMinChunkCeiling) + "]; using " +
                     std::to_string(s.min_chunk);
    }
    if (const char* t = std::getenv("MERCURY_NCCL_TIMEOUT_MS"); t && *t) {
        if (parse_u32(t, &v) && v >= 100)
            s.timeout_ms = v;
        else
            *error = std::string("MERCURY_NCCL_TIMEOUT_MS=") + t + " is not a time of at least 100 ms; using " +
                     std::to_string(s.timeout_ms);
    }
    return s;
}

}  // namespace mercury::nccl
