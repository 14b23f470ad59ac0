# SPDX-License-Identifier: GPL-2.0
"""The reducer interface: how a bucket's flat gradient is summed over the
workers, on one of ``n`` lanes whose connections the datapath tells apart.

:class:`~mercury.torch.optimizer.DistributedOptimizer` sees only this face;
each backend is one implementation: ``"allreduce"`` (Gloo's ring on one
process group per lane, :class:`mercury.torch.lanes.Lanes`) and ``"ps"``
(mercury-ps servers, one connection per server and lane,
:class:`mercury.torch.ps.ServerLanes`) and ``"nccl"`` (one NCCL process
group per lane, each with its traffic class, for models on GPUs,
:class:`mercury.torch.nccl.NcclLanes`). A new backend is one class and one
line in :data:`BACKENDS`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Protocol, Sequence, Set, Tuple

import torch

import mercury
from mercury.torch.lanes import Lanes
from mercury.torch.nccl import NcclLanes, check_nccl
from mercury.torch.ps import ServerLanes, check_options

__all__ = ["Reducer", "Backend", "BACKENDS", "reducer_factory"]


class Reducer(Protocol):
    """One backend's lanes, in the order the optimizer uses them:
    constructed with the lane count every worker agreed on (collective),
    :meth:`pin` and :meth:`register` them, :meth:`prepare` once the buckets
    are known, then :meth:`reduce` each bucket every iteration."""

    previous_cc: Set[str]   # the congestion controls the lane sockets had before pin()

    def __len__(self) -> int:
        """The number of lanes."""

    def pin(self, cc: str) -> Optional[str]:
        """Sets congestion control ``cc`` on every lane socket (now, or as
        each is opened); the reason it cannot, else None."""

    def keep(self, n: int) -> None:
        """Uses only the first ``n`` lanes from now on."""

    def register(self, client: mercury.Client) -> bool:
        """Registers every lane socket with the agent as its lane (now, or as
        each is opened); False if the agent refused one."""

    def prepare(self, buckets: Sequence[Tuple[int, torch.dtype, torch.device]]) -> None:
        """The buckets' flat sizes (elements), dtypes and devices, in bucket
        order, before the first :meth:`reduce` (collective). Raises
        TypeError for a dtype or device the backend cannot sum."""

    def reduce(self, bucket: int, flat: torch.Tensor, lane: int) -> Any:
        """Starts the sum of bucket ``bucket``'s ``flat`` over the workers on
        ``lane``; ``flat`` holds the sum once the returned work is done
        (``work.wait()``)."""

    def when_done(self, work: Any, callback: Callable[[], None]) -> None:
        """Calls ``callback`` (from any thread) once ``work`` is done."""

    def close(self) -> None:
        """Closes every lane (collective)."""


@dataclass(frozen=True)
class Backend:
    """A backend: its reducer's constructor (``n`` lanes, then its options),
    the options it takes, and their check, run before anything collective."""

    make: Callable[..., Reducer]
    options: Tuple[str, ...] = ()
    check: Callable[..., None] = lambda **_: None   # (**options): ValueError/TypeError naming the option


BACKENDS: Dict[str, Backend] = {
    "allreduce": Backend(Lanes),
    "ps": Backend(ServerLanes, ("servers", "secret", "placement", "partition_bytes", "server_timeout"), check_options),
    "nccl": Backend(NcclLanes, (), check_nccl),
}


def reducer_factory(backend: str, options: Dict[str, Any]) -> Callable[[int], Reducer]:
    """The constructor of ``backend``'s reducer for ``n`` lanes, with those
    of ``options`` that are not None, checked now: ValueError for an unknown
    backend, an option it does not take or a bad value."""
    if backend not in BACKENDS:
        raise ValueError(f"mercury.torch: backend is one of {', '.join(repr(b) for b in BACKENDS)}, not {backend!r}")
    chosen = BACKENDS[backend]
    given = {k: v for k, v in options.items() if v is not None}
    stray = sorted(set(given) - set(chosen.options))
    if stray:
        takers = [name for name, b in BACKENDS.items() if stray[0] in b.options]
        raise ValueError(f"mercury.torch: {stray[0]}= is for backend={takers[0]!r}" if takers else
                         f"mercury.torch: backend={backend!r} takes no {stray[0]}=")
    chosen.check(**given)
    return lambda n: chosen.make(n, **given)
