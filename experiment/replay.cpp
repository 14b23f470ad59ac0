// SPDX-License-Identifier: GPL-2.0
// mercury-replay: parameter-server training of a real model *shape* over
// real TCP, compute emulated from the profile, for the paper's experiment.
// The servers are mercury-ps (agent/src/ps/), the one users run; the
// replayer's workers speak its protocol (agent/PROTOCOL.md).
//
//   mercury-replay worker --id W --servers IP:PORT,... COMMON [--iterations K] [--warmup N]
//                         [--secret-file FILE]   (else $MERCURY_PS_SECRET)
//                         --run N   the run's id: every worker of one run the same, a new one per run
//                         [--payload-tags on|off]   off: accept servers run with --payload-tags off
//   mercury-replay ps-args COMMON   (the mercury-ps options that serve the mode:
//                         --job, --cc, --aggregation, --chunk-bytes, --no-agent)
//   mercury-replay sim    --rate-mbit R COMMON [--sim-ranks layer|agent]
//                         (an achievable schedule, simulated: priority per
//                         layer, or by the ranks mercuryd's rule gives)
//   mercury-replay bound  --rate-mbit R COMMON   (a lower bound no run can beat)
//   mercury-replay layers --profile FILE   (the profile's layers, forward order, in
//                         the simple format: name forward_ms backward_ms param_bytes;
//                         how the PyTorch bench reads the same profiles)
//   COMMON: --profile FILE --mode MODE --workers N --servers-count S --byte-divisor D
//           [--cc NAME] [--placement mxnet|balanced] [--job NAME]
//
// Placement: mxnet (the default, the paper's: tensors above 1M elements split
// over all servers, the rest whole, round robin) or balanced (BytePS's:
// 4096000-byte partitions, each to the least loaded server). Every role must
// be given the same one.
// Every data connection's congestion control is set per socket and read
// back (never the host's or the netns's default): --cc, by default mercury
// in priority modes and cubic in the others.
//
// Modes (same bytes in each): fifo (one connection per worker-server pair,
// whole-tensor aggregation: mercury-ps --aggregation tensor), bytescheduler
// (the same connections; tensors cut into --partition-bytes partitions, each
// its own key on the server, sent in layer order from a priority queue, at
// most --credit partitions pushed and not yet acknowledged by the server),
// mercury (a connection per rank, ranks from the agent via libmercury,
// immediate aggregation: --aggregation chunk), mercury-noprio (immediate, no
// priorities), prio-only (priorities, whole-tensor).
//
// Workers print one JSON line: iteration times, mean after warm-up, bytes.
#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "flow_key.hpp"
#include <mercury/client.hpp>
#include "mercury/uapi.h"
#include "model.hpp"
#include "ps/wire.hpp"

#include <openssl/rand.h>
#include "learner/priorities.hpp"
#include "simulator.hpp"
#include "common/unique_fd.hpp"

