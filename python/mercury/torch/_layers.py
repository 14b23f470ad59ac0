# SPDX-License-Identifier: GPL-2.0
"""Layer discovery: which module owns which parameters, and which module's
forward first uses each (the layers, in forward order, are what the
buckets, the timings and the lanes are built on)."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["own_parameters", "nbytes", "FirstUse"]


def own_parameters(module: torch.nn.Module) -> List[torch.nn.Parameter]:
    """Parameters a module holds itself: its direct ones, and those of
    ParameterList/ParameterDict children (which have no forward)."""
    params = list(module.parameters(recurse=False))
    for child in module.children():
        if isinstance(child, (torch.nn.ParameterList, torch.nn.ParameterDict)):
            params += list(child.parameters())
    return params


def nbytes(params: Sequence[torch.Tensor]) -> int:
    return sum(p.numel() * p.element_size() for p in params)


class FirstUse(TorchFunctionMode):
    """During the first forward passes: which module's forward was running
    when each parameter was first used (MultiheadAttention uses its
    ``out_proj``'s parameters without calling ``out_proj``)."""

    def __init__(self, running: List[torch.nn.Module], first_user: Dict[int, torch.nn.Module]) -> None:
        super().__init__()
        self.running = running
        self.first_user = first_user

    def __torch_function__(self, func: Callable, types: tuple, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if self.running and getattr(func, "__name__", "") != "__get__":
            for a in list(args) + list(kwargs.values()):
                for t in (a if isinstance(a, (list, tuple)) else (a,)):
                    if isinstance(t, torch.nn.Parameter) and id(t) not in self.first_user:
                        self.first_user[id(t)] = self.running[-1]
        return func(*args, **kwargs)
