// SPDX-License-Identifier: GPL-2.0
// The kernel's struct tcp_info, kept apart from libnl's headers (which pull
// in glibc's <netinet/tcp.h>, an older and conflicting copy of it).
#include <linux/tcp.h>

#include <algorithm>
#include <cstring>

#include "datapath/sock_diag.hpp"

namespace mercury {

void read_tcp_info(const void* data, size_t len, DiagSocket& s)
{
    tcp_info info{};
    std::memcpy(&info, data, std::min(sizeof(info), len));
    s.cwnd = info.tcpi_snd_cwnd;
    s.srtt_us = info.tcpi_rtt;
    s.bytes_acked = info.tcpi_bytes_acked;
}

}  // namespace mercury
