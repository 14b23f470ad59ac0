#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""The framework's own time per iteration: DDP against mercury.torch.

One process (Gloo, world size 1: every reduction ends at once, so nothing
is waited for), a profile's layers emulated as bench-torch emulates them
(experiment/bench/torch_worker.py) but with no compute at all, so that an
iteration is only autograd, the hooks, the launches and the optimizer's
steps. Modes, interleaved in every repeat, each on a fresh model:

  bare        the model and its SGD, no wrapper: the floor
  ddp         torch DDP with bucket_cap_mb N of the real model (--ddp-mb),
              divided like the tensors, as bench-torch's ddp@N
  mercury     mercury.torch on one lane (no agent needed) with its default
              bucket of the real model, divided likewise, as bench-torch's
              plain lane modes

PROFILE is a profile in the simple format (``mercury-replay layers`` prints
one from a PipeDream graph) or ``torchvision:NAME``: that model's layers with
their real parameter shapes (resnet152: 311 of them, densenet121: 242), for
deep models with hundreds of small layers.

Prints each mode's median milliseconds per iteration over the repeats, its
cost over bare (its own time), and mercury.torch's own time over DDP's, the
median and range of that ratio over the repeats (each repeat's modes run side
by side); with --json, one line per mode and one for the ratio.

usage: torch-overhead.py PROFILE [--byte-divisor D] [--repeats R] [--iterations I]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Dict, List, Tuple

import torch
import torch.distributed as dist

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, here)
os.environ["MERCURY_SOCKET"] = "/nonexistent/mercury-overhead.sock"   # never an agent: one lane
import mercury.torch as mt  # noqa: E402
import torchsim  # noqa: E402
from torch_worker import EmulatedModel, Timing, ddp, layers_of, make_model, read_profile  # noqa: E402

MODES = ["bare", "ddp", "mercury"]


def model_layers(profile: str) -> Tuple[str, List[Timing]]:
    """The model's name and its layers, each with no compute."""
    if profile.startswith("torchvision:"):
        name = profile[len("torchvision:"):]
        try:
            real = make_model(name)
        except AttributeError:
            raise SystemExit(f"torch-overhead: no torchvision model {name!r}")
        return name, [(0.0, 0.0, -1)] * len(layers_of(real))
    if profile.endswith(".graph.txt"):
        raise SystemExit(f"torch-overhead: {profile} is a PipeDream graph: "
                         "convert it with `mercury-replay layers --profile FILE > SIMPLE.txt`")
    return "profile", [(0.0, 0.0, n) for _, _, n in read_profile(profile)]


def one_mode(mode: str, name: str, times: List[Timing], args: argparse.Namespace) -> float:
    """Seconds per iteration of ``mode``, after a warm-up."""
    model = EmulatedModel(name, times, 1.0, args.byte_divisor)
    base = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    opt, net = base, model
    if mode == "ddp":
        net = ddp(model, torchsim.ddp_setting(f"ddp@{args.ddp_mb:g}", args.byte_divisor))
    elif mode == "mercury":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # no agent: one lane, as intended
            opt = mt.DistributedOptimizer(model, base, lanes=1, congestion_control=None, agent_timeout=0,
                                          bucket_bytes=torchsim.plain_bucket_bytes(args.byte_divisor))
    x = torch.ones(1)

    def step() -> None:
        opt.zero_grad()
        net(x).sum().backward()
        opt.step()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(args.iterations):
        step()
    elapsed = (time.perf_counter() - t0) / args.iterations
    if isinstance(opt, mt.DistributedOptimizer):
        opt.close()
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", help="simple format (name forward_ms backward_ms param_bytes) or torchvision:NAME")
    ap.add_argument("--byte-divisor", type=int, default=1)
    ap.add_argument("--ddp-mb", type=float, default=5.0, help="DDP's bucket_cap_mb of the real model")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.byte_divisor < 1 or args.repeats < 1 or args.iterations < 1 or args.ddp_mb <= 0:
        ap.error("--byte-divisor, --repeats and --iterations must be >= 1, --ddp-mb > 0")
    try:
        name, times = model_layers(args.profile)
    except SystemExit as e:
        ap.error(str(e))
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        runs: Dict[str, List[float]] = {m: [] for m in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                runs[mode].append(one_mode(mode, name, times, args))
        dist.destroy_process_group()
    bare = statistics.median(runs["bare"])
    for mode in MODES:
        med = statistics.median(runs[mode])
        if args.json:
            print(json.dumps({"mode": mode, "median_ms": med * 1e3, "over_bare_ms": (med - bare) * 1e3,
                              "runs_ms": [r * 1e3 for r in runs[mode]]}))
        else:
            print(f"{mode:8s} {med * 1e3:7.2f} ms per iteration  ({(med - bare) * 1e3:+6.2f} ms over bare)")
    # Each repeat's own-time ratio, its modes measured side by side.
    ratios = sorted((m - b) / (d - b) for b, d, m in zip(runs["bare"], runs["ddp"], runs["mercury"]) if d > b)
    if ratios:
        med = statistics.median(ratios)
        if args.json:
            print(json.dumps({"ratio": "mercury/ddp own time", "median": med, "runs": ratios}))
        else:
            print(f"mercury.torch's own time / DDP's: {med:.2f} (repeats {ratios[0]:.2f}..{ratios[-1]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
