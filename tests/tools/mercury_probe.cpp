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
//   mercury-probe lossy --dev IF [--dev-netns NS] --ppm N
//       Drops each TCP data segment arriving on IF (tc ingress) with
//       probability N in a million, until SIGINT or SIGTERM. Prints "ready"
//       once attached and "seen=S dropped=D" at the end.
//   mercury-probe windows
//       Counts, host-wide, the times a mercury socket is seen with
//       snd_cwnd <= 0 (what tcp_snd_cwnd_set WARNs about, once per boot)
//       or ssthresh 0 or past 2^31 - 1: on each segment it takes, on a change of its
//       congestion state and when it is destroyed (tracepoints), until
//       SIGINT or SIGTERM. Prints "ready" once attached, and a line
//       "windows seq=K checks=N bad_windows=B bad_ssthresh=S last=..." on
//       each SIGUSR1 (K counts them) and at the end.
//   mercury-probe trace [--state-pin PATH]
//       One line per segment a mercury socket of this netns takes (before
//       the kernel processes it) and per change of its congestion state,
//       until SIGINT or SIGTERM: its window, RTTs, data out, and the CC's
//       per-flow state (rank, job, flags, last back-off); with the BPF
//       datapath, also how long ago each job last had data out here, read
//       from its state map (default pin MERCURY_BPF_PIN_DIR/mercury_state;
//       without it, "-"). Columns in the header line, after "ready".
//       For finding out why a flow yielded, held or cut, from what it saw.
//
// Programs and why: tests/tools/mercury_probe.bpf.c.
#include <bpf/bpf.h>
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
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include <mercury/bpf_maps.h>

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
        "[--retransmits R [--until-sport PORT2]] [--until-recovery [--signal PID]] [--timeout-ms MS] | recoveries | windows | lossy --dev IF [--dev-netns NS] --ppm N | trace [--state-pin PATH]");
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
Skeleton open_probe(bool tc, bool tracepoint, bool windows = false)
{
    Skeleton skel(mercury_probe__open());
    if (!skel)
        die("opening the BPF object: " + errno_text(errno));
    bpf_program__set_autoload(skel->progs.drop_sport_prog, tc);
    bpf_program__set_autoload(skel->progs.lossy_prog, false);
    bpf_program__set_autoload(skel->progs.count_recoveries, tracepoint);
    bpf_program__set_autoload(skel->progs.window_on_segment, windows);
    bpf_program__set_autoload(skel->progs.window_on_state, windows);
    bpf_program__set_autoload(skel->progs.window_at_close, windows);
    bpf_program__set_autoload(skel->progs.trace_segment, false);
    bpf_program__set_autoload(skel->progs.trace_state, false);
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

// Blocks SIGINT and SIGTERM (and more) before "ready", so a stop sent right
// after it cannot be lost; returns the set to sigwait on.
sigset_t block_stop_signals(std::initializer_list<int> more = {})
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    for (const int sig : more)
        sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    return set;
}

int run_recoveries(int argc)
{
    if (argc != 2)
        usage();
    Skeleton skel = open_probe(false, true);
    skel->rodata->netns_cookie = own_netns_cookie();
    load(skel.get());
    Link link = attach_tracepoint(skel.get());
    sigset_t stop = block_stop_signals();
    std::printf("ready\n");
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    link.reset();
    std::printf("recoveries=%llu\n", static_cast<unsigned long long>(skel->bss->recoveries));
    return 0;
}

int run_lossy(int argc, char** argv)
{
    std::string dev, dev_netns;
    uint32_t ppm = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string_view a = argv[i];
        const std::string_view v = argv[i + 1];
        if (a == "--dev")
            dev = v;
        else if (a == "--dev-netns")
            dev_netns = v;
        else if (a == "--ppm")
            ppm = number<uint32_t>(v, "ppm");
        else
            usage();
    }
    if (argc % 2 || dev.empty() || !ppm || ppm > 1000000)
        usage();
    Skeleton skel = open_probe(false, false);
    bpf_program__set_autoload(skel->progs.lossy_prog, true);
    skel->rodata->loss_ppm = ppm;
    load(skel.get());
    sigset_t stop = block_stop_signals();
    {
        TcIngressHook hook(dev_netns, dev, bpf_program__fd(skel->progs.lossy_prog));
        std::printf("ready\n");
        std::fflush(stdout);
        int sig = 0;
        sigwait(&stop, &sig);
    }
    std::printf("seen=%llu dropped=%llu\n", static_cast<unsigned long long>(skel->bss->lossy_seen),
                static_cast<unsigned long long>(skel->bss->lossy_dropped));
    return 0;
}

void print_windows(const mercury_probe* skel, unsigned seq)
{
    const auto* b = skel->bss;
    std::printf("windows seq=%u checks=%llu bad_windows=%llu bad_ssthresh=%llu last=cwnd:%d,ssthresh:%u,ca_state:%u,sport:%u\n",
                seq, static_cast<unsigned long long>(__atomic_load_n(&b->segments_seen, __ATOMIC_RELAXED)),
                static_cast<unsigned long long>(__atomic_load_n(&b->bad_windows, __ATOMIC_RELAXED)),
                static_cast<unsigned long long>(__atomic_load_n(&b->bad_ssthresh, __ATOMIC_RELAXED)),
                b->last_bad_cwnd, b->last_bad_ssthresh, b->last_bad_ca_state, b->last_bad_sport);
    std::fflush(stdout);
}

