// SPDX-License-Identifier: GPL-2.0
// Text from clients (job and layer names) shown to an operator: control
// bytes would drive the terminal or forge log lines, so they are escaped.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace mercury {

// @text with every control byte (and DEL, and the backslash) as \xNN.
inline std::string printable(std::string_view text)
{
    std::string out;
    out.reserve(text.size());
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f || c == '\\') {
            char esc[8];
            std::snprintf(esc, sizeof(esc), "\\x%02x", c);
            out += esc;
        } else {
            out += ch;
        }
    }
    return out;
}

}  // namespace mercury
