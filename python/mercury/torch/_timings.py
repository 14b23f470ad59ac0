# SPDX-License-Identifier: GPL-2.0
"""Each layer's forward and backward time in a training iteration, measured
from the module hooks and the gradients' arrival, and reported to mercuryd
(which turns them into ranks)."""
from __future__ import annotations

import time
from typing import Dict, List

import torch

import mercury

__all__ = ["LayerTimings"]


class LayerTimings:
    def __init__(self) -> None:
        self.forward_start = 0.0                  # the model's forward began (the trace's zero)
        self.forward_end = 0.0                    # the last timed module's forward ended
        self._start: Dict[torch.nn.Module, float] = {}
        self._forward_us: Dict[torch.nn.Module, float] = {}
        self._gradient_at: Dict[int, float] = {}  # layer -> when its last gradient arrived

    def model_forward_began(self) -> None:
        self.forward_start = time.perf_counter()

    def forward_began(self, module: torch.nn.Module) -> None:
        self._start[module] = time.perf_counter()

    def forward_ended(self, module: torch.nn.Module) -> None:
        """Counts the forward of ``module`` if it trains (grad enabled, training mode)."""
        now = time.perf_counter()
        start = self._start.pop(module, None)
        if start is not None and torch.is_grad_enabled() and module.training:
            self._forward_us[module] = self._forward_us.get(module, 0.0) + (now - start) * 1e6
            self.forward_end = now

    def gradient_ready(self, layer: int) -> None:
        self._gradient_at[layer] = time.perf_counter()

    def report(self, client: mercury.Client, iteration: int, layers: List[torch.nn.Module]) -> None:
        """Sends this iteration's times (if it trained) and starts the next."""
        fwd = [self._forward_us.get(m, 0.0) for m in layers]
        # Backward of layer i: from the previous gradient (in backward order) to its own.
        bwd = [0.0] * len(layers)
        prev = self.forward_end
        for layer, t in sorted(self._gradient_at.items(), key=lambda kv: kv[1]):
            bwd[layer] = max(0.0, (t - prev) * 1e6)
            prev = t
        if any(fwd) and self._gradient_at:
            client.report_timings(iteration, fwd, bwd)
            client.begin_iteration(iteration + 1)
        self._forward_us.clear()
        self._gradient_at.clear()
