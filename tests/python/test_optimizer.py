# SPDX-License-Identifier: GPL-2.0
"""DistributedOptimizer in one process (Gloo, world size 1, no agent): its
arguments, its torch.optim face and the gradient guard. The equivalence with
DDP across workers is make torchtest's (tests/torch)."""
from __future__ import annotations

import copy
import pickle
import re
import warnings

import pytest
import torch
import torch.nn as nn

import mercury.torch as mt
from mercury.torch._guard import GuardedGrad, is_pending


pytestmark = pytest.mark.usefixtures("gloo_world")


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def make(model: nn.Module, **kw) -> mt.DistributedOptimizer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # no agent: one lane
        return mt.DistributedOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), **kw)


def backward(model: nn.Module) -> None:
    model(torch.ones(3, 4)).sum().backward()


def iterate(*runs: tuple) -> None:
    """One training iteration of each (model, optimizer) in ``runs``."""
    for model, o in runs:
        o.zero_grad()
        backward(model)
        o.step()


@pytest.mark.parametrize("kw, error", [
    ({"lanes": 0}, ValueError), ({"lanes": 9}, ValueError), ({"lanes": 2.0}, TypeError),
    ({"bucket_bytes": 0}, ValueError), ({"bucket_bytes": "1"}, TypeError),
    ({"resync_every": 0}, ValueError), ({"agent_timeout": -1}, ValueError),
])
def test_bad_arguments(kw, error) -> None:
    with pytest.raises(error):
        make(net(), **kw)


@pytest.mark.parametrize("kw, message", [
    ({"backend": "mpi"}, "backend is one of 'allreduce', 'ps', 'nccl', not 'mpi'"),
    ({"backend": "nccl", "servers": ["127.0.0.1:1"]}, "servers= is for backend='ps'"),
    ({"servers": ["127.0.0.1:1"]}, "servers= is for backend='ps'"),
    ({"placement": "mxnet"}, "placement= is for backend='ps'"),   # not silently ignored
    ({"server_timeout": 5.0}, "server_timeout= is for backend='ps'"),
    ({"backend": "ps"}, "needs servers="),
    ({"backend": "ps", "servers": ["127.0.0.1:1"], "placement": "x"}, "placement is one of"),
    ({"backend": "ps", "servers": ["127.0.0.1:1"], "partition_bytes": 3}, "partition_bytes must be 4"),
    ({"backend": "ps", "servers": ["127.0.0.1:1"], "server_timeout": 0}, "server_timeout must be > 0"),
    ({"backend": "ps", "servers": ["no-port"]}, "HOST:PORT"),
])
def test_backend_options_checked_before_anything_collective(kw, message) -> None:
    """Each backend's options are checked by its reducer's check
    (mercury.torch.reducer) before the optimizer touches the process group."""
    with pytest.raises(ValueError, match=re.escape(message)):
        make(net(), **kw)


def test_bad_model_and_optimizer() -> None:
    m = net()
    with pytest.raises(TypeError):
        mt.DistributedOptimizer(m, m.parameters())
    with pytest.raises(TypeError):
        mt.DistributedOptimizer(nn.parallel.DistributedDataParallel(m), torch.optim.SGD(m.parameters(), lr=1))
    with pytest.raises(TypeError):
        mt.DistributedOptimizer("model", torch.optim.SGD(m.parameters(), lr=1))


def test_complex_parameters_are_refused_by_name() -> None:
    m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    m[1].register_parameter("phase", nn.Parameter(torch.zeros(2, dtype=torch.complex64)))
    with pytest.raises(TypeError, match=r"complex parameters are not supported \('1.phase'\)"):
        make(m)


def test_one_per_model_until_closed() -> None:
    m = net()
    first = make(m)
    with pytest.raises(RuntimeError, match="already has"):
        make(m)
    first.close()
    make(m).close()


