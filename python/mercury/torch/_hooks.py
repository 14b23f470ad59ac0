# SPDX-License-Identifier: GPL-2.0
"""mercury.torch's module hooks, kept apart from the model's own: a copy
or pickle of the model carries only the others."""
from __future__ import annotations

import collections
import copy
from typing import Any, Callable, Dict, List, Set, Tuple

import torch

from mercury.torch._compat import eager

__all__ = ["HookDict", "hook", "unhook"]


class HookDict(collections.OrderedDict):
    """A module's hook table while it holds hooks of mercury.torch's
    (``ours``, by handle id). A copy of it, by ``copy.deepcopy`` or
    pickling (which a copy of the model makes), is a plain OrderedDict of
    the other hooks: the copied model is a plain model, and neither refers
    to the optimizer nor needs mercury to load."""

    def __init__(self, hooks: "collections.OrderedDict[int, Any]") -> None:
        super().__init__(hooks)
        self.ours: Set[int] = set()

    def _others(self) -> List[Tuple[int, Any]]:
        return [(k, v) for k, v in self.items() if k not in self.ours]

    def __deepcopy__(self, memo: Dict[int, Any]) -> "collections.OrderedDict[int, Any]":
        return collections.OrderedDict((k, copy.deepcopy(v, memo)) for k, v in self._others())

    def __reduce__(self) -> Tuple[Any, ...]:
        return collections.OrderedDict, (self._others(),)


def hook(module: torch.nn.Module, table: str, register: Callable[[Callable], Any], fn: Callable) -> Any:
    """Registers ``fn`` with ``register`` (a method of ``module`` that adds
    to ``module.<table>``), marked as ours in that table."""
    hooks = getattr(module, table)
    if not isinstance(hooks, HookDict):
        hooks = HookDict(hooks)
        setattr(module, table, hooks)
    handle = register(eager(fn))
    hooks.ours.add(handle.id)
    return handle


def unhook(module: torch.nn.Module, table: str) -> None:
    """``module.<table>`` a plain OrderedDict again (once our hooks are removed)."""
    hooks = getattr(module, table)
    if isinstance(hooks, HookDict):
        setattr(module, table, collections.OrderedDict(hooks))
