# SPDX-License-Identifier: GPL-2.0
"""Mercury for PyTorch: priority lanes over torch.distributed and layer-wise
overlap of gradient reduction with the next forward pass.

torch.distributed sends every tensor of a process group over the same TCP
connections, so the kernel cannot tell a front layer's bytes from a back
layer's, and DDP finishes every all-reduce before the optimizer step, so
nothing overlaps the next forward pass. :class:`DistributedOptimizer` fixes
both:

* **Lanes.** It opens ``lanes`` process groups (default 8, one per rank)
  over the same ranks; each has
  its own connections, which it finds among the process's own sockets,
  switches to the ``mercury`` congestion control and registers with mercuryd
  by passing their fds. Lane ``L`` of ``N`` gets rank ``ceil(L*8/N)``.
* **Overlap.** Gradient hooks start an asynchronous all-reduce of each bucket
  (neighbouring layers, at least ``bucket_bytes``) on the lane of its rank as
  soon as its gradients are ready; forward pre-hooks wait for a module's
  reduction and step just its parameters, so the next forward pass starts as
  soon as the first layer is ready. The kernel sends the urgent lanes first.
* **Timings.** Hooks time each layer's forward and backward pass every
  iteration and report them to mercuryd, whose learned ranks decide each
  layer's lane (worker 0's ranks, broadcast every ``resync_every`` steps).

The result is DDP's: gradients are averaged across workers exactly as DDP
does (scaled by 1/world_size, then summed), and the optimizer is applied once
per parameter per step. Without mercuryd, libmercury or the congestion
control it trains correctly on a single lane, with one warning.

Example::

    dist.init_process_group("gloo", ...)
    model = torchvision.models.resnet18()
    opt = mercury.torch.DistributedOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    opt.synchronize()          # before reading or saving the parameters
"""
from __future__ import annotations

import json
import os
import socket
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
import torch.distributed as dist

import mercury

__all__ = ["DistributedOptimizer", "Lanes", "DEFAULT_LANES", "find_tcp_sockets", "pin_congestion_control"]

# One lane per datapath rank: with fewer, a lane carries several ranks and a
# front layer's bucket can queue behind a later one launched before it on
# the same lane (seen in the bench-torch timeline with 4 lanes).
DEFAULT_LANES = 8
DEFAULT_BUCKET_BYTES = 256 << 10
DEFAULT_RESYNC_EVERY = 10
SO_COOKIE = 57  # <asm-generic/socket.h>; Python does not name it


def _lane_rank(lane: int, lanes: int) -> int:
    """The kernel rank of lane ``lane`` of ``lanes`` (as mercuryd assigns it)."""
    return (lane * mercury.NUM_RANKS + lanes - 1) // lanes


def _rank_lane(rank: int, lanes: int) -> int:
    """The lane that carries layers of agent rank ``rank``."""
    return rank * lanes // mercury.NUM_RANKS


def _own_parameters(module: torch.nn.Module) -> List[torch.nn.Parameter]:
    """Parameters a module uses in its own forward: its direct ones, and those
    of ParameterList/ParameterDict children (which have no forward)."""
    params = list(module.parameters(recurse=False))
    for child in module.children():
        if isinstance(child, (torch.nn.ParameterList, torch.nn.ParameterDict)):
            params += list(child.parameters())
    return params


def find_tcp_sockets() -> Dict[int, int]:
    """The process's connected TCP sockets: {fd: socket cookie}.

    Backend-agnostic: whatever opened them (Gloo, NCCL's socket transport),
    they are found by looking at the process's own descriptors.
    """
    found = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            dup = os.dup(fd)
        except OSError:
            continue  # gone
        try:
            s = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)  # not a socket
            continue
        try:
            if (s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6)
                    or s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
                continue
            s.getpeername()
            found[fd] = int.from_bytes(s.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8), "little")
        except OSError:
            continue  # unconnected
        finally:
            s.close()
    return found


def pin_congestion_control(fds: Sequence[int], cc: str) -> None:
    """Sets ``cc`` on each socket with TCP_CONGESTION and reads it back.

    Raises OSError if a socket refuses it (not available, or restricted by
    the administrator's net.ipv4.tcp_allowed_congestion_control).
    """
    for fd in fds:
        s = socket.socket(fileno=os.dup(fd))
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
            got = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0", 1)[0].decode()
            if got != cc:
                raise OSError(f"socket {fd} reads back congestion control {got!r}, not {cc!r}")
        finally:
            s.close()


