// SPDX-License-Identifier: GPL-2.0
#include "replay/report.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace mercury::replay {

std::string json_text(const std::string& text)
{
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string wait_json_total(const std::vector<double>& wait_s, size_t iterations)
{
    double total = 0;
    for (double w : wait_s)
        total += w;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.4f", iterations ? total / static_cast<double>(iterations) : 0.0);
    return buf;
}

std::string wait_json_top(const std::vector<double>& wait_s, size_t iterations)
{
    std::vector<uint32_t> order(wait_s.size());
    for (uint32_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return wait_s[a] > wait_s[b]; });
    std::string out = "[";
    for (size_t i = 0; i < order.size() && i < 5 && wait_s[order[i]] > 0; ++i) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%s[%u,%.4f]", i ? "," : "", order[i],
                      iterations ? wait_s[order[i]] / static_cast<double>(iterations) : 0.0);
        out += buf;
    }
    return out + "]";
}

}  // namespace mercury::replay
