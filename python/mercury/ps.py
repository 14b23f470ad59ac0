# SPDX-License-Identifier: GPL-2.0
"""A worker's side of mercury-ps, the parameter server (agent/PROTOCOL.md,
"Parameter server"; the C side is agent/src/ps/wire.hpp, and
tests/python/test_contract.py checks every value below against it).

:class:`Connection` is one authenticated TCP connection (one server, one
lane); :class:`PushPull` drives many of them from one background thread:
:meth:`PushPull.push` queues a key's float32 values, which go out in
chunks, and the server's sums come back into the same memory, each chunk
as soon as every worker has pushed it.
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import os
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Deque, Dict, List, Optional, Sequence, Tuple

from mercury import contract
from mercury.tcp import set_congestion_control

__all__ = ["PsError", "Connection", "PushPull", "Work", "FrameMac", "read_secret", "weak_secret", "new_id",
           "place", "Part", "PLACEMENTS", "PARTITION_BYTES", "MXNET_SPLIT_ELEMS", "MAGIC", "VERSION"]

MAGIC = 0x3153504D          # "MPS1"; ps::kMagic
VERSION = 2                 # ps::kVersion
NONCE_BYTES = 32            # ps::kNonceBytes
MAC_BYTES = 32              # ps::kMacBytes
TAG_BYTES = 16              # ps::kTagBytes
MAX_JOB_NAME = 64           # ps::kMaxJobName
MAX_LANES = contract.MAX_LANES   # ps::kMaxLanes: the trainer's lanes
MAX_KEYS = 1 << 16          # ps::kMaxKeys
MAX_ERROR_TEXT = 4096       # ps::kMaxErrorText
MIN_SECRET_BYTES = 32       # ps::kMinSecretBytes
MIN_SECRET_DISTINCT = 10    # ps::kMinSecretDistinct
PUSH, BYE, ACK_PUSHES, READY, PULL, ERROR, ACK = 1, 2, 3, 16, 17, 18, 19   # ps::Type
UNTAGGED_PAYLOADS = 1       # ps::kUntaggedPayloads: a Challenge flag this worker never accepts

CHALLENGE = struct.Struct("<IHHI32s")            # ps::Challenge
HELLO = struct.Struct("<IHHIIIIIIQQ32s")         # ps::Hello up to its mac
HELLO_PREFIX = 8                                 # ps::kHelloPrefix
HEADER = struct.Struct("<B3xIIII")               # ps::Header


# -- placement: which server holds which part of each bucket ------------------
# (here, without torch, so experiment/torchsim.py simulates the same placement)

PLACEMENTS = ("balanced", "mxnet")
PARTITION_BYTES = 4096000          # BytePS's default partition
MXNET_SPLIT_ELEMS = 1000000        # MXNet's MXNET_KVSTORE_BIGARRAY_BOUND


@dataclass(frozen=True)
class Part:
    """Elements [start, end) of a bucket, key ``key`` of server ``server``."""
    server: int
    key: int
    start: int
    end: int


def place(sizes: Sequence[int], servers: int, placement: str, elem_bytes: int = 4,
          partition_bytes: int = PARTITION_BYTES) -> List[List[Part]]:
    """Each bucket's partitions (``sizes``: elements per bucket; "balanced"
    cuts at ``partition_bytes``), keys numbered per server in bucket order.
    Deterministic: every worker gets the same."""
    if servers < 1:
        raise ValueError("at least one server")
    if placement not in PLACEMENTS:
        raise ValueError(f"placement is one of {', '.join(PLACEMENTS)}, not {placement!r}")
    keys = [0] * servers
    load = [0] * servers
    out: List[List[Part]] = []
    rr = 0
    for size in sizes:
        parts: List[Part] = []
        if placement == "balanced":
            step = max(1, partition_bytes // elem_bytes)
            for start in range(0, size, step):
                s = min(range(servers), key=lambda i: (load[i], i))
                end = min(size, start + step)
                parts.append(Part(s, keys[s], start, end))
                keys[s] += 1
                load[s] += end - start
        elif size > MXNET_SPLIT_ELEMS and servers > 1:
            bounds = [size * i // servers for i in range(servers + 1)]
            for s in range(servers):
                parts.append(Part(s, keys[s], bounds[s], bounds[s + 1]))
                keys[s] += 1
                load[s] += bounds[s + 1] - bounds[s]
        else:
            s = rr % servers
            rr += 1
            parts.append(Part(s, keys[s], 0, size))
            keys[s] += 1
            load[s] += size
        out.append(parts)
    return out



class PsError(RuntimeError):
    """The parameter server refused or ended the job, or cannot be reached."""


def weak_secret(secret: bytes) -> str:
    """Why ``secret`` is too weak to resist offline guessing from one
    recorded handshake, or "" (the rule is mercury-ps's, ps::weak_secret)."""
    distinct = len(set(secret))
    if len(secret) >= MIN_SECRET_BYTES and distinct >= MIN_SECRET_DISTINCT:
        return ""
    return (f"the secret is too weak ({len(secret)} bytes, {distinct} different): it needs at least "
            f"{MIN_SECRET_BYTES} bytes of at least {MIN_SECRET_DISTINCT} different values; make one with "
            "`head -c 32 /dev/urandom | base64`")


def new_id() -> int:
    """A random, non-zero 64-bit id (a run's, a worker process's)."""
    return int.from_bytes(os.urandom(8), "little") or 1


class FrameMac:
    """One direction's frame tags (ps::FrameMac): HMAC-SHA256 under a key
    drawn from the secret and both nonces, over the frame's number in that
    direction and its bytes, truncated to TAG_BYTES."""

    TO_SERVER = b"mercury-ps frames to server"
    TO_WORKER = b"mercury-ps frames to worker"

    def __init__(self, secret: bytes, challenge: bytes, worker: bytes, label: bytes) -> None:
        self._key = hmac.new(secret, label + challenge + worker, hashlib.sha256).digest()
        self.frames = 0

    def next(self, header: bytes, payload: "bytes | memoryview" = b"") -> bytes:
        h = hmac.new(self._key, self.frames.to_bytes(8, "little") + header, hashlib.sha256)
        h.update(payload)
        self.frames += 1
        return h.digest()[:TAG_BYTES]


def read_secret(secret: Optional[str] = None) -> bytes:
    """The job's secret: ``secret``, else the file ``$MERCURY_PS_SECRET_FILE``
    (a trailing newline dropped), else ``$MERCURY_PS_SECRET``, as mercury-ps
    reads it."""
    if secret is None:
        path = os.environ.get("MERCURY_PS_SECRET_FILE")
        if path:
            with open(path, "rb") as f:
                data = f.read()
            return data[:-1] if data.endswith(b"\n") else data
        secret = os.environ.get("MERCURY_PS_SECRET", "")
    if not secret:
        raise PsError("no secret for the parameter servers: pass secret=, or set $MERCURY_PS_SECRET_FILE or "
                      "$MERCURY_PS_SECRET (the servers' --secret-file)")
    key = secret.encode() if isinstance(secret, str) else secret
    why = weak_secret(key)
    if why:
        raise PsError(why)
    return key


def parse_address(address: str) -> Tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"a server is HOST:PORT, not {address!r}")
    return host.strip("[]"), int(port)


