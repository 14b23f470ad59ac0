# SPDX-License-Identifier: GPL-2.0
"""mercury-ps against peers that break its rules, and its sums checked
chunk by chunk (used by tests/torch/run.sh, in its network namespace).

Starts its own servers on 127.0.0.1 (congestion control cubic, no agent,
a 1 s stall timeout) and talks to them in the raw wire format through
mercury.ps. Prints PASS/FAIL lines.

usage: ps_hostile.py MERCURY_PS_BINARY
"""
from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))
import pslib  # noqa: E402
from pslib import Report  # noqa: E402
from mercury.ps import (ACK, ACK_PUSHES, BYE, ERROR, HEADER, PULL, PUSH, Connection, PsError,  # noqa: E402
                        PushPull, _recv_exact, new_id)

SECRET = b"the job's secret, long enough: 0123456789"
JOB = "hostile"
report = Report("ps")


def Server(binary: str, port: int, tmp: str, *extra: str) -> pslib.Server:
    return pslib.Server(binary, port, tmp, *extra, job=JOB, secret=SECRET, cc="cubic", timeout_ms=1000)


RUN = [new_id()]   # the run the next connect() joins; new_run() starts another


def new_run() -> int:
    RUN[0] = new_id()
    return RUN[0]


def connect(server: pslib.Server, worker: int, workers: int, keys: Sequence[int], *, secret: bytes = SECRET,
            job: str = JOB, lane: int = 0, lanes: int = 1, run: Optional[int] = None,
            instance: Optional[int] = None) -> Connection:
    return Connection(server.address, job=job, secret=secret, worker=worker, workers=workers, lane=lane,
                      lanes=lanes, key_elems=keys, cc="cubic", run=RUN[0] if run is None else run,
                      instance=INSTANCES.setdefault(worker, new_id()) if instance is None else instance, timeout=5)


INSTANCES: dict = {}   # worker -> its process id, as one process per worker would have


def refused(make: Callable[[], Connection]) -> str:
    """The reason the server gave, or "" if it accepted."""
    try:
        make().close()
    except PsError as e:
        return str(e)
    return ""


def push(c: Connection, key: int, offset: int, values: Sequence[float], iteration: int = 0) -> None:
    c.sock.sendall(c.frame(PUSH, key, offset, len(values), iteration, struct.pack(f"<{len(values)}f", *values)))


def read_message(c: Connection, timeout: float) -> Optional[tuple]:
    """(type, key, offset, payload) or None if nothing came in time."""
    try:
        kind, key, offset, _, body = c.receive(timeout)
    except socket.timeout:
        return None
    except (ConnectionError, OSError):
        return ("closed", 0, 0, b"")
    return kind, key, offset, body


