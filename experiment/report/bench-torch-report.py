#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Summarises `make bench-torch` runs: mean iteration time with a 95% CI over
repeats, speedups paired by repeat, each mode beside its simulated schedule
(experiment/torchsim.py, from the same profile, with the ring step latency
the run measured), the lower bound and each run against it.

usage: bench-torch-report.py RUNS.jsonl OUT_PREFIX
Writes OUT_PREFIX.json, OUT_PREFIX.md (the table, also printed) and
OUT_PREFIX.png (gnuplot). Exits 1 if any run beat the lower bound: that is a
bug in the bound or the harness, not a result.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torchsim  # noqa: E402

MODES = ["ddp", "one-lane", "lanes-cubic", "full"]
# backend="ps" (torch_worker.py); simulated (torchsim.simulate_ps_mode) with servers apart.
PS_MODES = ["ps-vanilla", "ps-cubic", "ps-full"]
# The simulated schedule of each measured mode (torchsim.MODES).
SIMULATED = {"ddp": "ddp", "one-lane": "one-lane", "lanes-cubic": "lanes-fair", "full": "priority"}
# The simulator is trusted where it is within this of every measured mode.
SIM_TOLERANCE = 0.10
CLIP_MODES = [m + "-clip" for m in MODES]
# mercury.torch's modes: their waits say what the framework's own time is.
MERCURY_TORCH_MODES = {"one-lane", "lanes-cubic", "full"}
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


def lower_bound(run: dict, share: Optional[float] = None) -> Tuple[float, float]:
    """(bound_s, comm_s): no schedule beats max(compute, bytes on the busiest link / rate).

    All-reduce sends at least 2(N-1)/N of the model out of every worker's
    link (bandwidth-optimal, which Gloo's ring attains); ``share``: another
    fraction of the model on the busiest link.
    """
    n = run["workers"]
    if share is None:
        share = 2 * (n - 1) / n
    # No ACKs: a bound must hold for a receiver that acknowledges less often.
    comm = share * run["model_bytes"] / torchsim.payload_rate(run["rate_mbit"], acks=False)
    return max(run["compute_s"] or 0.0, comm), comm


def ps_bound(run: dict) -> float:
    """No schedule of the ps modes beats max(compute, the busiest link's bytes
    / rate). Servers on hosts of their own (as many as workers): each worker
    link carries the model once each way, each server link its share from
    every worker. Colocated: every host's link carries the others' shares of
    its pushes and of its server's answers, 2(N-1)/N of the model, as the ring."""
    return lower_bound(run, 1.0 if run.get("ps_topology") == "separate" else None)[0]


def simulated(run: dict, step_latency_s: float, modes: List[str], busy_s: Optional[float],
              plain_bucket_bytes: int = torchsim.MERCURY_BUCKET_BYTES) -> Optional[Dict[str, float]]:
    """Each torchsim mode's iteration time for this point, and each ddp@N
    mode's (its caps divided by the byte divisor, as the worker does), or
    None without a profile. The schedules run on the compute the workers
    really spent (@busy_s, the profile's compute stretched by the
    framework's own time per iteration, when measured); the bound on the
    profile's compute alone, so that it stays a bound. The plain lane modes
    with the buckets their runs had (@plain_bucket_bytes)."""
    if not run.get("profile") or run["compute"] != "emulated":
        return None
    profile = torchsim.read_profile(run["profile"])
    kw = dict(workers=run["workers"], rate_mbit=run["rate_mbit"], step_latency_s=step_latency_s,
              lanes=run.get("lanes", 8))
    bare = torchsim.bench_layers(profile, run["byte_divisor"], run["compute_s"])
    layers = torchsim.bench_layers(profile, run["byte_divisor"], max(busy_s or 0.0, run["compute_s"]))
    out = {m: torchsim.simulate_mode(m, layers, bucket_bytes=plain_bucket_bytes, **kw).iteration_s
           for m in torchsim.MODES if m != "bound"}
    out["bound"] = torchsim.simulate_mode("bound", bare, **kw).iteration_s
    for mode in modes:
        setting = torchsim.ddp_setting(mode, run["byte_divisor"])
        if setting:
            out[mode] = torchsim.simulate_mode("ddp", layers, bucket_cap_mb=setting.cap_mb,
                                               ddp_first_bytes=setting.first_bytes, **kw).iteration_s
        lane = torchsim.lane_setting(mode, run["byte_divisor"])
        if lane:
            out[mode] = torchsim.simulate_mode(SIMULATED[lane.mode], layers, bucket_bytes=lane.bucket_bytes,
                                               **kw).iteration_s
    return out