namespace {

using namespace mercury;
using namespace mercury::experiment;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kChunk = 16384;  // wire bytes per chunk (after scaling)
constexpr uint32_t kChunkElems = kChunk / sizeof(float);   // mercury-ps --chunk-bytes kChunk
// What a chunk costs on the wire beyond its payload: its header and tag
// (the bound and the simulator count them).
constexpr uint64_t kFrameBytes = sizeof(ps::Header) + ps::kTagBytes;
// What tbf counts per payload byte: full-sized segments, 1448 payload bytes
// (with timestamps) in a 1514-byte frame.
constexpr double kWirePerPayload = 1514.0 / 1448.0;

struct Mode {
    bool priority = false;      // connections per rank, ranked by the agent
    bool immediate = false;     // servers aggregate per chunk, not per tensor shard
    bool partitioned = false;   // ByteScheduler: application-level partitions and credit
};

Mode parse_mode(const std::string& m)
{
    if (m == "fifo") return {false, false, false};
    if (m == "bytescheduler") return {false, false, true};
    if (m == "mercury") return {true, true, false};
    if (m == "mercury-noprio") return {false, true, false};
    if (m == "prio-only") return {true, false, false};
    throw std::runtime_error("unknown mode '" + m + "' (fifo, bytescheduler, mercury, mercury-noprio, prio-only)");
}

struct Options {
    std::string role, profile, mode_name = "fifo", servers_csv;
    std::string cc;                          // empty: by mode (Plan::cc)
    std::string placement = "mxnet";         // or "balanced"
    std::string sim_ranks = "layer";         // sim: per-layer priority, or "agent": mercuryd's ranks
    std::string job;                         // the job name the agents see; empty: the model's
    std::string secret_file;                 // the servers' secret; empty: $MERCURY_PS_SECRET
    uint64_t run = 0;                        // the run's id (mercury-ps refuses a worker of another run)
    bool payload_tags = true;                // --payload-tags off: accept a server that runs so
    uint32_t id = 0, workers = 1, servers = 1, iterations = 10, warmup = 2;
    double byte_divisor = 1, rate_mbit = 100;
    uint64_t partition_bytes = 4 * kChunk;   // bytescheduler, after scaling
    uint32_t credit = 4;                     // bytescheduler: partitions outstanding
};

double now_s()
{
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// A key as mercury-ps sees it: a shard, or (bytescheduler) one partition of
// a shard, which the server then aggregates as a unit (BytePS's keys).
struct Key {
    uint32_t shard = 0, server = 0, id = 0;   // id: its index in that server's declared keys
    uint32_t first_chunk = 0, chunks = 0;     // the shard's chunks it covers
    uint64_t elems = 0;                       // float32s
};

// The shared view every worker derives from the profile: model, placement,
// keys, ranks.
struct Plan {
    Model model;
    Placement placement;
    std::vector<uint32_t> chunks;           // per shard
    std::vector<Key> keys;
    std::vector<std::vector<uint32_t>> keys_of_shard;    // indices into keys
    std::vector<std::vector<uint32_t>> keys_of_server;   // by id on that server
    std::vector<uint8_t> rank_of_tensor;    // per tensor, from its layer's rank
    std::vector<uint32_t> layer_of_rank;    // a layer holding each rank, for registration
    Mode mode;
    std::string cc;                         // every data connection's, set per socket
    std::string job;                        // the agents' and the servers' job name
    std::vector<bool> lanes;                // per lane: does any tensor travel on it?
    uint32_t partition_chunks = 1;          // bytescheduler: chunks per partition

    Plan(const Options& o)
    {
        partition_chunks = static_cast<uint32_t>(std::max<uint64_t>(1, (o.partition_bytes + kChunk - 1) / kChunk));
        model = load_model(o.profile);
        placement = o.placement == "balanced" ? place_balanced(model, o.servers, o.byte_divisor)
                                              : place(model, o.servers, o.byte_divisor);
        for (const auto& s : placement.shards)
            chunks.push_back(static_cast<uint32_t>((s.bytes + kChunk - 1) / kChunk));
        mode = parse_mode(o.mode_name);
        cc = !o.cc.empty() ? o.cc : mode.priority ? "mercury" : "cubic";
        job = o.job.empty() ? model.name : o.job;
        keys_of_shard.resize(placement.shards.size());
        keys_of_server.resize(o.servers);
        for (uint32_t s = 0; s < placement.shards.size(); ++s) {
            const uint32_t step = mode.partitioned ? partition_chunks : std::max<uint32_t>(chunks[s], 1);
            for (uint32_t first = 0; first < chunks[s]; first += step) {
                Key k{s, placement.shards[s].server, 0, first, std::min(step, chunks[s] - first), 0};
                for (uint32_t c = first; c < first + k.chunks; ++c)
                    k.elems += chunk_elems(s, c);
                k.id = static_cast<uint32_t>(keys_of_server.at(k.server).size());
                keys_of_server[k.server].push_back(static_cast<uint32_t>(keys.size()));
                keys_of_shard[s].push_back(static_cast<uint32_t>(keys.size()));
                keys.push_back(k);
            }
        }
        assign_ranks(std::vector<uint8_t>(model.layers.size(), 0));
    }
    // Which rank each layer has: from the agent (workers), or from the
    // agent's rule (the simulator, which has no agent).
    void assign_ranks(const std::vector<uint8_t>& layer_rank)
    {
        rank_of_tensor.clear();
        layer_of_rank.assign(MERCURY_NUM_RANKS, UINT32_MAX);
        for (const auto& tensor : placement.tensors) {
            const uint8_t r = layer_rank.at(tensor.layer);
            rank_of_tensor.push_back(r);
            if (layer_of_rank[r] == UINT32_MAX)
                layer_of_rank[r] = tensor.layer;
        }
        // Priority modes: one lane per rank that carries tensors; else one lane.
        lanes.assign(mode.priority ? MERCURY_NUM_RANKS : 1, !mode.priority);
        if (mode.priority)
            for (uint8_t r : rank_of_tensor)
                lanes[r] = true;
    }
    std::pair<std::vector<uint32_t>, std::vector<uint32_t>> timings_us() const
    {
        std::vector<uint32_t> f, b;
        for (const auto& l : model.layers) {
            f.push_back(static_cast<uint32_t>(std::lround(l.forward_ms * 1000)));
            b.push_back(static_cast<uint32_t>(std::lround(l.backward_ms * 1000)));
        }
        return {f, b};
    }
    uint8_t lane(uint32_t shard) const
    {
        return mode.priority ? rank_of_tensor[placement.shards[shard].tensor] : 0;
    }
    uint64_t chunk_bytes(uint32_t shard, uint32_t c) const
    {
        return std::min<uint64_t>(kChunk, placement.shards[shard].bytes - uint64_t{c} * kChunk);
    }
    // float32s carry the bytes: a shard's last chunk rounds up to whole ones.
    uint32_t chunk_elems(uint32_t shard, uint32_t c) const
    {
        return static_cast<uint32_t>((chunk_bytes(shard, c) + sizeof(float) - 1) / sizeof(float));
    }
    // What mercury-ps aggregates before it answers: each chunk (immediate)
    // or each key (a whole shard, or a bytescheduler partition).
    std::string aggregation() const { return mode.immediate ? "chunk" : "tensor"; }
    uint64_t elems_per_iteration() const
    {
        uint64_t n = 0;
        for (const auto& k : keys)
            n += k.elems;
        return n;
    }
};

// ByteScheduler's worker side: gradient partitions (keys) wait in a priority
// queue (the layer the next forward pass needs first goes first) and at most
// `credit` partitions are outstanding; a partition's credit comes back when
// the server has taken its last chunk (mercury-ps's Ack), as a BytePS server
// answers a push on receipt. Holding it until the pull would deadlock:
// workers that produced gradients at different times would each hold
// partitions the others have not sent.
class PartitionScheduler {
public:
    PartitionScheduler(const Plan& plan, uint32_t credit) : plan_(plan), credit_(credit) {}

    void add(uint32_t iteration, uint32_t tensor)
    {
        for (uint32_t s : plan_.placement.tensors[tensor].shards)
            for (uint32_t k : plan_.keys_of_shard[s])
                queue_.insert({plan_.placement.tensors[tensor].layer, iteration, k});
    }

    // Hands partitions (keys) to @send while credit lasts.
    template <typename Send>
    void pump(Send&& send)
    {
        while (unacked_.size() < credit_ && !queue_.empty()) {
            const Partition p = *queue_.begin();
            queue_.erase(queue_.begin());
            send(p.key, p.iteration);
            unacked_.insert(p.key);
        }
    }

    // The server took the push of @key's chunk ending at element @end.
    void acked(uint32_t key, uint64_t end)
    {
        if (end == plan_.keys[key].elems)
            unacked_.erase(key);
    }

    bool idle() const { return queue_.empty(); }

private:
    struct Partition {
        uint32_t layer, iteration, key;
        auto operator<=>(const Partition&) const = default;
    };
    const Plan& plan_;
    uint32_t credit_;
    std::set<Partition> queue_;
    std::set<uint32_t> unacked_;   // the credit in use; a key is pushed again only after its sum came back
};

// The job's secret, as mercury-ps takes it.
std::string read_secret(const std::string& file)
{
    std::string secret = ps::load_secret(file);
    if (secret.empty())
        throw std::runtime_error("no secret for the servers: --secret-file FILE or $MERCURY_PS_SECRET");
    return secret;
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

// One connection to a mercury-ps, after the handshake: pushes queued out
// (zeros: the replayer moves bytes, not gradients), each tagged as a
// worker's is; sums, acks and errors in, each tag checked.
// Non-blocking: a blocking write here deadlocks (both ends writing, none reading).
class Conn {
public:
    Conn(int fd, uint32_t server, ps::FrameMac up, ps::FrameMac down, bool tag_payloads)
        : fd_(fd), server_(server), up_(std::move(up)), down_(std::move(down)), tag_payloads_(tag_payloads)
    {
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    int fd() const { return fd_.get(); }
    uint32_t server() const { return server_; }
    bool want_write() const { return !out_.empty(); }

    void queue(ps::Type type, uint32_t key = 0, uint32_t offset = 0, uint32_t count = 0, uint32_t iteration = 0)
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
    uint64_t flush()
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

    // Reads and calls @on_message(header) per whole, authentic Pull or Ack.
    // False on EOF; throws on an Error (its text), a bad tag or anything
    // else unexpected.
    template <typename F>
    bool read(F&& on_message)
    {
        char buf[65536];
        const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return true;
        if (n <= 0)
            return false;
        for (ssize_t i = 0; i < n;) {
            if (have_ < sizeof(in_)) {
                const size_t take = std::min<size_t>(sizeof(in_) - have_, static_cast<size_t>(n - i));
                std::memcpy(reinterpret_cast<char*>(&in_) + have_, buf + i, take);
                have_ += take;
                i += static_cast<ssize_t>(take);
                if (have_ < sizeof(in_))
                    continue;
                if (in_.type == ps::Type::kPull && in_.count <= kChunkElems)
                    payload_.resize(in_.count * sizeof(float));
                else if (in_.type == ps::Type::kError && in_.count <= ps::kMaxErrorText)
                    payload_.resize(in_.count);
                else if (in_.type == ps::Type::kAck)
                    payload_.clear();
                else
                    throw std::runtime_error("mercury-ps sent message type " +
                                             std::to_string(static_cast<unsigned>(in_.type)) + " of " +
                                             std::to_string(in_.count));
            }
            const size_t frame = sizeof(in_) + payload_.size() + ps::kTagBytes;
            const size_t take = std::min<size_t>(frame - have_, static_cast<size_t>(n - i));
            for (size_t done = 0; done < take;) {   // into the payload, then the tag
                const size_t at = have_ - sizeof(in_);
                uint8_t* into = at < payload_.size() ? payload_.data() + at : tag_.data() + (at - payload_.size());
                const size_t room = at < payload_.size() ? payload_.size() - at : frame - have_;
                const size_t step = std::min(room, take - done);
                std::memcpy(into, buf + i + done, step);
                done += step;
                have_ += step;
            }
            i += static_cast<ssize_t>(take);
            if (have_ < frame)
                continue;
            have_ = 0;
            const std::span<const uint8_t> tagged(payload_.data(), tag_payloads_ ? payload_.size() : 0);
            if (!ps::same_mac(down_.next({reinterpret_cast<const uint8_t*>(&in_), sizeof(in_)}, tagged), tag_))
                throw std::runtime_error("server " + std::to_string(server_) + ": a message failed authentication");
            if (in_.type == ps::Type::kError)
                throw std::runtime_error("server " + std::to_string(server_) + ": " +
                                         std::string(payload_.begin(), payload_.end()));
            if (in_.type == ps::Type::kPull)
                received_ += payload_.size();
            on_message(in_);
        }
        return true;
    }
    uint64_t received_payload() const { return received_; }

private:
    struct Out {
        ps::Header header;
        size_t payload;
        ps::Tag tag;
        size_t off;   // bytes of the frame written
    };
    static const uint8_t* zeros()
    {
        static const std::vector<uint8_t> bytes(kChunk, 0);
        return bytes.data();
    }

    mercury::UniqueFd fd_;
    uint32_t server_;
    ps::FrameMac up_, down_;
    bool tag_payloads_;   // false: the server runs --payload-tags off (ps::kUntaggedPayloads)
    std::deque<Out> out_;
    ps::Header in_{};
    size_t have_ = 0;
    std::vector<uint8_t> payload_;
    ps::Tag tag_{};
    uint64_t received_ = 0;
};

using Conns = std::vector<std::vector<std::unique_ptr<Conn>>>;  // [server][lane]

// Polls the open connections (only those with unsent data if @writers_only)
// and returns each with its revents; with @writers_only, a connection still
// waiting to write is returned even when it got no event.
// Waits up to @timeout_s (to the microsecond: rounding to milliseconds made
// a worker spin through the last millisecond of every compute step, CPU that
// a small host's servers and agents then lacked) for the connections.
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

// Declares the model and its profiled timings to the agent and takes the
// ranks it learned from them (priority modes only); each lane's connection
// is then registered as carrying a layer of that rank, so the agent (not the
// replayer) decides both the lanes and the kernel entries.
std::unique_ptr<Client> join_agent(Plan& plan, const std::string& job, uint32_t id)
{
    if (!plan.mode.priority)
        return nullptr;
    auto client = std::make_unique<Client>(job, id);
    std::vector<std::string> names;
    std::vector<uint64_t> bytes;
    for (const auto& l : plan.model.layers) {
        names.push_back(l.name);
        bytes.push_back(l.param_bytes);
    }
    client->declare_model(names, bytes);
    const auto [f, b] = plan.timings_us();
    client->report_timings(0, f, b);
    client->subscribe_ranks();
    const auto layers = static_cast<uint32_t>(plan.model.layers.size());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::vector<uint8_t> ranks = client->layer_ranks(layers);
    while (ranks.empty() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        ranks = client->layer_ranks(layers);
    }
    if (ranks.empty())
        throw std::runtime_error("priority modes need mercuryd: no ranks from the agent within 10 s "
                                 "(is it running? $MERCURY_SOCKET)");
    plan.assign_ranks(ranks);
    return client;
}

// A JSON string (quoted and escaped) for the hand-formatted lines below,
// whose numbers keep the fixed precision the reports expect.
std::string json_text(const std::string& text)
{
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Forward-pass waits for parameters, per measured iteration: the total, and
// the layers waited for longest as [[layer, seconds], ...] (at most 5).
std::string wait_json_total(const std::vector<double>& wait_s, size_t iterations)
{
    double total = 0;
    for (double w : wait_s)
        total += w;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.4f", iterations ? total / static_cast<double>(iterations) : 0.0);
    return buf;
}

std::string wait_json_top(const std::vector<double>& wait_s, size_t iterations)
{
    std::vector<uint32_t> order(wait_s.size());
    for (uint32_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return wait_s[a] > wait_s[b]; });
    std::string out = "[";
    for (size_t i = 0; i < order.size() && i < 5 && wait_s[order[i]] > 0; ++i) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%s[%u,%.4f]", i ? "," : "", order[i],
                      iterations ? wait_s[order[i]] / static_cast<double>(iterations) : 0.0);
        out += buf;
    }
    return out + "]";
}

// Connects to a mercury-ps and joins the plan's job on @lane: the
// challenge, the Hello with its MAC over the secret, the server's keys;
// AckPushes for bytescheduler. Returns once the server has proven it holds
// the secret (its Ready's tag).
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

int run_worker(const Options& o)
{
    Plan plan(o);
    std::vector<Endpoint> servers;
    std::stringstream ss(o.servers_csv);
    for (std::string item; std::getline(ss, item, ',');)
        servers.push_back(*Endpoint::parse(item));
    if (servers.size() != o.servers)
        throw std::runtime_error("--servers lists " + std::to_string(servers.size()) + " endpoints");
    const std::string secret = read_secret(o.secret_file);
    if (!o.run)
        throw std::runtime_error("worker needs --run N, the same for every worker of the run (mercury-ps refuses "
                                 "workers of another run, and of a run that has ended)");

    auto agent = join_agent(plan, plan.job, o.id);
    uint64_t instance = 0;
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&instance), sizeof(instance)) != 1)
        throw std::runtime_error("no random bytes for the worker's instance");
    // conns[server][lane]; lanes with no tensors stay closed, and so do
    // servers with no keys (more servers than shards).
    Conns conns(servers.size());
    for (uint32_t s = 0; s < servers.size(); ++s) {
        conns[s].resize(plan.lanes.size());
        if (plan.keys_of_server[s].empty())
            continue;
        for (uint32_t lane = 0; lane < plan.lanes.size(); ++lane) {
            if (!plan.lanes[lane])
                continue;
            conns[s][lane] = connect_ps(o, plan, secret, servers[s], s, lane, o.run, instance);
            if (agent)
                agent->register_socket(plan.layer_of_rank[lane], conns[s][lane]->fd());
        }
    }

    const auto [fwd_us, bwd_us] = plan.timings_us();
    std::vector<std::map<uint32_t, uint32_t>> pulled(o.iterations);  // iteration -> tensor -> chunks
    std::vector<uint32_t> pushed_in(plan.keys.size(), 0);            // per key: the iteration last pushed
    std::vector<uint32_t> tensor_of_layer(plan.model.layers.size(), UINT32_MAX);
    std::vector<uint32_t> tensor_chunks(plan.placement.tensors.size(), 0);
    for (uint32_t t = 0; t < plan.placement.tensors.size(); ++t) {
        tensor_of_layer[plan.placement.tensors[t].layer] = t;
        for (uint32_t s : plan.placement.tensors[t].shards)
            tensor_chunks[t] += plan.chunks[s];
    }

    uint64_t sent = 0, pushed_payload = 0;

    uint32_t iteration = 0;
    size_t layer = 0;
    bool backward = false;
    double busy_until = 0;             // 0: not computing
    double compute_clock = now_s();    // when the last compute step ended
    bool waiting = false;              // forward pass blocked on parameters
    std::vector<double> wait_s(plan.model.layers.size(), 0);  // per layer, after warm-up
    std::vector<double> boundaries{compute_clock};
    const size_t n_layers = plan.model.layers.size();

    auto params_ready = [&](size_t l) {
        const uint32_t t = tensor_of_layer[l];
        return iteration == 0 || t == UINT32_MAX || pulled[iteration - 1][t] == tensor_chunks[t];
    };
    // A key's chunks onto its lane's connection to its server.
    auto push_key = [&](uint32_t key, uint32_t it) {
        const Key& k = plan.keys[key];
        pushed_in[key] = it;
        for (uint32_t c = k.first_chunk; c < k.first_chunk + k.chunks; ++c) {
            const uint32_t count = plan.chunk_elems(k.shard, c);
            conns[k.server][plan.lane(k.shard)]->queue(ps::Type::kPush, k.id, (c - k.first_chunk) * kChunkElems, count,
                                                       it);
            pushed_payload += uint64_t{count} * sizeof(float);
        }
    };
    PartitionScheduler scheduler(plan, o.credit);
    auto push = [&](size_t l) {
        const uint32_t t = tensor_of_layer[l];
        if (t == UINT32_MAX)
            return;
        if (plan.mode.partitioned) {
            scheduler.add(iteration, t);
            scheduler.pump(push_key);
            return;
        }
        for (uint32_t s : plan.placement.tensors[t].shards)
            for (uint32_t k : plan.keys_of_shard[s])
                push_key(k, iteration);
    };
    // Sums count toward the iteration their key was last pushed in: a
    // worker pushes a key again only after that sum came back.
    auto on_message = [&](const Conn& conn, const ps::Header& h) {
        const auto& ids = plan.keys_of_server[conn.server()];
        if (h.key >= ids.size())
            throw std::runtime_error("server " + std::to_string(conn.server()) + " answered key " +
                                     std::to_string(h.key) + ", which it does not have");
        const uint32_t key = ids[h.key];
        if (h.iteration != pushed_in[key])
            throw std::runtime_error("server " + std::to_string(conn.server()) + " answered key " +
                                     std::to_string(h.key) + " of iteration " + std::to_string(h.iteration) +
                                     "; it was pushed in " + std::to_string(pushed_in[key]));
        if (h.type == ps::Type::kAck)
            scheduler.acked(key, uint64_t{h.offset} + h.count);
        else
            ++pulled.at(pushed_in[key])[plan.placement.shards[plan.keys[key].shard].tensor];
    };
    auto serve_connections = [&](double timeout_s) {
        for (const auto& [conn, revents] : poll_conns(conns, false, timeout_s)) {
            if (revents & POLLOUT)
                sent += conn->flush();
            if (revents & (POLLIN | POLLHUP | POLLERR))
                if (!conn->read([&](const ps::Header& h) { on_message(*conn, h); }))
                    throw std::runtime_error("server " + std::to_string(conn->server()) + " closed a connection");
        }
        scheduler.pump(push_key);
    };

    double last_progress = now_s();
    size_t last_state = SIZE_MAX;
    while (iteration < o.iterations) {
        // Compute: one layer at a time, forward then backward.
        const double now = now_s();
        // Watchdog: a stuck run says where it is stuck instead of hanging.
        const size_t state = (iteration * 2 + backward) * (n_layers + 1) + layer;
        if (state != last_state) {
            last_state = state;
            last_progress = now;
        } else if (now - last_progress > 20) {
            size_t queued = 0;
            for (auto& per_server : conns)
                for (auto& c : per_server)
                    queued += c && c->want_write();
            const uint32_t t = tensor_of_layer[layer];
            throw std::runtime_error(
                "no progress for 20 s: iteration " + std::to_string(iteration) + (backward ? " backward" : " forward") +
                " layer " + std::to_string(layer) + ", tensor " + std::to_string(t) + " has " +
                (t == UINT32_MAX || !iteration ? std::string("-") : std::to_string(pulled[iteration - 1][t])) + "/" +
                (t == UINT32_MAX ? std::string("-") : std::to_string(tensor_chunks[t])) + " chunks, " +
                std::to_string(queued) + " connections with unsent data");
        }
        // Compute runs on its own clock: a layer starts when the previous one
        // ended (not when this process happened to wake up), or when its
        // parameters arrived if it had to wait. Late wakeups cost nothing.
        if (busy_until && now >= busy_until) {
            const double ended = busy_until;
            busy_until = 0;
            compute_clock = ended;
            if (!backward) {
                if (++layer == n_layers) {
                    backward = true;
                    layer = n_layers - 1;
                    busy_until = ended + bwd_us[layer] / 1e6;
                }
            } else {
                push(layer);
                if (layer == 0) {
                    ++iteration;
                    boundaries.push_back(ended);
                    backward = false;
                    if (agent) {
                        agent->begin_iteration(iteration);
                        agent->report_timings(iteration, fwd_us, bwd_us);
                    }
                } else {
                    --layer;
                    busy_until = ended + bwd_us[layer] / 1e6;
                }
            }
        }
        if (!busy_until && !backward && iteration < o.iterations && params_ready(layer)) {
            // Waited for parameters: the layer starts now; else back to back.
            const double start = waiting ? now : compute_clock;
            // What the wait cost: the layer starts now, not when the last one ended.
            if (waiting && iteration >= o.warmup)
                wait_s[layer] += now - compute_clock;
            busy_until = start + fwd_us[layer] / 1e6 + 1e-9;
            waiting = false;
        } else if (!busy_until && !backward) {
            waiting = true;
        }

        // Until the compute step ends (a late wakeup: the compute clock
        // absorbs it), or a while for parameters.
        const double wait = busy_until ? std::max(0.0, busy_until - now_s()) : 0.05;
        serve_connections(wait);
    }

    // The last iteration's sums, as every other's, before the workers leave
    // the job (a member that leaves early ends it for the others).
    const double drain_until = now_s() + 60;
    auto drained = [&] {
        for (uint32_t t = 0; t < tensor_chunks.size(); ++t)
            if (pulled[o.iterations - 1][t] != tensor_chunks[t])
                return false;
        return scheduler.idle();
    };
    while (!drained()) {
        if (now_s() > drain_until)
            throw std::runtime_error("the last iteration's sums did not all come back within 60 s");
        serve_connections(0.1);
    }
    // Bye on every connection; the server closes each once it has read it.
    for (auto& per_server : conns)
        for (auto& c : per_server)
            if (c)
                c->queue(ps::Type::kBye);
    for (bool pending = true; pending;) {
        pending = false;
        for (const auto& [conn, revents] : poll_conns(conns, true, 0.1)) {
            pending = true;
            if (revents & POLLOUT)
                sent += conn->flush();
        }
    }
    for (auto& per_server : conns)
        for (auto& c : per_server)
            if (c) {
                pollfd p{c->fd(), POLLIN, 0};
                while (::poll(&p, 1, 10000) > 0 && c->read([](const ps::Header&) {})) {
                }
            }

    uint64_t received = 0;
    for (auto& per_server : conns)
        for (auto& c : per_server)
            if (c)
                received += c->received_payload();
    std::vector<double> iters;
    for (size_t i = 1; i < boundaries.size(); ++i)
        iters.push_back(boundaries[i] - boundaries[i - 1]);
    double mean = 0;
    size_t counted = 0;
    for (size_t i = o.warmup; i < iters.size(); ++i, ++counted)
        mean += iters[i];
    mean = counted ? mean / static_cast<double>(counted) : 0;
    const uint64_t per_iteration = plan.elems_per_iteration() * sizeof(float);
    std::printf("{\"role\":\"worker\",\"id\":%u,\"model\":%s,\"mode\":%s,\"cc\":%s,\"placement\":%s,"
                "\"iterations\":[",
                o.id, json_text(plan.model.name).c_str(), json_text(o.mode_name).c_str(), json_text(plan.cc).c_str(),
                json_text(o.placement).c_str());
    for (size_t i = 0; i < iters.size(); ++i)
        std::printf("%s%.4f", i ? "," : "", iters[i]);
    // The measured iterations on CLOCK_MONOTONIC (steady_clock), so link
    // samples taken by other processes can be lined up with them.
    std::printf("],\"measured_from_s\":%.4f,\"measured_to_s\":%.4f",
                boundaries[std::min<size_t>(o.warmup, boundaries.size() - 1)], boundaries.back());
    std::printf(",\"forward_wait_s\":%s,\"waits\":%s", wait_json_total(wait_s, counted).c_str(),
                wait_json_top(wait_s, counted).c_str());
    std::printf(",\"mean_s\":%.4f,\"pushed_bytes\":%llu,\"expected_push_bytes\":%llu,\"pulled_bytes\":%llu,"
                "\"expected_pull_bytes\":%llu,\"wire_bytes_sent\":%llu}\n",
                mean, static_cast<unsigned long long>(pushed_payload),
                static_cast<unsigned long long>(per_iteration * o.iterations),
                static_cast<unsigned long long>(received),
                static_cast<unsigned long long>(per_iteration * o.iterations),
                static_cast<unsigned long long>(sent));
    return 0;
}