def _recv_exact(s: socket.socket, n: int, deadline: Optional[float] = None) -> bytes:
    """``n`` bytes; by ``deadline`` (time.monotonic()) if given, however
    slowly they come."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("deadline passed")
            s.settimeout(left)
        part = s.recv(n - len(buf))
        if not part:
            raise ConnectionError("connection closed")
        buf += part
    return bytes(buf)


class Connection:
    """One connection to a server, handshaken both ways: the worker proved
    the job's secret, the server proved it too (before any gradient goes
    out), the key sizes declared. ``run`` names the run (every worker of it
    the same), ``instance`` this worker process (its lanes the same).
    ``cc`` is set before connecting and read back. ``timeout`` bounds the
    connect and the whole handshake."""

    def __init__(self, address: str, *, job: str, secret: bytes, worker: int, workers: int, lane: int,
                 lanes: int, key_elems: Sequence[int], cc: Optional[str], run: int, instance: int,
                 timeout: float = 30.0) -> None:
        if not 0 < len(job.encode()) <= MAX_JOB_NAME:
            raise ValueError(f"job name must be 1..{MAX_JOB_NAME} bytes")
        if not 0 < len(key_elems) <= MAX_KEYS:
            raise ValueError(f"1..{MAX_KEYS} keys per server, not {len(key_elems)}")
        why = weak_secret(secret)
        if why:
            raise PsError(why)
        self.address = address
        host, port = parse_address(address)
        deadline = time.monotonic() + timeout
        while True:   # the server may still be starting
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            s = socket.socket(family, socket.SOCK_STREAM)
            try:
                if cc:
                    set_congestion_control(s, cc)   # OSError: below
                s.settimeout(max(0.1, deadline - time.monotonic()))
                s.connect((host, port))
            except (ConnectionRefusedError, socket.timeout) as e:
                s.close()
                if time.monotonic() >= deadline:
                    raise PsError(f"parameter server {address} not reachable within {timeout:g} s: {e}") from None
                time.sleep(0.05)
                continue
            except OSError as e:
                s.close()
                raise PsError(f"parameter server {address}: {e}") from None
            try:
                challenge = _recv_exact(s, CHALLENGE.size, deadline)
                break
            except socket.timeout:
                s.close()
                raise PsError(f"parameter server {address}: no handshake within {timeout:g} s") from None
            except (ConnectionError, OSError) as e:
                # A server at its limit of handshakes closes at accept,
                # before its challenge: a busy server, tried again.
                s.close()
                if time.monotonic() >= deadline:
                    raise PsError(f"parameter server {address} not reachable within {timeout:g} s: {e}") from None
                time.sleep(0.05)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            magic, version, flags, self.chunk_elems, nonce = CHALLENGE.unpack(challenge)
            if magic != MAGIC:
                raise PsError(f"{address} is not a mercury-ps server")
            if version != VERSION:
                raise PsError(f"parameter server {address} speaks mercury-ps version {version}, this worker "
                              f"version {VERSION}: upgrade both to the same release")
            if flags & UNTAGGED_PAYLOADS:
                raise PsError(f"parameter server {address} runs with --payload-tags off (gradients could be altered "
                              "in flight unnoticed): a trusted testbed's setting, refused")
            if not 0 < self.chunk_elems <= 1 << 20:
                raise PsError(f"parameter server {address}: chunks of {self.chunk_elems} elements")
            mine = os.urandom(NONCE_BYTES)
            jb = job.encode()
            fixed = HELLO.pack(MAGIC, VERSION, len(jb), worker, workers, lane, lanes, len(key_elems), 0, run,
                               instance, mine)
            mac = hmac.new(secret, b"mercury-ps hello" + nonce + fixed + jb, hashlib.sha256).digest()
            self.up = FrameMac(secret, nonce, mine, FrameMac.TO_SERVER)
            self.down = FrameMac(secret, nonce, mine, FrameMac.TO_WORKER)
            keys = struct.pack(f"<{len(key_elems)}Q", *key_elems)
            s.sendall(fixed + mac + jb + keys + self.up.next(keys))
            header = _recv_exact(s, HEADER.size, deadline)
            kind, _, _, count, _ = HEADER.unpack(header)
            text = b""
            if kind == ERROR:
                if count > MAX_ERROR_TEXT:
                    raise PsError(f"parameter server {address}: an error of {count} bytes in the handshake")
                text = _recv_exact(s, count, deadline)
            elif kind != READY:
                raise PsError(f"parameter server {address}: unexpected message {kind} in the handshake")
            proven = hmac.compare_digest(self.down.next(header, text), _recv_exact(s, TAG_BYTES, deadline))
            if kind == ERROR:
                raise PsError(f"parameter server {address}{'' if proven else ' (unauthenticated)'}: "
                              f"{text.decode(errors='replace')}")
            if not proven:
                raise PsError(f"parameter server {address} did not prove it holds the job's secret: "
                              "not the server the job was given, or another secret")
        except socket.timeout:
            s.close()
            raise PsError(f"parameter server {address}: no handshake within {timeout:g} s") from None
        except (OSError, ConnectionError) as e:
            s.close()
            raise PsError(f"parameter server {address}: handshake failed: {e}") from None
        except BaseException:
            s.close()
            raise
        s.settimeout(None)
        self.sock = s

    def frame(self, kind: int, key: int = 0, offset: int = 0, count: int = 0, iteration: int = 0,
              payload: bytes = b"") -> bytes:
        """One message to the server, tagged (the next frame's number)."""
        header = HEADER.pack(kind, key, offset, count, iteration)
        return header + payload + self.up.next(header, payload)

    def receive(self, timeout: Optional[float] = None) -> Tuple[int, int, int, int, bytes]:
        """The server's next message, its tag checked: (type, key, offset,
        iteration, payload). Raises PsError on a bad tag or length,
        socket.timeout after ``timeout``, ConnectionError on a close."""
        deadline = None if timeout is None else time.monotonic() + timeout
        header = _recv_exact(self.sock, HEADER.size, deadline)
        kind, key, offset, count, iteration = HEADER.unpack(header)
        size = count * 4 if kind == PULL else count if kind == ERROR else 0
        if (kind == PULL and count > self.chunk_elems) or (kind == ERROR and count > MAX_ERROR_TEXT) or \
                kind not in (PULL, ERROR, ACK, READY):
            raise PsError(f"parameter server {self.address}: message {kind} of {count}")
        payload = _recv_exact(self.sock, size, deadline)
        if not hmac.compare_digest(self.down.next(header, payload), _recv_exact(self.sock, TAG_BYTES, deadline)):
            raise PsError(f"parameter server {self.address}: a message failed authentication")
        self.sock.settimeout(None)
        return kind, key, offset, iteration, payload

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()


class Work:
    """One key's push and pull: done when every chunk's sum is in place."""

    def __init__(self, chunks: int, timeout: float) -> None:
        self._left = chunks
        self._done = threading.Event()
        self._error: Optional[BaseException] = None
        self._timeout = timeout
        self._callbacks: List = []
        self._callbacks_lock = threading.Lock()   # then() against the I/O thread's finish
        self.keys: List[Tuple[int, int]] = []    # (server, key) it waits for
        if chunks == 0:
            self._done.set()

    def then(self, callback) -> None:
        """Calls ``callback()`` once done (from the I/O thread, or now)."""
        with self._callbacks_lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def is_completed(self) -> bool:
        return self._done.is_set()

    def wait(self) -> None:
        if not self._done.wait(self._timeout):
            raise PsError(f"no answer from the parameter servers within {self._timeout:g} s")
        if self._error is not None:
            raise PsError(str(self._error))

    def _chunk_done(self) -> None:
        self._left -= 1
        if self._left == 0:
            self._finish()

    def _fail(self, error: BaseException) -> None:
        if not self._done.is_set():
            self._error = error
            self._finish()

    def _finish(self) -> None:
        with self._callbacks_lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()


class _Wire:
    """A connection's queues: frames to send, the one being received
    (header, then payload, then tag)."""

    def __init__(self, conn: Connection, server: int) -> None:
        self.conn = conn
        self.server = server
        self.out: Deque[memoryview] = collections.deque()
        self.header = bytearray(HEADER.size)
        self.tag = bytearray(TAG_BYTES)
        self.have = 0                    # bytes of the current header, payload or tag received
        self.payload: Optional[memoryview] = None
        self.in_tag = False              # receiving the tag (after the payload)
        self.kind = 0
        self.pull: Optional[Tuple[int, int, Work]] = None   # (key, offset, work) of the pull being received
        self.error_text: Optional[bytearray] = None


class PushPull:
    """Pushes keys to their servers and places the sums, on one I/O thread.

    ``connections[(server, lane)]``, each handshaken with that server's keys.
    A key's memory (a writable buffer of float32s) must stay untouched by
    the caller until its :class:`Work` is done.
    """

    def __init__(self, connections: Dict[Tuple[int, int], Connection], timeout: float) -> None:
        self._wires = {k: _Wire(c, k[0]) for k, c in connections.items()}
        self._chunk = {server: c.chunk_elems for (server, _), c in connections.items()}
        self._timeout = timeout
        self._lock = threading.Lock()
        self._pending: Dict[Tuple[int, int], Tuple[memoryview, Work]] = {}   # (server, key) -> memory, work
        self._rounds: Dict[Tuple[int, int], int] = {}   # (server, key) -> its pushes so far (the wire's iteration)
        self._arrived: Dict[Tuple[int, int], set] = {}  # (server, key) -> offsets whose sum is in, this round
        self._broken: Optional[str] = None
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        for wire in self._wires.values():
            wire.conn.sock.setblocking(False)
            self._selector.register(wire.conn.sock, selectors.EVENT_READ, wire)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="mercury-ps-io", daemon=True)
        self._thread.start()

    def push(self, parts: Sequence[Tuple[int, int, memoryview]], lane: int) -> Work:
        """Pushes each ``(server, key, float32 memory)`` on ``lane``; the sums
        replace the memory. One Work for all of them."""
        chunks = sum((len(mem) + self._chunk[s] - 1) // self._chunk[s] for s, _, mem in parts)
        work = Work(chunks, self._timeout)
        with self._lock:
            if self._broken:
                raise PsError(self._broken)
            for server, key, mem in parts:
                if (server, key) in self._pending:
                    raise PsError(f"key {key} of server {server} pushed again before its sums arrived")
                self._pending[(server, key)] = (mem, work)
                self._arrived[(server, key)] = set()
                iteration = self._rounds.get((server, key), 0)
                self._rounds[(server, key)] = iteration + 1
                work.keys.append((server, key))
                wire = self._wires[(server, lane)]
                step = self._chunk[server]
                raw = mem.cast("B")
                for off in range(0, len(mem), step):
                    n = min(step, len(mem) - off)
                    header = HEADER.pack(PUSH, key, off, n, iteration)
                    body = raw[off * 4:(off + n) * 4]
                    wire.out.append(memoryview(header))
                    wire.out.append(body)
                    wire.out.append(memoryview(wire.conn.up.next(header, body)))
        self._wake_w.send(b"w")
        return work

    def close(self, timeout: float = 10.0) -> None:
        """Says bye on every connection and waits until each server has
        closed it (so it is out of the job before anyone starts the next)."""
        with self._lock:
            for wire in self._wires.values():
                wire.out.append(memoryview(wire.conn.frame(BYE)))
            self._stopping = True
        self._wake_w.send(b"w")
        self._thread.join(timeout=timeout)
        for wire in self._wires.values():
            wire.conn.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    # -- the I/O thread -------------------------------------------------------

    def _fail_all(self, why: str) -> None:
        with self._lock:
            if not self._broken:
                self._broken = why
            pending = list(self._pending.values())
            self._pending.clear()
        for _, work in pending:
            work._fail(PsError(why))

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as e:  # noqa: BLE001 - every waiter must hear of it
            self._fail_all(f"parameter server I/O failed: {e}")

    def _loop(self) -> None:
        ended: set = set()   # wires the server closed after our bye
        while True:
            with self._lock:
                writing = [w for w in self._wires.values() if w.out]
                stopping = self._stopping
            if len(ended) == len(self._wires):
                return
            for wire in self._wires.values():
                if wire in ended:
                    continue
                events = selectors.EVENT_READ | (selectors.EVENT_WRITE if wire in writing else 0)
                self._selector.modify(wire.conn.sock, events, wire)
            for key, events in self._selector.select(timeout=1.0):
                wire = key.data
                if wire is None:
                    try:
                        self._wake_r.recv(4096)
                    except BlockingIOError:
                        pass
                    continue
                if events & selectors.EVENT_WRITE:
                    self._send(wire)
                if events & selectors.EVENT_READ and not self._receive(wire):
                    if stopping and not wire.out:
                        ended.add(wire)
                        self._selector.unregister(wire.conn.sock)
                        continue
                    self._fail_all(f"parameter server {wire.conn.address} closed the connection")
                    return

    def _send(self, wire: _Wire) -> None:
        while True:
            with self._lock:
                if not wire.out:
                    return
                batch = list(wire.out)[:64]
            try:
                sent = wire.conn.sock.sendmsg(batch)
            except BlockingIOError:
                return
            with self._lock:
                while sent > 0:
                    head = wire.out[0]
                    if sent >= len(head):
                        sent -= len(head)
                        wire.out.popleft()
                    else:
                        wire.out[0] = head[sent:]
                        sent = 0

    def _receive(self, wire: _Wire) -> bool:
        """Reads what is there; False on EOF or a server's error."""
        sock = wire.conn.sock
        while True:
            into = wire.tag if wire.in_tag else wire.header if wire.payload is None else wire.payload
            try:
                n = sock.recv_into(memoryview(into)[wire.have:])
            except BlockingIOError:
                return True
            except OSError:
                return False
            if n == 0:
                return False
            wire.have += n
            if wire.have < len(into):
                continue
            wire.have = 0
            if wire.in_tag:
                if not self._on_frame(wire):
                    return False
            elif wire.payload is None:
                if not self._on_header(wire):
                    return False
            else:
                wire.in_tag = True

    def _fail_wire(self, wire: _Wire, why: str) -> bool:
        self._fail_all(f"parameter server {wire.conn.address}: {why}")
        return False

    def _on_header(self, wire: _Wire) -> bool:
        """Checks the lengths a header declares against what this worker
        asked for, before reading a byte of its payload into memory."""
        kind, key, offset, count, iteration = HEADER.unpack(wire.header)
        wire.kind = kind
        if kind == ERROR:
            if count > MAX_ERROR_TEXT:
                return self._fail_wire(wire, f"an error of {count} bytes (at most {MAX_ERROR_TEXT})")
            wire.error_text = bytearray(count)
            wire.payload = memoryview(wire.error_text)
        elif kind == PULL:
            with self._lock:
                entry = self._pending.get((wire.server, key))
                arrived = self._arrived.get((wire.server, key))
                rounds = self._rounds.get((wire.server, key), 0)
            chunk = self._chunk[wire.server]
            if entry is None or arrived is None:
                return self._fail_wire(wire, f"a sum for key {key}, which is not waiting for one")
            mem, work = entry
            if offset % chunk or offset >= len(mem) or count != min(chunk, len(mem) - offset):
                return self._fail_wire(wire, f"a sum for key {key} of {count} elements at {offset}: not a chunk "
                                             f"of its {len(mem)}")
            if iteration != rounds - 1:
                return self._fail_wire(wire, f"a sum for key {key} of iteration {iteration}; it was pushed for "
                                             f"iteration {rounds - 1}")
            if offset in arrived:
                return self._fail_wire(wire, f"a second sum for key {key} offset {offset} in one iteration")
            arrived.add(offset)
            wire.payload = mem.cast("B")[offset * 4:(offset + count) * 4]
            wire.pull = (key, offset, work)
        else:
            return self._fail_wire(wire, f"unexpected message {kind}")
        if len(wire.payload) == 0:
            wire.in_tag = True
        return True

    def _on_frame(self, wire: _Wire) -> bool:
        """A whole frame: nothing counts before its tag is checked."""
        payload = wire.payload if wire.payload is not None else b""
        good = hmac.compare_digest(wire.conn.down.next(bytes(wire.header), payload), bytes(wire.tag))
        wire.payload, wire.in_tag = None, False
        pull, wire.pull = wire.pull, None
        if not good:
            return self._fail_wire(wire, "a message failed authentication")
        if wire.kind == ERROR:
            text = (wire.error_text or b"").decode(errors="replace")
            wire.error_text = None
            return self._fail_wire(wire, text)
        if pull is None:
            return True
        work = pull[2]
        if work._left == 1:   # its last chunk: the keys may be pushed again once it is done
            with self._lock:
                for k in work.keys:
                    self._pending.pop(k, None)
                    self._arrived.pop(k, None)
        work._chunk_done()
        return True
