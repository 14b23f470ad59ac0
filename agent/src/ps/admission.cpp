// SPDX-License-Identifier: GPL-2.0
#include "ps/admission.hpp"

namespace mercury::ps {

std::string Admission::open(const std::string& address, Clock::time_point now)
{
    if (by_address_.size() > 4096)
        prune(now);
    if (handshakes_ >= limits_.handshakes)
        return "at the limit of " + std::to_string(limits_.handshakes) + " handshakes at once";
    Address& a = in_window(address, now);
    if (a.refusals >= limits_.refusals_per_address)
        return std::to_string(a.refusals) + " refusals within " + std::to_string(limits_.window.count()) +
               " ms: closed at accept until the window ends";
    if (a.handshakes >= limits_.handshakes_per_address)
        return "at the limit of " + std::to_string(limits_.handshakes_per_address) +
               " handshakes at once from one address";
    ++a.handshakes;
    ++handshakes_;
    return "";
}

void Admission::handshake_over(const std::string& address)
{
    const auto it = by_address_.find(address);
    if (it == by_address_.end() || !it->second.handshakes)
        return;
    --it->second.handshakes;
    --handshakes_;
}

void Admission::refused(const std::string& address, Clock::time_point now)
{
    ++in_window(address, now).refusals;
}

Admission::Address& Admission::in_window(const std::string& address, Clock::time_point now)
{
    Address& a = by_address_[address];
    if (now - a.window_start >= limits_.window) {
        a.window_start = now;
        a.refusals = 0;
    }
    return a;
}

bool Admission::log_now(Clock::time_point now, uint64_t& suppressed)
{
    suppressed = 0;
    if (now - log_second_ >= std::chrono::seconds(1)) {
        suppressed = suppressed_;
        suppressed_ = 0;
        log_second_ = now;
        logged_ = 0;
    }
    if (logged_ < limits_.log_lines_per_second) {
        ++logged_;
        return true;
    }
    ++suppressed_;
    return false;
}

void Admission::prune(Clock::time_point now)
{
    // An address with nothing in flight and an expired window is forgotten:
    // the map holds at most the addresses of live handshakes and recent
    // refusals.
    for (auto it = by_address_.begin(); it != by_address_.end();)
        if (!it->second.handshakes && now - it->second.window_start >= limits_.window)
            it = by_address_.erase(it);
        else
            ++it;
}

}  // namespace mercury::ps
