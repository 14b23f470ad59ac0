#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""What a mercury-ps server costs: memory per declared gradient byte and CPU
per byte it sums, measured on one server over loopback in a network
namespace of its own (`make bench-ps-cost`, as root).

Workers (threads of this process, mercury.ps's client) declare one model of
``--model-mb`` in 4 MB keys and push and pull it ``--rounds`` times; the
server's resident memory (VmRSS) and CPU time (utime + stime) are read from
/proc before the job, with the job declared, and after the rounds.

usage: ps-cost.py MERCURY_PS [--workers N] [--model-mb M] [--rounds R]
Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from mercury.ps import Connection, PushPull, new_id  # noqa: E402

NS = "mercury-ps-cost"
KEY_ELEMS = 1 << 20     # 4 MB keys
COST_SECRET = "the cost bench's secret, 32 bytes or more"


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mercury_ps")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--model-mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if os.environ.get("MERCURY_PS_COST_IN_NS") != "1":
        subprocess.run(["ip", "netns", "del", NS], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "add", NS], check=True)
        try:
            subprocess.run(["ip", "-n", NS, "link", "set", "lo", "up"], check=True)
            return subprocess.run(["ip", "netns", "exec", NS, sys.executable] + sys.argv,
                                  env={**os.environ, "MERCURY_PS_COST_IN_NS": "1"}).returncode
        finally:
            subprocess.run(["ip", "netns", "del", NS])

    keys = [KEY_ELEMS] * max(1, args.model_mb // 4)
    with tempfile.NamedTemporaryFile("w") as secret:
        secret.write(COST_SECRET + "\n")
        secret.flush()
        server = subprocess.Popen([args.mercury_ps, "--listen", "127.0.0.1:7300", "--job", "cost", "--secret-file",
                                   secret.name, "--cc", "cubic", "--no-agent", "--log-level", "warn"])
        try:
            time.sleep(0.3)
            idle_rss = rss_bytes(server.pid)
            run = new_id()
            conns = [{(0, 0): Connection("127.0.0.1:7300", job="cost", secret=COST_SECRET.encode(),
                                         worker=w, workers=args.workers, lane=0, lanes=1, key_elems=keys,
                                         cc="cubic", run=run, instance=new_id())}
                     for w in range(args.workers)]
            time.sleep(0.2)
            declared_rss = rss_bytes(server.pid)
            engines = [PushPull(c, timeout=120) for c in conns]
            buffers = [[memoryview(bytearray(4 * n)).cast("f") for n in keys] for _ in engines]
            cpu0, t0 = cpu_s(server.pid), time.perf_counter()
            peak: Dict[str, int] = {"rss": declared_rss}

            def worker(i: int) -> None:
                for _ in range(args.rounds):
                    engines[i].push([(0, k, b) for k, b in enumerate(buffers[i])], lane=0).wait()
                    peak["rss"] = max(peak["rss"], rss_bytes(server.pid))

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(engines))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed, cpu = time.perf_counter() - t0, cpu_s(server.pid) - cpu0
            for e in engines:
                e.close()
        finally:
            server.terminate()
            server.wait(timeout=10)
    model = 4 * sum(keys)
    summed = model * args.workers * args.rounds      # bytes the server added up
    print(json.dumps({"workers": args.workers, "model_bytes": model, "rounds": args.rounds,
                      "rss_idle_bytes": idle_rss, "rss_declared_bytes": declared_rss, "rss_peak_bytes": peak["rss"],
                      "memory_per_model_byte": (peak["rss"] - idle_rss) / model,
                      "cpu_s": cpu, "elapsed_s": elapsed, "cpu_s_per_gb_pushed": cpu / (summed / 1e9),
                      "pushed_gbit_s": summed * 8 / elapsed / 1e9}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
