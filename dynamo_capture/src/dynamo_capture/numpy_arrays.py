"""NumPy arrays in captured code: ndarrays backed by tensors, NumPy calls as tensor nodes.

An ndarray is a `TensorValue` whose `python_type` is `np.ndarray` (or a NumPy scalar
type such as `np.float64`, for what NumPy returns as a scalar: `np.mean(a)`). It comes
from `t.numpy()` (a `view_as` node), from an ndarray input of the frame (a tensor input
the entry code makes with `torch.from_numpy`) or from a NumPy call on one; it leaves
the graph as a tensor again through `torch.from_numpy(a)` / `torch.as_tensor(a)` (an
`as_tensor` node), or as the frame's result (the entry code calls `.numpy()`).

Each NumPy function, ndarray method and operator is one graph node calling a small
wrapper (`NumpyOperation`) that runs the torch equivalent from `NUMPY_FUNCTIONS` /
`NDARRAY_METHODS` / `NUMPY_OPERATORS` (module `numpy_functions`) on tensors converted
to NumPy's result dtype. NumPy's own type rules
decide that dtype (float64 by default, NEP 50 Python scalars, int -> float64 for
`np.sin` or `np.mean`): capture calls the NumPy function on tiny arrays of the
operands' dtypes and reads the result's dtype and type (array or scalar).

    a = x.numpy()                 ->  a = x.view_as(x)
    b = np.sin(a) + 1             ->  numpy_sin(a), numpy_add(numpy_sin, 1)
    torch.from_numpy(b)           ->  torch.as_tensor(numpy_add)

A write (`a += b`, `np.add(a, b, out=c)`, `a[mask] = 0`) is one node writing the
array's tensor (`_WriteInto`, `_SetItem`), which writes the tensor an array from
`t.numpy()` shares, as eager does; a write NumPy refuses (another shape, a cast across
kinds, a NaN into an integer array) raises there or runs eagerly.

Anything not in the tables (`np.random`, a NumPy function capture does not list, an
array of objects or strings) is Unsupported: the graph breaks there and NumPy runs
eagerly.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.numpy_functions import (
    NDARRAY_METHODS,
    NUMPY_FUNCTIONS,
    NUMPY_OPERATORS,
    copy_array,
)
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
        stack_first: bool = False,
    ) -> None:
        self.torch_fn = torch_fn
        self.cast = cast
        self.skip_first = skip_first  # the first operand keeps its dtype (a condition)
        self.numbers_as_tensors = numbers_as_tensors and cast is not None
        self.stack_first = stack_first  # the first operand is a list of arrays: one array
        self.__name__ = self.__qualname__ = f"numpy_{name}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.stack_first:
            args = (torch.stack([torch.as_tensor(item) for item in args[0]]), *args[1:])
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
    result = _numpy_example(fn, args, kwargs)
    if isinstance(result, tuple | list):
        raise Unsupported(f"NumPy {getattr(fn, '__name__', fn)} returns several arrays")
    return _array_kind(fn, result)


def _numpy_results(
    fn: Any, args: list[Value], kwargs: dict[str, Value]
) -> tuple[type, list[tuple[np.dtype, type]]]:
    """For a function returning several arrays (`np.split`, `np.meshgrid`): the type of
    sequence NumPy returns and (dtype, type) of each array, from stand-ins."""
    result = _numpy_example(fn, args, kwargs)
    if not isinstance(result, tuple | list):
        raise Unsupported(f"NumPy {getattr(fn, '__name__', fn)} returns one array")
    return type(result), [_array_kind(fn, item) for item in result]


def _array_kind(fn: Any, result: Any) -> tuple[np.dtype, type]:
    if not isinstance(result, np.ndarray | np.generic):
        raise Unsupported(f"NumPy {getattr(fn, '__name__', fn)} returns a {type(result).__name__}")
    if result.dtype not in _TORCH_DTYPES:
        raise Unsupported(f"NumPy arrays of dtype {result.dtype}")
    return result.dtype, type(result)


def _numpy_example(fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Any:
    """NumPy's result of `fn(*args, **kwargs)` on stand-ins of the operands."""
    result, error = None, None
    for full in (False, True):  # tiny arrays first; real shapes where the op needs them
        try:
            # NOTE: the stand-ins' values are not the user's: NumPy's warnings about them
            # (`ddof` past a stand-in's size) are not the program's
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dummies = [_dummy(a, full) for a in args]
                result = fn(*dummies, **{k: _dummy(v, full) for k, v in kwargs.items()})
            break
        except Unsupported:
            raise
        except Exception as failure:  # noqa: BLE001 - NumPy's own error, reported below
            error = failure
    if result is None:
        raise Unsupported(f"NumPy {getattr(fn, '__name__', fn)} on these operands: {error}")
    return result


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
    if fn is np.asarray and args and is_ndarray(args[0]) and args[0].python_type is np.ndarray:
        if _same_dtype_asked(args[0], args[1:], kwargs):
            # the array itself, as NumPy gives it; the graph keeps the (unused) call as
            # torch.compile's does
            tx.ctx.graph.call_function(_SameArray(), (args[0].node,))
            return args[0]
    if fn in (np.asarray, np.array) and len(args) == 1 and not kwargs:
        if isinstance(args[0], TensorValue) and not is_ndarray(args[0]):
            # np.asarray(t) shares the tensor's data as t.numpy() does; np.array(t) copies
            array = tensor_to_numpy(tx, args[0])
            return (
                array if fn is np.asarray else _numpy_node(tx, fn, NUMPY_FUNCTIONS[fn], [array], {})
            )
    if fn in _METADATA_FUNCTIONS and len(args) == 1 and not kwargs and is_ndarray(args[0]):
        return PythonValue(_METADATA_FUNCTIONS[fn](args[0].example))
    entry = NUMPY_FUNCTIONS.get(fn)
    if entry is None:
        raise Unsupported(f"NumPy {getattr(fn, '__name__', fn)} is not one capture puts in a graph")
    return _numpy_node(tx, fn, entry, args, kwargs)


