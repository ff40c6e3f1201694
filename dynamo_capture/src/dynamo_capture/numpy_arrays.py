"""NumPy arrays in captured code: ndarrays backed by tensors, NumPy calls as tensor nodes.

An ndarray is a `TensorValue` whose `python_type` is `np.ndarray` (or a NumPy scalar
type such as `np.float64`, for what NumPy returns as a scalar: `np.mean(a)`). It comes
from `t.numpy()` (a `view_as` node), from an ndarray input of the frame (a tensor input
the entry code makes with `torch.from_numpy`) or from a NumPy call on one; it leaves
the graph as a tensor again through `torch.from_numpy(a)` / `torch.as_tensor(a)` (an
`as_tensor` node), or as the frame's result (the entry code calls `.numpy()`).

Each NumPy function, ndarray method and operator is one graph node calling a small
wrapper (`NumpyOperation`) that runs the torch equivalent from `NUMPY_FUNCTIONS` /
`NDARRAY_METHODS` on tensors converted to NumPy's result dtype. NumPy's own type rules
decide that dtype (float64 by default, NEP 50 Python scalars, int -> float64 for
`np.sin` or `np.mean`): capture calls the NumPy function on tiny arrays of the
operands' dtypes and reads the result's dtype and type (array or scalar).

    a = x.numpy()                 ->  a = x.view_as(x)
    b = np.sin(a) + 1             ->  numpy_sin(a), numpy_add(numpy_sin, 1)
    torch.from_numpy(b)           ->  torch.as_tensor(numpy_add)

Anything not in the tables (in-place NumPy updates, `np.random`, a NumPy function
capture does not list, an array of objects or strings) is Unsupported: the graph
breaks there and NumPy runs eagerly.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.operations import NotConstant, as_constant
from dynamo_capture.values import ListValue, PythonValue, TensorValue, TupleValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "NDARRAY_METHODS",
    "NUMPY_FUNCTIONS",
    "NUMPY_TYPE_DESCRIPTIONS",
    "NumpyOperation",
    "call_numpy",
    "is_ndarray",
    "ndarray_attribute",
    "ndarray_in_place_operator",
    "ndarray_method",
    "ndarray_set_item",
    "ndarray_operator",
    "numpy_scalar_to_number",
    "tensor_to_numpy",
]

_TORCH_DTYPES = {
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.complex64): torch.complex64,
    np.dtype(np.complex128): torch.complex128,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.bool_): torch.bool,
}
_NUMPY_DTYPES = {value: key for key, value in _TORCH_DTYPES.items()}


def is_ndarray(value: Value) -> bool:
    """Whether `value` is an ndarray (or NumPy scalar) backed by a tensor."""
    return isinstance(value, TensorValue) and _is_numpy_type(value.python_type)


def _is_numpy_type(cls: type) -> bool:
    return cls is np.ndarray or (isinstance(cls, type) and issubclass(cls, np.generic))


# ----- the tables ---------------------------------------------------------------------
def _reduction(torch_fn: Callable[..., Any]) -> Callable[..., Any]:
    """A NumPy reduction (`axis`, `keepdims`) on torch's (`dim`, `keepdim`)."""

    def reduce(a: torch.Tensor, axis: Any = None, keepdims: bool = False, **kwargs: Any) -> Any:
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


def _copy(a: torch.Tensor) -> torch.Tensor:
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


def _flip(a: torch.Tensor, axis: Any = None) -> torch.Tensor:
    if axis is None:
        return torch.flip(a, tuple(range(a.dim())))
    return torch.flip(a, axis if isinstance(axis, tuple | list) else (axis,))


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


def _imag(a: torch.Tensor) -> torch.Tensor:
    return torch.imag(a) if a.is_complex() else torch.zeros_like(a)


def _real(a: torch.Tensor) -> torch.Tensor:
    return torch.real(a) if a.is_complex() else a.view_as(a)


