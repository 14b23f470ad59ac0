# SPDX-License-Identifier: GPL-2.0
"""``backend="ps"``: each bucket's reduction through mercury-ps servers.

A bucket's flat gradient is cut into partitions placed over the servers;
each partition is a key of its server. The worker pushes a bucket's keys as
soon as its gradients are ready, on the connection of the bucket's lane;
each server sums every chunk once all workers pushed it and sends the sum
back at once (immediate aggregation), so the pull overlaps the push. The sum
is what ``all_reduce`` gives, so everything above (guards, deferred steps,
DDP's semantics) is the all-reduce path's.

Placement, as the PS frameworks do it:

* ``balanced`` (BytePS): every bucket cut into partitions of at most
  4,096,000 bytes, each to the server with the fewest bytes so far;
* ``mxnet`` (MXNet's kvstore): a bucket above 1M elements split evenly over
  all servers, a smaller one whole, round robin.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
import torch.distributed as dist

import mercury
from mercury.contract import SO_COOKIE
from mercury.torch._job import default_job
from mercury.ps import (MXNET_SPLIT_ELEMS, PARTITION_BYTES, PLACEMENTS, Connection, Part, PsError, PushPull,
                        Work, new_id, parse_address, place, read_secret)

__all__ = ["PLACEMENTS", "PARTITION_BYTES", "MXNET_SPLIT_ELEMS", "Part", "place", "ServerLanes", "check_options"]

@dataclass
class _ServerLane:
    sockets: Dict[int, int] = field(default_factory=dict)  # fd -> cookie, one per server


def check_options(*, servers: Sequence[str] = (), secret: Optional[str] = None, placement: str = "balanced",
                  partition_bytes: int = PARTITION_BYTES, server_timeout: float = 120.0) -> None:
    """ValueError or TypeError naming the first bad option of ``backend="ps"``."""
    if not servers:
        raise ValueError("mercury.torch: backend='ps' needs servers=['HOST:PORT', ...]")
    for address in servers:
        try:
            parse_address(address)
        except ValueError as e:
            raise ValueError(f"mercury.torch: {e}") from None
    if placement not in PLACEMENTS:
        raise ValueError(f"mercury.torch: placement is one of {', '.join(PLACEMENTS)}, not {placement!r}")
    if not isinstance(partition_bytes, int) or isinstance(partition_bytes, bool):
        raise TypeError(f"mercury.torch: partition_bytes must be an int, not {type(partition_bytes).__name__}")
    if partition_bytes < 4:
        raise ValueError(f"mercury.torch: partition_bytes must be 4.., not {partition_bytes}")
    if server_timeout <= 0:
        raise ValueError(f"mercury.torch: server_timeout must be > 0, not {server_timeout}")


class ServerLanes:
    """The lanes of ``backend="ps"``, a :class:`mercury.torch.reducer.Reducer`:
    per lane, one connection to every server, opened only once the buckets
    are known (:meth:`prepare`, after the first forward pass); until then
    :meth:`pin` and :meth:`register` note what to do with each."""

    def __init__(self, n: int, servers: Sequence[str], *, secret: Optional[str] = None, placement: str = "balanced",
                 partition_bytes: int = PARTITION_BYTES, server_timeout: float = 120.0) -> None:
        check_options(servers=servers, secret=secret, placement=placement, partition_bytes=partition_bytes,
                      server_timeout=server_timeout)
        self.servers = list(servers)
        self.n = n
        self.secret, self.placement, self.partition_bytes = secret, placement, partition_bytes
        self.timeout = server_timeout
        self.cc: Optional[str] = None
        self.previous_cc: Set[str] = set()   # set before the sockets exist: they never ran another CC
        self.lanes: List[_ServerLane] = []
        self._client: Optional[mercury.Client] = None
        self._engine: Optional[PushPull] = None
        self._parts: List[List[Part]] = []

    def __len__(self) -> int:
        return self.n

    def pin(self, cc: str) -> Optional[str]:
        self.cc = cc
        return None

    def keep(self, n: int) -> None:
        self.n = n

    def register(self, client: mercury.Client) -> bool:
        self._client = client
        return True

    def prepare(self, buckets: Sequence[Tuple[int, torch.dtype, torch.device]]) -> None:
        """Places the buckets and opens every connection (collective): a
        key per partition of a bucket, on the servers of the job
        ``$MERCURY_JOB``. TypeError for a bucket not of float32 in host
        memory (what the servers sum); PsError with the server's reason if
        one refuses."""
        for _, dtype, device in buckets:
            if dtype != torch.float32:
                raise TypeError(f"mercury.torch: backend='ps' sums float32 gradients; a bucket holds "
                                f"{dtype} parameters (use backend='allreduce')")
            if device.type != "cpu":
                raise TypeError(f"mercury.torch: backend='ps' sums gradients in host memory; a bucket's parameters "
                                f"are on {device} (use backend='nccl' or 'allreduce')")
        self._connect([elems for elems, _, _ in buckets], job=default_job(), worker=dist.get_rank(),
                      workers=dist.get_world_size())

    def _connect(self, sizes: Sequence[int], *, job: str, worker: int, workers: int) -> None:
        key_secret = read_secret(self.secret)
        # The run's id, rank 0's, so the servers take no worker of another
        # run (an old run's, a second process claiming a rank); collective,
        # as prepare() is.
        run = [new_id() if dist.get_rank() == 0 else 0]
        dist.broadcast_object_list(run, src=0)
        instance = new_id()
        self._parts = place(sizes, len(self.servers), self.placement, partition_bytes=self.partition_bytes)
        keys: List[List[int]] = [[] for _ in self.servers]
        for parts in self._parts:
            for p in parts:
                keys[p.server].append(p.end - p.start)
        connections: Dict[Tuple[int, int], Connection] = {}
        try:
            for lane in range(self.n):
                self.lanes.append(_ServerLane())
                for s, address in enumerate(self.servers):
                    if not keys[s]:
                        continue   # a server with nothing placed on it
                    c = Connection(address, job=job, secret=key_secret, worker=worker, workers=workers, lane=lane,
                                   lanes=self.n, key_elems=keys[s], cc=self.cc, run=run[0], instance=instance,
                                   timeout=self.timeout)
                    connections[(s, lane)] = c
                    cookie = int.from_bytes(c.sock.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8), "little")
                    self.lanes[lane].sockets[c.fileno()] = cookie
                    if self._client is not None and self.n > 1:
                        self._client.register_lane(lane, self.n, c.sock)
        except BaseException:
            for c in connections.values():
                c.close()
            raise
        self._engine = PushPull(connections, self.timeout)

    def reduce(self, bucket: int, flat: torch.Tensor, lane: int) -> Work:
        """Pushes bucket ``bucket``'s ``flat`` (float32, contiguous) on
        ``lane``; its sum over the workers replaces it when the Work is done."""
        if self._engine is None:
            raise PsError("mercury.torch: the parameter servers are not connected")
        mem = memoryview(flat.numpy())
        return self._engine.push([(p.server, p.key, mem[p.start:p.end]) for p in self._parts[bucket]], lane)

    @staticmethod
    def when_done(work: Work, callback: Callable[[], None]) -> None:
        work.then(callback)

    def close(self) -> None:
        """Says bye to the servers (collective: every worker's bye is in
        before any worker can start the servers' next job)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self.lanes = []
        dist.barrier()


