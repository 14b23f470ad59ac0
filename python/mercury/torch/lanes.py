# SPDX-License-Identifier: GPL-2.0
"""Priority lanes: process groups over the same ranks, each with its own
TCP connections, which the kernel can then tell apart."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
import torch.distributed as dist

import mercury
from mercury.contract import MAX_LANES, lane_rank, rank_lane
from mercury.torch.sockets import find_tcp_sockets, pin_congestion_control

__all__ = ["Lane", "Lanes", "lane_rank", "rank_lane", "all_true", "collective_device", "check_lane_count"]


_SUM = dist.AllreduceOptions()
_SUM.reduceOp = dist.ReduceOp.SUM


def collective_device() -> torch.device:
    """Where the default group's collectives take their tensors: the
    current GPU if that group is NCCL's alone, else host memory."""
    backend = str(dist.get_backend())
    if "nccl" in backend and "gloo" not in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def check_lane_count(n: int) -> None:
    """TypeError or ValueError unless ``n`` is a lane count, 1..MAX_LANES
    (every reducer that opens lanes checks it)."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"lanes must be an int, not {type(n).__name__}")
    if not 1 <= n <= MAX_LANES:
        raise ValueError(f"lanes must be 1..{MAX_LANES}, not {n}")


def all_true(flag: bool) -> bool:
    """True on every worker if ``flag`` is true on every worker (collective,
    on the default group)."""
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return t.item() == 1


@dataclass
class Lane:
    group: dist.ProcessGroup
    sockets: Dict[int, int] = field(default_factory=dict)  # fd -> cookie


class Lanes:
    """``n`` process groups over all ranks, each with its own connections:
    the :class:`mercury.torch.reducer.Reducer` of ``backend="allreduce"``.

    Collective: every rank must construct it at the same point. Connections
    are found by comparing the process's sockets before and after each group
    is created and used once, so no other thread should open TCP connections
    meanwhile.
    """

    def __init__(self, n: int) -> None:
        check_lane_count(n)
        self.lanes: List[Lane] = []
        self.previous_cc: Set[str] = set()
        for _ in range(n):
            before = find_tcp_sockets()
            group = dist.new_group()
            dist.barrier(group=group)  # warm-up: the group's connections exist now
            after = find_tcp_sockets()
            self.lanes.append(Lane(group, {fd: c for fd, c in after.items() if fd not in before}))

    def pin(self, cc: str) -> Optional[str]:
        """Sets congestion control ``cc`` on every lane socket; the error, if
        any. ``self.previous_cc``: what the sockets had before."""
        try:
            self.previous_cc = pin_congestion_control([fd for lane in self.lanes for fd in lane.sockets], cc)
        except OSError as e:
            return f"cannot set congestion control {cc!r} on the lanes' sockets: {e}"
        return None

    def keep(self, n: int) -> None:
        """Uses only the first ``n`` lanes from now on."""
        for lane in self.lanes[n:]:
            dist.destroy_process_group(lane.group)
        del self.lanes[n:]

    def close(self) -> None:
        """Destroys the lanes' process groups, closing their connections (collective)."""
        self.keep(0)

    def __len__(self) -> int:
        return len(self.lanes)

    def group(self, lane: int) -> dist.ProcessGroup:
        return self.lanes[lane].group

    def prepare(self, buckets: Sequence[Tuple[int, torch.dtype, torch.device]]) -> None:
        """Nothing to do: the groups' connections exist already, and Gloo
        sums any dtype, in host or GPU memory."""

    def reduce(self, bucket: int, flat: torch.Tensor, lane: int) -> Any:
        """Starts the sum of ``flat`` over the workers, in place, on ``lane``
        (``bucket``: the caller's index for it, the same on every worker).
        The group's own call, not ``dist.all_reduce``: its checks (this rank
        is in the group, the tensor is one dense tensor) hold for every
        bucket by construction (complex parameters are refused), and cost a
        few µs a bucket on backward's path."""
        return self.lanes[lane].group.allreduce([flat], _SUM)

    @staticmethod
    def when_done(work: Any, callback: Callable[[], None]) -> None:
        work.get_future().then(lambda _f: callback())

    def register(self, client: mercury.Client) -> bool:
        """Registers every lane's sockets with the agent (fds passed)."""
        ok = True
        for i, lane in enumerate(self.lanes):
            for fd in lane.sockets:
                ok = client.register_lane(i, len(self.lanes), fd) and ok
        return ok
