// SPDX-License-Identifier: GPL-2.0
// mercury-nccl-harness: drives libnccl-net-mercury.so as NCCL's proxy
// thread does (dlopen, dlsym of the plugin table, init, listen, handle
// exchange, connect and accept called until they return a comm, isend and
// irecv, then test until done), with no NCCL and no GPU.
//
//   mercury-nccl-harness selftest PLUGIN [--version 10|11]
//       Both ends in this process over $NCCL_SOCKET_IFNAME (loopback in
//       ctest): data intact for sizes from 0 bytes to 64 MiB, 32 requests
//       outstanding, a grouped receive, a tag or size the receive does not
//       expect, a peer killed mid-message, a peer that stalls mid-message,
//       hostile handshakes and handles, the traffic class of a v11
//       communicator, and the congestion control of every socket it opened.
//       $MERCURY_NCCL_KILLS=N kills the peer N times over (the sanitizer
//       build's run: 100). Prints PASS/FAIL lines; exits 1 on any FAIL.
//   mercury-nccl-harness listen PLUGIN --handle FILE [--version V] [--seconds S]
//   mercury-nccl-harness send PLUGIN --handle FILE --class C [--version V] [--seconds S]
//       One connection between two processes (network namespaces): listen
//       writes its handle to FILE and receives for S seconds; send reads it,
//       connects with traffic class C (-1: unset) and sends 1 MiB messages,
//       8 in flight as NCCL keeps its steps, for S seconds. Each prints
//       "bytes=N in_window=M seconds=T": M the bytes done within the S s.
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../../nccl/src/nccl_net.h"
#include "../../nccl/src/wire.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace wire = mercury::nccl;

int failures = 0;

void pass(const std::string& name, const std::string& detail)
{
    std::printf("PASS nccl/%s  # %s\n", name.c_str(), detail.c_str());
    std::fflush(stdout);
}

void fail(const std::string& name, const std::string& detail)
{
    std::printf("FAIL nccl/%s: %s\n", name.c_str(), detail.c_str());
    std::fflush(stdout);
    ++failures;
}

void expect(bool ok, const std::string& name, const std::string& detail)
{
    ok ? pass(name, detail) : fail(name, detail);
}

// What the plugin logged through NCCL's logger.
std::mutex log_mu;
std::vector<std::string> log_lines;

void logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    std::lock_guard lock(log_mu);
    log_lines.push_back(std::string(level == NCCL_LOG_WARN ? "WARN " : "INFO ") + buf);
    if (std::getenv("HARNESS_VERBOSE"))
        std::fprintf(stderr, "%s\n", log_lines.back().c_str());
}

size_t log_count(std::string_view needle)
{
    std::lock_guard lock(log_mu);
    return static_cast<size_t>(
        std::count_if(log_lines.begin(), log_lines.end(), [&](const std::string& l) { return l.find(needle) != std::string::npos; }));
}

// The plugin as NCCL sees it, either version, behind one interface.
struct Plugin {
    int version = 11;
    ncclNet_v10_t* v10 = nullptr;
    ncclNet_v11_t* v11 = nullptr;
    void* ctx = nullptr;   // v11: the communicator's context

