# SPDX-License-Identifier: GPL-2.0
"""What ps_hostile.py and ps_safety.py share: PASS/FAIL lines and a
mercury-ps server of their own on 127.0.0.1, with its log."""
from __future__ import annotations

import os
import resource
import subprocess
import time
from typing import Callable, List, Optional, Tuple


class Report:
    """Prints ``PASS PREFIX/NAME  # detail`` or ``FAIL PREFIX/NAME: detail``
    and counts the failures."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.failed = 0

    def __call__(self, name: str, ok: bool, detail: str) -> None:
        print(("PASS " if ok else "FAIL ") + f"{self.prefix}/{name}" + ("  # " if ok else ": ") + detail, flush=True)
        self.failed += not ok


class Server:
    """``binary`` serving job ``job`` on 127.0.0.1:``port`` with ``secret``
    (a 0600 file in ``tmp``), its stderr in ``tmp``/ps-PORT.log; started
    with ``limits`` (RLIMIT_NOFILE soft, hard) if given. Returns once it
    logs that it serves (or has exited)."""

    def __init__(self, binary: str, port: int, tmp: str, *extra: str, job: str, secret: bytes, cc: str,
                 timeout_ms: int, limits: Optional[Tuple[int, int]] = None, no_agent: bool = True) -> None:
        self.address = f"127.0.0.1:{port}"
        self.port = port
        self.log = os.path.join(tmp, f"ps-{port}.log")
        secret_file = os.path.join(tmp, "secret")
        with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(secret + b"\n")
        preexec: Optional[Callable[[], None]] = None
        if limits:
            preexec = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits)  # noqa: E731
        self.proc = subprocess.Popen([binary, "--listen", self.address, "--job", job, "--secret-file", secret_file,
                                      "--cc", cc, *(["--no-agent"] if no_agent else []),
                                      "--timeout-ms", str(timeout_ms), *extra],
                                     stderr=open(self.log, "w"), preexec_fn=preexec)
        end = time.monotonic() + 20
        while time.monotonic() < end and self.proc.poll() is None and "serving" not in self.text():
            time.sleep(0.05)

    def text(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def sanitizer_reports(self) -> List[str]:
        return [ln for ln in self.text().splitlines() if "Sanitizer" in ln or "runtime error" in ln][:3]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
