# SPDX-License-Identifier: GPL-2.0
"""experiment/bench/flow-sampler.py reads a real connection's state from ss."""
from __future__ import annotations

import importlib.util
import os
import socket
import time

from conftest import TOP


def load_sampler():
    spec = importlib.util.spec_from_file_location("flow_sampler",
                                                  os.path.join(TOP, "experiment", "bench", "flow-sampler.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_loopback_connection_is_sampled() -> None:
    sampler = load_sampler()
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        try:
            client.sendall(b"x" * 100_000)
            got = 0
            while got < 100_000:
                got += len(peer.recv(65536))
            local = "127.0.0.1:%d" % client.getsockname()[1]
            deadline = time.monotonic() + 5
            while True:   # the last ACK may still be on its way
                flow = next(f for f in sampler.sample() if f.get("local") == local)
                if flow.get("bytes_acked", 0) >= 100_000 or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        finally:
            client.close()
            peer.close()
    assert flow["peer"] == "127.0.0.1:%d" % port
    assert flow["cwnd"] > 0 and flow["rtt_ms"] > 0 and flow["cc"]
    assert flow["bytes_acked"] >= 100_000