    ncclResult_t init(int traffic_class)
    {
        ncclNetCommConfig_v11_t config{traffic_class};
        return version == 11 ? v11->init(&ctx, 42, &config, logger, nullptr) : v10->init(logger, nullptr);
    }
    ncclResult_t listen(void* handle, void** comm)
    {
        return version == 11 ? v11->listen(ctx, 0, handle, comm) : v10->listen(0, handle, comm);
    }
    ncclResult_t connect(void* handle, void** comm, int traffic_class)
    {
        ncclNetCommConfig_v10_t config{traffic_class};
        return version == 11 ? v11->connect(ctx, 0, handle, comm, nullptr)
                             : v10->connect(0, &config, handle, comm, nullptr);
    }
    ncclResult_t accept(void* listen, void** comm)
    {
        return version == 11 ? v11->accept(listen, comm, nullptr) : v10->accept(listen, comm, nullptr);
    }
    ncclResult_t isend(void* comm, void* data, size_t size, int tag, void** req)
    {
        return version == 11 ? v11->isend(comm, data, size, tag, nullptr, nullptr, req)
                             : v10->isend(comm, data, size, tag, nullptr, nullptr, req);
    }
    ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** req)
    {
        void* mh[wire::kMaxGroup] = {};
        return version == 11 ? v11->irecv(comm, n, data, sizes, tags, mh, nullptr, req)
                             : v10->irecv(comm, n, data, sizes, tags, mh, nullptr, req);
    }
    ncclResult_t test(void* req, int* done, int* sizes)
    {
        return version == 11 ? v11->test(req, done, sizes) : v10->test(req, done, sizes);
    }
    void close_send(void* c) { version == 11 ? v11->closeSend(c) : v10->closeSend(c); }
    void close_recv(void* c) { version == 11 ? v11->closeRecv(c) : v10->closeRecv(c); }
    void close_listen(void* c) { version == 11 ? v11->closeListen(c) : v10->closeListen(c); }
    void finalize()
    {
        if (version == 11 && ctx)
            v11->finalize(ctx);
        ctx = nullptr;
    }
};

Plugin load(const std::string& path, int version)
{
    void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        std::fprintf(stderr, "mercury-nccl-harness: %s\n", ::dlerror());
        std::exit(2);
    }
    Plugin p;
    p.version = version;
    p.v10 = static_cast<ncclNet_v10_t*>(::dlsym(lib, "ncclNetPlugin_v10"));
    p.v11 = static_cast<ncclNet_v11_t*>(::dlsym(lib, "ncclNetPlugin_v11"));
    if (!p.v10 || !p.v11) {
        std::fprintf(stderr, "mercury-nccl-harness: %s lacks ncclNetPlugin_v10 or _v11\n", path.c_str());
        std::exit(2);
    }
    return p;
}

// NCCL's loop: call until the comm appears (each call must return at once).
bool establish(Plugin& p, void* listen, char* handle, void** send, void** recv, int traffic_class = -1)
{
    *send = *recv = nullptr;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while ((!*send || !*recv) && Clock::now() < deadline) {
        if (!*send && p.connect(handle, send, traffic_class) != ncclSuccess)
            return false;
        if (!*recv && p.accept(listen, recv) != ncclSuccess)
            return false;
    }
    return *send && *recv;
}

// Tests requests until all are done (or one fails, or 30 s pass); returns
// the first error.
ncclResult_t wait_all(Plugin& p, std::vector<void*>& reqs, std::vector<std::vector<int>>* sizes = nullptr,
                      std::chrono::milliseconds limit = std::chrono::seconds(30))
{
    if (sizes)
        sizes->assign(reqs.size(), std::vector<int>(wire::kMaxGroup, -1));
    const auto deadline = Clock::now() + limit;
    size_t left = std::count_if(reqs.begin(), reqs.end(), [](void* r) { return r != nullptr; });
    while (left && Clock::now() < deadline) {
        for (size_t i = 0; i < reqs.size(); ++i) {
            if (!reqs[i])
                continue;
            int done = 0;
            int s[wire::kMaxGroup] = {};
            const ncclResult_t r = p.test(reqs[i], &done, s);
            if (r != ncclSuccess)
                return r;
            if (done) {
                if (sizes)
                    std::copy(s, s + wire::kMaxGroup, (*sizes)[i].begin());
                reqs[i] = nullptr;
                --left;
            }
        }
    }
    return left ? ncclRemoteError : ncclSuccess;
}

void fill(std::vector<char>& buf, uint32_t seed)
{
    std::mt19937 rng(seed);
    for (auto& c : buf)
        c = static_cast<char>(rng());
}

