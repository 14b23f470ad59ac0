# SPDX-License-Identifier: GPL-2.0
"""The torch checks of `make torchtest`: real Gloo processes train the same
model as DDP and with mercury.torch, and must end with the same parameters.

Every check runs for both backends: "mercury" (all-reduce on the lanes) and
"ps" (mercury-ps servers, backend="ps").

usage: checks.py --mercuryctl PATH --servers HOST:PORT,...
Runs in a network namespace with mercuryd reachable at $MERCURY_SOCKET, a
Mercury datapath registered and the mercury-ps servers serving job
$MERCURY_JOB with the secret in $MERCURY_PS_SECRET_FILE. Prints PASS/FAIL
lines and "N passed, M failed".
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import loops as training_loops  # noqa: E402  (its LOOPS: the one list of loops)

PYTHON = "/usr/bin/python3"   # Debian's, the one with torch
TOLERANCE = 1e-5
passed = failed = 0
# Each mode's workers' warnings (Python's and c10's), without file and line:
# mercury.torch must add none to what DDP's workers print. The workers show
# every Python warning once per place, deprecations included.
WORKER_ENV = {**os.environ, "PYTHONWARNINGS": "default"}
WARNING = re.compile(r"^(?:.*?:\d+: )?(\w*Warning: .*)$|^\[W[^\]]*\] ?(.*)$")
warnings_seen: Dict[str, Dict[str, str]] = {}   # mode: {warning, numbers and temporary names out: a line}


def note_warnings(mode: str, stderr: str) -> None:
    for line in stderr.splitlines():
        m = WARNING.match(line.strip())
        if m:
            key = re.sub(r"\d+", "N", re.sub(r"/tmp/\S+", "/tmp/...", m.group(1) or m.group(2)))
            warnings_seen.setdefault(mode, {}).setdefault(key, line.strip())


def report(name: str, ok: bool, detail: str) -> None:
    global passed, failed
    print(("PASS " if ok else "FAIL ") + name + ("  # " if ok else ": ") + detail, flush=True)
    passed, failed = passed + ok, failed + (not ok)


def run(tmp: str, tag: str, world: int, mode: str, extra: List[str], env: Optional[Dict[str, str]] = None,
        timeout: int = 300, expect_warnings: bool = False) -> Tuple[List[dict], List[Dict[str, torch.Tensor]], List[str]]:
    """Starts ``world`` workers; returns their results, parameters and stderr
    (whose warnings count for the mode, unless ``expect_warnings``)."""
    port = random.randint(20000, 40000)
    procs = []
    for rank in range(world):
        out = os.path.join(tmp, f"{tag}-{rank}.json")
        cmd = [PYTHON, os.path.join(HERE, "worker.py"), "--rank", str(rank), "--world", str(world),
               "--port", str(port), "--mode", mode, "--out", out] + extra
        err = open(os.path.join(tmp, f"{tag}-{rank}.err"), "w+")
        procs.append((subprocess.Popen(cmd, stderr=err, env={**WORKER_ENV, **(env or {})}), out, err))
    results, params, errs = [], [], []
    for p, out, err in procs:
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q, _, _ in procs:
                q.kill()
            rc = "timeout"
        err.seek(0)
        errs.append(err.read())
        if not expect_warnings:
            note_warnings(mode, errs[-1])
        if rc != 0:
            raise RuntimeError(f"{tag}: worker exit {rc}: {errs[-1][-2000:]}")
        with open(out) as f:
            results.append(json.load(f))
        params.append(torch.load(out + ".pt"))
    return results, params, errs


def max_relative_difference(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> float:
    """Largest over floating-point tensors of max|a - b| / max|b|."""
    worst = 0.0
    for name, ref in b.items():
        if not ref.is_floating_point():
            if not torch.equal(a[name], ref):
                return float("inf")
            continue
        scale = float(ref.abs().max()) or 1.0
        worst = max(worst, float((a[name] - ref).abs().max()) / scale)
    return worst


def logged_difference(a: List[float], b: List[float]) -> float:
    """Largest relative difference between two loops' logged values."""
    if len(a) != len(b):
        return float("inf")
    return max([abs(x - y) / (abs(y) or 1.0) for x, y in zip(a, b)], default=0.0)


