# SPDX-License-Identifier: GPL-2.0
"""What ``p.grad`` holds while its bucket is being reduced.

Between the launch of a bucket's all-reduce (during ``backward()``) and the
moment the averaged gradient is in place (before the parameter's next
forward), ``p.grad`` is a :class:`GuardedGrad`: it shares storage with the
local gradient, so autograd (C++) accumulates into it as into any tensor, but
any use from Python first waits for the reduction and puts DDP's value in
place. So ``clip_grad_norm_``, logging a gradient norm or editing ``p.grad``
see what they would see under DDP; they only cost the overlap they force.

Reading metadata (shape, dtype, device) and ``Module.zero_grad()`` after
``step()`` do not wait.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Tuple

import torch

__all__ = ["GuardedGrad", "guard"]

# Attributes whose value does not depend on the gradient's values.
_METADATA = frozenset({
    "device", "dtype", "shape", "layout", "is_sparse", "is_cuda", "is_quantized", "is_meta",
    "is_leaf", "requires_grad", "grad_fn", "ndim", "names", "is_mkldnn",
})
_METADATA_METHODS = frozenset({
    torch.Tensor.size, torch.Tensor.dim, torch.Tensor.numel, torch.Tensor.element_size,
    torch.Tensor.is_floating_point, torch.Tensor.is_complex, torch.Tensor.stride,
    torch.Tensor.is_contiguous, torch.Tensor.get_device,
})


def _attribute(func: Callable) -> str:
    """The attribute's name if ``func`` is an attribute read (``Tensor.x.__get__``)."""
    if getattr(func, "__name__", "") == "__get__":
        return getattr(getattr(func, "__self__", None), "__name__", "")
    return ""


def _guards_in(args: Iterable[Any]) -> Iterable["GuardedGrad"]:
    for a in args:
        if isinstance(a, GuardedGrad):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (x for x in a if isinstance(x, GuardedGrad))


def _unwrap(a: Any) -> Any:
    if isinstance(a, GuardedGrad):
        return a.mercury_real
    if isinstance(a, (list, tuple)) and any(isinstance(x, GuardedGrad) for x in a):
        return type(a)(x.mercury_real if isinstance(x, GuardedGrad) else x for x in a)
    return a


class GuardedGrad(torch.Tensor):
    """A gradient whose all-reduce is in flight (see the module's docstring).

    ``mercury_real`` is the plain tensor behind it; ``mercury_settle()``
    waits for the reduction (and applies a deferred step) and
    ``mercury_zero()`` asks for the gradient to be zeroed once the deferred
    step has used it, returning False if that cannot wait.
    """

    mercury_real: torch.Tensor
    mercury_settle: Callable[[], None]
    mercury_zero: Callable[[], bool]

    @classmethod
    def __torch_function__(cls, func: Callable, types: Tuple[type, ...], args: tuple = (),
                           kwargs: Dict[str, Any] = None) -> Any:
        kwargs = kwargs or {}
        this = args[0] if args and isinstance(args[0], GuardedGrad) else None
        if this is not None:
            if func in _METADATA_METHODS or (len(args) == 1 and _attribute(func) in _METADATA):
                with torch._C.DisableTorchFunction():
                    return func(*args, **kwargs)
            if func is torch.Tensor.zero_ and len(args) == 1 and this.mercury_zero():
                return this
        if this is not None and func is torch.Tensor.requires_grad_:
            wanted = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
            if not wanted:
                return this  # Module.zero_grad() does this: gradients never require grad
        for g in list(_guards_in(args)) + list(_guards_in(kwargs.values())):
            g.mercury_settle()
        args = tuple(_unwrap(a) for a in args)
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        with torch._C.DisableTorchFunction():
            return func(*args, **kwargs)


def guard(real: torch.Tensor, settle: Callable[[], None], zero: Callable[[], bool]) -> GuardedGrad:
    """A :class:`GuardedGrad` over ``real``'s storage."""
    g = torch.Tensor._make_subclass(GuardedGrad, real, False)
    g.mercury_real = real
    g.mercury_settle = settle
    g.mercury_zero = zero
    return g