def _norm(a: torch.Tensor, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    if ord is not None:
        raise NotImplementedError("np.linalg.norm with ord")
    if axis is None:
        result = torch.linalg.vector_norm(a)
        return result.reshape((1,) * a.dim()) if keepdims else result
    return torch.linalg.vector_norm(a, dim=axis, keepdim=keepdims)


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
    np.trunc: (torch.trunc, "result"),
    np.rint: (torch.round, "result"),
    np.round: (_round, "result"),
    np.around: (_round, "result"),
    np.outer: (torch.outer, "result"),
    np.sort: (_sort, "result"),
    np.flip: (_flip, "none"),
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
    np.ravel: (lambda a: a.reshape(-1), "none"),
    np.squeeze: (_squeeze, "none"),
    np.expand_dims: (torch.unsqueeze, "none"),
    np.clip: (_clip, "result"),
    np.where: (_where, "values"),
    np.zeros: (_shape_factory(torch.zeros), "result"),
    np.ones: (_shape_factory(torch.ones), "result"),
    np.full: (_full, "result"),
    np.zeros_like: (_like_factory(torch.zeros_like), "result"),
    np.ones_like: (_like_factory(torch.ones_like), "result"),
    np.arange: (_arange, "result"),
    np.linspace: (_linspace, "result"),
    np.eye: (_eye, "result"),
    np.copy: (_copy, "none"),
    np.array: (_array, "none"),
    np.asarray: (_array, "none"),
    np.linalg.norm: (_norm, "result"),
    np.linalg.inv: (torch.linalg.inv, "result"),
    np.linalg.det: (torch.linalg.det, "result"),
    np.linalg.solve: (torch.linalg.solve, "result"),
    np.einsum: (torch.einsum, "result"),
    np.diff: (_diff, "result"),
    np.take_along_axis: (_take_along_axis, "none"),
    np.real: (_real, "none"),
    np.imag: (_imag, "none"),
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
    "flatten": np.ravel,
    "squeeze": np.squeeze,
    "clip": np.clip,
    "copy": np.copy,
    "dot": np.dot,
    "round": np.round,
    "swapaxes": np.swapaxes,
    "astype": "astype",
}


# operator -> the NumPy function it calls on arrays
_OPERATORS: dict[Any, Any] = {
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


# ----- the graph node -----------------------------------------------------------------
class NumpyOperation:
    """A graph node's target: NumPy function `name` as `torch_fn` on tensors cast first."""

    def __init__(
        self,
        name: str,
        torch_fn: Callable[..., Any],
        cast: torch.dtype | None,
        skip_first: bool = False,
        numbers_as_tensors: bool = False,
    ) -> None:
        self.torch_fn = torch_fn
        self.cast = cast
        self.skip_first = skip_first  # the first operand keeps its dtype (a condition)
        self.numbers_as_tensors = numbers_as_tensors and cast is not None
        self.__name__ = self.__qualname__ = f"numpy_{name}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.cast is not None:
            first, rest = (args[:1], args[1:]) if self.skip_first else ((), args)
            args = (*first, *_cast(rest, self.cast))
        if self.numbers_as_tensors:
            args = tuple(
                torch.tensor(a, dtype=self.cast) if isinstance(a, bool | int | float) else a
                for a in args
            )
        return self.torch_fn(*args, **kwargs)

    def __repr__(self) -> str:
        return self.__name__


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype)
    if isinstance(value, list | tuple):
        return type(value)(_cast(item, dtype) for item in value)
    return value


class _ResultCast:
    """A node's target that casts the result to NumPy's dtype (factories, astype)."""

    def __init__(self, operation: NumpyOperation, dtype: torch.dtype) -> None:
        self.operation = operation
        self.dtype = dtype
        self.__name__ = self.__qualname__ = operation.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.operation(*args, **kwargs).to(self.dtype)

    def __repr__(self) -> str:
        return self.__name__


# ----- NumPy's type rules, read from NumPy ----------------------------------------------
def _dummy(value: Value, full: bool = False) -> Any:
    """A NumPy stand-in for an operand: its dtype and rank (and, `full`, its shape), not
    its data."""
    if is_ndarray(value):
        dtype = _NUMPY_DTYPES[value.example.dtype]
        if value.python_type is np.ndarray:
            shape = tuple(int(size) for size in value.example.shape) if full else None
            return np.ones(shape or (1,) * value.example.dim(), dtype=dtype)
        return dtype.type(1)
    if isinstance(value, TensorValue):
        raise Unsupported("a NumPy function called on a torch.Tensor")
    if isinstance(value, TupleValue | ListValue):
        items = [_dummy(item, full) for item in value.items]
        return tuple(items) if isinstance(value, TupleValue) else items
    try:
        return as_constant(value)
    except NotConstant:
        raise Unsupported("a NumPy call on a value capture does not know") from None


