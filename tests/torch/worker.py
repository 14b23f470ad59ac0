# SPDX-License-Identifier: GPL-2.0
"""One worker of a torch test run (tests/torch/checks.py starts them).

Trains a small CNN+MLP with BatchNorm on synthetic data, as DDP (the
reference) or with mercury.torch.DistributedOptimizer, and writes the final
parameters and what it checked to --out. Mid-run it evaluates under
torch.no_grad() in eval mode and round-trips the optimizer's state_dict, in
both modes, so the comparison covers them.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import mercury.torch as mt  # noqa: E402
from mercury.lanemap import index_ranks, priority_lanes  # noqa: E402


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, weight_decay=1e-4)
    raise ValueError(name)


def poll(deadline_s: float, check: Callable[[], str]) -> str:
    """Calls check() until it returns "" (ok) or the deadline passes; the last reason."""
    end = time.monotonic() + deadline_s
    why = check()
    while why and time.monotonic() < end:
        time.sleep(0.1)
        why = check()
    return why


def mercuryctl_json(ctl: str, *args: str) -> dict:
    out = subprocess.run([ctl, "--json", *args], capture_output=True, text=True, timeout=20)
    if out.returncode != 0:
        raise RuntimeError(f"mercuryctl {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def check_lanes(opt: mt.DistributedOptimizer, ctl: str) -> str:
    """Every lane socket is in the datapath's flow table at its lane's rank."""
    if len(opt.lanes) < 2:
        return f"single lane: {opt.reason_single_lane}"
    # Before the first resync: the ranks by index, made more urgent by bytes
    # (SmallNet's classifier: [0, 1, 2, 4, 5, 6] by index alone).
    want_lanes = priority_lanes(index_ranks(len(opt._layers)), opt._layer_bytes, len(opt.lanes))
    if opt.layer_lanes() != want_lanes:
        return f"layer lanes {opt.layer_lanes()}, want {want_lanes}"
    want = {f"cookie:{cookie}": mt.lane_rank(i, len(opt.lanes))
            for i, lane in enumerate(opt.lanes.lanes) for cookie in lane.sockets.values()}
    peers = len(opt.lanes.servers) if opt.backend == "ps" else opt.world - 1
    if len(want) < len(opt.lanes) * peers:
        return f"found {len(want)} lane sockets, want {len(opt.lanes)} x {peers}"

    def missing() -> str:
        have = {f["flow"]: f["rank"] for f in mercuryctl_json(ctl, "dump")["flows"]}
        bad = [f"{k} rank {have.get(k)} want {r}" for k, r in want.items() if have.get(k) != r]
        return "; ".join(bad[:4])

    why = poll(10, missing)
    return why or ""


def check_timings(ctl: str, job: str, layers: int) -> str:
    """mercuryctl status shows this job's per-layer timings and ranks."""
    def missing() -> str:
        status = mercuryctl_json(ctl, "status", "--socket", os.environ["MERCURY_SOCKET"])
        mine = [j for j in status["jobs"] if j["job"] == job and j["worker"] == 0]
        if not mine:
            return "job not in mercuryctl status"
        j = mine[0]
        if len(j["layers"]) != layers:
            return f"{len(j['layers'])} layers, want {layers}"
        if j["timing_reports"] < 3:
            return f"{j['timing_reports']} timing reports"
        if not all(l["forward_us"] > 0 and l["backward_us"] > 0 for l in j["layers"]):
            return "a layer without forward or backward time: " + str([(l["forward_us"], l["backward_us"])
                                                                        for l in j["layers"]])
        ranks = [l["rank"] for l in j["layers"]]
        if ranks != sorted(ranks) or ranks[0] != 0 or ranks[-1] == 0:
            return f"ranks {ranks} do not follow the forward order"
        return ""
    return poll(10, missing)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=["ddp", "mercury", "ps"], required=True)
    ap.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--lanes", type=int, default=mt.DEFAULT_LANES)
    ap.add_argument("--cc", default="mercury")
    ap.add_argument("--check-lanes", action="store_true")
    ap.add_argument("--check-timings", action="store_true")
    ap.add_argument("--mercuryctl", default="mercuryctl")
    ap.add_argument("--servers", default="", help="mode ps: the mercury-ps servers, HOST:PORT,...")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                            world_size=args.world)
    torch.manual_seed(0)
    model = SmallNet()
    result = {"rank": args.rank}
    if args.mode == "ddp":
        net = nn.parallel.DistributedDataParallel(model)
        opt = make_optimizer(args.optimizer, model.parameters())
    else:
        net = model
        backend = dict(backend="ps", servers=args.servers.split(",")) if args.mode == "ps" else {}
        opt = mt.DistributedOptimizer(model, make_optimizer(args.optimizer, model.parameters()),
                                      lanes=args.lanes, congestion_control=args.cc or None, **backend)
        result["lanes"] = len(opt.lanes)
        result["single_lane_reason"] = opt.reason_single_lane
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1000 + args.rank)  # each worker its own data
    for step in range(args.steps):
        x = torch.randn(8, 3, 16, 16, generator=gen)
        y = torch.randint(0, 10, (8,), generator=gen)
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
        if step == 2:
            net.eval()
            with torch.no_grad():
                result["eval_logit"] = float(net(x).sum())
            net.train()
            state = copy.deepcopy(opt.state_dict())
            opt.load_state_dict(state)
    if args.mode != "ddp":
        opt.synchronize()
        if args.check_lanes:
            result["lanes_error"] = check_lanes(opt, args.mercuryctl)
        if args.check_timings and args.rank == 0:
            result["timings_error"] = check_timings(args.mercuryctl, os.environ.get("MERCURY_JOB", "torch"),
                                                    len(opt.layer_lanes()))
        opt.close()
    torch.save({k: v.detach().clone() for k, v in model.named_parameters()}, args.out + ".pt")
    with open(args.out, "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
