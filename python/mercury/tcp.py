# SPDX-License-Identifier: GPL-2.0
"""A TCP socket's congestion control, set and read back: the one way the
package (mercury.torch's lanes, the mercury-ps client) selects one."""
from __future__ import annotations

import socket

__all__ = ["congestion_control", "set_congestion_control"]


def congestion_control(s: socket.socket) -> str:
    """The congestion control ``s`` runs now."""
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0", 1)[0].decode()


def set_congestion_control(s: socket.socket, cc: str) -> str:
    """Sets ``cc`` on ``s`` and reads it back; returns the one ``s`` had
    before. OSError if the kernel refuses it (not available, or not in
    net.ipv4.tcp_allowed_congestion_control for an unprivileged process)
    or the socket reads back another."""
    before = congestion_control(s)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    got = congestion_control(s)
    if got != cc:
        raise OSError(f"congestion control reads back {got!r}, not {cc!r}")
    return before
