# SPDX-License-Identifier: GPL-2.0
"""One worker of the training-loop checks (tests/torch/checks.py starts them).

Runs ordinary training loops, each on a fresh model, as DDP (the reference)
or with mercury.torch.DistributedOptimizer, and saves per loop the final
parameters and buffers and what the loop logged. The same seeds and data in
both modes: checks.py compares them.

usage: loops.py --rank R --world W --port P --mode ddp|mercury|ps [--servers H:P,...] --out FILE LOOP...
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import traceback
from typing import Callable, Dict, List, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import mercury.torch as mt  # noqa: E402

STEPS = 6
SERVERS: List[str] = []   # mode ps: the mercury-ps servers (--servers)


class SmallNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class Encoder(nn.Module):
    """Embedding, a transformer encoder layer (MultiheadAttention uses its
    out_proj's parameters without calling out_proj), a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.block = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0)
        self.head = nn.Linear(16, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.embed(tokens)).mean(0))


class Tied(nn.Module):
    """Input and output embedding share one weight."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.mix = nn.Linear(16, 16)
        self.out = nn.Linear(16, 50, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.mix(self.embed(tokens)))).mean(0)[:, :10]


class Twice(nn.Module):
    """One block called twice in a forward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(48, 32)
        self.block = nn.Linear(32, 32)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x.flatten(1)[:, :48]))
        return self.head(torch.relu(self.block(torch.relu(self.block(h)))))


class Branchy(nn.Module):
    """Branches used only in some iterations, on some workers: ``often`` on
    every other step per worker (so locally unused, globally used), ``rarely``
    on every third step on every worker (globally unused otherwise)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(48, 32)
        self.often = nn.Linear(32, 32)
        self.rarely = nn.Linear(32, 32)
        self.head = nn.Linear(32, 10)
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x.flatten(1)[:, :48]))
        if (self.step + dist.get_rank()) % 2 == 0:
            h = h + torch.relu(self.often(h))
        if self.step % 3 == 0:
            h = h + torch.relu(self.rarely(h))
        return self.head(h)


def sgd(model_or_params, lr: float = 0.05) -> torch.optim.Optimizer:
    params = model_or_params.parameters() if isinstance(model_or_params, nn.Module) else model_or_params
    return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)


class Run:
    """One loop's model and optimizer, as DDP or as mercury.torch."""

    def __init__(self, mode: str, model: nn.Module, make_opt: Callable[[nn.Module], torch.optim.Optimizer],
                 find_unused: bool = False) -> None:
        self.mode, self.model = mode, model
        if mode == "ddp":
            self.net = nn.parallel.DistributedDataParallel(model, find_unused_parameters=find_unused)
            self.opt = make_opt(model)
            self.no_sync = self.net.no_sync
        else:
            self.net = model
            ps = dict(backend="ps", servers=SERVERS) if mode == "ps" else {}
            self.opt = mt.DistributedOptimizer(model, make_opt(model), **ps)
            self.no_sync = getattr(self.opt, "no_sync", None)   # absent before no_sync() existed

    def clip(self, max_norm: float) -> None:
        if self.mode == "ddp":
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        else:
            self.opt.clip_grad_norm_(max_norm)

    def close(self) -> None:
        if self.mode != "ddp":
            self.opt.close()


def images(gen: torch.Generator, n: int = 8) -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 3, 16, 16, generator=gen), torch.randint(0, 10, (n,), generator=gen)


def tokens(gen: torch.Generator, n: int = 8) -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, 50, (5, n), generator=gen), torch.randint(0, 10, (n,), generator=gen)


def grad_norm(model: nn.Module) -> float:
    return float(torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]).norm())


# Each loop: (mode, generator) -> (model, logged values).
def loop_plain(mode: str, gen: torch.Generator, model: nn.Module = None, batch=images,
               make_opt=sgd, find_unused: bool = False, set_to_none: bool = False,
               model_zero: bool = False) -> Tuple[nn.Module, List[float]]:
    r = Run(mode, model or SmallNet(), make_opt, find_unused)
    for step in range(STEPS):
        if hasattr(r.model, "step"):
            r.model.step = step
        x, y = batch(gen)
        if model_zero:
            r.model.zero_grad(set_to_none=set_to_none)
        else:
            r.opt.zero_grad(set_to_none=set_to_none)
        nn.functional.cross_entropy(r.net(x), y).backward()
        r.opt.step()
    r.close()
    return r.model, []


