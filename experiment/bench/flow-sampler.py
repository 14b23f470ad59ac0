#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Samples every TCP connection of this network namespace with ``ss`` until
SIGTERM (or --seconds), for diagnosing a bench run: each lane's window,
what it has in flight and unsent, its smoothed RTT and the bytes acked.

usage: flow-sampler.py sample OUT.jsonl [--interval S] [--seconds S] [--agent SOCKET]
       flow-sampler.py timeline IN.jsonl [--peer ADDR]

``sample`` writes one JSON line per sample: {"t": CLOCK_MONOTONIC s (the clock of
mercury.torch's MERCURY_TORCH_TRACE), "flows": [{"local", "peer", "cwnd",
"unacked", "notsent", "rtt_ms", "bytes_acked", ...}]}, and, once a second
with --agent, {"t", "ranks": {local address: rank}} from ``mercuryctl
flows``. ``ss`` itself takes some milliseconds per sample and some CPU: a
sampled run is for explaining, not for measuring. ``timeline`` prints, per
interval between two samples, the link's throughput and each ranked flow's
share, window, packets in flight, bytes unsent, RTT and the peer's
receive window ("r?" for flows
mercuryd does not know, such as lanes on cubic; with --peer, flows to that
address only: in a ring, the neighbour this worker sends to).
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from typing import Dict, List

FIELDS = {"cwnd": int, "unacked": int, "notsent": int, "bytes_acked": int, "bytes_sent": int,
          "ssthresh": int, "retrans": str, "delivery_rate": str, "snd_wnd": int,
          "rwnd_limited": str, "sndbuf_limited": str}
RTT = re.compile(r"\brtt:([\d.]+)/")


def sample() -> List[dict]:
    return parse(subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True, text=True,
                                check=True).stdout)


def parse(out: str) -> List[dict]:
    """The connections in ``ss -tinH state established``'s output."""
    flows: List[dict] = []
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():   # a socket's first line: queues and addresses
            f = line.split()
            flows.append({"local": f[2], "peer": f[3]} if len(f) >= 4 else {})
            continue
        if not flows:
            continue
        info = flows[-1]
        words = line.split()
        if words and ":" not in words[0]:
            info["cc"] = words[0]
        for w in words:
            key, _, value = w.partition(":")
            if key in FIELDS and value:
                try:
                    info[key] = FIELDS[key](value)
                except ValueError:
                    pass
        m = RTT.search(line)
        if m:
            info["rtt_ms"] = float(m.group(1))
    return [f for f in flows if f]


def ranks(agent: str) -> Dict[str, str]:
    """Local address -> rank, from mercuryctl flows ("-": no rank)."""
    out = subprocess.run(["mercuryctl", "flows", "--socket", agent], capture_output=True, text=True).stdout
    lines = out.splitlines()
    if not lines:
        return {}
    head = lines[0].split()
    if "rank" not in head or "local" not in head:
        return {}
    col, local = head.index("rank"), head.index("local")
    return {f[local]: f[col] for f in (l.split() for l in lines[1:]) if len(f) > col}


def record(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)   # stop as on ^C, samples kept
    end = time.monotonic() + args.seconds if args.seconds > 0 else float("inf")
    next_ranks = 0.0
    with open(args.out, "a") as out:
        try:
            while time.monotonic() < end:
                t = time.monotonic()
                if args.agent and t >= next_ranks:
                    out.write(json.dumps({"t": t, "ranks": ranks(args.agent)}) + "\n")
                    next_ranks = t + 1.0
                out.write(json.dumps({"t": t, "flows": sample()}) + "\n")
                time.sleep(args.interval)
        except KeyboardInterrupt:
            pass
    return 0


def timeline(args: argparse.Namespace) -> int:
    rank_of: Dict[str, str] = {}
    prev = None
    for line in open(args.input):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue   # a line cut short when the sampler was stopped

        if "ranks" in rec:
            rank_of.update(rec["ranks"])
            continue
        cur = {f["local"]: f for f in rec["flows"]
               if "local" in f and (not args.peer or f["peer"].startswith(args.peer + ":"))}
        if prev is not None:
            dt = rec["t"] - prev[0]
            total, parts = 0, []
            for local, f in sorted(cur.items(), key=lambda kv: rank_of.get(kv[0], "?")):
                before = prev[1].get(local)
                if before is None:
                    continue
                acked = f.get("bytes_acked", 0) - before.get("bytes_acked", 0)
                total += acked
                if acked > 0 or f.get("unacked", 0) or f.get("notsent", 0):
                    parts.append(f"r{rank_of.get(local, '?')} {acked * 8 / dt / 1e6:5.1f} cwnd {f.get('cwnd', 0):3d} "
                                 f"out {f.get('unacked', 0):3d} unsent {f.get('notsent', 0) // 1000:4d}k "
                                 f"rtt {f.get('rtt_ms', 0):5.1f} wnd {f.get('snd_wnd', 0) // 1000:4d}k")
            print(f"{rec['t']:.3f} {total * 8 / dt / 1e6:6.1f} Mbit/s | " + " | ".join(parts))
        prev = (rec["t"], cur)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("sample", help="sample this netns's connections")
    rec.add_argument("out")
    rec.add_argument("--interval", type=float, default=0.005, help="pause between samples, s")
    rec.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: at SIGTERM)")
    rec.add_argument("--agent", help="mercuryd's socket, to label flows with their ranks")
    tl = sub.add_parser("timeline", help="print a sampled run's per-rank throughput")
    tl.add_argument("input")
    tl.add_argument("--peer", help="only flows to this address")
    args = ap.parse_args()
    return record(args) if args.command == "sample" else timeline(args)


if __name__ == "__main__":
    sys.exit(main())
