"""Lowerings of gathers (embedding, index_select, gather) as indirect loads.

An indirect load reads a buffer at an index that holds a loaded value: the op
`indirect_load` with arguments (Load, offset, marker, bound, check). The Load's
index is the address with a placeholder (`IndirectOffset`, the marker's index)
where the loaded offset goes; the C++ generator prints the offset into a
variable and the address around it. Since the placeholder never equals a store
index, the scheduler never mistakes the read for one at the producer's own index.

Every offset is checked against `bound` (an IndexValue: the table's size along
the gathered dim) as eager checks it: these three ops reject negative indices
too. A failed check is recorded in the kernel's status argument and the wrapper
raises `runtime.IndexOutOfRangeError` (an IndexError and a RuntimeError) naming
`check` (a `runtime.IndexCheck`: the op and the dim) right after the kernel.

The gather fuses with what reads its result (the token + position embedding
sum, dropout, a layer norm). A table not yet in memory (a pointwise value, such
as cross-entropy's log_softmax) is not stored for the gather when it reads no
more elements than the table holds: each of its loads at the gathered position
becomes an indirect load of its own (`inline_indirect_loads`), so only the
gathered elements are computed. The C++ and Triton generators print indirect
loads (`registry.prints_indirect_loads`); with any other lowering table these
ops call ATen.
"""

from __future__ import annotations

import itertools

import sympy
import torch

from inductor_codegen.errors import InductorError
from inductor_codegen.indexing import FloorDiv, numel
from inductor_codegen.ir import Constant, IndexValue, Load, Op, TensorValue
from inductor_codegen.lowering.common import cast, node_dtype, node_size, normalize_dim
from inductor_codegen.lowering.registry import prints_indirect_loads, register_lowering
from inductor_codegen.runtime import IndexCheck

__all__ = [
    "INDIRECT_LOAD",
    "IndirectOffset",
    "indirect_load",
    "inline_indirect_loads",
    "offset_in_range",
    "value_bounds",
]

aten = torch.ops.aten

INDIRECT_LOAD = "indirect_load"
_placeholders = itertools.count()


class IndirectOffset(sympy.Function):
    """Placeholder in an address for an offset loaded at run time (replaced when printed).

    A function application, not a symbol: it has no free symbols, so nothing
    takes it for a loop variable or a size.
    """

    is_integer = True


def indirect_load(table: TensorValue, index: tuple, dim: int, offset, op: str) -> Op:
    """`table[index]` with `index[dim]` replaced by the int64 expression `offset`.

    `table` must be in memory (a view of a buffer). `offset` is checked to be in
    [0, table.size[dim]); a failure raises an error naming `op`.
    """
    marker = IndirectOffset(sympy.Integer(next(_placeholders)))
    position = list(index)
    position[dim] = marker
    layout = table.view.layout
    load = Load(table.view.buffer, layout.index(tuple(position)), table.dtype)
    offset = cast(offset, torch.int64)
    bound = IndexValue(table.size[dim], torch.int64)
    check = IndexCheck(op, dim)
    args = (load, offset, IndexValue(marker, torch.int64), bound, check)
    return Op(INDIRECT_LOAD, args, table.dtype)


def inline_indirect_loads(value: TensorValue, index: tuple, dim: int, offset, op: str):
    """`value[index]` with `index[dim]` replaced by `offset`, for a value not in memory:
    its expression at that position with each load that reads the gathered position
    an indirect load of its own (one bounds check of `offset` against value.size[dim]).

    None where the expression reads the position other than through loads (an iota, a
    mask of a pad), or gathers itself: the caller stores the value first.
    """
    marker = IndirectOffset(sympy.Integer(next(_placeholders)))
    position = list(index)
    position[dim] = marker
    body = value.loader(tuple(position))
    offset = cast(offset, torch.int64)
    args = (offset, IndexValue(marker, torch.int64), IndexValue(value.size[dim], torch.int64))
    check = IndexCheck(op, dim)
    memo: dict[int, object] = {}

    def visit(e):
        key = id(e)
        if key in memo:
            return memo[key]
        if isinstance(e, Load):
            result = (
                Op(INDIRECT_LOAD, (e, *args, check), e.dtype)
                if marker in e.index.atoms(IndirectOffset)
                else e
            )
        elif isinstance(e, IndexValue):
            result = None if e.index.atoms(IndirectOffset) else e
        elif isinstance(e, Op):
            if e.name == INDIRECT_LOAD:
                result = None
            else:
                inner = tuple(visit(a) for a in e.args)
                result = None if any(a is None for a in inner) else Op(e.name, inner, e.dtype)
        else:
            result = e
        memo[key] = result
        return result

    return visit(body)


