# SPDX-License-Identifier: GPL-2.0
"""mercury.torch.sockets on real loopback connections: the process finds its
own, pins their congestion control, and says what they had before."""
from __future__ import annotations

import socket

import pytest

from mercury.tcp import congestion_control, set_congestion_control
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
    with pytest.raises(OSError, match=f"socket {connection.fileno()}: No such file"):
        pin_congestion_control([connection.fileno()], "no-such-cc")
    assert congestion_control(connection) == "reno"   # unchanged


def test_set_congestion_control_returns_the_one_before() -> None:
    """mercury.tcp: the package's one way to select a congestion control
    (the lanes and the mercury-ps client)."""
    with socket.socket() as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno")
        target = "cubic" if "cubic" in available_congestion_controls() else "reno"
        assert set_congestion_control(s, target) == "reno"
        assert congestion_control(s) == target
        with pytest.raises(OSError):
            set_congestion_control(s, "no-such-cc")
        assert congestion_control(s) == target


def test_only_a_switch_away_from_bbr_leaves_pacing_on() -> None:
    assert pacing_left_by({"reno", "cubic"}, "cubic") is None
    assert pacing_left_by({"bbr"}, "bbr") is None
    # mercury's init() drops bbr's pacing (tests/cc/behaviour.sh, select_drops_pacing).
    assert pacing_left_by({"bbr", "cubic"}, "mercury") is None
    why = pacing_left_by({"bbr", "cubic"}, "cubic")
    assert why is not None and "bbr" in why and "'cubic'" in why
