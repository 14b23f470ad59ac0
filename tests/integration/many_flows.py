# SPDX-License-Identifier: GPL-2.0
"""Many concurrent mercury connections, each registered with mercuryd (used
by tests/native/bpf_tests.sh for the scale check).

usage: many_flows.py serve ADDR PORT
           accepts and drains connections until killed
       many_flows.py connect ADDR PORT AGENT_SOCKET N
           opens N connections with TCP_CONGESTION=mercury (read back),
           registers each with the agent by cookie (needs root) under a job
           of 8 layers, one per rank, sends a little on each, prints
           "registered N" and holds them open until stdin closes; exits 1 on
           any refusal
"""
import os
import resource
import selectors
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from mercury.tcp import set_congestion_control  # noqa: E402
from hostile import ERROR, HELLO, KIND_COOKIE, MODEL, REGISTER, error_of, frame, frames, string  # noqa: E402

SO_COOKIE = 57
LAYERS = 8


def raise_fd_limit(n: int) -> int:
    """Raises the soft limit toward @n (the hard one only with
    CAP_SYS_RESOURCE); returns the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= n:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, max(hard, n)))
        return n
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard


def serve(addr: str, port: int) -> int:
    raise_fd_limit(65536)
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((addr, port))
    lst.listen(4096)
    lst.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(lst, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is lst:
                try:
                    conn, _ = lst.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ)
            else:
                try:
                    data = key.fileobj.recv(65536)
                except (BlockingIOError, ConnectionError):
                    data = b"x"
                if not data:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()


def connect(addr: str, port: int, agent: str, n: int) -> int:
    limit = raise_fd_limit(n + 1024)
    if limit < n + 64:
        print(f"only {limit} file descriptors allowed (RLIMIT_NOFILE), not enough for {n} connections")
        return 1
    conns = []
    for _ in range(n):
        s = socket.socket()
        try:
            set_congestion_control(s, "mercury")
        except OSError as e:
            print(f"a socket cannot run mercury: {e}")
            return 1
        s.connect((addr, port))
        conns.append(s)
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ctl.connect(agent)
    ctl.settimeout(120)
    model = struct.pack("<I", LAYERS) + b"".join(string(f"layer{i}") + struct.pack("<Q", 4 << 20) for i in range(LAYERS))
    msgs = frame(HELLO, string("scale") + struct.pack("<II", 0, 0)) + frame(MODEL, model)
    for i, s in enumerate(conns):
        cookie = struct.unpack("<Q", s.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8))[0]
        msgs += frame(REGISTER, struct.pack("<IBQ", i % LAYERS, KIND_COOKIE, cookie))
    ctl.sendall(msgs)
    for s in conns:
        s.send(b"m" * 1000)
    # Refusals come back at once; a quiet second means all were taken.
    ctl.settimeout(1)
    try:
        for kind, body in frames(ctl):
            if kind == ERROR:
                print("refused: errno %d: %s" % error_of(body))
                return 1
    except socket.timeout:
        pass
    print(f"registered {n}", flush=True)
    sys.stdin.read()  # hold everything until the caller is done checking
    return 0


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        return serve(sys.argv[2], int(sys.argv[3]))
    if len(sys.argv) == 6 and sys.argv[1] == "connect":
        return connect(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
