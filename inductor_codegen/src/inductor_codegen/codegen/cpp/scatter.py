"""C++ for a scatter kernel (`lowering.scatter.Scatter`): a fill pass, then a scatter pass.

The fill pass writes the base (zeros, or the input scattered into) over the
whole output, in parallel. The scatter pass loops over the update space:

* free dims (an update dim that is itself an output coordinate: distinct
  values, distinct outputs) outside, then the indexed dims, then the last
  update dim inside when it is free (the contiguous row of an embedding
  gradient: a vector loop);
* it runs in parallel over the first free dim, or, when the only free dim is
  the innermost one, over slices of it (one slice per thread). Either way no
  two threads touch one output element, so accumulation needs no atomics and
  adds in the serial order (deterministic). With no free dim it is serial.

A loaded index is loaded and checked in the loop of the last update dim it
depends on (an embedding row's index once per row, not per element).
"""

from __future__ import annotations

import sympy

from inductor_codegen.codegen.cpp.kernel import (
    STATUS_PARAM,
    KernelCodegen,
    Scope,
    cast_text,
    index_symbols,
    parallel_clause,
)
from inductor_codegen.indexing import c_index, numel
from inductor_codegen.lowering.scatter import Scatter, Target
from inductor_codegen.scheduler import inner_vars

__all__ = ["scatter_kernel_lines"]

# Threads' slices of a vector loop start at multiples of this many elements.
SLICE_ALIGN = 16


def scatter_kernel_lines(codegen: KernelCodegen, name: str) -> list[str]:
    """The body of the kernel computing scatter buffer `name`."""
    return _fill_lines(codegen, name) + _scatter_lines(codegen, name)


def _loop(var, extent, pad) -> str:
    return f"{pad}for (int64_t {var} = 0; {var} < {c_index(extent)}; ++{var}) {{"


def _fill_lines(codegen: KernelCodegen, name: str) -> list[str]:
    buf = codegen.buffers[name]
    body: Scatter = buf.body
    sizes = buf.layout.size
    xs = inner_vars("x", len(sizes))
    lines = []
    clause = parallel_clause(numel(sizes))
    for depth, (var, extent) in enumerate(zip(xs, sizes)):
        pad = "  " * (1 + depth)
        if depth == 0 and clause is not None:
            lines.append(f"{pad}#pragma omp parallel for{clause}")
        elif depth == len(sizes) - 1:
            lines.append(f"{pad}#pragma GCC ivdep")
        lines.append(_loop(var, extent, pad))
    scope = Scope(codegen, None, 1 + len(sizes))
    base = body.base(xs)
    codegen.store(scope, name, buf.layout.index(xs), scope.value(base), base.dtype)
    lines += scope.lines
    lines += ["  " * (1 + d) + "}" for d in reversed(range(len(sizes)))]
    return lines


def _scatter_lines(codegen: KernelCodegen, name: str) -> list[str]:
    buf = codegen.buffers[name]
    body: Scatter = buf.body
    us = inner_vars("u", len(body.ranges))
    target = body.target(us)
    free = {c for c in target if isinstance(c, sympy.Symbol) and c in us}
    last = us[-1] if us and us[-1] in free else None
    order = [u for u in us if u in free and u is not last]
    order += [u for u in us if u not in free]
    order += [last] if last is not None else []
    extent = dict(zip(us, body.ranges))
    work = numel(body.ranges)
    parallel = parallel_clause(work) is not None and bool(free)
    sliced = parallel and order[0] not in free - {last}
    lines: list[str] = []
    depth0 = 1
    if sliced:
        lines += _slice_header(c_index(extent[last]), work)
        depth0 = 2
    scopes: list[Scope] = []
    headers: list[list[str]] = []
    parent = None
    for depth, var in enumerate(order):
        pad = "  " * (depth0 + depth)
        header = []
        if depth == 0 and parallel and not sliced:
            header.append(f"{pad}#pragma omp parallel for{parallel_clause(work)}")
        if var is last:
            header.append(f"{pad}#pragma GCC ivdep")
            start, stop = ("ember_lo", "ember_hi") if sliced else ("0", c_index(extent[var]))
            header.append(f"{pad}for (int64_t {var} = {start}; {var} < {stop}; ++{var}) {{")
        else:
            header.append(_loop(var, extent[var], pad))
        headers.append(header)
        parent = Scope(codegen, parent, depth0 + depth + 1)
        scopes.append(parent)
    inner = scopes[-1] if scopes else Scope(codegen, None, depth0)
    coords = [
        _checked(codegen, scopes or [inner], order, c, buf.layout.size[d])
        if isinstance(c, Target)
        else c
        for d, c in enumerate(target)
    ]
    value = body.value(us)
    text = inner.value(value)
    if value.dtype != buf.layout.dtype:
        text = cast_text(text, value.dtype, buf.layout.dtype)
    pointer = codegen.pointer(name, writing=True)
    operator = "+=" if body.accumulate else "="
    inner.line(f"{pointer}[{c_index(buf.layout.index(tuple(coords)))}] {operator} {text};")
    for header, scope in zip(headers, scopes):
        lines += header + scope.lines
    if not scopes:
        lines += inner.lines
    lines += ["  " * (depth0 + d) + "}" for d in reversed(range(len(order)))]
    if sliced:
        lines.append("  }")
    return lines


def _slice_header(size: str, work) -> list[str]:
    """An OpenMP region where each thread owns [ember_lo, ember_hi) of the innermost dim."""
    clause = parallel_clause(work)
    return [
        f"  #pragma omp parallel{clause}",
        "  {",
        "    const int64_t ember_threads = omp_get_num_threads();",
        f"    const int64_t ember_slice = (({size} + ember_threads - 1) / ember_threads"
        f" + {SLICE_ALIGN - 1}) / {SLICE_ALIGN} * {SLICE_ALIGN};",
        f"    const int64_t ember_lo = std::min<int64_t>({size},"
        " omp_get_thread_num() * ember_slice);",
        f"    const int64_t ember_hi = std::min<int64_t>({size}, ember_lo + ember_slice);",
    ]


def _checked(codegen: KernelCodegen, scopes, order, coord: Target, size) -> sympy.Symbol:
    """The checked offset of a loaded coordinate, in the loop of the last dim it reads."""
    used = index_symbols(coord.offset)
    depth = max((order.index(v) for v in used if v in order), default=0)
    scope = scopes[depth] if depth < len(scopes) else scopes[-1]
    offset = scope.value(coord.offset)
    bound = c_index(sympy.sympify(size))
    if coord.wrap_negative:
        offset = f"({offset} < 0 ? {offset} + {bound} : {offset})"
    number = codegen.index_check(coord.check)
    var = codegen.new_temp()
    scope.line(
        f"const int64_t {var} = ember_checked_index({offset}, {bound}, {STATUS_PARAM}, {number});"
    )
    return sympy.Symbol(var, integer=True)
