// SPDX-License-Identifier: GPL-2.0
// mercury-flow: real TCP traffic for Mercury's tests and benchmarks.
//
//   mercury-flow server --port P [--bind ADDR]
//   mercury-flow client --connect ADDR:PORT [--cc NAME] [--prio N] [--seconds S]
//                       [--interval-ms MS] [--label L] [--uid UID]
//
// The client sends as fast as the socket takes data and prints, as key=value
// lines: "connected ..." once connected (local endpoint, SO_COOKIE, CC), a
// "sample ..." every --interval-ms (CLOCK_MONOTONIC ms, bytes acked, cwnd), and
// "result ..." at the end (bytes acked from TCP_INFO, retransmits, and the
// rank/weight/held state mercury reports: TCP_CC_INFO from the module, the
// socket storage of the BPF datapath).
#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <grp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <utility>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "datapath/bpf_maps.hpp"
#include "flow_key.hpp"
#include "mercury/uapi.h"

namespace {

constexpr size_t TCP_CA_NAME_MAX = 16;

class Fd {
public:
    explicit Fd(int fd = -1) : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Fd& operator=(Fd&& o) noexcept
    {
        reset(std::exchange(o.fd_, -1));
        return *this;
    }
    int get() const { return fd_; }
    void reset(int fd = -1)
    {
        if (fd_ >= 0)
            ::close(fd_);
        fd_ = fd;
    }

private:
    int fd_;
};

[[noreturn]] void die(const std::string& what)
{
    std::fprintf(stderr, "mercury-flow: %s\n", what.c_str());
    std::exit(1);
}

[[noreturn]] void die_errno(const std::string& what)
{
    die(what + ": " + std::strerror(errno));
}

uint64_t monotonic_ms()
{
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

template <typename T>
T number(std::string_view text, const char* what)
{
    T v{};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || end != text.data() + text.size())
        die(std::string("invalid ") + what + ": " + std::string(text));
    return v;
}

sockaddr_storage to_sockaddr(const mercury::Endpoint& ep, socklen_t& len)
{
    sockaddr_storage ss{};
    if (ep.family == AF_INET) {
        auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
        sin->sin_family = AF_INET;
        sin->sin_port = htons(ep.port);
        std::memcpy(&sin->sin_addr, ep.addr.data(), 4);
        len = sizeof(*sin);
    } else {
        auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(ep.port);
        std::memcpy(&sin6->sin6_addr, ep.addr.data(), 16);
        len = sizeof(*sin6);
    }
    return ss;
}

mercury::Endpoint from_sockaddr(const sockaddr_storage& ss)
{
    mercury::Endpoint ep;
    ep.family = ss.ss_family;
    if (ss.ss_family == AF_INET) {
        const auto* sin = reinterpret_cast<const sockaddr_in*>(&ss);
        ep.port = ntohs(sin->sin_port);
        std::memcpy(ep.addr.data(), &sin->sin_addr, 4);
    } else {
        const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&ss);
        ep.port = ntohs(sin6->sin6_port);
        std::memcpy(ep.addr.data(), &sin6->sin6_addr, 16);
    }
    return ep;
}

struct Options {
    std::string mode;
    std::string connect;
    std::string bind_addr;
    uint16_t port = 0;
    std::string cc;
    std::optional<uint32_t> prio;
    std::optional<uid_t> uid;   // client: drop to this uid (and gid) first
    double seconds = 5;
    uint32_t interval_ms = 0;
    std::string label = "flow";
};

