# SPDX-License-Identifier: GPL-2.0
"""Which bucket and which lane each layer's gradients take: pure
arithmetic, shared by mercury.torch and the bench's simulator
(experiment/torchsim.py), so the simulator schedules the buckets and lanes
the product makes."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from mercury.contract import NUM_RANKS, rank_lane

__all__ = ["index_ranks", "plan_buckets", "priority_lanes", "bucket_lanes"]


def index_ranks(layers: int) -> List[int]:
    """Ranks spread over ``layers`` layers by index, as mercuryd spreads them
    before it has learned any timing."""
    n = max(1, layers)
    return [i * NUM_RANKS // n for i in range(layers)]


def plan_buckets(nbytes: Sequence[int], lanes: int, bucket_bytes: int,
                 kinds: Optional[Sequence[object]] = None) -> List[Tuple[List[int], int]]:
    """mercury.torch's buckets over layers of ``nbytes`` (forward order):
    neighbouring layers until a bucket holds ``bucket_bytes``, never across
    two lanes of the ranks by index (mercuryd's until it has timings: the
    lane map later moves whole buckets) nor across two ``kinds`` (dtypes:
    a bucket is one flat tensor). Each bucket as (its layers, its lane by
    index)."""
    by_index = [rank_lane(r, lanes) for r in index_ranks(len(nbytes))]
    out: List[Tuple[List[int], int]] = []
    size = 0
    for layer, n in enumerate(nbytes):
        if (not out or size >= bucket_bytes or by_index[layer] != out[-1][1]
                or (kinds is not None and kinds[layer] != kinds[out[-1][0][-1]])):
            out.append(([], by_index[layer]))
            size = 0
        out[-1][0].append(layer)
        size += n
    return out


def priority_lanes(ranks: Sequence[int], nbytes: Sequence[int], lanes: int) -> List[int]:
    """Each bucket's lane (buckets in forward order, each with the rank of its
    most urgent layer and its bytes) when the lanes are prioritized: the lane
    of its rank, or a more urgent one if its bytes say so.

    A lane is one process group, so its reductions run one after another in
    launch order, and the backward pass launches a lane's later buckets
    first: a bucket waits for every later bucket of its lane. Ranks slice
    the forward pass by time (mercuryd) or by index, so the last rank can
    hold a model's big tail (VGG-16: the last convolutions behind the
    classifier's 411 MB fc6). Here a bucket also gets the rank of the slice
    of the model's bytes its middle falls in, and the more urgent of the
    two. Both keep forward order, so the lanes do too; a big bucket spans
    several slices of bytes, so the small buckets before it fall into
    earlier ones and move to more urgent lanes rather than queue behind it
    (doc/experiment.md, "The layer-to-lane map").
    """
    total = sum(nbytes)
    out = []
    below = 0
    for rank, size in zip(ranks, nbytes):
        by_bytes = min(NUM_RANKS - 1, (2 * below + size) * NUM_RANKS // (2 * total)) if total else rank
        out.append(rank_lane(min(rank, by_bytes), lanes))
        below += size
    return out


def bucket_lanes(ranks: Sequence[int], nbytes: Sequence[int], buckets: Sequence[Sequence[int]], lanes: int,
                 prioritized: bool) -> List[int]:
    """Each bucket's lane, from its layers' ranks and bytes (``buckets``: the
    layer indices of each, in forward order): the lane of its most urgent
    rank; ``prioritized``, by priority_lanes with the bucket's own bytes, as
    a bucket is what queues on a lane (placed by its smallest layer, a
    bucket holding VGG-16's conv5_3 and fc6 would take lane 0)."""
    first = [min(ranks[layer] for layer in b) for b in buckets]
    if not prioritized:
        return [rank_lane(r, lanes) for r in first]
    return priority_lanes(first, [sum(nbytes[layer] for layer in b) for b in buckets], lanes)
