# SPDX-License-Identifier: GPL-2.0
"""``python3 -m mercury status``: what the local mercuryd knows (jobs, learned
timings, ranks per layer), and whether libmercury loads here.

Speaks the agent's protocol itself (a ``StatusRequest``, ``agent/PROTOCOL.md``),
so it works even where libmercury does not. Exit status as ``mercuryctl
status``: 0 ok, 1 the agent refused, 2 usage error, 3 no agent at the socket.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys

from . import available

# The agent's default socket: proto::kDefaultSocketPath (agent/src/protocol/wire.hpp).
DEFAULT_SOCKET = "/run/mercury/mercuryd.sock"

_VERSION = 1
_STATUS_REQUEST, _STATUS_REPLY, _ERROR = 7, 8, 9
_FORMAT_JSON, _FORMAT_TEXT = 0, 1
_MAX_BODY = 1 << 20


class StatusError(Exception):
    """The agent could not be asked, or refused; ``exit_code`` says which."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _frame(msg_type: int, body: bytes) -> bytes:
    return struct.pack("<IBBH", len(body), _VERSION, msg_type, 0) + body


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise StatusError("mercuryd closed the connection before answering", 1)
        data += chunk
    return data


def request_status(path: str, as_json: bool, timeout: float = 5.0) -> str:
    """The agent's status document (JSON text or the human-readable text)."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)
        conn.connect(path)
    except OSError as e:
        raise StatusError(f"cannot reach mercuryd at {path}: {e.strerror or e}", 3) from e
    with conn:
        try:
            conn.sendall(_frame(_STATUS_REQUEST, bytes([_FORMAT_JSON if as_json else _FORMAT_TEXT])))
            length, version, msg_type, _flags = struct.unpack("<IBBH", _recv_exact(conn, 8))
            if version != _VERSION:
                raise StatusError(f"mercuryd speaks protocol {version}, this client {_VERSION}", 1)
            if length > _MAX_BODY:
                raise StatusError(f"mercuryd's reply claims {length} bytes, above the protocol's 1 MiB", 1)
            body = _recv_exact(conn, length)
        except socket.timeout as e:
            raise StatusError(f"no status reply from mercuryd at {path} within {timeout:g} s", 1) from e
        except OSError as e:
            raise StatusError(f"talking to mercuryd at {path}: {e.strerror or e}", 1) from e
    if msg_type == _STATUS_REPLY and len(body) >= 4:
        (size,) = struct.unpack_from("<I", body)
        return body[4:4 + size].decode("utf-8", errors="replace")
    if msg_type == _ERROR and len(body) >= 6:
        code, size = struct.unpack_from("<IH", body)
        reason = body[6:6 + size].decode("utf-8", errors="replace")
        raise StatusError(f"mercuryd refused: {reason} ({os.strerror(code)})", 1)
    raise StatusError(f"unexpected reply from mercuryd (message type {msg_type})", 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m mercury",
                                     description="Mercury from Python: ask the local agent.")
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", help="jobs, learned timings and ranks per layer, from mercuryd")
    st.add_argument("--socket", default=os.environ.get("MERCURY_SOCKET", DEFAULT_SOCKET),
                    help="mercuryd's socket (default: $MERCURY_SOCKET, else %(default)s)")
    st.add_argument("--json", action="store_true", help="the agent's JSON document, plus libmercury's state")
    args = parser.parse_args(argv)

    try:
        document = request_status(args.socket, args.json)
    except StatusError as e:
        print(f"python3 -m mercury: {e}", file=sys.stderr)
        return e.exit_code
    if args.json:
        status = json.loads(document)
        status["libmercury"] = available()
        print(json.dumps(status))
    else:
        print(document, end="" if document.endswith("\n") else "\n")
        print(f"libmercury: {'loaded' if available() else 'not found (calls are no-ops)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