Options parse(int argc, char** argv)
{
    Options o;
    if (argc < 2)
        die("usage: mercury-flow server --port P | client --connect ADDR:PORT [--cc NAME] [--prio N] "
            "[--seconds S] [--interval-ms MS] [--label L] [--uid UID]");
    o.mode = argv[1];
    for (int i = 2; i < argc; ++i) {
        const std::string_view a = argv[i];
        auto value = [&]() -> std::string_view {
            if (i + 1 >= argc)
                die("missing value for " + std::string(a));
            return argv[++i];
        };
        if (a == "--port")
            o.port = number<uint16_t>(value(), "port");
        else if (a == "--bind")
            o.bind_addr = value();
        else if (a == "--connect")
            o.connect = value();
        else if (a == "--cc")
            o.cc = value();
        else if (a == "--prio")
            o.prio = number<uint32_t>(value(), "prio");
        else if (a == "--seconds")
            o.seconds = std::stod(std::string(value()));
        else if (a == "--interval-ms")
            o.interval_ms = number<uint32_t>(value(), "interval");
        else if (a == "--label")
            o.label = value();
        else if (a == "--uid")
            o.uid = number<uid_t>(value(), "uid");
        else
            die("unknown option " + std::string(a));
    }
    return o;
}

void drain(Fd conn)
{
    std::vector<char> buf(1 << 16);
    while (::read(conn.get(), buf.data(), buf.size()) > 0) {
    }
}

int run_server(const Options& o)
{
    const std::string bind_to = o.bind_addr.empty() ? "0.0.0.0" : o.bind_addr;
    auto ep = mercury::Endpoint::parse(bind_to.find(':') != std::string::npos && bind_to.front() != '['
                                           ? "[" + bind_to + "]:" + std::to_string(o.port)
                                           : bind_to + ":" + std::to_string(o.port));
    if (!ep)
        die("bad --bind/--port");
    Fd listener(::socket(ep->family, SOCK_STREAM, 0));
    if (listener.get() < 0)
        die_errno("socket");
    const int one = 1;
    setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    socklen_t len = 0;
    const auto addr = to_sockaddr(*ep, len);
    if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), len) < 0)
        die_errno("bind " + ep->to_string());
    if (::listen(listener.get(), 64) < 0)
        die_errno("listen");
    std::printf("listening %s\n", ep->to_string().c_str());
    std::fflush(stdout);
    for (;;) {
        Fd conn(::accept(listener.get(), nullptr, nullptr));
        if (conn.get() < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            die_errno("accept");
        }
        std::thread(drain, std::move(conn)).detach();
    }
}

std::string cc_name(int fd)
{
    char name[TCP_CA_NAME_MAX] = {};
    socklen_t len = sizeof(name);
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) < 0)
        return "?";
    return std::string(name, strnlen(name, sizeof(name)));
}

tcp_info tcp_stats(int fd)
{
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) < 0)
        die_errno("TCP_INFO");
    return info;
}

std::string format_info(unsigned rank, unsigned weight, bool held, unsigned holds)
{
    char buf[128];
    std::snprintf(buf, sizeof(buf), "rank=%s weight=%u held=%u holds=%u",
                  rank == MERCURY_RANK_NONE ? "none" : std::to_string(rank).c_str(), weight, held ? 1 : 0, holds);
    return buf;
}

// Mercury's per-flow view: the module's TCP_CC_INFO (DCTCP layout: see
// uapi.h), else the BPF datapath's socket storage.
std::string mercury_info(int fd)
{
    tcp_dctcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_CC_INFO, &info, &len) == 0 && len >= sizeof(info) && info.dctcp_enabled)
        return format_info(info.dctcp_ce_state & 0xff, info.dctcp_alpha, info.dctcp_ce_state & MERCURY_INFO_HELD,
                           info.dctcp_ab_tot);
    if (const auto st = mercury::BpfMaps::socket_state(fd))
        return format_info(st->rank, st->weight, st->held, st->holds);
    return "rank=na weight=na held=na holds=na";
}

