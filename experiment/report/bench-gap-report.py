#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Report of `make bench-gap` (experiment/bench/bench-gap.sh): where each mode loses
time against the bound, measured next to the simulated schedule.

usage: bench-gap-report.py OUT_PREFIX RATE_MBIT

Reads OUT.jsonl (bound, sim and worker JSON lines tagged with point and
mode) and OUT.MODEL-GBPS-MODE.samples (link-sampler.py); writes OUT.md,
OUT.json and, with gnuplot, OUT.png.
"""
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


class ReportError(Exception):
    pass


def load_samples(path: Path) -> dict[str, list[tuple[float, int]]]:
    series: dict[str, list[tuple[float, int]]] = defaultdict(list)
    if not path.exists():
        raise ReportError(f"{path}: no link samples")
    for line in path.read_text().splitlines():
        t, label, b = line.split()
        series[label].append((float(t), int(b)))
    return series


def bytes_at(series: list[tuple[float, int]], t: float) -> float:
    """Counter value at time t, linear between samples."""
    if not series:
        raise ReportError("a link has no samples")
    if t <= series[0][0]:
        return float(series[0][1])
    for (t0, b0), (t1, b1) in zip(series, series[1:]):
        if t0 <= t <= t1:
            return b0 + (b1 - b0) * (t - t0) / (t1 - t0) if t1 > t0 else float(b1)
    return float(series[-1][1])


def utilisation(series: list[tuple[float, int]], t0: float, t1: float, rate_mbit: float) -> float:
    if t1 <= t0:
        return float("nan")
    return (bytes_at(series, t1) - bytes_at(series, t0)) * 8 / ((t1 - t0) * rate_mbit * 1e6)


def merged_waits(workers: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """Per layer, the workers' mean wait per iteration; longest first."""
    per_layer: dict[int, float] = defaultdict(float)
    for w in workers:
        for layer, s in w.get("waits", []):
            per_layer[int(layer)] += s / len(workers)
    return sorted(per_layer.items(), key=lambda kv: -kv[1])