// One message each way of each size: sent, received, compared.
void check_sizes(Plugin& p, void* send, void* recv)
{
    const size_t sizes[] = {0, 1, 7, 4095, 4096, 65535, 65536, 65537, (1u << 20) + 3, 64u << 20};
    std::string bad;
    for (const size_t size : sizes) {
        std::vector<char> out(size), in(size + 16, 0);
        fill(out, static_cast<uint32_t>(size));
        void* rreq = nullptr;
        void* sreq = nullptr;
        void* data = in.data();
        size_t cap = in.size();
        int tag = 5;
        if (p.irecv(recv, 1, &data, &cap, &tag, &rreq) != ncclSuccess || !rreq ||
            p.isend(send, out.data(), size, 5, &sreq) != ncclSuccess || !sreq) {
            bad += " " + std::to_string(size) + ":post";
            continue;
        }
        std::vector<void*> reqs{sreq, rreq};
        std::vector<std::vector<int>> got;
        if (const ncclResult_t r = wait_all(p, reqs, &got); r != ncclSuccess) {
            bad += " " + std::to_string(size) + ":error" + std::to_string(r);
            continue;
        }
        if (got[1][0] != static_cast<int>(size) || got[0][0] != static_cast<int>(size) ||
            !std::equal(out.begin(), out.end(), in.begin()))
            bad += " " + std::to_string(size) + ":data(" + std::to_string(got[1][0]) + ")";
    }
    expect(bad.empty(), "integrity", bad.empty() ? "0 B to 64 MiB, odd sizes included, intact" : "bad:" + bad);
}

// 32 receives and 32 sends outstanding at once, of random sizes, tested in
// a shuffled order; a 33rd isend gets no request (NCCL calls again).
void check_outstanding(Plugin& p, void* send, void* recv)
{
    constexpr int kN = NCCL_NET_MAX_REQUESTS;
    std::mt19937 rng(7);
    std::vector<std::vector<char>> out(kN), in(kN);
    std::vector<void*> reqs;
    std::string bad;
    for (int i = 0; i < kN; ++i) {
        out[i].resize(rng() % (300u << 10));
        fill(out[i], 100 + i);
        in[i].assign(out[i].size(), 0);
        void* data = in[i].data();
        size_t cap = in[i].size();
        int tag = i;
        void* r = nullptr;
        if (p.irecv(recv, 1, &data, &cap, &tag, &r) != ncclSuccess || !r)
            bad += " irecv" + std::to_string(i);
        reqs.push_back(r);
    }
    for (int i = 0; i < kN; ++i) {
        void* r = nullptr;
        if (p.isend(send, out[i].data(), out[i].size(), i, &r) != ncclSuccess || !r)
            bad += " isend" + std::to_string(i);
        reqs.push_back(r);
    }
    void* extra = nullptr;
    char one = 0;
    const ncclResult_t full = p.isend(send, &one, 1, 0, &extra);
    std::shuffle(reqs.begin(), reqs.end(), rng);
    const ncclResult_t r = wait_all(p, reqs);
    for (int i = 0; i < kN; ++i)
        if (in[i] != out[i])
            bad += " data" + std::to_string(i);
    expect(bad.empty() && r == ncclSuccess && full == ncclSuccess && !extra, "outstanding",
           std::to_string(kN) + " sends and receives at once, tested shuffled: " +
               (bad.empty() && r == ncclSuccess ? "all intact" : "bad:" + bad + " result " + std::to_string(r)) +
               "; a 33rd isend: " + (extra ? "got a request" : "none, as NCCL expects"));
}

// One irecv of 8 buffers (tags 0..7); the 8 sends come in another order.
void check_grouped(Plugin& p, void* send, void* recv)
{
    constexpr int kN = wire::kMaxGroup;
    std::vector<std::vector<char>> out(kN), in(kN);
    void* data[kN];
    size_t caps[kN];
    int tags[kN];
    for (int i = 0; i < kN; ++i) {
        out[i].resize(1000u * (i + 1) + 13 * i);
        fill(out[i], 500 + i);
        in[i].assign(out[i].size() + 100, 0);
        data[i] = in[i].data();
        caps[i] = in[i].size();
        tags[i] = 10 + i;
    }
    void* rreq = nullptr;
    const ncclResult_t posted = p.irecv(recv, kN, data, caps, tags, &rreq);
    std::vector<void*> reqs{rreq};
    const int order[kN] = {3, 0, 7, 1, 6, 2, 5, 4};
    for (const int i : order) {
        void* r = nullptr;
        p.isend(send, out[i].data(), out[i].size(), 10 + i, &r);
        reqs.push_back(r);
    }
    std::vector<std::vector<int>> sizes;
    const ncclResult_t r = wait_all(p, reqs, &sizes);
    std::string bad;
    for (int i = 0; i < kN; ++i)
        if (sizes[0][i] != static_cast<int>(out[i].size()) ||
            !std::equal(out[i].begin(), out[i].end(), in[i].begin()))
            bad += " " + std::to_string(i);
    expect(posted == ncclSuccess && r == ncclSuccess && bad.empty(), "grouped-receive",
           "8 buffers in one irecv, sent as tags 13,10,17,11,16,12,15,14: " +
               (bad.empty() ? std::string("each in its tag's buffer, sizes reported") : "wrong:" + bad));
}

