# SPDX-License-Identifier: GPL-2.0
"""pytest: the Python package from this tree, no agent needed."""
from __future__ import annotations

import os
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "python"))
# Never reach a real agent from a unit test.
os.environ["MERCURY_SOCKET"] = "/nonexistent/mercury-pytest.sock"