def test_single_lane_without_agent_warns_once() -> None:
    m = net()
    with pytest.warns(RuntimeWarning, match="single lane") as caught:
        opt = mt.DistributedOptimizer(m, torch.optim.SGD(m.parameters(), lr=0.1))
    assert len([w for w in caught if "single lane" in str(w.message)]) == 1
    assert len(opt.lanes) == 1 and opt.reason_single_lane
    opt.close()


def test_is_an_optimizer_for_schedulers() -> None:
    m = net()
    opt = make(m)
    assert isinstance(opt, torch.optim.Optimizer)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    backward(m)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="closure"):
        opt.step(lambda: 0.0)
    with pytest.raises(RuntimeError):
        opt.add_param_group({"params": []})
    with pytest.raises(TypeError):
        pickle.dumps(opt)
    opt.close()


def test_step_before_forward_is_an_error() -> None:
    opt = make(net())
    with pytest.raises(RuntimeError, match="before any forward"):
        opt.step()
    opt.close()


def test_gradient_guarded_while_reducing_then_averaged() -> None:
    m = net()
    ref = copy.deepcopy(m)
    opt = make(m)
    backward(m)
    backward(ref)
    w = m[0].weight
    assert isinstance(w.grad, GuardedGrad)          # the reduction was launched in backward
    assert w.grad.shape == w.shape and w.grad.dtype == w.dtype   # metadata does not wait
    assert isinstance(w.grad, GuardedGrad)
    assert torch.equal(w.grad * 1, ref[0].weight.grad)   # a use waits and sees the average (world 1: itself)
    assert not isinstance(w.grad, GuardedGrad)
    opt.close()


def test_step_is_applied_before_the_next_forward() -> None:
    m = net()
    ref = copy.deepcopy(m)
    opt = make(m)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        iterate((m, opt), (ref, ref_opt))
    assert all(is_pending(p) for p in m.parameters())   # deferred: nothing used them yet
    m(torch.ones(1, 4))                           # the forward applies the deferred step
    assert not any(is_pending(p) for p in m.parameters())
    for a, b in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    opt.close()


