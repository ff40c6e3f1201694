"""Elementwise ops outside the core set, with their type promotion."""

from __future__ import annotations

import torch

from prim_decomp.decompositions._opmath import aten, cast
from prim_decomp.decompositions._registry import COMPOSITE
from prim_decomp.type_promotion import Promotion, elementwise_dtypes

__all__: list[str] = []


@COMPOSITE.register(aten.rsub.Tensor)
def rsub_tensor(x, other, alpha=1):
    return aten.sub.Tensor(other, x, alpha=alpha)


@COMPOSITE.register(aten.rsub.Scalar)
def rsub_scalar(x, other, alpha=1):
    return aten.sub.Tensor(aten.scalar_tensor.default(other, dtype=x.dtype), x, alpha=alpha)


@COMPOSITE.register(aten.addcmul.default)
def addcmul(x, tensor1, tensor2, *, value=1):
    computing, result = elementwise_dtypes(x, tensor1, tensor2)
    x, tensor1, tensor2 = (cast(t, computing) for t in (x, tensor1, tensor2))
    return cast(x + value * tensor1 * tensor2, result)


@COMPOSITE.register(aten.addcdiv.default)
def addcdiv(x, tensor1, tensor2, *, value=1):
    computing, result = elementwise_dtypes(x, tensor1, tensor2)
    x, tensor1, tensor2 = (cast(t, computing) for t in (x, tensor1, tensor2))
    return cast(x + value * (tensor1 / tensor2), result)


@COMPOSITE.register(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(start, end, weight):
    computing, result = elementwise_dtypes(start, end, weight)
    start, end = cast(start, computing), cast(end, computing)
    if isinstance(weight, torch.Tensor):
        weight = cast(weight, computing)
    diff = end - start
    small = aten.abs.default(weight) < 0.5 if isinstance(weight, torch.Tensor) else None
    if small is None:
        out = start + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)
    else:
        out = aten.where.self(small, start + weight * diff, end - diff * (1 - weight))
    return cast(out, result)


@COMPOSITE.register(aten.masked_fill.Scalar)
def masked_fill_scalar(x, mask, value):
    fill = aten.scalar_tensor.default(value, dtype=x.dtype, device=x.device)
    return aten.where.self(mask, fill, x)


@COMPOSITE.register(aten.masked_fill.Tensor)
def masked_fill_tensor(x, mask, value):
    return aten.where.self(mask, cast(value, x.dtype), x)


@COMPOSITE.register(aten.where.ScalarOther)
def where_scalar_other(condition, x, other):
    _, result = elementwise_dtypes(x, other)
    fill = aten.scalar_tensor.default(other, dtype=result, device=x.device)
    return aten.where.self(condition, cast(x, result), fill)


@COMPOSITE.register(aten.where.ScalarSelf)
def where_scalar_self(condition, x, other):
    _, result = elementwise_dtypes(x, other)
    fill = aten.scalar_tensor.default(x, dtype=result, device=other.device)
    return aten.where.self(condition, fill, cast(other, result))


@COMPOSITE.register(aten.clamp_min.default)
def clamp_min(x, min):
    return aten.clamp.default(x, min, None)


@COMPOSITE.register(aten.clamp_max.default)
def clamp_max(x, max):
    return aten.clamp.default(x, None, max)


@COMPOSITE.register(aten.clamp_min.Tensor)
def clamp_min_tensor(x, min):
    return aten.clamp.Tensor(x, min, None)


@COMPOSITE.register(aten.clamp_max.Tensor)
def clamp_max_tensor(x, max):
    return aten.clamp.Tensor(x, None, max)


@COMPOSITE.register(aten.floor_divide.default)
def floor_divide(x, other):
    return aten.div.Tensor_mode(x, other, rounding_mode="floor")


@COMPOSITE.register(aten.square.default)
def square(x):
    return aten.pow.Tensor_Scalar(x, 2)


@COMPOSITE.register(aten.frac.default)
def frac(x):
    return x - aten.trunc.default(x)


@COMPOSITE.register(aten.xlogy.Tensor)
def xlogy(x, y):
    computing, result = elementwise_dtypes(x, y, promotion=Promotion.INT_TO_FLOAT)
    x, y = cast(x, computing), cast(y, computing)
    product = x * aten.log.default(y)
    zero = aten.zeros_like.default(product)
    out = aten.where.self(x == 0, zero, product)
    return cast(aten.where.self(aten.isnan.default(y), y + zero, out), result)


@COMPOSITE.register(aten.deg2rad.default)
def deg2rad(x):
    _, result = elementwise_dtypes(x, promotion=Promotion.INT_TO_FLOAT)
    return cast(x, result) * (torch.pi / 180.0)


@COMPOSITE.register(aten.rad2deg.default)
def rad2deg(x):
    _, result = elementwise_dtypes(x, promotion=Promotion.INT_TO_FLOAT)
    return cast(x, result) * (180.0 / torch.pi)


@COMPOSITE.register(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_reduce_add(x, dim, index, src, *, reduce):
    """reduce="add" is scatter_add; "multiply" stays whole."""
    if reduce != "add":
        return NotImplemented
    if not isinstance(src, torch.Tensor):
        src = aten.full.default(index.shape, src, dtype=x.dtype, device=x.device)
    return aten.scatter_add.default(x, dim, index, cast(src, x.dtype))
