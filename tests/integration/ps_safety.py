# SPDX-License-Identifier: GPL-2.0
"""mercury-ps as an attacker and a tired operator meet it, and its workers
against servers that are not what they claim (issue 41's cases).

The server: a worker SIGKILLed mid-push again and again, a fuzzer of two or
three members mixing good and bad frames, byes, resets, half frames and
members that stop reading; floods of bad Hellos and idle connections from
one address while a real job connects from another; runs, iterations and
worker ids on the wire; memory and descriptors bounded; a metrics scrape
beside idle connections. Meant to run on a sanitizer build (run-tests.sh
builds one with AddressSanitizer): the server must be alive, its sums exact
and its log free of sanitizer reports at the end.

The workers: an impostor that cannot prove the secret, one that sends a
1 GiB error, drips its challenge, or (holding the secret) sends a sum twice,
for another iteration, or longer than asked.

Starts its own servers on 127.0.0.1 (cc reno, no agent) and uses
127.0.0.2 and 127.0.0.3 as other hosts: run it in a network namespace of
its own with lo up. Prints PASS/FAIL lines.

usage: ps_safety.py MERCURY_PS_BINARY [--kills N] [--fuzz-rounds N] [--seed S] [--rss] [--only GROUPS]
  --rss   also check that a finished job's memory goes back (not on a
          sanitizer build: its quarantine keeps freed memory)
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
from typing import Callable, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))
import pslib  # noqa: E402
from pslib import Report  # noqa: E402
from mercury.ps import (ACK_PUSHES, BYE, CHALLENGE, ERROR, HEADER, HELLO, MAGIC, PULL, PUSH, READY,  # noqa: E402
                        TAG_BYTES, VERSION, Connection, FrameMac, PsError, PushPull, _recv_exact, new_id)

SECRET = b"ps_safety's secret: 0123456789abcdefghij"
JOB = "safety"
report = Report("ps-safety")


def Server(binary: str, port: int, tmp: str, *extra: str, limits: Optional[Tuple[int, int]] = None,
           no_agent: bool = True) -> pslib.Server:
    return pslib.Server(binary, port, tmp, *extra, job=JOB, secret=SECRET, cc="reno", timeout_ms=2000,
                        limits=limits, no_agent=no_agent)


def refusal(make: Callable[[], Connection]) -> str:
    """The reason a connection was refused, or "" if it joined."""
    try:
        make().close()
    except PsError as e:
        return str(e)
    return ""


def connect(server: pslib.Server, worker: int, workers: int, keys: Sequence[int], run: int, *,
            instance: Optional[int] = None, lane: int = 0, lanes: int = 1, timeout: float = 10) -> Connection:
    return Connection(server.address, job=JOB, secret=SECRET, worker=worker, workers=workers, lane=lane,
                      lanes=lanes, key_elems=keys, cc="reno", run=run,
                      instance=new_id() if instance is None else instance, timeout=timeout)


def connect_job(server: pslib.Server, workers: int, keys: Sequence[int], run: int) -> List[Connection]:
    """Every worker of a new run; retried while the server still ends the
    last one (its members' closes are in flight)."""
    end = time.monotonic() + 10
    while True:
        conns: List[Connection] = []
        try:
            for w in range(workers):
                conns.append(connect(server, w, workers, keys, run))
            return conns
        except PsError as e:
            for c in conns:
                c.close()
            if "one run at a time" not in str(e) or time.monotonic() > end:
                raise
            time.sleep(0.02)


def error_of(c: Connection, timeout: float = 5.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            kind, _, _, _, body = c.receive(end - time.monotonic())
        except (socket.timeout, ConnectionError, OSError, PsError):
            return ""
        if kind == ERROR:
            return body.decode(errors="replace")
    return ""


def push(c: Connection, key: int, offset: int, values: Sequence[float], iteration: int) -> None:
    c.sock.sendall(c.frame(PUSH, key, offset, len(values), iteration, struct.pack(f"<{len(values)}f", *values)))


def clean_job_exact(server: pslib.Server, workers: int = 3) -> Tuple[bool, str]:
    """A clean job after the abuse: every sum exact, over two iterations."""
    n = 3000
    conns = connect_job(server, workers, [n, 7], new_id())
    pp = [PushPull({(0, 0): c}, timeout=20) for c in conns]
    try:
        for it in range(2):
            bufs = [(memoryview(bytearray(struct.pack(f"<{n}f", *[float(w + it + i % 5) for i in range(n)]))).cast("f"),
                     memoryview(bytearray(struct.pack("<7f", *[float(w)] * 7))).cast("f")) for w in range(workers)]
            works = [p.push([(0, 0, b[0]), (0, 1, b[1])], lane=0) for p, b in zip(pp, bufs)]
            for wk in works:
                wk.wait()
            want0 = [float(sum(w + it + i % 5 for w in range(workers))) for i in range(n)]
            want1 = [float(sum(range(workers)))] * 7
            for b in bufs:
                if list(b[0]) != want0 or list(b[1]) != want1:
                    return False, f"iteration {it}: a sum is wrong"
        return True, f"{workers} workers, 2 iterations, every sum exact"
    finally:
        for p in pp:
            p.close(timeout=5)


# -- the server -----------------------------------------------------------------

def check_kill_loop(server: pslib.Server, kills: int) -> None:
    """Two workers push a 16 MiB key in a loop; one is SIGKILLed at a random
    moment after its first sum; again and again. The survivor must hear why
    every time; the server must live through all of it."""
    n = 4 << 20   # 16 MiB of float32
    told, rng, t0 = 0, random.Random(kills), time.monotonic()
    for i in range(kills):
        run = new_id()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:   # the victim
            try:
                os.close(ready_r)
                c = connect(server, 1, 2, [n], run, timeout=20)
                pp = PushPull({(0, 0): c}, timeout=30)
                buf = memoryview(bytearray(4 * n)).cast("f")
                first = True
                while True:
                    pp.push([(0, 0, buf)], lane=0).wait()
                    if first:
                        os.write(ready_w, b"r")
                        first = False
            finally:
                os._exit(0)
        os.close(ready_w)
        why = ""
        try:
            survivor = connect(server, 0, 2, [n], run, timeout=20)
        except PsError as e:
            why = f"survivor refused: {e}"
            survivor = None
        if survivor is not None:
            pp = PushPull({(0, 0): survivor}, timeout=30)
            buf = memoryview(bytearray(4 * n)).cast("f")

            def pushes() -> None:
                nonlocal why
                try:
                    while True:
                        pp.push([(0, 0, buf)], lane=0).wait()
                except PsError as e:
                    why = str(e)

            t = threading.Thread(target=pushes)
            t.start()
            os.read(ready_r, 1)   # the victim has a sum: both are mid-loop
            time.sleep(rng.uniform(0, 0.3))
            os.kill(pid, signal.SIGKILL)
            t.join(timeout=40)
            pp.close(timeout=2)
        else:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(ready_r)
        told += "without saying bye" in why or "ended the job" in why
        if not server.alive():
            break
    report("kill-loop", server.alive() and told == kills and not server.sanitizer_reports(),
           f"{kills} kills in {time.monotonic() - t0:.0f} s; the survivor told why {told} times; server "
           f"{'alive' if server.alive() else 'DEAD: ' + str(server.proc.returncode)}; "
           f"sanitizer: {server.sanitizer_reports() or 'clean'}")


class Member:
    """A fuzzed member: a Connection and what it has pushed."""

    def __init__(self, conn: Connection, keys: Sequence[int], rng: random.Random) -> None:
        self.c = conn
        self.keys = keys
        self.rng = rng
        self.rounds: dict = {}   # (key, offset) -> the iteration of its next push
        self.open = True

    def send(self, data: bytes) -> None:
        if self.open:
            try:
                self.c.sock.sendall(data)
            except OSError:
                self.open = False

    def good_push(self) -> None:
        key = self.rng.randrange(len(self.keys))
        chunk = self.c.chunk_elems
        off = self.rng.randrange(0, self.keys[key], chunk)
        n = min(chunk, self.keys[key] - off)
        it = self.rounds.get((key, off), 0)
        self.rounds[(key, off)] = it + 1
        self.send(self.c.frame(PUSH, key, off, n, it, struct.pack(f"<{n}f", *([1.0] * n))))

    def bad_frame(self) -> None:
        kind = self.rng.choice(["offset", "short", "tag", "iteration", "type", "garbage", "huge", "half"])
        chunk = self.c.chunk_elems
        if kind == "offset":
            self.send(self.c.frame(PUSH, 0, 3, 4, 0, bytes(16)))
        elif kind == "short":
            self.send(self.c.frame(PUSH, 0, 0, 1, 0, bytes(4)))
        elif kind == "tag":
            n = min(chunk, self.keys[0])
            f = bytearray(self.c.frame(PUSH, 0, 0, n, self.rounds.get((0, 0), 0), bytes(4 * n)))
            f[-1] ^= 0xFF
            self.send(bytes(f))
        elif kind == "iteration":
            n = min(chunk, self.keys[0])
            self.send(self.c.frame(PUSH, 0, 0, n, self.rounds.get((0, 0), 0) + 5, bytes(4 * n)))
        elif kind == "type":
            self.send(self.c.frame(self.rng.choice([0, 4, 16, 17, 18, 19, 255])))
        elif kind == "garbage":
            self.send(os.urandom(self.rng.randrange(1, 200)))
        elif kind == "huge":
            self.send(HEADER.pack(PUSH, 0, 0, 0xFFFFFFFF, 0))
        else:   # half a frame, then the rest never comes
            n = min(chunk, self.keys[0])
            f = self.c.frame(PUSH, 0, 0, n, self.rounds.get((0, 0), 0), bytes(4 * n))
            self.send(f[:self.rng.randrange(1, len(f))])

    def drain(self) -> None:
        if not self.open:
            return
        self.c.sock.setblocking(False)
        try:
            while self.c.sock.recv(1 << 20):
                pass
        except (BlockingIOError, OSError):
            pass
        finally:
            self.c.sock.setblocking(True)

    def end(self, how: str) -> None:
        if not self.open:
            self.c.close()
            return
        self.open = False
        try:
            if how == "bye":
                self.c.sock.sendall(self.c.frame(BYE))
            elif how == "reset":
                self.c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.c.close()


def check_fuzz(server: pslib.Server, rounds: int, seed: int) -> None:
    """Two or three members at once, each doing a random mix of good and
    bad pushes, byes, resets, half frames, stopping to read or reading."""
    rng = random.Random(seed)
    t0 = time.monotonic()
    joined = 0
    log_before = len(server.text())
    for r in range(rounds):
        workers = rng.choice([2, 3])
        keys = [rng.choice([5, 1024, 3000, 20000]) for _ in range(rng.randint(1, 3))]
        try:
            conns = connect_job(server, workers, keys, new_id())
        except PsError as e:
            report("fuzz", False, f"round {r}: a clean job could not join: {e}")
            return
        joined += 1
        members = [Member(c, keys, rng) for c in conns]
        for m in members:
            if rng.random() < 0.3:   # one that stops reading
                m.c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for _ in range(rng.randint(1, 40)):
            m = rng.choice(members)
            action = rng.random()
            if action < 0.6:
                m.good_push()
            elif action < 0.75:
                m.bad_frame()
            elif action < 0.85:
                m.drain()
            elif action < 0.9:
                m.send(m.c.frame(ACK_PUSHES))
            else:
                m.end(rng.choice(["bye", "reset", "close"]))
        for m in members:
            m.end(rng.choice(["bye", "reset", "close"]))
        if not server.alive():
            break
    # What the members made the server do: jobs ended, and why.
    log = server.text()[log_before:]
    reasons: dict = {}
    for ln in log.splitlines():
        if "ending job" in ln:
            why = ln.split("reason=", 1)[-1].split(":")[-1].strip(' "')
            why = " ".join(w for w in why.split()[:4] if not w.isdigit())
            reasons[why] = reasons.get(why, 0) + 1
    top = sorted(reasons.items(), key=lambda kv: -kv[1])[:6]
    ok, detail = clean_job_exact(server) if server.alive() else (False, "")
    report("fuzz", server.alive() and ok and not server.sanitizer_reports(),
           f"seed {seed}: {joined} jobs of 2-3 fuzzed members in {time.monotonic() - t0:.0f} s, "
           f"{log.count('job finished')} finished, ended by {top}; then {detail}; "
           f"server {'alive' if server.alive() else 'DEAD'}; sanitizer: {server.sanitizer_reports() or 'clean'}")


def bad_hello(job: str = JOB) -> bytes:
    jb = job.encode()
    return HELLO.pack(MAGIC, VERSION, len(jb), 0, 1, 0, 1, 1, 0, 1, 1, bytes(32)) + bytes(32) + jb + bytes(8 + 16)


def check_flood(server: pslib.Server) -> None:
    """A flood of bad Hellos from 127.0.0.2 and idle connections from
    127.0.0.3, while 34 real workers join one job from 127.0.0.1."""
    stop = threading.Event()
    sent = [0]

    def flood() -> None:
        while not stop.is_set():
            s = socket.socket()
            try:
                s.bind(("127.0.0.2", 0))
                s.connect(("127.0.0.1", server.port))
                s.sendall(bad_hello())
                sent[0] += 1
            except OSError:
                pass
            finally:
                s.close()

    idle: List[socket.socket] = []
    for _ in range(300):
        s = socket.socket()
        try:
            s.bind(("127.0.0.3", 0))
            s.connect(("127.0.0.1", server.port))
        except OSError:
            s.close()
            continue
        idle.append(s)
    threads = [threading.Thread(target=flood) for _ in range(2)]
    for t in threads:
        t.start()
    log_before = len(server.text())
    time.sleep(0.5)
    t0 = time.monotonic()
    joined, why = 0, ""
    run = new_id()
    conns: List[Connection] = []
    try:
        for w in range(34):
            conns.append(connect(server, w, 34, [100], run, timeout=10))
            joined += 1
    except PsError as e:
        why = str(e)
    took = time.monotonic() - t0
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    flood_s = time.monotonic() - t0 + 0.5
    for c in conns:
        c.sock.sendall(c.frame(BYE))
        c.close()
    for s in idle:
        s.close()
    log = server.text()[log_before:]
    refusals = [ln for ln in log.splitlines() if "refus" in ln]
    addressed = all("peer=" in ln or "count=" in ln for ln in refusals)
    report("flood-from-one-address", joined == 34 and server.alive(),
           f"{joined}/34 workers joined in {took:.1f} s beside {sent[0]} bad Hellos in {flood_s:.1f} s and "
           f"{len(idle)} idle connections from other addresses {why!r}")
    report("refusals-logged-bounded", bool(refusals) and addressed and len(log) < 64 * 1024 and
           any("127.0.0.2" in ln or "127.0.0.3" in ln for ln in refusals),
           f"{len(refusals)} refusal lines, {len(log)} bytes of log for {sent[0]} refusals, each with the peer's "
           f"address or a count: {addressed}")


def check_idle_handshake(server: pslib.Server) -> None:
    """A connection that never sends its Hello is closed at the handshake
    deadline (--handshake-timeout-ms 1000 here), with the reason."""
    s = socket.create_connection(("127.0.0.1", server.port))
    s.settimeout(10)
    t0 = time.monotonic()
    _recv_exact(s, CHALLENGE.size)
    kind, _, _, count, _ = HEADER.unpack(_recv_exact(s, HEADER.size))
    text = _recv_exact(s, count).decode(errors="replace")
    took = time.monotonic() - t0
    s.close()
    report("handshake-deadline", kind == ERROR and "no handshake within 1000 ms" in text and took < 5,
           f"closed after {took:.1f} s: {text!r}")


def check_untagged_payloads(binary: str, tmp: str) -> None:
    """A server run with --payload-tags off (a trusted testbed's setting) is
    refused by a worker, which never accepts it."""
    untagged = Server(binary, 7319, tmp, "--payload-tags", "off")
    why = refusal(lambda: connect(untagged, 0, 1, [8], new_id()))
    report("worker-refuses-untagged-payloads", "--payload-tags off" in why and untagged.alive(), repr(why))
    untagged.stop()


def check_versions(server: pslib.Server) -> None:
    s = socket.create_connection(("127.0.0.1", server.port))
    s.settimeout(5)
    _recv_exact(s, CHALLENGE.size)
    s.sendall(struct.pack("<IHH", MAGIC, 1, 4) + bytes(52) + b"safe")   # a version 1 Hello
    kind, _, _, count = struct.unpack("<B3xIII", _recv_exact(s, 16))     # read as version 1 would
    text = _recv_exact(s, count).decode(errors="replace")
    s.settimeout(2)
    rest = s.recv(100)   # nothing more: the refusal in version 1's layout, then the close
    s.close()
    report("old-worker-refused", kind == ERROR and text.startswith("this mercury-ps speaks version 2, the worker "
                                                                    "version 1") and rest == b"", repr(text))


def check_runs_and_iterations(server: pslib.Server) -> None:
    # A push delivered again after its sum went out: refused with the
    # reason, never summed into the next iteration.
    a, b = connect_job(server, 2, [100], new_id())
    push(a, 0, 0, [1.0] * 100, 0)
    push(b, 0, 0, [2.0] * 100, 0)
    sums = [c.receive(5) for c in (a, b)]
    push(a, 0, 0, [1.0] * 100, 0)
    ea, eb = error_of(a), error_of(b)
    report("redelivered-push-refused",
           all(k == PULL and set(struct.unpack("<100f", p)) == {3.0} for k, _, _, _, p in sums) and
           "sum went out already" in ea and "ended the job" in eb, f"{ea!r}")
    a.close(), b.close()

    # A run that has ended takes no worker again; a running one none of
    # another run; a worker id is one process.
    r1 = new_id()
    a, b = connect_job(server, 2, [8], r1)
    for c in (a, b):
        c.sock.sendall(c.frame(BYE))
    for c in (a, b):
        error_of(c, 2)   # until the server closes
        c.close()
    late = refusal(lambda: connect(server, 0, 2, [8], r1))
    r2 = new_id()
    a = connect(server, 0, 2, [8], r2)
    other = refusal(lambda: connect(server, 1, 2, [8], new_id()))
    twin = refusal(lambda: connect(server, 0, 2, [8], r2, lane=1, lanes=2))
    report("old-run-refused", "has ended" in late, repr(late))
    report("other-run-refused", "one run at a time" in other, repr(other))
    report("second-worker-0-refused", "from another process" in twin, repr(twin))
    a.close()


def check_memory_bounds(binary: str, tmp: str, rss: bool) -> None:
    small = Server(binary, 7312, tmp, "--max-model-mb", "1")
    why = refusal(lambda: connect(small, 0, 256, [1] * 65536, new_id()))
    report("records-count-against-max-model-mb", "with their records" in why and small.alive(), why[:160])
    small.stop()
    wide = Server(binary, 7313, tmp, "--max-workers", "65536")
    why = refusal(lambda: connect(wide, 0, 65536, [1] * 65536, new_id()))
    time.sleep(0.2)
    report("huge-metadata-refused-not-crash", "with their records" in why and wide.alive(),
           f"{why[:120]!r}; server {'alive' if wide.alive() else 'DEAD'}")
    if rss:
        def rss_of() -> int:
            with open(f"/proc/{wide.proc.pid}/status") as f:
                return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS"))
        before = rss_of()
        c = connect(wide, 0, 256, [1] * 65536, new_id())
        during = rss_of()
        c.sock.sendall(c.frame(BYE))
        error_of(c, 2)
        c.close()
        time.sleep(0.5)
        after = rss_of()
        report("memory-freed-after-job", during - before > (8 << 20) and after - before < (4 << 20),
               f"RSS {before >> 20} MiB idle, {during >> 20} MiB with 65,536 keys of 256 workers, "
               f"{after >> 20} MiB after the job")
    wide.stop()


def check_descriptors(binary: str, tmp: str) -> None:
    low = Server(binary, 7314, tmp, "--max-connections", "4096", limits=(1024, 1024))
    low.proc.wait(timeout=20)
    text = low.text().strip()
    report("too-few-descriptors-refuses-to-start", low.proc.returncode != 0 and "needs 4224 descriptors" in text,
           text[-200:])
    fitted = Server(binary, 7318, tmp, limits=(1024, 4096))   # Linux's default hard limit
    line = [ln for ln in fitted.text().splitlines() if "msg=serving" in ln]
    report("default-fits-the-limit", fitted.alive() and bool(line) and "max_connections=3968" in line[0],
           (line or [fitted.text()[-200:]])[0])
    fitted.stop()
    raised = Server(binary, 7315, tmp, limits=(1024, 20000))
    with open(f"/proc/{raised.proc.pid}/limits") as f:
        soft = next(int(ln.split()[3]) for ln in f if ln.startswith("Max open files"))
    report("soft-limit-raised", raised.alive() and soft >= 4224, f"soft limit {soft}")
    raised.stop()
    # A job of 64 workers x 8 lanes under a 1,024-descriptor limit, ranked
    # through libmercury (no mercuryd there): a connection costs one
    # descriptor (libmercury kept a duplicate of each, and the job stopped
    # at 508 connections).
    ranked = Server(binary, 7317, tmp, "--max-connections", "800", "--agent-socket", os.path.join(tmp, "no-agent"),
                    limits=(1024, 1024), no_agent=False)
    run, conns, why = new_id(), [], ""
    try:
        for w in range(64):
            instance = new_id()
            for lane in range(8):
                conns.append(connect(ranked, w, 64, [16], run, instance=instance, lane=lane, lanes=8))
    except PsError as e:
        why = str(e)
    fds = len(os.listdir(f"/proc/{ranked.proc.pid}/fd")) if ranked.alive() else -1
    for c in conns:
        c.sock.sendall(c.frame(BYE))
        c.close()
    report("one-descriptor-per-member", len(conns) == 512 and 0 < fds < 600,
           f"{len(conns)}/512 connections of 64 workers x 8 lanes joined, the server holds {fds} descriptors "
           f"{why!r}")
    ranked.stop()
    # Out of descriptors while running: the accept loop backs off and says so.
    tight = Server(binary, 7316, tmp, "--max-connections", "64")
    hard = resource.prlimit(tight.proc.pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(tight.proc.pid, resource.RLIMIT_NOFILE, (24, hard))
    conns = []
    for _ in range(40):
        try:
            conns.append(socket.create_connection(("127.0.0.1", tight.port), timeout=2))
        except OSError:
            break
    def cpu() -> float:
        with open(f"/proc/{tight.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    c0 = cpu()
    time.sleep(2)
    spent = cpu() - c0
    logged = "cannot accept" in tight.text()
    resource.prlimit(tight.proc.pid, resource.RLIMIT_NOFILE, (hard, hard))
    for s in conns:
        s.close()
    time.sleep(0.5)
    ok, detail = clean_job_exact(tight, 2)
    report("accept-backs-off", spent < 0.5 and logged and ok,
           f"{spent:.2f} s of CPU in 2 s out of descriptors; logged: {logged}; after: {detail}")
    tight.stop()


def check_metrics_beside_idle(server: pslib.Server, port: int) -> None:
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
    import urllib.request
    t0 = time.monotonic()
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        ok = "mercury_ps_connections_total" in text
    except OSError as e:
        ok, text = False, str(e)
    took = time.monotonic() - t0
    for s in idle:
        s.close()
    report("metrics-beside-idle-connections", ok, f"scraped in {took:.2f} s beside 100 idle connections")


# -- the workers against impostors -------------------------------------------------

class Impostor:
    """A listener on 127.0.0.1:PORT that plays @script with each connection."""

    def __init__(self, port: int, script: Callable[[socket.socket], None]) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(8)
        self.address = f"127.0.0.1:{port}"
        self.got = bytearray()
        self.thread = threading.Thread(target=self._serve, args=(script,), daemon=True)
        self.thread.start()

    def _serve(self, script: Callable[[socket.socket], None]) -> None:
        s, _ = self.listener.accept()
        try:
            script(s)
            s.settimeout(1)
            while True:   # whatever else the worker sends
                part = s.recv(1 << 20)
                if not part:
                    break
                self.got += part
        except OSError:
            pass
        finally:
            s.close()
            self.listener.close()


def challenge(chunk: int = 1024, version: int = VERSION) -> Tuple[bytes, bytes]:
    nonce = os.urandom(32)
    return CHALLENGE.pack(MAGIC, version, 0, chunk, nonce), nonce


def worker_of(address: str, timeout: float = 3) -> str:
    try:
        Connection(address, job=JOB, secret=SECRET, worker=0, workers=1, lane=0, lanes=1, key_elems=[2048],
                   cc=None, run=new_id(), instance=new_id(), timeout=timeout).close()
    except PsError as e:
        return str(e)
    return ""


def check_impostors() -> None:
    def no_proof(s: socket.socket) -> None:
        s.sendall(challenge()[0])
        _recv_exact(s, HELLO.size + 32 + len(JOB) + 8 + TAG_BYTES)
        s.sendall(HEADER.pack(READY, 0, 0, 0, 0) + os.urandom(TAG_BYTES))

    imp = Impostor(7320, no_proof)
    why = worker_of(imp.address)
    imp.thread.join(3)
    report("impostor-without-secret", "did not prove it holds the job's secret" in why and not imp.got,
           f"{why!r}; sent it {len(imp.got)} bytes after the handshake")

    def huge_error(s: socket.socket) -> None:
        s.sendall(challenge()[0])
        s.sendall(HEADER.pack(ERROR, 0, 0, 1 << 30, 0))

    imp = Impostor(7321, huge_error)
    why = worker_of(imp.address)
    report("huge-error-refused", "an error of 1073741824 bytes" in why, repr(why))

    def drip(s: socket.socket) -> None:
        for b in challenge()[0]:
            s.sendall(bytes([b]))
            time.sleep(0.3)

    imp = Impostor(7322, drip)
    t0 = time.monotonic()
    why = worker_of(imp.address, timeout=1.5)
    took = time.monotonic() - t0
    report("dripped-handshake-deadline", "no handshake within 1.5 s" in why and took < 4,
           f"gave up after {took:.1f} s (the drip takes 13 s): {why!r}")

    def old_server(s: socket.socket) -> None:
        s.sendall(challenge(version=1)[0])

    imp = Impostor(7323, old_server)
    why = worker_of(imp.address)
    report("old-server-refused", "speaks mercury-ps version 1, this worker version 2" in why, repr(why))

    # A server that holds the secret but answers what was not asked.
    for name, answer, want in (("duplicate-sum", "twice", "a second sum for key 0 offset 0"),
                               ("sum-of-another-iteration", "iteration", "of iteration 7"),
                               ("sum-longer-than-asked", "long", "not a chunk")):
        def lying(s: socket.socket, answer: str = answer) -> None:
            data, nonce = challenge(chunk=1024)
            s.sendall(data)
            fixed = _recv_exact(s, HELLO.size)
            wnonce = fixed[-32:]
            _recv_exact(s, 32 + len(JOB) + 8 + TAG_BYTES)
            up = FrameMac(SECRET, nonce, wnonce, FrameMac.TO_SERVER)
            down = FrameMac(SECRET, nonce, wnonce, FrameMac.TO_WORKER)
            up.next(b"")
            ready = HEADER.pack(READY, 0, 0, 0, 0)
            s.sendall(ready + down.next(ready))

            def pull(offset: int, count: int, iteration: int) -> bytes:
                h = HEADER.pack(PULL, 0, offset, count, iteration)
                body = struct.pack(f"<{count}f", *([9.0] * count))
                return h + body + down.next(h, body)
            _recv_exact(s, HEADER.size + 4096 + TAG_BYTES)   # the first chunk's push
            if answer == "twice":
                s.sendall(pull(0, 1024, 0) + pull(0, 1024, 0))
            elif answer == "iteration":
                s.sendall(pull(0, 1024, 7))
            else:
                s.sendall(pull(0, 4096, 0))
            time.sleep(1)

        imp = Impostor(7324 + ["twice", "iteration", "long"].index(answer), lying)
        c = Connection(imp.address, job=JOB, secret=SECRET, worker=0, workers=1, lane=0, lanes=1, key_elems=[2048],
                       cc=None, run=new_id(), instance=new_id(), timeout=3)
        pp = PushPull({(0, 0): c}, timeout=5)
        buf = memoryview(bytearray(4 * 2048)).cast("f")
        why = ""
        try:
            pp.push([(0, 0, buf)], lane=0).wait()
        except PsError as e:
            why = str(e)
        pp.close(timeout=1)
        report(name, want in why, repr(why))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--fuzz-rounds", type=int, default=300)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--rss", action="store_true")
    ap.add_argument("--only", default="impostors,memory,descriptors,server",
                    help="comma-separated groups: impostors, memory, descriptors, server")
    args = ap.parse_args()
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="mercury-ps-safety-") as tmp:
        if "impostors" in only:
            check_impostors()
        if "memory" in only:
            check_memory_bounds(args.binary, tmp, args.rss)
        if "descriptors" in only:
            check_descriptors(args.binary, tmp)
        if "impostors" in only:
            check_untagged_payloads(args.binary, tmp)
        if "server" not in only:
            return 1 if report.failed else 0
        server = Server(args.binary, 7310, tmp, "--chunk-bytes", "4096", "--handshake-timeout-ms", "1000",
                        "--metrics", "127.0.0.1:9472")
        try:
            for check in (lambda: check_versions(server), lambda: check_idle_handshake(server),
                          lambda: check_runs_and_iterations(server), lambda: check_flood(server),
                          lambda: check_metrics_beside_idle(server, 9472),
                          lambda: check_fuzz(server, args.fuzz_rounds, args.seed),
                          lambda: check_kill_loop(server, args.kills)):
                try:
                    check()
                except Exception as e:  # noqa: BLE001 - a check that crashed fails, the others still run
                    report("crashed", False, f"{type(e).__name__}: {e}")
            ok, detail = clean_job_exact(server) if server.alive() else (False, "server dead")
            report("serves-after-all", ok, detail)
        finally:
            rc = server.stop()
            reports = server.sanitizer_reports()
            report("exit-clean", rc == 0 and not reports, f"exit {rc}; sanitizer: {reports or 'clean'}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