def test_a_pending_parameter_applies_its_step_when_used() -> None:
    # Between step() and the next forward, whatever Python does with a
    # parameter sees DDP's value: reading it, changing it in place, copying
    # the model. The gradient and metadata do not apply the step.
    m = net()
    ref = copy.deepcopy(m)
    opt = make(m)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    iterate((m, opt), (ref, ref_opt))
    w = m[0].weight
    assert is_pending(w) and isinstance(w, torch.nn.Parameter)
    assert w.shape == ref[0].weight.shape and w.grad is not None and is_pending(w)
    torch.testing.assert_close(w.detach(), ref[0].weight.detach(), rtol=0, atol=0)   # applied on use
    assert not is_pending(w)
    copied = copy.deepcopy(m)                     # the other buckets' steps, then a plain model
    assert not any(is_pending(p) for p in m.parameters())
    assert all(type(p) is torch.nn.Parameter for p in copied.parameters())
    assert not copied._forward_pre_hooks and not any(c._forward_pre_hooks for c in copied.modules())
    for a, b in zip(copied.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    opt.close()


def test_finished_reductions_step_together_before_the_forward() -> None:
    # One bucket per layer: the first forward applies the deferred step of
    # every bucket whose reduction has ended in one optimizer call, not one
    # call per bucket (each costs ~0.1 ms of the forward pass), with the
    # same result as stepping them one by one. A reduction still running is
    # not waited for early: make torchtest's equivalence runs cover that.
    m = net()
    ref = copy.deepcopy(m)
    opt = make(m, bucket_bytes=1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    calls = []
    inner = opt.optimizer.step
    opt.optimizer.step = lambda *a, **kw: (calls.append([len(g["params"]) for g in opt.param_groups]),
                                           inner(*a, **kw))[1]
    for _ in range(3):
        iterate((m, opt), (ref, ref_opt))
        for b in opt._buckets:
            b.work.wait()                            # both reductions have ended (Gloo's thread)
        calls.clear()
        ref(torch.ones(1, 4))
        m(torch.ones(1, 4))
        assert calls == [[4]]                        # both buckets' 4 parameters, one call
    assert len(opt._buckets) == 2

    class Running:   # a reduction that has not ended yet: waited for at its own layer only
        def __init__(self, work):
            self.work = work

        def is_completed(self) -> bool:
            return False

        def wait(self) -> None:
            self.work.wait()
    iterate((m, opt), (ref, ref_opt))
    opt._buckets[1].work = Running(opt._buckets[1].work)
    calls.clear()
    ref(torch.ones(1, 4))
    m(torch.ones(1, 4))
    assert calls == [[2], [2]]                       # each bucket before its own layer
    for a, b in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    opt.close()


def test_model_zero_grad_after_step_keeps_the_step() -> None:
    m = net()
    ref = copy.deepcopy(m)
    opt = make(m)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for model, o in ((m, opt), (ref, ref_opt)):
        backward(model)
        o.step()
        model.zero_grad()                          # before the deferred step ran
    opt.synchronize()
    for a, b in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        # zero_grad()'s default is set_to_none=False on 1.13, True on 2.x: as the reference.
        assert (a.grad is None) == (b.grad is None)
        assert a.grad is None or torch.count_nonzero(a.grad) == 0
    opt.close()


def test_state_dicts_bring_parameters_up_to_date() -> None:
    m = net()
    opt = make(m)
    backward(m)
    opt.step()
    state = copy.deepcopy(m.state_dict())         # waits for the deferred step
    for k, v in m.state_dict().items():
        assert torch.equal(state[k], v)
    assert opt.state_dict()["state"]              # momentum buffers exist: the step ran
    opt.close()


def test_a_model_with_nothing_to_train_is_set_up_once() -> None:
    m = net()
    for p in m.parameters():
        p.requires_grad_(False)
    opt = make(m)
    before = [p.detach().clone() for p in m.parameters()]
    for _ in range(2):
        m(torch.ones(1, 4))
        opt.step()
    assert opt._finalized and opt._learning is None and not opt._buckets
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))
    opt.close()


@pytest.mark.parametrize("on_device", [False, True])
def test_averaged_takes_the_sum_only_where_a_worker_used_it(monkeypatch, on_device) -> None:
    """Both ways of putting a bucket's averages in place (from the flags
    read into host memory; chosen on the device, as on a GPU): a parameter
    some worker used gets the average, one none used keeps its gradient."""
    import mercury.torch.optimizer as optimizer_module
    from mercury.torch._buckets import Bucket
    monkeypatch.setattr(optimizer_module, "select_on_device", lambda _flags: on_device)
    b = Bucket(0, [], [], [])
    b.flat = torch.tensor([1.0, 2.0, 3.0, 4.0, 1.0, 0.0])   # two gradients' sums, then their flags
    b.slots, b.flags = [b.flat[0:2], b.flat[2:4]], b.flat[4:]
    b.real = [torch.tensor([9.0, 9.0]), torch.tensor([7.0, 7.0])]
    b.was_none = [False, False]
    out = mt.DistributedOptimizer._averaged(None, b)  # type: ignore[arg-type]
    assert [t.tolist() for t in out] == [[1.0, 2.0], [7.0, 7.0]]
    assert out[0] is b.real[0] and out[1] is b.real[1]   # in place: p.grad's storage


