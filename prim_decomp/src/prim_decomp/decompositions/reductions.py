"""Reductions: mean, var, std and friends as sums, with dtype rules."""

from __future__ import annotations

import torch

from prim_decomp.decompositions._opmath import aten, cast, normalize_dims
from prim_decomp.decompositions._registry import COMPOSITE, COMPOUND
from prim_decomp.type_promotion import compute_dtype

__all__: list[str] = []


def _count(x: torch.Tensor, dims: list[int]):
    count = 1
    for axis in dims:
        count = count * x.shape[axis]
    return count


def _squeeze_unless(x: torch.Tensor, dims: list[int], keepdim: bool) -> torch.Tensor:
    return x if keepdim else aten.squeeze.dims(x, dims)


@COMPOSITE.register(aten.sum.default)
def sum_all(x: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return aten.sum.dim_IntList(x, [], dtype=dtype)


@COMPOUND.register(aten.mean.dim)
def mean_dim(x, dim, keepdim: bool = False, *, dtype: torch.dtype | None = None):
    out_dtype = dtype or x.dtype
    dims = normalize_dims(dim, x.dim())
    xc = cast(x, compute_dtype(out_dtype))
    total = aten.sum.dim_IntList(xc, dims, keepdim)
    return cast(total / _count(x, dims), out_dtype)


@COMPOUND.register(aten.mean.default)
def mean_all(x: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return aten.mean.dim(x, [], False, dtype=dtype)


def _var_and_mean(x, dim, correction, keepdim: bool):
    """(variance, mean) over `dim`, sharing the one mean."""
    dims = normalize_dims(dim, x.dim())
    correction = 1 if correction is None else correction
    xc = cast(x, compute_dtype(x.dtype))
    mean = aten.mean.dim(xc, dims, True)
    centered = xc - mean
    if x.dtype.is_complex:
        squared = aten.real.default(centered * aten.conj.default(centered))
    else:
        squared = centered * centered
    total = aten.sum.dim_IntList(squared, dims, keepdim)
    denominator = torch.sym_max(_count(x, dims) - correction, 0)
    mean = mean if keepdim else aten.squeeze.dims(mean, dims)
    return cast(total / denominator, _real(x.dtype)), cast(mean, x.dtype)


@COMPOUND.register(aten.var.correction)
def var_correction(x, dim=None, *, correction=None, keepdim: bool = False):
    return _var_and_mean(x, dim, correction, keepdim)[0]


@COMPOSITE.register(aten.var_mean.correction)
def var_mean(x, dim=None, *, correction=None, keepdim: bool = False):
    return _var_and_mean(x, dim, correction, keepdim)


def _real(dtype: torch.dtype) -> torch.dtype:
    return dtype.to_real() if dtype.is_complex else dtype


@COMPOSITE.register(aten.std.correction)
def std(x, dim=None, *, correction=None, keepdim: bool = False):
    var = aten.var.correction(x, dim, correction=correction, keepdim=keepdim)
    return cast(aten.sqrt.default(var), _real(x.dtype))


@COMPOSITE.register(aten.std_mean.correction)
def std_mean(x, dim=None, *, correction=None, keepdim: bool = False):
    var, mean = var_mean(x, dim, correction=correction, keepdim=keepdim)
    return aten.sqrt.default(var), mean


@COMPOUND.register(aten.prod.default)
def prod_all(x: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    flat = aten.view.default(aten.clone.default(x), [-1]) if x.dim() != 1 else x
    return aten.prod.dim_int(flat, 0, False, dtype=dtype)


@COMPOSITE.register(aten.linalg_vector_norm.default)
def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None):
    if dtype is not None:
        x = cast(x, dtype)
    dims = normalize_dims(dim, x.dim())
    out_dtype = _real(x.dtype)
    xc = cast(aten.abs.default(x), compute_dtype(out_dtype))
    if ord == float("inf"):
        result = aten.amax.default(xc, dims, keepdim)
    elif ord == float("-inf"):
        result = aten.amin.default(xc, dims, keepdim)
    elif ord == 0:
        result = aten.sum.dim_IntList(cast(xc != 0, xc.dtype), dims, keepdim)
    elif ord == 1:
        result = aten.sum.dim_IntList(xc, dims, keepdim)
    elif ord == 2:
        result = aten.sqrt.default(aten.sum.dim_IntList(xc * xc, dims, keepdim))
    else:
        powered = aten.pow.Tensor_Scalar(xc, ord)
        result = aten.pow.Tensor_Scalar(aten.sum.dim_IntList(powered, dims, keepdim), 1.0 / ord)
    return cast(result, out_dtype)
