#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns experiment/bench/bench.sh's log into a table (stdout and OUT.md), JSON and a
plot.

usage: bench-report.py LOG OUT_PREFIX

For every model and emulated bandwidth: each mode's mean iteration time over
the measured repeats with a 95% confidence interval (Student's t) and the
coefficient of variation, the congestion control its connections ran, the
tuned ByteScheduler setting, the lower bound (mercury-replay bound) and the
simulated schedule (mercury-replay sim). Speedups are per repeat (runs of one
round are interleaved), with a 95% CI. The headline is mercury / bound.

Modes run with BytePS's balanced placement (labels ending in "+balanced", at
BALANCED_POINTS) are reported in a table of their own, against their own bound,
and take no part in the targets or the main speedups.

Targets, reported as met or missed:
- mercury <= 1.10x the bound at every communication-bound point (bound set
  by a link, not by compute);
- mercury never slower than any baseline (upper CI of the speedup >= 1);
- mercury >= 1.1x the tuned ByteScheduler where communication is at least
  half of compute (busiest link time >= compute / 2).
"""
import json
import math
import shutil
import statistics
import subprocess
import sys
from typing import Dict, List, Tuple

# Two-sided 95% Student's t quantiles by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def fields(line: str) -> Dict[str, str]:
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def ci95(values: List[float]) -> Tuple[float, float, float]:
    """mean, half-width of the 95% CI, coefficient of variation."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return float("nan"), float("nan"), float("nan")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    sd = statistics.stdev(values)
    return mean, T95.get(len(values) - 1, 1.96) * sd / math.sqrt(len(values)), sd / mean