def offset_in_range(offset, bound: IndexValue, ranges: dict) -> bool:
    """Whether an indirect load's `offset` is in [0, bound) for every value of the loop
    variables (`ranges`: symbol -> size): its bounds check can then be left out (an
    offset clamped into the table, a `where` between such, an arange)."""
    bounds = value_bounds(offset, ranges)
    size = sympy.sympify(bound.index)
    return bounds is not None and bounds[0] >= 0 and size.is_Integer and bounds[1] < int(size)


# Integer dtypes an offset's value range is known from (a loaded value: the dtype's).
_INTEGER_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def value_bounds(expr, ranges: dict) -> tuple[int, int] | None:
    """[low, high] that the integer expression `expr` is known to lie in, or None.

    Sound, not complete: an op it does not know, a float value or a bound that does
    not fit its dtype gives None."""
    dtype = getattr(expr, "dtype", None)  # a check or other non-value argument: unknown
    if dtype not in _INTEGER_DTYPES:
        return None
    if dtype == torch.bool:
        full = (0, 1)
    else:
        info = torch.iinfo(dtype)
        full = (info.min, info.max)
    if isinstance(expr, Load) or (isinstance(expr, Op) and expr.name == INDIRECT_LOAD):
        return full  # a value read from memory (a gathered one too): any of its dtype's
    if isinstance(expr, Constant):
        return (int(expr.value), int(expr.value))
    if isinstance(expr, IndexValue):
        bounds = _index_bounds(sympy.sympify(expr.index), ranges)
    elif isinstance(expr, Op):
        bounds = _op_bounds(expr, ranges)
    else:
        return None
    if bounds is None or bounds[0] < full[0] or bounds[1] > full[1]:
        return None  # unknown, or the computation may wrap around in its dtype
    return bounds


def _op_bounds(expr: Op, ranges: dict) -> tuple[int, int] | None:
    name, args = expr.name, expr.args
    if name == "where":
        arms = [value_bounds(a, ranges) for a in args[1:]]
        if any(b is None for b in arms):
            return None
        return (min(b[0] for b in arms), max(b[1] for b in arms))
    if name == "to_dtype":
        return value_bounds(args[0], ranges)
    inner = [value_bounds(a, ranges) for a in args]
    if any(b is None for b in inner):
        return None
    if name in ("maximum", "clamp_min"):
        return (max(b[0] for b in inner), max(b[1] for b in inner))
    if name in ("minimum", "clamp_max"):
        return (min(b[0] for b in inner), min(b[1] for b in inner))
    if name == "add":
        return (inner[0][0] + inner[1][0], inner[0][1] + inner[1][1])
    if name == "sub":
        return (inner[0][0] - inner[1][1], inner[0][1] - inner[1][0])
    if name == "neg":
        return (-inner[0][1], -inner[0][0])
    if name == "mul":
        products = [a * b for a in inner[0] for b in inner[1]]
        return (min(products), max(products))
    if name == "remainder" and inner[1][0] > 0:
        return (0, inner[1][1] - 1)  # the divisor's sign: never negative
    return None