// The options mercury-ps needs to serve this plan's job as the mode says:
// one line for the shell (experiment/train.sh).
int run_ps_args(const Options& o)
{
    const Plan plan(o);
    std::printf("--job %s --cc %s --aggregation %s --chunk-bytes %llu%s\n", plan.job.c_str(), plan.cc.c_str(),
                plan.aggregation().c_str(), static_cast<unsigned long long>(kChunk),
                plan.mode.priority ? "" : " --no-agent");
    return 0;
}

// A lower bound on the iteration time no schedule can beat, whatever the
// transport: the compute time (a worker's forward and backward passes run
// one after the other), and the busiest link's bytes at the link's rate.
// Bytes on a link: every chunk's payload, header and tag, carried in
// full-sized TCP segments (1448 payload bytes in a 1514-byte frame, which is
// what tbf counts); ACKs and bytescheduler's credit messages are left out,
// so the bound stays below anything achievable.
int run_bound(const Options& o)
{
    Plan plan(o);
    // The compute the workers emulate: the profile's times in whole µs.
    const auto [fwd_us, bwd_us] = plan.timings_us();
    double compute_us = 0;
    for (size_t i = 0; i < fwd_us.size(); ++i)
        compute_us += fwd_us[i] + bwd_us[i];
    std::vector<double> server_bytes(o.servers, 0);   // one worker's pushes to each server
    double worker_bytes = 0;
    for (uint32_t s = 0; s < plan.placement.shards.size(); ++s) {
        const double b = static_cast<double>(plan.placement.shards[s].bytes) + kFrameBytes * plan.chunks[s];
        worker_bytes += b;
        server_bytes[plan.placement.shards[s].server] += b;
    }
    // Each server link carries every worker's share of its shards, both ways;
    // each worker link carries all pushes up and all pulls down.
    std::string busiest = "worker link";
    double busiest_bytes = worker_bytes;
    for (uint32_t s = 0; s < o.servers; ++s) {
        if (server_bytes[s] * o.workers > busiest_bytes) {
            busiest_bytes = server_bytes[s] * o.workers;
            busiest = "server " + std::to_string(s) + " link";
        }
    }
    const double link_s = busiest_bytes * kWirePerPayload * 8 / (o.rate_mbit * 1e6);
    const double compute_s = compute_us / 1e6;
    std::printf("{\"role\":\"bound\",\"model\":%s,\"placement\":%s,\"workers\":%u,\"servers\":%u,"
                "\"rate_mbit\":%g,\"byte_divisor\":%g,\"compute_s\":%.4f,\"busiest_link\":%s,\"busiest_link_bytes\":%.0f,"
                "\"link_s\":%.4f,\"bound_s\":%.4f}\n",
                json_text(plan.model.name).c_str(), json_text(o.placement).c_str(), o.workers, o.servers, o.rate_mbit,
                o.byte_divisor, compute_s, json_text(busiest).c_str(),
                busiest_bytes * kWirePerPayload, link_s, std::max(compute_s, link_s));
    return 0;
}