int run_windows(int argc)
{
    if (argc != 2)
        usage();
    Skeleton skel = open_probe(false, false, true);
    load(skel.get());
    if (const int err = mercury_probe__attach(skel.get()))
        die("attaching to the tcp_probe, tcp_cong_state_set and tcp_destroy_sock tracepoints: " + errno_text(err));
    sigset_t wanted = block_stop_signals({SIGUSR1});
    std::printf("ready\n");
    std::fflush(stdout);
    for (unsigned seq = 1;; ++seq) {
        int sig = 0;
        sigwait(&wanted, &sig);
        print_windows(skel.get(), seq);
        if (sig != SIGUSR1)
            return 0;
    }
}

struct TraceEvent {  // struct mercury_trace_record of mercury_probe.bpf.c
    uint64_t t_ns;
    uint64_t job_active_us[MERCURY_NUM_JOBS];
    uint64_t mstamp_us;
    uint32_t cwnd, ssthresh, srtt_us, min_rtt_us, packets_out, unsent;
    uint32_t last_backoff_us, holds, delivered;
    uint32_t last_rtt_us;
    uint16_t sport, dport;
    uint16_t weight;
    uint8_t rank, job, flags, flows, ca_state, kind;
    uint8_t new_state, pad[5];
};

struct TraceState {
    bool have_state_map = false;
};

// One line per record; job ages in µs from the socket's own clock (a stamp
// from another CPU may be a little ahead: 0).
int print_trace_event(void* ctx, void* data, size_t size)
{
    if (size < sizeof(TraceEvent))
        return 0;
    const auto* st = static_cast<const TraceState*>(ctx);
    TraceEvent e;
    std::memcpy(&e, data, sizeof(e));
    std::printf("%llu %u %u %s %u %u %u %u %u %u %u %u %u %u %u 0x%x %u %u %u %u %u ",
                static_cast<unsigned long long>(e.t_ns / 1000), e.sport, e.dport, e.kind ? "state" : "seg",
                e.kind ? e.new_state : e.ca_state, e.cwnd, e.ssthresh, e.srtt_us, e.min_rtt_us, e.packets_out,
                e.unsent, e.delivered, e.rank, e.job, e.weight, e.flags, e.flows, e.holds, e.last_backoff_us,
                static_cast<unsigned>(e.mstamp_us), e.last_rtt_us);
    if (!st->have_state_map) {
        std::printf("-\n");
        return 0;
    }
    bool any = false;
    for (unsigned j = 0; j < MERCURY_NUM_JOBS; ++j) {
        const uint64_t t = e.job_active_us[j];
        if (!t)
            continue;
        std::printf("%s%u:%llu", any ? "," : "", j,
                    static_cast<unsigned long long>(t < e.mstamp_us ? e.mstamp_us - t : 0));
        any = true;
    }
    std::printf("%s\n", any ? "" : "none");
    return 0;
}

int run_trace(int argc, char** argv)
{
    std::string pin = std::string(MERCURY_BPF_PIN_DIR) + "/mercury_state";
    if (argc == 4 && std::string_view(argv[2]) == "--state-pin")
        pin = argv[3];
    else if (argc != 2)
        usage();
    Skeleton skel = open_probe(false, false);
    bpf_program__set_autoload(skel->progs.trace_segment, true);
    bpf_program__set_autoload(skel->progs.trace_state, true);
    skel->rodata->netns_cookie = own_netns_cookie();
    TraceState state;
    const int pinned = bpf_obj_get(pin.c_str());
    if (pinned >= 0) {
        if (const int err = bpf_map__reuse_fd(skel->maps.mercury_state, pinned))
            die("using " + pin + ": " + errno_text(err));
        ::close(pinned);
        state.have_state_map = true;
    } else if (errno != ENOENT) {
        die("opening " + pin + ": " + errno_text(errno));
    }
    load(skel.get());
    Link seg(bpf_program__attach(skel->progs.trace_segment), bpf_link__destroy);
    Link cong(bpf_program__attach(skel->progs.trace_state), bpf_link__destroy);
    if (!seg || !cong)
        die("attaching to tcp_probe and tcp_cong_state_set: " + errno_text(errno));
    std::unique_ptr<ring_buffer, decltype(&ring_buffer__free)> rb(
        ring_buffer__new(bpf_map__fd(skel->maps.trace_events), print_trace_event, &state, nullptr),
        ring_buffer__free);
    if (!rb)
        die("opening the ring buffer: " + errno_text(errno));
    sigset_t stop = block_stop_signals();
    std::printf("ready\n");
    std::printf("# t_us sport dport kind ca_state cwnd ssthresh srtt_us min_rtt_us packets_out unsent "
                "delivered rank job weight flags flows holds last_backoff_us mstamp_us last_rtt_us job_ages_us\n");
    std::fflush(stdout);
    const timespec zero{};
    while (sigtimedwait(&stop, nullptr, &zero) < 0) {
        const int n = ring_buffer__poll(rb.get(), 100);
        if (n < 0 && n != -EINTR)
            die("polling the ring buffer: " + errno_text(n));
    }
    seg.reset();
    cong.reset();
    ring_buffer__consume(rb.get());
    std::printf("# lost=%llu\n", static_cast<unsigned long long>(skel->bss->trace_lost));
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
    if (mode == "windows")
        return run_windows(argc);
    if (mode == "lossy")
        return run_lossy(argc, argv);
    if (mode == "trace")
        return run_trace(argc, argv);
    usage();
}
