# SPDX-License-Identifier: GPL-2.0
"""backend="nccl" (mercury.torch.nccl) where no GPU is: what it needs, said
before anything collective, and how it picks Mercury's NCCL plugin. The
lanes themselves run only on a GPU machine (scripts/gpu-check.sh)."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

import mercury.torch as mt
from mercury.torch.nccl import PLUGIN, plugin_selection, unsupported


pytestmark = pytest.mark.usefixtures("gloo_world")


GOOD = dict(torch_version="2.8.0+cu128", nccl=(2, 27, 3), traffic_class=True, cuda=True)


def test_supported_when_everything_is_there() -> None:
    assert unsupported(**GOOD) is None
    assert unsupported(**dict(GOOD, torch_version="2.10.1", nccl=(2, 30, 0))) is None


@pytest.mark.parametrize("change, says", [
    ({"torch_version": "2.6.0"}, "needs PyTorch 2.8 or later"),
    ({"torch_version": "1.13.0a0+git"}, "this is PyTorch 1.13.0a0+git"),
    ({"nccl": None}, "built with NCCL"),
    ({"nccl": (2, 21, 5)}, "needs NCCL 2.26 or later"),
    ({"nccl": (2, 25, 9)}, "runs NCCL 2.25.9"),
    ({"traffic_class": False}, "has no traffic_class"),
    ({"cuda": False}, "no CUDA device"),
])
def test_each_missing_piece_is_named(change, says) -> None:
    why = unsupported(**dict(GOOD, **change))
    assert why is not None and says in why and "backend='allreduce'" in why


def test_refused_here_before_anything_collective() -> None:
    """This machine's PyTorch (1.13 or 2.6, CPU only) cannot run it: a
    RuntimeError naming this PyTorch, raised before the optimizer touches
    the process group or the model."""
    model = nn.Linear(2, 2)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(RuntimeError, match=re.escape(f"PyTorch {torch.__version__}")):
        mt.DistributedOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), backend="nccl")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not model._forward_pre_hooks   # nothing attached


def test_plugin_selected_when_unset_and_it_loads() -> None:
    assert plugin_selection({}, lambda: True) == ({"NCCL_NET_PLUGIN": PLUGIN}, None)
    assert plugin_selection({"NCCL_NET_PLUGIN": PLUGIN}, lambda: True) == ({}, None)
    # A path to the library is taken as given: NCCL dlopen()s it itself.
    assert plugin_selection({"NCCL_NET_PLUGIN": "/opt/m/libnccl-net-mercury.so"}, lambda: False) == ({}, None)


@pytest.mark.parametrize("env, loads, says", [
    ({}, False, "libnccl-net-mercury.so not found"),
    ({"NCCL_NET_PLUGIN": PLUGIN}, False, "without priorities"),
    ({"NCCL_NET_PLUGIN": "aws-ofi"}, True, "NCCL_NET_PLUGIN=aws-ofi is not Mercury's plugin"),
    ({"NCCL_NET": "Socket"}, True, "NCCL_NET=Socket"),
])
def test_without_the_plugin_one_reason(env, loads, says) -> None:
    add, why = plugin_selection(env, lambda: loads)
    assert add == {} and why is not None and says in why


def test_lanes_classes_are_the_gloo_lanes_ranks() -> None:
    """Lane L of N carries class lane_rank(L, N): the plugin's lane of that
    class has the datapath rank a Gloo lane L of N gets."""
    from mercury.contract import NUM_RANKS, lane_rank
    for n in range(1, NUM_RANKS + 1):
        classes = [lane_rank(lane, n) for lane in range(n)]
        assert classes == sorted(set(classes)) and all(0 <= c < NUM_RANKS for c in classes)

