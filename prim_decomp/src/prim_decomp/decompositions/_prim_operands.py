"""Turning ATen operands into prim operands: one dtype, one shape, tensors only."""

from __future__ import annotations

import torch

from prim_decomp import primitives  # noqa: F401  (registers ember_prims)
from prim_decomp.type_promotion import Promotion, elementwise_dtypes

__all__ = ["prim", "broadcast_shape", "to_operand", "convert", "device_of", "elementwise"]

prim = torch.ops.ember_prims


def broadcast_shape(*operands: object) -> list:
    """The broadcast shape of the tensors among `operands` (numbers are shapeless)."""
    shapes = [list(o.shape) for o in operands if isinstance(o, torch.Tensor)]
    ndim = max((len(s) for s in shapes), default=0)
    result = [1] * ndim
    for shape in shapes:
        padded = [1] * (ndim - len(shape)) + shape
        for axis, size in enumerate(padded):
            if size != 1:
                result[axis] = size
    return result


def convert(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x` as `dtype` through `convert_element_type` (itself when it already is)."""
    return x if x.dtype == dtype else prim.convert_element_type.default(x, dtype)


def to_operand(value: object, dtype: torch.dtype, shape: list, device) -> torch.Tensor:
    """A tensor of `dtype` and exactly `shape`, from a tensor or a number."""
    if not isinstance(value, torch.Tensor):
        value = prim.full.default([], value, dtype, device)
    value = convert(value, dtype)
    if list(value.shape) == list(shape):
        return value
    offset = len(shape) - value.dim()
    return prim.broadcast_in_dim.default(value, shape, list(range(offset, len(shape))))


def device_of(*operands: object):
    """The device of the first tensor with dimensions, else of the first tensor."""
    tensors = [o for o in operands if isinstance(o, torch.Tensor)]
    for tensor in tensors:
        if tensor.dim() > 0 and tensor.device.type != "cpu":
            return tensor.device
    for tensor in tensors:
        if tensor.dim() > 0:
            return tensor.device
    return tensors[0].device


def elementwise(
    fn, *operands: object, promotion: Promotion = Promotion.DEFAULT, compute=None
) -> torch.Tensor:
    """Promote, broadcast, apply the prim `fn`, convert to the result dtype."""
    computing, result = elementwise_dtypes(*operands, promotion=promotion)
    if compute is not None:
        computing = compute
    shape = broadcast_shape(*operands)
    device = device_of(*operands)
    prim_operands = [to_operand(o, computing, shape, device) for o in operands]
    return convert(fn(*prim_operands), result)