def loop_accumulate(mode: str, gen: torch.Generator, use_no_sync: bool) -> Tuple[nn.Module, List[float]]:
    r = Run(mode, SmallNet(), sgd)
    for _ in range(STEPS):
        r.opt.zero_grad()
        for micro in range(2):
            x, y = images(gen, 4)
            last = micro == 1
            with (r.no_sync() if use_no_sync and not last else contextlib.nullcontext()):
                (nn.functional.cross_entropy(r.net(x), y) / 2).backward()
        r.opt.step()
    r.close()
    return r.model, []


def loop_clip(mode: str, gen: torch.Generator, plain: bool) -> Tuple[nn.Module, List[float]]:
    r = Run(mode, SmallNet(), sgd)
    norms = []
    for _ in range(STEPS):
        x, y = images(gen)
        r.opt.zero_grad()
        nn.functional.cross_entropy(r.net(x), y).backward()
        if plain:
            norms.append(float(torch.nn.utils.clip_grad_norm_(r.model.parameters(), 0.05)))
        else:
            r.clip(0.05)
        r.opt.step()
    r.close()
    return r.model, norms


def loop_grad_norm(mode: str, gen: torch.Generator) -> Tuple[nn.Module, List[float]]:
    r = Run(mode, SmallNet(), sgd)
    norms = []
    for _ in range(STEPS):
        x, y = images(gen)
        r.opt.zero_grad()
        nn.functional.cross_entropy(r.net(x), y).backward()
        norms.append(grad_norm(r.model))          # logged after backward
        r.opt.step()
        norms.append(grad_norm(r.model))          # and after step, as some loops do
    r.close()
    return r.model, norms


def loop_schedulers(mode: str, gen: torch.Generator) -> Tuple[nn.Module, List[float]]:
    models, lrs = {}, []
    for name in ("step_lr", "one_cycle"):
        r = Run(mode, SmallNet(), sgd)
        if name == "step_lr":
            sched = torch.optim.lr_scheduler.StepLR(r.opt, step_size=2, gamma=0.5)
        else:   # also cycles SGD's momentum
            sched = torch.optim.lr_scheduler.OneCycleLR(r.opt, max_lr=0.1, total_steps=STEPS)
        for _ in range(STEPS):
            x, y = images(gen)
            r.opt.zero_grad()
            nn.functional.cross_entropy(r.net(x), y).backward()
            r.opt.step()
            sched.step()
            lrs.append(r.opt.param_groups[0]["lr"])
        r.close()
        models[name] = r.model
    return nn.ModuleDict(models), lrs


def loop_param_groups(mode: str, gen: torch.Generator) -> Tuple[nn.Module, List[float]]:
    def groups(m: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD([{"params": m.features.parameters(), "lr": 0.1, "weight_decay": 1e-3},
                                {"params": m.classifier.parameters(), "lr": 0.01, "weight_decay": 0.0}],
                               lr=0.05, momentum=0.9)
    return loop_plain(mode, gen, make_opt=groups)


def loop_frozen(mode: str, gen: torch.Generator) -> Tuple[nn.Module, List[float]]:
    model = SmallNet()
    model.features[0].weight.requires_grad_(False)
    return loop_plain(mode, gen, model=model,
                      make_opt=lambda m: sgd([p for p in m.parameters() if p.requires_grad]))


def loop_checkpoint(mode: str, gen: torch.Generator) -> Tuple[nn.Module, List[float]]:
    r = Run(mode, SmallNet(), sgd)
    for step in range(STEPS):
        if step == 3:   # save mid-run, build everything afresh, load, go on
            saved_model = copy.deepcopy(r.model.state_dict())
            saved_opt = copy.deepcopy(r.opt.state_dict())
            r.close()
            torch.manual_seed(123)
            model = SmallNet()
            model.load_state_dict(saved_model)
            r = Run(mode, model, sgd)
            r.opt.load_state_dict(saved_opt)
        x, y = images(gen)
        r.opt.zero_grad()
        nn.functional.cross_entropy(r.net(x), y).backward()
        r.opt.step()
    r.close()
    return r.model, []


def loop_dataloader(mode: str, gen: torch.Generator) -> Tuple[nn.Module, List[float]]:
    data = torch.utils.data.TensorDataset(torch.randn(96, 3, 16, 16, generator=torch.Generator().manual_seed(7)),
                                          torch.randint(0, 10, (96,), generator=torch.Generator().manual_seed(8)))
    sampler = torch.utils.data.distributed.DistributedSampler(data, shuffle=True, seed=0)
    r = Run(mode, SmallNet(), sgd)   # the lanes exist before the loader's workers fork
    loader = torch.utils.data.DataLoader(data, batch_size=8, sampler=sampler, num_workers=2)
    seen = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            r.opt.zero_grad()
            nn.functional.cross_entropy(r.net(x), y).backward()
            r.opt.step()
            seen.append(float(y.sum()))
    r.close()
    return r.model, seen


def loop_autocast(mode: str, gen: torch.Generator) -> Tuple[nn.Module, List[float]]:
    r = Run(mode, SmallNet(), sgd)
    for _ in range(STEPS):
        x, y = images(gen)
        r.opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(r.net(x), y)
        loss.backward()
        r.opt.step()
    r.close()
    return r.model, []


# Loops that touch the weights between step() and the next forward: under
# mercury.torch the step of those weights is still deferred then.
def loop_after_step(mode: str, gen: torch.Generator, after: Callable[["Run", int], List[float]],
                    keep: Callable[["Run"], nn.Module] = lambda r: r.model,
                    before: Callable[["Run"], None] = lambda r: None) -> Tuple[nn.Module, List[float]]:
    r = Run(mode, SmallNet(), sgd)
    before(r)
    logged: List[float] = []
    for step in range(STEPS):
        x, y = images(gen)
        r.opt.zero_grad()
        nn.functional.cross_entropy(r.net(x), y).backward()
        r.opt.step()
        logged += after(r, step)
    kept = keep(r)
    r.close()
    return kept, logged


def ema_update(ema: nn.Module, model: nn.Module, decay: float = 0.8) -> List[float]:
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters()):
            e.mul_(decay).add_(p, alpha=1 - decay)
    return []


