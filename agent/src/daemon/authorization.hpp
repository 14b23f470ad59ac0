// SPDX-License-Identifier: GPL-2.0
// Who may ask mercuryd for what, in one place, apart from the dispatch
// (trainer_server.cpp). A caller is what SO_PEERCRED says, never what a
// message says about itself. Ownership of a connection is proven by passing
// its socket, and is checked where the socket is taken.
#pragma once

#include <sys/types.h>

#include "protocol/wire.hpp"

namespace mercury {

struct Caller {
    uid_t uid = 0;
};

// Why a request is refused: an errno and a reason the client is told; 0:
// allowed.
struct Refusal {
    int error = 0;
    const char* why = "";
    explicit operator bool() const { return error != 0; }
};

Refusal authorize(const Caller& caller, const proto::Message& msg);

}  // namespace mercury