// A message the receive does not expect fails the connection with NCCL's
// code for a usage error, and says why.
void check_mismatch(Plugin& p, void* listen, char* handle, const std::string& what, int send_tag, size_t send_size)
{
    void *send = nullptr, *recv = nullptr;
    if (!establish(p, listen, handle, &send, &recv)) {
        fail("mismatch-" + what, "no connection");
        return;
    }
    std::vector<char> out(send_size, 'x'), in(1000);
    void* data = in.data();
    size_t cap = in.size();
    int tag = 1;
    void *rreq = nullptr, *sreq = nullptr;
    p.irecv(recv, 1, &data, &cap, &tag, &rreq);
    p.isend(send, out.data(), out.size(), send_tag, &sreq);
    std::vector<void*> reqs{rreq};
    const size_t warned = log_count("WARN");
    const ncclResult_t r = wait_all(p, reqs, nullptr, std::chrono::seconds(5));
    expect(r == ncclInvalidUsage && log_count("WARN") > warned, "mismatch-" + what,
           "tag " + std::to_string(send_tag) + ", " + std::to_string(send_size) +
               " bytes into a receive of tag 1, 1000 bytes: result " + std::to_string(r) + " (ncclInvalidUsage is " +
               std::to_string(ncclInvalidUsage) + ")");
    p.close_send(send);
    p.close_recv(recv);
}

std::string hex(const char* p, size_t n)
{
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; ++i) {
        s += digits[(p[i] >> 4) & 0xf];
        s += digits[p[i] & 0xf];
    }
    return s;
}

bool unhex(const std::string& s, char* out, size_t n)
{
    if (s.size() < 2 * n)
        return false;
    for (size_t i = 0; i < n; ++i)
        out[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
    return true;
}

// A sender killed while it streams (its kernel closes its sockets): the
// receives fail with ncclRemoteError, never hang. The sender is another
// process started from this program (its `send` mode), as a peer rank is:
// a forked copy of this one would inherit libmercury's state without its
// thread.
// One round: true if the receives ended with ncclRemoteError after the
// kill; *detail says what happened, *ms how long after the kill.
bool killed_peer_once(Plugin& p, void* listen, char* handle, const std::string& plugin_path, std::string* detail,
                      long* ms)
{
    const std::string file = "/tmp/mercury-nccl-harness-" + std::to_string(::getpid()) + ".handle";
    {
        std::ofstream(file + ".tmp") << hex(handle, NCCL_NET_HANDLE_MAXSIZE) << "\n";
        std::filesystem::rename(file + ".tmp", file);
    }
    const pid_t child = ::fork();
    if (child == 0) {
        const int devnull = ::open("/dev/null", O_WRONLY);
        ::dup2(devnull, 1);
        ::dup2(devnull, 2);
        ::execl("/proc/self/exe", "mercury-nccl-harness", "send", plugin_path.c_str(), "--handle", file.c_str(),
                "--seconds", "60", static_cast<char*>(nullptr));
        ::_exit(127);
    }
    void* recv = nullptr;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!recv && Clock::now() < deadline && p.accept(listen, &recv) == ncclSuccess) {
    }
    std::vector<char> in(1u << 20);
    uint64_t received = 0;
    bool killed = false;
    ncclResult_t r = recv ? ncclSuccess : ncclSystemError;
    Clock::time_point t0{};
    const auto give_up = Clock::now() + std::chrono::seconds(30);
    while (r == ncclSuccess && Clock::now() < give_up) {
        void* data = in.data();
        size_t cap = in.size();
        int tag = 0;
        void* rreq = nullptr;
        r = p.irecv(recv, 1, &data, &cap, &tag, &rreq);
        if (r != ncclSuccess || !rreq)
            continue;
        int done = 0, size = 0;
        while (!done && (r = p.test(rreq, &done, &size)) == ncclSuccess && Clock::now() < give_up) {
        }
        received += done ? static_cast<uint64_t>(size) : 0;
        if (!killed && received >= (8u << 20)) {
            ::kill(child, SIGKILL);
            ::waitpid(child, nullptr, 0);
            killed = true;
            t0 = Clock::now();
        }
    }
    if (!killed) {
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
    }
    *ms = killed ? static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count())
                 : -1;
    *detail = "sender killed after " + std::to_string(received >> 20) + " MiB: receives ended with " +
              std::to_string(r) + " " + std::to_string(*ms) + " ms later (ncclRemoteError is " +
              std::to_string(ncclRemoteError) + ")";
    if (recv)
        p.close_recv(recv);
    std::filesystem::remove(file);
    return killed && r == ncclRemoteError;
}