def loop_ema(mode: str, gen: torch.Generator, copied: bool) -> Tuple[nn.Module, List[float]]:
    """An exponential moving average of the weights, updated after every
    step: in a model built apart, or in a copy.deepcopy of the wrapped one."""
    ema: List[nn.Module] = []

    def make(r: Run) -> None:
        if copied:
            ema.append(copy.deepcopy(r.model))
        else:
            ema.append(SmallNet())
            ema[0].load_state_dict(r.model.state_dict())
    return loop_after_step(mode, gen, lambda r, _: ema_update(ema[0], r.model), keep=lambda r: ema[0], before=make)


def loop_swa(mode: str, gen: torch.Generator) -> Tuple[nn.Module, List[float]]:
    """PyTorch's own weight averaging (it deep-copies the model)."""
    swa: List[torch.optim.swa_utils.AveragedModel] = []

    def update(r: Run, _: int) -> List[float]:
        swa[0].update_parameters(r.model)
        return []
    return loop_after_step(mode, gen, update, keep=lambda r: swa[0].module,
                           before=lambda r: swa.append(torch.optim.swa_utils.AveragedModel(r.model)))


def clamp(r: Run, _: int) -> List[float]:
    with torch.no_grad():   # WGAN's weight clipping
        for p in r.model.parameters():
            p.clamp_(-0.05, 0.05)
    return []


def shrink_data(r: Run, _: int) -> List[float]:
    for p in r.model.parameters():
        p.data.mul_(0.98)   # an old-style weight change, through .data
    return []


def through_vector(r: Run, _: int) -> List[float]:
    v = torch.nn.utils.parameters_to_vector(r.model.parameters())
    torch.nn.utils.vector_to_parameters(v * 0.99, r.model.parameters())
    return [float(v.norm())]


def read_weights(r: Run, _: int) -> List[float]:
    return [float(p.detach().abs().sum()) for p in r.model.parameters()] + [float(r.model.features[0].weight[0, 0, 0, 0])]


def read_state_dict(r: Run, _: int) -> List[float]:
    return [float(v.float().sum()) for v in r.model.state_dict().values()]


def evaluate(r: Run, step: int) -> List[float]:
    r.model.eval()
    with torch.no_grad():
        out = r.net(torch.ones(2, 3, 16, 16) * step)
    r.model.train()
    return [float(out.sum())]


def snapshot(r: Run, step: int, kept: List[nn.Module]) -> List[float]:
    if step == 3:
        kept.append(copy.deepcopy(r.model))
    return []


def loop_snapshot(mode: str, gen: torch.Generator) -> Tuple[nn.Module, List[float]]:
    """copy.deepcopy of the wrapped model between steps: a plain model with
    the stepped weights (compared), which trains on its own."""
    kept: List[nn.Module] = []
    loop_after_step(mode, gen, lambda r, s: snapshot(r, s, kept))
    snap = kept[0]
    opt = sgd(snap)
    x, y = images(torch.Generator().manual_seed(5))
    nn.functional.cross_entropy(snap(x), y).backward()   # no worker's hooks: a local step
    opt.step()
    return snap, []


def channels_last_images(gen: torch.Generator, n: int = 8) -> Tuple[torch.Tensor, torch.Tensor]:
    x, y = images(gen, n)
    return x.contiguous(memory_format=torch.channels_last), y


