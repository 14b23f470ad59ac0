# SPDX-License-Identifier: GPL-2.0
"""Drives a real mercuryd through the Python wrapper (used by agent_native.sh)."""
import socket
import sys
import time

sys.path.insert(0, sys.argv[1])
import mercury  # noqa: E402

sock_path, port = sys.argv[2], int(sys.argv[3])
with mercury.Client("py-job", worker_rank=2, socket_path=sock_path) as client:
    assert client.connected, "not connected to mercuryd"
    assert client.declare_model([("embed", 4096), ("attn", 8192), ("head", 1024)]) == mercury.OK
    conn = socket.create_connection(("127.0.0.1", port))
    assert client.register_socket(1, conn) == mercury.OK
    for it in range(1, 6):
        assert client.begin_iteration(it) == mercury.OK
        assert client.report_timings(it, [300, 500, 200], [600, 900, 400]) == mercury.OK
    assert client.report_timings(6, [1, 2], [1, 2]) == mercury.E_INVAL
    time.sleep(0.5)
    print("python client ok")
    sys.stdout.flush()
    time.sleep(float(sys.argv[4]) if len(sys.argv) > 4 else 0)

# Without an agent every call returns at once with E_NOAGENT.
with mercury.Client("orphan", socket_path="/nonexistent/mercury.sock") as lonely:
    t0 = time.monotonic()
    assert lonely.declare_model([("a", 1)]) == mercury.E_NOAGENT
    assert lonely.report_timings(1, [1], [1]) == mercury.E_NOAGENT
    assert time.monotonic() - t0 < 0.5
    assert mercury.strerror(mercury.E_NOAGENT).startswith("mercuryd not connected")
print("python no-agent ok")
