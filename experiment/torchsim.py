#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Simulated schedules of the PyTorch bench's modes (experiment/bench/bench-torch.sh).

What is achievable for data-parallel training of a profiled model with
Gloo's ring all-reduce, as one worker of N sees it (the workers are
symmetric: same compute, same rings, one uplink each of the same rate):

  ddp         DDP: buckets in reverse layer order (1 MiB first, then
              bucket_cap_mb), each all-reduced once its gradients exist,
              one after another on one process group; the optimizer steps
              after the last, then the next forward pass starts.
  one-lane    mercury.torch on one lane: its buckets, reduced in launch order
              on one process group; the forward pass of layer i waits only
              for layer i's bucket.
  lanes-fair  the same buckets on their lanes, every lane's ring sharing the
              link equally (TCP flows of one kind: lanes on cubic).
  priority    the same buckets on the lanes mercury.torch gives them on
              mercury (--lane-map), the link given to the most urgent lane
              with data to send, preempting (ideal priority: what full
              Mercury aims at).
  bound       a lower bound: per-layer reductions, no per-step latency, ideal
              preemptive priority by forward order.

A bucket's ring all-reduce is 2(N-1) steps; in each the worker sends 1/N of
the bucket and then waits `step_latency_s` (the round trip and Gloo's work
between steps; the bench measures it on an idle link and passes it) before
the next. Rings on the link share it as a fluid. A process group runs its
collectives one at a time, in launch order (Gloo's has two worker threads
and may run two at once). The compute is the profile's,
forward then backward; the optimizer's step is free. An iteration is the
steady state: from one step's start to the next's, as the bench times it.
Every link also carries the ACKs of what it receives (ACK_PER_PAYLOAD).
Left out: what else TCP adds (slow start, a standing queue, losses, how
fast a held flow takes the link back) and the framework's own time per
layer, so measured runs may fall on either side of every schedule but the
bound.

usage: torchsim.py PROFILE --workers N[,N...] --rate-mbit R[,R...] [--byte-divisor D]
                   [--compute-s S] [--step-latency-us U] [--lanes L] [--modes M,...]
                   [--bucket-bytes B] [--lane-map M] [--json]
PROFILE is in the simple format (`mercury-replay layers` prints it). Several
workers or rates print a table with what ideal priority gains over fair
lanes and over one lane.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from mercury.contract import NUM_RANKS  # noqa: E402
from mercury.lanemap import bucket_lanes, index_ranks, plan_buckets  # noqa: E402
from mercury.ps import PARTITION_BYTES, place  # noqa: E402

# Ethernet frame on the wire (tbf counts it) per TCP payload with timestamps.
WIRE_PER_PAYLOAD = 1514 / 1448
# A link also carries the ACKs of what comes the other way: one 66-byte frame
# per two full segments (delayed ACK), and in a ring or through servers a
# worker receives as much as it sends. Measured on the bench's uplinks (tc's
# byte and packet counters, BERT-base at 25 Mbit/s): 0.49 ACKs per data
# frame, 2.1% of the bytes. The bound leaves it out: it must hold even for a
# receiver that acknowledges less often.
ACK_PER_PAYLOAD = 66 / (2 * 1448)
DDP_FIRST_BUCKET_BYTES = 1 << 20      # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES
DDP_BUCKET_CAP_MB = 25
MERCURY_BUCKET_BYTES = 256 << 10      # mercury.torch's DEFAULT_BUCKET_BYTES
MODES = ["ddp", "one-lane", "lanes-fair", "priority", "bound"]
# How buckets go on lanes (mercury_buckets). PRIORITY_LANE_MAP is what
# mercury.torch does on lanes on mercury from its first resync on.
LANE_MAPS = ["index", "learned", "learned+bytes", "index+bytes"]
PRIORITY_LANE_MAP = "learned+bytes"


def payload_rate(rate_mbit: float, acks: bool = True) -> float:
    """TCP payload bytes/s a link of ``rate_mbit`` carries one way, net of the
    frames' headers and, with ``acks``, of the ACKs it carries the other way."""
    return rate_mbit * 1e6 / 8 / (WIRE_PER_PAYLOAD + (ACK_PER_PAYLOAD if acks else 0.0))