// The killed sender, @rounds times over on one listener
// ($MERCURY_NCCL_KILLS, default 1: the sanitizer build's run asks for 100).
void check_killed_peer(Plugin& p, void* listen, char* handle, const std::string& plugin_path, int rounds)
{
    std::string detail;
    long ms = 0, worst = 0;
    int ok = 0;
    for (int i = 0; i < rounds; ++i) {
        if (killed_peer_once(p, listen, handle, plugin_path, &detail, &ms))
            ++ok;
        else if (rounds > 1)
            std::printf("    round %d: %s\n", i + 1, detail.c_str());
        worst = std::max(worst, ms);
    }
    if (rounds == 1)
        expect(ok == 1, "peer-killed", detail);
    else
        expect(ok == rounds, "peer-killed-x" + std::to_string(rounds),
               std::to_string(ok) + " of " + std::to_string(rounds) + " senders killed mid-stream ended every " +
                   "receive with ncclRemoteError, at most " + std::to_string(worst) + " ms after the kill");
}

// A raw TCP connection to the listener, as the handle names it.
int dial(const wire::Handle& h)
{
    sockaddr_in a{};
    a.sin_family = AF_INET;
    std::memcpy(&a.sin_addr, h.addr, 4);
    a.sin_port = h.port;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// A peer that speaks the protocol, sends a header and part of the message,
// then stalls (alive, silent): the receive fails within the timeout.
void check_stalled_peer(Plugin& p, void* listen, const wire::Handle& h, uint32_t timeout_ms)
{
    std::vector<int> fds;
    const uint64_t conn = 0x1234;
    for (uint16_t i = 0; i <= h.data_sockets; ++i) {
        const int fd = dial(h);
        wire::Hello hello{wire::kMagic, wire::kVersion, i, h.secret, conn, 65536, h.data_sockets, 2, 0};
        if (fd < 0 || ::write(fd, &hello, sizeof(hello)) != sizeof(hello)) {
            fail("peer-stalled", "could not dial the listener");
            return;
        }
        fds.push_back(fd);
    }
    void* recv = nullptr;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!recv && Clock::now() < deadline && p.accept(listen, &recv) == ncclSuccess) {
    }
    const wire::Header header{wire::kMagic, 3, 100000};
    (void)!::write(fds[0], &header, sizeof(header));
    (void)!::write(fds[h.data_sockets ? 1 : 0], "0123456789", 10);
    std::vector<char> in(100000);
    void* data = in.data();
    size_t cap = in.size();
    int tag = 3;
    void* rreq = nullptr;
    if (recv)
        p.irecv(recv, 1, &data, &cap, &tag, &rreq);
    const auto t0 = Clock::now();
    std::vector<void*> reqs{rreq};
    const ncclResult_t r = rreq ? wait_all(p, reqs, nullptr, std::chrono::milliseconds(timeout_ms * 5)) : ncclSystemError;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    // Behaviour, not time: it fails (never hangs: wait_all gives up at 5x
    // the timeout), and for the stall.
    expect(r == ncclRemoteError && log_count("no progress for") == 1, "peer-stalled",
           "10 of 100000 bytes, then silence: the receive ended with " + std::to_string(r) + " after " +
               std::to_string(ms) + " ms (timeout " + std::to_string(timeout_ms) + " ms), logged as a stall: " +
               std::to_string(log_count("no progress for")));
    if (recv)
        p.close_recv(recv);
    for (const int fd : fds)
        ::close(fd);
}