@dataclass
class Lane:
    group: dist.ProcessGroup
    sockets: Dict[int, int] = field(default_factory=dict)  # fd -> cookie


class Lanes:
    """``n`` process groups over all ranks, each with its own connections.

    Collective: every rank must construct it at the same point. Connections
    are found by comparing the process's sockets before and after each group
    is created and used once, so no other thread should open TCP connections
    meanwhile.
    """

    def __init__(self, n: int) -> None:
        if not 1 <= n <= mercury.MAX_LANES:
            raise ValueError(f"lanes must be 1..{mercury.MAX_LANES}, not {n}")
        self.lanes: List[Lane] = []
        for _ in range(n):
            before = find_tcp_sockets()
            group = dist.new_group()
            dist.barrier(group=group)  # warm-up: the group's connections exist now
            after = find_tcp_sockets()
            self.lanes.append(Lane(group, {fd: c for fd, c in after.items() if fd not in before}))

    def pin(self, cc: str) -> Optional[str]:
        """Sets congestion control ``cc`` on every lane socket; the error, if any."""
        try:
            pin_congestion_control([fd for lane in self.lanes for fd in lane.sockets], cc)
        except OSError as e:
            return f"cannot set congestion control {cc!r} on the lanes' sockets: {e}"
        return None

    def keep(self, n: int) -> None:
        """Uses only the first ``n`` lanes from now on."""
        for lane in self.lanes[n:]:
            dist.destroy_process_group(lane.group)
        del self.lanes[n:]

    def close(self) -> None:
        """Destroys the lanes' process groups, closing their connections (collective)."""
        self.keep(0)

    def __len__(self) -> int:
        return len(self.lanes)

    def group(self, lane: int) -> dist.ProcessGroup:
        return self.lanes[lane].group

    def register(self, client: mercury.Client) -> bool:
        """Registers every lane's sockets with the agent (fds passed)."""
        ok = True
        for i, lane in enumerate(self.lanes):
            for fd in lane.sockets:
                ok = client.register_lane(i, len(self.lanes), fd) and ok
        return ok


@dataclass(eq=False)  # identity: buckets hold tensors
class _Bucket:
    params: List[torch.nn.Parameter]
    modules: List[torch.nn.Module]
    layers: List[int]
    lane: int = 0
    waiting: int = 0                       # params whose gradient is not ready
    work: Optional[object] = None          # the async all-reduce
    flat: Optional[torch.Tensor] = None
    pending_step: bool = False             # reduced but not yet applied
    trace: Optional[dict] = None
    group_params: List[List[torch.nn.Parameter]] = field(default_factory=list)


