// SPDX-License-Identifier: GPL-2.0
// The plugin's devices: the host's network interfaces NCCL's socket
// transport would use ($NCCL_SOCKET_IFNAME, same syntax and default), and
// the settings it reads from the environment, with NCCL's names and defaults.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mercury::nccl {

struct Device {
    std::string name;        // e.g. eth0
    sockaddr_storage addr{};
    socklen_t addr_len = 0;
    std::string pci_path;    // realpath of /sys/class/net/NAME/device; "" if none
    int speed_mbit = 10000;  // /sys/class/net/NAME/speed, else 10 Gbit/s as NCCL assumes
};

// Interfaces matching $NCCL_SOCKET_IFNAME ("eth,ib": prefixes; "^docker":
// excluded prefixes; "=eth0": exact names), each with its first IPv4
// address (IPv6 if it has none). Unset: every interface that is up, not
// loopback and not docker*; loopback only if there is nothing else.
std::vector<Device> find_devices();

struct Settings {
    uint32_t data_sockets = 0;   // NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD
    uint32_t min_chunk = 64 << 10;   // NCCL_SOCKET_MIN_TASKSIZE
    uint32_t timeout_ms = 30000;     // MERCURY_NCCL_TIMEOUT_MS: a silent peer fails requests after it
};

// From the environment; a bad value is reported (@error) and its default kept.
Settings read_settings(const Device& dev, std::string* error);

// How many data sockets NCCL's socket transport would open on @dev:
// NCCL_SOCKET_NTHREADS (default by NIC vendor: AWS 2, GCP 4, else 0) times
// NCCL_NSOCKS_PERTHREAD (AWS 8, GCP 1, else 1), at most 64.
uint32_t nccl_socket_count(const std::string& dev, const char* nthreads, const char* nsocks,
                           std::string* error);

}  // namespace mercury::nccl
