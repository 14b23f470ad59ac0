# SPDX-License-Identifier: GPL-2.0
"""Clients that test the agent's limits (used by agent_native.sh), in the raw
agent protocol (agent/PROTOCOL.md). Each prints what happened and exits 0 if
the agent behaved as documented.

usage: hostile.py partial-frame SOCKET       a frame begun and never finished
                                             gets ETIMEDOUT, then EOF
       hostile.py pipeline SOCKET N          N StatusRequests (of a 3,000-layer
                                             job) sent at once, replies left
                                             unread for a while: all N are
                                             answered, the client is not dropped
       hostile.py flows-limit SOCKET LIMIT   LIMIT registrations pass, the
                                             next gets ENOSPC (root: by cookie)
       hostile.py json-names SOCKET          a job and layer named with quotes,
                                             control bytes and invalid UTF-8:
                                             the JSON status still parses
       hostile.py same-name SOCKET           two trainers of root and one of
                                             nobody say one job name: root's
                                             share a job id, nobody's gets
                                             another (run as root)
"""
import errno
import json
import os
import socket
import struct
import sys
import time
from typing import Iterator, Tuple

VERSION = 1
HELLO, MODEL, REGISTER, STATUS_REQUEST, STATUS_REPLY, ERROR = 1, 3, 5, 7, 8, 9
KIND_COOKIE = 2


def frame(kind: int, body: bytes) -> bytes:
    return struct.pack("<IBBH", len(body), VERSION, kind, 0) + body


def string(s: str) -> bytes:
    return struct.pack("<H", len(s)) + s.encode()


def frames(sock: socket.socket) -> Iterator[Tuple[int, bytes]]:
    buf = b""
    while True:
        data = sock.recv(1 << 16)
        if not data:
            return
        buf += data
        while len(buf) >= 8:
            length, _, kind, _ = struct.unpack_from("<IBBH", buf)
            if len(buf) < 8 + length:
                break
            yield kind, buf[8:8 + length]
            buf = buf[8 + length:]


def error_of(body: bytes) -> Tuple[int, str]:
    code = struct.unpack_from("<I", body)[0]
    (n,) = struct.unpack_from("<H", body, 4)
    return code, body[6:6 + n].decode(errors="replace")


def connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.settimeout(60)  # a hung agent fails the check instead of the suite
    return s


def partial_frame(path: str) -> int:
    s = connect(path)
    s.sendall(struct.pack("<IBBH", 1000, VERSION, HELLO, 0) + b"x" * 10)
    for kind, body in frames(s):
        if kind == ERROR:
            code, why = error_of(body)
            print(f"refused: errno {code}: {why}")
            return 0 if code == errno.ETIMEDOUT and s.recv(1) == b"" else 1
    print("closed without an Error")
    return 1


def pipeline(path: str, n: int) -> int:
    # A job with 3,000 layers makes each status about 300 KB, so that N
    # unread replies would be far beyond what the agent may queue.
    job = connect(path)
    layers = 3000
    model = struct.pack("<I", layers) + b"".join(string(f"layer{i}") + struct.pack("<Q", 4096)
                                                 for i in range(layers))
    job.sendall(frame(HELLO, string("big") + struct.pack("<II", 0, 0)) + frame(MODEL, model))
    s = connect(path)
    s.sendall(frame(STATUS_REQUEST, b"\x01") * n)
    time.sleep(1)  # not reading: the agent must wait for us, not drop us
    replies = 0
    for kind, body in frames(s):
        if kind == ERROR:
            code, why = error_of(body)
            print(f"dropped after {replies} replies: errno {code}: {why}")
            return 1
        replies += kind == STATUS_REPLY
        if replies == n:
            break
    print(f"replies={replies} of {n}")
    return 0 if replies == n else 1