class DistributedOptimizer:
    """Data-parallel training with priority lanes and layer-wise overlap.

    Wraps ``optimizer`` (any ``torch.optim`` optimizer over ``model``'s
    parameters) and replaces DDP: do not wrap the model in DDP too.

    Args:
        model: the replica on this worker; every worker passes the same model.
        optimizer: the optimizer over ``model.parameters()``.
        lanes: priority lanes (1..8); 1 keeps the overlap without priorities.
        congestion_control: set on every lane socket ("mercury" for priorities,
            e.g. "cubic" for a control run, None to leave the default).
        client: a :class:`mercury.Client`; by default one is opened for job
            ``$MERCURY_JOB`` (else "torch") at socket ``$MERCURY_SOCKET``.
        bucket_bytes: neighbouring layers are reduced together until a bucket
            holds at least this many bytes of gradients.
        resync_every: every so many steps, worker 0's learned ranks are
            broadcast and become every worker's layer-to-lane map.
        agent_timeout: seconds to wait for mercuryd at start-up.

    Call :meth:`step` where you would call ``optimizer.step()``; it returns at
    once and each layer's update is applied just before its next forward
    pass. :meth:`synchronize` applies everything outstanding (it runs by
    itself for ``state_dict()`` of the model and of this optimizer).
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
                 lanes: int = DEFAULT_LANES, congestion_control: Optional[str] = "mercury",
                 client: Optional[mercury.Client] = None, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 resync_every: int = DEFAULT_RESYNC_EVERY, agent_timeout: float = 2.0) -> None:
        if not dist.is_initialized():
            raise RuntimeError("mercury.torch: call torch.distributed.init_process_group first")
        self.model = model
        self.optimizer = optimizer
        self.world = dist.get_world_size()
        self.rank = dist.get_rank()
        self.bucket_bytes = bucket_bytes
        self.resync_every = max(1, resync_every)
        self.iteration = 0
        self.reason_single_lane: Optional[str] = None
        self.wait_s = 0.0  # time forward passes spent waiting for reductions
        # Per-bucket timeline, kept if $MERCURY_TORCH_TRACE names a file (JSON lines).
        self._trace_file = open(os.environ["MERCURY_TORCH_TRACE"], "a") if os.environ.get("MERCURY_TORCH_TRACE") else None

        self._owns_client = client is None
        self.client = client or mercury.Client(os.environ.get("MERCURY_JOB", "torch"), worker_rank=self.rank)
        want_lanes = lanes
        ok, why = self._mercury_usable(want_lanes, congestion_control, agent_timeout)
        # Every worker must agree on the lanes: each is a collective.
        n = want_lanes if _all_true(ok) else 1
        if n < want_lanes:
            self.reason_single_lane = why or "another worker cannot use Mercury"
        self.lanes = Lanes(n)
        if congestion_control and (n > 1 or congestion_control != "mercury"):
            error = self.lanes.pin(congestion_control)
            if not _all_true(error is None) and n > 1:
                self.lanes.keep(1)
                self.reason_single_lane = error or "another worker cannot set the congestion control"
        if self.reason_single_lane and want_lanes > 1:
            warnings.warn(f"mercury.torch: training on a single lane without priorities: {self.reason_single_lane}",
                          RuntimeWarning, stacklevel=2)
        if len(self.lanes) > 1:
            self.lanes.register(self.client)
        # As DDP: every replica starts from worker 0's parameters and buffers.
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(t, src=0)

        # Layers: modules owning parameters, in the order of the first forward pass.
        self._layer_modules = [m for m in model.modules()
                               if _own_parameters(m)
                               and not isinstance(m, (torch.nn.ParameterList, torch.nn.ParameterDict))]
        self._order: List[torch.nn.Module] = []
        self._buckets: List[_Bucket] = []
        self._bucket_of_module: Dict[torch.nn.Module, _Bucket] = {}
        self._layer_lane: List[int] = []
        self._fwd_start: Dict[torch.nn.Module, float] = {}
        self._fwd_us: Dict[torch.nn.Module, float] = {}
        self._grad_time: Dict[int, float] = {}   # layer -> when its last gradient arrived
        self._forward_end = 0.0
        self._forward_start = 0.0
        self._next_launch = -1
        self._backward_queued = False
        self._zero_pending = False
        self._zero_set_to_none = False
        self._handles = []
        for m in self._layer_modules:
            self._handles.append(m.register_forward_pre_hook(self._pre_forward))
            self._handles.append(m.register_forward_hook(self._post_forward))
        self._handles.append(model._register_state_dict_hook(self._before_state_dict))

    # -- set-up -------------------------------------------------------------

    def _mercury_usable(self, lanes: int, cc: Optional[str], timeout: float) -> Tuple[bool, str]:
        if lanes <= 1:
            return False, ""
        if not mercury.available():
            return False, "libmercury not found"
        if not self.client.wait_connected(timeout):
            return False, "mercuryd not reachable (is it running? $MERCURY_SOCKET)"
        if cc == "mercury" and "mercury" not in _available_ccs():
            return False, "congestion control 'mercury' not available (modprobe tcp_mercury or mercuryd --datapath=bpf)"
        return True, ""

    def _finalize_layers(self) -> None:
        """After the first forward pass: layer order, model, buckets, lanes."""
        seen = set(self._order)
        self._order += [m for m in self._layer_modules if m not in seen]  # unused in forward
        names = {m: n for n, m in self.model.named_modules()}
        layers = [(names.get(m, "?") or "model", sum(p.numel() * p.element_size() for p in _own_parameters(m)))
                  for m in self._order]
        self.client.declare_model(layers)
        if len(self.lanes) > 1:
            self.client.subscribe_ranks()
        # Until the agent's ranks arrive, spread layers over ranks by index, as it does.
        n = len(self._order)
        self._layer_lane = [_rank_lane(i * mercury.NUM_RANKS // n, len(self.lanes)) for i in range(n)]

        owner = {id(p): None for p in self.model.parameters()}
        bucket: Optional[_Bucket] = None
        size = 0
        for layer, m in enumerate(self._order):
            params = [p for p in _own_parameters(m)
                      if p.requires_grad and id(p) in owner and owner[id(p)] is None]
            for p in params:
                owner[id(p)] = m
            lane = self._layer_lane[layer]
            if bucket is None or size >= self.bucket_bytes or lane != bucket.lane:
                bucket = _Bucket([], [], [], lane)
                self._buckets.append(bucket)
                size = 0
            bucket.params += params
            bucket.modules.append(m)
            bucket.layers.append(layer)
            size += sum(p.numel() * p.element_size() for p in params)
            self._bucket_of_module[m] = bucket
        self._buckets = [b for b in self._buckets if b.params]
        in_buckets = {id(p) for b in self._buckets for p in b.params}
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in in_buckets and p.requires_grad:
                    raise ValueError("mercury.torch: the optimizer holds a parameter the model does not own")
        with torch.enable_grad():
            for b in self._buckets:
                ids = {id(p) for p in b.params}
                b.group_params = [[p for p in g["params"] if id(p) in ids] for g in self.optimizer.param_groups]
                for p in b.params:
                    self._hook_gradient(p, b)

    def _hook_gradient(self, p: torch.nn.Parameter, bucket: _Bucket) -> None:
        # The AccumulateGrad node's hook runs once p.grad holds this backward's sum.
        acc = p.expand_as(p).grad_fn.next_functions[0][0]
        layer = bucket.layers[0]
        for m, lay in zip(bucket.modules, bucket.layers):
            if any(q is p for q in _own_parameters(m)):
                layer = lay

        def ready(*_: object) -> None:
            self._gradient_ready(bucket, layer)

        self._handles.append(acc.register_hook(ready))
        self._handles.append(acc)  # keep the node alive

    # -- hooks --------------------------------------------------------------

    def _pre_forward(self, module: torch.nn.Module, _inputs: object) -> None:
        if self._order and module is self._order[0]:
            self._forward_start = time.perf_counter()  # for the trace
        if not self._buckets:
            if module not in self._order:
                self._order.append(module)
        else:
            bucket = self._bucket_of_module.get(module)
            if bucket is not None:
                self._finish(bucket)
        self._fwd_start[module] = time.perf_counter()

    def _post_forward(self, module: torch.nn.Module, _inputs: object, _output: object) -> None:
        now = time.perf_counter()
        start = self._fwd_start.pop(module, None)
        if start is not None and torch.is_grad_enabled() and module.training:
            self._fwd_us[module] = self._fwd_us.get(module, 0.0) + (now - start) * 1e6
            self._forward_end = now

    def _gradient_ready(self, bucket: _Bucket, layer: int) -> None:
        if not self._backward_queued:
            self._backward_queued = True
            self._next_launch = len(self._buckets) - 1
            for b in self._buckets:
                b.waiting = len(b.params)
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
        self._grad_time[layer] = time.perf_counter()
        bucket.waiting -= 1
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

    def _launch(self, b: _Bucket) -> None:
        if b.pending_step:
            self._finish(b)  # a forward pass skipped this module: apply the last step first
        grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in b.params]
        flat = torch.cat(grads)
        flat.mul_(1.0 / self.world)  # as DDP: scale, then sum
        b.flat = flat
        b.work = dist.all_reduce(flat, group=self.lanes.group(b.lane), async_op=True)
        b.pending_step = True
        if self._trace_file:
            b.trace = {"iteration": self.iteration, "bucket": self._buckets.index(b), "lane": b.lane,
                       "bytes": flat.numel() * flat.element_size(), "launch": time.perf_counter()}
            b.work.get_future().then(lambda _f, t=b.trace: t.__setitem__("done", time.perf_counter()))

    def _backward_done(self) -> None:
        self._launch_ready(all_remaining=True)
        self._backward_queued = False

    def _finish(self, b: _Bucket) -> None:
        """Waits for ``b``'s reduction and applies the optimizer to its parameters."""
        if not b.pending_step:
            return
        t0 = time.perf_counter()
        b.work.wait()
        t1 = time.perf_counter()
        self.wait_s += t1 - t0
        if self._trace_file and b.trace:
            b.trace.update(wait_from=t0, wait_until=t1, forward_start=self._forward_start)
            self._trace_file.write(json.dumps(b.trace) + "\n")
        offset = 0
        for p in b.params:
            n = p.numel()
            avg = b.flat[offset:offset + n].view_as(p)
            if p.grad is None:
                p.grad = avg.clone()
            else:
                p.grad.copy_(avg)
            offset += n
        b.work, b.flat, b.pending_step = None, None, False
        self._step_params(b.group_params)
        if self._zero_pending:
            self._zero(b.params)

    def _step_params(self, group_params: List[List[torch.nn.Parameter]]) -> None:
        # Step just these parameters: each group's list is swapped for its
        # subset for the duration of the call (optimizers iterate group["params"]).
        saved = [g["params"] for g in self.optimizer.param_groups]
        try:
            for g, subset in zip(self.optimizer.param_groups, group_params):
                g["params"] = subset
            self.optimizer.step()
        finally:
            for g, params in zip(self.optimizer.param_groups, saved):
                g["params"] = params

    def _zero(self, params: Sequence[torch.nn.Parameter]) -> None:
        for p in params:
            if p.grad is None:
                continue
            if self._zero_set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    def _before_state_dict(self, *_: object) -> None:
        # The model's state_dict shares storage with the parameters: bring them up to date.
        self.synchronize()

    # -- public -------------------------------------------------------------

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zeroes gradients; those still being reduced are zeroed once applied."""
        self._zero_set_to_none = set_to_none
        pending = {id(p) for b in self._buckets if b.pending_step for p in b.params}
        self._zero([p for g in self.optimizer.param_groups for p in g["params"] if id(p) not in pending])
        self._zero_pending = bool(pending)

    def step(self) -> None:
        """Ends the iteration: reports timings, refreshes lanes. Returns at once;
        each layer's update is applied before its next forward pass."""
        if not self._buckets:
            if not self._order:
                raise RuntimeError("mercury.torch: step() before any forward and backward pass")
            self._finalize_layers()
            # The first backward ran before the hooks existed: reduce it now.
            self._next_launch = len(self._buckets) - 1
            for b in self._buckets:
                b.waiting = 0
            self._launch_ready(all_remaining=True)
        self.iteration += 1
        self._report_timings()
        if len(self.lanes) > 1 and self.iteration % self.resync_every == 0:
            self._resync_lanes()
        self._zero_pending = False

    def synchronize(self) -> None:
        """Applies every outstanding reduction and step (in forward order)."""
        for b in self._buckets:
            self._finish(b)

    def state_dict(self) -> dict:
        self.synchronize()
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.synchronize()
        self.optimizer.load_state_dict(state)

    @property
    def param_groups(self) -> list:
        return self.optimizer.param_groups

    def layer_lanes(self) -> List[int]:
        """Each layer's lane, in forward order."""
        return list(self._layer_lane)

    def close(self) -> None:
        """Applies what is outstanding, removes the hooks, withdraws the lanes
        and closes their connections. Collective: every worker calls it."""
        self.synchronize()
        for h in self._handles:
            if hasattr(h, "remove"):
                h.remove()
        self._handles = []
        if len(self.lanes) > 1:
            self.client.release_lanes()
        self.lanes.close()
        if self._owns_client:
            self.client.close()
        if self._trace_file:
            self._trace_file.close()
            self._trace_file = None

    # -- timings and ranks ---------------------------------------------------

    def _report_timings(self) -> None:
        fwd = [self._fwd_us.get(m, 0.0) for m in self._order]
        # Backward of layer i: from the previous gradient (in backward order) to its own.
        bwd = [0.0] * len(self._order)
        prev = self._forward_end
        for layer, t in sorted(self._grad_time.items(), key=lambda kv: kv[1]):
            bwd[layer] = max(0.0, (t - prev) * 1e6)
            prev = t
        if any(fwd) and self._grad_time:
            self.client.report_timings(self.iteration, fwd, bwd)
            self.client.begin_iteration(self.iteration + 1)
        self._fwd_us.clear()
        self._grad_time.clear()

    def _resync_lanes(self) -> None:
        n = len(self._order)
        lanes = torch.tensor(self._layer_lane, dtype=torch.int32)
        if self.rank == 0:
            ranks = self.client.layer_ranks()
            if ranks is not None and len(ranks.ranks) == n:
                lanes = torch.tensor([_rank_lane(r, len(self.lanes)) for r in ranks.ranks], dtype=torch.int32)
        dist.broadcast(lanes, src=0)
        self._layer_lane = lanes.tolist()
        for b in self._buckets:
            b.lane = min(self._layer_lane[layer] for layer in b.layers)


def _all_true(flag: bool) -> bool:
    """True on every worker if ``flag`` is true on every worker (collective)."""
    t = torch.tensor([1 if flag else 0], dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return t.item() == 1


def _available_ccs() -> Set[str]:
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            return set(f.read().split())
    except OSError:
        return set()
