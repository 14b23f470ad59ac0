#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns experiment/bench/bench-jobs.sh's runs into a table (stdout and OUT.md) and JSON.

usage: bench-jobs-report.py OUT_PREFIX      (reads OUT_PREFIX.runs.jsonl)

For every pair of jobs and every mode: each job's iteration time alone and
together (mean over repeats, 95% CI), its slowdown (together / alone, alone in
the same mode) and Jain's fairness index of the two jobs' slowdowns,
(a + b)^2 / (2 (a^2 + b^2)): 1 when both slow down alike.

A job's time together counts only the iterations that lie inside the span in
which both jobs were measuring (after warm-up, before either job's end), on
every worker; its time alone is the replayer's own mean.

Targets, reported as met or missed: with isolation, each job's
slowdown is at most its slowdown under fifo, and each job's iteration time
together is below its time together under fifo.

Link load. When both jobs' busiest link is the same (it is with the same
placement), each iteration of job j keeps that link busy for at least link_s_j
(mercury-replay bound), so any schedule has sum_j link_s_j / t_j <= 1 for the
jobs' iteration times t_j together. The report gives that sum per mode (the
share of the link that carried the jobs' bytes), and for the first target the
load it implies (t_j = fifo's slowdown x time alone with isolation): above 1,
no transport can meet it.
"""
from __future__ import annotations

import importlib.util
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

_spec = importlib.util.spec_from_file_location("bench_report", Path(__file__).with_name("bench-report.py"))
assert _spec and _spec.loader
_bench_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench_report)
ci95 = _bench_report.ci95

Worker = dict
ALONE_OF = {"fifo": "fifo", "mercury-shared": "mercury", "mercury-isolated": "mercury-isolated"}
TOGETHER_MODES = ["fifo", "mercury-shared", "mercury-isolated"]


def boundaries(w: Worker) -> List[float]:
    """Iteration boundaries on the worker's CLOCK_MONOTONIC, from its end back."""
    iters = w["iterations"]
    start = w["measured_to_s"] - sum(iters)
    out = [start]
    for t in iters:
        out.append(out[-1] + t)
    return out


def measured_span(workers: List[Worker]) -> Tuple[float, float]:
    """When every worker of a job was past warm-up, until the first one ended."""
    return max(w["measured_from_s"] for w in workers), min(w["measured_to_s"] for w in workers)


def mean_inside(workers: List[Worker], lo: float, hi: float) -> Tuple[float, int]:
    """Mean time of the iterations inside [lo, hi], over all workers; and how many."""
    times = []
    for w in workers:
        b = boundaries(w)
        times += [b[i + 1] - b[i] for i in range(len(b) - 1) if b[i] >= w["measured_from_s"] - 1e-9
                  and b[i] >= lo and b[i + 1] <= hi]
    return (statistics.fmean(times), len(times)) if times else (float("nan"), 0)


def jain(values: List[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return float("nan")
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def load(path: Path) -> List[dict]:
    runs = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                runs.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}: not JSON ({e}): {line[:120]}")
    return [r for r in runs if r.get("role") == "worker"]


def load_bounds(path: Path) -> Dict[Tuple[str, str], dict]:
    """(pair, job) -> the job's bound line (link_s, busiest_link)."""
    out = {}
    for line in path.read_text().splitlines():
        if '"role":"bound"' in line:
            b = json.loads(line)
            out[(b["pair"], b["job"])] = b
    return out


def link_load(pair: str, r: dict, bounds: Dict[Tuple[str, str], dict]) -> Optional[dict]:
    """Per mode, sum_j link_s_j / t_j on the jobs' shared busiest link; and
    what the first target would load it to. None unless the link is shared."""
    b = [bounds.get((pair, job)) for job in r["jobs"]]
    if not all(b) or len({x["busiest_link"] for x in b}) != 1:
        return None
    link_s = {job: x["link_s"] for job, x in zip(r["jobs"], b)}
    per_mode = {}
    for label, mode in r["modes"].items():
        jobs = mode["jobs"]
        if all(job in jobs for job in r["jobs"]):
            per_mode[label] = sum(link_s[job] / jobs[job]["together_s"] for job in r["jobs"])
    iso, fifo = r["modes"].get("mercury-isolated", {}).get("jobs", {}), r["modes"].get("fifo", {}).get("jobs", {})
    target = None
    if all(job in iso and job in fifo for job in r["jobs"]):
        target = sum(link_s[job] / (fifo[job]["slowdown"] * iso[job]["alone_s"]) for job in r["jobs"])
    return {"link": b[0]["busiest_link"], "link_s": link_s, "by_mode": per_mode, "target_slowdown_load": target}


def analyse(workers: List[dict]) -> dict:
    # (pair, setting, label, repeat) -> job -> workers
    groups: Dict[Tuple[str, str, str, int], Dict[str, List[Worker]]] = defaultdict(lambda: defaultdict(list))
    for w in workers:
        groups[(w["pair"], w["setting"], w["label"], int(w["repeat"]))][w["job"]].append(w)

    # per (pair, job, setting, label): a value per repeat
    times: Dict[Tuple[str, str, str, str], Dict[int, float]] = defaultdict(dict)
    overlap_iters: Dict[Tuple[str, str, str], List[int]] = defaultdict(list)
    for (pair, setting, label, repeat), jobs in groups.items():
        if setting == "alone":
            for job, ws in jobs.items():
                times[(pair, job, "alone", label)][repeat] = statistics.fmean(w["mean_s"] for w in ws)
            continue
        spans = [measured_span(ws) for ws in jobs.values()]
        lo, hi = max(s[0] for s in spans), min(s[1] for s in spans)
        for job, ws in jobs.items():
            mean, n = mean_inside(ws, lo, hi)
            times[(pair, job, "together", label)][repeat] = mean
            overlap_iters[(pair, job, label)].append(n)

    pairs: Dict[str, dict] = {}
    for (pair, job, setting, label), per_repeat in times.items():
        entry = pairs.setdefault(pair, {"jobs": set(), "modes": {}})
        entry["jobs"].add(job)
        mean, half, cv = ci95(list(per_repeat.values()))
        entry["modes"].setdefault(label, {}).setdefault(job, {})[setting] = {
            "mean_s": mean, "ci95_s": half, "cv": cv, "repeats": dict(sorted(per_repeat.items()))}

    report = {}
    for pair, entry in sorted(pairs.items()):
        jobs = sorted(entry["jobs"])  # job-a-... before job-b-...
        rows = {}
        for label in TOGETHER_MODES:
            row = {}
            slowdowns_by_repeat: Dict[int, List[float]] = defaultdict(list)
            for job in jobs:
                together = entry["modes"].get(label, {}).get(job, {}).get("together")
                alone = entry["modes"].get(ALONE_OF[label], {}).get(job, {}).get("alone")
                if not together or not alone:
                    continue
                slow = [t / alone["repeats"][r] for r, t in together["repeats"].items() if r in alone["repeats"]]
                for r, t in together["repeats"].items():
                    if r in alone["repeats"]:
                        slowdowns_by_repeat[r].append(t / alone["repeats"][r])
                s_mean, s_half, _ = ci95(slow)
                row[job] = {"alone_s": alone["mean_s"], "alone_ci95_s": alone["ci95_s"],
                            "together_s": together["mean_s"], "together_ci95_s": together["ci95_s"],
                            "slowdown": s_mean, "slowdown_ci95": s_half,
                            "overlap_iterations": overlap_iters.get((pair, job, label), [])}
            j_mean, j_half, _ = ci95([jain(v) for v in slowdowns_by_repeat.values() if len(v) == len(jobs)])
            rows[label] = {"jobs": row, "jain": j_mean, "jain_ci95": j_half}
        report[pair] = {"jobs": jobs, "modes": rows}
    return report


def targets(report: dict) -> Tuple[List[str], List[str]]:
    met, missed = [], []
    for pair, r in report.items():
        load = r.get("link_load")
        if load and load["target_slowdown_load"] and load["target_slowdown_load"] > 1:
            missed.append(f"{pair} slowdown_at_most_fifo out of reach of any transport (it would load "
                          f"{load['link']} to {load['target_slowdown_load']:.2f})")
        iso, fifo = r["modes"].get("mercury-isolated", {}).get("jobs", {}), r["modes"].get("fifo", {}).get("jobs", {})
        for job in r["jobs"]:
            if job not in iso or job not in fifo:
                missed.append(f"{pair} {job}: no result")
                continue
            (met if iso[job]["slowdown"] <= fifo[job]["slowdown"] else missed).append(
                f"{pair} {job} slowdown_at_most_fifo ({iso[job]['slowdown']:.2f} vs {fifo[job]['slowdown']:.2f})")
            (met if iso[job]["together_s"] < fifo[job]["together_s"] else missed).append(
                f"{pair} {job} beats_fifo ({iso[job]['together_s']:.3f} vs {fifo[job]['together_s']:.3f} s)")
    return met, missed


def fmt(mean: float, half: Optional[float], digits: int = 3) -> str:
    if mean is None or math.isnan(mean):
        return "—"
    if half is None or math.isnan(half):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ±{half:.{digits}f}"


def markdown(report: dict, met: List[str], missed: List[str]) -> str:
    lines = ["| jobs @ Gbit/s | mode | job | alone (s) | together (s) | slowdown | Jain's index |",
             "|---|---|---|---|---|---|---|"]
    for pair, r in report.items():
        for label in TOGETHER_MODES:
            mode = r["modes"].get(label, {})
            for i, job in enumerate(r["jobs"]):
                j = mode.get("jobs", {}).get(job)
                if not j:
                    continue
                jain_cell = fmt(mode["jain"], mode["jain_ci95"]) if i == 0 else ""
                lines.append(f"| {pair} | {label} | {job} | {fmt(j['alone_s'], j['alone_ci95_s'])} | "
                             f"{fmt(j['together_s'], j['together_ci95_s'])} | "
                             f"{fmt(j['slowdown'], j['slowdown_ci95'], 2)} | {jain_cell} |")
    lines.append("")
    for pair, r in report.items():
        load = r.get("link_load")
        if not load:
            continue
        modes = ", ".join(f"{label} {v:.2f}" for label, v in load["by_mode"].items())
        target = load["target_slowdown_load"]
        lines.append(f"Link load on {pair}'s shared busiest link ({load['link']}; 1 = every byte of "
                     f"both jobs at line rate): {modes}"
                     + (f"; the slowdown target would need {target:.2f}" if target else "") + ".")
    lines.append("")
    lines.append(f"Targets: met {len(met)}; missed: {', '.join(missed) if missed else 'none'}")
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    runs = Path(f"{out}.runs.jsonl")
    if not runs.exists():
        print(f"bench-jobs-report: {runs} not found (run experiment/bench/bench-jobs.sh first)", file=sys.stderr)
        return 1
    report = analyse(load(runs))
    bounds = load_bounds(runs)
    for pair, r in report.items():
        r["link_load"] = link_load(pair, r, bounds)
    met, missed = targets(report)
    md = markdown(report, met, missed)
    Path(f"{out}.md").write_text(md)
    Path(f"{out}.json").write_text(json.dumps({"pairs": report, "targets_met": met, "targets_missed": missed},
                                              indent=1, default=list) + "\n")
    print(md, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
