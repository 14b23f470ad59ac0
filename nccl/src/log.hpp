// SPDX-License-Identifier: GPL-2.0
// The plugin's log: NCCL's own (the logger init() hands over), so that its
// lines appear with NCCL_DEBUG=WARN/INFO like NCCL's; stderr before init().
#pragma once

#include <cstdio>
#include <string>

#include "nccl_net.h"

namespace mercury::nccl {

class Log {
public:
    static void set(ncclDebugLogger_t logger) { logger_ = logger; }

    static void warn(const std::string& what) { emit(NCCL_LOG_WARN, what); }
    static void info(const std::string& what) { emit(NCCL_LOG_INFO, what); }

private:
    static void emit(ncclDebugLogLevel level, const std::string& what)
    {
        if (logger_)
            logger_(level, NCCL_NET | NCCL_INIT, __FILE__, __LINE__, "NET/Mercury: %s", what.c_str());
        else if (level == NCCL_LOG_WARN)
            std::fprintf(stderr, "NET/Mercury: %s\n", what.c_str());
    }

    static inline ncclDebugLogger_t logger_ = nullptr;
};

}  // namespace mercury::nccl
