"""Matmul glue: linear, matmul, baddbmm, addmv ... down to mm / bmm / addmm."""

from __future__ import annotations

import torch

from prim_decomp.decompositions._opmath import aten, opmath
from prim_decomp.decompositions._registry import COMPOSITE, COMPOUND
from prim_decomp.decompositions.shapes import reshape

__all__: list[str] = []


@COMPOSITE.register(aten.linear.default)
def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    weight_t = aten.permute.default(weight, [1, 0]) if weight.dim() == 2 else weight
    if x.dim() == 2 and bias is not None and weight.dim() == 2:
        return aten.addmm.default(bias, x, weight_t)
    out = matmul(x, weight_t)
    return out + bias if bias is not None else out


@COMPOSITE.register(aten.matmul.default)
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() == 1 and b.dim() == 1:
        return aten.sum.dim_IntList(a * b, [0])
    if a.dim() == 2 and b.dim() == 1:
        return aten.squeeze.dims(aten.mm.default(a, aten.unsqueeze.default(b, 1)), [1])
    if a.dim() == 1 and b.dim() == 2:
        return aten.squeeze.dims(aten.mm.default(aten.unsqueeze.default(a, 0), b), [0])
    if a.dim() == 2 and b.dim() == 2:
        return aten.mm.default(a, b)
    if a.dim() >= 3 and b.dim() <= 2:
        return _fold_batch_into_rows(a, b)
    return _batched_matmul(a, b)


def _fold_batch_into_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(..., n, k) @ (k, m): one mm over all rows."""
    rows = reshape(a, [-1, a.shape[-1]])
    if b.dim() == 1:
        out = aten.mm.default(rows, aten.unsqueeze.default(b, 1))
        return aten.view.default(out, list(a.shape[:-1]))
    out = aten.mm.default(rows, b)
    return aten.view.default(out, list(a.shape[:-1]) + [b.shape[-1]])


def _broadcast_batch(x_batch: list, y_batch: list) -> list:
    length = max(len(x_batch), len(y_batch))
    x_batch = [1] * (length - len(x_batch)) + x_batch
    y_batch = [1] * (length - len(y_batch)) + y_batch
    return [y if x == 1 else x for x, y in zip(x_batch, y_batch, strict=True)]


def _batched_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a_vector, b_vector = a.dim() == 1, b.dim() == 1
    if a_vector:
        a = aten.unsqueeze.default(a, 0)
    if b_vector:
        b = aten.unsqueeze.default(b, 1)
    batch = _broadcast_batch(list(a.shape[:-2]), list(b.shape[:-2]))
    count = 1
    for size in batch:
        count = count * size
    a3 = reshape(aten.expand.default(a, batch + list(a.shape[-2:])), [count] + list(a.shape[-2:]))
    b3 = reshape(aten.expand.default(b, batch + list(b.shape[-2:])), [count] + list(b.shape[-2:]))
    out = aten.view.default(aten.bmm.default(a3, b3), batch + [a.shape[-2], b.shape[-1]])
    if a_vector:
        out = aten.squeeze.dims(out, [out.dim() - 2])
    if b_vector:
        out = aten.squeeze.dims(out, [out.dim() - 1])
    return out


@COMPOSITE.register(aten.baddbmm.default)
def baddbmm(x, batch1, batch2, *, beta=1, alpha=1):
    product = aten.bmm.default(batch1, batch2)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (x if beta == 1 else x * beta)


@COMPOUND.register(aten.addmm.default)
def addmm(x, mat1, mat2, *, beta=1, alpha=1):
    product = aten.mm.default(mat1, mat2)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (x if beta == 1 else x * beta)


@COMPOSITE.register(aten.addmv.default)
def addmv(x, mat, vec, *, beta=1, alpha=1):
    product = aten.squeeze.dims(aten.mm.default(mat, aten.unsqueeze.default(vec, 1)), [1])
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (x if beta == 1 else x * beta)


@COMPOSITE.register(aten.mv.default)
def mv(mat, vec):
    return aten.squeeze.dims(aten.mm.default(mat, aten.unsqueeze.default(vec, 1)), [1])


@COMPOSITE.register(aten.dot.default)
def dot(a, b):
    return aten.sum.dim_IntList(a * b, [0])


@COMPOSITE.register(aten.outer.default)
def outer(a, b):
    return aten.unsqueeze.default(a, 1) * aten.unsqueeze.default(b, 0)


@COMPOSITE.register(aten.addr.default)
@opmath
def addr(x, vec1, vec2, *, beta=1, alpha=1):
    product = outer(vec1, vec2)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (x if beta == 1 else x * beta)
