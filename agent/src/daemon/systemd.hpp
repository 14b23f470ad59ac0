// SPDX-License-Identifier: GPL-2.0
// mercuryd under systemd: the trainers' socket passed by mercuryd.socket
// (socket activation), and Type=notify: readiness, reloads, stopping, and
// watchdog pings sent from the io loop, so a wedged loop gets restarted.
// Outside systemd every call does nothing.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <optional>
#include <string>

namespace mercury {

// The listening Unix stream socket systemd passed, if any. Throws
// std::runtime_error when systemd passed something else.
std::optional<int> activated_socket();

class SystemdNotifier {
public:
    explicit SystemdNotifier(boost::asio::io_context& io);

    void ready(const std::string& status);
    void reloading();
    void stopping();
    // The watchdog interval systemd asked for (WatchdogSec=); nullopt if none.
    std::optional<std::chrono::microseconds> watchdog() const { return watchdog_; }

private:
    void ping();

    boost::asio::steady_timer timer_;
    std::optional<std::chrono::microseconds> watchdog_;
    bool pinging_ = false;
};

}  // namespace mercury
