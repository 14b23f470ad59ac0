#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""A trainer as an unprivileged user runs one, for the systemd suite: LAYERS
TCP connections over loopback, each registered with mercuryd through the
installed python3-mercury (libmercury passes the socket to the agent, which
reconnects and registers them again if the agent restarts). Prints
"registered N" once all are, then keeps them open until killed.

usage: trainer.py JOB LAYERS
"""
import socket
import sys
import time

import mercury


def main() -> int:
    job, layers = sys.argv[1], int(sys.argv[2])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(layers)
    conns = [socket.create_connection(listener.getsockname()) for _ in range(layers)]
    peers = [listener.accept()[0] for _ in range(layers)]
    client = mercury.Client(job)
    if not client.wait_connected(30):
        print(f"trainer: no agent: {client.last_error()}", flush=True)
        return 1
    client.declare_model([(f"layer{i}", 1 << 20) for i in range(layers)])
    ok = [client.register_socket(i, s) for i, s in enumerate(conns)]
    print(f"registered {sum(ok)}", flush=True)
    while True:
        time.sleep(1)
    del peers   # kept open with the connections


if __name__ == "__main__":
    sys.exit(main())
