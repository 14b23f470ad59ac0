// SPDX-License-Identifier: GPL-2.0
// `mercury-replay worker`: one worker of the replayed training, its compute
// emulated layer by layer from the profile, its gradients pushed to and its
// sums pulled from mercury-ps over real TCP; prints one JSON line.
#pragma once

#include "replay/plan.hpp"

namespace mercury::replay {

int run_worker(const Options& o);

}  // namespace mercury::replay