// Garbage at the listener (random bytes, a wrong secret, a Hello cut
// short, a wrong socket count) and garbage handles at connect(): refused,
// said in the log, and the listener still accepts the next real peer.
void check_hostile(Plugin& p, void* listen, char* handle)
{
    const wire::Handle h = *reinterpret_cast<wire::Handle*>(handle);
    std::mt19937 rng(99);
    const size_t warned = log_count("dropping a connection");
    std::vector<int> fds;
    for (int i = 0; i < 4; ++i) {
        wire::Hello hello{wire::kMagic, wire::kVersion, 0, h.secret, 77u + i, 65536, h.data_sockets, 1, 0};
        if (i == 0)
            for (auto* b = reinterpret_cast<unsigned char*>(&hello); b < reinterpret_cast<unsigned char*>(&hello + 1); ++b)
                *b = static_cast<unsigned char>(rng());
        if (i == 1)
            hello.secret ^= 1;
        if (i == 3)
            hello.data_sockets = static_cast<uint16_t>(h.data_sockets + 1);
        const int fd = dial(h);
        if (fd < 0)
            continue;
        (void)!::write(fd, &hello, i == 2 ? sizeof(hello) / 2 : sizeof(hello));
        if (i == 2)
            ::shutdown(fd, SHUT_WR);
        fds.push_back(fd);
    }
    void* none = nullptr;
    for (int i = 0; i < 200; ++i) {
        p.accept(listen, &none);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const size_t dropped = log_count("dropping a connection") - warned;
    // Handles that are not the listener's: random bytes, and a real one
    // whose connect() progress pointer was overwritten.
    char junk[NCCL_NET_HANDLE_MAXSIZE];
    for (auto& b : junk)
        b = static_cast<char>(rng());
    void* send = nullptr;
    const ncclResult_t random_handle = p.connect(junk, &send, -1);
    char forged[NCCL_NET_HANDLE_MAXSIZE];
    std::memcpy(forged, handle, sizeof(forged));
    reinterpret_cast<wire::Handle*>(forged)->pending = 0xdeadbeef;
    void *send2 = nullptr, *recv2 = nullptr;
    const bool still = establish(p, listen, forged, &send2, &recv2) && none == nullptr;
    expect(dropped == 4 && random_handle == ncclInvalidArgument && !send && still, "hostile-handshake",
           std::to_string(dropped) + " of 4 bad handshakes dropped and logged; a random handle: result " +
               std::to_string(random_handle) + "; a handle with a forged progress pointer connects: " +
               (still ? "yes" : "no") + "; none of them made a comm");
    if (send2)
        p.close_send(send2);
    if (recv2)
        p.close_recv(recv2);
    for (const int fd : fds)
        ::close(fd);
}

// The congestion control of every TCP socket this process has open: with
// mercury available, all run it; without, the host's default and one
// warning.
void check_congestion_control(const std::string& when)
{
    std::ifstream avail("/proc/sys/net/ipv4/tcp_available_congestion_control");
    std::string list((std::istreambuf_iterator<char>(avail)), std::istreambuf_iterator<char>());
    const bool available = (" " + list).find(" mercury") != std::string::npos;
    int sockets = 0, on_mercury = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        const int fd = std::atoi(e.path().filename().c_str());
        int type = 0, proto = 0;
        socklen_t len = sizeof(type);
        if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
            continue;
        len = sizeof(proto);
        if (::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP)
            continue;
        int listening = 0;
        len = sizeof(listening);
        ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
        if (listening)
            continue;
        char cc[16] = {};
        len = sizeof(cc);
        ::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &len);
        ++sockets;
        on_mercury += std::string_view(cc) == "mercury";
    }
    const size_t warnings = log_count("congestion control");
    if (available)
        expect(sockets > 0 && on_mercury == sockets, "congestion-control",
               when + ": " + std::to_string(on_mercury) + " of " + std::to_string(sockets) + " sockets on mercury");
    else
        expect(sockets > 0 && on_mercury == 0 && warnings == 1, "congestion-control",
               when + ": mercury not available here; " + std::to_string(sockets) +
                   " sockets on the host default, warnings about it: " + std::to_string(warnings));
}

