# SPDX-License-Identifier: GPL-2.0
"""experiment/torchsim.py: its buckets are the ones DDP and mercury.torch
really build, and its schedules keep the arithmetic they claim."""
from __future__ import annotations

import os
import random
import re
import sys
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import mercury.torch as mt
from conftest import TOP

sys.path.insert(0, os.path.join(TOP, "experiment"))
import torchsim  # noqa: E402

RATE_MBIT = 50.0
# Payload bytes/s: 1448 in a 1514-byte frame, and the link also carries a
# 66-byte ACK per two segments the worker receives (as many as it sends).
# The bound counts no ACKs.
PAYLOAD_RATE = RATE_MBIT * 1e6 / 8 * 1448 / (1514 + 66 / 2)
BOUND_PAYLOAD_RATE = RATE_MBIT * 1e6 / 8 * 1448 / 1514


def layers(spec):
    return [torchsim.Layer(f, b, n) for f, b, n in spec]


def test_ddp_buckets_are_the_reducers() -> None:
    # After its first iteration DDP rebuilds its buckets in gradient-ready
    # order with limits [1 MiB, bucket_cap_mb] (torch's Reducer).
    sizes = [4 << 10, 700 << 10, 300 << 10, 2 << 20, 9 << 20, 30 << 20, 1 << 20, 64]
    model = [torchsim.Layer(0.0, 0.0, n) for n in sizes]
    tensors = [torch.empty(n // 4) for n in reversed(sizes)]
    cap = 25 << 20
    assert torchsim.DDP_FIRST_BUCKET_BYTES == dist._DEFAULT_FIRST_BUCKET_BYTES
    torch_buckets, _ = dist._compute_bucket_assignment_by_size(tensors, [torchsim.DDP_FIRST_BUCKET_BYTES, cap])
    expected = sorted(sorted(len(sizes) - 1 - i for i in b) for b in torch_buckets)
    assert sorted(sorted(b.layers) for b in torchsim.ddp_buckets(model, cap / (1 << 20))) == expected


def test_mercury_buckets_are_the_optimizers(gloo_world) -> None:
    sizes = [40, 200 << 10, 100 << 10, 300 << 10, 8, 260 << 10, 4 << 10]
    net = nn.Sequential(*[nn.Linear(1, 1, bias=False) for _ in sizes])
    for m, n in zip(net, sizes):
        m.weight = nn.Parameter(torch.zeros(n // 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # no agent: one lane
        opt = mt.DistributedOptimizer(net, torch.optim.SGD(net.parameters(), lr=0.1))
    try:
        x = torch.ones(1)
        for m in net:   # each "layer" touches its parameter; shapes do not matter here
            m.forward = lambda t, m=m: t * m.weight.sum()
        net(x).sum().backward()
        real = [sorted(set(b.layers)) for b in opt._buckets]
    finally:
        opt.close()
    model = [torchsim.Layer(0.0, 0.0, n) for n in sizes]
    assert [b.layers for b in torchsim.mercury_buckets(model, 1)] == real


def test_one_layer_costs_compute_then_its_ring() -> None:
    # Nothing can overlap: the forward waits for the one reduction, which waits for the backward.
    n, nbytes, latency = 4, 600_000, 0.002
    model = layers([(0.1, 0.2, nbytes)])
    ring = 2 * (n - 1) / n * nbytes / PAYLOAD_RATE + 2 * (n - 1) * latency
    for mode in ("ddp", "one-lane", "lanes-fair", "priority"):
        r = torchsim.simulate_mode(mode, model, workers=n, rate_mbit=RATE_MBIT, step_latency_s=latency)
        assert r.iteration_s == pytest.approx(0.3 + ring, rel=1e-6), mode
    bound = torchsim.simulate_mode("bound", model, workers=n, rate_mbit=RATE_MBIT, step_latency_s=latency)
    assert bound.iteration_s == pytest.approx(0.3 + 2 * (n - 1) / n * nbytes / BOUND_PAYLOAD_RATE, rel=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_no_mode_beats_the_bound_or_the_link(seed) -> None:
    rnd = random.Random(seed)
    n = rnd.choice([2, 4, 8])
    model = layers([(rnd.uniform(0.001, 0.05), rnd.uniform(0.001, 0.1), rnd.choice([0, rnd.randint(1, 900_000)]))
                    for _ in range(rnd.randint(3, 25))] + [(0.01, 0.01, 200_000)])
    compute = sum(l.fwd_s + l.bwd_s for l in model)
    link = 2 * (n - 1) / n * sum(l.nbytes for l in model) / BOUND_PAYLOAD_RATE
    bound = torchsim.simulate_mode("bound", model, workers=n, rate_mbit=RATE_MBIT, step_latency_s=0.0005)
    assert bound.iteration_s >= max(compute, link) * (1 - 1e-9)
    for mode in ("ddp", "one-lane", "lanes-fair", "priority"):
        r = torchsim.simulate_mode(mode, model, workers=n, rate_mbit=RATE_MBIT, step_latency_s=0.0005)
        assert r.iteration_s >= bound.iteration_s * (1 - 1e-9), mode


def test_priority_gains_where_the_front_layer_is_big() -> None:
    # A big first layer (an embedding) whose gradient is ready last: priority
    # sends it before the blocks the forward pass needs later; fair sharing
    # splits the link with them.
    model = layers([(0.001, 0.001, 2_000_000)] + [(0.02, 0.04, 300_000)] * 12)
    fair = torchsim.simulate_mode("lanes-fair", model, workers=4, rate_mbit=RATE_MBIT, step_latency_s=0.0003)
    prio = torchsim.simulate_mode("priority", model, workers=4, rate_mbit=RATE_MBIT, step_latency_s=0.0003)
    assert prio.iteration_s < 0.95 * fair.iteration_s
    assert prio.forward_wait_s < fair.forward_wait_s


def test_a_profile_is_read_or_refused_with_its_line(tmp_path) -> None:
    good = tmp_path / "good.txt"
    good.write_text("# name forward_ms backward_ms param_bytes\nconv 2 4 1000  # a comment\nrelu 0.5 0.5 0\n")
    assert torchsim.read_profile(str(good)) == [(0.002, 0.004, 1000), (0.0005, 0.0005, 0)]
    bad = tmp_path / "bad.txt"
    bad.write_text("conv 2 4 1000\nfc 1 2\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: expected"):
        torchsim.read_profile(str(bad))
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ValueError, match="no layers"):
        torchsim.read_profile(str(empty))


def test_a_ddp_grid_mode_is_scaled_like_the_tensors() -> None:
    assert torchsim.ddp_setting("ddp", 100) is None and torchsim.ddp_setting("full", 100) is None
    setting = torchsim.ddp_setting("ddp@25", 100)
    assert setting.cap_mb == 0.25 and setting.first_bytes == (1 << 20) // 100
    for bad in ("ddp@", "ddp@0", "ddp@-5", "ddp@x"):
        with pytest.raises(ValueError, match="ddp@N"):
            torchsim.ddp_setting(bad, 1)


def test_bytesched_modes_divide_partitions_like_tensors() -> None:
    s = torchsim.bytesched_setting("bytesched@4x2", 128)
    assert s == torchsim.ByteSchedulerSetting(4 * (1 << 20) // 128, 2)
    assert torchsim.bytesched_setting("ddp@4", 128) is None
    for bad in ("bytesched@", "bytesched@4", "bytesched@0x2", "bytesched@4x0", "bytesched@axb"):
        with pytest.raises(ValueError):
            torchsim.bytesched_setting(bad, 1)


def test_lane_modes_with_a_bucket_divide_it_like_tensors() -> None:
    assert torchsim.lane_setting("full@256", 105) == torchsim.LaneSetting("full", 256 * 1024 // 105)
    assert torchsim.lane_setting("one-lane@6720", 105).bucket_bytes == 65536
    assert torchsim.lane_setting("lanes-cubic@0.001", 1000).bucket_bytes == 1   # never empty
    for other in ("full", "ddp@5", "ps-full@4", "bytesched@4x2"):
        assert torchsim.lane_setting(other, 1) is None
    for bad in ("full@", "full@0", "full@-1", "full@x"):
        with pytest.raises(ValueError, match="full@K"):
            torchsim.lane_setting(bad, 1)
    # The plain modes: mercury.torch's default bucket of the real model, divided likewise.
    assert torchsim.plain_bucket_bytes(105) == torchsim.lane_setting("full@256", 105).bucket_bytes
    assert torchsim.plain_bucket_bytes(1) == torchsim.MERCURY_BUCKET_BYTES
    assert torchsim.plain_bucket_bytes(10 ** 9) == 1


def test_a_held_floor_costs_priority_between_ideal_and_fair() -> None:
    # Held lanes that keep a floor in flight take part of the link from the top
    # lane: the schedule lies between ideal priority and fair sharing, closer
    # to fair the smaller the top lane's window.
    model = layers([(0.001, 0.001, 2_000_000)] + [(0.02, 0.04, 300_000)] * 12)
    kw = dict(workers=4, rate_mbit=RATE_MBIT, step_latency_s=0.0003)
    ideal = torchsim.simulate_mode("priority", model, **kw).iteration_s
    fair = torchsim.simulate_mode("lanes-fair", model, **kw).iteration_s
    wide = torchsim.simulate_mode("priority", model, held_floor=torchsim.HeldFloor(2, 1000, 1000), **kw).iteration_s
    narrow = torchsim.simulate_mode("priority", model, held_floor=torchsim.HeldFloor(2, 60, 4), **kw).iteration_s
    assert ideal <= wide < narrow < fair
    assert wide < ideal * 1.01


def test_the_datapaths_floors_next_in_line_one_packet_beyond_and_two_thirds_for_the_top() -> None:
    # W 0: as include/mercury/cc_core.h holds (mercury_held_floor,
    # mercury_preempt_window): the held lane next in line keeps the floor,
    # those behind it one packet, a top lane other than lane 0 twice their sum.
    hf = torchsim.HeldFloor(2, 60, 0)
    window, floors = hf.windows(1, [5, 2, 3])
    assert floors == {2: 2, 3: 1, 5: 1}
    assert window == 2 * (2 + 1 + 1)
    assert window / (window + sum(floors.values())) == 2 / 3
    assert hf.windows(0, [4])[0] == 60
    # The constants are the datapath's own.
    with open(os.path.join(TOP, "include", "mercury", "cc_core.h")) as f:
        core = f.read()
    assert re.search(r"#define MERCURY_FAR_FLOOR\s+(\d+)", core).group(1) == str(torchsim.FAR_FLOOR_PACKETS)
    assert re.search(r"#define MERCURY_PREEMPT_SHARE\s+(\d+)", core).group(1) == str(torchsim.PREEMPT_SHARE)
    # A fixed W keeps the old meaning: every held lane F, the top W.
    assert torchsim.HeldFloor(2, 60, 4).windows(3, [4, 6]) == (4, {4: 2, 6: 2})
    # In a schedule: between ideal priority and a top lane at a fixed 4 packets
    # (a third of five held lanes' floors at 2).
    model = layers([(0.001, 0.001, 2_000_000)] + [(0.02, 0.04, 300_000)] * 12)
    kw = dict(workers=4, rate_mbit=RATE_MBIT, step_latency_s=0.0003)
    ideal = torchsim.simulate_mode("priority", model, **kw).iteration_s
    datapath = torchsim.simulate_mode("priority", model, held_floor=hf, **kw).iteration_s
    narrow = torchsim.simulate_mode("priority", model, held_floor=torchsim.HeldFloor(2, 60, 4), **kw).iteration_s
    assert ideal < datapath < narrow


def test_ps_one_bucket_pipelines_its_pull_with_chunk_aggregation() -> None:
    # One 1 MB bucket on one server, 2 workers, no compute: pushed at the
    # link's rate into a server link that carries both workers' copies (so
    # at half of it), then pulled likewise. With chunk aggregation the pull
    # follows the push a chunk behind; with tensor aggregation it starts
    # only once the push is done.
    model = layers([(0.0, 0.0, 1 << 20)])
    bucket = [torchsim.Bucket([0], 1 << 20, 0)]
    kw = dict(workers=2, servers=1, rate_mbit=RATE_MBIT, sharing="fair", iterations=3, warmup=1)
    one_way = 2 * (1 << 20) / PAYLOAD_RATE
    chunk = torchsim.simulate_ps(model, bucket, aggregation="chunk", **kw).iteration_s
    whole = torchsim.simulate_ps(model, bucket, aggregation="tensor", **kw).iteration_s
    assert whole == pytest.approx(2 * one_way, rel=1e-6)
    assert chunk == pytest.approx(one_way + 2 * torchsim.PS_CHUNK_BYTES / PAYLOAD_RATE, rel=1e-6)


def test_ps_modes_keep_the_bound_and_priority_helps() -> None:
    # VGG-like: small layers first, a big one last. Servers apart: no mode
    # beats max(compute, model bytes / rate); priority is never worse than
    # fair lanes, nor these than one lane with whole-partition answers.
    model = layers([(0.05, 0.1, 20000)] * 6 + [(0.02, 0.3, 400000), (0.01, 0.05, 40000)])
    total = sum(l.nbytes for l in model)
    compute = sum(l.fwd_s + l.bwd_s for l in model)
    kw = dict(workers=4, servers=4, rate_mbit=RATE_MBIT / 4, lanes=8, partition_bytes=100000)
    t = {m: torchsim.simulate_ps_mode(m, model, **kw).iteration_s for m in torchsim.PS_MODES}
    bound = max(compute, total / (RATE_MBIT / 4 * 1e6 / 8 / torchsim.WIRE_PER_PAYLOAD))
    assert min(t.values()) >= bound * (1 - 1e-9)
    assert t["ps-full"] <= t["ps-cubic"] + 1e-9 <= t["ps-vanilla"] + 2e-9
    assert t["ps-full"] < t["ps-vanilla"]


def test_prioritized_lanes_keep_small_layers_from_queueing_behind_a_big_one() -> None:
    # VGG-like: light convolutions, then a classifier layer far bigger than
    # all of them. By index the last convolution shares the big layer's lane
    # and, launched after it, waits for its whole ring; the prioritized map
    # gives it a more urgent lane, so the forward pass reaches the big layer
    # sooner (and never later).
    model = layers([(0.02, 0.04, 20_000)] * 13 + [(0.002, 0.004, 3_000_000), (0.001, 0.001, 100_000)])
    plain = torchsim.mercury_buckets(model, 8, 1)
    prio = torchsim.mercury_buckets(model, 8, 1, lane_map="learned+bytes")
    lane = {i: b.lane for b in plain for i in b.layers}
    assert lane[12] == lane[13]
    lane = {i: b.lane for b in prio for i in b.layers}
    assert all(lane[i] < lane[13] for i in range(13))
    before = torchsim.simulate(model, plain, workers=4, rate_mbit=RATE_MBIT, step_latency_s=0.0003,
                               sharing="priority", synchronous=False)
    after = torchsim.simulate(model, prio, workers=4, rate_mbit=RATE_MBIT, step_latency_s=0.0003,
                              sharing="priority", synchronous=False)
    assert after.iteration_s < before.iteration_s


def test_a_bucket_is_placed_by_its_bytes_not_its_smallest_layer() -> None:
    # With big buckets the last convolution and the big layer share one: the
    # bucket queues as a whole, so it goes by its own bytes (a less urgent
    # lane than every bucket before it), not by its small layer's.
    model = layers([(0.02, 0.04, 20_000)] * 13 + [(0.002, 0.004, 3_000_000), (0.001, 0.001, 100_000)])
    prio = torchsim.mercury_buckets(model, 8, 1 << 30, lane_map="learned+bytes")
    big = next(b for b in prio if 13 in b.layers)
    assert 12 in big.layers
    assert all(b.lane < big.lane for b in prio if min(b.layers) < 12)
    plain = torchsim.mercury_buckets(model, 8, 1 << 30)
    kw = dict(workers=4, rate_mbit=RATE_MBIT, step_latency_s=0.0003, sharing="priority", synchronous=False)
    assert torchsim.simulate(model, prio, **kw).iteration_s <= torchsim.simulate(model, plain, **kw).iteration_s


def test_the_command_line_compares_lane_maps(tmp_path) -> None:
    import json
    import subprocess
    profile = tmp_path / "tail.txt"
    profile.write_text("".join(f"conv{i} 20 40 20000\n" for i in range(13)) + "fc6 2 4 3000000\nfc7 1 1 100000\n")
    got = {}
    for lane_map in torchsim.LANE_MAPS:
        out = subprocess.run([sys.executable, os.path.join(TOP, "experiment", "torchsim.py"), str(profile),
                              "--workers", "4", "--rate-mbit", "50", "--bucket-bytes", "1", "--modes", "priority",
                              "--lane-map", lane_map, "--json"], capture_output=True, text=True, check=True).stdout
        got[lane_map] = json.loads(out)["modes"]["priority"]["iteration_s"]
    assert got["learned+bytes"] <= got["index"] and got["learned+bytes"] <= got["learned"]
    assert got["index+bytes"] < got["index"]
    bad = subprocess.run([sys.executable, os.path.join(TOP, "experiment", "torchsim.py"), str(profile),
                          "--rate-mbit", "50", "--lane-map", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--lane-map" in bad.stderr


def test_lanes_by_index_beat_lanes_by_forward_time_on_bert_at_scale() -> None:
    # BERT-base's real bytes and compute, 32 workers at 100 Gbit/s: ring
    # latency counts. Ranks by forward time give the first lane the
    # embedding and a block and a half (the embedding and norm layers take
    # almost no time), so more buckets queue on it; ranks by index spread the
    # buckets evenly (doc/experiment.md: why mercury.torch still follows
    # mercuryd's ranks, measured on the bench).
    model = torchsim.bench_layers(torchsim.read_profile(os.path.join(TOP, "experiment", "profiles", "bert-base.txt")),
                                  1, 0)
    kw = dict(workers=32, rate_mbit=100000, step_latency_s=20e-6)
    by_time = torchsim.simulate_mode("priority", model, lane_map="learned+bytes", **kw).iteration_s
    by_index = torchsim.simulate_mode("priority", model, lane_map="index+bytes", **kw).iteration_s
    assert by_index < by_time * 0.97
    first = [b for b in torchsim.mercury_buckets(model, 8, lane_map="learned+bytes") if b.lane == 0]
    assert len(first) > len([b for b in torchsim.mercury_buckets(model, 8, lane_map="index+bytes") if b.lane == 0])
