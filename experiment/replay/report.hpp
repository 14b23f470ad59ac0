// SPDX-License-Identifier: GPL-2.0
// The JSON lines the roles print, by hand: their numbers keep the fixed
// precision the reports expect.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mercury::replay {

// A JSON string, quoted and escaped.
std::string json_text(const std::string& text);

// Forward-pass waits for parameters, per measured iteration: the total, and
// the layers waited for longest as [[layer, seconds], ...] (at most 5).
std::string wait_json_total(const std::vector<double>& wait_s, size_t iterations);
std::string wait_json_top(const std::vector<double>& wait_s, size_t iterations);

}  // namespace mercury::replay
