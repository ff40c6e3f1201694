"""Lowerings of 2-d max and average pooling: the window as an unrolled reduction.

A pooled value is an expression over the window's few points, each a load of
the input's loader, so the pointwise producer (batch norm + ReLU) is computed
inside the pooling kernel instead of in a pass of its own. Max pooling's
indices are a second lazy value: computed only when something reads them (the
backward), never in inference; when they are read, a producer larger than a
load and a cast is stored first (the indices compare every point again). Windows larger than `MAX_WINDOW` points, and
pooling with symbolic sizes, run through ATen.
"""

from __future__ import annotations

import math
import operator

import sympy
import torch

from inductor_codegen.indexing import FloorDiv, as_index
from inductor_codegen.ir import Constant, IndexValue, Layout, Op, TensorValue, expr_size
from inductor_codegen.lowering.channels_last import as_channels_last, reads_channels_last
from inductor_codegen.lowering.common import cast, const, node_dtype, node_size, node_val, op
from inductor_codegen.lowering.registry import is_cpp_table, register_lowering
from inductor_codegen.lowering.scatter import (
    INDEX_DTYPES,
    SCATTER_DTYPES,
    Scatter,
    Target,
    scatter_buffer,
)
from inductor_codegen.runtime import IndexCheck

__all__ = ["MAX_WINDOW"]

aten = torch.ops.aten

# Window points unrolled into one expression; larger windows call ATen.
MAX_WINDOW = 25
# A producer of max pooling's input computed inside the pooling kernel when its indices
# are read: at most this many expression nodes (a load and a cast or two).
MAX_INLINE_PRODUCER = 4


def _pair(value, default=None) -> tuple[int, int]:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return default
    if isinstance(value, int):
        return (value, value)
    return (int(value[0]), int(value[-1])) if len(value) == 1 else (int(value[0]), int(value[1]))


def _pool_params(kernel_size, stride, padding, dilation):
    kernel = _pair(kernel_size)
    return kernel, _pair(stride, kernel), _pair(padding, (0, 0)), _pair(dilation, (1, 1))


def _static_sizes(*sizes) -> bool:
    return all(isinstance(s, (int, sympy.Integer)) for group in sizes for s in group)


def _index(expr) -> IndexValue:
    return IndexValue(expr, torch.int64)


def _and(conds):
    result = None
    for c in conds:
        result = c if result is None else op("logical_and", result, c, dtype=torch.bool)
    return result


def _in_range(position, low: int | None, high: int | None) -> list:
    """Conditions low <= position < high; a bound given as None always holds."""
    conds = []
    if low is not None:
        conds.append(op("ge", _index(position), const(low, torch.int64), dtype=torch.bool))
    if high is not None:
        conds.append(op("lt", _index(position), const(int(high), torch.int64), dtype=torch.bool))
    return conds


class Window:
    """The points of one output element's window: input positions and their validity."""

    def __init__(self, in_size, out_size, kernel, stride, padding, dilation):
        self.in_h, self.in_w = (int(s) for s in in_size[-2:])
        self.out_h, self.out_w = (int(s) for s in out_size[-2:])
        self.kernel, self.stride, self.padding, self.dilation = kernel, stride, padding, dilation

    def _may_leave(self, d: int) -> tuple[bool, bool]:
        """(can go below 0, can go past the end) along spatial dim d."""
        size = (self.in_h, self.in_w)[d]
        out = (self.out_h, self.out_w)[d]
        last = (
            (out - 1) * self.stride[d] - self.padding[d] + (self.kernel[d] - 1) * self.dilation[d]
        )
        return self.padding[d] > 0, last >= size

    def points(self, idx):
        """(h, w, condition or None) for each window point, row by row."""
        oh, ow = idx[-2], idx[-1]
        below_h, past_h = self._may_leave(0)
        below_w, past_w = self._may_leave(1)
        result = []
        for i in range(self.kernel[0]):
            h = oh * self.stride[0] - self.padding[0] + i * self.dilation[0]
            for j in range(self.kernel[1]):
                w = ow * self.stride[1] - self.padding[1] + j * self.dilation[1]
                conds = _in_range(h, 0 if below_h else None, self.in_h if past_h else None)
                conds += _in_range(w, 0 if below_w else None, self.in_w if past_w else None)
                result.append((h, w, _and(conds)))
        return result


def _point_value(x: TensorValue, idx, h, w, cond, fill, dtype):
    value = cast(x.loader((*idx[:-2], h, w)), dtype)
    if cond is None:
        return value
    return Op("masked", (cond, value, const(fill, dtype)), dtype)


