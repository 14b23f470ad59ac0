# SPDX-License-Identifier: GPL-2.0
"""mercury.torch.sockets on real loopback connections: the process finds its
own, pins their congestion control, and says what they had before."""
from __future__ import annotations

import socket

import pytest

from mercury.torch.sockets import (available_congestion_controls, find_tcp_sockets, pacing_left_by,
                                   pin_congestion_control)


@pytest.fixture
def connection():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.socket()
    # Whatever this host's default: the test sets the CC the socket starts with.
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno")
    client.connect(server.getsockname())
    peer, _ = server.accept()
    yield client
    for s in (client, peer, server):
        s.close()


def test_finds_its_connections_and_pins_them(connection) -> None:
    assert connection.fileno() in find_tcp_sockets()
    target = "cubic" if "cubic" in available_congestion_controls() else "reno"
    assert pin_congestion_control([connection.fileno()], target) == {"reno"}
    got = connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0", 1)[0].decode()
    assert got == target


def test_an_unknown_congestion_control_is_refused(connection) -> None:
    with pytest.raises(OSError):
        pin_congestion_control([connection.fileno()], "no-such-cc")


def test_only_a_switch_away_from_bbr_leaves_pacing_on() -> None:
    assert pacing_left_by({"reno", "cubic"}, "cubic") is None
    assert pacing_left_by({"bbr"}, "bbr") is None
    # mercury's init() drops bbr's pacing (tests/cc/behaviour.sh, select_drops_pacing).
    assert pacing_left_by({"bbr", "cubic"}, "mercury") is None
    why = pacing_left_by({"bbr", "cubic"}, "cubic")
    assert why is not None and "bbr" in why and "'cubic'" in why
