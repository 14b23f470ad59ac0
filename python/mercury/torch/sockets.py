# SPDX-License-Identifier: GPL-2.0
"""The process's own TCP connections: finding them, and pinning their
congestion control."""
from __future__ import annotations

import os
import socket
from typing import Dict, Optional, Sequence, Set

from mercury.contract import SO_COOKIE
from mercury.tcp import set_congestion_control

__all__ = ["find_tcp_sockets", "pin_congestion_control", "pacing_left_by"]

# Congestion controls that ask for the kernel's internal pacing in their
# init() (sk_pacing_status); a socket switched away from one stays paced,
# unless it is switched to mercury: its datapaths drop that request.
PACING_CCS = frozenset({"bbr", "bbr2", "bbr3"})


def find_tcp_sockets() -> Dict[int, int]:
    """The process's connected TCP sockets: ``{fd: socket cookie}``.

    Backend-agnostic: whatever opened them (Gloo, NCCL's socket transport),
    they are found by looking at the process's own descriptors.
    """
    found = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            dup = os.dup(fd)
        except OSError:
            continue  # gone
        try:
            s = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)  # not a socket
            continue
        try:
            if (s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6)
                    or s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
                continue
            s.getpeername()
            found[fd] = int.from_bytes(s.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8), "little")
        except OSError:
            continue  # unconnected
        finally:
            s.close()
    return found


def pin_congestion_control(fds: Sequence[int], cc: str) -> Set[str]:
    """Sets ``cc`` on each socket and reads it back
    (:func:`mercury.tcp.set_congestion_control`); returns the congestion
    controls the sockets had before.

    Raises OSError if a socket refuses it (not available, or restricted by
    the administrator's net.ipv4.tcp_allowed_congestion_control).
    """
    before: Set[str] = set()
    for fd in fds:
        s = socket.socket(fileno=os.dup(fd))
        try:
            before.add(set_congestion_control(s, cc))
        except OSError as e:
            raise OSError(f"socket {fd}: {e.strerror or e}") from None
        finally:
            s.close()
    return before


def pacing_left_by(before: Set[str], cc: str) -> Optional[str]:
    """Why sockets switched from ``before`` to ``cc`` stay paced, or None.

    bbr switches on the kernel's internal pacing in its init(), and a switch
    to another congestion control leaves it on, at 1.2 x cwnd / srtt: a lane
    released from a hold then crawls until its RTT estimate recovers. The
    mercury datapaths turn it off in their init() (the BPF one from Linux
    6.0), so only a switch to another CC leaves it.
    """
    left = sorted(before & PACING_CCS - {cc})
    if not left or cc == "mercury":
        return None
    return (f"the connections started with congestion control {', '.join(left)} (this netns's default), which "
            f"leaves the kernel's pacing on after the switch to {cc!r}, unlike the baselines' usual sockets; "
            "make mercury, cubic or reno the default (sysctl net.ipv4.tcp_congestion_control)")


def available_congestion_controls() -> set:
    """What this network namespace offers (empty if /proc cannot say)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            return set(f.read().split())
    except OSError:
        return set()
