// SPDX-License-Identifier: GPL-2.0
// mercury-flow: real TCP traffic for Mercury's tests and benchmarks.
//
//   mercury-flow server --port P [--bind ADDR]
//   mercury-flow client --connect ADDR:PORT [--cc NAME] [--prio N] [--seconds S]
//                       [--interval-ms MS] [--label L] [--uid UID] [--connections N]
//                       [--wait-signal] [--flow-rank R] [--chunk BYTES]
//                       [--pacing asked|capped] [--cc-after-connect NAME]
//
// The client sends as fast as the socket takes data and prints, as key=value
// lines: "connected ..." once connected (local endpoint, SO_COOKIE, CC), a
// "sample ..." every --interval-ms (CLOCK_MONOTONIC ms, bytes acked, cwnd), and
// "result ..." at the end (bytes acked from TCP_INFO, retransmits, and the
// rank/weight/held state mercury reports: TCP_CC_INFO from the module, the
// socket storage of the BPF datapath). With --connections N it keeps N
// connections busy at once (for per-ACK cost at many flows); samples and the
// result then add up bytes over all of them, and cwnd, RTT and mercury's
// state are the first connection's. With --wait-signal it connects, then
// sends only once it gets SIGUSR1 (a test's "now", with no handshake delay;
// "connected" gives the pid; it gives up after 60 s). With --flow-rank R it
// gives every connection a per-flow entry (by cookie, rank R) through the
// running datapath before sending, and prints "entries=N". --pacing asked
// leaves the socket asking for the kernel's internal pacing with no cap, as
// bbr's init() does (SO_MAX_PACING_RATE set, then set back to unlimited);
// --pacing capped keeps a cap (a user's pacing). --cc-after-connect switches
// the established connection's CC, as a framework's sockets are switched.
#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <signal.h>
#include <grp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <utility>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "datapath/bpf_maps.hpp"
#include "datapath/datapath.hpp"
#include "flow_key.hpp"
#include "mercury/uapi.h"
#include "parse_number.hpp"
#include "common/unique_fd.hpp"
#include <mercury/client.hpp>

namespace {

constexpr size_t TCP_CA_NAME_MAX = 16;

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
    const auto v = mercury::tools::parse_number<T>(text);
    if (!v)
        die(std::string("invalid ") + what + ": " + std::string(text));
    return *v;
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
    uint32_t connections = 1;
    bool wait_signal = false;
    std::optional<uint8_t> flow_rank;
    uint32_t chunk = 1 << 16;   // bytes per send()
    std::string pacing;          // "", "asked" or "capped"
    std::string cc_after_connect;
};

Options parse(int argc, char** argv)
{
    Options o;
    if (argc < 2)
        die("usage: mercury-flow server --port P | client --connect ADDR:PORT [--cc NAME] [--prio N] "
            "[--seconds S] [--interval-ms MS] [--label L] [--uid UID] [--connections N] [--wait-signal] "
            "[--flow-rank R] [--chunk BYTES] [--pacing asked|capped] [--cc-after-connect NAME]");
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
        else if (a == "--wait-signal")
            o.wait_signal = true;
        else if (a == "--chunk")
            o.chunk = number<uint32_t>(value(), "chunk");
        else if (a == "--flow-rank")
            o.flow_rank = number<uint8_t>(value(), "rank");
        else if (a == "--connections")
            o.connections = number<uint32_t>(value(), "connections");
        else if (a == "--pacing") {
            o.pacing = value();
            if (o.pacing != "asked" && o.pacing != "capped")
                die("--pacing takes asked or capped");
        } else if (a == "--cc-after-connect")
            o.cc_after_connect = value();
        else
            die("unknown option " + std::string(a));
    }
    if (o.connections == 0)
        die("--connections takes a count of at least 1");
    if (o.chunk == 0 || o.chunk > (1u << 20))
        die("--chunk takes 1..1048576 bytes");
    return o;
}

