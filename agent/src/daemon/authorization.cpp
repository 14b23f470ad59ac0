// SPDX-License-Identifier: GPL-2.0
#include "daemon/authorization.hpp"

#include <cerrno>
#include <variant>

namespace mercury {

Refusal authorize(const Caller& caller, const proto::Message& msg)
{
    const bool root = caller.uid == 0;
    // A job's weight takes link share from every other job: an operator's call.
    if (std::holds_alternative<proto::JobWeight>(msg) && !root)
        return {EPERM, "setting a job's weight needs root"};
    // A cookie or a tuple proves nothing: anyone could name another user's
    // connection. Only root may; everyone else passes the socket.
    if (const auto* reg = std::get_if<proto::Register>(&msg); reg && reg->kind != proto::ConnKind::kPassedFd && !root)
        return {EPERM, "register a connection by passing its socket (by cookie or tuple needs root)"};
    return {};
}

}  // namespace mercury