int run_client(const Options& o)
{
    const auto remote = mercury::Endpoint::parse(o.connect);
    if (!remote)
        die("--connect takes ADDR:PORT");
    // An unprivileged trainer's view: no capabilities, no supplementary groups.
    if (o.uid && (setgroups(0, nullptr) < 0 || setgid(*o.uid) < 0 || setuid(*o.uid) < 0))
        die_errno("dropping to uid " + std::to_string(*o.uid));
    Fd sock(::socket(remote->family, SOCK_STREAM, 0));
    if (sock.get() < 0)
        die_errno("socket");
    if (!o.cc.empty() && setsockopt(sock.get(), IPPROTO_TCP, TCP_CONGESTION, o.cc.data(), o.cc.size()) < 0)
        die_errno("TCP_CONGESTION " + o.cc);
    if (o.prio && setsockopt(sock.get(), SOL_SOCKET, SO_PRIORITY, &*o.prio, sizeof(*o.prio)) < 0)
        die_errno("SO_PRIORITY");
    // Discard unsent data on close so one test's leftovers never load the next.
    const linger abort_on_close{1, 0};
    setsockopt(sock.get(), SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));

    socklen_t len = 0;
    const auto addr = to_sockaddr(*remote, len);
    if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), len) < 0)
        die_errno("connect " + remote->to_string());

    sockaddr_storage local{};
    socklen_t local_len = sizeof(local);
    getsockname(sock.get(), reinterpret_cast<sockaddr*>(&local), &local_len);
    uint64_t cookie = 0;
    socklen_t cookie_len = sizeof(cookie);
    getsockopt(sock.get(), SOL_SOCKET, SO_COOKIE, &cookie, &cookie_len);
    std::printf("connected label=%s local=%s remote=%s cookie=%llu cc=%s\n", o.label.c_str(),
                from_sockaddr(local).to_string().c_str(), remote->to_string().c_str(),
                static_cast<unsigned long long>(cookie), cc_name(sock.get()).c_str());
    std::fflush(stdout);

    std::vector<char> buf(1 << 16, 'm');
    const uint64_t start = monotonic_ms();
    const uint64_t end = start + static_cast<uint64_t>(o.seconds * 1000);
    uint64_t next_sample = o.interval_ms ? start : UINT64_MAX;
    for (uint64_t now = start; now < end; now = monotonic_ms()) {
        if (now >= next_sample) {
            const auto info = tcp_stats(sock.get());
            std::printf("sample label=%s t_ms=%llu acked=%llu cwnd=%u\n", o.label.c_str(),
                        static_cast<unsigned long long>(now),
                        static_cast<unsigned long long>(info.tcpi_bytes_acked), info.tcpi_snd_cwnd);
            next_sample += o.interval_ms;
        }
        pollfd p{sock.get(), POLLOUT, 0};
        const uint64_t wake = std::min(end, next_sample);
        const int rc = ::poll(&p, 1, static_cast<int>(wake > now ? wake - now : 0));
        if (rc < 0 && errno != EINTR)
            die_errno("poll");
        if (rc > 0 && ::send(sock.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
            errno != EAGAIN && errno != EINTR)
            die_errno("send");
    }

    const auto info = tcp_stats(sock.get());
    const double secs = static_cast<double>(monotonic_ms() - start) / 1000.0;
    std::printf("result label=%s acked=%llu seconds=%.3f mbps=%.2f retrans=%u cwnd=%u rtt_us=%u min_rtt_us=%u "
                "cc=%s %s\n",
                o.label.c_str(), static_cast<unsigned long long>(info.tcpi_bytes_acked), secs,
                static_cast<double>(info.tcpi_bytes_acked) * 8 / secs / 1e6, info.tcpi_total_retrans,
                info.tcpi_snd_cwnd, info.tcpi_rtt, info.tcpi_min_rtt, cc_name(sock.get()).c_str(),
                mercury_info(sock.get()).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    // Tests read samples while the flow runs: never hold lines back.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    const Options o = parse(argc, argv);
    if (o.mode == "server")
        return run_server(o);
    if (o.mode == "client")
        return run_client(o);
    die("mode is server or client");
}
