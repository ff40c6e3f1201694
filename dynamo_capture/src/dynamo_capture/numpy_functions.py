"""The NumPy functions, ndarray methods and operators capture puts in a graph, each with
its torch equivalent on tensors (`numpy_arrays` makes the nodes):

    NUMPY_FUNCTIONS[np.sum]    == (reduce, "result")    # np.sum(a, axis=0) -> torch.sum(a, dim=0)
    NDARRAY_METHODS["sum"]     == np.sum                # a.sum(0) is np.sum(a, 0)
    NUMPY_OPERATORS[operator.and_] == np.bitwise_and    # a & b

The torch equivalents take NumPy's arguments (`axis`, `keepdims`, `decimals`) and
return tensors; the dtype NumPy computes in is the caller's business (the second item
of an entry says which operands are cast to it). Adding a function is one entry here.

Since writes to arrays are captured too, an equivalent must alias as NumPy's function
does: a view where NumPy gives a view, a new tensor where NumPy copies. `np.flip` (a
view in NumPy, a copy in torch) is left out for that reason, as is `imag` of a real
array (NumPy's is read-only).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["NDARRAY_METHODS", "NUMPY_FUNCTIONS", "NUMPY_OPERATORS", "copy_array"]


# ----- torch equivalents ---------------------------------------------------------------------
def _no_empty_axes(axis: Any) -> None:
    if isinstance(axis, tuple | list) and not axis:
        # NOTE: NumPy reduces over no axis there; torch's dim=() means every axis
        raise NotImplementedError("a NumPy reduction over axis=()")


def _reduction(torch_fn: Callable[..., Any]) -> Callable[..., Any]:
    """A NumPy reduction (`axis`, `keepdims`) on torch's (`dim`, `keepdim`)."""

    def reduce(a: torch.Tensor, axis: Any = None, keepdims: bool = False, **kwargs: Any) -> Any:
        _no_empty_axes(axis)
        if axis is None:
            result = torch_fn(a, **kwargs)
            return result.reshape((1,) * a.dim()) if keepdims else result
        return torch_fn(a, dim=axis, keepdim=keepdims, **kwargs)

    return reduce


def _arg_reduction(torch_fn: Callable[..., Any]) -> Callable[..., Any]:
    def reduce(a: torch.Tensor, axis: Any = None, keepdims: bool = False) -> Any:
        if axis is None:
            return torch_fn(a.reshape(-1))
        return torch_fn(a, dim=axis, keepdim=keepdims)

    return reduce