LOOPS: Dict[str, Callable[[str, torch.Generator], Tuple[nn.Module, List[float]]]] = {
    "accumulate": lambda m, g: loop_accumulate(m, g, use_no_sync=False),
    "accumulate-no-sync": lambda m, g: loop_accumulate(m, g, use_no_sync=True),
    "clip-plain": lambda m, g: loop_clip(m, g, plain=True),
    "clip-method": lambda m, g: loop_clip(m, g, plain=False),
    "grad-norm-read": loop_grad_norm,
    "schedulers": loop_schedulers,
    "param-groups": loop_param_groups,
    "zero-grad-none": lambda m, g: loop_plain(m, g, set_to_none=True),
    "zero-grad-zeros": lambda m, g: loop_plain(m, g, set_to_none=False),
    "model-zero-grad": lambda m, g: loop_plain(m, g, model_zero=True),
    "called-twice": lambda m, g: loop_plain(m, g, model=Twice()),
    "attention-out-proj": lambda m, g: loop_plain(m, g, model=Encoder(), batch=tokens),
    "tied-weights": lambda m, g: loop_plain(m, g, model=Tied(), batch=tokens),
    "frozen": loop_frozen,
    "unused-parameters": lambda m, g: loop_plain(m, g, model=Branchy(), find_unused=True, set_to_none=True),
    "checkpoint": loop_checkpoint,
    "dataloader": loop_dataloader,
    "autocast-bf16": loop_autocast,
    # Conv weights (and so their gradients) in channels_last: strides unlike the flat bucket's.
    "ema-after-step": lambda m, g: loop_ema(m, g, copied=False),
    "ema-of-deepcopy": lambda m, g: loop_ema(m, g, copied=True),
    "swa-averaged-model": loop_swa,
    "clamp-after-step": lambda m, g: loop_after_step(m, g, clamp),
    "data-after-step": lambda m, g: loop_after_step(m, g, shrink_data),
    "vector-after-step": lambda m, g: loop_after_step(m, g, through_vector),
    "read-after-step": lambda m, g: loop_after_step(m, g, read_weights),
    "state-dict-after-step": lambda m, g: loop_after_step(m, g, read_state_dict),
    "eval-after-step": lambda m, g: loop_after_step(m, g, evaluate),
    "deepcopy-after-step": loop_snapshot,
    "channels-last": lambda m, g: loop_plain(m, g, model=SmallNet().to(memory_format=torch.channels_last),
                                             batch=channels_last_images),
}


def loop_compiled(mode: str, gen: torch.Generator, wrap_first: bool, model: nn.Module = None,
                  batch=images) -> Tuple[nn.Module, List[float]]:
    """torch.compile (PyTorch 2), as its docs write it: the wrapped model
    compiled (DDP(model), then compile) or the compiled model wrapped."""
    def compiled(m: nn.Module) -> nn.Module:
        return torch.compile(m, backend="aot_eager")   # no C compiler needed, the same arithmetic
    model = model or SmallNet()
    r = Run(mode, model if wrap_first else compiled(model), sgd)
    net = compiled(r.net) if wrap_first else r.net
    logged = []
    for _ in range(STEPS):
        x, y = batch(gen)
        r.opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        r.opt.step()
        logged.append(float(loss))
    r.close()
    return r.model, logged


if hasattr(torch, "compile"):   # PyTorch 2
    LOOPS["compile-wrapped"] = lambda m, g: loop_compiled(m, g, wrap_first=True)
    LOOPS["wrap-compiled"] = lambda m, g: loop_compiled(m, g, wrap_first=False)
    LOOPS["compile-attention"] = lambda m, g: loop_compiled(m, g, wrap_first=True, model=Encoder(), batch=tokens)
    LOOPS["compile-tied"] = lambda m, g: loop_compiled(m, g, wrap_first=True, model=Tied(), batch=tokens)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=["ddp", "mercury", "ps"], required=True)
    ap.add_argument("--servers", default="", help="mode ps: the mercury-ps servers, HOST:PORT,...")
    ap.add_argument("--out", required=True)
    ap.add_argument("loops", nargs="+", choices=sorted(LOOPS))
    args = ap.parse_args()
    SERVERS[:] = [s for s in args.servers.split(",") if s]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                            world_size=args.world)
    results = {}
    for name in args.loops:
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(1000 + args.rank)   # each worker its own data
        try:
            model, logged = LOOPS[name](args.mode, gen)
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            results[name] = {"state": state, "logged": logged,
                             "parameters": [k for k, _ in model.named_parameters()]}
        except Exception as e:  # reported by checks.py; the next loop starts afresh
            results[name] = {"error": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"}
        dist.barrier()
    torch.save(results, args.out)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
