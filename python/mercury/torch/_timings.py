# SPDX-License-Identifier: GPL-2.0
"""Each layer's forward and backward time in a training iteration, measured
from the forward pre-hooks and the gradients' arrival, and reported to
mercuryd (which turns them into ranks).

A layer's forward time is the time from its forward's start to the next
layer's (the last one's: to the model's forward end), so what runs between
layers (activations, parameter-free modules) counts to the layer before it,
and the sum over the layers is the forward pass: mercuryd's deadlines are
these sums. It needs only the pre-hooks the optimizer has anyway, and one
clock read per layer: no post-hooks (on a model of hundreds of layers, a
hook call per module and iteration is time DDP does not spend)."""
from __future__ import annotations

import time
from typing import Dict, List

import torch

import mercury

__all__ = ["LayerTimings"]


class LayerTimings:
    def __init__(self) -> None:
        self.forward_start = 0.0                  # the model's forward began (the trace's zero)
        self._timing = False                       # this forward is timed (a training one, if enabled)
        self._start: Dict[torch.nn.Module, float] = {}      # this forward: each layer's first start
        self._forward_us: Dict[torch.nn.Module, float] = {}
        self._forward_end = 0.0                   # the last timed forward's end
        self._gradient_at: Dict[int, float] = {}  # layer -> when its last gradient arrived

    def model_forward_began(self, timed: bool) -> None:
        """A forward of the model begins; its layers are timed if ``timed``."""
        self.forward_start = time.perf_counter()
        self._timing = timed
        self._start.clear()

    def forward_began(self, module: torch.nn.Module) -> None:
        if self._timing and module not in self._start:
            self._start[module] = time.perf_counter()

    def model_forward_ended(self) -> None:
        """Adds this forward's layer times (each to the next one's start)."""
        if not self._timing:
            return
        now = time.perf_counter()
        ordered = sorted(self._start.items(), key=lambda kv: kv[1])
        for (module, start), nxt in zip(ordered, [t for _, t in ordered[1:]] + [now]):
            self._forward_us[module] = self._forward_us.get(module, 0.0) + (nxt - start) * 1e6
        self._forward_end = now
        self._start.clear()
        self._timing = False

    def gradient_ready(self, layer: int) -> None:
        self._gradient_at[layer] = time.perf_counter()

    def report(self, client: mercury.Client, iteration: int, layers: List[torch.nn.Module]) -> None:
        """Sends this iteration's times (if it trained) and starts the next."""
        fwd = [self._forward_us.get(m, 0.0) for m in layers]
        # Backward of layer i: from the previous gradient (in backward order) to its own.
        bwd = [0.0] * len(layers)
        prev = self._forward_end
        for layer, t in sorted(self._gradient_at.items(), key=lambda kv: kv[1]):
            bwd[layer] = max(0.0, (t - prev) * 1e6)
            prev = t
        if any(fwd) and self._gradient_at:
            client.report_timings(iteration, fwd, bwd)
            client.begin_iteration(iteration + 1)
        self._forward_us.clear()
        self._gradient_at.clear()
