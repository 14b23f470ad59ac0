// SPDX-License-Identifier: GPL-2.0
// The trainer <-> mercuryd protocol on the agent's Unix socket (see
// agent/PROTOCOL.md). Every frame: an 8-byte header (u32 body length, u8
// version, u8 type, u16 flags, little endian) and a body of at most
// kMaxBody bytes. Decoding is total: any input yields a message, "need more
// bytes" or a named error, never undefined behaviour.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "flow_key.hpp"
#include "mercury/uapi.h"

namespace mercury::proto {

constexpr uint8_t kVersion = 1;
// Where mercuryd listens unless told otherwise (--socket, $MERCURY_SOCKET).
constexpr const char* kDefaultSocketPath = "/run/mercury/mercuryd.sock";
constexpr size_t kHeaderSize = 8;
constexpr uint32_t kMaxBody = 1 << 20;
constexpr size_t kMaxName = 255;
constexpr uint32_t kMaxLayers = 16384;

enum class Type : uint8_t {
    Hello = 1,          // trainer: who I am
    HelloAck = 2,       // daemon: accepted, session id
    Model = 3,          // trainer: layers in forward order, parameter bytes
    Timings = 4,        // trainer: one iteration's per-layer fwd/bwd times
    Register = 5,       // trainer: this connection carries this layer's tensor
    Iteration = 6,      // trainer: an iteration begins
    StatusRequest = 7,  // mercuryctl: what do you know?
    StatusReply = 8,    // daemon: JSON document
    Error = 9,          // daemon: why the connection is being closed
    RegisterLane = 10,  // trainer: this passed socket carries priority lane L of N
    SubscribeRanks = 11,  // trainer: send me the layers' ranks, now and on change
    Ranks = 12,         // daemon: the job's per-layer ranks
    JobWeight = 13,     // mercuryctl (root): job NAME's share against other jobs
};

// A job's weight multiplies the weights of all its entries (capped at the
// datapath's 1024), so it sets the job's share of a link it shares with
// other jobs. 1 unless set (mercuryd's job_weight).
constexpr uint16_t kMaxJobWeight = 64;

// Lanes: a trainer that cannot tell layers apart on one connection opens N
// sets of connections ("lanes") and sends each layer's tensors on the lane
// of its rank. Lane L of N carries ranks [ceil(L*8/N), ceil((L+1)*8/N)) and
// its connections get the first of them, so any N from 1 to 8 covers all 8.
constexpr uint8_t kMaxLanes = MERCURY_NUM_RANKS;   // a lane per rank at most
constexpr uint8_t lane_rank(uint8_t lane, uint8_t lanes)
{
    return static_cast<uint8_t>((lane * MERCURY_NUM_RANKS + lanes - 1) / lanes);
}
constexpr uint8_t rank_lane(uint8_t rank, uint8_t lanes)
{
    return static_cast<uint8_t>(rank * lanes / MERCURY_NUM_RANKS);
}

struct Hello {
    std::string job;
    uint32_t worker_rank = 0;
    uint32_t pid = 0;
    bool operator==(const Hello&) const = default;
};

struct HelloAck {
    uint32_t session = 0;
    bool operator==(const HelloAck&) const = default;
};

struct Layer {
    std::string name;
    uint64_t param_bytes = 0;
    bool operator==(const Layer&) const = default;
};

struct Model {
    std::vector<Layer> layers;
    bool operator==(const Model&) const = default;
};

struct Timings {
    uint64_t iteration = 0;
    std::vector<uint32_t> forward_us;   // per layer, forward order
    std::vector<uint32_t> backward_us;  // same length
    bool operator==(const Timings&) const = default;
};

// How a Register names its connection. With kPassedFd the socket itself rides
// along as SCM_RIGHTS on the same sendmsg(); that proves the sender owns it.
enum class ConnKind : uint8_t { kPassedFd = 1, kCookie = 2, kTuple = 3 };

struct Register {
    uint32_t layer = 0;
    ConnKind kind = ConnKind::kCookie;
    FlowKey flow;  // cookie or tuple; empty for kPassedFd
    bool operator==(const Register&) const = default;
};

struct Iteration {
    uint64_t iteration = 0;
    bool operator==(const Iteration&) const = default;
};

enum class StatusFormat : uint8_t { kJson = 0, kText = 1 };

struct StatusRequest {
    StatusFormat format = StatusFormat::kJson;
    bool operator==(const StatusRequest&) const = default;
};

struct StatusReply {
    std::string document;  // JSON or text, as requested
    bool operator==(const StatusReply&) const = default;
};

struct Error {
    uint32_t code = 0;  // errno value
    std::string message;
    bool operator==(const Error&) const = default;
};

// The socket rides along as SCM_RIGHTS on the same sendmsg(): only a
// socket the sender owns can be given a lane's rank.
struct RegisterLane {
    uint8_t lane = 0;
    uint8_t lanes = 1;  // 1 .. kMaxLanes, lane < lanes
    bool operator==(const RegisterLane&) const = default;
};

struct SubscribeRanks {
    bool operator==(const SubscribeRanks&) const = default;
};

struct Ranks {
    uint32_t generation = 0;      // bumped whenever a rank changes
    bool datapath = false;        // a Mercury datapath enforces them now
    std::vector<uint8_t> ranks;   // per layer, forward order; 0 most urgent
    bool operator==(const Ranks&) const = default;
};

struct JobWeight {
    std::string job;              // the job name its trainers say in Hello
    uint16_t weight = 1;          // 1 .. kMaxJobWeight
    bool operator==(const JobWeight&) const = default;
};

// The variant's order is the wire's type numbering (index + 1).
using Message = std::variant<Hello, HelloAck, Model, Timings, Register, Iteration, StatusRequest, StatusReply, Error,
                             RegisterLane, SubscribeRanks, Ranks, JobWeight>;

std::vector<uint8_t> encode(const Message& msg);

enum class DecodeStatus {
    kOk,
    kNeedMore,     // not a whole frame yet
    kBadVersion,   // header version is not kVersion
    kUnknownType,
    kOversized,    // body length above kMaxBody
    kMalformed,    // body does not parse as its type, or has trailing bytes
};

struct Decoded {
    DecodeStatus status = DecodeStatus::kNeedMore;
    Message message;
    size_t consumed = 0;  // bytes of input that formed the frame (kOk only)
};

Decoded decode(std::span<const uint8_t> input);
const char* describe(DecodeStatus status);

}  // namespace mercury::proto