@dataclass
class Layer:
    fwd_s: float
    bwd_s: float
    nbytes: int      # gradient bytes as the bench sends them (after the divisor)


@dataclass
class Bucket:
    layers: List[int]   # indices into the model's layers with parameters
    nbytes: int
    lane: int           # lower: more urgent


def read_profile(path: str) -> List[Tuple[float, float, int]]:
    """(forward s, backward s, parameter bytes) per layer, forward order, from
    the simple format: ``name forward_ms backward_ms param_bytes``, '#'
    comments. Raises ValueError, naming the line, on anything else."""
    out = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            try:
                if len(fields) != 4:
                    raise ValueError("4 fields")
                out.append((float(fields[1]) / 1e3, float(fields[2]) / 1e3, int(fields[3])))
            except ValueError:
                raise ValueError(f"{path}:{lineno}: expected name forward_ms backward_ms param_bytes") from None
    if not out:
        raise ValueError(f"{path}: no layers")
    return out


def bench_layers(profile: Sequence[tuple], divisor: int, compute_s: float) -> List[Layer]:
    """The layers as torch_worker.py emulates them: times scaled to compute_s, bytes / divisor (fp32)."""
    total = sum(f + b for f, b, _ in profile)
    scale = compute_s / total if compute_s > 0 and total > 0 else 1.0
    return [Layer(f * scale, b * scale, 4 * -(-n // 4 // divisor) if n else 0) for f, b, n in profile]


@dataclass(frozen=True)
class DdpSetting:
    cap_mb: float        # bucket_cap_mb as DDP is given it
    first_bytes: int     # DDP's first bucket (torch: _DEFAULT_FIRST_BUCKET_BYTES)


def ddp_setting(mode: str, divisor: int) -> Optional[DdpSetting]:
    """What the bench mode ``ddp@N`` gives DDP on a model shrunk by
    ``divisor``: bucket_cap_mb N of the real model and DDP's 1 MiB first
    bucket, both divided like the tensors. None for any other mode;
    ValueError for a ``ddp@`` without a positive N."""
    if not mode.startswith("ddp@"):
        return None
    try:
        cap = float(mode[len("ddp@"):])
    except ValueError:
        cap = 0.0
    if not cap > 0:
        raise ValueError(f"{mode!r}: expected ddp@N with N > 0 (MB of the real model)")
    return DdpSetting(cap / divisor, max(1, DDP_FIRST_BUCKET_BYTES // divisor))


@dataclass(frozen=True)
class ByteSchedulerSetting:
    partition_bytes: int   # of the shrunk model
    credit: int            # partitions being all-reduced at once


def bytesched_setting(mode: str, divisor: int) -> Optional[ByteSchedulerSetting]:
    """What the bench mode ``bytesched@PxC`` gives the ByteScheduler-style
    baseline (experiment/bench/bytescheduler.py): partitions of P MB of the
    real model, divided like the tensors, and a credit of C partitions. None
    for any other mode; ValueError for a malformed one. (Not simulated.)"""
    if not mode.startswith("bytesched@"):
        return None
    p, _, c = mode[len("bytesched@"):].partition("x")
    try:
        part_mb, credit = float(p), int(c)
    except ValueError:
        part_mb, credit = 0.0, 0
    if not part_mb > 0 or credit < 1:
        raise ValueError(f"{mode!r}: expected bytesched@PxC, P > 0 MB of the real model, C >= 1 partitions")
    return ByteSchedulerSetting(max(4, int(part_mb * (1 << 20)) // divisor), credit)


@dataclass(frozen=True)
class LaneSetting:
    mode: str              # one-lane, lanes-cubic or full
    bucket_bytes: int      # of the shrunk model


LANE_MODES = ("one-lane", "lanes-cubic", "full")


def plain_bucket_bytes(divisor: int) -> int:
    """The bucket of the bench's plain lane modes (one-lane, lanes-cubic,
    full): mercury.torch's default bucket of the real model, divided like the
    tensors, as ddp@N divides DDP's caps. A user of the real model gets
    256 KiB buckets, one layer each for most layers of BERT-base; 256 KiB of
    the shrunk model would bundle the same model's front layers into buckets
    that start only when their first layer's gradient exists."""
    return max(1, MERCURY_BUCKET_BYTES // divisor)


def lane_setting(mode: str, divisor: int) -> Optional[LaneSetting]:
    """What the bench mode ``one-lane@K``, ``lanes-cubic@K`` or ``full@K``
    gives mercury.torch: buckets of K KiB of the real model, divided like the
    tensors (the plain modes: plain_bucket_bytes). None for any other mode;
    ValueError for a malformed one."""
    base, at, k = mode.partition("@")
    if not at or base not in LANE_MODES:
        return None
    try:
        kib = float(k)
    except ValueError:
        kib = 0.0
    if not kib > 0:
        raise ValueError(f"{mode!r}: expected {base}@K with K > 0 (KiB of the real model per bucket)")
    return LaneSetting(base, max(1, int(kib * 1024) // divisor))


def ddp_buckets(layers: Sequence[Layer], cap_mb: float = DDP_BUCKET_CAP_MB,
                first_bytes: int = DDP_FIRST_BUCKET_BYTES) -> List[Bucket]:
    """DDP's buckets: parameters in reverse order, the first bucket up to
    first_bytes, the rest up to cap_mb (a bucket closes once it reaches its cap)."""
    out: List[Bucket] = []
    cur: List[int] = []
    size = 0
    for i in reversed([i for i, l in enumerate(layers) if l.nbytes]):
        cur.append(i)
        size += layers[i].nbytes
        if size >= (first_bytes if not out else cap_mb * (1 << 20)):
            out.append(Bucket(cur, size, 0))
            cur, size = [], 0
    if cur:
        out.append(Bucket(cur, size, 0))
    return out


def learned_ranks(layers: Sequence[Layer]) -> List[int]:
    """mercuryd's ranks once it has the trainer's timings
    (agent/src/learner/priorities.cpp): the forward pass of the layers with
    parameters (the modules mercury.torch times) cut into NUM_RANKS equal
    slices of time, each layer ranked by the slice it starts in."""
    owners = [l for l in layers if l.nbytes]
    total = sum(l.fwd_s for l in owners)
    out, start = [], 0.0
    for l in owners:
        out.append(min(NUM_RANKS - 1, int(start * NUM_RANKS / total)) if total > 0 else 0)
        start += l.fwd_s
    return out


def mercury_buckets(layers: Sequence[Layer], lanes: int, bucket_bytes: int = MERCURY_BUCKET_BYTES,
                    lane_map: str = "index") -> List[Bucket]:
    """mercury.torch's buckets (optimizer.py, _finalize_layers): neighbouring
    layers until bucket_bytes, never across lanes of the ranks by index; then
    each bucket on the most urgent lane ``lane_map`` gives its layers
    (LANE_MAPS): "index" (lanes without priorities), "learned+bytes" (lanes
    on mercury from mercury.torch's first resync on: mercuryd's ranks by
    forward time, a bucket moved to a more urgent lane by its bytes; the
    bench resyncs at the end of its warm-up), "learned" (the same before
    bytes counted) or "index+bytes" (the ranks by index and bytes: what
    mercury.torch does before its first resync)."""
    if lane_map not in LANE_MAPS:
        raise ValueError(f"unknown lane map {lane_map!r}; known: {LANE_MAPS}")
    owners = [i for i, l in enumerate(layers) if l.nbytes]
    ranks_by_index = index_ranks(len(owners))
    plan = plan_buckets([layers[i].nbytes for i in owners], lanes, bucket_bytes)
    members = [ks for ks, _ in plan]
    out = [Bucket([owners[k] for k in ks], sum(layers[owners[k]].nbytes for k in ks), lane) for ks, lane in plan]
    if lane_map != "index":
        ranks = ranks_by_index if lane_map == "index+bytes" else learned_ranks(layers)
        chosen = bucket_lanes(ranks, [layers[i].nbytes for i in owners], members, lanes,
                              prioritized=lane_map.endswith("+bytes"))
        for b, lane in zip(out, chosen):
            b.lane = lane
    return out


@dataclass(eq=False)
class _Ring:
    bucket: int
    lane: int
    order: int          # launch order: ties within a lane
    step_bytes: float
    steps_left: int
    left: float = 0.0   # bytes left of the current step's send
    ready_at: Optional[float] = None   # waiting out a step's latency until then


@dataclass
class SimResult:
    iteration_s: float
    iterations: List[float] = field(default_factory=list)
    forward_wait_s: float = 0.0   # per iteration, steady state


FAR_FLOOR_PACKETS = 1   # MERCURY_FAR_FLOOR
PREEMPT_SHARE = 2       # MERCURY_PREEMPT_SHARE


@dataclass(frozen=True)
class HeldFloor:
    """Priority as a cwnd floor gives it, not ideally: each held lane with data
    keeps ``packets`` in flight beside the top lane's window (``rank0_window``
    packets if the top lane is lane 0, else ``other_window``), and the link is
    shared in proportion to packets in flight (bench-torch's BERT-base trace:
    a 2-packet floor, rank 0 at 50-85 packets, rank 1 at 3-5 held down by its
    delay threshold).

    ``other_window`` 0: as the datapath holds today (include/mercury/cc_core.h):
    only the held lane next in line keeps ``packets``, the others
    FAR_FLOOR_PACKETS (mercury_held_floor), and a top lane other than lane 0
    keeps PREEMPT_SHARE times the held lanes' floors (mercury_preempt_window),
    so two thirds of what is in flight."""
    packets: int
    rank0_window: int
    other_window: int

    def windows(self, top: int, held_lanes: Sequence[int]) -> Tuple[float, Dict[int, float]]:
        """The top lane's window and each held lane's, in packets."""
        if self.other_window:
            floors = {h: float(self.packets) for h in held_lanes}
            other = float(self.other_window)
        else:
            nearest = min(held_lanes)
            floors = {h: float(self.packets if h == nearest else FAR_FLOOR_PACKETS) for h in held_lanes}
            other = PREEMPT_SHARE * sum(floors.values())
        return (self.rank0_window if top == 0 else other), floors


def _iterate(layers: Sequence[Layer], buckets: Sequence[Bucket], *, clock: Callable[[], float],
             compute: Callable[[float], None], wait_for: Callable[[int], None], launch: Callable[[int], None],
             starts: List[float], warmup: int, iterations: int, synchronous: bool = False) -> List[float]:
    """One worker's steps: the forward pass (layer i waits for its bucket,
    or, ``synchronous``, every bucket before the step), then backward, each
    bucket launched once its last layer's gradient exists. ``starts`` gets
    every step's start; returns the measured iterations' lengths."""
    bucket_of = {i: b for b, bk in enumerate(buckets) for i in bk.layers}
    for k in range(warmup + iterations + 1):
        if synchronous:
            for b in range(len(buckets)):
                wait_for(b)
        starts.append(clock())   # a step starts: its forward pass, which may wait
        if k == warmup + iterations:
            break                # the measured iterations end where this step starts
        for i in range(len(layers)):
            if not synchronous and i in bucket_of:
                wait_for(bucket_of[i])
            compute(layers[i].fwd_s)
        ready = {b: len(bk.layers) for b, bk in enumerate(buckets)}
        for i in reversed(range(len(layers))):
            compute(layers[i].bwd_s)
            if i in bucket_of:
                b = bucket_of[i]
                ready[b] -= 1
                if ready[b] == 0:
                    launch(b)
    return [b - a for a, b in zip(starts, starts[1:])][warmup:]


def simulate(layers: Sequence[Layer], buckets: Sequence[Bucket], *, workers: int, rate_mbit: float,
             step_latency_s: float, sharing: str, synchronous: bool, held_floor: Optional[HeldFloor] = None,
             acks: bool = True, iterations: int = 8,
             warmup: int = 3) -> SimResult:
    """sharing: "fair" or "priority" between lanes; synchronous: DDP's step
    after every reduction; acks: the link carries the ACKs of what the worker
    receives (payload_rate)."""
    rate = payload_rate(rate_mbit, acks)
    steps = 2 * (workers - 1)
    t = 0.0
    done: Dict[int, float] = {b: 0.0 for b in range(len(buckets))}   # last reduction's end, per bucket
    pending: Dict[int, List[_Ring]] = {}     # lane -> rings launched, not finished, launch order
    launched = 0
    starts: List[float] = []
    waits = 0.0

    def active() -> List[_Ring]:
        return [lane_rings[0] for lane_rings in pending.values() if lane_rings]

    def advance(until: float) -> None:
        """Run the link from t to until (no ring event in between is assumed; see next_event)."""
        nonlocal t
        while t < until - 1e-12:
            nxt = max(min(until, next_event()), t + 1e-9)
            dt = nxt - t
            for r, share in shares().items():
                r.left -= share * rate * dt
            t = nxt
            settle()

    def shares() -> Dict[_Ring, float]:
        sending = [r for r in active() if r.ready_at is None and r.left > 1e-3]
        if not sending:
            return {}
        if sharing == "priority":
            top = min(r.lane for r in sending)
            held = [r for r in sending if r.lane != top]
            sending = [r for r in sending if r.lane == top]
            if held_floor and held:
                window, floors = held_floor.windows(top, [r.lane for r in held])
                total = window + sum(floors[r.lane] for r in held)
                out = {r: floors[r.lane] / total for r in held}
                out.update({r: window / total / len(sending) for r in sending})
                return out
        return {r: 1.0 / len(sending) for r in sending}

    def next_event() -> float:
        ev = float("inf")
        for r, share in shares().items():
            ev = min(ev, t + r.left / (share * rate))
        for r in active():
            if r.ready_at is not None:
                ev = min(ev, r.ready_at)
        return ev

    def settle() -> None:
        for lane, rings in pending.items():
            while rings:
                r = rings[0]
                if r.ready_at is None and r.left <= 1e-3:   # bytes: float dust
                    r.ready_at = t + step_latency_s
                if r.ready_at is not None and r.ready_at <= t + 1e-12:
                    r.ready_at = None
                    r.steps_left -= 1
                    if r.steps_left == 0:
                        done[r.bucket] = t
                        rings.pop(0)
                        continue
                    r.left = r.step_bytes
                break

    def launch(b: int) -> None:
        nonlocal launched
        bk = buckets[b]
        done[b] = float("inf")
        pending.setdefault(bk.lane, []).append(
            _Ring(b, bk.lane, launched, bk.nbytes / workers, steps, bk.nbytes / workers))
        launched += 1
        settle()

    def wait_for(b: int) -> None:
        nonlocal waits
        t0 = t
        while done[b] == float("inf"):
            ev = next_event()
            if ev == float("inf"):
                raise RuntimeError("simulation stalled")
            advance(ev)
        if len(starts) > warmup:
            waits += t - t0

    its = _iterate(layers, buckets, clock=lambda: t, compute=lambda s: advance(t + s), wait_for=wait_for,
                   launch=launch, starts=starts, warmup=warmup, iterations=iterations, synchronous=synchronous)
    return SimResult(sum(its) / len(its), its, waits / max(1, iterations))


def simulate_mode(mode: str, layers: Sequence[Layer], *, workers: int, rate_mbit: float,
                  step_latency_s: float, lanes: int = 8, bucket_cap_mb: float = DDP_BUCKET_CAP_MB,
                  ddp_first_bytes: int = DDP_FIRST_BUCKET_BYTES,
                  bucket_bytes: int = MERCURY_BUCKET_BYTES, held_floor: Optional[HeldFloor] = None,
                  lane_map: str = PRIORITY_LANE_MAP) -> SimResult:
    """``held_floor``: the priority mode as a cwnd floor gives it (HeldFloor), not
    ideal; ``lane_map``: the priority mode's (mercury_buckets)."""
    kw = dict(workers=workers, rate_mbit=rate_mbit)
    if mode == "ddp":
        return simulate(layers, ddp_buckets(layers, bucket_cap_mb, ddp_first_bytes), step_latency_s=step_latency_s,
                        sharing="fair", synchronous=True, **kw)
    if mode == "one-lane":
        return simulate(layers, mercury_buckets(layers, 1, bucket_bytes), step_latency_s=step_latency_s,
                        sharing="fair", synchronous=False, **kw)
    if mode in ("lanes-fair", "priority"):
        return simulate(layers, mercury_buckets(layers, lanes, bucket_bytes,
                                                lane_map=lane_map if mode == "priority" else "index"),
                        step_latency_s=step_latency_s,
                        sharing="fair" if mode == "lanes-fair" else "priority", synchronous=False,
                        held_floor=held_floor if mode == "priority" else None, **kw)
    if mode == "bound":
        owners = [i for i, l in enumerate(layers) if l.nbytes]
        per_layer = [Bucket([i], layers[i].nbytes, k) for k, i in enumerate(owners)]
        return simulate(layers, per_layer, step_latency_s=0.0, sharing="priority", synchronous=False, acks=False,
                        **kw)
    raise ValueError(f"unknown mode {mode!r}; known: {MODES}")


# -- backend="ps": mercury-ps servers on hosts of their own --------------------

PS_MODES = ["ps-vanilla", "ps-cubic", "ps-full"]
PS_PARTITION_BYTES = PARTITION_BYTES   # mercury.torch's default (BytePS's)
PS_CHUNK_BYTES = 65536          # mercury-ps --chunk-bytes


def ps_parts(buckets: Sequence[Bucket], servers: int, partition_bytes: int) -> List[List[Tuple[int, int]]]:
    """Each bucket's partitions as (server, bytes), as mercury.torch places
    them (mercury.ps.place, "balanced": cut at partition_bytes, each to the
    least loaded server)."""
    placed = place([bk.nbytes // 4 for bk in buckets], servers, "balanced", partition_bytes=partition_bytes)
    return [[(p.server, 4 * (p.end - p.start)) for p in parts] for parts in placed]


@dataclass(eq=False)
class _Transfer:
    """One partition's push (worker to server) or pull (server to worker) on
    one connection, as worker 0 sees it (the workers are symmetric)."""
    bucket: int
    server: int
    size: float
    lane: int
    push: Optional["_Transfer"] = None   # a pull: the push it answers
    done: float = 0.0

    def available(self, chunk: float, whole: bool) -> float:
        if self.push is None:
            return self.size
        if self.push.done >= self.size - 1e-6:
            return self.size
        return 0.0 if whole else (self.push.done // chunk) * chunk


def simulate_ps(layers: Sequence[Layer], buckets: Sequence[Bucket], *, workers: int, servers: int,
                rate_mbit: float, sharing: str, aggregation: str = "chunk",
                partition_bytes: int = PS_PARTITION_BYTES, chunk_bytes: int = PS_CHUNK_BYTES,
                iterations: int = 8, warmup: int = 3) -> SimResult:
    """mercury.torch with backend="ps" and ``servers`` server hosts apart from
    the workers, every link at ``rate_mbit``. Each bucket's partitions are
    pushed when its gradients exist, on the connection of its lane to its
    server (FIFO per connection); a server answers a chunk (aggregation
    "chunk") or the whole partition ("tensor") once every worker pushed it,
    on the same connection. Links are shared max-min fairly between
    connections ("fair") or by strict priority of lanes ("priority"); every
    worker sends alike, so a server's link carries each of its partitions
    ``workers`` times. The forward pass of layer i waits for its bucket's
    pulls. Each link also carries the ACKs of the other way's data. Left
    out: the rest of TCP, the server's and the framework's own time."""
    rate = payload_rate(rate_mbit)
    parts = ps_parts(buckets, servers, partition_bytes)
    whole = aggregation == "tensor"
    # Links: worker 0's up and down, each server's down (pushes in) and up (pulls out).
    queues: Dict[Tuple[str, int, int], List[_Transfer]] = {}   # (push|pull, server, lane) -> FIFO
    left: Dict[int, int] = {}      # bucket -> its pulls not finished
    done: Dict[int, float] = {b: 0.0 for b in range(len(buckets))}
    t = 0.0
    starts: List[float] = []
    waits = 0.0

    def heads() -> List[_Transfer]:
        out = []
        for q in queues.values():
            if q and q[0].available(chunk_bytes, whole) > q[0].done + 1e-6:
                out.append(q[0])
        return out

    def links(x: _Transfer) -> List[Tuple[str, float]]:
        if x.push is None:
            return [("w-up", 1.0), (f"s{x.server}-down", float(workers))]
        return [(f"s{x.server}-up", float(workers)), ("w-down", 1.0)]

    def rates() -> Dict[_Transfer, float]:
        active = heads()
        out: Dict[_Transfer, float] = {}
        cap: Dict[str, float] = {}
        classes = sorted({x.lane for x in active}) if sharing == "priority" else [None]
        for lane in classes:
            free = [x for x in active if lane is None or x.lane == lane]
            while free:   # progressive filling: the tightest link fixes its flows' rate
                use: Dict[str, float] = {}
                for x in free:
                    for link, w in links(x):
                        use[link] = use.get(link, 0.0) + w
                link = min(use, key=lambda k: cap.get(k, rate) / use[k])
                r = max(0.0, cap.get(link, rate) / use[link])
                fixed = [x for x in free if any(k == link for k, _ in links(x))]
                for x in fixed:
                    out[x] = r
                    for k, w in links(x):
                        cap[k] = cap.get(k, rate) - w * r
                free = [x for x in free if x not in fixed]
        return out

    def step(until: float, stop: Callable[[], bool] = lambda: False) -> None:
        nonlocal t
        while t < until - 1e-12 and not stop():
            rs = rates()
            nxt = until
            for x, r in rs.items():
                if r <= 0:
                    continue
                target = x.available(chunk_bytes, whole)
                if x.push is None and not whole:   # a push crossing a chunk boundary frees a pull
                    target = min(target, (x.done // chunk_bytes + 1) * chunk_bytes)
                nxt = min(nxt, t + (target - x.done) / r)
            nxt = max(nxt, t + 1e-9)
            for x, r in rs.items():
                x.done = min(x.size, x.done + r * (nxt - t))
                if x.size - x.done < 1e-6:
                    x.done = x.size
            t = nxt
            for key, q in queues.items():
                while q and q[0].done >= q[0].size:
                    x = q.pop(0)
                    if x.push is not None:
                        left[x.bucket] -= 1
                        if left[x.bucket] == 0:
                            done[x.bucket] = t

    def launch(b: int) -> None:
        done[b] = float("inf")
        left[b] = len(parts[b])
        lane = buckets[b].lane
        for server, n in parts[b]:
            push = _Transfer(b, server, float(n), lane)
            queues.setdefault(("push", server, lane), []).append(push)
            queues.setdefault(("pull", server, lane), []).append(_Transfer(b, server, float(n), lane, push))

    def wait_for(b: int) -> None:
        nonlocal waits
        t0 = t
        if done[b] == float("inf") and not heads():
            raise RuntimeError("ps simulation stalled")
        step(float("inf"), lambda: done[b] != float("inf"))
        if len(starts) > warmup:
            waits += t - t0

    its = _iterate(layers, buckets, clock=lambda: t, compute=lambda s: step(t + s), wait_for=wait_for,
                   launch=launch, starts=starts, warmup=warmup, iterations=iterations)
    return SimResult(sum(its) / len(its), its, waits / max(1, iterations))


def simulate_ps_mode(mode: str, layers: Sequence[Layer], *, workers: int, servers: int, rate_mbit: float,
                     lanes: int = 8, partition_bytes: int = PS_PARTITION_BYTES,
                     bucket_bytes: int = MERCURY_BUCKET_BYTES) -> SimResult:
    """The bench's ps modes (torch_worker.py) with servers apart."""
    if mode not in PS_MODES:
        raise ValueError(f"unknown ps mode {mode!r}; known: {PS_MODES}")
    n = 1 if mode == "ps-vanilla" else lanes
    return simulate_ps(layers, mercury_buckets(layers, n, bucket_bytes,
                                               lane_map=PRIORITY_LANE_MAP if mode == "ps-full" else "index"),
                       workers=workers, servers=servers,
                       rate_mbit=rate_mbit, sharing="priority" if mode == "ps-full" else "fair",
                       aggregation="tensor" if mode == "ps-vanilla" else "chunk", partition_bytes=partition_bytes)


def numbers(text: str, kind: type) -> List:
    """A comma-separated list of numbers."""
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, not {text!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile")
    ap.add_argument("--workers", type=lambda t: numbers(t, int), default=[4], help="N, or a list N1,N2,...")
    ap.add_argument("--rate-mbit", type=lambda t: numbers(t, float), required=True, help="R, or a list")
    ap.add_argument("--byte-divisor", type=int, default=1)
    ap.add_argument("--compute-s", type=float, default=0.0, help="iteration compute, s (0: the profile's)")
    ap.add_argument("--step-latency-us", type=float, default=300.0)
    ap.add_argument("--lanes", type=int, default=8)
    ap.add_argument("--bucket-cap-mb", type=float, default=DDP_BUCKET_CAP_MB)
    ap.add_argument("--bucket-bytes", type=int, default=MERCURY_BUCKET_BYTES,
                    help="mercury.torch's bucket, bytes of the shrunk model (the bench's plain modes: "
                         "262144 // the byte divisor)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", action="store_true", help="one JSON line per workers and rate")
    ap.add_argument("--lane-map", choices=LANE_MAPS, default=PRIORITY_LANE_MAP,
                    help="the priority mode's buckets on lanes: by the ranks by index or by mercuryd's learned "
                         "ranks, each alone or made more urgent by bytes "
                         f"(default {PRIORITY_LANE_MAP}: mercury.torch's)")
    ap.add_argument("--held-floor", metavar="F,W0,W",
                    help="priority as a cwnd floor gives it: held lanes keep F packets in flight beside the top "
                         "lane's W0 (lane 0) or W (any other) packets; e.g. 2,60,4. W 0: as the datapath "
                         f"does, F for the held lane next in line, {FAR_FLOOR_PACKETS} for the rest, and "
                         f"{PREEMPT_SHARE} times their floors for a top lane other than lane 0")
    args = ap.parse_args()
    modes = args.modes.split(",")
    if (min(args.workers, default=0) < 2 or min(args.rate_mbit, default=0) <= 0 or args.byte_divisor < 1
            or args.bucket_bytes < 1):
        ap.error("need --workers >= 2, --rate-mbit > 0, --byte-divisor >= 1, --bucket-bytes >= 1")
    if any(m not in MODES for m in modes):
        ap.error(f"--modes: known modes are {','.join(MODES)}")
    held_floor = None
    if args.held_floor:
        try:
            f, w0, w = (int(v) for v in args.held_floor.split(","))
        except ValueError:
            ap.error("--held-floor takes F,W0,W (packets)")
        if f < 1 or w0 < 1 or w < 0:
            ap.error("--held-floor: F and W0 >= 1 packet, W >= 0 (0: the datapath's preempt window)")
        held_floor = HeldFloor(f, w0, w)
    layers = bench_layers(read_profile(args.profile), args.byte_divisor, args.compute_s)
    table = len(args.workers) > 1 or len(args.rate_mbit) > 1
    if table and not args.json:
        print("workers  Mbit/s " + " ".join(f"{m:>10s}" for m in modes)
              + ("   priority gain vs fair / vs one lane" if {"priority", "lanes-fair", "one-lane"} <= set(modes)
                 else ""))
    for workers in args.workers:
        for rate in args.rate_mbit:
            out = {}
            for mode in modes:
                r = simulate_mode(mode, layers, workers=workers, rate_mbit=rate,
                                  step_latency_s=args.step_latency_us / 1e6, lanes=args.lanes,
                                  bucket_cap_mb=args.bucket_cap_mb, bucket_bytes=args.bucket_bytes,
                                  held_floor=held_floor, lane_map=args.lane_map)
                out[mode] = {"iteration_s": r.iteration_s, "forward_wait_s": r.forward_wait_s}
            if args.json:
                print(json.dumps({"workers": workers, "rate_mbit": rate, "modes": out}))
            elif table:
                gain = ""
                if {"priority", "lanes-fair", "one-lane"} <= set(out):
                    p = out["priority"]["iteration_s"]
                    gain = (f"   {out['lanes-fair']['iteration_s'] / p:.3f}x"
                            f" / {out['one-lane']['iteration_s'] / p:.3f}x")
                print(f"{workers:7d} {rate:7g} " + " ".join(f"{out[m]['iteration_s']:10.4f}" for m in modes) + gain)
            else:
                for mode, r in out.items():
                    print(f"{mode:11s} {r['iteration_s']:.3f} s  (forward waits {r['forward_wait_s']:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