class _SameArray:
    """A node's target: np.asarray of an array of its dtype, which is the array itself."""

    __name__ = __qualname__ = "numpy_asarray"

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        return a

    def __repr__(self) -> str:
        return self.__name__


def _same_dtype_asked(array: TensorValue, args: list[Value], kwargs: dict[str, Value]) -> bool:
    """np.asarray(array, [dtype]) asks for no other dtype than the array's."""
    if not args and not kwargs:
        return True
    if len(args) + len(kwargs) > 1 or (kwargs and "dtype" not in kwargs):
        return False
    try:
        dtype = as_constant(args[0] if args else kwargs["dtype"])
        return dtype is None or _TORCH_DTYPES.get(np.dtype(dtype)) == array.example.dtype
    except (NotConstant, TypeError):
        return False


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


# NumPy functions whose first argument is itself a sequence of arrays, or a shape
_SEQUENCE_ARGUMENT = frozenset({np.concatenate, np.stack, np.vstack, np.hstack, np.array,
                                np.asarray, np.einsum, np.column_stack, np.dstack})  # fmt: skip


def _sequence_of_arrays_for_an_array(fn: Any, args: list[Value]) -> bool:
    """Whether the first argument is a list or tuple of arrays where `fn` takes one array
    (`np.sum([a, b], axis=0)`): NumPy makes one array of it, as torch.stack does."""
    if not args or fn in _SEQUENCE_ARGUMENT or fn in _FACTORIES:
        return False
    first = args[0]
    return isinstance(first, TupleValue | ListValue) and any(is_ndarray(i) for i in first.items)


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
    if fn in _SEVERAL_RESULTS:
        return _several_results_node(tx, fn, torch_fn, args, kwargs)
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
    if fn in _ACCUMULATING and torch.float16 in (cast, result_dtype):
        # NOTE: NumPy adds float16 values in float16, rounding at each step (its sum,
        # cumsum, var, matmul); torch accumulates them in float32: other values
        raise Unsupported(f"NumPy {fn.__name__} of float16 values (NumPy accumulates in float16)")
    name = getattr(fn, "__name__", type(fn).__name__)
    operation = NumpyOperation(
        name,
        torch_fn,
        cast,
        skip_first=cast_mode == "values",
        # a ufunc computes in its result dtype, Python numbers included (NEP 50); torch's
        # equivalents take tensors only (`torch.maximum(a, 0)`, `torch.floor(2.7)`)
        numbers_as_tensors=isinstance(fn, np.ufunc) and cast_mode == "result",
        stack_first=_sequence_of_arrays_for_an_array(fn, args),
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


# NumPy functions adding up values (or, np.cross, rounding between a product and a
# difference), whose float16 results differ from torch's
_ACCUMULATING = frozenset(
    {np.sum, np.prod, np.mean, np.std, np.var, np.cumsum, np.cumprod, np.dot, np.matmul,
     np.einsum, np.linalg.norm, np.linalg.inv, np.linalg.det, np.linalg.solve, np.average,
     np.trace, np.cross}
)  # fmt: skip

# NumPy functions returning a tuple or list of arrays
_SEVERAL_RESULTS = frozenset({np.meshgrid, np.split, np.array_split})


class _ResultsCast:
    """A node's target for a function returning several arrays: NumPy's sequence type,
    each array cast to NumPy's dtype for it."""

    def __init__(self, name: str, torch_fn: Callable[..., Any], sequence: type,
                 dtypes: list[torch.dtype]) -> None:  # fmt: skip
        self.torch_fn, self.sequence, self.dtypes = torch_fn, sequence, dtypes
        self.__name__ = self.__qualname__ = f"numpy_{name}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        results = self.torch_fn(*args, **kwargs)
        if len(results) != len(self.dtypes):  # NOTE: capture learnt the count from NumPy
            raise RuntimeError(
                f"{self.__name__} gave {len(results)} arrays, NumPy {len(self.dtypes)}"
            )
        return self.sequence(r.to(d) for r, d in zip(results, self.dtypes, strict=True))

    def __repr__(self) -> str:
        return self.__name__


def _several_results_node(
    tx: Translator,
    fn: Any,
    torch_fn: Callable[..., Any],
    args: list[Value],
    kwargs: dict[str, Value],
) -> Value:
    """One node for a NumPy function returning several arrays, each read by a getitem."""
    name = getattr(fn, "__name__", type(fn).__name__)
    if "out" in kwargs or "dtype" in kwargs:
        raise Unsupported(f"NumPy {name} with out= or dtype=")
    sequence, kinds = _numpy_results(fn, args, kwargs)
    target = _ResultsCast(name, torch_fn, sequence, [_TORCH_DTYPES[dtype] for dtype, _ in kinds])
    node_args = tuple(_as_tensor(a) for a in args)
    node_kwargs = {k: _as_tensor(v) for k, v in kwargs.items()}
    result = tx.ctx.call("call_function", target, node_args, node_kwargs)
    if not isinstance(result, TupleValue | ListValue) or len(result.items) != len(kinds):
        raise Unsupported(f"NumPy {name} gives another number of arrays than capture found")
    for item, (_, kind) in zip(result.items, kinds, strict=True):
        if not isinstance(item, TensorValue) or kind is not np.ndarray:
            raise Unsupported(f"NumPy {name} returns values other than arrays")
        item.python_type = kind
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
    fn = NUMPY_OPERATORS.get(op)
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
    fn = NUMPY_OPERATORS.get(op)
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
    if name == "imag" and example.is_complex():
        return _numpy_node(tx, np.imag, (torch.imag, "none"), [value], {})
    if name in _ATTRIBUTE_FUNCTIONS:  # `a.T`, `a.real`: NumPy's function of the array
        fn = _ATTRIBUTE_FUNCTIONS[name]
        return _numpy_node(tx, fn, NUMPY_FUNCTIONS[fn], [value], {})
    if name in NDARRAY_METHODS or _is_ndarray_method(name):
        # a method capture does not put in a graph breaks where it is called, not here
        return BuiltinMethodValue(value, name)
    raise Unsupported(f"ndarray attribute {name!r} inside captured code")


_ATTRIBUTE_FUNCTIONS = {"T": np.transpose, "real": np.real}


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
        dtype = np.dtype(_numpy_constant(tx, values["dtype"]))
    except (KeyError, NotConstant, TypeError):
        raise Unsupported("ndarray.astype with a dtype capture does not know") from None
    if dtype not in _TORCH_DTYPES:
        raise Unsupported(f"ndarray.astype({dtype})")
    try:
        copy = as_constant(values.get("copy", PythonValue(True)))
    except NotConstant:
        raise Unsupported("ndarray.astype with a copy= capture does not know") from None
    if not copy and _TORCH_DTYPES[dtype] == value.example.dtype:
        return value  # NumPy gives the array itself
    target = _ResultCast(NumpyOperation("astype", copy_array, None), _TORCH_DTYPES[dtype])
    result = tx.ctx.call("call_function", target, (_as_tensor(value),), {})
    result.python_type = np.ndarray
    return result


def ndarray_item(tx: Translator, value: TensorValue, index: Value) -> Value:
    """`a[i]`, `a[1:, None]`...: the tensor's indexing; a full int index gives a scalar."""
    import operator as operator_module

    items = index.items if isinstance(index, TupleValue) else [index]
    for item in items:
        if isinstance(item, TensorValue) and not _integer_index_array(item):
            # NOTE: a boolean mask gives a shape that depends on the data; a uint8 array
            # is a mask for torch's indexing, an index for NumPy's
            raise Unsupported("indexing a NumPy array with a boolean, unsigned or float array")
    result = tx.ctx.call(
        "call_function", operator_module.getitem, (_as_tensor(value), _as_tensor(index)), {}
    )
    dtype = _NUMPY_DTYPES[value.example.dtype]
    result.python_type = dtype.type if result.example.dim() == 0 else np.ndarray
    return result


_INDEX_DTYPES = frozenset({torch.int8, torch.int16, torch.int32, torch.int64})


def _integer_index_array(value: TensorValue) -> bool:
    """An ndarray of signed integers, which NumPy and torch index with alike."""
    return (
        is_ndarray(value)
        and value.python_type is np.ndarray
        and value.example.dtype in _INDEX_DTYPES
    )


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
