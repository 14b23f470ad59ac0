# SPDX-License-Identifier: GPL-2.0
"""The bench's ByteScheduler-style baseline (experiment/bench/bytescheduler.py)
trains like DDP: two real Gloo workers in a network namespace of their own,
small partitions and a credit of 2 so that partitions of several layers are
in flight and reordered, a layer whose parameters sit in a ParameterList,
compared with DDP on the same data."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

WORKER = r"""
import os, sys
import torch, torch.distributed as dist, torch.nn as nn
sys.path.insert(0, os.path.join(sys.argv[3], "experiment", "bench"))
from bytescheduler import ByteScheduler

rank, store = int(sys.argv[1]), sys.argv[2]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)

class Scaled(nn.Module):
    # Parameters in a ParameterList, used by the parent's forward (as the bench's emulated layers).
    def __init__(self):
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(torch.linspace(0.5, 1.5, 32))])
    def forward(self, x):
        return x * self.params[0]

def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), Scaled(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))

def data(i):
    g = torch.Generator().manual_seed(100 * i + rank)
    return torch.randn(5, 8, generator=g)

ref = model()
ddp = nn.parallel.DistributedDataParallel(ref)
opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
for i in range(5):
    opt.zero_grad()
    ddp(data(i)).pow(2).sum().backward()
    opt.step()

net = model()
bs = ByteScheduler(net, torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9), partition_bytes=64, credit=2)
assert len(bs._layers) == 4 and len(bs._parts) > len(bs._layers), "partitions must split layers"
for i in range(5):
    bs.zero_grad()
    net(data(i)).pow(2).sum().backward()
    bs.step()
bs.close()
err = max((a - b).abs().max().item() for a, b in zip(ref.parameters(), net.parameters()))
print(f"rank {rank} max abs difference {err:.3g}")
assert err <= 1e-5, err
assert bs.wait_s > 0, "forward passes must have waited for reductions"
dist.destroy_process_group()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a network namespace of its own")
def test_trains_like_ddp() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        store = os.path.join(tmp, "store")
        run = (f"ip link set lo up && export GLOO_SOCKET_IFNAME=lo && "
               f"{sys.executable} {script} 0 {store} {TOP} & a=$!; "
               f"{sys.executable} {script} 1 {store} {TOP}; b=$?; wait $a && [ $b = 0 ]")
        r = subprocess.run(["unshare", "--net", "sh", "-c", run], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.count("max abs difference") == 2, r.stdout