# Every loop of tests/torch/loops.py, with its limit; those whose result
# depends on the reduction also run with 4 workers.
LOOPS = {name: TOLERANCE for name in training_loops.LOOPS}
LOOPS["autocast-bf16"] = 1e-2   # bf16's precision
FOUR_WORKERS = ("accumulate", "accumulate-no-sync", "clip-plain", "clip-method", "grad-norm-read",
                "unused-parameters", "ema-after-step", "ema-of-deepcopy", "clamp-after-step", "deepcopy-after-step")


MODES = ("mercury", "ps")   # the modes checked against DDP: mercury.torch on each backend


def run_loops(tmp: str, world: int, loops: List[str], servers: str) -> Dict[str, List[dict]]:
    """Every mode, ``world`` workers, every loop in one process per worker;
    {mode: [per-rank results]}."""
    out: Dict[str, List[dict]] = {}
    for mode in ("ddp",) + MODES:
        port = random.randint(20000, 40000)
        procs = []
        for rank in range(world):
            path = os.path.join(tmp, f"loops-{mode}-{world}w-{rank}.pt")
            err = open(path + ".err", "w+")
            cmd = [PYTHON, os.path.join(HERE, "loops.py"), "--rank", str(rank), "--world", str(world),
                   "--port", str(port), "--mode", mode, "--servers", servers, "--out", path] + loops
            procs.append((subprocess.Popen(cmd, stderr=err, env=WORKER_ENV), path, err))
        out[mode] = []
        for p, path, err in procs:
            try:
                rc = p.wait(timeout=600)
            except subprocess.TimeoutExpired:
                for q, _, _ in procs:
                    q.kill()
                rc = "timeout"
            err.seek(0)
            stderr = err.read()
            note_warnings(mode, stderr)
            if rc != 0:
                raise RuntimeError(f"{mode} loops, {world} workers: worker exit {rc}: {stderr[-2000:]}")
            out[mode].append(torch.load(path))
    return out


def check_loops(tmp: str, servers: str) -> None:
    for world, loops in ((2, list(LOOPS)), (4, list(FOUR_WORKERS))):
        try:
            res = run_loops(tmp, world, loops, servers)
        except RuntimeError as e:
            for name in loops:
                for mode in MODES:
                    report(f"torch/{mode}/loop-{name}/{world}-workers", False, str(e))
            continue
        for name, mode in ((n, m) for n in loops for m in MODES):
            test = f"torch/{mode}/loop-{name}/{world}-workers"
            limit = LOOPS[name]
            mine = [r[name] for r in res[mode]]
            ddp = [r[name] for r in res["ddp"]]
            errors = [r["error"] for r in mine + ddp if "error" in r]
            if errors:
                report(test, False, errors[0].strip().replace("\n", " | ")[-600:])
                continue
            diff = max(max(max_relative_difference(m["state"], d["state"]),
                           logged_difference(m["logged"], d["logged"])) for m, d in zip(mine, ddp))
            # Buffers differ between workers under DDP too (BatchNorm's own batches).
            params = mine[0]["parameters"]
            replicas = max(max_relative_difference({k: m["state"][k] for k in params},
                                                   {k: mine[0]["state"][k] for k in params}) for m in mine)
            report(test, diff <= limit and replicas <= limit,
                   f"max relative difference to DDP {diff:.3g} (limit {limit:g}; parameters, buffers and "
                   f"logged values), between replicas {replicas:.3g}")


def check_equivalence(tmp: str, mode: str, optimizer: str, world: int, ddp: List[Dict[str, torch.Tensor]],
                      ctl: List[str]) -> None:
    """``mode`` trains as DDP did: the same parameters, identical replicas,
    on more than one lane; with 2 workers and SGD, its lane sockets are in
    the datapath and the agent learned the timings."""
    name = f"torch/{mode}/ddp-equivalence-{optimizer}/{world}-workers"
    checks = ["--check-lanes", "--check-timings"] if (optimizer, world) == ("sgd", 2) else []
    try:
        res, mine, _ = run(tmp, f"{mode}-{optimizer}-{world}w", world, mode, ["--optimizer", optimizer] + checks + ctl)
    except RuntimeError as e:
        report(name, False, str(e))
        return
    lanes = res[0]["lanes"]
    diff = max(max_relative_difference(m, d) for m, d in zip(mine, ddp))
    replicas = max(max_relative_difference(m, mine[0]) for m in mine)
    report(name, diff <= TOLERANCE and replicas == 0 and lanes > 1,
           f"max relative difference to DDP {diff:.3g} (limit {TOLERANCE:g}), between replicas "
           f"{replicas:.3g}, {lanes} lanes{'' if lanes > 1 else ': ' + str(res[0]['single_lane_reason'])}")
    if checks:
        errors = [r["lanes_error"] for r in res if r["lanes_error"]]
        report(f"torch/{mode}/lanes-registered", not errors,
               "; ".join(errors) if errors else
               f"{world} workers x {lanes} lanes: every lane socket in the datapath at its lane's rank, "
               "every layer on the lane of its rank and bytes")
        t = res[0].get("timings_error")
        report(f"torch/{mode}/timings-learned", t == "",
               t or "mercuryctl status shows per-layer forward/backward times and ranks in forward order")


