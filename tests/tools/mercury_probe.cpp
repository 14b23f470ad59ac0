// SPDX-License-Identifier: GPL-2.0
// mercury-probe: test-only BPF helpers for Mercury's integration tests.
//
//   mercury-probe drop --dev IF [--dev-netns NS] --sport PORT [--count K]
//                      [--retransmits R [--until-sport PORT2]]
//                      [--until-recovery [--signal PID]] [--timeout-ms MS]
//       Drops the next K (default 1) TCP data segments from source port PORT
//       arriving on IF (tc ingress; IF in netns NS, /run/netns/NS, if given:
//       the next hop, so that they are lost on the path), then the flow's
//       next R (default 0) retransmissions, then detaches. With
//       --until-sport it goes on dropping the flow's retransmissions (at most
//       64 more) until a data segment from PORT2 has passed IF: the recovery
//       lasts until the flow that PID starts is on the wire, however long a
//       busy host takes to run it. With
//       --until-recovery it also waits until the socket bound to PORT in this
//       process's netns has entered TCP_CA_Recovery, and then sends PID
//       SIGUSR1 at once (a recovery lasts about an RTT: no time for a shell).
//       Prints "dropped=N matched=M retransmits_dropped=N [recovery=0|1]
//       [until_seen=0|1]";
//       exits 1 if any of it did not happen in time.
//   mercury-probe recoveries
//       Counts this netns's sockets entering TCP_CA_Recovery, as seen by a
//       BPF program on the tcp_cong_state_set tracepoint, until SIGINT or
//       SIGTERM. Prints "ready" once attached and "recoveries=N" at the end.
//
// Programs and why: tests/tools/mercury_probe.bpf.c.
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "mercury_probe.skel.h"
#include "parse_number.hpp"

namespace {

#ifndef SO_NETNS_COOKIE
constexpr int SO_NETNS_COOKIE = 71;
#endif

[[noreturn]] void die(const std::string& what)
{
    std::fprintf(stderr, "mercury-probe: %s\n", what.c_str());
    std::exit(2);
}

[[noreturn]] void usage()
{
    die("usage: mercury-probe drop --dev IF [--dev-netns NS] --sport PORT [--count K] "
        "[--retransmits R [--until-sport PORT2]] [--until-recovery [--signal PID]] [--timeout-ms MS] | recoveries");
}

std::string errno_text(int err)
{
    return std::strerror(err < 0 ? -err : err);
}

template <typename T>
T number(std::string_view text, const char* what)
{
    const auto v = mercury::tools::parse_number<T>(text);
    if (!v)
        die(std::string("invalid ") + what + ": " + std::string(text));
    return *v;
}

struct SkeletonDeleter {
    void operator()(mercury_probe* s) const { mercury_probe__destroy(s); }
};
using Skeleton = std::unique_ptr<mercury_probe, SkeletonDeleter>;
using Link = std::unique_ptr<bpf_link, decltype(&bpf_link__destroy)>;

// Opened with only what a mode uses loaded (kernel BTF for the tracepoint,
// clsact for tc).
Skeleton open_probe(bool tc, bool tracepoint)
{
    Skeleton skel(mercury_probe__open());
    if (!skel)
        die("opening the BPF object: " + errno_text(errno));
    bpf_program__set_autoload(skel->progs.drop_sport_prog, tc);
    bpf_program__set_autoload(skel->progs.count_recoveries, tracepoint);
    return skel;
}

void load(mercury_probe* skel)
{
    if (const int err = mercury_probe__load(skel))
        die("loading the BPF programs: " + errno_text(err));
}

Link attach_tracepoint(mercury_probe* skel)
{
    Link link(bpf_program__attach(skel->progs.count_recoveries), bpf_link__destroy);
    if (!link)
        die("attaching to tcp_cong_state_set: " + errno_text(errno));
    return link;
}

uint64_t own_netns_cookie()
{
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0)
        die("socket: " + errno_text(errno));
    uint64_t cookie = 0;
    socklen_t len = sizeof(cookie);
    const int rc = getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len);
    const int saved = errno;
    ::close(fd);
    if (rc < 0)
        die("SO_NETNS_COOKIE: " + errno_text(saved));
    return cookie;
}

// While alive, this thread is in the named netns (/run/netns/NAME, as `ip
// netns` makes them); back in the original one afterwards. An empty name
// stays put.
class NetnsScope {
public:
    explicit NetnsScope(const std::string& name)
    {
        if (name.empty())
            return;
        original_ = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        const int target = ::open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
        if (original_ < 0 || target < 0 || setns(target, CLONE_NEWNET) < 0)
            die("entering netns " + name + ": " + errno_text(errno));
        ::close(target);
    }
    ~NetnsScope()
    {
        if (original_ < 0)
            return;
        if (setns(original_, CLONE_NEWNET) < 0)
            die("returning from the netns: " + errno_text(errno));
        ::close(original_);
    }
    NetnsScope(const NetnsScope&) = delete;
    NetnsScope& operator=(const NetnsScope&) = delete;

private:
    int original_ = -1;
};

