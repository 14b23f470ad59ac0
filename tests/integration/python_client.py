# SPDX-License-Identifier: GPL-2.0
"""Drives a real mercuryd through the Python package (used by agent_native.sh)."""
import socket
import sys
import time

sys.path.insert(0, sys.argv[1])
import mercury  # noqa: E402

sock_path, port = sys.argv[2], int(sys.argv[3])
with mercury.Client("py-job", worker_rank=2, socket_path=sock_path) as client:
    assert client.wait_connected(10), "not connected to mercuryd"
    assert client.declare_model([("embed", 4096), ("attn", 8192), ("head", 1024)])
    conn = socket.create_connection(("127.0.0.1", port))
    assert client.register_socket(1, conn)
    cookie = int.from_bytes(conn.getsockopt(socket.SOL_SOCKET, 57, 8), "little")  # SO_COOKIE
    print("registered cookie=%d" % cookie, flush=True)
    for it in range(1, 6):
        assert client.begin_iteration(it)
        assert client.report_timings(it, [300, 500, 200], [600, 900, 400])
    try:
        client.report_timings(6, [1, 2], [1, 2])
        raise AssertionError("a report of the wrong length was accepted")
    except mercury.MercuryError as e:
        assert e.code == mercury.E_INVAL, e
    assert client.subscribe_ranks()
    deadline = time.monotonic() + 10
    ranks = None
    while ranks is None and time.monotonic() < deadline:
        ranks = client.layer_ranks()
        time.sleep(0.02)
    assert ranks is not None and len(ranks.ranks) == 3, ranks
    assert ranks.ranks[0] == 0 and list(ranks.ranks) == sorted(ranks.ranks), ranks
    print("python client ok ranks=%s" % (list(ranks.ranks),))
    sys.stdout.flush()
    time.sleep(float(sys.argv[4]) if len(sys.argv) > 4 else 0)

# Without an agent every call returns False at once (kept for later).
with mercury.Client("orphan", socket_path="/nonexistent/mercury.sock") as lonely:
    assert lonely.declare_model([("a", 1)]) is False
    assert lonely.report_timings(1, [1], [1]) is False
    assert lonely.layer_ranks() is None
    assert mercury.strerror(mercury.E_NOAGENT).startswith("mercuryd not connected")
print("python no-agent ok")