def _numpy_result(fn: Any, args: list[Value], kwargs: dict[str, Value]) -> tuple[np.dtype, type]:
    """(dtype, type) of NumPy's result of `fn(*args, **kwargs)`, from tiny stand-ins."""
    result, error = None, None
    for full in (False, True):  # tiny arrays first; real shapes where the op needs them
        try:
            with np.errstate(all="ignore"):
                dummies = [_dummy(a, full) for a in args]
                result = fn(*dummies, **{k: _dummy(v, full) for k, v in kwargs.items()})
            break
        except Unsupported:
            raise
        except Exception as failure:  # noqa: BLE001 - NumPy's own error, reported below
            error = failure
    if result is None:
        raise Unsupported(f"NumPy {getattr(fn, '__name__', fn)} on these operands: {error}")
    if not isinstance(result, np.ndarray | np.generic):
        raise Unsupported(f"NumPy {getattr(fn, '__name__', fn)} returns a {type(result).__name__}")
    if result.dtype not in _TORCH_DTYPES:
        raise Unsupported(f"NumPy arrays of dtype {result.dtype}")
    return result.dtype, type(result)


# ----- entry points from the interpreter -------------------------------------------------
def tensor_to_numpy(tx: Translator, tensor: TensorValue, force: bool = False) -> Value:
    """`t.numpy()`: an ndarray sharing the tensor's data (a `view_as` node)."""
    if tensor.example.dtype not in _NUMPY_DTYPES:
        raise Unsupported(f"Tensor.numpy() of a {tensor.example.dtype} tensor")
    if not force and (tensor.example.requires_grad or tensor.example.device.type != "cpu"):
        # eager raises here: let it, by running the call eagerly
        raise Unsupported("Tensor.numpy() of a tensor that requires grad or is not on the CPU")
    result = tx.ctx.call("call_method", "view_as", (tensor, tensor), {})
    result.python_type = np.ndarray
    return result