int run_server(const Options& o)
{
    const std::string bind_to = o.bind_addr.empty() ? "0.0.0.0" : o.bind_addr;
    auto ep = mercury::Endpoint::parse(bind_to.find(':') != std::string::npos && bind_to.front() != '['
                                           ? "[" + bind_to + "]:" + std::to_string(o.port)
                                           : bind_to + ":" + std::to_string(o.port));
    if (!ep)
        die("bad --bind/--port");
    mercury::UniqueFd listener(::socket(ep->family, SOCK_STREAM, 0));
    if (listener.get() < 0)
        die_errno("socket");
    const int one = 1;
    setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    socklen_t len = 0;
    const auto addr = to_sockaddr(*ep, len);
    if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), len) < 0)
        die_errno("bind " + ep->to_string());
    if (::listen(listener.get(), SOMAXCONN) < 0)
        die_errno("listen");
    std::printf("listening %s\n", ep->to_string().c_str());
    std::fflush(stdout);

    // One thread drains every connection: the scale tests open 10,000, more
    // than a small VM's threads-max.
    mercury::UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
    if (epoll.get() < 0)
        die_errno("epoll_create1");
    auto watch = [&](int fd) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) < 0)
            die_errno("epoll_ctl");
    };
    watch(listener.get());
    std::unordered_map<int, mercury::UniqueFd> conns;
    std::vector<char> buf(1 << 16);
    std::vector<epoll_event> ready(256);
    for (;;) {
        const int n = ::epoll_wait(epoll.get(), ready.data(), static_cast<int>(ready.size()), -1);
        if (n < 0 && errno != EINTR)
            die_errno("epoll_wait");
        for (int i = 0; i < n; ++i) {
            const int fd = ready[static_cast<size_t>(i)].data.fd;
            if (fd == listener.get()) {
                mercury::UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
                if (conn.get() < 0) {
                    if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)
                        continue;
                    die_errno("accept");
                }
                watch(conn.get());
                conns.emplace(conn.get(), std::move(conn));
            } else {
                const ssize_t got = ::read(fd, buf.data(), buf.size());
                if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
                    conns.erase(fd);   // closing it leaves the epoll set too
            }
        }
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

mercury::UniqueFd open_connection(const Options& o, const mercury::Endpoint& remote)
{
    mercury::UniqueFd sock(::socket(remote.family, SOCK_STREAM, 0));
    if (sock.get() < 0)
        die_errno("socket");
    if (!o.cc.empty())
        if (const std::string why = mercury::set_congestion_control(sock.get(), o.cc); !why.empty())
            die(why);
    if (o.prio && setsockopt(sock.get(), SOL_SOCKET, SO_PRIORITY, &*o.prio, sizeof(*o.prio)) < 0)
        die_errno("SO_PRIORITY");
    // Discard unsent data on close so one test's leftovers never load the next.
    const linger abort_on_close{1, 0};
    setsockopt(sock.get(), SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));

    socklen_t len = 0;
    const auto addr = to_sockaddr(remote, len);
    if (!o.pacing.empty()) {
        const unsigned int gbit = 125000000;   // bytes/s
        if (setsockopt(sock.get(), SOL_SOCKET, SO_MAX_PACING_RATE, &gbit, sizeof(gbit)) < 0)
            die_errno("SO_MAX_PACING_RATE");
        const unsigned int unlimited = ~0U;
        if (o.pacing == "asked" &&
            setsockopt(sock.get(), SOL_SOCKET, SO_MAX_PACING_RATE, &unlimited, sizeof(unlimited)) < 0)
            die_errno("SO_MAX_PACING_RATE");
    }
    if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), len) < 0)
        die_errno("connect " + remote.to_string());
    if (!o.cc_after_connect.empty())
        if (const std::string why = mercury::set_congestion_control(sock.get(), o.cc_after_connect); !why.empty())
            die(why);
    return sock;
}

uint64_t bytes_acked(const std::vector<mercury::UniqueFd>& socks)
{
    uint64_t sum = 0;
    for (const auto& s : socks)
        sum += tcp_stats(s.get()).tcpi_bytes_acked;
    return sum;
}

uint64_t socket_cookie(int fd)
{
    uint64_t cookie = 0;
    socklen_t len = sizeof(cookie);
    if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) < 0)
        die_errno("SO_COOKIE");
    return cookie;
}

void add_flow_entries(const std::vector<mercury::UniqueFd>& socks, uint8_t rank)
{
    std::unique_ptr<mercury::Datapath> dp;
    if (const auto s = mercury::open_datapath(mercury::DatapathKind::kAuto, dp); !s)
        die("--flow-rank: " + s.describe());
    const mercury::Priority prio{rank, {}, 600000u};
    for (const auto& s : socks)
        if (const auto st = dp->set_flow(mercury::FlowKey::by_cookie(socket_cookie(s.get())), prio); !st)
            die("--flow-rank: " + st.describe());
    std::printf("entries=%zu rank=%u\n", socks.size(), rank);
    std::fflush(stdout);
}

