// SPDX-License-Identifier: GPL-2.0
// Who may hold one of mercury-ps's connection slots before proving the
// job's secret, and how often a refusal is logged. A peer that has not
// authenticated is bounded per address (connections in the handshake at
// once; refusals per window, after which its new connections are closed at
// accept until the window ends), so a flood from one address cannot starve
// the others; the log says every refusal's address, at a bounded rate.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace mercury::ps {

class Admission {
public:
    using Clock = std::chrono::steady_clock;
    struct Limits {
        uint32_t handshakes_per_address = 64;    // a host's workers and lanes connecting at once
        uint32_t handshakes = 512;               // from every address together
        uint32_t refusals_per_address = 32;      // within one window, then closed at accept
        std::chrono::milliseconds window{10000};
        uint32_t log_lines_per_second = 10;
    };

    explicit Admission(Limits limits) : limits_(limits) {}

    // Whether a connection from @address may start a handshake; "" if so
    // (it then holds a slot until handshake_over()), else why not.
    std::string open(const std::string& address, Clock::time_point now);
    void handshake_over(const std::string& address);
    // A connection from @address failed its handshake or broke a rule.
    void refused(const std::string& address, Clock::time_point now);
    // Whether to log a refusal at @now. Once a second has passed since the
    // last line logged, @suppressed holds how many were not, before it.
    bool log_now(Clock::time_point now, uint64_t& suppressed);

    uint32_t handshakes() const { return handshakes_; }
    size_t addresses() const { return by_address_.size(); }

private:
    struct Address {
        uint32_t handshakes = 0;
        uint32_t refusals = 0;
        Clock::time_point window_start{};
    };
    // @address's record, its refusals counted from 0 again if its window ended.
    Address& in_window(const std::string& address, Clock::time_point now);
    void prune(Clock::time_point now);

    Limits limits_;
    std::map<std::string, Address> by_address_;
    uint32_t handshakes_ = 0;
    Clock::time_point log_second_{};
    uint32_t logged_ = 0;
    uint64_t suppressed_ = 0;
};

}  // namespace mercury::ps
