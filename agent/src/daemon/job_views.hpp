// SPDX-License-Identifier: GPL-2.0
// mercuryd status as clients see it (mercuryctl status): views of a
// JobRegistry and its datapath, in the protocol's JSON (agent/PROTOCOL.md)
// and as text for people.
#pragma once

#include <string>

#include "daemon/jobs.hpp"

namespace mercury {

std::string status_json(const JobRegistry& registry);
std::string status_text(const JobRegistry& registry);

}  // namespace mercury
