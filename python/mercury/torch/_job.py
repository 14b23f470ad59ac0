# SPDX-License-Identifier: GPL-2.0
"""The job a trainer's sessions with mercuryd belong to: ``$MERCURY_JOB``,
else "torch". Every session of one trainer (the optimizer's, the NCCL
plugin's, the mercury-ps keys) uses it, so the agent sees one job."""
from __future__ import annotations

import os

DEFAULT_JOB = "torch"


def default_job() -> str:
    return os.environ.get("MERCURY_JOB") or DEFAULT_JOB