def error_of(c: Connection, timeout: float = 5.0) -> str:
    """The error the server sends this connection (skipping sums)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m = read_message(c, end - time.monotonic())
        if m is None or m[0] == "closed":
            return ""
        if m[0] == ERROR:
            return m[3].decode()
    return ""


def leave(*conns: Connection) -> None:
    """Bye on each connection, then close it: the job ends cleanly."""
    for c in conns:
        c.sock.sendall(c.frame(BYE))
        c.close()
    new_run()


def wait_jobs_over(server: pslib.Server, timeout: float = 5.0) -> None:
    """Until every job the server started has finished (its workers' byes
    arrive after they close)."""
    end = time.monotonic() + timeout
    while server.text().count("job started") > server.text().count("job finished") and time.monotonic() < end:
        time.sleep(0.05)


def check_handshake(server: pslib.Server) -> None:
    why = refused(lambda: connect(server, 0, 1, [8], secret=b"a guess, but a long one: 0123456789"))
    report("wrong-secret", "authentication failed" in why and "authentication failed" in server.text(),
           f"refused: {why!r}; logged: {'authentication failed' in server.text()}")
    why = refused(lambda: connect(server, 0, 1, [8], job="another"))
    report("wrong-job", "serves job 'hostile'" in why, f"refused: {why!r}")
    s = socket.create_connection(("127.0.0.1", int(server.address.rsplit(":", 1)[1])))
    s.settimeout(5)
    _recv_exact(s, 44)
    s.sendall(b"GET / HTTP/1.1\r\n" + b"x" * 44)
    kind, _, _, count, _ = HEADER.unpack(_recv_exact(s, HEADER.size))
    text = _recv_exact(s, count).decode()
    report("garbage", kind == ERROR and "not a mercury-ps" in text, f"answered {kind}: {text!r}")
    s.close()
    for name, args, want in (("too-many-workers", (0, 100000, [8]), "100000 workers (1..256)"),
                             ("worker-out-of-range", (3, 2, [8]), "worker 3 of 2"),
                             ("too-large", (0, 1, [1 << 40]), "at most"),
                             ("empty-key", (0, 1, [8, 0]), "every key 1..")):
        why = refused(lambda: connect(server, *args))
        report(name, want in why, f"refused: {why!r}")


def check_shape_and_pushes(server: pslib.Server) -> None:
    a = connect(server, 0, 2, [100, 50])
    why = refused(lambda: connect(server, 1, 2, [100]))
    report("shape-mismatch", "different shape" in why, f"refused: {why!r}")
    twin = refused(lambda: connect(server, 0, 2, [100, 50]))
    report("duplicate-lane", "connected already" in twin, f"refused: {twin!r}")
    b = connect(server, 1, 2, [100, 50])
    push(a, 0, 3, [1.0] * 10)   # not a chunk
    ea, eb = error_of(a), error_of(b)
    report("bad-offset-ends-job", "is not a chunk" in ea and "ended the job" in eb and "is not a chunk" in eb,
           f"pusher told {ea!r}; the other worker told {eb!r}")
    a.close(), b.close()
    new_run()
    a = connect(server, 0, 2, [100, 50])
    b = connect(server, 1, 2, [100, 50])
    push(a, 1, 0, [1.0] * 49)   # one element short
    ea, eb = error_of(a), error_of(b)
    report("short-chunk-ends-job", "has 49 elements, not 50" in ea and "ended the job" in eb, f"{ea!r}; {eb!r}")
    a.close(), b.close()
    new_run()
    a = connect(server, 0, 2, [100])
    b = connect(server, 1, 2, [100])
    push(a, 0, 0, [1.0] * 100)
    push(a, 0, 0, [1.0] * 100)
    ea = error_of(a)
    report("double-push-ends-job", "twice before its sum went out" in ea, repr(ea))
    a.close(), b.close()
    new_run()


def check_stall_and_vanish(server: pslib.Server) -> None:
    conns = {(0, 0): connect(server, 0, 2, [64])}
    b = connect(server, 1, 2, [64])
    engine = PushPull(conns, timeout=20)
    values = bytearray(struct.pack("<64f", *([1.0] * 64)))
    work = engine.push([(0, 0, memoryview(values).cast("f"))], lane=0)
    t0 = time.monotonic()
    try:
        work.wait()
        why = ""
    except PsError as e:
        why = str(e)
    took = time.monotonic() - t0
    eb = error_of(b)
    report("stalled-peer", "timed out" in why and "worker(s) 1" in why and "timed out" in eb and took < 10,
           f"after {took:.1f} s the pusher was told {why!r}; the stalled one {eb!r}")
    engine.close(timeout=2)
    b.close()

    new_run()
    conns = {(0, 0): connect(server, 0, 2, [64])}
    b = connect(server, 1, 2, [64])
    engine = PushPull(conns, timeout=20)
    work = engine.push([(0, 0, memoryview(bytearray(256)).cast("f"))], lane=0)
    b.sock.close()   # no bye
    try:
        work.wait()
        why = ""
    except PsError as e:
        why = str(e)
    report("vanished-peer", "without saying bye" in why, repr(why))
    engine.close(timeout=2)
    new_run()


def check_non_reader(server: pslib.Server) -> None:
    """A member that pushes but never reads its sums: its queue is bounded
    (one round of the job's sums), then the job ends, naming it."""
    new_run()
    a = connect(server, 0, 2, [1024])
    b = connect(server, 1, 2, [1024])
    b.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    why, rounds = "", 0
    for rounds in range(1, 20001):
        push(b, 0, 0, [1.0] * 1024, rounds - 1)
        push(a, 0, 0, [1.0] * 1024, rounds - 1)
        m = read_message(a, 5)
        if not m or m[0] != PULL:
            why = m[3].decode() if m and m[0] == ERROR else f"no answer: {m and m[0]}"
            break
    report("non-reader-ends-job", "worker 1 lane 0: does not read its sums" in why,
           f"after {rounds} rounds of 4 KiB the other worker was told {why!r}")
    a.close(), b.close()


def check_sums(server: pslib.Server, tensor_server: pslib.Server) -> None:
    """Three workers, 2.5 chunks of 1024 elements: every sum exact; the
    first chunk's sum comes before the last chunk is pushed (chunk), or only
    after (tensor)."""
    n = 2560
    for srv, mode in ((server, "chunk"), (tensor_server, "tensor")):
        new_run()
        cs = [connect(srv, w, 3, [n]) for w in range(3)]
        chunk = cs[0].chunk_elems
        data = [[float(w * 1000 + i) for i in range(n)] for w in range(3)]
        for w, c in enumerate(cs):
            for off in range(0, n, chunk):
                if w == 2 and off + chunk >= n:
                    continue   # the last worker holds back its last chunk
                push(c, 0, off, data[w][off:off + chunk])
        early = read_message(cs[0], 0.5)
        push(cs[2], 0, (n - 1) // chunk * chunk, data[2][(n - 1) // chunk * chunk:])
        got = {}
        if early and early[0] == PULL:
            got[early[2]] = early[3]
        while len(got) < (n + chunk - 1) // chunk:
            m = read_message(cs[0], 5)
            if not m or m[0] != PULL:
                break
            got[m[2]] = m[3]
        values = [v for off in sorted(got) for v in struct.unpack(f"<{len(got[off]) // 4}f", got[off])]
        want = [sum(d[i] for d in data) for i in range(n)]
        early_ok = (early is not None and early[0] == PULL and early[2] == 0) if mode == "chunk" else early is None
        report(f"sums-{mode}", values == want and early_ok,
               f"{len(values)} elements {'exact' if values == want else 'WRONG'}; before the last push: "
               f"{'chunk at ' + str(early[2]) if early and early[0] == PULL else 'nothing'}")
        leave(*cs)


def check_acks(server: pslib.Server) -> None:
    """A worker that asks for acks (ByteScheduler's credit, the replayer's
    bytescheduler mode) gets one per push as the server takes it, before
    any sum; one that does not ask gets none. The job's last log line says
    what was pushed (experiment/train.sh reads it)."""
    n = 2560
    wait_jobs_over(server)   # the last check's job
    asks, plain = connect(server, 0, 2, [n]), connect(server, 1, 2, [n])
    chunk = asks.chunk_elems
    asks.sock.sendall(asks.frame(ACK_PUSHES))
    for off in range(0, n, chunk):
        push(asks, 0, off, [1.0] * min(chunk, n - off))
    acks = [read_message(asks, 5) for _ in range(0, n, chunk)]
    early = read_message(asks, 0.3)
    for off in range(0, n, chunk):
        push(plain, 0, off, [2.0] * min(chunk, n - off))
    plain_got = [read_message(plain, 5) for _ in range(0, n, chunk)]
    want = [(ACK, 0, off) for off in range(0, n, chunk)]
    got = [m[:3] if m else None for m in acks]
    report("acks", got == want and early is None and all(m and m[0] == PULL for m in plain_got),
           f"acks {got}, then {'nothing' if early is None else early[0]} before the other worker pushed; "
           f"the other got {[m[0] if m else None for m in plain_got]}")
    leave(asks, plain)
    wait_jobs_over(server)
    line = [ln for ln in server.text().splitlines() if "job finished" in ln][-1:]
    report("job-bytes-logged", bool(line) and f"pushed_bytes={2 * n * 4}" in line[0], "".join(line))


def check_acks_between_sums(server: pslib.Server) -> None:
    """Acks slip in ahead of queued sums while a sum is being written (the
    worker reads nothing until it has pushed 1 MiB): the stream stays whole
    and every sum is exact. (When an Ack's insertion moved the message in
    flight, the replayer's workers read garbage now and then on slow links;
    loopback did not show it.)"""
    chunks = 256
    asks, plain = connect(server, 0, 2, [chunks * 1024]), connect(server, 1, 2, [chunks * 1024])
    chunk = asks.chunk_elems
    n = chunks * chunk
    asks.sock.sendall(asks.frame(ACK_PUSHES))
    for off in range(0, n, chunk):   # the other's first: each of these pushes completes a sum
        push(plain, 0, off, [2.0] * chunk)
    for off in range(0, n, chunk):
        push(asks, 0, off, [1.0] * chunk)
    kinds, sums_ok = {}, True
    for _ in range(2 * chunks):
        m = read_message(asks, 5)
        kind = m[0] if m else None
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == PULL:
            sums_ok &= set(struct.unpack(f"<{len(m[3]) // 4}f", m[3])) == {3.0}
        elif kind != ACK:
            break
    report("acks-between-sums", kinds == {ACK: chunks, PULL: chunks} and sums_ok,
           f"read {kinds} (want {chunks} of each), sums {'exact' if sums_ok else 'WRONG'}")
    leave(asks, plain)


def check_metrics(server: pslib.Server) -> None:
    """The server counted what the checks did to it (Prometheus, --metrics)."""
    import urllib.request
    text = urllib.request.urlopen("http://127.0.0.1:9471/metrics", timeout=5).read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("mercury_ps_"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    refused = values.get('mercury_ps_connections_total{result="refused"}', 0)
    failed_jobs = values.get('mercury_ps_jobs_total{end="failed"}', 0)
    # One per refusal above (9) and per job a check ended (6): each counted once.
    ends = [ln.split("reason=", 1)[-1][:100] for ln in server.text().splitlines() if "ending job" in ln]
    ok = refused == 9 and failed_jobs == 6 and values.get("mercury_ps_members") == 2 and \
        values.get("mercury_ps_pushed_bytes_total", 0) > 0 and values.get("mercury_ps_job_bytes") == 32
    report("metrics", ok, f"refused {refused:g}, failed jobs {failed_jobs:g}, members "
                          f"{values.get('mercury_ps_members')}, job bytes {values.get('mercury_ps_job_bytes')}, "
                          f"pushed {values.get('mercury_ps_pushed_bytes_total')}; jobs ended: {ends}")


def check_cli(binary: str) -> None:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True)
    report("version", out.returncode == 0 and out.stdout.startswith("mercury-ps "), out.stdout.strip())
    out = subprocess.run([binary, "--listen", "127.0.0.1:7199", "--job", "x", "--no-agent"], capture_output=True,
                         text=True, env={k: v for k, v in os.environ.items() if k != "MERCURY_PS_SECRET"}, timeout=10)
    report("no-secret-refuses-to-start", out.returncode != 0 and "no secret" in out.stderr, out.stderr.strip())
    out = subprocess.run([binary, "--listen", "nowhere", "--job", "x"], capture_output=True, text=True, timeout=10,
                         env={**os.environ, "MERCURY_PS_SECRET": SECRET.decode()})
    report("bad-listen", out.returncode != 0 and "ADDRESS:PORT" in out.stderr, out.stderr.strip())


def main() -> int:
    binary = sys.argv[1]
    check_cli(binary)
    with tempfile.TemporaryDirectory(prefix="mercury-ps-") as tmp:
        server = Server(binary, 7201, tmp, "--chunk-bytes", "4096", "--metrics", "127.0.0.1:9471")
        tensor_server = Server(binary, 7202, tmp, "--chunk-bytes", "4096", "--aggregation", "tensor")
        try:
            time.sleep(0.3)
            for check in (lambda: check_handshake(server), lambda: check_shape_and_pushes(server),
                          lambda: check_stall_and_vanish(server), lambda: check_non_reader(server),
                          lambda: check_sums(server, tensor_server), lambda: check_acks(tensor_server),
                          lambda: check_acks_between_sums(server)):
                try:
                    check()
                except Exception as e:  # noqa: BLE001 - a check that crashed fails, the others still run
                    report("crashed", False, f"{type(e).__name__}: {e}")
            # Still serving after all of it: a clean job runs.
            new_run()
            cs = [connect(server, w, 2, [8]) for w in range(2)]
            for c in cs:
                push(c, 0, 0, [1.0] * 8)
            sums = [read_message(c, 5) for c in cs]
            report("serves-after-abuse", all(m and m[0] == PULL for m in sums) and server.proc.poll() is None,
                   f"answers {[m[0] if m else None for m in sums]}")
            check_metrics(server)
        finally:
            server.stop()
            tensor_server.stop()
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