int run_client(const Options& o)
{
    const auto remote = mercury::Endpoint::parse(o.connect);
    if (!remote)
        die("--connect takes ADDR:PORT");
    // An unprivileged trainer's view: no capabilities, no supplementary groups.
    if (o.uid && (setgroups(0, nullptr) < 0 || setgid(*o.uid) < 0 || setuid(*o.uid) < 0))
        die_errno("dropping to uid " + std::to_string(*o.uid));
    // Blocked before "connected" is printed, so an early signal waits for us.
    sigset_t go;
    sigemptyset(&go);
    sigaddset(&go, SIGUSR1);
    if (o.wait_signal)
        sigprocmask(SIG_BLOCK, &go, nullptr);
    std::vector<mercury::UniqueFd> socks;
    socks.reserve(o.connections);
    for (uint32_t i = 0; i < o.connections; ++i)
        socks.push_back(open_connection(o, *remote));
    const int first = socks.front().get();

    sockaddr_storage local{};
    socklen_t local_len = sizeof(local);
    getsockname(first, reinterpret_cast<sockaddr*>(&local), &local_len);
    const uint64_t cookie = socket_cookie(first);
    std::printf("connected label=%s local=%s remote=%s cookie=%llu cc=%s connections=%u pid=%d\n", o.label.c_str(),
                from_sockaddr(local).to_string().c_str(), remote->to_string().c_str(),
                static_cast<unsigned long long>(cookie), cc_name(first).c_str(), o.connections,
                static_cast<int>(getpid()));
    std::fflush(stdout);
    if (o.flow_rank)
        add_flow_entries(socks, *o.flow_rank);
    if (o.wait_signal) {
        // Bounded, so a test that never signals fails instead of hanging.
        const timespec limit{60, 0};
        if (sigtimedwait(&go, nullptr, &limit) < 0)
            die_errno("--wait-signal: no SIGUSR1");
    }

    std::vector<pollfd> polls;
    for (const auto& s : socks)
        polls.push_back({s.get(), POLLOUT, 0});
    std::vector<char> buf(o.chunk, 'm');
    const uint64_t start = monotonic_ms();
    const uint64_t end = start + static_cast<uint64_t>(o.seconds * 1000);
    uint64_t next_sample = o.interval_ms ? start : UINT64_MAX;
    for (uint64_t now = start; now < end; now = monotonic_ms()) {
        if (now >= next_sample) {
            const auto info = tcp_stats(first);
            std::printf("sample label=%s t_ms=%llu acked=%llu cwnd=%u ssthresh=%u ca_state=%u\n", o.label.c_str(),
                        static_cast<unsigned long long>(now), static_cast<unsigned long long>(bytes_acked(socks)),
                        info.tcpi_snd_cwnd, info.tcpi_snd_ssthresh, info.tcpi_ca_state);
            next_sample += o.interval_ms;
        }
        const uint64_t wake = std::min(end, next_sample);
        const int rc = ::poll(polls.data(), polls.size(), static_cast<int>(wake > now ? wake - now : 0));
        if (rc < 0 && errno != EINTR)
            die_errno("poll");
        for (auto& p : polls) {
            if (rc <= 0 || !(p.revents & POLLOUT))
                continue;
            if (::send(p.fd, buf.data(), buf.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN &&
                errno != EINTR)
                die_errno("send");
        }
    }

    const auto info = tcp_stats(first);
    const uint64_t acked = bytes_acked(socks);
    uint64_t retrans = 0;
    for (const auto& s : socks)
        retrans += tcp_stats(s.get()).tcpi_total_retrans;
    const double secs = static_cast<double>(monotonic_ms() - start) / 1000.0;
    std::printf("result label=%s acked=%llu seconds=%.3f mbps=%.2f retrans=%llu cwnd=%u rtt_us=%u min_rtt_us=%u "
                "cc=%s %s\n",
                o.label.c_str(), static_cast<unsigned long long>(acked), secs,
                static_cast<double>(acked) * 8 / secs / 1e6, static_cast<unsigned long long>(retrans),
                info.tcpi_snd_cwnd, info.tcpi_rtt, info.tcpi_min_rtt, cc_name(first).c_str(),
                mercury_info(first).c_str());
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