def call_numpy(
    tx: Translator, fn: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """`fn(*args, **kwargs)` for a NumPy function in the table, or a torch function taking
    an ndarray (`torch.from_numpy`); None for anything else."""
    if fn in (torch.from_numpy, torch.as_tensor, torch.tensor) and args and is_ndarray(args[0]):
        if len(args) > 1 or kwargs:
            raise Unsupported(f"{fn.__name__}(ndarray, ...) with more arguments")
        result = tx.ctx.call("call_function", torch.as_tensor, (_as_tensor(args[0]),), {})
        result.python_type = torch.Tensor
        return result
    if not _is_numpy_callable(fn):
        return None
    if fn in _FOLDED_NUMPY:
        return _folded_numpy_call(tx, fn, args, kwargs)
    if fn in _METADATA_FUNCTIONS and len(args) == 1 and not kwargs and is_ndarray(args[0]):
        return PythonValue(_METADATA_FUNCTIONS[fn](args[0].example))
    entry = NUMPY_FUNCTIONS.get(fn)
    if entry is None:
        raise Unsupported(f"NumPy {getattr(fn, '__name__', fn)} is not one capture puts in a graph")
    return _numpy_node(tx, fn, entry, args, kwargs)


# NumPy functions of an array's metadata only, answered from its example at capture time
_METADATA_FUNCTIONS: dict[Any, Callable[[torch.Tensor], Any]] = {
    np.shape: lambda example: tuple(example.shape),
    np.ndim: lambda example: example.dim(),
    np.size: lambda example: example.numel(),
}

# NumPy callables that only describe types: called at capture time on constant arguments.
_FOLDED_NUMPY = frozenset(
    {np.finfo, np.iinfo, np.dtype, np.promote_types, np.can_cast, np.issubdtype}
)
# Their results whose attributes (limits, computed by properties) are read at capture time.
NUMPY_TYPE_DESCRIPTIONS = (np.finfo, np.iinfo)


def _numpy_constant(tx: Translator, value: Value) -> Any:
    """A constant, or a NumPy dtype (immutable) known at capture time; one from outside
    the frame is guarded by identity (NumPy's builtin dtypes are singletons)."""
    if isinstance(value, PythonValue) and (
        isinstance(value.obj, np.dtype) or _builtin_or_numpy_class(value.obj)
    ):
        if value.source is not None:
            tx.ctx.guards.id_match(value.source, value.obj)
        return value.obj
    return as_constant(value)


def _builtin_or_numpy_class(obj: Any) -> bool:
    """A Python builtin type or a NumPy scalar type (`int`, `np.integer`): what
    np.issubdtype and np.dtype take as a type."""
    return isinstance(obj, type) and (obj.__module__ == "builtins" or issubclass(obj, np.generic))


def _folded_numpy_call(
    tx: Translator, fn: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    try:
        real_args = [_numpy_constant(tx, arg) for arg in args]
        real_kwargs = {name: _numpy_constant(tx, value) for name, value in kwargs.items()}
    except NotConstant:
        raise Unsupported(f"NumPy {fn.__name__}() of values known only when it runs") from None
    try:
        return PythonValue(fn(*real_args, **real_kwargs))
    except (TypeError, ValueError) as error:
        from dynamo_capture.errors import raised_by_python

        raise raised_by_python(error) from None


def _is_numpy_callable(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", "")
    if isinstance(fn, np.ufunc):
        return True
    return isinstance(module, str) and (module == "numpy" or module.startswith("numpy."))


def _numpy_node(
    tx: Translator,
    fn: Any,
    entry: tuple[Callable[..., Any], str],
    args: list[Value],
    kwargs: dict[str, Value],
    out: Value | None = None,
) -> Value:
    """One graph node for NumPy's `fn(*args, **kwargs)`; with `out` (`out=`, `a += b`)
    the node writes the result into that ndarray, which is what it gives."""
    torch_fn, cast_mode = entry
    if "out" in kwargs:  # `np.add(a, b, out=c)`
        kwargs = dict(kwargs)
        out = kwargs.pop("out")
        if isinstance(out, TupleValue) and len(out.items) == 1:
            out = out.items[0]
    if out is not None and not (is_ndarray(out) and out.python_type is np.ndarray):
        raise Unsupported("a NumPy result written into something other than an ndarray")
    if "dtype" in kwargs and fn not in _FACTORIES and cast_mode != "result":
        # NOTE: dtype= of a "result" function names the dtype NumPy computes in, the one
        # its operands are cast to first
        raise Unsupported(f"NumPy {fn.__name__} with dtype=")
    dtype, result_type = _numpy_result(fn, args, kwargs)
    result_dtype = _TORCH_DTYPES[dtype]
    cast = None
    if cast_mode in ("result", "values"):
        cast = result_dtype
    elif cast_mode == "common":
        operands = [_dummy(a) for a in args if is_ndarray(a)]
        cast = _TORCH_DTYPES[np.result_type(*operands)] if operands else None
    name = getattr(fn, "__name__", type(fn).__name__)
    operation = NumpyOperation(
        name,
        torch_fn,
        cast,
        skip_first=cast_mode == "values",
        # a ufunc computes in its result dtype, Python numbers included (NEP 50); torch's
        # equivalents take tensors only (`torch.maximum(a, 0)`, `torch.floor(2.7)`)
        numbers_as_tensors=isinstance(fn, np.ufunc) and cast_mode == "result",
    )
    target: Any = _ResultCast(operation, result_dtype)
    kwargs = {k: v for k, v in kwargs.items() if k != "dtype"}
    node_args = tuple(_as_tensor(a) for a in args)
    node_kwargs = {k: _as_tensor(v) for k, v in kwargs.items()}
    if out is not None:
        node_args = (_as_tensor(out), *node_args)
        tx.ctx.call("call_function", _WriteInto(target), node_args, node_kwargs)
        return out
    result = tx.ctx.call("call_function", target, node_args, node_kwargs)
    if not isinstance(result, TensorValue):
        raise Unsupported(f"NumPy {name} returns several arrays")
    result.python_type = result_type
    if issubclass(result_type, np.generic):
        _keep_constant(result, fn, args, kwargs)
    return result


# ----- NumPy scalars computed from constants ---------------------------------------------
# node.meta key: the NumPy scalar a node computes from constants alone (`np.float64(2.5)`,
# `np.int64(3) + 1.5`), as torch.compile's fake tensors keep the value of a scalar made
# from constants: `float()` of it is a constant, not a graph break.
_CONSTANT = "ember_numpy_constant"


def _known(value: Value) -> Any:
    """The value `value` holds at capture time: a constant, or a NumPy scalar's kept one."""
    if is_ndarray(value):
        if _CONSTANT not in value.node.meta:
            raise NotConstant(value)
        return value.node.meta[_CONSTANT]
    if isinstance(value, TensorValue):
        raise NotConstant(value)
    return as_constant(value)


def _keep_constant(result: TensorValue, fn: Any, args: list[Value], kwargs: dict[str, Value]):
    try:
        real_args = [_known(arg) for arg in args]
        real_kwargs = {name: _known(value) for name, value in kwargs.items()}
    except NotConstant:
        return
    with np.errstate(all="ignore"):
        value = fn(*real_args, **real_kwargs)
    if isinstance(value, np.generic) and type(value) is result.python_type:
        result.node.meta[_CONSTANT] = value


class _ConstantItem:
    """A node's target: `.item()` of a NumPy scalar known at capture time, the value kept
    (the tensor it takes is not read)."""

    __name__ = __qualname__ = "numpy_scalar_item"

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, scalar: Any) -> Any:
        return self.value

    def __repr__(self) -> str:
        return self.__name__


def numpy_scalar_to_number(tx: Translator, value: Value, kind: type) -> Value | None:
    """`float(s)` or `int(s)` (`kind`) of a NumPy floating scalar computed from constants:
    the Python number, the graph holding its `.item()` and `torch.sym_float` or
    `torch.sym_int` (unused) as torch.compile's does; None for any other value (an integer
    scalar breaks the graph there too)."""
    if not is_ndarray(value) or not issubclass(value.python_type, np.floating):
        return None
    if _CONSTANT not in value.node.meta or kind not in (float, int):
        return None
    number = value.node.meta[_CONSTANT].item()
    tx.ctx.graph.call_function(_ConstantItem(number), (value.node,))
    tx.ctx.graph.call_function(torch.sym_float if kind is float else torch.sym_int, (number,))
    return PythonValue(kind(number))


_FACTORIES = frozenset(  # functions whose dtype= names the result's dtype
    {np.zeros, np.ones, np.full, np.zeros_like, np.ones_like, np.arange, np.linspace, np.eye,
     np.array, np.asarray, np.empty, np.empty_like}
)  # fmt: skip


def _as_tensor(value: Value) -> Value:
    """The operand as the graph sees it: an ndarray's tensor (a plain tensor value)."""
    if is_ndarray(value):
        return dataclasses.replace(value, python_type=torch.Tensor)
    if isinstance(value, TupleValue | ListValue):
        return dataclasses.replace(value, items=[_as_tensor(item) for item in value.items])
    return value


def ndarray_operator(tx: Translator, op: Any, operands: list[Value]) -> Value:
    """`a + b`, `-a`, `a > 0`... with an ndarray operand: the NumPy function it calls."""
    if any(isinstance(v, TensorValue) and not is_ndarray(v) for v in operands):
        return _tensor_with_numpy_scalar(tx, op, operands)
    fn = _OPERATORS.get(op)
    if fn is None:
        raise Unsupported(f"operator {getattr(op, '__name__', op)} on a NumPy array")
    return _numpy_node(tx, fn, NUMPY_FUNCTIONS[fn], operands, {})


class _WriteInto:
    """A node's target: NumPy's result written into ndarray `out` (`out=`, `a += b`), as
    NumPy allows it: of `out`'s shape, its dtype reached by a "same_kind" cast."""

    def __init__(self, operation: Any) -> None:
        self.operation = operation
        self.__name__ = self.__qualname__ = f"{operation.__name__}_into"

    def __call__(self, out: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        result = self.operation(*args, **kwargs)
        if result.shape != out.shape:
            raise ValueError(f"NumPy result of shape {tuple(result.shape)} written into an "
                             f"array of shape {tuple(out.shape)}")  # fmt: skip
        source, target = _NUMPY_DTYPES[result.dtype], _NUMPY_DTYPES[out.dtype]
        if not np.can_cast(source, target, "same_kind"):
            raise TypeError(f"a {source} NumPy result written into a {target} array")
        return out.copy_(result)

    def __repr__(self) -> str:
        return self.__name__


def ndarray_in_place_operator(tx: Translator, op: Any, target: Value, operand: Value) -> Value:
    """`a += b` (`op` the plain operator): the result written into ndarray `a`; a NumPy
    scalar or a Python number on the left is rebound to the plain result instead."""
    if not (is_ndarray(target) and target.python_type is np.ndarray):
        return ndarray_operator(tx, op, [target, operand])
    if isinstance(operand, TensorValue) and not is_ndarray(operand):
        raise Unsupported("an in-place operator on a NumPy array and a torch.Tensor")
    fn = _OPERATORS.get(op)
    if fn is None:
        raise Unsupported(f"operator {getattr(op, '__name__', op)} on a NumPy array")
    return _numpy_node(tx, fn, NUMPY_FUNCTIONS[fn], [target, operand], {}, out=target)


class _SetItem:
    """A node's target: `a[index] = value` on an ndarray's tensor, an array value cast to
    the array's dtype first (NumPy casts what it stores)."""

    __name__ = __qualname__ = "numpy_setitem"

    def __call__(self, a: torch.Tensor, index: Any, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            value = value.to(a.dtype)
        a[index] = value

    def __repr__(self) -> str:
        return self.__name__


def _stores_like_torch(number: bool | int | float, dtype: np.dtype) -> bool:
    """Whether torch stores the Python number into a tensor of `dtype` as NumPy stores it
    into an array: where NumPy raises (a NaN or an out-of-range value into an integer
    array) torch does not, and the store runs eagerly instead."""
    if dtype.kind in "fcb":
        return True
    if isinstance(number, float) and not math.isfinite(number):
        return False
    limits = np.iinfo(dtype)
    return limits.min <= int(number) <= limits.max


def ndarray_set_item(tx: Translator, array: TensorValue, index: Value, value: Value) -> None:
    """`a[index] = value` on an ndarray: a mask, an integer array, slices or numbers."""
    if array.python_type is not np.ndarray:
        raise Unsupported("item assignment on a NumPy scalar")
    if isinstance(value, TensorValue) and not is_ndarray(value):
        raise Unsupported("a torch.Tensor stored into a NumPy array")
    if not isinstance(value, TensorValue):
        try:
            number = as_constant(value)
        except NotConstant:
            raise Unsupported("a value capture does not know stored into a NumPy array") from None
        if not isinstance(number, bool | int | float) or not _stores_like_torch(
            number, _NUMPY_DTYPES[array.example.dtype]
        ):
            raise Unsupported(f"{number!r} stored into a NumPy array of {array.example.dtype}")
    tx.ctx.call(
        "call_function", _SetItem(), (_as_tensor(array), _as_tensor(index), _as_tensor(value)),
        {}, allow_python_result=True,
    )  # fmt: skip


def ndarray_attribute(tx: Translator, value: TensorValue, name: str) -> Value:
    """`a.shape`, `a.T`, `a.dtype`...; a method name gives its bound method."""
    from dynamo_capture.values import BuiltinMethodValue

    example = value.example
    if name == "shape":
        return PythonValue(tuple(example.shape))
    if name == "ndim":
        return PythonValue(example.dim())
    if name == "size":
        return PythonValue(example.numel())
    if name == "dtype":
        return PythonValue(_NUMPY_DTYPES[example.dtype])
    if name == "itemsize":
        return PythonValue(example.element_size())
    if name == "strides":
        return PythonValue(tuple(stride * example.element_size() for stride in example.stride()))
    if name in _ATTRIBUTE_FUNCTIONS:  # `a.T`, `a.real`: NumPy's function of the array
        fn = _ATTRIBUTE_FUNCTIONS[name]
        return _numpy_node(tx, fn, NUMPY_FUNCTIONS[fn], [value], {})
    if name in NDARRAY_METHODS or _is_ndarray_method(name):
        # a method capture does not put in a graph breaks where it is called, not here
        return BuiltinMethodValue(value, name)
    raise Unsupported(f"ndarray attribute {name!r} inside captured code")


_ATTRIBUTE_FUNCTIONS = {"T": np.transpose, "real": np.real, "imag": np.imag}


def _is_ndarray_method(name: str) -> bool:
    """A public method of ndarray (`tolist`, `item`), not a property or a dunder."""
    import types

    member = getattr(np.ndarray, name, None)
    return not name.startswith("_") and isinstance(member, types.MethodDescriptorType)


def ndarray_method(
    tx: Translator, value: TensorValue, name: str, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`a.sum(axis=0)`, `a.astype(np.float32)`, `a.reshape(2, -1)`..."""
    fn = NDARRAY_METHODS.get(name)
    if fn is None:
        raise Unsupported(f"ndarray.{name}() inside captured code")
    if fn == "astype":
        return _astype_node(tx, value, args, kwargs)
    if name in ("reshape", "transpose") and len(args) > 1:
        args = [TupleValue(list(args))]  # a.reshape(2, -1) is a.reshape((2, -1))
    return _numpy_node(tx, fn, NUMPY_FUNCTIONS[fn], [value, *args], kwargs)


def _astype_node(
    tx: Translator, value: TensorValue, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    values = dict(zip(("dtype", "copy"), args, strict=False)) | kwargs
    try:
        dtype = np.dtype(as_constant(values["dtype"]))
    except (KeyError, NotConstant, TypeError):
        raise Unsupported("ndarray.astype with a dtype capture does not know") from None
    if dtype not in _TORCH_DTYPES:
        raise Unsupported(f"ndarray.astype({dtype})")
    target = _ResultCast(NumpyOperation("astype", _copy, None), _TORCH_DTYPES[dtype])
    result = tx.ctx.call("call_function", target, (_as_tensor(value),), {})
    result.python_type = np.ndarray
    return result


def ndarray_item(tx: Translator, value: TensorValue, index: Value) -> Value:
    """`a[i]`, `a[1:, None]`...: the tensor's indexing; a full int index gives a scalar."""
    import operator as operator_module

    if is_ndarray(index) or isinstance(index, TensorValue):
        raise Unsupported("indexing a NumPy array with an array")
    result = tx.ctx.call("call_function", operator_module.getitem, (_as_tensor(value), index), {})
    dtype = _NUMPY_DTYPES[value.example.dtype]
    result.python_type = dtype.type if result.example.dim() == 0 else np.ndarray
    return result


class _WithWeakScalar:
    """A node's target: `op` of a tensor and a NumPy scalar (a 0-d tensor), which torch
    takes as a Python number: the result has the dtype it would have with one."""

    def __init__(self, op: Any, dtype: torch.dtype) -> None:
        self.op = op
        self.dtype = dtype
        self.__name__ = self.__qualname__ = f"with_scalar_{getattr(op, '__name__', 'op')}"

    def __call__(self, *args: Any) -> Any:
        return self.op(*args).to(self.dtype)

    def __repr__(self) -> str:
        return self.__name__


def _tensor_with_numpy_scalar(tx: Translator, op: Any, operands: list[Value]) -> Value:
    """`t * s` for a torch tensor `t` and a NumPy scalar `s`: torch's semantics (eager
    calls Tensor's operator, which takes the scalar as a Python number)."""
    examples: list[Any] = []
    for value in operands:
        if is_ndarray(value):
            if value.python_type is np.ndarray:
                raise Unsupported("an operator between a torch.Tensor and a NumPy array")
            examples.append(_python_number(value.example.dtype))
        elif isinstance(value, TensorValue):
            examples.append(torch.empty((), dtype=value.example.dtype))
        else:
            try:
                examples.append(as_constant(value))
            except NotConstant:
                raise Unsupported("an operator on a NumPy scalar and an unknown value") from None
    try:
        dtype = op(*examples).dtype  # the dtype eager gives: a Python number's promotion
    except Exception as error:  # noqa: BLE001 - eager's own error, met when it runs
        raise Unsupported(f"operator on a tensor and a NumPy scalar: {error}") from error
    target = _WithWeakScalar(op, dtype)
    return tx.ctx.call("call_function", target, tuple(_as_tensor(v) for v in operands), {})


def _python_number(dtype: torch.dtype) -> Any:
    """The kind of Python number torch takes a NumPy scalar of `dtype` as."""
    if dtype is torch.bool:
        return True
    if dtype.is_complex:
        return 1j
    return 1.0 if dtype.is_floating_point else 1
