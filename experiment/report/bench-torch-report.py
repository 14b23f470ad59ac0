#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Summarises `make bench-torch` runs: mean iteration time with a 95% CI over
repeats, speedups paired by repeat, the lower bound and each run against it.

usage: bench-torch-report.py RUNS.jsonl OUT_PREFIX
Writes OUT_PREFIX.json, OUT_PREFIX.md (the table, also printed) and
OUT_PREFIX.png (gnuplot). Exits 1 if any run beat the lower bound: that is a
bug in the bound or the harness, not a result.
"""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections import defaultdict
from typing import Dict, List, Tuple

MODES = ["ddp", "one-lane", "lanes-cubic", "full"]
CLIP_MODES = [m + "-clip" for m in MODES]
# Ethernet frame on the wire (tbf counts it) per TCP payload with timestamps.
WIRE_PER_PAYLOAD = 1514 / 1448
# Two-sided 95% Student t quantiles by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    return T95.get(df) or T95[max(k for k in T95 if k <= df)] if df >= 1 else float("nan")


def mean_ci(values: List[float]) -> Tuple[float, float]:
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, float("nan")
    return m, t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def lower_bound(run: dict) -> Tuple[float, float]:
    """(bound_s, comm_s): no schedule beats max(compute, bytes on the busiest link / rate).

    All-reduce sends at least 2(N-1)/N of the model out of every worker's
    link (bandwidth-optimal, which Gloo's ring attains).
    """
    n = run["workers"]
    comm = 2 * (n - 1) / n * run["model_bytes"] * WIRE_PER_PAYLOAD * 8 / (run["rate_mbit"] * 1e6)
    return max(run["compute_s"] or 0.0, comm), comm


def main() -> int:
    runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    prefix = sys.argv[2]
    points: Dict[Tuple[str, int], Dict[str, List[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        points[(r["label"], r["rate_mbit"])][r["mode"]].append(r)

    violations = []
    summary = []
    lines = ["| setup | rate Mbit/s | mode | CC | iteration s (95% CI) | CV | vs DDP (paired) | vs one-lane | "
             "vs lanes-cubic | ÷ bound | CPU util |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (label, rate), modes in sorted(points.items()):
        any_run = next(iter(modes.values()))[0]
        bound, comm = lower_bound(any_run)
        by_repeat = {m: {r["repeat"]: r["iteration_s"] for r in rs} for m, rs in modes.items()}
        point = {"setup": label, "rate_mbit": rate, "workers": any_run["workers"], "model": any_run["model"],
                 "byte_divisor": any_run.get("byte_divisor", 1),
                 "model_bytes": any_run["model_bytes"], "compute_s": any_run["compute_s"],
                 "comm_bound_s": comm, "bound_s": bound, "modes": {}}
        for mode in [m for m in MODES + CLIP_MODES if m in modes]:
            times = [r["iteration_s"] for r in modes[mode]]
            m, ci = mean_ci(times)
            cv = statistics.stdev(times) / m if len(times) > 1 else float("nan")
            entry = {"cc": modes[mode][0]["cc"], "mean_s": m, "ci95_s": ci, "cv": cv, "runs": times,
                     "vs_bound": m / bound, "cpu_util": statistics.fmean(r["cpu_util"] for r in modes[mode])}
            for base in ("ddp", "one-lane", "lanes-cubic"):
                if base in by_repeat and mode != base:
                    common = sorted(set(by_repeat[base]) & set(by_repeat[mode]))
                    ratios = [by_repeat[base][k] / by_repeat[mode][k] for k in common]
                    if ratios:
                        entry[f"speedup_vs_{base}"] = mean_ci(ratios)
            point["modes"][mode] = entry
            for t in times:
                if t < bound:
                    violations.append(f"{label} {rate} Mbit/s {mode}: {t:.3f} s < bound {bound:.3f} s")

            def sp(base: str) -> str:
                v = entry.get(f"speedup_vs_{base}")
                return f"{v[0]:.2f}x ± {v[1]:.2f}" if v else "—"
            lines.append(f"| {label} | {rate} | {mode} | {entry['cc']} | {m:.3f} ± {ci:.3f} | {cv:.1%} | "
                         f"{sp('ddp')} | {sp('one-lane')} | {sp('lanes-cubic')} | {m / bound:.2f} | "
                         f"{entry['cpu_util']:.2f} |")
        summary.append(point)
        # What clipping costs each mode: its time with clipping over without, paired by repeat.
        point["clip_cost"] = {}
        for base in MODES:
            if base in by_repeat and base + "-clip" in by_repeat:
                common = sorted(set(by_repeat[base]) & set(by_repeat[base + "-clip"]))
                ratios = [by_repeat[base + "-clip"][k] / by_repeat[base][k] for k in common]
                if ratios:
                    point["clip_cost"][base] = mean_ci(ratios)
        if label.startswith("emulated") and "full" in point["modes"]:
            f = point["modes"]["full"]
            goals = [("full >= 1.3x DDP", f.get("speedup_vs_ddp", (0,))[0] >= 1.3),
                     ("full >= 1.25x one-lane", f.get("speedup_vs_one-lane", (0,))[0] >= 1.25),
                     ("full >= 1.2x lanes-cubic", f.get("speedup_vs_lanes-cubic", (0,))[0] >= 1.2),
                     ("full within 1.15x of the bound", f["vs_bound"] <= 1.15)]
            point["targets"] = {g: ok for g, ok in goals}
    table = "\n".join(lines)
    notes = [f"bound = max(compute, 2(N-1)/N x model bytes x {WIRE_PER_PAYLOAD:.4f} / rate); "
             "real-compute rows: communication part only (compute there is not emulated)"]
    for p in summary:
        if p.get("clip_cost"):
            notes.append(f"{p['setup']} at {p['rate_mbit']} Mbit/s, clipping (clip_grad_norm_ before step) costs: "
                         + ", ".join(f"{m} x{r:.3f} ± {ci:.3f}" for m, (r, ci) in p["clip_cost"].items()))
        if "targets" in p:
            notes.append(f"{p['setup']} at {p['rate_mbit']} Mbit/s (comm {p['comm_bound_s']:.2f} s, compute "
                         f"{p['compute_s']:.2f} s): " + ", ".join(f"{g}: {'met' if ok else 'MISSED'}"
                                                                  for g, ok in p["targets"].items()))
    text = table + "\n\n" + "\n".join(notes) + "\n"
    print(text)
    with open(prefix + ".md", "w") as f:
        f.write(text)
    with open(prefix + ".json", "w") as f:
        json.dump({"points": summary, "violations": violations}, f, indent=1)
    plot(summary, prefix)
    if violations:
        print("FAIL: runs beat the lower bound:\n  " + "\n  ".join(violations))
        return 1
    return 0


def plot(summary: List[dict], prefix: str) -> None:
    emulated = [p for p in summary if p["setup"].startswith("emulated")]
    if not emulated:
        return
    data = prefix + ".dat"
    with open(data, "w") as f:
        f.write("# rate bound " + " ".join(f"{m} {m}_ci" for m in MODES) + "\n")
        for p in sorted(emulated, key=lambda p: p["rate_mbit"]):
            cols = [f"{p['modes'][m]['mean_s']:.4f} {p['modes'][m]['ci95_s']:.4f}" if m in p["modes"] else "NaN NaN"
                    for m in MODES]
            f.write(f"{p['rate_mbit']} {p['bound_s']:.4f} " + " ".join(cols) + "\n")
    divisor = emulated[0].get("byte_divisor", 1)
    series = ", ".join(f"'{data}' using 1:{3 + 2 * i}:{4 + 2 * i} with yerrorlines title '{m}'"
                       for i, m in enumerate(MODES))
    script = (f"set terminal pngcairo size 900,560; set output '{prefix}.png'; set logscale x 2;"
              f"set xlabel 'link rate (Mbit/s), bytes /{divisor}: stands for {divisor}x the rate';"
              f"set ylabel 'iteration time (s), mean and 95% CI';"
              f"set title '{emulated[0]['model']}, {emulated[0]['workers']} workers, emulated compute "
              f"({emulated[0]['compute_s']:.2f} s)';"
              f"set key top right; set grid; plot {series}, '{data}' using 1:2 with lines dt 2 lw 2 title 'lower bound'")
    try:
        subprocess.run(["gnuplot", "-e", script], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"(no plot: {e})")


if __name__ == "__main__":
    sys.exit(main())
