// SPDX-License-Identifier: GPL-2.0
// libFuzzer target for the agent protocol decoder (agent/src/protocol).
// Beyond "no crash, no UB" (ASan/UBSan): whatever decodes must re-encode to
// a frame that decodes to the same message.
#include <cstddef>
#include <cstdint>
#include <span>

#include "protocol/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    using namespace mercury::proto;
    std::span<const uint8_t> in(data, size);
    while (!in.empty()) {
        const Decoded d = decode(in);
        if (d.status != DecodeStatus::kOk)
            break;
        if (d.consumed == 0 || d.consumed > in.size())
            __builtin_trap();
        const auto again = decode(encode(d.message));
        if (again.status != DecodeStatus::kOk || !(again.message == d.message))
            __builtin_trap();
        in = in.subspan(d.consumed);
    }
    return 0;
}