def fmt_waits(waits: list[tuple[int, float]], n: int = 3) -> str:
    return ", ".join(f"{layer}: {s:.3f}" for layer, s in waits[:n]) or "none"


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out, rate = sys.argv[1], float(sys.argv[2])
    lines = [json.loads(x) for x in Path(f"{out}.jsonl").read_text().splitlines() if x.strip()]
    points: list[str] = []
    for x in lines:
        if x["point"] not in points:
            points.append(x["point"])
    rows = []
    series_out: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(dict)
    for point in points:
        model, gbps = point.split(":")
        bound = next(x for x in lines if x["point"] == point and x.get("role") == "bound")
        busiest = bound["busiest_link"]
        srv = busiest.split()[1] if busiest.startswith("server ") else "0"
        modes = [m for m in dict.fromkeys(x["mode"] for x in lines if x["point"] == point) if m != "bound"]
        for mode in modes:
            sim = next(x for x in lines if x["point"] == point and x["mode"] == mode and x.get("role") == "sim")
            # mercury: the sim with mercuryd's ranks is what its transport could reach.
            ranked = next((x for x in lines if x["point"] == point and x["mode"] == mode
                           and x.get("role") == "sim-ranks"), sim)
            workers = [x for x in lines if x["point"] == point and x["mode"] == mode and x.get("role") == "worker"]
            if not workers:
                raise ReportError(f"{point} {mode}: no worker results")
            t0 = max(w["measured_from_s"] for w in workers)
            t1 = min(w["measured_to_s"] for w in workers)
            samples = load_samples(Path(f"{out}.{model}-{gbps}-{mode}.samples"))
            util = {label: utilisation(s, t0, t1, rate) for label, s in samples.items()}
            ups = [v for k, v in util.items() if k.startswith("up-w")]
            downs = [v for k, v in util.items() if k.startswith("down-w")]
            mean = sum(w["mean_s"] for w in workers) / len(workers)
            row = {
                "model": model, "gbps": float(gbps), "mode": mode, "cc": workers[0].get("cc"),
                "mean_s": mean, "bound_s": bound["bound_s"], "compute_s": bound["compute_s"],
                "busiest_link": busiest, "sim_s": sim["mean_s"], "sim_ranks_s": ranked["mean_s"],
                "forward_wait_s": sum(w["forward_wait_s"] for w in workers) / len(workers),
                "sim_forward_wait_s": ranked["forward_wait_s"],
                "waits": merged_waits(workers), "sim_waits": [tuple(x) for x in ranked["waits"]],
                "util_busiest_down": util.get(f"down-s{srv}"), "util_busiest_up": util.get(f"up-s{srv}"),
                "util_worker_up_mean": sum(ups) / len(ups) if ups else None,
                "util_worker_down_mean": sum(downs) / len(downs) if downs else None,
            }
            rows.append(row)
            # The busiest downlink over time, from the first measured iteration.
            s = samples.get(f"down-s{srv}", [])
            series_out[point][mode] = [
                (ta - t0, (bb - ba) * 8 / ((tb - ta) * rate * 1e6))
                for (ta, ba), (tb, bb) in zip(s, s[1:]) if t0 <= ta and tb <= t1 and tb > ta]

    md = [
        "| model | Gbit/s | mode (CC) | iteration (s) | ÷ bound | sim, per layer (s) | sim, same ranks (s) "
        "| run ÷ sim same ranks | compute (s) | forward waits (s): run / sim | busiest link use, down / up "
        "| worker links use, up / down | longest waits, run (layer: s) | longest waits, sim |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['model']} | {r['gbps']:g} | {r['mode']} ({r['cc']}) | {r['mean_s']:.3f} "
            f"| {r['mean_s'] / r['bound_s']:.3f} | {r['sim_s']:.3f} | {r['sim_ranks_s']:.3f} "
            f"| {r['mean_s'] / r['sim_ranks_s']:.3f} "
            f"| {r['compute_s']:.3f} | {r['forward_wait_s']:.3f} / {r['sim_forward_wait_s']:.3f} "
            f"| {r['util_busiest_down']:.2f} / {r['util_busiest_up']:.2f} "
            f"| {r['util_worker_up_mean']:.2f} / {r['util_worker_down_mean']:.2f} "
            f"| {fmt_waits(r['waits'])} | {fmt_waits(r['sim_waits'])} |")
    md.append("")
    for r in rows:
        md.append(f"- {r['model']} at {r['gbps']:g} Gbit/s, {r['mode']}: bound {r['bound_s']:.3f} s "
                  f"({r['busiest_link']}); an iteration is compute {r['compute_s']:.3f} s plus forward waits "
                  f"{r['forward_wait_s']:.3f} s (sum {r['compute_s'] + r['forward_wait_s']:.3f}, "
                  f"measured {r['mean_s']:.3f}); in the simulated schedule with the same ranks the waits are "
                  f"{r['sim_forward_wait_s']:.3f} s")
    Path(f"{out}.md").write_text("\n".join(md) + "\n")
    Path(f"{out}.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(md))

    if shutil.which("gnuplot") and series_out:
        dat = Path(f"{out}.dat")
        blocks, plots = [], []
        for point, by_mode in series_out.items():
            for mode, pts in by_mode.items():
                plots.append(f"'{dat}' index {len(blocks)} with lines title '{point} {mode}'")
                blocks.append("\n".join(f"{t:.3f} {u:.4f}" for t, u in pts) or "0 0")
        dat.write_text("\n\n\n".join(blocks) + "\n")
        script = (f'set terminal pngcairo size 1000,500 font ",11"\nset output "{out}.png"\n'
                  'set xlabel "seconds from the first measured iteration"\n'
                  'set ylabel "busiest server downlink, share of the rate"\nset yrange [0:1.1]\nset key outside\n'
                  f"plot {', '.join(plots)}\n")
        subprocess.run(["gnuplot"], input=script, text=True, check=False)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ReportError, KeyError, StopIteration, ValueError) as e:
        print(f"bench-gap-report: {e!r}", file=sys.stderr)
        sys.exit(1)
