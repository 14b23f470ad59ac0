# SPDX-License-Identifier: GPL-2.0
"""One worker of `make bench-torch` (experiment/bench/bench-torch.sh starts them, one
per emulated host).

With ``--compute emulated`` every layer is one whose forward and backward
*wait* for the layer's time (scaled so that the iteration's compute is
``--compute-s``) inside real autograd, with parameters of the layer's size
(divided by ``--byte-divisor``), so the framework, the hooks and the
collectives stay real while 2 cores need not run 4 workers' compute. The
layers come from ``--profile FILE`` (the replayer's profiles, as
``mercury-replay layers`` prints them: ``name forward_ms backward_ms
param_bytes``), or, without one, worker 0 measures the real torchvision
model ``--model`` at one thread (``--batch``, ``--image``).
``--compute real`` trains the real torchvision model.

Modes, interleaved within each repeat, each on a fresh model:
  ddp         torch DDP (vanilla), its sockets pinned to the baseline CC
  one-lane    mercury.torch with 1 lane on the baseline CC (overlap only)
  lanes-cubic mercury.torch with --lanes lanes on the baseline CC (no priorities)
  full        mercury.torch with --lanes lanes on mercury (kernel priorities)
  ddp@N       torch DDP with bucket_cap_mb N for the real model: N and DDP's
              1 MB first bucket are divided by --byte-divisor like the
              tensors (plain ddp keeps torch's defaults on the shrunk model);
              a grid of these is DDP tuned as its users would
  bytesched@PxC  ByteScheduler-style scheduling in user space (bytescheduler.py)
              on one lane on the baseline CC: partitions of P MB of the real
              model (divided like the tensors), C of them in flight; a grid
              of these is that baseline tuned
  one-lane@K, lanes-cubic@K, full@K  the same with buckets of K KiB of the
              real model, divided by --byte-divisor like the tensors (the
              plain modes: mercury.torch's default, 256 KiB, of the real
              model, divided likewise; each run records its bucket_bytes)
  ps-vanilla  mercury.torch with backend="ps" on 1 lane on the baseline CC,
              servers that answer whole partitions (--aggregation tensor)
  ps-cubic    backend="ps", --lanes lanes on the baseline CC, servers that
              answer each chunk at once (immediate aggregation)
  ps-full     the same on mercury, every connection ranked (both ends)
              The ps modes need --ps-hosts: on each, mercury-ps serving job
              $MERCURY_JOB at ports PS_PORTS (bench-torch.sh starts them).
Prints one JSON line per measured run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import mercury.torch as mt  # noqa: E402
from mercury.torch.ps import PARTITION_BYTES as PS_PARTITION_BYTES  # noqa: E402
import torchsim  # noqa: E402
from bytescheduler import ByteScheduler  # noqa: E402

MODES = ["ddp", "one-lane", "lanes-cubic", "full"]
PS_MODES = ["ps-vanilla", "ps-cubic", "ps-full"]
# Each ps mode's servers: aggregation and CC are the server's own settings.
PS_PORTS = {"ps-vanilla": 7100, "ps-cubic": 7101, "ps-full": 7102}
# Also known, not run by default: a mode with "-clip" clips the gradients
# (clip_grad_norm_ on model.parameters(), between backward() and step()),
# which makes mercury.torch wait for every reduction first.
CLIP_MODES = [m + "-clip" for m in MODES]
CLIP_NORM = 1.0


def make_model(name: str) -> nn.Module:
    return getattr(torchvision.models, name)(num_classes=10)


def layers_of(model: nn.Module) -> List[nn.Module]:
    return [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]


def calibrate(name: str, batch: int, image: int, iterations: int = 4) -> List[Timing]:
    """Per-layer (forward s, backward s) of the real model, forward order, median of runs."""
    model = make_model(name)
    layers = layers_of(model)
    order: List[nn.Module] = []
    start, fwd, done = {}, {}, {}

    def pre(m, _i):
        if m not in order:
            order.append(m)
        start[m] = time.perf_counter()

    def post(m, _i, _o):
        fwd.setdefault(m, []).append(time.perf_counter() - start[m])

    for m in layers:
        m.register_forward_pre_hook(pre)
        m.register_forward_hook(post)
        for p in m.parameters(recurse=False):
            p.register_hook(lambda g, m=m: done.__setitem__(m, time.perf_counter()))
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, image, image)
    y = torch.randint(0, 10, (batch,))
    bwd = {m: [] for m in layers}
    for _ in range(iterations):
        done.clear()
        out = model(x)
        t0 = time.perf_counter()
        loss_fn(out, y).backward()
        prev = t0
        for m, t in sorted(done.items(), key=lambda kv: kv[1]):
            bwd[m].append(t - prev)
            prev = t
        model.zero_grad()

    def median(v: List[float]) -> float:
        v = sorted(v[1:] or v)  # the first iteration warms up
        return v[len(v) // 2] if v else 0.0
    return [(median(fwd.get(m, [])), median(bwd[m]), -1) for m in order]


class _Wait(torch.autograd.Function):
    """Forward waits fwd_s, backward bwd_s; gradients of the real shapes."""

    @staticmethod
    def forward(ctx, x, fwd_s, bwd_s, *params):
        ctx.bwd_s = bwd_s
        ctx.shapes = [p.shape for p in params]
        if fwd_s > 0:   # sleep(0) still yields the CPU: noise in torch-overhead.py's no-compute runs
            time.sleep(fwd_s)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        if ctx.bwd_s > 0:
            time.sleep(ctx.bwd_s)
        scale = float(grad.sum()) * 1e-6
        return (grad, None, None) + tuple(torch.full(s, scale) for s in ctx.shapes)


class EmulatedLayer(nn.Module):
    """A real layer's parameters (1/divisor of each, flattened) and its measured time."""

    def __init__(self, real: nn.Module, fwd_s: float, bwd_s: float, divisor: int) -> None:
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(p.detach().reshape(-1)[:max(1, -(-p.numel() // divisor))].clone())
                                        for p in real.parameters(recurse=False)])
        self.fwd_s, self.bwd_s = fwd_s, bwd_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Wait.apply(x, self.fwd_s, self.bwd_s, *self.params)


class ProfiledLayer(nn.Module):
    """A profile's layer: one parameter of its bytes (fp32, 1/divisor of them), its time."""

    def __init__(self, param_bytes: int, fwd_s: float, bwd_s: float, divisor: int) -> None:
        super().__init__()
        n = -(-param_bytes // 4 // divisor) if param_bytes else 0
        self.params = nn.ParameterList([nn.Parameter(torch.zeros(n))] if n else [])
        self.fwd_s, self.bwd_s = fwd_s, bwd_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Wait.apply(x, self.fwd_s, self.bwd_s, *self.params)


# A layer as the bench emulates it: (forward s, backward s, parameter bytes or -1: the real layer's).
Timing = Tuple[float, float, int]


def read_profile(path: str) -> List[Timing]:
    """The simple profile format, read as the simulator reads it."""
    try:
        return torchsim.read_profile(path)
    except (OSError, ValueError) as e:
        raise SystemExit(f"torch_worker: {e}")


class EmulatedModel(nn.Module):
    """Profiled layers (bytes >= 0) or, for a calibrated torchvision model, its real layers' parameters."""

    def __init__(self, name: str, times: List[Timing], scale: float, divisor: int) -> None:
        super().__init__()
        if times and times[0][2] >= 0:
            self.layers = nn.ModuleList(ProfiledLayer(n, f * scale, b * scale, divisor) for f, b, n in times)
            return
        real = layers_of(make_model(name))
        order = real[:len(times)]
        self.layers = nn.ModuleList(EmulatedLayer(m, f * scale, b * scale, divisor)
                                    for m, (f, b, _) in zip(order, times))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def baseline_group(cc: str) -> dist.ProcessGroup:
    """A process group of its own for a baseline, its new sockets pinned to ``cc``."""
    before = mt.find_tcp_sockets()
    group = dist.new_group()
    dist.barrier(group=group)
    mt.pin_congestion_control([fd for fd in mt.find_tcp_sockets() if fd not in before], cc)
    return group


def ddp(model: nn.Module, setting: Optional[torchsim.DdpSetting],
        group: Optional[dist.ProcessGroup] = None) -> nn.Module:
    """DDP over ``model`` with ``setting``'s caps (torchsim.ddp_setting; None:
    torch's defaults), on ``group`` (None: the default group)."""
    if setting is None:
        return nn.parallel.DistributedDataParallel(model, process_group=group)
    first = dist._DEFAULT_FIRST_BUCKET_BYTES   # read by DDP's constructor
    try:
        dist._DEFAULT_FIRST_BUCKET_BYTES = setting.first_bytes
        return nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=setting.cap_mb)
    finally:
        dist._DEFAULT_FIRST_BUCKET_BYTES = first


def run_mode(mode: str, args: argparse.Namespace, times) -> dict:
    clip = mode.endswith("-clip")
    mode = mode[:-len("-clip")] if clip else mode
    torch.manual_seed(0)
    if args.compute == "emulated":
        model = EmulatedModel(args.model, times, args.compute_scale, args.byte_divisor)
        x = torch.ones(1, requires_grad=False)
        y = None
    else:
        model = make_model(args.model)
        x = torch.randn(args.batch, 3, args.image, args.image)
        y = torch.randint(0, 10, (args.batch,))
    loss_fn = nn.CrossEntropyLoss()
    opt_base = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    group = None
    if mode == "ddp" or mode.startswith("ddp@"):
        group = baseline_group(args.baseline_cc)
        net = ddp(model, torchsim.ddp_setting(mode, args.byte_divisor), group)
        opt = opt_base
    elif mode.startswith("bytesched@"):
        group = baseline_group(args.baseline_cc)
        bs = torchsim.bytesched_setting(mode, args.byte_divisor)
        opt = ByteScheduler(model, opt_base, partition_bytes=bs.partition_bytes, credit=bs.credit, group=group)
        net = model
    else:
        bucket = {}
        setting = torchsim.lane_setting(mode, args.byte_divisor)
        if setting:
            mode, bucket = setting.mode, dict(bucket_bytes=setting.bucket_bytes)
        elif mode in torchsim.LANE_MODES:
            bucket = dict(bucket_bytes=torchsim.plain_bucket_bytes(args.byte_divisor))
        lanes = 1 if mode in ("one-lane", "ps-vanilla") else args.lanes
        cc = "mercury" if mode in ("full", "ps-full") else args.baseline_cc
        ps = {}
        if mode in PS_MODES:
            if not args.ps_hosts:
                raise SystemExit(f"torch_worker: {mode} needs --ps-hosts")
            # BytePS's partitions of the real model, divided like the tensors.
            ps = dict(backend="ps", servers=[f"{h}:{PS_PORTS[mode]}" for h in args.ps_hosts.split(",")],
                      partition_bytes=max(4, PS_PARTITION_BYTES // args.byte_divisor))
        # The layer-to-lane map users train with from the first resync on
        # (mercuryd's learned ranks; mercury.torch's default: step 10), in
        # place from the end of the warm-up.
        opt = mt.DistributedOptimizer(model, opt_base, lanes=lanes, congestion_control=cc,
                                      resync_every=max(1, args.warmup), **ps, **bucket)
        if lanes > 1 and len(opt.lanes) != lanes:
            raise RuntimeError(f"{mode}: got {len(opt.lanes)} lanes: {opt.reason_single_lane}")
        net = model

    def one_step() -> None:
        opt.zero_grad()
        out = net(x)
        loss = out.sum() if y is None else loss_fn(out, y)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        opt.step()

    for _ in range(args.warmup):
        one_step()
    dist.barrier()
    # Steady state: from one step's start to the start of the step after the
    # last measured one. The reductions still in flight then belong to the
    # next iteration, which training would overlap with its forward pass
    # (timing up to a final synchronize() charged that tail to the run).
    # Forward-pass waits over the same steps: not the warm-up's, nor the
    # final synchronize() in close(), which waits for the last tail.
    t0, c0, w0 = time.perf_counter(), os.times(), getattr(opt, "wait_s", None)
    for _ in range(args.iterations):
        one_step()
    elapsed = time.perf_counter() - t0
    c1 = os.times()
    waited = (opt.wait_s - w0) / args.iterations if w0 is not None else None
    one_step()
    if isinstance(opt, (mt.DistributedOptimizer, ByteScheduler)):
        opt.close()   # synchronizes first
    del net
    if group is not None:
        dist.destroy_process_group(group)
    return {"iteration_s": elapsed / args.iterations, "wait_s": waited,
            "cpu_util": ((c1.user - c0.user) + (c1.system - c0.system)) / elapsed,
            "bucket_bytes": opt.bucket_bytes if isinstance(opt, mt.DistributedOptimizer) else None}


def ring_step_latency(world: int, trials: int = 21) -> float:
    """One step of Gloo's ring all-reduce on an idle link, seconds: the median
    time of a one-element all-reduce over its 2(N-1) steps. The simulator
    (experiment/torchsim.py) charges it to every step of every ring."""
    x = torch.zeros(1)
    times = []
    for _ in range(trials):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] / (2 * (world - 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="ADDR:PORT of worker 0")
    ap.add_argument("--model", default="resnet18",
                    help="the run's model name; without --profile, the torchvision model to calibrate or train")
    ap.add_argument("--profile", help="emulated: the layers of this profile (see above)")
    ap.add_argument("--compute", choices=["emulated", "real"], default="emulated")
    ap.add_argument("--compute-s", type=float, default=0.0,
                    help="emulated compute per iteration (forward + backward), seconds; 0: as measured")
    ap.add_argument("--byte-divisor", type=int, default=1,
                    help="emulated: each parameter tensor holds 1/D of its elements (a D times faster link)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--image", type=int, default=32)
    ap.add_argument("--lanes", type=int, default=mt.DEFAULT_LANES)
    ap.add_argument("--baseline-cc", default="cubic")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--label", default="")
    ap.add_argument("--ps-hosts", default="", help="the ps modes' server addresses, comma-separated")
    ap.add_argument("--ps-topology", default="", help="recorded with every run: separate or colocated servers")
    args = ap.parse_args()

    torch.set_num_threads(1)
    if args.profile and args.compute != "emulated":
        raise SystemExit("torch_worker: --profile needs --compute emulated")
    times: List[Timing] = []
    if args.rank == 0 and args.compute == "emulated":
        times = read_profile(args.profile) if args.profile else calibrate(args.model, args.batch, args.image)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}", rank=args.rank, world_size=args.world)
    n = torch.tensor([len(times)], dtype=torch.int64)
    dist.broadcast(n, src=0)
    t = torch.tensor(times if times else [(0.0, 0.0, 0)] * int(n.item()), dtype=torch.float64)
    dist.broadcast(t, src=0)
    times = [(f, b, int(nb)) for f, b, nb in t.tolist()]
    measured = sum(f + b for f, b, _ in times)
    args.compute_scale = args.compute_s / measured if args.compute_s > 0 and measured > 0 else 1.0
    if args.compute != "emulated":
        args.byte_divisor = 1
    model_bytes = sum(p.numel() * p.element_size()
                      for p in (EmulatedModel(args.model, times, 1.0, args.byte_divisor) if args.compute == "emulated"
                                else make_model(args.model)).parameters())
    compute_s = sum(f + b for f, b, _ in times) * args.compute_scale if args.compute == "emulated" else None
    step_latency_s = ring_step_latency(args.world)
    modes = args.modes.split(",")
    try:
        grid = [m for m in modes if torchsim.ddp_setting(m, args.byte_divisor)
                or torchsim.bytesched_setting(m, args.byte_divisor) or torchsim.lane_setting(m, args.byte_divisor)]
    except ValueError as e:
        raise SystemExit(f"torch_worker: {e}")
    unknown = [m for m in modes if m not in MODES + CLIP_MODES + PS_MODES + grid]
    if unknown:
        raise SystemExit(f"torch_worker: unknown modes {unknown}; known: {MODES + CLIP_MODES + PS_MODES}")
    for rep in range(args.repeats):
        for mode in modes:
            r = run_mode(mode, args, times)
            if args.rank == 0:
                print(json.dumps({"label": args.label, "model": args.model, "compute": args.compute,
                                  "workers": args.world, "mode": mode, "repeat": rep,
                                  "cc": "mercury" if mode.startswith(("full", "ps-full")) else args.baseline_cc,
                                  "ps_topology": args.ps_topology if mode in PS_MODES else None,
                                  "model_bytes": model_bytes, "byte_divisor": args.byte_divisor,
                                  "compute_s": compute_s, "profile": args.profile, "lanes": args.lanes,
                                  "step_latency_s": step_latency_s, **r}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