int selftest(const std::string& path, int version)
{
    Plugin p = load(path, version);
    const std::string v = "v" + std::to_string(version);
    if (version == 11) {
        void* bad = nullptr;
        ncclNetCommConfig_v11_t config{9};
        const ncclResult_t r = p.v11->init(&bad, 1, &config, logger, nullptr);
        expect(r == ncclInvalidArgument && !bad && log_count("traffic class 9") == 1, "class-out-of-range",
               "init with traffic class 9: result " + std::to_string(r) + ", said why in the log");
    }
    if (p.init(version == 11 ? 0 : -1) != ncclSuccess) {
        fail("init", v + ": init failed");
        return 1;
    }
    int ndev = 0;
    p.v11->devices(&ndev);
    ncclNetProperties_v11_t props{};
    p.v11->getProperties(0, &props);
    expect(ndev >= 1 && props.ptrSupport == NCCL_PTR_HOST && props.maxRecvs == 1 && props.speed > 0 && props.name,
           "properties", v + ": " + std::to_string(ndev) + " devices, [0] " + (props.name ? props.name : "?") +
                             ", host memory, maxRecvs 1, " + std::to_string(props.speed) + " Mbit/s");
    if (version == 11)
        expect(log_count("traffic class 0, lane 0") == 1, "class-to-lane",
               "a communicator of traffic class 0 is lane 0 (logged at init)");
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void* listen = nullptr;
    if (p.listen(handle, &listen) != ncclSuccess || !listen) {
        fail("listen", v);
        return 1;
    }
    void *send = nullptr, *recv = nullptr;
    expect(establish(p, listen, handle, &send, &recv), "connect-accept",
           v + ": connect and accept, each called until it returned a comm");
    if (!send || !recv)
        return 1;
    check_congestion_control(v + ", one connection (" +
                             std::to_string(reinterpret_cast<wire::Handle*>(handle)->data_sockets) + " data sockets)");
    check_sizes(p, send, recv);
    check_outstanding(p, send, recv);
    check_grouped(p, send, recv);
    p.close_send(send);
    p.close_recv(recv);
    check_mismatch(p, listen, handle, "tag", 2, 10);
    check_mismatch(p, listen, handle, "size", 1, 2000);
    check_hostile(p, listen, handle);
    const char* t = std::getenv("MERCURY_NCCL_TIMEOUT_MS");
    check_stalled_peer(p, listen, *reinterpret_cast<wire::Handle*>(handle), t ? static_cast<uint32_t>(std::atoi(t)) : 30000);
    const char* kills = std::getenv("MERCURY_NCCL_KILLS");
    check_killed_peer(p, listen, handle, path, kills ? std::max(1, std::atoi(kills)) : 1);
    p.close_listen(listen);
    p.finalize();
    return failures ? 1 : 0;
}

// ---- two processes -----------------------------------------------------------

// NCCL keeps up to NCCL_STEPS (8) steps of a connection in flight.
constexpr int kDepth = 8;