// The mode's schedule simulated on the same links, bytes and framing as the
// bound (simulator.hpp): what a transport that schedules perfectly achieves.
int run_sim(const Options& o)
{
    Plan plan(o);
    SimConfig c;
    c.workers = o.workers;
    c.servers = o.servers;
    c.link_bytes_per_s = o.rate_mbit * 1e6 / 8;
    c.chunk_bytes = kChunk;
    c.header_bytes = kFrameBytes;
    c.wire_per_payload = kWirePerPayload;
    c.priority = plan.mode.priority;
    if (o.sim_ranks != "layer" && o.sim_ranks != "agent")
        throw std::runtime_error("--sim-ranks is layer or agent");
    if (plan.mode.priority && o.sim_ranks == "agent") {
        // The lanes mercuryd would give: its rule on the profile's timings.
        const auto [f, b] = plan.timings_us();
        LayerTimings timings(f.size());
        timings.add(f, b);
        for (const auto& p : compute_priorities(timings, f.size()))
            c.layer_rank.push_back(p.rank);
    }
    c.immediate = plan.mode.immediate;
    c.iterations = o.iterations;
    c.warmup = o.warmup;
    const auto r = simulate(plan.model, plan.placement, c);
    const size_t measured = o.iterations > o.warmup ? o.iterations - o.warmup : 1;
    std::vector<double> wait_sum(r.forward_wait_s);  // back to sums, as the worker keeps them
    for (double& w : wait_sum)
        w *= static_cast<double>(measured);
    std::printf("{\"role\":\"sim\",\"model\":%s,\"mode\":%s,\"mean_s\":%.4f,\"forward_wait_s\":%s,"
                "\"waits\":%s}\n",
                json_text(plan.model.name).c_str(), json_text(o.mode_name).c_str(), r.mean_iteration_s,
                wait_json_total(wait_sum, measured).c_str(), wait_json_top(wait_sum, measured).c_str());
    return 0;
}

