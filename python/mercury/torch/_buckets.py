# SPDX-License-Identifier: GPL-2.0
"""A bucket (neighbouring layers' parameters reduced together) and the
states of its reduction; the optimizer moves it through them."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from mercury.torch._guard import GuardedGrad

__all__ = ["State", "Bucket"]


class State(enum.Enum):
    IDLE = "idle"                    # p.grad holds what DDP would show; nothing outstanding
    REDUCING = "reducing"            # all-reduce in flight, p.grad guarded, step() not yet called
    STEP_DEFERRED = "step-deferred"  # step() called: applied before the bucket's next forward


@dataclass(eq=False)  # identity: buckets hold tensors
class Bucket:
    index: int
    params: List[torch.nn.Parameter]
    modules: List[torch.nn.Module]
    layers: List[int]
    lane: int = 0
    state: State = State.IDLE
    waiting: int = 0                            # params whose gradient this backward has not delivered
    used: List[bool] = field(default_factory=list)   # a gradient arrived since the last launch
    work: Optional[Any] = None                  # the async all-reduce
    flat: Optional[torch.Tensor] = None         # gradients / world, then one used-flag per param
    slots: List[torch.Tensor] = field(default_factory=list)   # each param's gradient in flat
    flags: Optional[torch.Tensor] = None        # the used-flags in flat
    real: List[torch.Tensor] = field(default_factory=list)   # p.grad at launch (zeros if it was None)
    was_none: List[bool] = field(default_factory=list)
    guards: List[GuardedGrad] = field(default_factory=list)
    release: Optional[Callable[[], None]] = None      # what its guards call on a use: the average in place
    zero_later: List[Callable[[], bool]] = field(default_factory=list)   # per param: zero once stepped
    zero_after: List[bool] = field(default_factory=list)   # zero once the deferred step used it
    settings: Optional[List[Dict[str, Any]]] = None  # param groups' settings at step()
    group_params: List[List[torch.nn.Parameter]] = field(default_factory=list)
    trace: Optional[dict] = None
    pending: List[Tuple[torch.nn.Parameter, type]] = field(default_factory=list)   # what step() pends, as what
