# SPDX-License-Identifier: GPL-2.0
"""What the Python side shares with the C side, in one place.

Each value mirrors a C definition named beside it; ``tests/python`` compiles
those C definitions and checks every value and formula here against them, so
the two cannot drift apart silently.
"""
from __future__ import annotations

__all__ = ["NUM_RANKS", "MAX_LANES", "SO_COOKIE", "lane_rank", "rank_lane"]

#: The datapath's ranks, 0 (most urgent) .. NUM_RANKS - 1:
#: ``MERCURY_NUM_RANKS`` in include/mercury/uapi.h.
NUM_RANKS = 8

#: Priority lanes a trainer may open: ``proto::kMaxLanes`` (agent/src/protocol/wire.hpp).
MAX_LANES = 8

#: ``SO_COOKIE`` from <asm-generic/socket.h>; Python's socket module does not name it.
SO_COOKIE = 57


def lane_rank(lane: int, lanes: int) -> int:
    """The datapath rank the agent gives lane ``lane`` of ``lanes``:
    ``ceil(lane * NUM_RANKS / lanes)`` (``proto::lane_rank``)."""
    return (lane * NUM_RANKS + lanes - 1) // lanes


def rank_lane(rank: int, lanes: int) -> int:
    """The lane of ``lanes`` that carries layers of rank ``rank``
    (``proto::rank_lane``)."""
    return rank * lanes // NUM_RANKS
