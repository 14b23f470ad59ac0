// SPDX-License-Identifier: GPL-2.0
#include "replay/ps_client.hpp"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/rand.h>

#include <mercury/client.hpp>

namespace mercury::replay {

namespace {

// Sets @cc and checks it took: a baseline must never run the host's default.
void pin_cc(int fd, const std::string& cc)
{
    if (const std::string why = mercury::set_congestion_control(fd, cc); !why.empty())
        throw std::runtime_error(why);
}

int tcp_connect(const Endpoint& ep, const std::string& cc)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    pin_cc(fd, cc);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(ep.port);
    std::memcpy(&sin.sin_addr, ep.addr.data(), 4);
    for (int attempt = 0; ::connect(fd, reinterpret_cast<const sockaddr*>(&sin), sizeof(sin)) != 0; ++attempt) {
        if (attempt > 100)
            throw std::runtime_error("cannot connect to " + ep.to_string());
        usleep(50000);
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

void read_exact(int fd, void* p, size_t n, const std::string& what)
{
    auto* c = static_cast<char*>(p);
    while (n) {
        const ssize_t r = ::recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            throw std::runtime_error("mercury-ps closed the connection during " + what);
        c += r;
        n -= static_cast<size_t>(r);
    }
}

void send_all(int fd, const void* p, size_t n)
{
    if (::send(fd, p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n))
        throw std::runtime_error("short send");
}

}  // namespace

std::string read_secret(const std::string& file)
{
    std::string secret = ps::load_secret(file);
    if (secret.empty())
        throw std::runtime_error("no secret for the servers: --secret-file FILE or $MERCURY_PS_SECRET");
    return secret;
}

Conn::Conn(int fd, uint32_t server, ps::FrameMac up, ps::FrameMac down, bool tag_payloads)
    : fd_(fd), server_(server), up_(std::move(up)), down_(std::move(down)), tag_payloads_(tag_payloads)
{
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void Conn::queue(ps::Type type, uint32_t key, uint32_t offset, uint32_t count, uint32_t iteration)
{
    Out o{};
    o.header.type = type;
    o.header.key = key;
    o.header.offset = offset;
    o.header.count = count;
    o.header.iteration = iteration;
    o.payload = type == ps::Type::kPush ? count * sizeof(float) : 0;
    o.tag = up_.next({reinterpret_cast<const uint8_t*>(&o.header), sizeof(o.header)},
                     {zeros(), tag_payloads_ ? o.payload : 0});
    out_.push_back(o);
}

// Writes what the socket takes; returns bytes of frames sent.
uint64_t Conn::flush()
{
    uint64_t sent = 0;
    while (!out_.empty()) {
        Out& o = out_.front();
        const size_t parts[3] = {sizeof(o.header), o.payload, o.tag.size()};
        const char* bases[3] = {reinterpret_cast<const char*>(&o.header), reinterpret_cast<const char*>(zeros()),
                                reinterpret_cast<const char*>(o.tag.data())};
        iovec iov[3];
        int n = 0;
        size_t skip = o.off;
        for (int i = 0; i < 3; ++i) {
            if (skip >= parts[i]) {
                skip -= parts[i];
                continue;
            }
            iov[n++] = {const_cast<char*>(bases[i]) + skip, parts[i] - skip};
            skip = 0;
        }
        const ssize_t w = ::writev(fd_.get(), iov, n);
        if (w <= 0)
            break;
        o.off += static_cast<size_t>(w);
        sent += static_cast<uint64_t>(w);
        if (o.off < parts[0] + parts[1] + parts[2])
            break;
        out_.pop_front();
    }
    return sent;
}

std::vector<std::pair<Conn*, short>> poll_conns(const Conns& conns, bool writers_only, double timeout_s)
{
    std::vector<pollfd> fds;
    std::vector<Conn*> order;
    for (const auto& per_server : conns)
        for (const auto& c : per_server) {
            if (!c || (writers_only && !c->want_write()))
                continue;
            const short events = writers_only ? POLLOUT : static_cast<short>(POLLIN | (c->want_write() ? POLLOUT : 0));
            fds.push_back({c->fd(), events, 0});
            order.push_back(c.get());
        }
    std::vector<std::pair<Conn*, short>> ready;
    if (fds.empty())
        return ready;
    const auto us = static_cast<long long>(std::max(0.0, timeout_s) * 1e6);
    const timespec timeout{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
    ::ppoll(fds.data(), fds.size(), &timeout, nullptr);
    for (size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents || writers_only)
            ready.emplace_back(order[i], fds[i].revents);
    return ready;
}

std::unique_ptr<Conn> connect_ps(const Options& o, const Plan& plan, const std::string& secret, const Endpoint& ep,
                                 uint32_t server, uint32_t lane, uint64_t run, uint64_t instance)
{
    UniqueFd fd(tcp_connect(ep, plan.cc));
    ps::Challenge challenge{};
    read_exact(fd.get(), &challenge, sizeof(challenge), "the handshake");
    if (challenge.magic != ps::kMagic || challenge.version != ps::kVersion)
        throw std::runtime_error(ep.to_string() + " is not a mercury-ps version " + std::to_string(ps::kVersion));
    const bool tag_payloads = !(challenge.flags & ps::kUntaggedPayloads);
    if (tag_payloads != o.payload_tags)
        throw std::runtime_error(ep.to_string() + (tag_payloads ? " tags payloads; the replayer was told --payload-tags off"
                                                                : " runs --payload-tags off; pass --payload-tags off to "
                                                                  "accept it (a trusted testbed only)"));
    if (challenge.chunk_elems != kChunkElems)
        throw std::runtime_error(ep.to_string() + " takes chunks of " + std::to_string(challenge.chunk_elems) +
                                 " elements; the replayer pushes " + std::to_string(kChunkElems) +
                                 " (mercury-ps --chunk-bytes " + std::to_string(kChunk) + ")");
    const auto& ids = plan.keys_of_server.at(server);
    ps::Hello hello{};
    hello.magic = ps::kMagic;
    hello.version = ps::kVersion;
    hello.job_len = static_cast<uint16_t>(plan.job.size());
    hello.worker = o.id;
    hello.workers = o.workers;
    hello.lane = lane;
    hello.lanes = static_cast<uint32_t>(plan.lanes.size());
    hello.key_count = static_cast<uint32_t>(ids.size());
    hello.run = run;
    hello.instance = instance;
    hello.flags = challenge.flags;
    if (RAND_bytes(hello.nonce, sizeof(hello.nonce)) != 1)
        throw std::runtime_error("no random bytes for the handshake");
    const auto mac = ps::hello_mac(secret, challenge.nonce, hello, plan.job);
    std::memcpy(hello.mac, mac.data(), mac.size());
    ps::FrameMac up(secret, challenge.nonce, hello.nonce, ps::FrameMac::Direction::kToServer);
    ps::FrameMac down(secret, challenge.nonce, hello.nonce, ps::FrameMac::Direction::kToWorker);
    std::vector<uint64_t> sizes;
    for (uint32_t k : ids)
        sizes.push_back(plan.keys[k].elems);
    const auto sizes_tag = up.next({reinterpret_cast<const uint8_t*>(sizes.data()), sizes.size() * sizeof(uint64_t)});
    send_all(fd.get(), &hello, sizeof(hello));
    send_all(fd.get(), plan.job.data(), plan.job.size());
    send_all(fd.get(), sizes.data(), sizes.size() * sizeof(uint64_t));
    send_all(fd.get(), sizes_tag.data(), sizes_tag.size());
    ps::Header reply{};
    read_exact(fd.get(), &reply, sizeof(reply), "the handshake");
    std::string text;
    if (reply.type == ps::Type::kError) {
        text.resize(std::min<size_t>(reply.count, ps::kMaxErrorText));
        read_exact(fd.get(), text.data(), text.size(), "the handshake");
    } else if (reply.type != ps::Type::kReady) {
        throw std::runtime_error(ep.to_string() + " answered the handshake with type " +
                                 std::to_string(static_cast<unsigned>(reply.type)));
    }
    ps::Tag tag{};
    read_exact(fd.get(), tag.data(), tag.size(), "the handshake");
    const bool proven = ps::same_mac(
        down.next({reinterpret_cast<const uint8_t*>(&reply), sizeof(reply)},
                  {reinterpret_cast<const uint8_t*>(text.data()), tag_payloads ? text.size() : 0}),
        tag);
    if (reply.type == ps::Type::kError)
        throw std::runtime_error(ep.to_string() + " refused" + (proven ? "" : " (unauthenticated)") + ": " + text);
    if (!proven)
        throw std::runtime_error(ep.to_string() + " did not prove it holds the job's secret");
    auto conn = std::make_unique<Conn>(fd.release(), server, std::move(up), std::move(down), tag_payloads);
    if (plan.mode.partitioned)
        conn->queue(ps::Type::kAckPushes);
    return conn;
}

}  // namespace mercury::replay
