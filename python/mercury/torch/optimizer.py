# SPDX-License-Identifier: GPL-2.0
"""DistributedOptimizer: DDP's result, with priority lanes and the gradient
reduction overlapped with the next forward pass.

How a step flows, per bucket (neighbouring layers reduced together):

* ``backward()``: once every gradient of a bucket is in ``p.grad``, its
  all-reduce starts on the lane of its layers' rank and ``p.grad`` becomes a
  guard (``_guard.GuardedGrad``). The bucket is *reducing*.
* ``step()``: returns at once; each reducing bucket becomes *step-deferred*,
  with the param groups' settings (lr, momentum...) as they are now.
* The next ``forward()``: just before a module runs, its bucket's reduction
  is waited for, the averaged gradient put in ``p.grad`` and the optimizer
  applied to just those parameters (and, in the same call, to every later
  bucket whose reduction has already ended). So the front layers compute
  while the back layers' bytes are still on the wire.

Whatever touches a gradient early gets DDP's value: the guard waits for the
reduction on any use from Python (clipping, logging a norm), a second
``backward()`` before ``step()`` first puts the first one's average in place
(accumulation, as DDP), and ``no_sync()`` defers the reduction as DDP's does.
Parameters no worker used keep their gradient untouched (DDP's
``find_unused_parameters``), so optimizers skip them exactly as under DDP.
Whatever touches a parameter whose step is deferred gets DDP's value too:
it is *pending* (``_guard.pend``) until its step is applied, and any use
from Python (an EMA, clamping, ``state_dict()``, a copy) applies it first.
The model's hooks are the optimizer's alone: ``copy.deepcopy(model)`` and
pickling give a plain model with the stepped weights (``_hooks.HookDict``).

This module is the bucket state machine and the optimizer's face; around
it: ``_layers`` (which module owns which parameters, in forward order),
``_buckets`` (a bucket and its states), ``_timings`` (per-layer times for
mercuryd), ``_hooks`` (hook tables a copy leaves behind), ``_guard``
(guarded gradients, pending parameters), ``reducer`` (the backends:
``lanes``, ``nccl``, ``ps``) and ``_compat`` (what differs between PyTorch 1.13
and 2.x).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import warnings
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import torch
import torch.distributed as dist

import mercury
from mercury.contract import MAX_LANES
from mercury.lanemap import bucket_lanes, index_ranks, plan_buckets
from mercury.torch._buckets import Bucket, State
from mercury.torch._guard import guard, pend, pending_class, unpend
from mercury.torch._hooks import hook, unhook
from mercury.torch._job import default_job
from mercury.torch._layers import FirstUse, nbytes, own_parameters
from mercury.torch._timings import LayerTimings
from mercury.torch.lanes import all_true, collective_device
from mercury.torch.reducer import Reducer, reducer_factory
from mercury.torch.sockets import available_congestion_controls, pacing_left_by

__all__ = ["DistributedOptimizer", "DEFAULT_LANES", "DEFAULT_BUCKET_BYTES", "DEFAULT_RESYNC_EVERY"]

# One lane per datapath rank: with fewer, a lane carries several ranks and a
# front layer's bucket can queue behind a later one launched before it on
# the same lane (seen in the bench-torch timeline with 4 lanes).
DEFAULT_LANES = 8
DEFAULT_BUCKET_BYTES = 256 << 10
DEFAULT_RESYNC_EVERY = 10
_BUFFER_BROADCAST_BYTES = 256 << 20   # DDP's default for its coalesced buffer broadcast

def select_on_device(flags: torch.Tensor) -> bool:
    """Whether a bucket's averaged gradients are chosen on its device (a GPU:
    reading the used-flags would wait for it) rather than from the flags
    read into host memory (cheaper there: one read, then a copy each)."""
    return flags.device.type != "cpu"


# model -> its DistributedOptimizer, so a second one on the same model is refused
# (kept off the model: an attribute there would stop deepcopy and pickling).
_attached: "weakref.WeakKeyDictionary[torch.nn.Module, DistributedOptimizer]" = weakref.WeakKeyDictionary()


class DistributedOptimizer(torch.optim.Optimizer):
    """Data-parallel training with priority lanes and layer-wise overlap.

    Wraps ``optimizer`` (any per-parameter ``torch.optim`` optimizer over
    ``model``'s parameters) and replaces DDP: do not wrap the model in DDP
    too. Every loop that trains the same under DDP trains the same here
    (see "the differences from DDP" in doc/pytorch.md); what cannot be made
    equal raises an error.

    Args:
        model: the replica on this worker; every worker passes the same model.
        optimizer: the optimizer over ``model``'s parameters.
        lanes: priority lanes (1..8); 1 keeps the overlap without priorities.
        congestion_control: set on every lane socket ("mercury" for priorities,
            e.g. "cubic" for a control run, None to leave the default).
        client: a :class:`mercury.Client`; by default one is opened for job
            ``$MERCURY_JOB`` (else "torch") at socket ``$MERCURY_SOCKET``.
        bucket_bytes: neighbouring layers are reduced together until a bucket
            holds at least this many bytes of gradients.
        resync_every: every so many steps, worker 0's learned ranks are
            broadcast and become every worker's layer-to-lane map (lanes on
            mercury only: without priorities, layers stay spread by index).
        agent_timeout: seconds to wait for mercuryd at start-up.
        broadcast_buffers: as DDP's: worker 0's buffers (BatchNorm's running
            statistics) are broadcast before a forward pass, when DDP would.
        backend: "allreduce" (Gloo's ring, on the lanes' process groups),
            "nccl" (NCCL process groups, each lane's traffic class taken to
            the kernel by Mercury's NCCL plugin, for models on GPUs; PyTorch
            2.8 and NCCL 2.26 or later, see :mod:`mercury.torch.nccl`) or
            "ps": through mercury-ps parameter servers (``servers``), which
            sum each chunk as soon as every worker pushed it. The result is
            the same; see :mod:`mercury.torch.ps` and, for what a backend
            is, :mod:`mercury.torch.reducer`. The options below are
            backend="ps"'s; another backend refuses them.
        servers: with backend="ps", the servers' "HOST:PORT"s, in the same
            order on every worker; they serve job ``$MERCURY_JOB`` (else
            "torch").
        secret: with backend="ps", the job's secret; by default the file
            ``$MERCURY_PS_SECRET_FILE``, else ``$MERCURY_PS_SECRET``.
        placement: with backend="ps", how buckets are spread over the
            servers: "balanced" (BytePS's partitions, the default) or "mxnet".
        partition_bytes: with placement="balanced", the largest partition
            (BytePS's default, 4,096,000 bytes).
        server_timeout: with backend="ps", seconds to wait for the servers
            (start-up, each reduction) before raising an error (default 120).

    Example::

        opt = DistributedOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1))
        for x, y in loader:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.clip_grad_norm_(1.0)     # optional; waits for every reduction
            opt.step()                   # returns at once
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
                 lanes: int = DEFAULT_LANES, congestion_control: Optional[str] = "mercury",
                 client: Optional[mercury.Client] = None, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 resync_every: int = DEFAULT_RESYNC_EVERY, agent_timeout: float = 2.0,
                 broadcast_buffers: bool = True, backend: str = "allreduce", servers: Sequence[str] = (),
                 secret: Optional[str] = None, placement: Optional[str] = None,
                 partition_bytes: Optional[int] = None, server_timeout: Optional[float] = None) -> None:
        # Not Optimizer.__init__: param_groups, state and defaults are the wrapped optimizer's.
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            raise TypeError("mercury.torch: pass the model itself, not a DistributedDataParallel wrapper")
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"mercury.torch: model must be a torch.nn.Module, not {type(model).__name__}")
        if isinstance(optimizer, DistributedOptimizer) or not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"mercury.torch: optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
        if isinstance(optimizer, torch.optim.LBFGS):
            raise TypeError("mercury.torch: LBFGS re-evaluates the model in step(closure); not supported")
        for name, value, low, high in (("lanes", lanes, 1, MAX_LANES), ("bucket_bytes", bucket_bytes, 1, None),
                                       ("resync_every", resync_every, 1, None)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"mercury.torch: {name} must be an int, not {type(value).__name__}")
            if value < low or (high is not None and value > high):
                raise ValueError(f"mercury.torch: {name} must be {low}..{high or ''}, not {value}")
        if agent_timeout < 0:
            raise ValueError(f"mercury.torch: agent_timeout must be >= 0, not {agent_timeout}")
        complex_params = [n for n, p in model.named_parameters() if p.is_complex()]
        if complex_params:
            raise TypeError(f"mercury.torch: complex parameters are not supported ({complex_params[0]!r}); "
                            "keep real and imaginary parts as real parameters, or use DDP")
        make_reducer = reducer_factory(backend, dict(
            servers=list(servers) or None, secret=secret, placement=placement, partition_bytes=partition_bytes,
            server_timeout=server_timeout))
        if not dist.is_initialized():
            raise RuntimeError("mercury.torch: call torch.distributed.init_process_group first")
        other = _attached.get(model)
        if other is not None and not other._closed:
            raise RuntimeError("mercury.torch: this model already has a DistributedOptimizer; close() it first")
        self.model = model
        self.optimizer = optimizer
        self.world = dist.get_world_size()
        # This worker's index (torch.distributed's rank: in Mercury a rank is a priority).
        self.worker = dist.get_rank()
        self.bucket_bytes = bucket_bytes
        self.resync_every = resync_every
        self.broadcast_buffers = broadcast_buffers
        self.backend = backend
        self.iteration = 0
        self.reason_single_lane: Optional[str] = None
        self.wait_s = 0.0  # time forward passes spent waiting for reductions
        self._closed = False
        # Per-bucket timeline, kept if $MERCURY_TORCH_TRACE names a file (JSON lines).
        trace = os.environ.get("MERCURY_TORCH_TRACE")
        self._trace_file = open(trace, "a") if trace else None

        self._owns_client = client is None
        self.client = client or mercury.Client(default_job(), worker_rank=self.worker)
        ok, why = self._mercury_usable(lanes, congestion_control, agent_timeout)
        # Every worker must agree on the lanes: each is a collective.
        n = lanes if all_true(ok) else 1
        if n < lanes:
            self.reason_single_lane = why or "another worker cannot use Mercury"
        self.lanes: Reducer = make_reducer(n)
        if congestion_control and (n > 1 or congestion_control != "mercury"):
            error = self.lanes.pin(congestion_control)
            if not all_true(error is None) and n > 1:
                self.lanes.keep(1)
                self.reason_single_lane = error or "another worker cannot set the congestion control"
        if self.reason_single_lane and lanes > 1:
            warnings.warn(f"mercury.torch: training on a single lane without priorities: {self.reason_single_lane}",
                          RuntimeWarning, stacklevel=2)
        # Ranks (and bytes) order the lanes only where the datapath enforces them.
        self._prioritized = len(self.lanes) > 1 and congestion_control == "mercury"
        if len(self.lanes) > 1:
            paced = pacing_left_by(self.lanes.previous_cc, congestion_control)
            if paced:
                warnings.warn(f"mercury.torch: {paced}", RuntimeWarning, stacklevel=2)
            self.lanes.register(self.client)
        # Layer timings go to mercuryd, which learns the ranks from them: not
        # measured where no lane is registered with it.
        self._report_timings = len(self.lanes) > 1
        # As DDP: every replica starts from worker 0's parameters and buffers.
        # The buffers are listed once, as DDP lists them (walking the model
        # before each forward cost 1.6 ms on ResNet-152).
        self._buffers = list(model.buffers())
        with torch.no_grad():
            for t in list(model.parameters()) + self._buffers:
                dist.broadcast(t, src=0)

        # Hooked modules: the model itself and every module holding parameters.
        self._hooked = [model] + [m for m in model.modules() if m is not model and own_parameters(m)
                                  and not isinstance(m, (torch.nn.ParameterList, torch.nn.ParameterDict))]
        self._order: List[torch.nn.Module] = []          # hooked modules, in first-forward order
        self._ordered: Set[int] = set()
        self._running: List[torch.nn.Module] = []        # hooked modules whose forward is running
        self._first_user: Dict[int, torch.nn.Module] = {}
        self._learning: Optional[FirstUse] = None
        self._finalized = False                    # layers and buckets are built
        self._layers: List[torch.nn.Module] = []         # modules that own parameters, forward order
        self._buckets: List[Bucket] = []
        self._bucket_of_module: Dict[torch.nn.Module, Bucket] = {}
        self._layer_lane: List[int] = []
        self._layer_bytes: List[int] = []
        self._timings = LayerTimings()
        self._next_launch = -1
        self._backward_queued = False
        self._sync = True                          # False inside no_sync()
        self._sync_buffers_next = True             # DDP's require_forward_param_sync
        self._handles: List[Any] = []
        # (No state_dict hooks: a pending parameter applies its own step
        # when state_dict() or load_state_dict() touches it.)
        self._handles.append(hook(model, "_forward_pre_hooks", model.register_forward_pre_hook,
                                   self._root_pre_forward))
        # Until the layers are known: which module runs (post-hooks pop it).
        # Then only the layers keep a hook: each costs a Python call per forward.
        self._pre_hooks: Dict[torch.nn.Module, Any] = {}
        self._post_hooks: List[Any] = []
        for m in self._hooked:
            self._pre_hooks[m] = hook(m, "_forward_pre_hooks", m.register_forward_pre_hook, self._pre_forward)
            self._post_hooks.append(hook(m, "_forward_hooks", m.register_forward_hook, self._post_forward))
        self._handles += list(self._pre_hooks.values()) + self._post_hooks
        self._handles.append(hook(model, "_forward_hooks", model.register_forward_hook, self._root_post_forward))
        _attached[model] = self

    # -- torch.optim.Optimizer's face: the wrapped optimizer's groups and state

    @property
    def param_groups(self) -> List[Dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @property
    def state(self) -> Dict[Any, Any]:  # type: ignore[override]
        return self.optimizer.state

    @property
    def defaults(self) -> Dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        raise RuntimeError("mercury.torch: add every param group to the optimizer before wrapping it")

    def __getstate__(self) -> Dict[str, Any]:
        raise TypeError("mercury.torch: a DistributedOptimizer cannot be pickled; save state_dict() instead")

    # -- set-up -------------------------------------------------------------

    def _mercury_usable(self, lanes: int, cc: Optional[str], timeout: float) -> Tuple[bool, str]:
        if lanes <= 1:
            return False, ""
        if not mercury.available():
            return False, "libmercury not found"
        if not self.client.wait_connected(timeout):
            return False, "mercuryd not reachable (is it running? $MERCURY_SOCKET)"
        if cc == "mercury" and "mercury" not in available_congestion_controls():
            return False, "congestion control 'mercury' not available (modprobe tcp_mercury or mercuryd --datapath=bpf)"
        return True, ""

    def _owners(self) -> Dict[torch.nn.Module, List[torch.nn.Parameter]]:
        """Each trained parameter under the hooked module whose forward first
        used it (else the module holding it), in first-forward order."""
        owned: Dict[torch.nn.Module, List[torch.nn.Parameter]] = {m: [] for m in self._order}
        seen: Set[int] = set()
        holders = self._order + [m for m in self._hooked if id(m) not in self._ordered]
        for holder in holders:
            for p in own_parameters(holder):
                if id(p) in seen or not p.requires_grad:
                    continue
                seen.add(id(p))
                owned.setdefault(self._first_user.get(id(p), holder), []).append(p)
        return {m: ps for m, ps in owned.items() if ps}

    def _layout(self) -> Dict[torch.nn.Module, List[torch.nn.Parameter]]:
        """Worker 0's layers and their parameters, on every worker: buckets
        must match across workers, and a dynamic model's first forward may
        differ between them."""
        modules = list(self.model.modules())
        params = list(self.model.parameters())
        index_m = {id(m): i for i, m in enumerate(modules)}
        index_p = {id(p): i for i, p in enumerate(params)}
        mine = [[index_m[id(m)], [index_p[id(p)] for p in ps]] for m, ps in self._owners().items()]
        box = [mine]
        dist.broadcast_object_list(box, src=0)
        return {modules[m]: [params[i] for i in ps] for m, ps in box[0]}

    def _finalize_layers(self) -> None:
        """After the first training forward: layers, model, buckets, lanes;
        the hooks then see the first backward too."""
        owned = self._layout()
        self._finalized = True
        self._layers = list(owned)
        names = {m: n for n, m in self.model.named_modules()}
        self._layer_bytes = [nbytes(owned[m]) for m in self._layers]
        if self._layers:   # else nothing is trained here: nothing to rank
            self.client.declare_model([(names.get(m, "?") or "model", n)
                                       for m, n in zip(self._layers, self._layer_bytes)])
            if len(self.lanes) > 1:
                self.client.subscribe_ranks()
        plan = plan_buckets(self._layer_bytes, len(self.lanes), self.bucket_bytes,
                            [owned[m][0].dtype for m in self._layers])
        for layers, lane in plan:
            bucket = Bucket(len(self._buckets), [], [], [], lane)
            self._buckets.append(bucket)
            for layer in layers:
                m = self._layers[layer]
                bucket.params += owned[m]
                bucket.modules.append(m)
                bucket.layers += [layer] * len(owned[m])
                self._bucket_of_module[m] = bucket
        for h in self._post_hooks:
            h.remove()
        for m, h in self._pre_hooks.items():
            if m not in self._bucket_of_module:
                h.remove()
        self._set_lanes(self._lanes_for(index_ranks(len(self._layers))))
        # Each bucket's flat tensor: its gradients and one used-flag per parameter.
        self.lanes.prepare([(sum(p.numel() for p in b.params) + len(b.params), b.params[0].dtype,
                             b.params[0].device) for b in self._buckets])
        in_buckets = {id(p) for b in self._buckets for p in b.params}
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in in_buckets and p.requires_grad:
                    raise ValueError("mercury.torch: the optimizer holds a parameter the model does not own")
        for b in self._buckets:
            ids = {id(p) for p in b.params}
            b.group_params = [[p for p in g["params"] if id(p) in ids] for g in self.optimizer.param_groups]
            b.used = [False] * len(b.params)
            b.zero_after = [False] * len(b.params)
            # What each launch's guards call, made once: not two partials per parameter and launch.
            b.release = functools.partial(self._release, b)
            b.zero_later = [functools.partial(self._zero_later, b, i) for i in range(len(b.params))]
            with torch.enable_grad():
                for i, p in enumerate(b.params):
                    self._hook_gradient(p, b, i)

    def _hook_gradient(self, p: torch.nn.Parameter, b: Bucket, i: int) -> None:
        # A leaf's tensor hooks run before autograd adds into p.grad; the
        # AccumulateGrad node's hooks once p.grad holds the sum. Each runs
        # for every parameter in every backward: bound straight to the
        # method, no closure frame between.
        self._handles.append(p.register_hook(functools.partial(self._before_accumulate, b, i)))
        acc = p.expand_as(p).grad_fn.next_functions[0][0]
        self._handles.append(acc.register_hook(functools.partial(self._gradient_ready, b, i)))
        self._handles.append(acc)  # keep the node alive

    # -- forward hooks ------------------------------------------------------

    def _root_pre_forward(self, _module: torch.nn.Module, _inputs: object) -> None:
        self._running.clear()   # a forward that raised leaves its modules here
        self._timings.model_forward_began(self._finalized and self._report_timings and torch.is_grad_enabled()
                                          and self.model.training)
        self._stop_learning()   # likewise
        if not self._finalized:
            self._learning = FirstUse(self._running, self._first_user)
            self._learning.__enter__()
        if self.broadcast_buffers and self._sync_buffers_next and self._buffers:
            dist._broadcast_coalesced(dist.distributed_c10d._get_default_group(), self._buffers,
                                      _BUFFER_BROADCAST_BYTES, 0)

    def _root_post_forward(self, _module: torch.nn.Module, _inputs: object, _output: object) -> None:
        self._timings.model_forward_ended()
        self._stop_learning()
        # DDP broadcasts buffers before a forward that follows a synchronised training forward.
        self._sync_buffers_next = torch.is_grad_enabled() and self._sync
        if not self._finalized and torch.is_grad_enabled():
            self._finalize_layers()

    def _stop_learning(self) -> None:
        if self._learning is not None:
            self._learning.__exit__(None, None, None)
            self._learning = None

    def _pre_forward(self, module: torch.nn.Module, _inputs: object) -> None:
        if not self._finalized:
            self._running.append(module)
            if id(module) not in self._ordered:
                self._ordered.add(id(module))
                self._order.append(module)
            return
        self._timings.forward_began(module)
        b = self._bucket_of_module.get(module)
        if b is not None and b.state is State.STEP_DEFERRED:
            self._finish(b)

    def _post_forward(self, module: torch.nn.Module, _inputs: object, _output: object) -> None:
        if self._running and self._running[-1] is module:
            self._running.pop()

    # -- backward hooks -----------------------------------------------------

    def _before_accumulate(self, b: Bucket, i: int, _grad: torch.Tensor) -> None:
        if b.state is State.IDLE:
            return
        if b.state is State.STEP_DEFERRED:
            name = next((n for n, q in self.model.named_parameters() if q is b.params[i]), "?")
            raise RuntimeError(
                f"mercury.torch: parameter {name!r} was used in this forward pass before its step was applied: "
                "its module's forward did not run. mercury.torch applies each parameter's step just before "
                "the forward of the module that first used it; call opt.synchronize() before such a forward")
        # A second backward before step(): as DDP, the first one's average is in
        # p.grad before this one's gradient is added to it.
        self._settle(b)

    def _gradient_ready(self, b: Bucket, i: int, *_: object) -> None:
        b.used[i] = True
        if not self._sync:
            return
        if not self._backward_queued:
            self._backward_queued = True
            self._next_launch = len(self._buckets) - 1
            for bucket in self._buckets:
                bucket.waiting = len(bucket.params)
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
        if self._report_timings:
            self._timings.gradient_ready(b.layers[i])
        b.waiting -= 1
        self._launch_ready()

    def _launch_ready(self, all_remaining: bool = False) -> None:
        # Launch in one fixed order (last bucket first) on every worker: a
        # process group's collectives must be issued in the same order everywhere.
        while self._next_launch >= 0:
            b = self._buckets[self._next_launch]
            if b.waiting > 0 and not all_remaining:
                return
            self._launch(b)
            self._next_launch -= 1

    def _backward_done(self) -> None:
        self._launch_ready(all_remaining=True)
        self._backward_queued = False

    def _launch(self, b: Bucket) -> None:
        if b.state is not State.IDLE:
            self._release(b)   # a reduction this backward did not touch: in place first
        if b.flat is None:
            self._allocate(b)
        scale = 1.0 / self.world
        b.was_none, b.real, b.guards = [], [], []
        for i, (p, slot) in enumerate(zip(b.params, b.slots)):
            t = p.grad
            b.was_none.append(t is None)
            if t is None:
                t = torch.zeros_like(p)
            b.real.append(t)
            torch.mul(t, scale, out=slot)   # as DDP: scale, then sum
            # Every parameter's p.grad is guarded, None ones too: under DDP
            # they hold the average once it is in place.
            p.grad = g = guard(t, b.release, b.zero_later[i])
            b.guards.append(g)
        if all(b.used):
            b.flags.fill_(1)
        else:
            b.flags.copy_(torch.tensor(b.used, dtype=b.flags.dtype))
        b.work = self.lanes.reduce(b.index, b.flat, b.lane)
        b.used = [False] * len(b.params)
        b.state = State.REDUCING
        if self._trace_file:
            b.trace = {"iteration": self.iteration, "bucket": b.index, "lane": b.lane,
                       "bytes": (b.flat.numel() - len(b.params)) * b.flat.element_size(),
                       "launch": time.perf_counter()}
            self.lanes.when_done(b.work, lambda t=b.trace: t.__setitem__("done", time.perf_counter()))

    @staticmethod
    def _allocate(b: Bucket) -> None:
        """The bucket's flat buffer, kept from launch to launch (as DDP's
        buckets are): a fresh one per launch cost an allocation and a second
        pass over the gradients, on backward's critical path."""
        p0 = b.params[0]
        b.flat = torch.empty(sum(p.numel() for p in b.params) + len(b.params), dtype=p0.dtype, device=p0.device)
        offset = 0
        b.slots = []
        for p in b.params:
            b.slots.append(b.flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        b.flags = b.flat[offset:]

    # -- bringing a bucket's reduction into place ---------------------------

    def _release(self, b: Bucket) -> None:
        """Whatever is outstanding for ``b``, in place now."""
        if b.state is State.REDUCING:
            self._settle(b)
        elif b.state is State.STEP_DEFERRED:
            self._finish(b)

    def _wait(self, b: Bucket) -> None:
        t0 = time.perf_counter()
        b.work.wait()
        t1 = time.perf_counter()
        self.wait_s += t1 - t0
        if self._trace_file and b.trace:
            b.trace.update(wait_from=t0, wait_until=t1, forward_start=self._timings.forward_start)
            self._trace_file.write(json.dumps(b.trace) + "\n")
            b.trace = None

    def _averaged(self, b: Bucket) -> List[Optional[torch.Tensor]]:
        """Each parameter's gradient after the reduction: the average where
        any worker used it, else what it was (DDP leaves those untouched)."""
        if select_on_device(b.flags) and not any(b.was_none):
            # Every gradient stays a tensor: chosen on the device, without
            # reading the flags into host memory (on a GPU, a read waits for
            # every kernel queued so far, the forward pass's included).
            for i, real in enumerate(b.real):
                torch.where(b.flags[i] > 0.5, b.slots[i], real, out=real)
            return list(b.real)
        out: List[Optional[torch.Tensor]] = []
        for i, flag in enumerate(b.flags.tolist()):
            if flag > 0.5:
                out.append(b.real[i].copy_(b.slots[i]))
            else:
                out.append(None if b.was_none[i] else b.real[i])
        return out

    def _settle(self, b: Bucket) -> None:
        """REDUCING -> IDLE: the averaged gradients in p.grad."""
        self._wait(b)
        for p, value, g in zip(b.params, self._averaged(b), b.guards):
            if p.grad is g:   # else the user assigned p.grad after backward(): theirs stands
                p.grad = value
        self._clear(b)

    def _finish(self, b: Bucket) -> None:
        """STEP_DEFERRED -> IDLE: the averaged gradients in p.grad, the step
        step() asked for applied, then what the user did to p.grad since.
        Later buckets of the same step() whose reductions have ended come
        along, in one optimizer call: a call per bucket cost about 0.1 ms
        each, on the forward pass's critical path (BERT-base: 78 of them)."""
        batch = [b] + [c for c in self._buckets[b.index + 1:]
                       if c.state is State.STEP_DEFERRED and c.settings is b.settings and c.work.is_completed()]
        for c in batch:   # all of them before any p.grad changes: a failed reduction raises here
            self._wait(c)
        for c in batch:   # the optimizer's own uses of them must not apply the step again
            for p in c.params:
                unpend(p)
        after = []
        for c in batch:
            for i, (p, value, g) in enumerate(zip(c.params, self._averaged(c), c.guards)):
                current = p.grad
                after.append((c, i, p, current is not g, current))
                p.grad = value
        groups = len(self.optimizer.param_groups)
        self._step_params([[p for c in batch for p in c.group_params[g]] for g in range(groups)], b.settings)
        for c, i, p, replaced, current in after:
            if replaced:
                p.grad = current
            elif c.zero_after[i] and p.grad is not None:
                p.grad.zero_()
        for c in batch:
            self._clear(c)

    def _clear(self, b: Bucket) -> None:
        b.work = b.settings = None   # b.flat is kept for the next launch
        b.real, b.was_none, b.guards = [], [], []
        b.zero_after = [False] * len(b.params)
        b.state = State.IDLE

    def _zero_later(self, b: Bucket, i: int) -> bool:
        if b.state is not State.STEP_DEFERRED:
            return False
        b.zero_after[i] = True
        return True

    def _step_params(self, group_params: List[List[torch.nn.Parameter]],
                     settings: Optional[List[Dict[str, Any]]]) -> None:
        # Step just these parameters, with the groups' settings as they were
        # at step(): each group is swapped for its subset for the call.
        saved = [dict(g) for g in self.optimizer.param_groups]
        try:
            for i, (g, subset) in enumerate(zip(self.optimizer.param_groups, group_params)):
                if settings is not None:
                    g.update(settings[i])
                g["params"] = subset
            self.optimizer.step()
        finally:
            for g, old in zip(self.optimizer.param_groups, saved):
                g.clear()
                g.update(old)

    def _settle_parameters(self, b: Bucket) -> None:
        """A pending parameter of ``b`` is used: its step is applied now."""
        if b.state is State.STEP_DEFERRED:
            self._finish(b)
        for p in b.params:   # whatever happened, none stays pending
            unpend(p)

    # -- public -------------------------------------------------------------

    def zero_grad(self, set_to_none: bool = False) -> None:
        """As ``torch.optim.Optimizer.zero_grad``; gradients a deferred step
        still needs are zeroed once it used them."""
        # Pending parameters' p.grad without __torch_function__'s detour
        # (it would pass them anyway): this loop touches every parameter.
        with torch._C.DisableTorchFunction():
            self._zero_grad(set_to_none)

    def _zero_grad(self, set_to_none: bool) -> None:
        mine = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
        deferred: Set[int] = set()
        for b in self._buckets:
            if b.state is State.REDUCING:
                self._settle(b)   # zeroed before step(): the average is discarded, as under DDP
            elif b.state is State.STEP_DEFERRED:
                for i, p in enumerate(b.params):
                    if id(p) in mine:
                        deferred.add(id(p))
                        if set_to_none:
                            p.grad = None      # _finish sees the assignment and keeps it
                        else:
                            b.zero_after[i] = True
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None or id(p) in deferred:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    def step(self, closure: Optional[Callable[[], float]] = None) -> None:  # type: ignore[override]
        """Ends the iteration. Returns at once: each layer's update is applied
        before its next forward pass, with the settings (lr...) of now."""
        if closure is not None:
            raise ValueError("mercury.torch: step(closure) is not supported: the step is applied layer by layer "
                             "in the next forward pass")
        if not self._finalized:
            raise RuntimeError("mercury.torch: step() before any forward pass with gradients")
        settings = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        now: List[Bucket] = []
        for b in self._buckets:
            if b.state is State.STEP_DEFERRED:
                self._finish(b)    # step() twice without a backward: DDP steps twice
            if b.state is State.REDUCING:
                b.state, b.settings = State.STEP_DEFERRED, settings
                if not b.pending:   # once: each parameter it steps, and its pending class
                    classes: Dict[type, type] = {}
                    for p in (p for group in b.group_params for p in group):
                        if type(p) not in classes:
                            classes[type(p)] = pending_class(type(p), functools.partial(self._settle_parameters, b))
                        b.pending.append((p, classes[type(p)]))
                for p, pending in b.pending:
                    pend(p, pending)
            else:
                now.append(b)      # its gradients are in place already: step it as DDP would
        if now:
            self._step_params([[p for b in now for p in b.group_params[g]] for g in range(len(settings))], None)
        self.iteration += 1
        if self._report_timings:
            self._timings.report(self.client, self.iteration, self._layers)
        if self._prioritized and self.iteration % self.resync_every == 0:
            self._resync_lanes()

    def synchronize(self) -> None:
        """Waits for every reduction and applies every deferred step: after
        it, parameters and ``p.grad`` are what DDP would show."""
        for b in self._buckets:
            self._release(b)

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` over the model's averaged
        gradients, between ``backward()`` and ``step()``; returns the total
        norm. It waits for every reduction, so the next forward pass no
        longer overlaps them (calling ``clip_grad_norm_`` on
        ``model.parameters()`` directly does the same)."""
        self.synchronize()
        return torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.grad is not None],
                                              max_norm, norm_type, error_if_nonfinite)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """As DDP's: backward passes inside accumulate gradients locally; the
        first backward after it reduces what accumulated."""
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    def state_dict(self) -> Dict[str, Any]:
        self.synchronize()
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.synchronize()
        self.optimizer.load_state_dict(state_dict)

    def layer_lanes(self) -> List[int]:
        """Each layer's lane, in forward order."""
        return list(self._layer_lane)

    def close(self) -> None:
        """Applies what is outstanding, removes the hooks, withdraws the lanes
        and closes their connections. Collective: every worker calls it."""
        if self._closed:
            return
        self.synchronize()
        self._stop_learning()
        for h in self._handles:
            if hasattr(h, "remove"):
                h.remove()
        self._handles = []
        for m in [self.model] + list(self._hooked):
            unhook(m, "_forward_pre_hooks")
            unhook(m, "_forward_hooks")
        if len(self.lanes) > 1:
            self.client.release_lanes()
        self.lanes.close()
        if self._owns_client:
            self.client.close()
        if self._trace_file:
            self._trace_file.close()
            self._trace_file = None
        self._closed = True

    # -- the lane map --------------------------------------------------------

    def _lanes_for(self, ranks: Sequence[int]) -> List[int]:
        """Each layer's lane: its bucket's (mercury.lanemap.bucket_lanes)."""
        layers = [sorted(set(b.layers)) for b in self._buckets]
        lanes = bucket_lanes(ranks, self._layer_bytes, layers, len(self.lanes), self._prioritized)
        out = [0] * len(self._layers)
        for ls, lane in zip(layers, lanes):
            for layer in ls:
                out[layer] = lane
        return out

    def _resync_lanes(self) -> None:
        n = len(self._layers)
        layer_lanes = self._layer_lane
        if self.worker == 0:
            ranks = self.client.layer_ranks()
            if ranks is not None and len(ranks.ranks) == n:
                layer_lanes = self._lanes_for(ranks.ranks)
        lanes = torch.tensor(layer_lanes, dtype=torch.int32, device=collective_device())
        dist.broadcast(lanes, src=0)
        self._set_lanes(lanes.tolist())

    def _set_lanes(self, layer_lanes: List[int]) -> None:
        self._layer_lane = layer_lanes
        for b in self._buckets:
            b.lane = min(layer_lanes[layer] for layer in b.layers)
