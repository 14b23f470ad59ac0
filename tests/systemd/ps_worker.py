#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""A one-worker job against a mercury-ps server, for the systemd suite,
through the installed python3-mercury: with the job's secret
($MERCURY_PS_SECRET_FILE) it pushes one key and checks the sum that comes
back ("sum ok"); with a wrong secret it must be refused ("refused: ...").

usage: ps_worker.py JOB HOST:PORT
"""
import array
import sys

from mercury.ps import Connection, PsError, PushPull, new_id, read_secret


def connect(job: str, address: str, secret: bytes) -> Connection:
    return Connection(address, job=job, secret=secret, worker=0, workers=1, lane=0, lanes=1,
                      key_elems=[1000], cc=None, run=new_id(), instance=new_id(), timeout=30)


def main() -> int:
    job, address = sys.argv[1], sys.argv[2]
    conn = connect(job, address, read_secret())
    values = array.array("f", (float(i) for i in range(1000)))
    pp = PushPull({(0, 0): conn}, timeout=30)
    pp.push([(0, 0, memoryview(values))], lane=0).wait()
    pp.close()
    print("sum ok" if list(values) == [float(i) for i in range(1000)] else f"sum wrong: {list(values)[:5]}")
    try:
        connect(job, address, b"not the job's secret, but long enough to try").close()
        print("accepted a wrong secret")
    except PsError as e:
        print(f"refused: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
