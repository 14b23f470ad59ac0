# SPDX-License-Identifier: GPL-2.0
"""What ``p.grad`` holds while its bucket is being reduced, and what a
parameter is while its step is deferred.

Between the launch of a bucket's all-reduce (during ``backward()``) and the
moment the averaged gradient is in place (before the parameter's next
forward), ``p.grad`` is a :class:`GuardedGrad`: it shares storage with the
local gradient, so autograd (C++) accumulates into it as into any tensor, but
any use from Python first waits for the reduction and puts DDP's value in
place. So ``clip_grad_norm_``, logging a gradient norm or editing ``p.grad``
see what they would see under DDP; they only cost the overlap they force.

Reading metadata (shape, dtype, device) and ``Module.zero_grad()`` after
``step()`` do not wait.

After ``step()``, a parameter whose step is deferred (to just before its
module's next forward) is a *pending* parameter: the same object, its class
swapped for a subclass (:func:`pend`) whose ``__torch_function__`` first
applies the deferred step, so anything Python does with it (reading it,
``.data``, ``.detach()``, in-place changes, ``state_dict()``, an EMA, a
copy) sees or changes what it would under DDP. ``p.grad`` and metadata do
not apply it (the gradient has its own guard). Copying it
(``copy.deepcopy``, pickling) applies it and gives a plain parameter.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Tuple

import torch

__all__ = ["GuardedGrad", "guard", "pending_class", "pend", "unpend", "is_pending"]

# Attributes of a pending parameter that do not need its step: its
# gradient (guarded on its own) and metadata.
_PARAMETER_PASS = frozenset({"grad", "_grad", "grad_fn", "_backward_hooks", "_version"})

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
    """The attribute's name if ``func`` reads or sets an attribute
    (``Tensor.x.__get__``, ``__set__``)."""
    if getattr(func, "__name__", "") in ("__get__", "__set__"):
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


class _Pending:
    """Mixed in before a parameter's own class while its step is deferred:
    any use from Python applies the step first. A pending class
    (:func:`pending_class`) carries ``mercury_settle`` (applies the step of
    its parameters and unpends them) and ``mercury_plain`` (their class)."""

    mercury_settle: Callable[[], None]
    mercury_plain: type

    @classmethod
    def __torch_function__(cls, func: Callable, types: Tuple[type, ...], args: tuple = (),
                           kwargs: Dict[str, Any] = None) -> Any:
        kwargs = kwargs or {}
        if args and isinstance(args[0], _Pending):
            name = _attribute(func)
            if func in _METADATA_METHODS or (len(args) <= 2 and (name in _METADATA or name in _PARAMETER_PASS)):
                with torch._C.DisableTorchFunction():
                    return func(*args, **kwargs)
        for a in list(args) + list(kwargs.values()):
            for t in (a if isinstance(a, (list, tuple)) else (a,)):
                if isinstance(t, _Pending):
                    t.mercury_settle()
        with torch._C.DisableTorchFunction():
            return func(*args, **kwargs)

    def __deepcopy__(self, memo: Dict[int, Any]) -> Any:
        self.mercury_settle()   # unpends it: the copy is its own class's
        return self.__deepcopy__(memo)

    def __reduce_ex__(self, protocol: Any) -> Any:
        self.mercury_settle()
        return self.__reduce_ex__(protocol)


def pending_class(plain: type, settle: Callable[[], None]) -> type:
    """The class a parameter of class ``plain`` has while pending, for one
    set of parameters that ``settle()`` steps (and unpends) together."""
    return type("Pending" + plain.__name__, (_Pending, plain),
                {"__module__": __name__, "mercury_settle": staticmethod(settle), "mercury_plain": plain})


def pend(p: torch.nn.Parameter, pending: type) -> None:
    """Makes ``p`` pending (``pending``: its :func:`pending_class`) until :func:`unpend`."""
    p.__class__ = pending


def unpend(p: torch.nn.Parameter) -> None:
    """``p`` back to its own class."""
    cls = type(p)
    if issubclass(cls, _Pending):
        p.__class__ = cls.mercury_plain


def is_pending(p: torch.Tensor) -> bool:
    return isinstance(p, _Pending)
