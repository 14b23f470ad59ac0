// SPDX-License-Identifier: GPL-2.0
// What the plugin puts on the wire and in NCCL's handle. Both ends are this
// plugin; every field read from a peer is checked before it is used.
//
// A connection is one control socket (index 0) and n data sockets (1..n).
// Each socket opens with a Hello that names the connection (a random id),
// its index, the listener's secret and the lane. Every message is a Header
// on the control socket, then its bytes: on the control socket after the
// header when n is 0, else in chunks dealt to the data sockets in turn
// (both ends deal the same way, so a chunk's socket says where it goes).
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <mercury/uapi.h>

#include "nccl_net.h"

namespace mercury::nccl {

inline constexpr uint32_t kMagic = 0x4d4e4554;   // "MNET"
inline constexpr uint16_t kVersion = 1;
inline constexpr uint32_t kMaxDataSockets = 64;  // NCCL's socket transport's MAX_SOCKETS
inline constexpr uint32_t kMaxGroup = 8;         // receives in one irecv
inline constexpr uint8_t kLanes = MERCURY_NUM_RANKS;  // a lane per rank
inline constexpr uint32_t kMinChunkFloor = 4096;
inline constexpr uint32_t kMinChunkCeiling = 64u << 20;

// NCCL's handle: written by listen(), carried to the peer by NCCL, read by
// connect() (which keeps its progress in `pending`, as NCCL's own socket
// transport keeps its stage in the handle).
struct Handle {
    uint32_t magic;
    uint16_t version;
    uint16_t family;      // AF_INET or AF_INET6
    uint8_t addr[16];     // the listener's address (IPv4: first 4 bytes)
    uint16_t port;        // network order
    uint16_t data_sockets;
    uint32_t pad;
    uint64_t secret;      // a connecting socket must present it
    uint64_t pending;     // connect()'s state between calls; 0 from listen()
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE);
static_assert(std::is_trivially_copyable_v<Handle>);

// First bytes on every socket of a connection, connector to acceptor.
struct Hello {
    uint32_t magic;
    uint16_t version;
    uint16_t index;         // 0: control, 1..data_sockets: data
    uint64_t secret;
    uint64_t connection;    // random, the same on all sockets of a connection
    uint32_t min_chunk;     // the sender's smallest chunk (the receiver cuts alike)
    uint16_t data_sockets;
    uint8_t lane;           // 0..kLanes-1
    uint8_t pad;
};
static_assert(sizeof(Hello) == 32);

// One message, on the control socket.
struct Header {
    uint32_t magic;
    int32_t tag;
    uint64_t size;
};
static_assert(sizeof(Header) == 16);

// Why a Hello is refused, or nullptr.
inline const char* hello_error(const Hello& h, uint64_t secret, uint16_t data_sockets)
{
    if (h.magic != kMagic || h.version != kVersion)
        return "not a Mercury NCCL connection (bad magic or version)";
    if (h.secret != secret)
        return "wrong secret (not from this listener's handle)";
    if (h.data_sockets != data_sockets)
        return "data socket count differs from the listener's";
    if (h.index > data_sockets)
        return "socket index out of range";
    if (h.lane >= kLanes)
        return "lane out of range";
    if (h.min_chunk < kMinChunkFloor || h.min_chunk > kMinChunkCeiling)
        return "chunk size out of range";
    return nullptr;
}

// How a message of @size bytes is cut for @sockets data sockets: chunks of
// max(min_chunk, ceil(size / sockets)), as NCCL's socket transport cuts
// them. 0 sockets: one piece, on the control socket.
inline uint64_t chunk_size(uint64_t size, uint32_t sockets, uint64_t min_chunk)
{
    if (!sockets)
        return size;
    const uint64_t even = (size + sockets - 1) / sockets;
    return even > min_chunk ? even : min_chunk;
}

}  // namespace mercury::nccl
