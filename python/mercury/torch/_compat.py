# SPDX-License-Identifier: GPL-2.0
"""What differs between the PyTorch generations mercury.torch runs on
(tested: Debian 12's 1.13 and Debian 13's 2.6), in one place."""
from __future__ import annotations

from typing import Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable)


def eager(fn: F) -> F:
    """``fn`` (a module hook) run by Python where torch.compile (PyTorch 2)
    would trace it: the hooks keep state across calls (the bucket states,
    timings) that a traced graph would freeze at its first call. The
    compiled model then runs as compiled pieces between the hooks. PyTorch
    1.13 has no compiler: ``fn`` itself."""
    compiler = getattr(torch, "compiler", None)
    disable = getattr(compiler, "disable", None)
    return disable(fn) if disable is not None else fn
