# SPDX-License-Identifier: GPL-2.0
"""The GPU check (scripts/gpu-check.sh runs it): Mercury's NCCL plugin and
mercury.torch on a machine with NVIDIA GPUs, in under five minutes, nothing
fetched. Prints INFO, PASS, FAIL and SKIP lines and a summary; exits 1 on
any FAIL.

What it checks, as the machine's versions allow:

* ``nccl/plugin-loaded``: NCCL (2.26 or later: plugin API v10) loads
  ``libnccl-net-mercury.so`` and its log names the Mercury network.
* ``nccl/classes-reach-plugin``: eight NCCL process groups, one per traffic
  class (mercury.torch's NCCL lanes), with 2 or more ranks through the
  network (NCCL's peer-to-peer and shared-memory paths off): the plugin's
  log shows every class's lane.
* ``nccl/ddp-equivalence``: a few training steps of mercury.torch with
  backend="nccl" give DDP-over-NCCL's parameters.
* ``gloo-cuda/ddp-equivalence``: mercury.torch's Gloo lanes with the model
  on the GPU give DDP-over-Gloo's parameters (several ranks on one GPU).

Not here: the same ranks in network namespaces over shaped links with the
BPF datapath (a ratio of DDP-over-NCCL to NCCL lanes): that needs root and
struct_ops on the GPU machine's kernel, and is left to a later check.

usage: check.py --plugin-dir DIR
       check.py --cpu                 (the Gloo comparison on the CPU: the check's own test)
       check.py --worker MODE --out FILE      (one rank; started by the check)
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(TOP, "python"))
import mercury.torch as mt  # noqa: E402
from mercury.torch.nccl import NcclLanes, has_traffic_class, nccl_version, unsupported  # noqa: E402

STEPS = 6
TOLERANCE = 1e-5      # largest relative difference to DDP (sums in another order)
RUN_TIMEOUT_S = 120   # one multi-rank run, start-up included

results: List[Tuple[str, str]] = []


def report(status: str, name: str, detail: str) -> None:
    results.append((status, name))
    print(f"{status} {name}: {detail}", flush=True)


# -- one rank -----------------------------------------------------------------

def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(512, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def train(mode: str, device: torch.device) -> nn.Module:
    net = model().to(device)
    sgd = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    if mode == "ddp":
        device_ids = [device.index] if device.type == "cuda" and dist.get_backend() == "nccl" else None
        run = nn.parallel.DistributedDataParallel(net, device_ids=device_ids)
        opt = sgd
    else:
        backend = "nccl" if dist.get_backend() == "nccl" else "allreduce"
        run = net
        opt = mt.DistributedOptimizer(net, sgd, backend=backend)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    for _ in range(STEPS):
        x = torch.randn(16, 3, 16, 16, generator=g).to(device)
        y = torch.randint(0, 10, (16,), generator=g).to(device)
        opt.zero_grad()
        nn.functional.cross_entropy(run(x), y).backward()
        opt.step()
    if mode != "ddp":
        opt.synchronize()
        print(f"lanes {len(opt.lanes)}" + (f" ({opt.reason_single_lane})" if opt.reason_single_lane else ""),
              file=sys.stderr, flush=True)
    return net


def worker(mode: str, out: str) -> None:
    local = int(os.environ["LOCAL_RANK"])
    if os.environ.get("MERCURY_GPU_CHECK_CPU"):
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    backend = "gloo" if mode.startswith("gloo") else "nccl"   # ping, classes, nccl-*
    dist.init_process_group(backend)
    if mode == "ping":
        t = torch.ones(1, device=device)
        dist.all_reduce(t)            # the default group's communicator: NCCL loads its network
        torch.cuda.synchronize(device)
    elif mode == "classes":
        lanes = NcclLanes(8)          # every lane's communicator connected
        lanes.close()
    else:
        net = train(mode.split("-")[-1], device)
        if dist.get_rank() == 0:
            torch.save({k: v.detach().cpu() for k, v in net.state_dict().items()}, out)
    dist.barrier()
    dist.destroy_process_group()


# -- the check ----------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(mode: str, ranks: int, env: Dict[str, str], tmp: str) -> Tuple[bool, str, str]:
    """``ranks`` ranks of ``mode``; (all exited 0, their output, rank 0's result file)."""
    port = str(free_port())
    out = os.path.join(tmp, f"{mode}.pt")
    procs = []
    for r in range(ranks):
        e = dict(os.environ, **env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(ranks),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        e.setdefault("USE_LIBUV", "0")   # PyTorch 2's TCP store otherwise asks for libuv, which Debian's lacks
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", mode, "--out", out], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    ok, logs = True, []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            text, _ = p.communicate()
            text += f"\n(killed after {RUN_TIMEOUT_S} s)"
        ok = ok and p.returncode == 0
        logs.append(text)
    return ok, "\n".join(logs), out


def max_relative_difference(a: str, b: str) -> float:
    x, y = torch.load(a), torch.load(b)
    worst = 0.0
    for k in x:
        if x[k].is_floating_point():
            worst = max(worst, ((x[k] - y[k]).abs().max() / y[k].abs().max().clamp(min=1e-12)).item())
    return worst


def tail(text: str, n: int = 15) -> str:
    return " | ".join(text.strip().splitlines()[-n:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--plugin-dir", help="the directory holding libnccl-net-mercury.so")
    ap.add_argument("--cpu", action="store_true", help="only the Gloo comparison, on the CPU (the check's own test)")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.out)
        return 0
    if args.cpu:
        with tempfile.TemporaryDirectory(prefix="mercury-gpu-") as tmp:
            compare_gloo(tmp, 0, {"MERCURY_GPU_CHECK_CPU": "1"})
        return summary()
    if not args.plugin_dir:
        ap.error("--plugin-dir is required")

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = nccl_version()
    print(f"INFO PyTorch {torch.__version__}, CUDA {torch.version.cuda}, NCCL "
          f"{'.'.join(map(str, nccl)) if nccl else 'none'}, {gpus} GPU(s)"
          + (f": {torch.cuda.get_device_name(0)}" if gpus else ""), flush=True)
    if gpus == 0:
        report("FAIL", "gpu/visible", "torch.cuda sees no GPU")
        return summary()

    nccl_env = {"NCCL_NET_PLUGIN": "mercury", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
                "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo",
                "LD_LIBRARY_PATH": args.plugin_dir + ":" + os.environ.get("LD_LIBRARY_PATH", "")}
    # Several ranks on one GPU need NCCL 2.30; on two or more, one each (at most 4).
    nccl_ranks = min(gpus, 4) if gpus >= 2 else (2 if nccl and nccl >= (2, 30, 0) else 1)
    if gpus == 1 and nccl_ranks == 2:
        nccl_env["NCCL_MULTI_RANK_GPU_ENABLE"] = "1"
    why = unsupported(torch.__version__, nccl, has_traffic_class(), True)

    with tempfile.TemporaryDirectory(prefix="mercury-gpu-") as tmp:
        if nccl is None or nccl < (2, 26, 0):
            report("SKIP", "nccl/plugin-loaded", f"NCCL {nccl} predates plugin API v10 (2.26), the oldest the plugin "
                   "exports")
        else:
            ok, log, _ = launch("ping", 1, nccl_env, tmp)
            used = re.search(r"Using network Mercury", log) is not None
            report("PASS" if ok and used else "FAIL", "nccl/plugin-loaded",
                   "NCCL's log: 'Using network Mercury'" if ok and used else tail(log))

        if why:
            for name in ("nccl/classes-reach-plugin", "nccl/ddp-equivalence"):
                report("SKIP", name, why)
        elif nccl_ranks < 2:
            for name in ("nccl/classes-reach-plugin", "nccl/ddp-equivalence"):
                report("SKIP", name, f"one GPU and NCCL {'.'.join(map(str, nccl or ()))}: one rank per GPU before "
                       "NCCL 2.30, so nothing crosses the network")
        else:
            ok, log, _ = launch("classes", nccl_ranks, nccl_env, tmp)
            # API v11 (NCCL 2.28+): a line per communicator with its class;
            # v10: a line per connection with the lane (its class's).
            classes = {(int(c), int(lane)) for c, lane in re.findall(r"NET/Mercury: communicator \d+: traffic "
                                                                     r"class (-?\d+), lane (\d)", log)}
            connected = {int(lane) for lane in re.findall(r"NET/Mercury: connected, lane (\d)", log)}
            want = {(c, c) for c in range(8)}
            good = ok and (want <= classes if classes else set(range(8)) <= connected)
            report("PASS" if good else "FAIL", "nccl/classes-reach-plugin",
                   f"{nccl_ranks} ranks: (class, lane) per communicator {sorted(classes)}, connections on lanes "
                   f"{sorted(connected)}" if ok else tail(log))
            ok_d, log_d, ddp = launch("nccl-ddp", nccl_ranks, nccl_env, tmp)
            ok_m, log_m, mine = launch("nccl-mercury", nccl_ranks, nccl_env, tmp)
            if ok_d and ok_m:
                diff = max_relative_difference(mine, ddp)
                lanes_line = re.search(r"^lanes .*$", log_m, re.M)
                report("PASS" if diff <= TOLERANCE else "FAIL", "nccl/ddp-equivalence",
                       f"{nccl_ranks} ranks, {STEPS} steps, {lanes_line.group(0) if lanes_line else '?'}: largest "
                       f"relative difference to DDP {diff:.3g} (limit {TOLERANCE})")
            else:
                report("FAIL", "nccl/ddp-equivalence", tail(log_d if not ok_d else log_m))

        compare_gloo(tmp, gpus, {})

    report("SKIP", "nccl/shaped-links-ratio", "not built: needs root and the BPF datapath on this machine's kernel")
    return summary()


def compare_gloo(tmp: str, gpus: int, env: Dict[str, str]) -> None:
    """mercury.torch's Gloo lanes against DDP over Gloo, 2 ranks, the model
    on the GPU (on the CPU where ``gpus`` is 0)."""
    ranks = 2
    name = "gloo-cuda/ddp-equivalence" if gpus else "gloo-cpu/ddp-equivalence"
    ok_d, log_d, ddp = launch("gloo-ddp", ranks, env, tmp)
    ok_m, log_m, mine = launch("gloo-mercury", ranks, env, tmp)
    if not (ok_d and ok_m):
        report("FAIL", name, tail(log_d if not ok_d else log_m))
        return
    diff = max_relative_difference(mine, ddp)
    lanes_line = re.search(r"^lanes .*$", log_m, re.M)
    report("PASS" if diff <= TOLERANCE else "FAIL", name,
           f"{ranks} ranks on {min(gpus, ranks) or 'no'} GPU(s), {STEPS} steps, "
           f"{lanes_line.group(0) if lanes_line else '?'}: largest relative difference to DDP {diff:.3g} "
           f"(limit {TOLERANCE})")


def summary() -> int:
    counts = {s: sum(1 for status, _ in results if status == s) for s in ("PASS", "FAIL", "SKIP")}
    print(f"gpu-check: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped", flush=True)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