class Branchy(nn.Module):
    """A layer the forward uses every other call: its gradient is there but
    unused in those iterations (DDP leaves it as it was)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.head = nn.Linear(4, 8), nn.Linear(4, 8), nn.Linear(8, 2)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.head(self.a(x) if self.calls % 2 else self.b(x))


def test_averages_chosen_on_the_device_are_the_hosts(monkeypatch) -> None:
    """The GPU path of putting averages in place (chosen on the device, no
    read of the used-flags) gives what the host path gives, unused layers
    included: run here on the CPU by forcing it."""
    import mercury.torch.optimizer as optimizer_module

    def train(on_device: bool) -> list:
        monkeypatch.setattr(optimizer_module, "select_on_device", lambda _flags: on_device)
        torch.manual_seed(0)
        model = Branchy()
        o = make(model, bucket_bytes=1)
        for _ in range(5):
            o.zero_grad(set_to_none=False)
            model(torch.ones(3, 4)).sum().backward()
            o.step()
        o.synchronize()
        out = [p.detach().clone() for p in model.parameters()] + [p.grad.clone() for p in model.parameters()]
        o.close()
        return out

    host, device = train(False), train(True)
    assert all(torch.equal(x, y) for x, y in zip(host, device))


class Nested(nn.Module):
    """The model's own parameter, a layer, and a module whose parameters
    its parent uses without calling it (as MultiheadAttention's out_proj)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.inner = nn.Linear(4, 4)
        self.unused_call = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inner(x * self.scale)
        return nn.functional.linear(h, self.unused_call.weight, self.unused_call.bias)


def test_after_the_first_forward_only_layers_keep_a_hook() -> None:
    """Until the layers are known every module with parameters is hooked
    before and after its forward; then only the layers keep a pre-hook
    (a Python call per module per forward is time DDP does not spend), and
    training still matches plain SGD."""
    torch.manual_seed(0)
    m = Nested()
    ref = copy.deepcopy(m)
    opt = make(m)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    assert len(m.inner._forward_hooks) == 1 and len(m.unused_call._forward_pre_hooks) == 1
    for _ in range(3):
        for model, o in ((m, opt), (ref, ref_opt)):
            o.zero_grad()
            model(torch.ones(3, 4)).sum().backward()
            o.step()
    assert [len(x._forward_hooks) for x in (m.inner, m.unused_call)] == [0, 0]
    assert len(m.inner._forward_pre_hooks) == 1            # a layer: its bucket's step comes first
    assert len(m.unused_call._forward_pre_hooks) == 0      # its parameters are its parent's layer
    assert len(m._forward_pre_hooks) == 2 and len(m._forward_hooks) == 1   # the root's, and a layer
    opt.synchronize()
    for a, b in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    opt.close()
    assert not any(len(x._forward_pre_hooks) or len(x._forward_hooks) for x in m.modules())


def test_layer_times_run_from_each_layer_start_to_the_next(monkeypatch) -> None:
    """A layer's forward time is from its start to the next layer's (the
    last one's: to the model's end), summed over a step's timed forwards;
    an untimed forward (evaluation) adds nothing."""
    import mercury.torch._timings as timings_module
    clock = iter([0.0, 1.0, 1.5, 4.0,   # timed: model, a, b (a again: its first start counts), end
                  10.0, 11.0, 11.5, 12.0,       # timed: model, a, b, end
                  20.0,                         # untimed: model (nothing else read)
                  30.0])                        # a gradient
    monkeypatch.setattr(timings_module.time, "perf_counter", lambda: next(clock))
    a, b = nn.Linear(1, 1), nn.Linear(1, 1)
    t = timings_module.LayerTimings()
    for _ in range(2):
        t.model_forward_began(True)
        for layer in (a, b, a):
            t.forward_began(layer)
        t.model_forward_ended()
    t.model_forward_began(False)
    t.forward_began(a)
    t.model_forward_ended()

    class Client:
        sent: list = []

        def report_timings(self, iteration, fwd, bwd):
            self.sent.append(fwd)

        def begin_iteration(self, iteration):
            pass

    t.gradient_ready(0)
    t.report(Client(), 1, [a, b])   # type: ignore[arg-type]
    assert Client.sent == [[(0.5 + 0.5) * 1e6, (2.5 + 0.5) * 1e6]]