// Keeps kDepth requests in flight (post() makes one; nullptr: try again)
// until @until, then lets them finish; returns the bytes their tests
// reported (*in_window: those done before @until). A failed test ends it:
// before @until that is an error (-1); after it, the peer that finished
// first closing the connection.
int64_t stream(Plugin& p, Clock::time_point until, const std::function<void*(int slot)>& post, int64_t* in_window)
{
    void* inflight[kDepth] = {};
    int64_t bytes = 0;
    bool open = true;
    for (;;) {
        bool any = false;
        for (int i = 0; i < kDepth; ++i) {
            if (!inflight[i] && open && Clock::now() < until)
                inflight[i] = post(i);
            if (!inflight[i])
                continue;
            any = true;
            int done = 0, sizes[wire::kMaxGroup] = {};
            if (p.test(inflight[i], &done, sizes) != ncclSuccess)
                return Clock::now() < until ? -1 : bytes;
            if (done) {
                bytes += sizes[0];
                if (Clock::now() < until)
                    *in_window += sizes[0];
                inflight[i] = nullptr;
            }
        }
        open = open && Clock::now() < until;
        if (!open && !any)
            return bytes;
    }
}

int run_pair(bool listen_side, const std::string& path, int version, const std::string& handle_file, int traffic_class,
             double seconds)
{
    Plugin p = load(path, version);
    if (p.init(traffic_class) != ncclSuccess)
        return 1;
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    constexpr size_t kMsg = 1u << 20;
    std::vector<std::vector<char>> bufs(kDepth, std::vector<char>(kMsg, 'm'));
    const auto t0 = Clock::now();
    const Clock::time_point until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    int64_t bytes = -1, in_window = 0;
    if (listen_side) {
        void* listen = nullptr;
        if (p.listen(handle, &listen) != ncclSuccess)
            return 1;
        std::ofstream(handle_file + ".tmp") << hex(handle, sizeof(handle)) << "\n";
        std::filesystem::rename(handle_file + ".tmp", handle_file);
        void* recv = nullptr;
        while (!recv && p.accept(listen, &recv) == ncclSuccess) {
        }
        std::printf("ready\n");
        std::fflush(stdout);
        if (recv)
            bytes = stream(p, until, [&](int slot) {
                void* data = bufs[static_cast<size_t>(slot)].data();
                size_t cap = kMsg;
                int tag = 0;
                void* req = nullptr;
                return p.irecv(recv, 1, &data, &cap, &tag, &req) == ncclSuccess ? req : nullptr;
            }, &in_window);
    } else {
        std::string line;
        const auto deadline = Clock::now() + std::chrono::seconds(10);
        while (!(std::ifstream(handle_file) >> line) && Clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (!unhex(line, handle, sizeof(handle)))
            return 1;
        void* send = nullptr;
        while (!send && p.connect(handle, &send, traffic_class) == ncclSuccess) {
        }
        std::printf("ready\n");
        std::fflush(stdout);
        if (send)
            bytes = stream(p, until, [&](int slot) {
                void* req = nullptr;
                return p.isend(send, bufs[static_cast<size_t>(slot)].data(), kMsg, 0, &req) == ncclSuccess ? req
                                                                                                      : nullptr;
            }, &in_window);
    }
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("bytes=%lld in_window=%lld seconds=%.3f\n", static_cast<long long>(bytes),
                static_cast<long long>(in_window), t);
    return bytes < 0 ? 1 : 0;
}

[[noreturn]] void usage()
{
    std::fprintf(stderr,
                 "usage: mercury-nccl-harness selftest PLUGIN [--version 10|11]\n"
                 "       mercury-nccl-harness listen|send PLUGIN --handle FILE [--class C] [--version V] [--seconds S]\n");
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 3)
        usage();
    const std::string mode = argv[1], path = argv[2];
    int version = 11, traffic_class = -1;
    double seconds = 5;
    std::string handle_file;
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--version")
            version = std::atoi(v.c_str());
        else if (a == "--class")
            traffic_class = std::atoi(v.c_str());
        else if (a == "--seconds")
            seconds = std::atof(v.c_str());
        else if (a == "--handle")
            handle_file = v;
        else
            usage();
    }
    if ((argc - 3) % 2 || (version != 10 && version != 11))
        usage();
    if (mode == "selftest")
        return selftest(path, version);
    if ((mode == "listen" || mode == "send") && !handle_file.empty())
        return run_pair(mode == "listen", path, version, handle_file, traffic_class, seconds);
    usage();
}
