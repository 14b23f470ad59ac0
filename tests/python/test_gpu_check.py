# SPDX-License-Identifier: GPL-2.0
"""scripts/gpu-check.sh's Python side (tests/gpu/check.py) where no GPU is:
its comparison against DDP runs and can tell, and it fails plainly without
a GPU rather than passing on nothing."""
from __future__ import annotations

import os
import subprocess
import sys

import torch

from conftest import TOP

CHECK = os.path.join(TOP, "tests", "gpu", "check.py")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, CHECK, *args], capture_output=True, text=True, timeout=300)


def test_gloo_comparison_runs_on_the_cpu() -> None:
    out = run("--cpu")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS gloo-cpu/ddp-equivalence" in out.stdout
    assert out.stdout.rstrip().endswith("gpu-check: 1 passed, 0 failed, 0 skipped")


def test_no_gpu_is_a_failure() -> None:
    out = run("--plugin-dir", os.path.join(TOP, "build", "user", "lib"))
    assert out.returncode == 1
    assert "FAIL gpu/visible" in out.stdout and "0 passed, 1 failed" in out.stdout


def test_the_comparison_sees_a_difference(tmp_path) -> None:
    """The equivalence measure is not blind: a model trained further differs."""
    sys.path.insert(0, os.path.dirname(CHECK))
    import check  # noqa: E402
    a = check.model()
    torch.save(a.state_dict(), tmp_path / "a.pt")
    with torch.no_grad():
        next(a.parameters()).mul_(1.01)
    torch.save(a.state_dict(), tmp_path / "b.pt")
    assert 0.005 < check.max_relative_difference(str(tmp_path / "b.pt"), str(tmp_path / "a.pt")) < 0.02
