# SPDX-License-Identifier: GPL-2.0
"""Mercury for PyTorch: priority lanes over torch.distributed and layer-wise
overlap of gradient reduction with the next forward pass.

torch.distributed sends every tensor of a process group over the same TCP
connections, so the kernel cannot tell a front layer's bytes from a back
layer's, and DDP finishes every all-reduce before the optimizer step, so
nothing overlaps the next forward pass. :class:`DistributedOptimizer` fixes
both, with DDP's result:

* **Lanes** (:mod:`mercury.torch.lanes`): ``lanes`` process groups (default
  8, one per rank) over the same ranks, each with its own connections, which
  it finds among the process's own sockets (:mod:`mercury.torch.sockets`),
  switches to the ``mercury`` congestion control and registers with mercuryd
  by passing their fds. Lane ``L`` of ``N`` gets rank ``ceil(L*8/N)``.
* **Overlap** (:mod:`mercury.torch.optimizer`): each bucket's all-reduce
  starts on its lane as soon as its gradients are ready; each module's step
  is applied just before its next forward pass. The kernel sends the urgent
  lanes first.
* **Timings**: hooks time each layer's forward and backward pass and report
  them to mercuryd, whose learned ranks decide each layer's lane.

Without mercuryd, libmercury or the congestion control it trains correctly
on a single lane, with one warning. Models on GPUs: ``backend="nccl"``, NCCL
process groups as lanes, each with its traffic class, which Mercury's NCCL
plugin takes to the kernel (:mod:`mercury.torch.nccl`).

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
from mercury.contract import lane_rank, rank_lane
from mercury.torch.lanes import Lane, Lanes
from mercury.torch.optimizer import (DEFAULT_BUCKET_BYTES, DEFAULT_LANES, DEFAULT_RESYNC_EVERY,
                                     DistributedOptimizer)
from mercury.torch.sockets import find_tcp_sockets, pin_congestion_control

__all__ = ["DistributedOptimizer", "Lanes", "Lane", "DEFAULT_LANES", "DEFAULT_BUCKET_BYTES",
           "DEFAULT_RESYNC_EVERY", "find_tcp_sockets", "pin_congestion_control", "lane_rank", "rank_lane"]