def main() -> int:
    log, out = sys.argv[1], sys.argv[2]
    runs, check, points_info = [], {}, {}
    for line in open(log):
        if line.startswith("RESULT "):
            f = fields(line)
            runs.append({"model": f["model"], "gbps": num(f["gbps"]), "mode": f["mode"], "cc": f.get("cc", "?"),
                         "phase": f.get("phase", "measure"), "repeat": int(f.get("repeat", "1")),
                         "mean_s": num(f["mean_s"]), "bound_s": num(f["bound_s"]), "sim_s": num(f["sim_s"]),
                         "bytes_accounted": f["bytes_accounted"] == "yes", "verdict": f.get("verdict", "ok")})
        elif line.startswith("CHECK "):
            check = {k: (v if k == "ok" else num(v)) for k, v in fields(line).items()}
        elif line.startswith("INFO point "):
            parts = line.split(None, 4)
            try:
                info = json.loads(parts[4][parts[4].index("{"):])
                points_info[(info["model"], num(parts[3]))] = info
            except (ValueError, IndexError, KeyError):
                pass
    if not runs:
        sys.exit("bench-report: no RESULT lines in " + log)

    summary = []
    for key in sorted({(r["model"], r["gbps"]) for r in runs}):
        model, gbps = key
        rs = [r for r in runs if (r["model"], r["gbps"]) == key]
        measured = [r for r in rs if r["phase"] == "measure" and not r["mode"].endswith("+balanced")]
        balanced_runs = [r for r in rs if r["phase"] == "measure" and r["mode"].endswith("+balanced")]
        tuned = [r for r in rs if r["phase"] == "tune"]
        bound, sim = rs[0]["bound_s"], rs[0]["sim_s"]
        info = points_info.get(key, {})
        modes = {}
        for r in measured:
            base = "bytescheduler" if r["mode"].startswith("bytescheduler") else r["mode"]
            m = modes.setdefault(base, {"label": r["mode"], "cc": r["cc"], "by_repeat": {}})
            m["by_repeat"][r["repeat"]] = r["mean_s"]
        for m in modes.values():
            m["mean_s"], m["ci_s"], m["cv"] = ci95(list(m["by_repeat"].values()))
        s = {"model": model, "gbps": gbps, "bound_s": bound, "sim_s": sim, "modes": modes,
             "compute_s": info.get("compute_s"), "link_s": info.get("link_s"),
             "busiest_link": info.get("busiest_link"),
             "tuning": sorted(((r["mode"].split(":", 1)[1], r["mean_s"]) for r in tuned), key=lambda t: t[1]),
             "bytes_accounted": all(r["bytes_accounted"] for r in rs),
             "below_bound": [r["mode"] for r in rs if r["verdict"] != "ok"]}
        if balanced_runs:
            placement = {"bound_s": balanced_runs[0]["bound_s"], "modes": {}}
            for r in balanced_runs:
                m = placement["modes"].setdefault(r["mode"], {"cc": r["cc"], "by_repeat": {}})
                m["by_repeat"][r["repeat"]] = r["mean_s"]
            for m in placement["modes"].values():
                m["mean_s"], m["ci_s"], m["cv"] = ci95(list(m["by_repeat"].values()))
            s["placement"] = placement
        merc = modes.get("mercury")
        if merc:
            s["mercury_over_bound"] = merc["mean_s"] / bound
            s["sim_over_bound"] = sim / bound
            s["speedup"] = {}
            for name, m in modes.items():
                if name == "mercury":
                    continue
                ratios = [m["by_repeat"][k] / merc["by_repeat"][k] for k in m["by_repeat"] if k in merc["by_repeat"]]
                mean, ci, _ = ci95(ratios)
                s["speedup"][name] = {"mean": mean, "ci": ci}
            comm_bound = info.get("link_s") is not None and info["link_s"] > info["compute_s"]
            comm_heavy = info.get("link_s") is not None and info["link_s"] >= info["compute_s"] / 2
            targets = {}
            if comm_bound:
                targets["mercury_within_1.10x_bound"] = s["mercury_over_bound"] <= 1.10
            targets["never_slower_than_a_baseline"] = all(
                (v["mean"] + (0 if math.isnan(v["ci"]) else v["ci"])) >= 1.0 for v in s["speedup"].values())
            if comm_heavy and "bytescheduler" in s["speedup"]:
                targets["1.1x_tuned_bytescheduler"] = s["speedup"]["bytescheduler"]["mean"] >= 1.1
            s["targets"] = targets
        summary.append(s)

    lines = []
    lines.append(f"link check: min {check.get('link_util_min', float('nan')):.2f}, mean "
                 f"{check.get('link_util_mean', float('nan')):.2f} of {check.get('rate_mbit', 0):.0f} Mbit/s, "
                 f"{check.get('workers', 0):.0f} workers + {check.get('servers', 0):.0f} servers "
                 f"(>= 0.90 needed: {check.get('ok', '?')})")
    lines.append("")
    order = ["fifo", "fifo-bbr", "bytescheduler", "mercury-noprio", "prio-only", "mercury"]
    lines.append("| model | Gbit/s | bound (s) | " + " | ".join(order) +
                 " | mercury / bound | sim / bound | mercury vs fifo | vs fifo-bbr | vs tuned BS | BS setting |")
    lines.append("|" + "---|" * (len(order) + 9))

    def cell(m):
        if not m:
            return ""
        ci = "" if math.isnan(m["ci_s"]) else f" ±{m['ci_s']:.3f}"
        return f"{m['mean_s']:.3f}{ci} ({m['cc']})"

    def ratio(s, name):
        v = s.get("speedup", {}).get(name)
        if not v:
            return ""
        return f"{v['mean']:.2f}x" + ("" if math.isnan(v["ci"]) else f" ±{v['ci']:.2f}")

    for s in summary:
        bs = s["modes"].get("bytescheduler")
        setting = bs["label"].split(":", 1)[1] if bs else ""
        lines.append(f"| {s['model']} | {s['gbps']:g} | {s['bound_s']:.3f} | " +
                     " | ".join(cell(s["modes"].get(o)) for o in order) +
                     f" | {s.get('mercury_over_bound', float('nan')):.3f} | {s.get('sim_over_bound', float('nan')):.3f}"
                     f" | {ratio(s, 'fifo')} | {ratio(s, 'fifo-bbr')} | {ratio(s, 'bytescheduler')} | {setting} |")
    placed = [s for s in summary if s.get("placement")]
    if placed:
        lines.append("")
        lines.append("Placement: MXNet's (the table above) against BytePS's balanced one, same rounds:")
        lines.append("")
        lines.append("| model | Gbit/s | bound MXNet (s) | bound balanced (s) | fifo | fifo+balanced | mercury"
                     " | mercury+balanced | mercury+balanced / its bound |")
        lines.append("|" + "---|" * 9)
        for s in placed:
            pm = s["placement"]["modes"]
            mb = pm.get("mercury+balanced", {}).get("mean_s", float("nan"))
            lines.append(f"| {s['model']} | {s['gbps']:g} | {s['bound_s']:.3f} | {s['placement']['bound_s']:.3f} | "
                         f"{cell(s['modes'].get('fifo'))} | {cell(pm.get('fifo+balanced'))} | "
                         f"{cell(s['modes'].get('mercury'))} | {cell(pm.get('mercury+balanced'))} | "
                         f"{mb / s['placement']['bound_s']:.3f} |")
    lines.append("")
    for s in summary:
        if s.get("busiest_link"):
            lines.append(f"- {s['model']} at {s['gbps']:g} Gbit/s: compute {s['compute_s']:.3f} s, busiest link "
                         f"({s['busiest_link']}) {s['link_s']:.3f} s; CV of mercury "
                         f"{100 * s['modes'].get('mercury', {}).get('cv', float('nan')):.1f}%, of fifo "
                         f"{100 * s['modes'].get('fifo', {}).get('cv', float('nan')):.1f}%; ByteScheduler grid "
                         f"best {', '.join(f'{k} {v:.3f}' for k, v in s['tuning'][:3])}")
    missed = [(s["model"], s["gbps"], k) for s in summary for k, ok in s.get("targets", {}).items() if not ok]
    met = [(s["model"], s["gbps"], k) for s in summary for k, ok in s.get("targets", {}).items() if ok]
    lines.append("")
    lines.append(f"targets met: {len(met)}; missed: " +
                 (", ".join(f"{m}@{g:g}G {k}" for m, g, k in missed) if missed else "none"))
    below = [(s["model"], s["gbps"], s["below_bound"]) for s in summary if s["below_bound"]]
    lines.append("runs below the bound: " + (", ".join(f"{m}@{g:g}G {b}" for m, g, b in below) if below else "none"))
    text = "\n".join(lines)
    print(text)
    with open(out + ".md", "w") as f:
        f.write(text + "\n")
    with open(out + ".json", "w") as f:
        json.dump({"link_check": check, "runs": runs, "summary": summary}, f, indent=1, default=str)

    if shutil.which("gnuplot"):
        plot(out, summary)
    return 1 if below else 0


def plot(out: str, summary: list) -> None:
    with open(out + ".dat", "w") as f:
        for s in summary:
            if "mercury_over_bound" not in s:
                continue
            fifo = s["modes"].get("fifo", {}).get("mean_s", float("nan"))
            bs = s["modes"].get("bytescheduler", {}).get("mean_s", float("nan"))
            merc = s["modes"]["mercury"]["mean_s"]
            f.write(f"{s['model']}@{s['gbps']:g} {fifo / s['bound_s']:.3f} {bs / s['bound_s']:.3f} "
                    f"{merc / s['bound_s']:.3f}\n")
    script = f"""
set terminal pngcairo size 1000,500 font ",11"
set output "{out}.png"
set title "Iteration time / lower bound (1 = the physical limit); baselines on cubic"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:*]
set ylabel "time / bound"
set xtics rotate by -30
set key top right
plot "{out}.dat" using 2:xtic(1) title "fifo", "" using 3 title "bytescheduler (tuned)", "" using 4 title "mercury"
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=False)


if __name__ == "__main__":
    sys.exit(main())
