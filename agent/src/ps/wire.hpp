// SPDX-License-Identifier: GPL-2.0
// mercury-ps's wire format (agent/PROTOCOL.md, "Parameter server"): fixed
// little-endian records over TCP, one job per server, a challenge-response
// handshake on a per-job secret. python/mercury/ps.py mirrors every value
// here; tests/python/test_contract.py checks that they agree.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace mercury::ps {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

constexpr uint32_t kMagic = 0x3153504d;  // "MPS1"
constexpr uint16_t kVersion = 1;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;          // HMAC-SHA256
constexpr size_t kMaxJobName = 64;
constexpr uint32_t kMaxLanes = 8;
constexpr uint32_t kMaxKeys = 1u << 16;
constexpr size_t kMaxErrorText = 4096;    // bytes of an Error's text, at most

// Server -> worker, as soon as it connects.
struct Challenge {
    uint32_t magic;
    uint16_t version;
    uint16_t reserved;
    uint32_t chunk_elems;   // a push or pull carries at most this many float32s, chunk-aligned
    uint8_t nonce[kNonceBytes];
};
static_assert(sizeof(Challenge) == 44);

// Worker -> server: then job_len bytes of job name; once authenticated,
// key_count little-endian uint64 key sizes (float32 elements).
struct Hello {
    uint32_t magic;
    uint16_t version;
    uint16_t job_len;
    uint32_t worker;
    uint32_t workers;
    uint32_t lane;
    uint32_t lanes;
    uint32_t key_count;
    uint8_t mac[kMacBytes];  // HMAC-SHA256(secret, nonce || this record up to mac || job name)
};
static_assert(sizeof(Hello) == 60);

enum class Type : uint8_t {
    kPush = 1,        // worker -> server: count float32s of key at offset
    kBye = 2,         // worker -> server: done with the job; close follows
    kAckPushes = 3,   // worker -> server: acknowledge each of my pushes on this connection from now on
    kReady = 16,      // server -> worker: handshake accepted
    kPull = 17,       // server -> worker: the sum over every worker of key [offset, offset + count)
    kError = 18,      // server -> worker: count bytes of text follow; the server closes
    kAck = 19,        // server -> worker: its push of key [offset, offset + count) is taken (after kAckPushes)
};

struct Header {
    Type type;
    uint8_t reserved[3];
    uint32_t key;
    uint32_t offset;   // in elements, a multiple of chunk_elems
    uint32_t count;    // elements (push, pull) or bytes (error)
};
static_assert(sizeof(Header) == 16);

// The MAC a worker must send for @hello (its mac field ignored).
std::array<uint8_t, kMacBytes> hello_mac(std::string_view secret, std::span<const uint8_t, kNonceBytes> nonce,
                                         const Hello& hello, std::string_view job);

// The job's secret as both ends take it: @file's bytes (one trailing newline
// dropped) if @file is given, else $MERCURY_PS_SECRET, else "". Throws
// std::runtime_error if @file cannot be read.
std::string load_secret(const std::string& file);

// Constant-time comparison (the MAC check must not leak how much matched).
bool same_mac(std::span<const uint8_t, kMacBytes> a, std::span<const uint8_t, kMacBytes> b);

}  // namespace mercury::ps
