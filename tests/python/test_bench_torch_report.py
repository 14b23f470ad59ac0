# SPDX-License-Identifier: GPL-2.0
"""experiment/report/bench-torch-report.py: tuned DDP and ByteScheduler,
simulated columns, points per model, and a run below the bound is an error."""
from __future__ import annotations

import json
import os
import statistics
import subprocess

from conftest import TOP

REPORT = os.path.join(TOP, "experiment", "report", "bench-torch-report.py")


def run(model: str, profile: str, mode: str, repeat: int, seconds: float) -> dict:
    return {"label": "emulated-4w", "model": model, "compute": "emulated", "workers": 4, "mode": mode,
            "repeat": repeat, "cc": "mercury" if mode == "full" else "cubic", "model_bytes": 400_000,
            "byte_divisor": 1, "compute_s": 1.0, "profile": profile, "lanes": 8, "step_latency_s": 0.0002,
            "iteration_s": seconds, "wait_s": None, "cpu_util": 0.1, "rate_mbit": 50}


def report(tmp_path, runs) -> tuple:
    src = tmp_path / "runs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in runs))
    done = subprocess.run(["/usr/bin/python3", REPORT, str(src), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    return done, json.loads((tmp_path / "out.json").read_text())


def profile(tmp_path, name: str) -> str:
    path = tmp_path / f"{name}.txt"
    path.write_text("# name forward_ms backward_ms param_bytes\n"
                    + "".join(f"layer{i} 10 20 {40_000 * (i + 1)}\n" for i in range(6)))
    return str(path)


def test_points_per_model_tuned_ddp_and_simulated_schedules(tmp_path) -> None:
    a, b = profile(tmp_path, "a"), profile(tmp_path, "b")
    runs = []
    for rep in range(3):
        for model, p in (("a", a), ("b", b)):
            runs += [run(model, p, "ddp@5", rep, 2.0 + 0.01 * rep), run(model, p, "ddp@25", rep, 1.8 + 0.01 * rep),
                     run(model, p, "bytesched@4x2", rep, 1.75), run(model, p, "bytesched@16x2", rep, 1.65),
                     run(model, p, "one-lane", rep, 1.7), run(model, p, "lanes-cubic", rep, 1.6),
                     run(model, p, "full", rep, 1.5 + 0.01 * rep)]
    done, out = report(tmp_path, runs)
    assert done.returncode == 0, done.stdout + done.stderr
    points = {p["model"]: p for p in out["points"]}
    assert set(points) == {"a", "b"}          # one rate, two models: two points
    for p in points.values():
        assert p["ddp_tuned"] == "ddp@25"
        assert p["bytesched_tuned"] == "bytesched@16x2"
        assert "simulated_s" not in p["modes"]["bytesched@16x2"]   # not simulated
        full = p["modes"]["full"]
        # Paired with the tuned DDP, repeat by repeat.
        assert abs(full["speedup_vs_ddp"][0] - statistics.fmean([1.8 / 1.5, 1.81 / 1.51, 1.82 / 1.52])) < 1e-9
        assert full["simulated_s"] == p["simulated"]["priority"]
        assert p["modes"]["lanes-cubic"]["simulated_s"] == p["simulated"]["lanes-fair"]
        assert p["bound_s"] >= p["simulated"]["bound"] and p["simulated"]["bound"] <= p["simulated"]["priority"]
        assert "full not slower than lanes-cubic" in p["targets"]
        assert "full not slower than bytesched" in p["targets"]
        assert abs(full["speedup_vs_bytesched"][0] - statistics.fmean([1.65 / 1.5, 1.65 / 1.51, 1.65 / 1.52])) < 1e-9
    md = (tmp_path / "out.md").read_text()
    assert "ddp@25 (tuned)" in md and "bytesched@16x2 (tuned)" in md


def test_a_run_below_the_bound_fails(tmp_path) -> None:
    a = profile(tmp_path, "a")
    done, out = report(tmp_path, [run("a", a, "full", 0, 0.5), run("a", a, "one-lane", 0, 1.7)])
    assert done.returncode == 1
    assert len(out["violations"]) == 1 and "full" in out["violations"][0]
