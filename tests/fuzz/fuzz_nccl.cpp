// SPDX-License-Identifier: GPL-2.0
// libFuzzer target for the NCCL plugin's receiving side (nccl/src/comm.cpp):
// the handshake a listener reads from whoever connects, and the stream of
// message headers and bytes an accepted connection reads from its peer.
// Each input is played over real loopback TCP against a fresh listener:
//
//   byte 0   bit 0: authentic (the Hellos carry the listener's secret);
//            bits 1-2: the listener's data sockets (0..2)
//   byte 1   receives posted in one irecv (1..8)
//   then per receive: its capacity (2 bytes, little endian) and tag (1 byte)
//   then 32 bytes: the Hello template (magic, version, index, connection,
//            min_chunk, data_sockets, lane as the fuzzer chose; an authentic
//            input's secret is the listener's)
//   then per data socket: its stream's length (2 bytes) and its stream;
//            the rest is the control socket's stream.
//
// Beyond "no crash, no UB" (ASan/UBSan): a connection is accepted only from
// authentic Hellos; a receive completes only within its capacities and with
// its tags; nothing hangs (every loop is bounded, the peer closes its
// side once it has sent).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "comm.hpp"
#include "log.hpp"

using namespace mercury::nccl;

namespace {

class Reader {
public:
    Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
    size_t left() const { return n_; }
    uint8_t u8() { return n_ ? (--n_, *p_++) : 0; }
    uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
    const uint8_t* take(size_t* n)
    {
        *n = std::min(*n, n_);
        const uint8_t* at = p_;
        p_ += *n;
        n_ -= *n;
        return at;
    }

private:
    const uint8_t* p_;
    size_t n_;
};

Device loopback()
{
    Device d;
    d.name = "lo";
    auto* in = reinterpret_cast<sockaddr_in*>(&d.addr);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    d.addr_len = sizeof(sockaddr_in);
    return d;
}

int dial(const Handle& h)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    std::memcpy(&a.sin_addr, h.addr, 4);
    a.sin_port = h.port;
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
        std::abort();   // loopback refused us: the machine, not the plugin
    return fd;
}

void send_all(int fd, const void* p, size_t n)
{
    const auto* c = static_cast<const char*>(p);
    while (n) {
        const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;   // the listener closed it: fine
        c += w;
        n -= static_cast<size_t>(w);
    }
}

// Loopback delivers as it sends, but softirqs may lag: a few yields, no
// sleeps, so that an input costs microseconds.
void nap()
{
    ::sched_yield();
}

// The plugin's log, silenced: every refused input would print a line.
void quiet(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}

}  // namespace

// MERCURY_FUZZ_VERBOSE=1: what became of each input (scripts/fuzz.sh checks
// that the seeds are accepted and complete, so the fuzzer starts past the
// handshake).
bool verbose = false;

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    verbose = std::getenv("MERCURY_FUZZ_VERBOSE") != nullptr;
    ::setenv("MERCURY_SOCKET", "/nonexistent/mercury-fuzz.sock", 1);   // no agent
    Log::set(quiet);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    Reader in(data, size);
    const uint8_t flags = in.u8();
    const bool authentic = flags & 1;
    Settings settings;
    settings.data_sockets = std::min<uint32_t>((flags >> 1) & 3, 2);
    settings.timeout_ms = 200;
    const int n = 1 + in.u8() % kMaxGroup;
    std::vector<std::vector<char>> buffers(static_cast<size_t>(n));
    std::vector<void*> ptrs;
    std::vector<size_t> caps;
    std::vector<int> tags;
    for (auto& b : buffers) {
        b.resize(in.u16());
        ptrs.push_back(b.data());
        caps.push_back(b.size());
        tags.push_back(static_cast<int8_t>(in.u8()));
    }
    Hello hello{};
    size_t len = sizeof(hello);
    std::memcpy(&hello, in.take(&len), len);

    Handle handle{};
    Failure f;
    ListenComm listener(loopback(), settings, &handle, &f);
    if (f)
        std::abort();
    if (authentic)
        hello.secret = handle.secret;

    std::vector<int> peers;
    for (uint32_t i = 0; i <= settings.data_sockets; ++i) {
        peers.push_back(dial(handle));
        Hello h = hello;
        h.index = static_cast<uint16_t>(i);
        send_all(peers.back(), &h, sizeof(h));
    }
    std::vector<std::pair<const uint8_t*, size_t>> streams(peers.size());
    for (size_t i = 1; i < peers.size(); ++i) {
        size_t want = in.u16();
        streams[i].first = in.take(&want);
        streams[i].second = want;
    }
    size_t rest = in.left();
    streams[0].first = in.take(&rest);
    streams[0].second = rest;
    for (size_t i = 0; i < peers.size(); ++i) {
        send_all(peers[i], streams[i].first, streams[i].second);
        ::shutdown(peers[i], SHUT_WR);   // the peer says no more: nothing may wait for it
    }

    std::unique_ptr<RecvComm> comm;
    for (int i = 0; i < 64 && !comm && !f; ++i) {
        comm = listener.accept(&f);
        if (!comm)
            nap();
    }
    if (comm) {
        // Only the listener's secret opens a connection, on a valid lane.
        if (!authentic || hello.secret != handle.secret || hello.lane >= kLanes)
            __builtin_trap();
        Request* r = nullptr;
        Failure g = comm->irecv(n, ptrs.data(), caps.data(), tags.data(), &r);
        for (int i = 0; i < 256 && r && !g && !comm->complete(*r); ++i) {
            nap();
            g = comm->progress();
        }
        const bool complete = r && !g && comm->complete(*r);
        if (complete) {
            for (int k = 0; k < n; ++k)
                if (!r->matched[k] || r->received[k] > caps[static_cast<size_t>(k)])
                    __builtin_trap();
        }
        if (verbose)
            std::fprintf(stderr, "fuzz_nccl: accepted, %s\n",
                         complete ? "complete" : g ? g.reason.c_str() : "incomplete");
        if (r)
            comm->retire(r);
    } else if (verbose) {
        std::fprintf(stderr, "fuzz_nccl: not accepted%s%s\n", f ? ": " : "", f.reason.c_str());
    }
    for (const int fd : peers)
        ::close(fd);
    return 0;
}