def _moments(torch_fn: Callable[..., Any]) -> Callable[..., Any]:
    def moment(a: torch.Tensor, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Any:
        _no_empty_axes(axis)
        if axis is None:
            result = torch_fn(a, correction=ddof)
            return result.reshape((1,) * a.dim()) if keepdims else result
        return torch_fn(a, dim=axis, correction=ddof, keepdim=keepdims)

    return moment


def _cumulative(torch_fn: Callable[..., Any]) -> Callable[..., Any]:
    def accumulate(a: torch.Tensor, axis: Any = None) -> Any:
        return torch_fn(a.reshape(-1), 0) if axis is None else torch_fn(a, axis)

    return accumulate


def _concatenate(arrays: Any, axis: int | None = 0) -> torch.Tensor:
    if axis is None:
        return torch.cat([a.reshape(-1) for a in arrays])
    return torch.cat(list(arrays), dim=axis)


def _transpose(a: torch.Tensor, axes: Any = None, *more: int) -> torch.Tensor:
    if more:
        axes = (axes, *more)
    if axes is None:
        return a.permute(*reversed(range(a.dim())))
    return a.permute(*axes)


def _reshape(a: torch.Tensor, *shape: Any, order: str = "C") -> torch.Tensor:
    if order != "C":
        raise NotImplementedError("reshape with order other than 'C'")
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    return a.reshape(shape)


def _ravel(a: torch.Tensor) -> torch.Tensor:
    """np.ravel: a view of a C-contiguous array, else a copy (torch's reshape(-1) views a
    strided 1-d tensor, which NumPy copies)."""
    return a.reshape(-1) if a.is_contiguous() else a.contiguous().reshape(-1)


def _flatten(a: torch.Tensor) -> torch.Tensor:
    """ndarray.flatten: always a copy."""
    return a.reshape(-1).clone()


def _squeeze(a: torch.Tensor, axis: Any = None) -> torch.Tensor:
    return a.squeeze() if axis is None else a.squeeze(axis)


def _clip(a: torch.Tensor, a_min: Any = None, a_max: Any = None) -> torch.Tensor:
    return torch.clamp(a, a_min, a_max)


def _where(condition: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
    return torch.where(condition, x, y)


def _full(shape: Any, fill_value: Any, dtype: Any = None) -> torch.Tensor:
    return torch.full(shape if isinstance(shape, tuple | list) else (shape,), fill_value)


def _shape_factory(torch_fn: Callable[..., Any]) -> Callable[..., Any]:
    def make(shape: Any, dtype: Any = None) -> torch.Tensor:
        return torch_fn(shape if isinstance(shape, tuple | list) else (shape,))

    return make


def _like_factory(torch_fn: Callable[..., Any]) -> Callable[..., Any]:
    def make(a: torch.Tensor, dtype: Any = None) -> torch.Tensor:
        return torch_fn(a)

    return make


def _full_like(a: torch.Tensor, fill_value: Any, dtype: Any = None) -> torch.Tensor:
    return torch.full_like(a, fill_value)


def _isclose(
    a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> torch.Tensor:
    """np.isclose of two float32 or float64 arrays of one dtype (what capture puts in a
    graph): NumPy's test, |a - b| <= atol + rtol * |b| in that dtype, is torch.isclose's.
    Numbers, integers (NumPy tests them in float64) and float16 (NumPy rounds the
    tolerances to it) run eagerly."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise NotImplementedError("np.isclose of a number")
    if a.dtype != b.dtype or a.dtype not in (torch.float32, torch.float64):
        raise NotImplementedError("np.isclose of arrays other than float32 or float64 alike")
    return torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def _arange(*args: Any, dtype: Any = None) -> torch.Tensor:
    return torch.arange(*args)


def _linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True) -> torch.Tensor:
    if not endpoint:
        step = (stop - start) / num
        return torch.arange(num, dtype=torch.float64) * step + start
    return torch.linspace(start, stop, num, dtype=torch.float64)


def _eye(n: int, m: int | None = None, dtype: Any = None) -> torch.Tensor:
    return torch.eye(n, n if m is None else m)


def _astype(a: torch.Tensor, dtype: Any, copy: bool = True) -> torch.Tensor:
    return a.clone()  # the cast to `dtype` is the operation's result dtype


def copy_array(a: torch.Tensor) -> torch.Tensor:
    return a.clone()


def _scalar(value: Any) -> torch.Tensor:
    return torch.as_tensor(value)


def _array(data: Any, dtype: Any = None) -> torch.Tensor:
    """np.array / np.asarray of numbers, arrays or nested lists of them (a copy)."""
    if isinstance(data, torch.Tensor):
        return data.clone()
    if isinstance(data, list | tuple) and any(isinstance(item, torch.Tensor) for item in data):
        return torch.stack([torch.as_tensor(item) for item in data])
    return torch.as_tensor(data)


def _comparison(torch_fn: Callable[..., Any], mirrored: Callable[..., Any]) -> Callable[..., Any]:
    """A comparison whose first operand may be a Python number (`2 < a`): torch's takes a
    tensor first, so a number there compares the other way round (`a > 2`)."""

    def compare(a: Any, b: Any) -> Any:
        return mirrored(b, a) if not isinstance(a, torch.Tensor) else torch_fn(a, b)

    return compare


def _sort(a: torch.Tensor, axis: int | None = -1) -> torch.Tensor:
    if axis is None:
        return torch.sort(a.reshape(-1)).values
    return torch.sort(a, dim=axis).values


def _round(a: torch.Tensor, decimals: int = 0) -> torch.Tensor:
    return torch.round(a, decimals=decimals)


def _count_nonzero(a: torch.Tensor, axis: Any = None) -> torch.Tensor:
    return torch.count_nonzero(a, dim=axis)


def _triangle(torch_fn: Callable[..., Any]) -> Callable[..., Any]:
    def triangle(a: torch.Tensor, k: int = 0) -> torch.Tensor:
        return torch_fn(a, diagonal=k)

    return triangle


def _diff(a: torch.Tensor, n: int = 1, axis: int = -1) -> torch.Tensor:
    return torch.diff(a, n=n, dim=axis)


def _take_along_axis(a: torch.Tensor, indices: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.take_along_dim(a, indices, dim=axis)


def _real(a: torch.Tensor) -> torch.Tensor:
    return torch.real(a) if a.is_complex() else a.view_as(a)


def _norm(a: torch.Tensor, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    if ord is not None:
        raise NotImplementedError("np.linalg.norm with ord")
    if axis is None:
        result = torch.linalg.vector_norm(a)
        return result.reshape((1,) * a.dim()) if keepdims else result
    return torch.linalg.vector_norm(a, dim=axis, keepdim=keepdims)


def _argsort(a: torch.Tensor, axis: int | None = -1, kind: str | None = None) -> torch.Tensor:
    """np.argsort with a stable kind: NumPy's default (introsort) orders ties its own way,
    which torch's sorts do not reproduce."""
    if kind not in ("stable", "mergesort"):
        raise NotImplementedError("np.argsort of a kind other than 'stable' (ties' order)")
    if axis is None:
        return torch.argsort(a.reshape(-1), stable=True)
    return torch.argsort(a, dim=axis, stable=True)


def _repeat(a: torch.Tensor, repeats: Any, axis: int | None = None) -> torch.Tensor:
    if not isinstance(repeats, int):
        raise NotImplementedError("np.repeat with repeats other than one number")
    if axis is None:
        return torch.repeat_interleave(a.reshape(-1), repeats)
    return torch.repeat_interleave(a, repeats, dim=axis)


def _roll(a: torch.Tensor, shift: Any, axis: Any = None) -> torch.Tensor:
    if axis is None:
        return torch.roll(a.reshape(-1), shift).reshape(a.shape)
    return torch.roll(a, shift, dims=axis)


def _peak_to_peak(a: torch.Tensor, axis: Any = None, keepdims: bool = False) -> torch.Tensor:
    maximum = _reduction(torch.amax)(a, axis, keepdims)
    return maximum - _reduction(torch.amin)(a, axis, keepdims)


def _average(a: torch.Tensor, axis: Any = None, weights: Any = None,
             returned: bool = False, keepdims: bool = False) -> torch.Tensor:  # fmt: skip
    """np.average without weights, which is NumPy's mean."""
    if weights is not None or returned:
        raise NotImplementedError("np.average with weights or returned=True")
    return _reduction(torch.mean)(a, axis, keepdims)


def _trace(a: torch.Tensor, offset: int = 0) -> torch.Tensor:
    if a.dim() != 2:
        raise NotImplementedError("np.trace of an array other than 2-d")
    return torch.diagonal(a, offset).sum()


def _cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """np.cross of 3-vectors along the last axis (2-vectors give NumPy's z only)."""
    if a.shape[-1] != 3 or b.shape[-1] != 3:
        raise NotImplementedError("np.cross of vectors other than 3-vectors")
    return torch.linalg.cross(*torch.broadcast_tensors(a, b), dim=-1)


def _at_least(torch_fn: Callable[..., Any], ndim: int) -> Callable[..., Any]:
    def at_least(a: torch.Tensor) -> torch.Tensor:
        if a.dim() >= ndim:
            # NOTE: NumPy gives the array itself (`np.atleast_2d(a) is a`)
            raise NotImplementedError(f"np.atleast_{ndim}d of an array of {ndim} dims or more")
        return torch_fn(a)

    return at_least


# ----- functions returning several arrays -----------------------------------------------
def _meshgrid(*xi: Any, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> Any:
    """np.meshgrid as NumPy computes it: each input flattened along its own axis (the
    first two swapped for "xy"), broadcast unless sparse, copied (C-contiguous)."""
    if not copy:
        raise NotImplementedError("np.meshgrid with copy=False (views NumPy makes read-only)")
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    if not all(isinstance(x, torch.Tensor) for x in xi):
        raise NotImplementedError("np.meshgrid of values other than arrays")
    ndim = len(xi)
    shapes = [[1] * ndim for _ in xi]
    for axis, shape in enumerate(shapes):
        shape[axis] = -1
    if indexing == "xy" and ndim > 1:
        shapes[0][:2], shapes[1][:2] = [1, -1], [-1, 1]
    grids = [x.reshape(shape) for x, shape in zip(xi, shapes, strict=True)]
    if not sparse:
        grids = list(torch.broadcast_tensors(*grids))
    return tuple(grid.clone(memory_format=torch.contiguous_format) for grid in grids)


def _split_points(size: int, sections: Any, equal: bool) -> list[int]:
    """The boundaries NumPy's split (`equal`) or array_split cuts an axis of `size` at."""
    if not isinstance(sections, int):
        return [0, *(int(index) for index in sections), size]
    if sections <= 0:
        raise ValueError("number sections must be larger than 0.")
    each, extra = divmod(size, sections)
    if equal and extra:
        raise ValueError("array split does not result in an equal division")
    points = [0]
    for index in range(sections):
        points.append(points[-1] + each + (1 if index < extra else 0))
    return points


def _splitter(equal: bool) -> Callable[..., Any]:
    def split(a: torch.Tensor, indices_or_sections: Any, axis: int = 0) -> list[torch.Tensor]:
        axis = axis + a.dim() if axis < 0 else axis
        points = _split_points(a.shape[axis], indices_or_sections, equal)
        leading = (slice(None),) * axis
        # NOTE: Python slices, as NumPy's split takes them: views, negative and
        # out-of-range boundaries included
        return [a[(*leading, slice(start, stop))] for start, stop in zip(points, points[1:])]

    return split


# NumPy function -> (torch equivalent on tensors, how operands are cast first):
# "result": to the result dtype (arithmetic, math functions, reductions), "values": all
# but the first to the result dtype (np.where's condition), "common": to the operands'
# common dtype (comparisons), "none": left as they are (argmax, shapes).
NUMPY_FUNCTIONS: dict[Any, tuple[Callable[..., Any], str]] = {
    np.sin: (torch.sin, "result"),
    np.cos: (torch.cos, "result"),
    np.tan: (torch.tan, "result"),
    np.arcsin: (torch.asin, "result"),
    np.arccos: (torch.acos, "result"),
    np.arctan: (torch.atan, "result"),
    np.sinh: (torch.sinh, "result"),
    np.cosh: (torch.cosh, "result"),
    np.tanh: (torch.tanh, "result"),
    np.exp: (torch.exp, "result"),
    np.exp2: (torch.exp2, "result"),
    np.expm1: (torch.expm1, "result"),
    np.log: (torch.log, "result"),
    np.log2: (torch.log2, "result"),
    np.log10: (torch.log10, "result"),
    np.log1p: (torch.log1p, "result"),
    np.sqrt: (torch.sqrt, "result"),
    np.square: (torch.square, "result"),
    np.abs: (torch.abs, "result"),
    np.absolute: (torch.abs, "result"),
    np.negative: (torch.neg, "result"),
    np.sign: (torch.sign, "result"),
    np.floor: (torch.floor, "result"),
    np.ceil: (torch.ceil, "result"),
    np.reciprocal: (torch.reciprocal, "result"),
    np.add: (torch.add, "result"),
    np.subtract: (torch.sub, "result"),
    np.multiply: (torch.mul, "result"),
    np.divide: (torch.div, "result"),
    np.true_divide: (torch.div, "result"),
    np.floor_divide: (torch.floor_divide, "result"),
    np.power: (torch.pow, "result"),
    np.remainder: (torch.remainder, "result"),
    np.mod: (torch.remainder, "result"),
    np.fmod: (torch.fmod, "result"),
    np.maximum: (torch.maximum, "result"),
    np.minimum: (torch.minimum, "result"),
    np.arctan2: (torch.atan2, "result"),
    np.arcsinh: (torch.asinh, "result"),
    np.arccosh: (torch.acosh, "result"),
    np.arctanh: (torch.atanh, "result"),
    np.logaddexp: (torch.logaddexp, "result"),
    np.logaddexp2: (torch.logaddexp2, "result"),
    np.deg2rad: (torch.deg2rad, "result"),
    np.rad2deg: (torch.rad2deg, "result"),
    np.radians: (torch.deg2rad, "result"),
    np.degrees: (torch.rad2deg, "result"),
    np.copysign: (torch.copysign, "result"),
    np.fmax: (torch.fmax, "result"),
    np.fmin: (torch.fmin, "result"),
    np.fabs: (torch.abs, "result"),
    np.float_power: (torch.float_power, "result"),
    np.signbit: (torch.signbit, "none"),
    np.hypot: (torch.hypot, "result"),
    np.bitwise_and: (torch.bitwise_and, "result"),
    np.bitwise_or: (torch.bitwise_or, "result"),
    np.bitwise_xor: (torch.bitwise_xor, "result"),
    np.invert: (torch.bitwise_not, "result"),
    np.left_shift: (torch.bitwise_left_shift, "result"),
    np.right_shift: (torch.bitwise_right_shift, "result"),
    np.positive: (torch.clone, "result"),
    np.greater: (_comparison(torch.gt, torch.lt), "common"),
    np.greater_equal: (_comparison(torch.ge, torch.le), "common"),
    np.less: (_comparison(torch.lt, torch.gt), "common"),
    np.less_equal: (_comparison(torch.le, torch.ge), "common"),
    np.equal: (_comparison(torch.eq, torch.eq), "common"),
    np.not_equal: (_comparison(torch.ne, torch.ne), "common"),
    np.logical_and: (torch.logical_and, "result"),
    np.logical_or: (torch.logical_or, "result"),
    np.logical_xor: (torch.logical_xor, "result"),
    np.logical_not: (torch.logical_not, "result"),
    np.isnan: (torch.isnan, "none"),
    np.isinf: (torch.isinf, "none"),
    np.isfinite: (torch.isfinite, "none"),
    np.isclose: (_isclose, "none"),
    np.trunc: (torch.trunc, "result"),
    np.rint: (torch.round, "result"),
    np.round: (_round, "result"),
    np.around: (_round, "result"),
    np.outer: (torch.outer, "result"),
    np.sort: (_sort, "result"),
    np.argsort: (_argsort, "none"),
    np.repeat: (_repeat, "none"),
    np.roll: (_roll, "none"),
    np.ptp: (_peak_to_peak, "result"),
    np.average: (_average, "result"),
    np.trace: (_trace, "result"),
    np.cross: (_cross, "result"),
    np.kron: (torch.kron, "result"),
    np.column_stack: (torch.column_stack, "result"),
    np.dstack: (torch.dstack, "result"),
    np.atleast_1d: (_at_least(torch.atleast_1d, 1), "none"),
    np.atleast_2d: (_at_least(torch.atleast_2d, 2), "none"),
    np.atleast_3d: (_at_least(torch.atleast_3d, 3), "none"),
    np.count_nonzero: (_count_nonzero, "none"),
    np.tril: (_triangle(torch.tril), "none"),
    np.triu: (_triangle(torch.triu), "none"),
    np.swapaxes: (torch.swapaxes, "none"),
    np.moveaxis: (torch.moveaxis, "none"),
    np.vstack: (torch.vstack, "result"),
    np.hstack: (torch.hstack, "result"),
    np.tile: (torch.tile, "none"),
    np.dot: (torch.matmul, "result"),
    np.matmul: (torch.matmul, "result"),
    np.sum: (_reduction(torch.sum), "result"),
    np.prod: (_reduction(torch.prod), "result"),
    np.mean: (_reduction(torch.mean), "result"),
    np.max: (_reduction(torch.amax), "result"),
    np.amax: (_reduction(torch.amax), "result"),
    np.min: (_reduction(torch.amin), "result"),
    np.amin: (_reduction(torch.amin), "result"),
    np.all: (_reduction(torch.all), "none"),
    np.any: (_reduction(torch.any), "none"),
    np.std: (_moments(torch.std), "result"),
    np.var: (_moments(torch.var), "result"),
    np.argmax: (_arg_reduction(torch.argmax), "none"),
    np.argmin: (_arg_reduction(torch.argmin), "none"),
    np.cumsum: (_cumulative(torch.cumsum), "result"),
    np.cumprod: (_cumulative(torch.cumprod), "result"),
    np.concatenate: (_concatenate, "result"),
    np.stack: (torch.stack, "result"),
    np.transpose: (_transpose, "none"),
    np.reshape: (_reshape, "none"),
    np.ravel: (_ravel, "none"),
    np.ndarray.flatten: (_flatten, "none"),
    np.squeeze: (_squeeze, "none"),
    np.expand_dims: (torch.unsqueeze, "none"),
    np.clip: (_clip, "result"),
    np.where: (_where, "values"),
    np.zeros: (_shape_factory(torch.zeros), "result"),
    np.ones: (_shape_factory(torch.ones), "result"),
    np.full: (_full, "result"),
    np.zeros_like: (_like_factory(torch.zeros_like), "result"),
    np.full_like: (_full_like, "result"),
    np.ones_like: (_like_factory(torch.ones_like), "result"),
    np.arange: (_arange, "result"),
    np.linspace: (_linspace, "result"),
    np.eye: (_eye, "result"),
    np.copy: (copy_array, "none"),
    np.array: (_array, "none"),
    np.asarray: (_array, "none"),
    np.linalg.norm: (_norm, "result"),
    np.meshgrid: (_meshgrid, "none"),
    np.split: (_splitter(equal=True), "none"),
    np.array_split: (_splitter(equal=False), "none"),
    np.linalg.inv: (torch.linalg.inv, "result"),
    np.linalg.det: (torch.linalg.det, "result"),
    np.linalg.solve: (torch.linalg.solve, "result"),
    np.einsum: (torch.einsum, "result"),
    np.diff: (_diff, "result"),
    np.take_along_axis: (_take_along_axis, "none"),
    np.real: (_real, "none"),
    np.empty: (_shape_factory(torch.zeros), "result"),
    np.empty_like: (_like_factory(torch.zeros_like), "result"),
    np.float16: (_scalar, "result"),
    np.float32: (_scalar, "result"),
    np.float64: (_scalar, "result"),
    np.int32: (_scalar, "result"),
    np.int64: (_scalar, "result"),
}

# ndarray method -> the NumPy function it is (called with the array first)
NDARRAY_METHODS: dict[str, Any] = {
    "sum": np.sum,
    "prod": np.prod,
    "mean": np.mean,
    "max": np.max,
    "min": np.min,
    "all": np.all,
    "any": np.any,
    "std": np.std,
    "var": np.var,
    "argmax": np.argmax,
    "argmin": np.argmin,
    "cumsum": np.cumsum,
    "cumprod": np.cumprod,
    "transpose": np.transpose,
    "reshape": np.reshape,
    "ravel": np.ravel,
    "flatten": np.ndarray.flatten,
    "squeeze": np.squeeze,
    "clip": np.clip,
    "copy": np.copy,
    "dot": np.dot,
    "round": np.round,
    "argsort": np.argsort,
    "repeat": np.repeat,
    "trace": np.trace,
    "swapaxes": np.swapaxes,
    "astype": "astype",
}


# operator -> the NumPy function it calls on arrays
NUMPY_OPERATORS: dict[Any, Any] = {
    operator.add: np.add,
    operator.sub: np.subtract,
    operator.mul: np.multiply,
    operator.truediv: np.true_divide,
    operator.floordiv: np.floor_divide,
    operator.pow: np.power,
    operator.mod: np.remainder,
    operator.matmul: np.matmul,
    operator.gt: np.greater,
    operator.ge: np.greater_equal,
    operator.lt: np.less,
    operator.le: np.less_equal,
    operator.eq: np.equal,
    operator.ne: np.not_equal,
    operator.and_: np.bitwise_and,
    operator.or_: np.bitwise_or,
    operator.xor: np.bitwise_xor,
    operator.lshift: np.left_shift,
    operator.rshift: np.right_shift,
    operator.neg: np.negative,
    operator.pos: np.positive,
    operator.abs: np.absolute,
    operator.invert: np.invert,
}
