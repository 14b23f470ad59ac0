# SPDX-License-Identifier: GPL-2.0
"""A ByteScheduler-style baseline for `make bench-torch`: priority scheduling
of gradient partitions in user space, on one connection per peer, as its
PyTorch plugin does (Peng et al., "A Generic Communication Scheduler for
Distributed DNN Training Acceleration", SOSP 2019).

Each layer's gradients are cut into partitions of ``partition_bytes``; at
most ``credit`` partitions are being all-reduced at any time, always the most
urgent ready one first (the layer the next forward pass needs first); a
layer's forward pre-hook waits for its partitions and steps its parameters.
So a small urgent partition never waits behind more than ``credit``
partitions, however large the tensors queued before it.

Gloo runs the collectives of a process group in the order they are issued,
and every worker must issue the same ones in the same order. Readiness differs
between workers, so the scheduler decides only on what all of them agree on:
every all-reduce carries each worker's ready-bitmap of partitions (summed, a
partition is ready everywhere when its sum is the world size), and the next
partition is chosen from those, when an earlier all-reduce completes. While
nothing is ready everywhere, a bitmap-only all-reduce asks again.

A bench baseline, not a training library: SGD-like optimizers stepped per
layer, every parameter used in every iteration, no gradient accumulation or
clipping (it raises where it can tell).
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import time
from typing import Callable, Deque, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
# A layer is what mercury.torch hooks: a module and the parameters it holds itself.
from mercury.torch._layers import own_parameters  # noqa: E402


class _Layer:
    def __init__(self, module: nn.Module, params: List[nn.Parameter], optimizer: torch.optim.Optimizer) -> None:
        self.module = module
        self.params = params
        self.optimizer = optimizer
        self.numel = sum(p.numel() for p in params)
        self.flat = torch.zeros(self.numel)
        self.seen = 0               # parameters whose gradient is in, this iteration
        self.parts: List[int] = []  # indices into ByteScheduler._parts
        self.left = 0               # partitions not yet reduced, this iteration
        self.stepped = False        # this step's update applied


class ByteScheduler:
    """Wraps ``model`` and ``optimizer`` (whose hyper-parameters each layer's
    own optimizer copies); use it as the optimizer: ``zero_grad()``, forward,
    ``backward()``, ``step()``. ``close()`` finishes the last step."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *, partition_bytes: int,
                 credit: int, group: Optional[dist.ProcessGroup] = None) -> None:
        if partition_bytes < 4 or credit < 1:
            raise ValueError("ByteScheduler: partition_bytes >= 4 and credit >= 1")
        self.model = model
        self.group = group
        self.world = dist.get_world_size(group)
        self.credit = credit
        self.wait_s = 0.0           # forward passes' waits for reductions
        self._layers = []
        for m in model.modules():
            params = own_parameters(m)
            if params and not isinstance(m, (nn.ParameterList, nn.ParameterDict)):
                self._layers.append(_Layer(m, params, type(optimizer)(params, **optimizer.defaults)))
        # (layer, first element, elements), most urgent first: forward order, then offset.
        self._parts: List[Tuple[_Layer, int, int]] = []
        per = max(1, partition_bytes // 4)
        for layer in self._layers:
            for off in range(0, layer.numel, per):
                layer.parts.append(len(self._parts))
                self._parts.append((layer, off, min(per, layer.numel - off)))
        # Which partitions this worker has the gradient of (1.0), this iteration.
        self._local_ready = torch.zeros(len(self._parts))
        self._lock = threading.Condition()
        self._pending = False       # a step() not yet applied to every layer
        self._error: Optional[BaseException] = None
        self._closed = False
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(t, src=0, group=group)
        self._handles: List[object] = []
        for layer in self._layers:
            for p in layer.params:
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._handles.append(acc.register_hook(self._hook(layer)))
                self._handles.append(acc)   # keep the node alive
            self._handles.append(layer.module.register_forward_pre_hook(self._pre_forward(layer)))
        self._thread = threading.Thread(target=self._run, name="bytescheduler", daemon=True)
        self._thread.start()

    # -- the training loop's side ------------------------------------------

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.model.parameters():
            p.grad = None

    def step(self) -> None:
        with self._lock:
            if any(layer.seen != len(layer.params) for layer in self._layers):
                raise RuntimeError("ByteScheduler: step() without one gradient for every parameter")
            for layer in self._layers:
                layer.seen = 0
                layer.stepped = False
            self._pending = True

    def close(self) -> None:
        """Wait for the last reductions, apply the step they belong to, stop."""
        if self._closed:
            return
        for layer in self._layers:
            self._finish(layer)
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join()
        for h in self._handles:
            if hasattr(h, "remove"):
                h.remove()
        if self._error:
            raise RuntimeError("ByteScheduler: the scheduler failed") from self._error

    def _hook(self, layer: _Layer) -> Callable[..., None]:
        def accumulated(*_: object) -> None:
            with self._lock:
                layer.seen += 1
                if layer.seen > len(layer.params):
                    raise RuntimeError("ByteScheduler: gradient accumulation is not supported")
                if layer.seen < len(layer.params):
                    return
                if layer.left:
                    raise RuntimeError("ByteScheduler: a layer's gradient is ready again before its last "
                                       "reduction was used: its forward pre-hook did not run")
                layer.flat.copy_(torch.cat([p.grad.reshape(-1) for p in layer.params]))
                layer.left = len(layer.parts)
                self._local_ready[layer.parts] = 1.0
                self._lock.notify_all()
        return accumulated

    def _pre_forward(self, layer: _Layer) -> Callable[..., None]:
        def pre(_module: nn.Module, _inputs: object) -> None:
            if torch.is_grad_enabled():
                self._finish(layer)
        return pre

    def _finish(self, layer: _Layer) -> None:
        """Wait for the layer's partitions, then step it with the averaged gradient."""
        t0 = time.perf_counter()
        with self._lock:
            if not self._pending or layer.stepped:
                return
            while layer.left and not self._error:
                self._lock.wait()
            if self._error:
                raise RuntimeError("ByteScheduler: the scheduler failed") from self._error
            layer.stepped = True
            self._pending = not all(other.stepped for other in self._layers)
        self.wait_s += time.perf_counter() - t0
        off = 0
        for p in layer.params:
            p.grad = layer.flat[off:off + p.numel()].view_as(p).div(self.world)
            off += p.numel()
        layer.optimizer.step()
        for p in layer.params:
            p.grad = None

    # -- the scheduler thread ----------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._closed and not bool(self._local_ready.any()):
                        self._lock.wait()
                    if not bool(self._local_ready.any()):
                        return      # closed, and no backward pass to serve
                self._one_iteration()
        except BaseException as e:  # noqa: BLE001 - handed to the training thread
            with self._lock:
                self._error = e
                self._lock.notify_all()

    def _one_iteration(self) -> None:
        """Every partition of one backward pass, all-reduced; the same
        collectives in the same order on every worker (see above)."""
        n = len(self._parts)
        agreed = torch.zeros(n, dtype=torch.bool)     # ready on every worker
        issued = torch.zeros(n, dtype=torch.bool)
        outstanding: Deque[Tuple[object, torch.Tensor, Optional[int]]] = collections.deque()
        done = 0
        while done < n:
            free = torch.nonzero(agreed & ~issued).flatten()
            if len(outstanding) < self.credit and (len(free) or not outstanding):
                part = int(free[0]) if len(free) else None   # the most urgent partition agreed on
                with self._lock:
                    bitmap = self._local_ready.clone()
                if part is None:
                    buf = bitmap
                else:
                    layer, off, size = self._parts[part]
                    buf = torch.cat([layer.flat[off:off + size], bitmap])
                    issued[part] = True
                outstanding.append((dist.all_reduce(buf, group=self.group, async_op=True), buf, part))
                continue
            work, buf, part = outstanding.popleft()
            work.wait()
            agreed |= buf[-n:] > self.world - 0.5
            if part is None:
                continue
            layer, off, size = self._parts[part]
            with self._lock:
                layer.flat[off:off + size].copy_(buf[:size])
                layer.left -= 1
                done += 1
                if not layer.left:
                    # Cleared before the forward pass can pass this layer,
                    # so never over the next backward pass's readiness.
                    self._local_ready[layer.parts] = 0.0
                self._lock.notify_all()