// The tc ingress hook of one device, in @netns; the clsact qdisc is removed
// again only if this object created it.
class TcIngressHook {
public:
    TcIngressHook(std::string netns, const std::string& dev, int prog_fd) : netns_(std::move(netns))
    {
        NetnsScope in(netns_);
        hook_.sz = sizeof(hook_);
        hook_.ifindex = static_cast<int>(if_nametoindex(dev.c_str()));
        if (!hook_.ifindex)
            die("no device " + dev + (netns_.empty() ? "" : " in netns " + netns_));
        hook_.attach_point = BPF_TC_INGRESS;
        const int created = bpf_tc_hook_create(&hook_);
        if (created && created != -EEXIST)
            die("creating the clsact qdisc: " + errno_text(created));
        owns_qdisc_ = created == 0;
        opts_.sz = sizeof(opts_);
        opts_.prog_fd = prog_fd;
        if (const int err = bpf_tc_attach(&hook_, &opts_)) {
            release_qdisc();
            die("attaching to tc ingress: " + errno_text(err));
        }
    }
    ~TcIngressHook()
    {
        NetnsScope in(netns_);
        opts_.flags = opts_.prog_fd = opts_.prog_id = 0;
        bpf_tc_detach(&hook_, &opts_);
        release_qdisc();
    }
    TcIngressHook(const TcIngressHook&) = delete;
    TcIngressHook& operator=(const TcIngressHook&) = delete;

private:
    void release_qdisc()
    {
        if (!owns_qdisc_)
            return;
        hook_.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
        bpf_tc_hook_destroy(&hook_);
        owns_qdisc_ = false;
    }

    std::string netns_;
    bpf_tc_hook hook_{};
    bpf_tc_opts opts_{};
    bool owns_qdisc_ = false;
};

struct DropOptions {
    std::string dev;
    std::string dev_netns;
    uint16_t sport = 0;
    uint64_t count = 1;
    uint64_t retransmits = 0;
    uint16_t until_sport = 0;
    bool until_recovery = false;
    pid_t signal_pid = 0;
    uint32_t timeout_ms = 10000;
};

DropOptions parse_drop(int argc, char** argv)
{
    DropOptions o;
    for (int i = 2; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--until-recovery") {
            o.until_recovery = true;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const std::string_view v = argv[++i];
        if (a == "--dev")
            o.dev = v;
        else if (a == "--dev-netns")
            o.dev_netns = v;
        else if (a == "--sport")
            o.sport = number<uint16_t>(v, "port");
        else if (a == "--count")
            o.count = number<uint64_t>(v, "count");
        else if (a == "--retransmits")
            o.retransmits = number<uint64_t>(v, "retransmits");
        else if (a == "--until-sport")
            o.until_sport = number<uint16_t>(v, "port");
        else if (a == "--signal")
            o.signal_pid = number<pid_t>(v, "pid");
        else if (a == "--timeout-ms")
            o.timeout_ms = number<uint32_t>(v, "timeout");
        else
            usage();
    }
    if (o.dev.empty() || !o.sport || !o.count || (o.signal_pid && !o.until_recovery) ||
        (o.until_sport && (!o.retransmits || o.until_sport == o.sport)))
        usage();
    return o;
}

int run_drop(int argc, char** argv)
{
    const DropOptions o = parse_drop(argc, argv);
    Skeleton skel = open_probe(true, o.until_recovery);
    skel->rodata->drop_sport = o.sport;
    skel->rodata->drop_count = o.count;
    skel->rodata->retrans_count = o.retransmits;
    skel->rodata->until_sport = o.until_sport;
    skel->rodata->netns_cookie = own_netns_cookie();
    load(skel.get());
    Link observer(nullptr, bpf_link__destroy);
    if (o.until_recovery)
        observer = attach_tracepoint(skel.get());

    // The counters live in the programs' mmap'ed .bss, written by the kernel.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.timeout_ms);
    auto reached = [&](const __u64* counter, __u64 target) {
        while (__atomic_load_n(counter, __ATOMIC_RELAXED) < target && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        return __atomic_load_n(counter, __ATOMIC_RELAXED) >= target;
    };
    bool ok;
    {
        TcIngressHook hook(o.dev_netns, o.dev, bpf_program__fd(skel->progs.drop_sport_prog));
        ok = reached(&skel->bss->dropped, o.count);
        if (ok && o.until_recovery)
            ok = reached(&skel->bss->port_recoveries, 1);
        if (ok && o.signal_pid && kill(o.signal_pid, SIGUSR1) < 0)
            die("signalling " + std::to_string(o.signal_pid) + ": " + errno_text(errno));
        if (ok)
            ok = reached(&skel->bss->retrans_dropped, o.retransmits);
        if (ok && o.until_sport)
            ok = reached(&skel->bss->until_seen, 1);
    }
    std::printf("dropped=%llu matched=%llu retransmits_dropped=%llu",
                static_cast<unsigned long long>(skel->bss->dropped),
                static_cast<unsigned long long>(skel->bss->matched),
                static_cast<unsigned long long>(skel->bss->retrans_dropped));
    if (o.until_recovery)
        std::printf(" recovery=%d", skel->bss->port_recoveries ? 1 : 0);
    if (o.until_sport)
        std::printf(" until_seen=%d", skel->bss->until_seen ? 1 : 0);
    std::printf("\n");
    return ok ? 0 : 1;
}

int run_recoveries(int argc)
{
    if (argc != 2)
        usage();
    Skeleton skel = open_probe(false, true);
    skel->rodata->netns_cookie = own_netns_cookie();
    load(skel.get());
    Link link = attach_tracepoint(skel.get());
    // Blocked before "ready", so a stop sent right after cannot be lost.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, nullptr);
    std::printf("ready\n");
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    link.reset();
    std::printf("recoveries=%llu\n", static_cast<unsigned long long>(skel->bss->recoveries));
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 2)
        usage();
    const std::string_view mode = argv[1];
    if (mode == "drop")
        return run_drop(argc, argv);
    if (mode == "recoveries")
        return run_recoveries(argc);
    usage();
}
