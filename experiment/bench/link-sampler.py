#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Samples the byte counters of the given links' tbf qdiscs until SIGTERM.

usage: link-sampler.py INTERVAL_S NETNS:DEV:LABEL ...

Prints "monotonic_s label bytes" per link and sample (CLOCK_MONOTONIC, the
clock mercury-replay's measured_from_s/measured_to_s use). Links in one
namespace are read with one tc call.
"""
import json
import signal
import subprocess
import sys
import time
from collections import defaultdict


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    interval = float(sys.argv[1])
    by_ns: dict[str, dict[str, str]] = defaultdict(dict)
    for spec in sys.argv[2:]:
        try:
            ns, dev, label = spec.split(":")
        except ValueError:
            print(f"link-sampler: {spec!r} is not NETNS:DEV:LABEL", file=sys.stderr)
            return 2
        by_ns[ns][dev] = label
    running = True

    def stop(_signum: int, _frame: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while running:
        for ns, devs in by_ns.items():
            out = subprocess.run(["tc", "-n", ns, "-j", "-s", "qdisc", "show"],
                                 capture_output=True, text=True, check=False)
            t = time.monotonic()
            if out.returncode != 0:
                continue  # the namespace is not there (yet, or any more)
            for q in json.loads(out.stdout or "[]"):
                label = devs.get(q.get("dev", ""))
                if label and q.get("root"):
                    print(f"{t:.4f} {label} {q['bytes']}", flush=True)
        time.sleep(interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
