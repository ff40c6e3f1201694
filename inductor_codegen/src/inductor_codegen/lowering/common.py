"""Helpers shared by the lowering modules: metadata, broadcasting, casts."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping, Sequence

import sympy
import torch

from inductor_codegen.errors import LoweringError
from inductor_codegen.indexing import Index, as_index
from inductor_codegen.ir import Constant, Expr, IndexValue, Op, ScalarArg, TensorValue

__all__ = [
    "broadcast_loader",
    "broadcasts",
    "size_hint",
    "size_hints_scope",
    "cast",
    "const",
    "make_pointwise",
    "node_dtype",
    "node_size",
    "normalize_dim",
    "normalize_dims",
    "op",
    "promote",
    "scalar_expr",
]


def node_val(node) -> torch.Tensor:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise LoweringError(f"node {node.name} has no tensor meta['val']; it is needed to lower it")
    return val


def node_dtype(node) -> torch.dtype:
    return node_val(node).dtype


def node_size(node) -> tuple[Index, ...]:
    return tuple(as_index(s) for s in node_val(node).shape)


def normalize_dim(dim: int, ndim: int) -> int:
    if ndim == 0:
        return 0
    return dim + ndim if dim < 0 else dim


def normalize_dims(dims, ndim: int) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({normalize_dim(d, ndim) for d in dims})


def op(name: str, *args: Expr, dtype: torch.dtype) -> Op:
    return Op(name, tuple(args), dtype)


def const(value, dtype: torch.dtype) -> Constant:
    if dtype == torch.bool:
        return Constant(bool(value), dtype)
    if dtype.is_floating_point:
        return Constant(float(value), dtype)
    return Constant(int(value), dtype)


def cast(expr: Expr, dtype: torch.dtype) -> Expr:
    if expr.dtype == dtype:
        return expr
    if isinstance(expr, Constant):
        return const(expr.value, dtype)
    return Op("to_dtype", (expr,), dtype)


def scalar_expr(value, dtype: torch.dtype) -> Expr:
    """A Python number, a ScalarArg or a symbolic size (sympy) as an expression of `dtype`."""
    if isinstance(value, ScalarArg):
        return cast(value, dtype)
    if isinstance(value, sympy.Expr) and not value.is_Number:
        return cast(IndexValue(value, torch.int64), dtype)
    return const(value, dtype)


def promote(*values) -> torch.dtype:
    """The dtype eager type promotion gives these tensors and scalars.

    Dimensioned tensors rank above zero-dim tensors, which rank above Python
    numbers; a lower rank only raises the category (bool < int < float).
    """
    dims = [v.dtype for v in values if isinstance(v, TensorValue) and v.ndim > 0]
    zeros = [v.dtype for v in values if isinstance(v, TensorValue) and v.ndim == 0]
    scalars = [_wrapped_dtype(v) for v in values if not isinstance(v, TensorValue)]
    ranked = [_promote_all(dims), _promote_all(zeros), _promote_all(scalars)]
    result = _combine(ranked[0], _combine(ranked[1], ranked[2]))
    return result if result is not None else torch.get_default_dtype()


def _promote_all(dtypes):
    result = None
    for d in dtypes:
        result = d if result is None else torch.promote_types(result, d)
    return result


def _combine(higher, lower):
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_floating_point:
        return higher
    if higher == torch.bool or lower.is_floating_point:
        return torch.promote_types(higher, lower)
    return higher


def _wrapped_dtype(value) -> torch.dtype:
    dtype = value.dtype if isinstance(value, ScalarArg) else _scalar_dtype(value)
    return torch.get_default_dtype() if dtype == torch.float64 else dtype


def _scalar_dtype(value) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, (int, sympy.Integer)) or (
        isinstance(value, sympy.Expr) and value.is_integer
    ):
        return torch.int64
    return torch.float64


# NOTE: the example value of each size symbol of the graph being lowered. A broadcast
# reads it to tell a size-1 dim whose size is an expression (`(s0 + 1) // 2 - 1`, which
# tracing guarded equal to 1) from a dim of the result's size.
_SIZE_HINTS: contextvars.ContextVar[Mapping | None] = contextvars.ContextVar(
    "size_hints", default=None
)


@contextlib.contextmanager
def size_hints_scope(hints: Mapping) -> Iterator[None]:
    """Lowerings inside see `hints` (symbol -> example value) as the sizes' values."""
    token = _SIZE_HINTS.set(hints)
    try:
        yield
    finally:
        _SIZE_HINTS.reset(token)


def size_hint(expr: Index) -> int | None:
    """`expr`'s value at the sizes' example values (None where a symbol has none)."""
    if not getattr(expr, "free_symbols", None):
        return int(expr)
    hints = _SIZE_HINTS.get() or {}
    if not expr.free_symbols <= hints.keys():
        return None
    value = expr.xreplace({s: sympy.Integer(hints[s]) for s in expr.free_symbols})
    return int(value) if value.is_Integer else None


def broadcasts(size: Index, target: Index) -> bool:
    """Whether a dim of `size` stretched to `target` repeats its one element.

    A symbolic size other than `target` is 1 when its example value is 1: tracing
    broadcast it only after guarding it equal to 1 (any other size must equal `target`).
    """
    if size == 1:
        return True
    if size == target or not getattr(size, "free_symbols", None):
        return False
    return size_hint(size) == 1


def broadcast_loader(value, size: Sequence[Index], dtype: torch.dtype) -> Callable:
    """Loader of `value` (tensor or scalar) broadcast to `size`, cast to `dtype`."""
    if not isinstance(value, TensorValue):
        expr = scalar_expr(value, dtype)
        return lambda idx: expr
    offset = len(size) - value.ndim
    if offset < 0:
        raise LoweringError(f"cannot broadcast size {value.size} to {tuple(size)}")
    keep = [not broadcasts(value.size[d], size[d + offset]) for d in range(value.ndim)]
    loader = value.loader

    def load(idx):
        inner = tuple(idx[d + offset] if keep[d] else sympy.Integer(0) for d in range(value.ndim))
        return cast(loader(inner), dtype)

    return load


def make_pointwise(
    node, fn: Callable[..., Expr], *inputs, compute_dtype: torch.dtype | None = None
) -> TensorValue:
    """A pointwise TensorValue of `node`'s size: `fn` over the inputs cast to `compute_dtype`."""
    out_dtype = node_dtype(node)
    size = node_size(node)
    compute = compute_dtype or out_dtype
    loaders = [broadcast_loader(v, size, compute) for v in inputs]

    def load(idx):
        return cast(fn(*[ld(idx) for ld in loaders]), out_dtype)

    return TensorValue(out_dtype, size, load)
