// SPDX-License-Identifier: GPL-2.0
// Whole-string number parsing for the test tools' options.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>

namespace mercury::tools {

// @text as a T, or nullopt unless all of it is one T in range.
template <typename T>
std::optional<T> parse_number(std::string_view text)
{
    T v{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || end != text.data() + text.size())
        return std::nullopt;
    return v;
}

}  // namespace mercury::tools
