"""Row buffers: a value a kernel computes over a whole row and reads back in later
passes over that row, kept in an array on the stack instead of a full-size buffer.

A layer norm over a summed embedding is one kernel whose outer loop runs over the
tokens; per token it computes the sum into a buffer, then reads it three times (the
mean, the variance, the normalized output). Nothing else reads the sum, yet a buffer
of every token's row (3 MB at hidden size 768) would be written and read back:

    for (x0 = 0; x0 < 1024; ++x0) {
      float buf0_row[768];                       // one row, per thread, in L1
      for (y0 ...) buf0_row[y0] = W[ids[x0]*768 + y0] + P[pos[x0]*768 + y0];
      for (r0 ...) acc0 += buf0_row[r0];
      for (r0 ...) acc1 += (buf0_row[r0] - mean) * (buf0_row[r0] - mean);
      for (y0 ...) out[x0*768 + y0] = (buf0_row[y0] - mean) * rstd * w[y0] + b[y0];
    }

A buffer qualifies when no other step reads it and the graph does not return it
(`FusedKernel.kernel_only`), it is computed in a loop group whose stores fill one
contiguous row per outer iteration (the store index is an offset of the outer
variables plus the row-major index of the group's loop), and every read of it in
the kernel lands, for every value of the reader's loop variables, inside that row
of the same outer iteration. The array holds the storage type, so a value read back
is rounded exactly as one read from memory. Rows are static and at most
ROW_BUFFER_MAX_BYTES in all (the stack of each thread holds one of each).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
import torch

from inductor_codegen.codegen.cpp.ops import STORAGE_TYPES
from inductor_codegen.indexing import contiguous_strides, flat_index, numel
from inductor_codegen.ir import expr_loads
from inductor_codegen.scheduler import LoopGroup, inner_vars, node_body, outer_vars

__all__ = ["ROW_BUFFER_MAX_BYTES", "RowBuffer", "row_buffers"]

# Bytes of the rows one kernel keeps on each thread's stack: 16K floats.
ROW_BUFFER_MAX_BYTES = 65536


@dataclass(frozen=True, slots=True)
class RowBuffer:
    """A buffer kept per row: element i of the row of the outer iteration at `base`
    (its store index with the group's loop variables at 0) is `{name}_row[i]`."""

    name: str
    base: sympy.Expr
    elements: int
    dtype: torch.dtype

    @property
    def array(self) -> str:
        return f"{self.name}_row"

    def declaration(self) -> str:
        return f"alignas(64) {STORAGE_TYPES[self.dtype]} {self.array}[{self.elements}];"

    def local_index(self, index) -> sympy.Expr:
        return sympy.expand(index - self.base)


def row_buffers(kernel, buffers: dict) -> dict[str, RowBuffer]:
    """The buffers of `kernel` (a FusedKernel whose items run in its outer loop body)
    kept in a row array; see the module docstring for the rule."""
    outer = kernel.outer
    xs = frozenset(outer_vars(len(outer)))
    group_of: dict[str, LoopGroup] = {}
    for item in kernel.items:
        if isinstance(item, LoopGroup):
            for name in item.nodes:
                group_of[name] = item
    candidates: dict[str, RowBuffer] = {}
    for name in sorted(kernel.kernel_only - kernel.locals_):
        group = group_of.get(name)
        if group is None or group.kind != "pointwise":
            continue
        if getattr(buffers[name], "stored_into", None) is not None:
            continue  # an input's new value, written into its memory
        row = _row(name, buffers[name], outer, group, xs)
        if row is not None:
            candidates[name] = row
    if not candidates:
        return {}
    # Every read of a candidate lands in the row the same outer iteration stored.
    for other in kernel.nodes:
        group = group_of.get(other)
        prefix = "r" if group is not None and group.kind == "reduction" else "y"
        value = node_body(buffers[other], outer, prefix)[0]
        ranges = group.ranges if group is not None else ()
        bounds = dict(zip(inner_vars(prefix, len(ranges)), ranges))
        for load in expr_loads(value):
            row = candidates.get(load.buffer)
            if row is not None and not _inside(row, load.index, bounds):
                del candidates[load.buffer]
    kept, total = {}, 0
    for name, row in candidates.items():
        size = row.elements * buffers[name].layout.dtype.itemsize
        if total + size <= ROW_BUFFER_MAX_BYTES:
            kept[name] = row
            total += size
    return kept


def _row(name, buf, outer, group: LoopGroup, xs) -> RowBuffer | None:
    """The row of a buffer stored in pointwise `group`, or None where its stores do not
    fill one contiguous row per outer iteration."""
    dtype = buf.layout.dtype
    if dtype not in STORAGE_TYPES or not all(size.is_Integer for size in group.ranges):
        return None
    elements = int(numel(group.ranges))
    if elements <= 0 or elements * dtype.itemsize > ROW_BUFFER_MAX_BYTES:
        return None
    body = node_body(buf, outer, "y")
    if body is None:
        return None
    ys = inner_vars("y", len(group.ranges))
    store = sympy.expand(body[1])
    base = sympy.expand(store.xreplace(dict.fromkeys(ys, sympy.Integer(0))))
    if not base.free_symbols <= xs:
        return None
    row_major = sympy.expand(flat_index(ys, contiguous_strides(group.ranges)))
    if sympy.expand(store - base - row_major) != 0:
        return None
    return RowBuffer(name, base, elements, dtype)


def _inside(row: RowBuffer, index, bounds: dict) -> bool:
    """Whether `index` minus the row's base lies in [0, elements) for every value of the
    loop variables in `bounds` (var -> extent): a sum of nonnegative integer multiples
    of those variables and a constant."""
    local = row.local_index(index)
    if not local.free_symbols <= bounds.keys():
        return False
    poly = local.as_poly(*bounds) if bounds else None
    if bounds and (poly is None or poly.total_degree() > 1):
        return False
    low = local.xreplace(dict.fromkeys(bounds, sympy.Integer(0)))
    if not low.is_Integer or int(low) < 0:
        return False
    high = int(low)
    for var, extent in bounds.items():
        coefficient = local.coeff(var)
        if not coefficient.is_Integer or int(coefficient) < 0 or not extent.is_Integer:
            return False
        high += int(coefficient) * (int(extent) - 1)
    return high < row.elements
