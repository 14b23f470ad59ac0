// SPDX-License-Identifier: GPL-2.0
// mercury-ps's wire format (agent/PROTOCOL.md, "Parameter server"): fixed
// little-endian records over TCP, one job per server, a challenge-response
// handshake on a per-job secret. python/mercury/ps.py mirrors every value
// here; tests/python/test_contract.py checks that they agree.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "mercury/uapi.h"

namespace mercury::ps {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

constexpr uint32_t kMagic = 0x3153504d;  // "MPS1": mercury-ps, any version
constexpr uint16_t kVersion = 2;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;          // HMAC-SHA256
constexpr size_t kTagBytes = 16;          // a frame's HMAC-SHA256, truncated
constexpr size_t kMaxJobName = 64;
constexpr uint32_t kMaxLanes = MERCURY_NUM_RANKS;   // the trainer's lanes: one per rank at most
constexpr uint32_t kMaxKeys = 1u << 16;
constexpr size_t kMaxErrorText = 4096;    // bytes of an Error's text, at most
// A secret must resist offline guessing from one recorded handshake: at
// least this many bytes, of at least kMinSecretDistinct different values
// (`head -c 32 /dev/urandom | base64` gives 44 bytes of ~30 values).
constexpr size_t kMinSecretBytes = 32;
constexpr size_t kMinSecretDistinct = 10;

// Challenge flags.
// kUntaggedPayloads: frames' tags cover their headers, not their payloads
// (mercury-ps --payload-tags off, for a trusted emulated testbed whose CPU
// cannot afford HMAC over every byte). A worker accepts it only when told.
constexpr uint16_t kUntaggedPayloads = 1;

// Server -> worker, as soon as it connects.
struct Challenge {
    uint32_t magic;
    uint16_t version;
    uint16_t flags;
    uint32_t chunk_elems;   // a push or pull carries at most this many float32s, chunk-aligned
    uint8_t nonce[kNonceBytes];
};
static_assert(sizeof(Challenge) == 44);

// Worker -> server: then job_len bytes of job name; once the server checked
// mac, key_count little-endian uint64 key sizes (float32 elements) and
// their tag (the worker's frame 0).
struct Hello {
    uint32_t magic;
    uint16_t version;
    uint16_t job_len;
    uint32_t worker;
    uint32_t workers;
    uint32_t lane;
    uint32_t lanes;
    uint32_t key_count;
    uint32_t flags;      // the Challenge's flags, as the worker accepted them (under the mac)
    uint64_t run;        // the run: every worker of one run sends the same (rank 0 draws it)
    uint64_t instance;   // this worker process: its lanes send the same, another process another
    uint8_t nonce[kNonceBytes];   // the worker's: the frame keys depend on both ends'
    // HMAC-SHA256(secret, "mercury-ps hello" || challenge nonce || this record up to mac || job name)
    uint8_t mac[kMacBytes];
};
static_assert(sizeof(Hello) == 112);
// A Hello's first bytes, enough to tell another version's.
constexpr size_t kHelloPrefix = 8;

enum class Type : uint8_t {
    kPush = 1,        // worker -> server: count float32s of key at offset, for iteration
    kBye = 2,         // worker -> server: done with the job; close follows
    kAckPushes = 3,   // worker -> server: acknowledge each of my pushes on this connection from now on
    kReady = 16,      // server -> worker: handshake accepted (its tag proves the server holds the secret)
    kPull = 17,       // server -> worker: the sum over every worker of key [offset, offset + count) of iteration
    kError = 18,      // server -> worker: count bytes of text follow; the server closes
    kAck = 19,        // server -> worker: its push of key [offset, offset + count) is taken (after kAckPushes)
};

// Every message after the Hello: this header, its payload, then a tag.
struct Header {
    Type type;
    uint8_t reserved[3];
    uint32_t key;
    uint32_t offset;      // in elements, a multiple of chunk_elems
    uint32_t count;       // elements (push, pull) or bytes (error)
    uint32_t iteration;   // push, pull, ack: the key's round, counted from 0 per key
};
static_assert(sizeof(Header) == 20);

using Nonce = std::span<const uint8_t, kNonceBytes>;
using Tag = std::array<uint8_t, kTagBytes>;

// The MAC a worker must send for @hello (its mac field ignored).
std::array<uint8_t, kMacBytes> hello_mac(std::string_view secret, Nonce challenge, const Hello& hello,
                                         std::string_view job);

// One direction's frame authentication: HMAC-SHA256 under a key drawn from
// the secret and both nonces, over the frame's number in that direction
// (from 0: a dropped, repeated or reordered frame fails) and its bytes,
// truncated to kTagBytes.
class FrameMac {
public:
    enum class Direction { kToServer, kToWorker };
    FrameMac(std::string_view secret, Nonce challenge, Nonce worker, Direction direction);
    ~FrameMac();
    FrameMac(FrameMac&& other) noexcept;
    FrameMac& operator=(FrameMac&& other) noexcept;
    FrameMac(const FrameMac&) = delete;
    FrameMac& operator=(const FrameMac&) = delete;
    // The next frame's tag over @header then @payload.
    Tag next(std::span<const uint8_t> header, std::span<const uint8_t> payload = {});
    uint64_t frames() const { return seq_; }

private:
    // HMAC keyed once (OpenSSL's EVP_MAC_CTX); each frame a copy of it.
    struct Keyed;
    std::unique_ptr<Keyed> keyed_;
    uint64_t seq_ = 0;
};

// The job's secret as both ends take it: @file's bytes (one trailing newline
// dropped) if @file is given, else $MERCURY_PS_SECRET, else "". Throws
// std::runtime_error if @file cannot be read.
std::string load_secret(const std::string& file);

// Why @secret is too weak (kMinSecretBytes, kMinSecretDistinct), or "".
std::string weak_secret(std::string_view secret);

// Constant-time comparison (a MAC check must not leak how much matched).
bool same_mac(std::span<const uint8_t> a, std::span<const uint8_t> b);

}  // namespace mercury::ps
