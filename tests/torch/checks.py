# SPDX-License-Identifier: GPL-2.0
"""The torch checks of `make torchtest`: real Gloo processes train the same
model as DDP and with mercury.torch, and must end with the same parameters.

usage: checks.py --mercuryctl PATH [--no-agent-socket PATH]
Runs in a network namespace with mercuryd reachable at $MERCURY_SOCKET and a
Mercury datapath registered. Prints PASS/FAIL lines and "N passed, M failed".
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"   # Debian's, the one with torch
TOLERANCE = 1e-5
passed = failed = 0


def report(name: str, ok: bool, detail: str) -> None:
    global passed, failed
    print(("PASS " if ok else "FAIL ") + name + ("  # " if ok else ": ") + detail, flush=True)
    passed, failed = passed + ok, failed + (not ok)


def run(tmp: str, tag: str, world: int, mode: str, extra: List[str], env: Optional[Dict[str, str]] = None,
        timeout: int = 300) -> Tuple[List[dict], List[Dict[str, torch.Tensor]], List[str]]:
    """Starts ``world`` workers; returns their results, parameters and stderr."""
    port = random.randint(20000, 40000)
    procs = []
    for rank in range(world):
        out = os.path.join(tmp, f"{tag}-{rank}.json")
        cmd = [PYTHON, os.path.join(HERE, "worker.py"), "--rank", str(rank), "--world", str(world),
               "--port", str(port), "--mode", mode, "--out", out] + extra
        err = open(os.path.join(tmp, f"{tag}-{rank}.err"), "w+")
        procs.append((subprocess.Popen(cmd, stderr=err, env={**os.environ, **(env or {})}), out, err))
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
        if rc != 0:
            raise RuntimeError(f"{tag}: worker exit {rc}: {errs[-1][-2000:]}")
        with open(out) as f:
            results.append(json.load(f))
        params.append(torch.load(out + ".pt"))
    return results, params, errs


def max_relative_difference(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> float:
    """Largest over parameter tensors of max|a - b| / max|b|."""
    worst = 0.0
    for name, ref in b.items():
        scale = float(ref.abs().max()) or 1.0
        worst = max(worst, float((a[name] - ref).abs().max()) / scale)
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mercuryctl", required=True)
    args = ap.parse_args()
    ctl = ["--mercuryctl", args.mercuryctl]
    with tempfile.TemporaryDirectory(prefix="mercury-torch-") as tmp:
        reference = {}
        for optimizer in ("sgd", "adam"):
            for world in (2, 4):
                tag = f"{optimizer}-{world}w"
                name = f"torch/ddp-equivalence-{optimizer}/{world}-workers"
                try:
                    _, ddp, _ = run(tmp, "ddp-" + tag, world, "ddp", ["--optimizer", optimizer])
                    checks = ["--check-lanes", "--check-timings"] if (optimizer, world) == ("sgd", 2) else []
                    res, mine, _ = run(tmp, "mercury-" + tag, world, "mercury",
                                       ["--optimizer", optimizer] + checks + ctl)
                except RuntimeError as e:
                    report(name, False, str(e))
                    continue
                reference[tag] = ddp[0]
                lanes = res[0]["lanes"]
                diff = max(max_relative_difference(m, d) for m, d in zip(mine, ddp))
                replicas = max(max_relative_difference(m, mine[0]) for m in mine)
                report(name, diff <= TOLERANCE and replicas == 0 and lanes > 1,
                       f"max relative difference to DDP {diff:.3g} (limit {TOLERANCE:g}), between replicas "
                       f"{replicas:.3g}, {lanes} lanes{'' if lanes > 1 else ': ' + str(res[0]['single_lane_reason'])}")
                if checks:
                    errors = [r["lanes_error"] for r in res if r["lanes_error"]]
                    report("torch/lanes-registered", not errors,
                           "; ".join(errors) if errors else
                           f"{world} workers x {lanes} lanes: every lane socket in the datapath at its lane's rank")
                    t = res[0].get("timings_error")
                    report("torch/timings-learned", t == "",
                           t or "mercuryctl status shows per-layer forward/backward times and ranks in forward order")

        # No agent: a single lane, one warning, the same parameters.
        try:
            res, mine, errs = run(tmp, "no-agent", 2, "mercury", ["--optimizer", "sgd"] + ctl,
                                  env={"MERCURY_SOCKET": os.path.join(tmp, "no-such-agent.sock")})
            diff = max(max_relative_difference(m, reference["sgd-2w"]) for m in mine[:1])
            warnings = [e.count("training on a single lane") for e in errs]
            report("torch/no-agent", diff <= TOLERANCE and all(r["lanes"] == 1 for r in res) and warnings == [1, 1],
                   f"lanes {[r['lanes'] for r in res]}, warnings per worker {warnings}, "
                   f"max relative difference to DDP {diff:.3g}")
        except (RuntimeError, KeyError) as e:
            report("torch/no-agent", False, str(e))
    print(f"torch: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
