"""Tensor subclasses the corpus files share.

With their own `__torch_dispatch__`:
- `TwoTensor` (torch's own test subclass): every op on both inner tensors.
- `ScaledTensor`: one inner tensor; every floating result of an op scaled by the
  `scale` of its flatten context (a constant of the subclass, part of the context).
- `Opaque`: a wrapper with its own `__torch_dispatch__` but no flatten protocol (not
  traceable: compiled frames taking it run eagerly).

With their own `__torch_function__`:
- `Passing`: every call handed to torch's default handling (results are Passing again).
- `Unwrapping`: every call run with subclass handling off (results are plain tensors).
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import return_and_correct_aliasing

__all__ = ["Opaque", "Passing", "ScaledTensor", "TwoTensor", "Unwrapping", "scaled", "two"]


class ScaledTensor(torch.Tensor):
    """One inner tensor `elem`; each floating result of an op is multiplied by `scale`."""

    @staticmethod
    def __new__(cls, elem, scale, outer_size=None, outer_stride=None):
        return torch.Tensor._make_wrapper_subclass(
            cls,
            outer_size if outer_size is not None else elem.size(),
            strides=outer_stride if outer_stride is not None else elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            device=elem.device,
            requires_grad=elem.requires_grad,
        )

    def __init__(self, elem, scale, outer_size=None, outer_stride=None):
        self.elem = elem
        self.scale = scale

    def __repr__(self):
        return f"ScaledTensor({self.elem!r}, scale={self.scale})"

    def __tensor_flatten__(self):
        return ["elem"], {"scale": self.scale}

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return ScaledTensor(inner["elem"], ctx["scale"], outer_size, outer_stride)

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs):
        kwargs = kwargs or {}
        scales = [a.scale for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, cls)]
        scale = scales[0]
        inner_args, inner_kwargs = pytree.tree_map_only(cls, lambda t: t.elem, (args, kwargs))
        out = func(*inner_args, **inner_kwargs)
        is_view = any(r.alias_info is not None for r in func._schema.returns)

        def wrap(t):
            if not isinstance(t, torch.Tensor):
                return t
            if t.is_floating_point() and not is_view:
                t = t * scale
            return cls(t, scale)

        return return_and_correct_aliasing(func, args, kwargs, pytree.tree_map(wrap, out))


class Opaque(torch.Tensor):
    """A wrapper with its own `__torch_dispatch__` and no `__tensor_flatten__`."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), dtype=elem.dtype, device=elem.device
        )

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs):
        unwrapped = pytree.tree_map_only(cls, lambda t: t.elem, (args, kwargs or {}))
        out = func(*unwrapped[0], **unwrapped[1])
        return pytree.tree_map_only(torch.Tensor, cls, out)


class Passing(torch.Tensor):
    """Hands every call to torch's default handling (results are Passing again)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        return super().__torch_function__(func, types, args, kwargs)

    def doubled(self):
        return self * 2

    @property
    def halved(self):
        return self / 2


class Unwrapping(torch.Tensor):
    """Runs the call with subclass handling off: results are plain tensors."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def two(*shape, requires_grad=False):
    t = TwoTensor(torch.randn(*shape), torch.randn(*shape))
    return t.requires_grad_() if requires_grad else t


def scaled(*shape, scale=1.5, requires_grad=False):
    t = ScaledTensor(torch.randn(*shape), scale)
    return t.requires_grad_() if requires_grad else t