def _index_bounds(index, ranges: dict) -> tuple[int, int] | None:
    """[low, high] of an index expression over loop variables in [0, ranges[s])."""
    if index.is_Integer:
        return (int(index), int(index))
    if index.is_Symbol:
        size = sympy.sympify(ranges.get(index, sympy.nan))
        return (0, int(size) - 1) if size.is_Integer and size > 0 else None
    if index.is_Add or index.is_Mul:
        parts = [_index_bounds(a, ranges) for a in index.args]
        if any(p is None for p in parts):
            return None
        low, high = parts[0]
        for a, b in parts[1:]:
            if index.is_Add:
                low, high = low + a, high + b
            else:
                products = [x * y for x in (low, high) for y in (a, b)]
                low, high = min(products), max(products)
        return (low, high)
    if isinstance(index, FloorDiv) and index.args[1].is_Integer and index.args[1] > 0:
        inner = _index_bounds(index.args[0], ranges)
        divisor = int(index.args[1])
        return None if inner is None else (inner[0] // divisor, inner[1] // divisor)
    return None


def _table_reader(ctx, x: TensorValue, dim: int, out_size: tuple, op: str):
    """A function (position, offset) -> `x[position]` with position[dim] = offset.

    A value in memory is read there. One not in memory is computed at the gathered
    positions only (`inline_indirect_loads`) where the gather's `out_size` holds no
    more elements than it (static counts) and its expression allows; else it is
    stored first.
    """
    gathered, held = numel(out_size), numel(x.size)
    if x.view is None and gathered.is_Integer and held.is_Integer and gathered <= held:

        def inline(position, offset):
            value = inline_indirect_loads(x, position, dim, offset, op)
            if value is None:
                raise InductorError(
                    f"{op}: the table's expression reads the gathered position other than "
                    "through loads at this position only; store it (ctx.realize) first"
                )
            return value

        probe = tuple(
            sympy.Symbol(f"gathered{k}", integer=True, nonnegative=True) for k in range(x.ndim)
        )
        offset = IndexValue(sympy.Integer(0), torch.int64)
        if inline_indirect_loads(x, probe, dim, offset, op) is not None:
            return inline
    table = ctx.realize(x)

    def stored(position, offset):
        return indirect_load(table, position, dim, offset, op)

    return stored


def _supported(ctx) -> bool:
    return prints_indirect_loads(ctx.lowerings)


@register_lowering(aten.index_select.default)
def index_select(ctx, node, x, dim, index):
    if not _supported(ctx) or not x.ndim:
        return ctx.fallback(node, (x, dim, index), {})
    dim = normalize_dim(dim, x.ndim)
    dtype = node_dtype(node)
    read = _table_reader(ctx, x, dim, node_size(node), "index_select")
    index_loader = index.loader

    def load(idx):
        offset = index_loader((idx[dim],) if index.ndim else ())
        return cast(read(idx, offset), dtype)

    return TensorValue(dtype, node_size(node), load)


@register_lowering(aten.embedding.default)
def embedding(ctx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if not _supported(ctx) or weight.ndim != 2:
        args = (weight, indices, padding_idx, scale_grad_by_freq, sparse)
        return ctx.fallback(node, args, {})
    dtype = node_dtype(node)
    read = _table_reader(ctx, weight, 0, node_size(node), "embedding")
    index_loader = indices.loader
    prefix = indices.ndim

    def load(idx):
        offset = index_loader(tuple(idx[:prefix]))
        return cast(read((sympy.Integer(0), idx[prefix]), offset), dtype)

    return TensorValue(dtype, node_size(node), load)


@register_lowering(aten.gather.default)
def gather(ctx, node, x, dim, index, sparse_grad=False):
    if not _supported(ctx) or not x.ndim:
        return ctx.fallback(node, (x, dim, index), {"sparse_grad": sparse_grad})
    dim = normalize_dim(dim, x.ndim)
    dtype = node_dtype(node)
    read = _table_reader(ctx, x, dim, node_size(node), "gather")
    index_loader = index.loader

    def load(idx):
        return cast(read(idx, index_loader(idx)), dtype)

    return TensorValue(dtype, node_size(node), load)
