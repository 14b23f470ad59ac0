// SPDX-License-Identifier: GPL-2.0
#include "daemon/systemd.hpp"

#include <sys/socket.h>
#include <systemd/sd-daemon.h>

#include <cstring>
#include <stdexcept>

namespace mercury {

std::optional<int> activated_socket()
{
    const int n = sd_listen_fds(1);
    if (n < 0)
        throw std::runtime_error(std::string("socket activation: ") + std::strerror(-n));
    if (n == 0)
        return std::nullopt;
    if (n > 1)
        throw std::runtime_error("socket activation passed " + std::to_string(n) + " sockets; mercuryd takes one");
    if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, nullptr, 0) <= 0)
        throw std::runtime_error("socket activation passed something other than a listening Unix stream socket");
    return SD_LISTEN_FDS_START;
}

SystemdNotifier::SystemdNotifier(boost::asio::io_context& io) : timer_(io)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(1, &usec) > 0 && usec > 0)
        watchdog_ = std::chrono::microseconds(usec);
}

void SystemdNotifier::ready(const std::string& status)
{
    sd_notify(0, ("READY=1\nSTATUS=" + status).c_str());
    if (watchdog_ && !pinging_) {
        pinging_ = true;
        ping();
    }
}

void SystemdNotifier::reloading()
{
    sd_notify(0, "RELOADING=1");
}

void SystemdNotifier::stopping()
{
    timer_.cancel();
    sd_notify(0, "STOPPING=1");
}

// Every half interval, as sd_watchdog_enabled(3) advises; from the io loop,
// so the pings stop when the loop does.
void SystemdNotifier::ping()
{
    sd_notify(0, "WATCHDOG=1");
    timer_.expires_after(*watchdog_ / 2);
    timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec)
            ping();
    });
}

}  // namespace mercury
