# SPDX-License-Identifier: GPL-2.0
"""A trainer that starts before its agent (used by agent_native.sh): it
declares a model, reports timings and subscribes while no mercuryd runs,
then waits for the agent the shell starts. The library replays its state
to the new agent; the first ranks it gets must already reflect the timings
(forward 0.1, 0.1, 0.1 and 3.7 ms: every layer's deadline falls in the
first eighth of the pass, so all rank 0, where the model alone would give
0, 2, 4, 6), as in a live session. Exits 0 if they do.

usage: late_agent.py PYTHON_DIR SOCKET
"""
import sys
import time

sys.path.insert(0, sys.argv[1])
import mercury  # noqa: E402


def main() -> int:
    with mercury.Client("late", 0, socket_path=sys.argv[2]) as client:
        client.declare_model([(f"layer{i}", 4096) for i in range(4)])
        client.report_timings(0, [100, 100, 100, 3700], [1000] * 4)
        client.subscribe_ranks()
        print("queued", flush=True)
        deadline = time.monotonic() + 30
        ranks = client.layer_ranks()
        while ranks is None and time.monotonic() < deadline:
            time.sleep(0.01)
            ranks = client.layer_ranks()
        print(f"first ranks: {ranks}")
        return 0 if ranks is not None and ranks.generation == 1 and ranks.ranks == (0, 0, 0, 0) else 1


if __name__ == "__main__":
    sys.exit(main())
