// SPDX-License-Identifier: GPL-2.0
// The caller's netns's TCP sockets as the kernel's sock_diag reports them
// (NETLINK_SOCK_DIAG, as ss does): addresses, cookie, congestion control,
// tcp_info, the CC's own info (the module's, in the DCTCP layout) and,
// when asked, their values in one BPF socket-storage map.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <linux/inet_diag.h>

#include "datapath/datapath.hpp"

namespace mercury {

struct DiagSocket {
    Endpoint local;
    Endpoint remote;
    uint64_t cookie = 0;
    uint8_t state = 0;                       // TCP_ESTABLISHED, ...
    std::string cc;                          // e.g. "mercury"; empty if not reported
    uint32_t cwnd = 0;                       // segments
    uint32_t srtt_us = 0;
    uint64_t bytes_acked = 0;
    std::optional<tcp_dctcp_info> cc_info;   // get_info's DCTCP layout
    std::vector<uint8_t> storage;            // the asked-for map's value; empty if none
};

// Fills cwnd, srtt_us and bytes_acked of @s from a kernel struct tcp_info
// of @len bytes (older kernels send less). Apart because <linux/tcp.h>,
// which has the whole struct, cannot share a file with libnl's headers.
void read_tcp_info(const void* data, size_t len, DiagSocket& s);

// What TCP reports of @d, as a SocketView with no datapath state yet (each
// datapath adds rank, weight, tag and hold from its own source).
SocketView tcp_view(const DiagSocket& d);

// Every TCP socket (IPv4 and IPv6) of the caller's netns but listeners.
// @storage_map_fd: a BPF_MAP_TYPE_SK_STORAGE map whose values to include
// (-1: none; needs CAP_BPF or CAP_SYS_ADMIN).
Status diag_tcp_sockets(std::vector<DiagSocket>& out, int storage_map_fd = -1);

}  // namespace mercury