def flows_limit(path: str, limit: int) -> int:
    s = connect(path)
    msgs = frame(HELLO, string("limits") + struct.pack("<II", 0, 0))
    msgs += frame(MODEL, struct.pack("<I", 1) + string("layer0") + struct.pack("<Q", 4096))
    for cookie in range(1, limit + 2):
        msgs += frame(REGISTER, struct.pack("<IBQ", 0, KIND_COOKIE, 0x7f000000 + cookie))
    s.sendall(msgs)
    for kind, body in frames(s):
        if kind == ERROR:
            code, why = error_of(body)
            print(f"refused: errno {code}: {why}")
            return 0 if code == errno.ENOSPC else 1
    print(f"all {limit + 1} registrations accepted")
    return 1


def raw_string(b: bytes) -> bytes:
    return struct.pack("<H", len(b)) + b


def json_names(path: str) -> int:
    # Names are the trainer's bytes: quotes, backslashes, control bytes and
    # bytes that are not UTF-8 must still give valid JSON.
    job_name = b'q"uote\\back\x01ctl\xffbad'
    layer_name = b'l\n"x'
    job = connect(path)
    job.sendall(frame(HELLO, raw_string(job_name) + struct.pack("<II", 0, 0)) +
                frame(MODEL, struct.pack("<I", 1) + raw_string(layer_name) + struct.pack("<Q", 4096)))
    s = connect(path)
    for _ in range(50):  # until the agent has read the job's frames
        s.sendall(frame(STATUS_REQUEST, b"\x00"))  # JSON
        kind, body = next(frames(s))
        if kind != STATUS_REPLY:
            print(f"unexpected reply kind {kind}")
            return 1
        (n,) = struct.unpack_from("<I", body)
        try:
            status = json.loads(body[4:4 + n].decode("utf-8"))
        except ValueError as e:
            print(f"not JSON: {e}: {body[4:4 + n][:200]!r}")
            return 1
        names = [(j["job"], [l["name"] for l in j["layers"]]) for j in status["jobs"]]
        if names:
            want = (job_name.decode("utf-8", errors="replace"), [layer_name.decode()])
            print(f"names={names}")
            return 0 if names == [want] else 1
        time.sleep(0.1)
    print("the job never showed up")
    return 1


def job_ids(s: socket.socket, name: str) -> dict:
    """Worker rank -> job id of the sessions named @name, once all 3 are there."""
    for _ in range(50):
        s.sendall(frame(STATUS_REQUEST, b"\x00"))  # JSON
        kind, body = next(frames(s))
        (n,) = struct.unpack_from("<I", body)
        ids = {j["worker"]: j["job_id"] for j in json.loads(body[4:4 + n])["jobs"] if j["job"] == name}
        if len(ids) == 3:
            return ids
        time.sleep(0.1)
    return {}


def same_name(path: str) -> int:
    # A job is its name and its user: another user who says the same name
    # must not join the job (it would then hold its flows, or make them back
    # off with its own). Two jobs on the host: isolate_jobs = auto gives ids.
    def hello(worker: int) -> bytes:
        return frame(HELLO, string("shared-name") + struct.pack("<II", worker, 0))

    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.setgid(65534)
            os.setuid(65534)
            other = connect(path)
            other.sendall(hello(9))
        except OSError as e:
            print(f"nobody's trainer: {e}")
            os.write(ready_w, b"e")
            os._exit(1)
        os.write(ready_w, b"o")
        os.read(done_r, 1)  # keep the session until the parent has looked
        os._exit(0)
    if os.read(ready_r, 1) != b"o":
        os.waitpid(child, 0)
        return 1
    first, second = connect(path), connect(path)
    first.sendall(hello(1))
    second.sendall(hello(2))
    ids = job_ids(connect(path), "shared-name")
    os.write(done_w, b"x")
    os.waitpid(child, 0)
    print(f"job ids by worker (1, 2: root; 9: nobody): {ids}")
    # Root's two sessions share one id; nobody's is another; none is 0.
    return 0 if len(ids) == 3 and 0 not in ids.values() and ids[1] == ids[2] != ids[9] else 1


def main() -> int:
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "partial-frame":
        return partial_frame(path)
    if mode == "pipeline":
        return pipeline(path, int(sys.argv[3]))
    if mode == "flows-limit":
        return flows_limit(path, int(sys.argv[3]))
    if mode == "json-names":
        return json_names(path)
    if mode == "same-name":
        return same_name(path)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
