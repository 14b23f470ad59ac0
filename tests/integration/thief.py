# SPDX-License-Identifier: GPL-2.0
"""A hostile local client (used by agent_native.sh): drops to uid 65534 and
tries to take over another process's connection by naming its cookie, in
the raw agent protocol, under a job name that would clear the operator's
terminal and forge a log line if shown raw. Prints the agent's answer; exits 0 if it was refused
with EPERM, 1 if the claim was accepted.

usage: thief.py SOCKET COOKIE
"""
import errno
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hostile import ERROR, HELLO, KIND_COOKIE, MODEL, REGISTER, frame, string  # noqa: E402
from hostile import frames as read_frames  # noqa: E402


def main() -> int:
    path, cookie = sys.argv[1], int(sys.argv[2])
    os.setgid(65534)
    os.setuid(65534)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.settimeout(5)  # an agent that accepts the claim answers nothing more
    s.sendall(frame(HELLO, string("thief\x1b[2J\nlevel=error forged") + struct.pack("<II", 0, os.getpid())) +
              frame(MODEL, struct.pack("<I", 1) + string("x") + struct.pack("<Q", 4)) +
              frame(REGISTER, struct.pack("<IBQ", 0, KIND_COOKIE, cookie)))
    try:
        for kind, body in read_frames(s):
            if kind == ERROR:
                code = struct.unpack_from("<I", body)[0]
                (n,) = struct.unpack_from("<H", body, 4)
                print(f"refused: errno {code}: {body[6:6 + n].decode()}")
                return 0 if code == errno.EPERM else 1
    except socket.timeout:
        pass
    print("accepted: the agent did not refuse the claim")
    return 1


if __name__ == "__main__":
    sys.exit(main())
