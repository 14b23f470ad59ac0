# SPDX-License-Identifier: GPL-2.0
"""experiment/report/bench-torch-report.py: tuned DDP and ByteScheduler,
simulated columns, points per model, and a run below the bound is an error."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from conftest import TOP

sys.path.insert(0, os.path.join(TOP, "experiment"))
import torchsim  # noqa: E402

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


def test_lane_modes_simulated_with_the_buckets_their_runs_had(tmp_path) -> None:
    # Runs that record bucket_bytes are simulated with those buckets; runs
    # from before the record with mercury.torch's default on the shrunk model.
    a = tmp_path / "small-layers.txt"    # three layers per lane: the default bundles them
    a.write_text("".join(f"layer{i} 10 20 {40_000 if i == 0 else 120_000}\n" for i in range(24)))
    a = str(a)
    layers = torchsim.bench_layers(torchsim.read_profile(a), 1, 1.0)
    kw = dict(workers=4, rate_mbit=50, step_latency_s=0.0002, lanes=8)
    for recorded, buckets in ((None, torchsim.MERCURY_BUCKET_BYTES), (1, 1)):
        runs = [dict(run("a", a, m, rep, 3.0), bucket_bytes=recorded) for rep in range(2)
                for m in ("one-lane", "full")]
        done, out = report(tmp_path, runs)
        assert done.returncode == 0, done.stdout + done.stderr
        sim = out["points"][0]["simulated"]
        for mode in ("one-lane", "priority"):
            assert sim[mode] == torchsim.simulate_mode(mode, layers, bucket_bytes=buckets, **kw).iteration_s
    one_layer_each = torchsim.simulate_mode("priority", layers, bucket_bytes=1, **kw).iteration_s
    assert one_layer_each != torchsim.simulate_mode("priority", layers, **kw).iteration_s
