# SPDX-License-Identifier: GPL-2.0
"""pytest: the Python package from this tree, no agent needed."""
from __future__ import annotations

import os
import sys

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "python"))
# Never reach a real agent from a unit test.
os.environ["MERCURY_SOCKET"] = "/nonexistent/mercury-pytest.sock"


@pytest.fixture(scope="module")
def gloo_world(tmp_path_factory):
    """torch.distributed on Gloo with this process alone (world size 1),
    for one test module."""
    import torch.distributed as dist
    store = tmp_path_factory.mktemp("dist") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()