@register_lowering(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(
    ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False
):
    kernel, stride, padding, dilation = _pool_params(kernel_size, stride, padding, dilation)
    out_size = _val_size(node, 0)
    if kernel[0] * kernel[1] > MAX_WINDOW or not _static_sizes(x.size, out_size):
        return ctx.fallback(node, (x, kernel_size, stride, padding, dilation, ceil_mode), {})
    dtype = node.meta["val"][0].dtype
    if _reads_indices(node) and x.view is None and _inline_size(x) > MAX_INLINE_PRODUCER:
        # Training: the indices compare every point again, and their int64 stores keep
        # the loop scalar; the producer is computed once, in a vector loop of its own
        # (channels-last where it reads channels-last data: a convolution's, say).
        x = as_channels_last(ctx, x) if reads_channels_last(ctx, x) else ctx.realize(x)
    window = Window(x.size, out_size, kernel, stride, padding, dilation)
    in_w = window.in_w

    def values(idx):
        result = None
        for h, w, cond in window.points(idx):
            v = _point_value(x, idx, h, w, cond, -math.inf, dtype)
            result = v if result is None else op("maximum", result, v, dtype=dtype)
        return result

    def indices(idx):
        points = window.points(idx)
        first = None
        for h, w, cond in reversed(points):
            position = _index(h * in_w + w)
            first = position if first is None or cond is None else _where(cond, position, first)
        best, best_index = Constant(-math.inf, dtype), first
        for h, w, cond in points:
            v = _point_value(x, idx, h, w, cond, -math.inf, dtype)
            # eager's rule: a later point wins when greater, or when it is NaN
            better = op(
                "logical_or",
                op("gt", v, best, dtype=torch.bool),
                op("isnan", v, dtype=torch.bool),
                dtype=torch.bool,
            )
            if cond is not None:
                better = op("logical_and", cond, better, dtype=torch.bool)
            best = _where(better, v, best)
            best_index = _where(better, _index(h * in_w + w), best_index)
        return best_index

    return (
        TensorValue(dtype, out_size, values),
        TensorValue(torch.int64, out_size, indices),
    )


def _reads_indices(node) -> bool:
    """Whether anything reads the indices output of a max_pool2d_with_indices node."""
    return any(
        user.target is operator.getitem and user.args[1] == 1 and user.users for user in node.users
    )


def _inline_size(x: TensorValue) -> int:
    idx = tuple(sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(x.ndim))
    return expr_size(x.loader(idx), MAX_INLINE_PRODUCER + 1)


def _clamp(position, low: int | None, high: int | None):
    """`position` moved into [low, high) (a bound given as None is not needed)."""
    if low is not None:
        position = sympy.Max(position, low)
    if high is not None:
        position = sympy.Min(position, high - 1)
    return position


def _where(cond, a, b):
    return op("where", cond, a, b, dtype=a.dtype)


def _val_size(node, k):
    return tuple(as_index(s) for s in node.meta["val"][k].shape)  # symbolic sizes stay symbolic


@register_lowering(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(
    ctx, node, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    """grad_input[h, w]: the sum of grad over the outputs whose argmax is (h, w).

    A gather: only outputs (oh, ow) with oh in [(h + pad - (k-1)*d) / s, (h + pad) / s]
    can pick (h, w): a fixed number of candidates per dimension, unrolled. With one
    candidate (windows that do not overlap) that is one load, a pointwise value fused
    into its readers. Where windows overlap, the C++ generator scatters instead
    (`_max_pool_backward_scatter`): every input position gathering from several windows
    loads each one's index and gradient (ResNet's 3x3 stride 2 pool: 4 of each, 10x
    slower than the scatter), and the gather adds ties in another order than eager.
    """
    kernel, stride, padding, dilation = _pool_params(kernel_size, stride, padding, dilation)
    size = node_size(node)
    args = (grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices)
    candidates = [-(-((kernel[d] - 1) * dilation[d] + 1) // stride[d]) for d in range(2)]
    if not _static_sizes(size, grad.size):
        return ctx.fallback(node, args, {})
    if candidates[0] * candidates[1] > 1:
        scattered = _max_pool_backward_scatter(ctx, node, grad, indices)
        if scattered is not None:
            return scattered
    if candidates[0] * candidates[1] > MAX_WINDOW:
        return ctx.fallback(node, args, {})
    dtype = node_dtype(node)
    out_h, out_w = (int(s) for s in grad.size[-2:])
    in_h, in_w = (int(s) for s in size[-2:])
    # The last candidate row (column) any input row (column) has: past it, none.
    last_h = (in_h - 1 + padding[0]) // stride[0]
    last_w = (in_w - 1 + padding[1]) // stride[1]

    def load(idx):
        h, w = idx[-2], idx[-1]
        top_h = FloorDiv(h + padding[0], stride[0])
        top_w = FloorDiv(w + padding[1], stride[1])
        here = _index(h * in_w + w)
        total = None
        for a in range(candidates[0]):
            for b in range(candidates[1]):
                oh = top_h - a
                ow = top_w - b
                # bounds that every input position meets are left out (no mask)
                row_low, row_high = (0 if a else None), (out_h if last_h - a >= out_h else None)
                conds = _in_range(ow, 0 if b else None, out_w if last_w - b >= out_w else None)
                row = None
                if stride[0] > 1:
                    # NOTE: a candidate row outside the output is read at the nearest row
                    # (in bounds) and not picked: no masked load, whose branch (the same
                    # for a whole row of the input) would keep the row's loop scalar. With
                    # stride 1 rows and columns run as one loop (the index is affine), masked.
                    row = _and(_in_range(oh, row_low, row_high))
                    oh = oh if row is None else _clamp(oh, row_low, row_high)
                else:
                    conds = _in_range(oh, row_low, row_high) + conds
                out_idx = (*idx[:-2], oh, ow)
                picked = op(
                    "eq", cast(indices.loader(out_idx), torch.int64), here, dtype=torch.bool
                )
                if row is not None:
                    picked = op("logical_and", row, picked, dtype=torch.bool)
                value = _where(picked, cast(grad.loader(out_idx), dtype), const(0, dtype))
                cond = _and(conds)
                if cond is not None:
                    value = Op("masked", (cond, value, const(0, dtype)), dtype)
                total = value if total is None else op("add", total, value, dtype=dtype)
        return total

    return TensorValue(dtype, size, load)


def _max_pool_backward_scatter(ctx, node, grad, indices) -> TensorValue | None:
    """grad_input as eager's CPU kernel computes it, or None where the scatter kernel does
    not apply (another generator, other dtypes): each plane zeroed, then each output's
    gradient added at its argmax (an index into the plane), the outputs in order, so ties
    add in eager's order. The plane is zeroed just before its scatter (see
    codegen/cpp/scatter.py), while it is in cache. An index out of the plane adds nothing
    (eager skips -1). On channels-last data the channels run innermost, as in eager's
    channels-last kernel; each channel still sees its outputs in order.
    """
    dtype = node_dtype(node)
    size = node_size(node)
    if (
        not is_cpp_table(ctx.lowerings)
        or dtype not in SCATTER_DTYPES
        or indices.dtype not in INDEX_DTYPES
        or len(size) not in (3, 4)
        or tuple(grad.size) != tuple(indices.size)
    ):
        return None
    in_h, in_w = (int(s) for s in size[-2:])
    plane = in_h * in_w
    lead = tuple(size[:-2])
    check = IndexCheck("max_pool2d_with_indices_backward", len(size) - 2)
    gradient, argmax = grad.loader, indices.loader
    val = node_val(node)
    if (
        len(size) == 4
        and not val.is_contiguous()
        and val.is_contiguous(memory_format=torch.channels_last)
    ):
        n, c = (int(s) for s in lead)
        layout = Layout(dtype, (*lead, sympy.Integer(plane)), (plane * c, 1, c))
        view = Layout(dtype, size, (plane * c, 1, in_w * c, c))
        ranges = (lead[0], *grad.size[-2:], lead[1])

        def order(u):  # (n, oh, ow, c) -> (n, c, oh, ow)
            return (u[0], u[3], u[1], u[2])
    else:
        layout = Layout.contiguous(dtype, (*lead, sympy.Integer(plane)))
        view = Layout.contiguous(dtype, size)
        ranges = tuple(grad.size)

        def order(u):
            return tuple(u)

    def target(u):
        at = order(u)
        offset = Target(cast(argmax(at), torch.int64), check, skip_out_of_range=True)
        return (*at[:-2], offset)

    def value(u):
        return cast(gradient(order(u)), dtype)

    body = Scatter(lambda idx: const(0, dtype), ranges, target, value, True)
    stored = scatter_buffer(ctx, node, body, layout)
    return TensorValue.of_buffer(stored.view.buffer, view)


@register_lowering(aten.avg_pool2d.default)
def avg_pool2d(
    ctx,
    node,
    x,
    kernel_size,
    stride=(),
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    kernel, stride, padding, dilation = _pool_params(kernel_size, stride, padding, 1)
    size = node_size(node)
    args = (x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    if kernel[0] * kernel[1] > MAX_WINDOW or not _static_sizes(x.size, size):
        return ctx.fallback(node, args, {})
    dtype = node_dtype(node)
    compute = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    window = Window(x.size, size, kernel, stride, padding, dilation)

    def load(idx):
        total = None
        for h, w, cond in window.points(idx):
            v = _point_value(x, idx, h, w, cond, 0, compute)
            total = v if total is None else op("add", total, v, dtype=compute)
        divisor = _divisor(idx, window, count_include_pad, divisor_override, compute)
        return cast(op("truediv", total, divisor, dtype=compute), dtype)

    return TensorValue(dtype, size, load)


def _divisor(idx, window: Window, count_include_pad, divisor_override, dtype):
    """Eager's divisor: the override, or the window clipped to the padded (or real) input."""
    if divisor_override:
        return const(divisor_override, dtype)
    counts = []
    for d, position in enumerate(idx[-2:]):
        size = (window.in_h, window.in_w)[d]
        start = position * window.stride[d] - window.padding[d]
        end = sympy.Min(start + window.kernel[d], size + window.padding[d])
        if not count_include_pad:
            start, end = sympy.Max(start, 0), sympy.Min(end, size)
        counts.append(end - start)
    pool = counts[0] * counts[1]
    return cast(_index(pool), dtype)