def check_warnings() -> None:
    """mercury.torch warns of nothing DDP does not, on this PyTorch: a
    deprecated or changed API it uses shows here first."""
    ddp = warnings_seen.get("ddp", {})
    for mode in MODES:
        new = sorted(line for key, line in warnings_seen.get(mode, {}).items() if key not in ddp)
        report(f"torch/{mode}/no-new-warnings", not new,
               " | ".join(w[:400] for w in new) if new else
               f"its workers printed no warning DDP's did not ({len(ddp)} distinct from DDP's)")


def check_gpu_backend_here() -> None:
    """backend="nccl" needs a GPU PyTorch 2.8 with NCCL 2.26: on this
    machine's PyTorch it is refused, naming the version; and the GPU check's
    own comparison runs (scripts/gpu-check.sh, on the CPU)."""
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    from mercury.torch.nccl import check_nccl
    try:
        check_nccl()
        report("torch/nccl/refused-here", False, "check_nccl() accepted a machine without a GPU")
    except RuntimeError as e:
        report("torch/nccl/refused-here", f"PyTorch {torch.__version__}" in str(e), str(e))
    out = subprocess.run([PYTHON, os.path.join(HERE, "..", "gpu", "check.py"), "--cpu"], capture_output=True,
                         text=True, timeout=300, env=WORKER_ENV)
    report("torch/gpu-check-cpu", out.returncode == 0 and "PASS gloo-cpu/ddp-equivalence" in out.stdout,
           " | ".join((out.stdout + out.stderr).strip().splitlines()[-3:]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mercuryctl", required=True)
    ap.add_argument("--servers", required=True, help="the mercury-ps servers, HOST:PORT,...")
    args = ap.parse_args()
    ctl = ["--mercuryctl", args.mercuryctl, "--servers", args.servers]
    print(f"== PyTorch {torch.__version__}, Python {sys.version.split()[0]}", flush=True)
    with tempfile.TemporaryDirectory(prefix="mercury-torch-") as tmp:
        reference = {}
        for optimizer in ("sgd", "adam"):
            for world in (2, 4):
                tag = f"{optimizer}-{world}w"
                try:
                    _, ddp, _ = run(tmp, "ddp-" + tag, world, "ddp", ["--optimizer", optimizer])
                except RuntimeError as e:
                    for mode in MODES:
                        report(f"torch/{mode}/ddp-equivalence-{optimizer}/{world}-workers", False, str(e))
                    continue
                reference[tag] = ddp[0]
                for mode in MODES:
                    check_equivalence(tmp, mode, optimizer, world, ddp, ctl)

        check_loops(tmp, args.servers)

        # No agent: a single lane, one warning, the same parameters.
        try:
            res, mine, errs = run(tmp, "no-agent", 2, "mercury", ["--optimizer", "sgd"] + ctl,
                                  env={"MERCURY_SOCKET": os.path.join(tmp, "no-such-agent.sock")},
                                  expect_warnings=True)
            diff = max(max_relative_difference(m, reference["sgd-2w"]) for m in mine[:1])
            warnings = [e.count("training on a single lane") for e in errs]
            report("torch/no-agent", diff <= TOLERANCE and all(r["lanes"] == 1 for r in res) and warnings == [1, 1],
                   f"lanes {[r['lanes'] for r in res]}, warnings per worker {warnings}, "
                   f"max relative difference to DDP {diff:.3g}")
        except (RuntimeError, KeyError) as e:
            report("torch/no-agent", False, str(e))
        check_warnings()
    check_gpu_backend_here()
    print(f"torch: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