// One line per layer, forward order; names lose their spaces (the format's separator).
int run_layers(const Options& o)
{
    const Model model = load_model(o.profile);
    std::printf("# %s: name forward_ms backward_ms param_bytes (from %s)\n", model.name.c_str(), o.profile.c_str());
    for (const Layer& l : model.layers) {
        std::string name = l.name;
        std::replace_if(name.begin(), name.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }, '_');
        std::printf("%s %.6g %.6g %llu\n", name.c_str(), l.forward_ms, l.backward_ms,
                    static_cast<unsigned long long>(l.param_bytes));
    }
    return 0;
}

Options parse(int argc, char** argv)
{
    Options o;
    if (argc < 2)
        throw std::runtime_error("usage: mercury-replay worker|ps-args|sim|bound|layers OPTIONS (see the header of replay.cpp)");
    o.role = argv[1];
    if (o.role == "server")
        throw std::runtime_error("the replayer's servers are mercury-ps: see experiment/train.sh (mercury-replay "
                                 "ps-args prints the options a mode needs)");
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 >= argc)
            throw std::runtime_error(std::string("missing value for ") + argv[i]);
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--id") o.id = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--profile") o.profile = v;
        else if (a == "--mode") o.mode_name = v;
        else if (a == "--servers") o.servers_csv = v;
        else if (a == "--workers") o.workers = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--servers-count") o.servers = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--iterations") o.iterations = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--warmup") o.warmup = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--byte-divisor") o.byte_divisor = std::stod(v);
        else if (a == "--rate-mbit") o.rate_mbit = std::stod(v);
        else if (a == "--partition-bytes") o.partition_bytes = std::stoull(v);
        else if (a == "--credit") o.credit = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--cc") o.cc = v;
        else if (a == "--placement") o.placement = v;
        else if (a == "--sim-ranks") o.sim_ranks = v;
        else if (a == "--job") o.job = v;
        else if (a == "--secret-file") o.secret_file = v;
        else if (a == "--run") o.run = std::stoull(v);
        else if (a == "--payload-tags") {
            if (v != "on" && v != "off")
                throw std::runtime_error("--payload-tags is on or off, not '" + v + "'");
            o.payload_tags = v == "on";
        }
        else throw std::runtime_error("unknown option " + a);
    }
    if (o.role == "layers") {
        if (o.profile.empty())
            throw std::runtime_error("layers needs --profile");
        return o;
    }
    if (o.profile.empty() || !o.workers || !o.servers || o.byte_divisor <= 0 || o.iterations < 2)
        throw std::runtime_error("need --profile, --workers, --servers-count, --byte-divisor > 0, --iterations >= 2");
    if (o.placement != "mxnet" && o.placement != "balanced")
        throw std::runtime_error("--placement is mxnet or balanced, not '" + o.placement + "'");
    if (!o.partition_bytes || !o.credit)
        throw std::runtime_error("--partition-bytes and --credit must be positive");
    return o;
}

}  // namespace

int main(int argc, char** argv)
{
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::signal(SIGPIPE, SIG_IGN);  // a peer that left is an EPIPE, not our death
    try {
        const Options o = parse(argc, argv);
        if (o.role == "worker")
            return run_worker(o);
        if (o.role == "ps-args")
            return run_ps_args(o);
        if (o.role == "sim")
            return run_sim(o);
        if (o.role == "bound")
            return run_bound(o);
        if (o.role == "layers")
            return run_layers(o);
        throw std::runtime_error("role is worker, ps-args, sim, bound or layers");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mercury-replay: %s\n", e.what());
        return 1;
    }
}