def simulated_ps(run: dict, busy_s: Optional[float]) -> Dict[str, float]:
    """The ps modes' schedules (servers apart; colocated ones are not
    simulated), on the compute the ps runs really spent."""
    if not run.get("profile") or run["compute"] != "emulated" or run.get("ps_topology") != "separate":
        return {}
    layers = torchsim.bench_layers(torchsim.read_profile(run["profile"]), run["byte_divisor"],
                                   max(busy_s or 0.0, run["compute_s"]))
    partition = max(4, torchsim.PS_PARTITION_BYTES // run["byte_divisor"])
    return {m: torchsim.simulate_ps_mode(m, layers, workers=run["workers"], servers=run["workers"],
                                         rate_mbit=run["rate_mbit"], lanes=run.get("lanes", 8),
                                         partition_bytes=partition).iteration_s
            for m in torchsim.PS_MODES}


def tuned_of(modes, prefix: str, by_repeat: Dict[str, Dict[int, float]]) -> Tuple[List[str], Optional[str]]:
    """A grid's modes (``prefix``@...) and the one with the lowest mean: the baseline tuned as its users would."""
    grid = [m for m in ordered(modes) if m == prefix or m.startswith(prefix + "@")]
    return grid, (min(grid, key=lambda m: statistics.fmean(by_repeat[m].values())) if grid else None)


def ordered(modes) -> List[str]:
    """DDP settings first (torch's defaults, then the grid by cap), then the others in MODES order."""
    def cap(m: str) -> float:
        setting = torchsim.ddp_setting(m, 1)
        return setting.cap_mb if setting else 0.0
    ddp = sorted((m for m in modes if m == "ddp" or m.startswith("ddp@")), key=cap)
    bytesched = sorted(m for m in modes if m.startswith("bytesched@"))
    lane_grid = sorted((m for m in modes if torchsim.lane_setting(m, 1)),
                       key=lambda m: (m.partition("@")[0], torchsim.lane_setting(m, 1).bucket_bytes))
    return ddp + bytesched + [m for m in MODES[1:] + CLIP_MODES + PS_MODES if m in modes] + lane_grid


def main() -> int:
    runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    prefix = sys.argv[2]
    points: Dict[Tuple[str, str, int], Dict[str, List[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        points[(r["label"], r["model"], r["rate_mbit"])][r["mode"]].append(r)

    violations = []
    summary = []
    lines = ["| setup | model | rate Mbit/s | mode | CC | iteration s (95% CI) | CV | simulated s | ÷ simulated | "
             "vs DDP, tuned (paired) | vs ByteScheduler, tuned | vs one-lane | vs lanes-cubic | ÷ bound | CPU util |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (label, model, rate), modes in sorted(points.items()):
        any_run = next(iter(modes.values()))[0]
        bound, comm = lower_bound(any_run)
        latencies = [r["step_latency_s"] for rs in modes.values() for r in rs if r.get("step_latency_s")]
        step_latency = statistics.median(latencies) if latencies else 0.0
        # What an iteration costs besides waiting for reductions: compute and the
        # framework's own time (hooks, launches, steps), as mercury.torch's runs measured it.
        busy = [r["iteration_s"] - r["wait_s"] for m, rs in modes.items() if m in MERCURY_TORCH_MODES
                for r in rs if r.get("wait_s") is not None]
        busy_s = statistics.median(busy) if busy else None
        # The plain lane modes' bucket, as their runs recorded it (runs from
        # before the record had mercury.torch's default on the shrunk model).
        plain = next((r["bucket_bytes"] for m, rs in modes.items() if m in MERCURY_TORCH_MODES
                      for r in rs if r.get("bucket_bytes")), torchsim.MERCURY_BUCKET_BYTES)
        sim = simulated(any_run, step_latency, list(modes), busy_s, plain)
        if sim:   # the bound that respects layer dependencies, never below the simple one
            bound = max(bound, sim["bound"])
        ps_runs = [r for m, rs in modes.items() if m in PS_MODES for r in rs]
        if sim and ps_runs:
            ps_busy = [r["iteration_s"] - r["wait_s"] for r in ps_runs if r.get("wait_s") is not None]
            sim.update(simulated_ps(ps_runs[0], statistics.median(ps_busy) if ps_busy else None))
        by_repeat = {m: {r["repeat"]: r["iteration_s"] for r in rs} for m, rs in modes.items()}
        ddp_modes, tuned = tuned_of(modes, "ddp", by_repeat)
        bs_modes, bs_tuned = tuned_of(modes, "bytesched", by_repeat)
        bases = {"ddp": tuned, "bytesched": bs_tuned, "one-lane": "one-lane", "lanes-cubic": "lanes-cubic",
                 "ps-vanilla": "ps-vanilla", "ps-cubic": "ps-cubic"}
        point = {"setup": label, "rate_mbit": rate, "workers": any_run["workers"], "model": model,
                 "byte_divisor": any_run.get("byte_divisor", 1),
                 "model_bytes": any_run["model_bytes"], "compute_s": any_run["compute_s"],
                 "comm_bound_s": comm, "bound_s": bound, "step_latency_s": step_latency, "busy_s": busy_s,
                 "simulated": sim, "ddp_tuned": tuned, "bytesched_tuned": bs_tuned, "modes": {}}
        for mode in ordered(modes):
            times = [r["iteration_s"] for r in modes[mode]]
            m, ci = mean_ci(times)
            cv = statistics.stdev(times) / m if len(times) > 1 else float("nan")
            # The ps modes' own bound: with servers apart, fewer bytes per worker link than a ring.
            mode_bound = ps_bound(modes[mode][0]) if mode in PS_MODES else bound
            entry = {"cc": modes[mode][0]["cc"], "mean_s": m, "ci95_s": ci, "cv": cv, "runs": times,
                     "bound_s": mode_bound, "vs_bound": m / mode_bound,
                     "ps_topology": modes[mode][0].get("ps_topology"),
                     "cpu_util": statistics.fmean(r["cpu_util"] for r in modes[mode])}
            simulated_as = mode if sim and mode in sim else SIMULATED.get(mode)
            if sim and simulated_as in sim:
                entry["simulated_s"] = sim[simulated_as]
                entry["vs_simulated"] = m / entry["simulated_s"]
            for base, base_mode in bases.items():
                if base_mode in by_repeat and mode != base_mode:
                    common = sorted(set(by_repeat[base_mode]) & set(by_repeat[mode]))
                    ratios = [by_repeat[base_mode][k] / by_repeat[mode][k] for k in common]
                    if ratios:
                        entry[f"speedup_vs_{base}"] = mean_ci(ratios)
            point["modes"][mode] = entry
            for t in times:
                if t < mode_bound:
                    violations.append(f"{label} {model} {rate} Mbit/s {mode}: {t:.3f} s < bound {mode_bound:.3f} s")

            def sp(base: str) -> str:
                v = entry.get(f"speedup_vs_{base}")
                return f"{v[0]:.2f}x ± {v[1]:.2f}" if v else "—"
            simcols = (f"{entry['simulated_s']:.3f} | {entry['vs_simulated']:.2f}" if "simulated_s" in entry
                       else "— | —")
            shown = (f"{mode} (tuned)" if (mode == tuned and len(ddp_modes) > 1)
                     or (mode == bs_tuned and len(bs_modes) > 1) else mode)
            if entry["ps_topology"]:
                shown += f", {entry['ps_topology']} servers"
            lines.append(f"| {label} | {model} | {rate} | {shown} | {entry['cc']} | {m:.3f} ± {ci:.3f} | {cv:.1%} | "
                         f"{simcols} | {sp('ddp')} | {sp('bytesched')} | {sp('one-lane')} | {sp('lanes-cubic')} | "
                         f"{m / mode_bound:.2f} | "
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
            point["targets"] = targets(point)
    table = "\n".join(lines)
    notes = [f"bound = the larger of max(compute, 2(N-1)/N x model bytes x {torchsim.WIRE_PER_PAYLOAD:.4f} / rate) and the "
             "simulator's bound (per-layer reductions, no step latency, ideal priority, layer dependencies kept); "
             "simulated = torchsim's schedule of the mode (ddp, one-lane, lanes-fair for lanes-cubic, priority for "
             "full) with the ring step latency measured in the run, on the compute the workers spent besides "
             "waiting (busy: the profile's compute plus the framework's own time, median of mercury.torch's runs); "
             "DDP tuned: of the DDP settings run (torch's defaults, ddp@N: bucket_cap_mb N of the real model), the "
             "one with the lowest mean at that point, against which every 'vs DDP' is paired; ByteScheduler tuned: "
             "likewise of the bytesched@PxC settings run (partitions of P MB of the real model, C in flight; not "
             "simulated); real-compute rows: communication part only"]
    for p in summary:
        ps = [(m, e) for m, e in p["modes"].items() if m in PS_MODES]
        if ps:
            notes.append(f"{p['setup']} {p['model']} at {p['rate_mbit']} Mbit/s, parameter servers "
                         f"({ps[0][1]['ps_topology']}; ps bound {ps[0][1]['bound_s']:.3f} s): " + "; ".join(
                             f"{m} " + ", ".join(f"{v[0]:.2f}x ± {v[1]:.2f} vs {b}" for b in ("ddp", "ps-vanilla", "ps-cubic")
                                                 if (v := e.get(f"speedup_vs_{b}")))
                             for m, e in ps))
        if p.get("clip_cost"):
            notes.append(f"{p['setup']} at {p['rate_mbit']} Mbit/s, clipping (clip_grad_norm_ before step) costs: "
                         + ", ".join(f"{m} x{r:.3f} ± {ci:.3f}" for m, (r, ci) in p["clip_cost"].items()))
        if "targets" in p:
            busy = f", busy {p['busy_s']:.2f} s" if p.get("busy_s") else ""
            notes.append(f"{p['setup']} {p['model']} at {p['rate_mbit']} Mbit/s (comm {p['comm_bound_s']:.2f} s, "
                         f"compute {p['compute_s']:.2f} s{busy}, ring step {p['step_latency_s'] * 1e6:.0f} µs): "
                         + ", ".join(f"{g}: {'met' if ok else 'MISSED'}" for g, ok in p["targets"].items()))
        off = [m for m, e in p["modes"].items() if abs(e.get("vs_simulated", 1.0) - 1) > SIM_TOLERANCE]
        if off:
            notes.append(f"{p['setup']} {p['model']} at {p['rate_mbit']} Mbit/s: measured more than "
                         f"{SIM_TOLERANCE:.0%} off the simulated schedule: "
                         + ", ".join(f"{m} {p['modes'][m]['vs_simulated']:.2f}" for m in off))
    text = summary_table(summary) + "\n\n" + table + "\n\n" + "\n".join(notes) + "\n"
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


def summary_table(summary: List[dict]) -> str:
    """One row per emulated point: each main mode's mean ± CI (simulated), and full's speedups."""
    rows = ["| model | Mbit/s | comm : compute | DDP, tuned | ByteScheduler, tuned | one lane | 8 lanes, cubic "
            "| 8 lanes, mercury | full vs DDP | vs ByteScheduler | vs one lane | vs cubic lanes | full ÷ bound |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in summary:
        if not p["setup"].startswith("emulated"):
            continue
        modes = p["modes"]

        def cell(mode: Optional[str]) -> str:
            e = modes.get(mode) if mode else None
            if not e:
                return "—"
            sim = f" ({e['simulated_s']:.3f})" if "simulated_s" in e else ""
            return f"{e['mean_s']:.3f} ± {e['ci95_s']:.3f}{sim}"

        def speedup(base: str) -> str:
            v = modes.get("full", {}).get(f"speedup_vs_{base}")
            return f"{v[0]:.2f}x ± {v[1]:.2f}" if v else "—"
        tuned, bs = p.get("ddp_tuned"), p.get("bytesched_tuned")
        full = modes.get("full")
        ratio = f"{full['vs_bound']:.2f}" if full else "—"
        rows.append(f"| {p['model']} | {p['rate_mbit']} | {p['comm_bound_s'] / p['compute_s']:.1f} | "
                    f"{cell(tuned)}{f' [{tuned}]' if tuned else ''} | {cell(bs)}{f' [{bs}]' if bs else ''} | "
                    f"{cell('one-lane')} | {cell('lanes-cubic')} | {cell('full')} | {speedup('ddp')} | "
                    f"{speedup('bytesched')} | {speedup('one-lane')} | {speedup('lanes-cubic')} | {ratio} |")
    return "\n".join(rows)


def targets(point: dict) -> Dict[str, bool]:
    """The PyTorch bench's targets for full Mercury at one point."""
    f = point["modes"]["full"]
    out = {}
    for base in ("ddp", "bytesched", "one-lane", "lanes-cubic"):
        v = f.get(f"speedup_vs_{base}")
        if v:   # never slower: no 95% CI of the paired speedup wholly below 1
            half = 0.0 if math.isnan(v[1]) else v[1]
            out[f"full not slower than {base}"] = v[0] + half >= 1.0
    if "vs_simulated" in f:
        out["full within 1.10x of its simulated schedule"] = f["vs_simulated"] <= 1.10
    sim = point.get("simulated")
    if sim and "speedup_vs_one-lane" in f:
        ideal = sim["one-lane"] / sim["priority"]
        if ideal >= 1.15:   # where ideal priority gains, full realises 80% of that gain
            out[f"full realises 80% of the simulated {ideal:.2f}x over one-lane"] = \
                f["speedup_vs_one-lane"][0] - 1 >= 0.8 * (ideal - 1)
    # The VGG-16 targets, where communication ~ compute.
    if point["model"] == "vgg16" and 0.8 <= point["comm_bound_s"] / point["compute_s"] <= 1.25:
        for base, goal in (("ddp", 1.3), ("lanes-cubic", 1.15), ("bytesched", 1.15)):
            v = f.get(f"speedup_vs_{base}")
            if v:
                out[f"full >= {goal}x {base} (VGG-16, comm ~ compute)"] = v[0] >= goal
    return out


def plot(summary: List[dict], prefix: str) -> None:
    """One panel per model: each mode's iteration time against the link rate,
    the simulated priority schedule and the lower bound."""
    emulated = [p for p in summary if p["setup"].startswith("emulated")]
    models = sorted({p["model"] for p in emulated})
    if not models:
        return
    panels = []
    for k, model in enumerate(models):
        data = f"{prefix}-{k}.dat"
        with open(data, "w") as f:
            f.write("# rate bound simulated-priority " + " ".join(f"{m} {m}_ci" for m in MODES) + "\n")
            for p in sorted((p for p in emulated if p["model"] == model), key=lambda p: p["rate_mbit"]):
                shown = {m: p["ddp_tuned"] if m == "ddp" else m for m in MODES}
                cols = [f"{p['modes'][shown[m]]['mean_s']:.4f} {p['modes'][shown[m]]['ci95_s']:.4f}"
                        if shown[m] in p["modes"] else "NaN NaN" for m in MODES]
                prio = f"{p['simulated']['priority']:.4f}" if p.get("simulated") else "NaN"
                f.write(f"{p['rate_mbit']} {p['bound_s']:.4f} {prio} " + " ".join(cols) + "\n")
        first = next(p for p in emulated if p["model"] == model)
        series = ", ".join(f"'{data}' using 1:{4 + 2 * i}:{5 + 2 * i} with yerrorlines "
                           f"title '{'DDP (tuned)' if m == 'ddp' else m}'"
                           for i, m in enumerate(MODES))
        panels.append(f"set title '{model}, {first['workers']} workers, compute {first['compute_s']:.2f} s, "
                      f"bytes /{first.get('byte_divisor', 1)}'; plot {series}, "
                      f"'{data}' using 1:3 with linespoints dt 3 lw 2 title 'simulated priority', "
                      f"'{data}' using 1:2 with linespoints dt 2 lw 2 title 'lower bound'")
    script = (f"set terminal pngcairo size {560 * len(models)},560; set output '{prefix}.png'; "
              f"set multiplot layout 1,{len(models)}; set logscale x 2; set grid; set key top right; "
              "set xlabel 'link rate (Mbit/s)'; set ylabel 'iteration time (s), mean and 95% CI'; "
              + "; ".join(panels) + "; unset multiplot")
    try:
        subprocess.run(["gnuplot", "-e", script], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"(no plot: {e})")


if __name__ == "__main__":
    sys.exit(main())
