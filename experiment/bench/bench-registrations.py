# SPDX-License-Identifier: GPL-2.0
"""How long a running mercuryd takes to accept N registrations (by cookie:
run as root) and answer a status request after them. The agent must run
with --max-flows-per-client >= N.

usage: bench-registrations.py SOCKET N
"""
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "integration"))
from hostile import (ERROR, HELLO, KIND_COOKIE, MODEL, REGISTER, STATUS_REPLY,  # noqa: E402
                     STATUS_REQUEST, connect, error_of, frame, frames, string)


def main() -> int:
    s = connect(sys.argv[1])
    n = int(sys.argv[2])
    msgs = frame(HELLO, string("bench") + struct.pack("<II", 0, 0))
    msgs += frame(MODEL, struct.pack("<I", 1) + string("layer0") + struct.pack("<Q", 4096))
    msgs += b"".join(frame(REGISTER, struct.pack("<IBQ", 0, KIND_COOKIE, 1000 + i)) for i in range(n))
    msgs += frame(STATUS_REQUEST, b"\x00")
    t0 = time.monotonic()
    s.sendall(msgs)
    for kind, body in frames(s):
        if kind == ERROR:
            print("refused: errno %d: %s" % error_of(body))
            return 1
        if kind == STATUS_REPLY:
            print(f"{n} registrations + status: {time.monotonic() - t0:.3f} s")
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
