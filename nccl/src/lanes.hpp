// SPDX-License-Identifier: GPL-2.0
// Where a communicator's sockets go: its NCCL traffic class is a lane (a
// Mercury rank: class 0 is the most urgent, 7 the least); every socket of a
// connection runs congestion control mercury and is registered with the
// local mercuryd as that lane, through libmercury. Neither is required to
// train: without the CC the host's default carries the bytes, without the
// agent libmercury keeps the registrations until one appears; each says so
// once in NCCL's log.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mercury::nccl {

// A class NCCL left unset goes to the least urgent lane: traffic nobody
// ranked never holds back traffic someone did.
inline constexpr uint8_t kDefaultLane = 7;

// The lane of NCCL traffic class @traffic_class (NCCL_NET_TRAFFIC_CLASS_UNDEF:
// kDefaultLane); -1 and @error if it is none of 0..7.
int lane_of_class(int traffic_class, std::string* error);

// Congestion control mercury on @fd, read back (before connect: the
// handshake runs it too).
void select_mercury(int fd);

// Registers each (connected) socket as @lane with the local mercuryd: job
// $MERCURY_JOB (else "nccl"), worker $MERCURY_WORKER (else $RANK, else 0),
// agent at $MERCURY_SOCKET.
void register_lane(const std::vector<int>& fds, uint8_t lane);

// Before the sockets close: the agent forgets them.
void release_sockets(const std::vector<int>& fds);

}  // namespace mercury::nccl
