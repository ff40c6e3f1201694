"""Traceable tensor subclasses: wrappers with their own `__torch_dispatch__` that say
how to take them apart and put them back together.

A traceable subclass (torch's protocol, as `torch.testing._internal.two_tensor.TwoTensor`)
defines, besides `__torch_dispatch__`:

    def __tensor_flatten__(self) -> tuple[list[str], ctx]
        # the names of the attributes holding its inner tensors, and a constant context
    @staticmethod
    def __tensor_unflatten__(inner: dict[str, Tensor], ctx, outer_size, outer_stride)
        # the subclass again, from inner tensors and the context

Compilers take such a tensor apart at the boundary of a compiled region: its inner
tensors are the graph's inputs, the graph is traced through its `__torch_dispatch__`
on them (so it holds plain-tensor ATen ops only), and outputs are rebuilt with
`__tensor_unflatten__`. `SubclassLayout` is what a tensor's class, context and inner
tensors' metadata look like, the key under which a compile is valid; `flatten` and
`unflatten` take a tensor apart and rebuild it from a layout.

>>> layout = SubclassLayout.of(two_tensor)       # TwoTensor, ctx None, inner a and b
>>> inner = flatten(two_tensor)                  # [a, b]
>>> unflatten(layout, inner)                     # TwoTensor(a, b)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "SubclassLayout",
    "TensorLayout",
    "flatten",
    "has_own_torch_dispatch",
    "is_traceable_subclass",
    "is_traceable_subclass_type",
    "layout_or_none",
    "unflatten",
]

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def has_own_torch_dispatch(kind: Any) -> bool:
    """A tensor subclass defining its own `__torch_dispatch__` (torch's own `FakeTensor`
    and guards' included: callers that know their fakes check for them first)."""
    if not isinstance(kind, type) or kind in _PLAIN or not issubclass(kind, torch.Tensor):
        return False
    handler = getattr(kind, "__torch_dispatch__", None)
    return getattr(handler, "__func__", handler) is not _DEFAULT_DISPATCH


_DEFAULT_DISPATCH = getattr(
    torch.Tensor.__torch_dispatch__, "__func__", torch.Tensor.__torch_dispatch__
)


def is_traceable_subclass_type(kind: Any) -> bool:
    """Whether `kind` is a tensor subclass with its own `__torch_dispatch__` that follows
    the flatten protocol (`__tensor_flatten__` and `__tensor_unflatten__`)."""
    return (
        has_own_torch_dispatch(kind)
        and callable(getattr(kind, "__tensor_flatten__", None))
        and callable(getattr(kind, "__tensor_unflatten__", None))
    )


def is_traceable_subclass(value: Any) -> bool:
    """Whether `value` is a tensor of a traceable subclass (`is_traceable_subclass_type`)."""
    return isinstance(value, torch.Tensor) and is_traceable_subclass_type(type(value))


@dataclass(frozen=True, slots=True)
class TensorLayout:
    """A plain inner tensor's metadata (what a compile traced on it)."""

    dtype: torch.dtype
    device: torch.device
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int

    @staticmethod
    def of(tensor: torch.Tensor) -> TensorLayout:
        return TensorLayout(
            tensor.dtype,
            tensor.device,
            tuple(tensor.shape),
            tuple(tensor.stride()),
            tensor.storage_offset(),
        )


@dataclass(frozen=True, slots=True)
class SubclassLayout:
    """A traceable subclass tensor taken apart: its class, its flatten context, its outer
    size and strides, and for each inner attribute (in `__tensor_flatten__`'s order) the
    layout of the tensor there (a nested SubclassLayout for a subclass inside)."""

    cls: type
    ctx: Any
    size: tuple[int, ...]
    stride: tuple[int, ...]
    inner: tuple[tuple[str, TensorLayout | SubclassLayout], ...]

    @staticmethod
    def of(tensor: torch.Tensor) -> SubclassLayout:
        names, ctx = tensor.__tensor_flatten__()
        inner = []
        for name in names:
            value = getattr(tensor, name)
            if is_traceable_subclass(value):
                inner.append((name, SubclassLayout.of(value)))
            elif _is_plain(value):
                inner.append((name, TensorLayout.of(value)))
            else:
                raise TypeError(
                    f"{type(tensor).__qualname__}.{name} is a {type(value).__qualname__}, "
                    "neither a plain tensor nor a traceable subclass"
                )
        return SubclassLayout(
            type(tensor), ctx, tuple(tensor.shape), tuple(tensor.stride()), tuple(inner)
        )

    def __hash__(self) -> int:
        # NOTE: a flatten context may be unhashable (a dict of constants): its repr stands in
        try:
            ctx_hash = hash(self.ctx)
        except TypeError:
            ctx_hash = hash(repr(self.ctx))
        return hash((self.cls, ctx_hash, self.size, self.stride, self.inner))

    @property
    def num_tensors(self) -> int:
        """How many plain tensors `flatten` gives for a tensor of this layout."""
        return sum(
            layout.num_tensors if isinstance(layout, SubclassLayout) else 1
            for _, layout in self.inner
        )

    def describe(self) -> str:
        names = ", ".join(name for name, _ in self.inner)
        return f"{self.cls.__qualname__}({names}; ctx={self.ctx!r})"


def layout_or_none(value: Any) -> SubclassLayout | None:
    """`SubclassLayout.of(value)` for a traceable subclass, else None (what guards read)."""
    if not is_traceable_subclass(value):
        return None
    try:
        return SubclassLayout.of(value)
    except TypeError:  # an inner value neither plain nor traceable
        return None


def _is_plain(value: Any) -> bool:
    """A plain tensor, a parameter, or a guards fake standing for one."""
    from guards.fake_tensor import FakeTensor

    return isinstance(value, torch.Tensor) and (
        type(value) is FakeTensor or not has_own_torch_dispatch(type(value))
    )


def flatten(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors inside traceable subclass `tensor`, depth first, in each class's
    `__tensor_flatten__` order."""
    names, _ = tensor.__tensor_flatten__()
    found = []
    for name in names:
        value = getattr(tensor, name)
        found.extend(flatten(value) if is_traceable_subclass(value) else [value])
    return found


def unflatten(layout: SubclassLayout, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The subclass tensor of `layout` over plain tensors `tensors` (as `flatten` gives)."""
    rest = iter(tensors)
    result = _unflatten(layout, rest)
    if next(rest, None) is not None:
        raise ValueError(f"too many tensors to rebuild {layout.describe()}")
    return result


def _unflatten(layout: SubclassLayout, tensors: Iterator[torch.Tensor]) -> torch.Tensor:
    inner: dict[str, torch.Tensor] = {}
    for name, part in layout.inner:
        inner[name] = (
            _unflatten(part, tensors) if isinstance(part, SubclassLayout) else next(tensors)
        )
    return layout.cls.__tensor_unflatten__(inner, layout.ctx, layout.size, layout.stride)
