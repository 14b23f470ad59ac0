# SPDX-License-Identifier: GPL-2.0
"""mercury.lanemap: which bucket and lane each layer's gradients take."""
from __future__ import annotations

import random

import pytest

from mercury.contract import NUM_RANKS, rank_lane
from mercury.lanemap import bucket_lanes, index_ranks, plan_buckets, priority_lanes


def test_index_ranks_spread_layers_in_order() -> None:
    assert index_ranks(16) == [i // 2 for i in range(16)]
    assert index_ranks(4) == [0, 2, 4, 6]
    assert index_ranks(0) == []


def test_a_layer_does_not_queue_behind_a_bigger_later_one() -> None:
    # VGG-16's tail by index: conv5_3 and fc6 share rank 6, fc7 and fc8 rank 7.
    # On one lane, conv5_3 (launched after fc6, needed before it) waits for
    # all of fc6; with its bytes' rank it takes a more urgent lane.
    nbytes = [7, 148, 295, 590, 1181, 2360, 2360, 4720, 9439, 9439, 9439, 9439, 9439, 411058, 67125, 16388]
    ranks = index_ranks(len(nbytes))
    assert ranks[12] == ranks[13]
    lanes = priority_lanes(ranks, nbytes, 8)
    fc6 = lanes[13]
    assert all(lanes[i] < fc6 for i in range(13))


@pytest.mark.parametrize("seed", range(20))
def test_never_less_urgent_than_the_rank(seed) -> None:
    rnd = random.Random(seed)
    n = rnd.randint(1, 60)
    ranks = sorted(rnd.randrange(NUM_RANKS) for _ in range(n))
    nbytes = [rnd.choice([0, rnd.randint(1, 1 << 24)]) for _ in range(n)]
    for lanes in (2, 4, 8):
        got = priority_lanes(ranks, nbytes, lanes)
        assert len(got) == n
        assert all(0 <= g <= rank_lane(r, lanes) for g, r in zip(got, ranks))
        assert got == sorted(got)   # forward order stays in lane order


def test_without_bytes_the_ranks_decide() -> None:
    assert priority_lanes([0, 3, 7], [0, 0, 0], 8) == [0, 3, 7]
    assert priority_lanes([0, 3, 7], [0, 0, 0], 2) == [0, 0, 1]


def test_a_bucket_goes_by_its_own_bytes() -> None:
    # Layers 2 (small) and 3 (big) in one bucket: its rank is layer 2's, its
    # bytes the pair's, so it stays behind the small buckets before it.
    ranks, nbytes = [0, 1, 6, 6], [10, 10, 10, 10_000]
    assert bucket_lanes(ranks, nbytes, [[0], [1], [2, 3]], 8, prioritized=True) == [0, 0, 4]
    assert priority_lanes(ranks, nbytes, 8)[2] == 0   # the small layer alone would take lane 0
    assert bucket_lanes(ranks, nbytes, [[0], [1], [2, 3]], 8, prioritized=False) == [0, 1, 6]


def test_plan_buckets_cuts_at_size_lane_and_kind() -> None:
    # 8 layers, 8 lanes: every layer its own lane by index, so every layer its own bucket.
    assert plan_buckets([10] * 8, 8, 1000) == [([i], i) for i in range(8)]
    # One lane: cut once a bucket holds bucket_bytes (the layer that reaches it stays in).
    assert plan_buckets([4, 4, 4, 4, 4], 1, 8) == [([0, 1], 0), ([2, 3], 0), ([4], 0)]
    # A change of kind (dtype) starts a bucket, whatever its size.
    assert plan_buckets([1, 1, 1, 1], 1, 100, kinds=["f32", "f32", "bf16", "f32"]) == \
        [([0, 1], 0), ([2], 0), ([3], 0)]
    # Two lanes by index: layers 0-3 on lane 0, 4-7 on lane 1, never mixed.
    assert [lane for _, lane in plan_buckets([1] * 8, 2, 100)] == [0, 1]
    assert plan_buckets([], 8, 100) == []

