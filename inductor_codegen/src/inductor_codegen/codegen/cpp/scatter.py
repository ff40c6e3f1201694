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
    MIN_PARALLEL_ITERATIONS,
    STATUS_PARAM,
    KernelCodegen,
    Scope,
    cast_text,
    index_symbols,
    parallel_clause,
)
from inductor_codegen.codegen.kernel import row_major_coordinates
from inductor_codegen.indexing import c_index, numel
from inductor_codegen.lowering.scatter import Scatter, Target
from inductor_codegen.scheduler import inner_vars

__all__ = ["scatter_kernel_lines"]

# Threads' slices of a vector loop start at multiples of this many elements.
SLICE_ALIGN = 16


def scatter_kernel_lines(codegen: KernelCodegen, name: str) -> list[str]:
    """The body of the kernel computing scatter buffer `name`."""
    body: Scatter = codegen.buffers[name].body
    us = inner_vars("u", len(body.ranges))
    if _slab_dims(codegen.buffers[name], us, _loop_order(body, us)):
        return _scatter_lines(codegen, name)
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


def _loop_order(body: Scatter, us) -> tuple[list, set, sympy.Symbol | None]:
    """(the update dims' loops, outermost first; the free dims; the innermost dim when
    it is free, else None)."""
    target = body.target(us)
    free = {c for c in target if isinstance(c, sympy.Symbol) and c in us}
    last = us[-1] if us and us[-1] in free else None
    order = [u for u in us if u in free and u is not last]
    order += [u for u in us if u not in free]
    order += [last] if last is not None else []
    return order, free, last


def _slab_dims(buf, us, loop_order) -> dict:
    """The leading loops of the scatter pass that each run one output dim over its whole
    size ({loop variable: output dim}). Their iteration owns the slab of the output
    those dims fix (no other iteration writes it): the slab is filled there, just before
    its scatter, while it is in cache (a plane of max pooling's gradient), not in a
    pass of its own over the whole output. Empty where there is no such loop."""
    order, free, last = loop_order
    target = buf.body.target(us)
    extent = dict(zip(us, buf.body.ranges))
    dims: dict = {}
    for var in order:
        if var not in free or var is last:
            break
        at = [d for d, c in enumerate(target) if isinstance(c, sympy.Symbol) and c == var]
        if len(at) != 1 or sympy.sympify(extent[var] - buf.layout.size[at[0]]) != 0:
            break
        dims[var] = at[0]
    if not all(sympy.sympify(s).is_Integer for s in buf.layout.stride):
        return {}
    return dims


def _fill_slab(codegen: KernelCodegen, name: str, scope: Scope, slab: dict) -> None:
    """In `scope` (the body of the last slab loop), the loops filling the slab with the
    base, the output dims the slab leaves free running in decreasing order of stride."""
    buf = codegen.buffers[name]
    sizes, strides = buf.layout.size, buf.layout.stride
    rest = sorted(
        (d for d in range(len(sizes)) if d not in slab.values()), key=lambda d: -int(strides[d])
    )
    xs = inner_vars("x", len(rest))
    coords = [None] * len(sizes)
    for var, d in slab.items():
        coords[d] = var
    for d, var in zip(rest, xs):
        coords[d] = var
    for k, (d, var) in enumerate(zip(rest, xs)):
        if k == len(rest) - 1:
            scope.line("#pragma GCC ivdep")
        scope.line(f"for (int64_t {var} = 0; {var} < {c_index(sizes[d])}; ++{var}) {{")
        scope.indent += 1
    inner = Scope(codegen, scope, scope.indent)
    base = buf.body.base(tuple(coords))
    codegen.store(inner, name, buf.layout.index(tuple(coords)), inner.value(base), base.dtype)
    scope.lines.extend(inner.lines)
    for _ in rest:
        scope.indent -= 1
        scope.line("}")


def _scatter_lines(codegen: KernelCodegen, name: str) -> list[str]:
    buf = codegen.buffers[name]
    body: Scatter = buf.body
    us = inner_vars("u", len(body.ranges))
    target = body.target(us)
    order, free, last = loop_order = _loop_order(body, us)
    slab = _slab_dims(buf, us, loop_order)
    extent = dict(zip(us, body.ranges))
    work = numel(body.ranges)
    parallel = parallel_clause(work) is not None and bool(free)
    sliced = parallel and order[0] not in free - {last}
    # The slab loops as one loop when the first has too few iterations for the threads.
    collapsed = (
        len(slab) > 1
        and parallel
        and not sliced
        and sympy.sympify(extent[order[0]]).is_Integer
        and int(extent[order[0]]) < MIN_PARALLEL_ITERATIONS
    )
    # NOTE: a loaded coordinate that varies along the innermost loop (a channels-last
    # max pool's argmax, one per channel) scatters within it: no ivdep there, or gcc
    # vectorizes it with AVX-512 scatters, microcoded on AMD (10x slower than scalar).
    scattered_along_last = last is not None and any(
        isinstance(c, Target) and last in index_symbols(c.offset) for c in target
    )
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
        if collapsed and depth < len(slab):
            header += _collapsed_header(order[: len(slab)], extent, pad) if depth == 0 else []
        elif var is last:
            if not scattered_along_last:
                header.append(f"{pad}#pragma GCC ivdep")
            start, stop = ("ember_lo", "ember_hi") if sliced else ("0", c_index(extent[var]))
            header.append(f"{pad}for (int64_t {var} = {start}; {var} < {stop}; ++{var}) {{")
        else:
            header.append(_loop(var, extent[var], pad))
        headers.append(header)
        parent = Scope(codegen, parent, depth0 + depth + 1)
        scopes.append(parent)
    if slab:
        _fill_slab(codegen, name, scopes[len(slab) - 1], slab)
    inner = scopes[-1] if scopes else Scope(codegen, None, depth0)
    coords, conditions = [], []
    for d, c in enumerate(target):
        if isinstance(c, Target):
            var, condition = _checked(codegen, scopes or [inner], order, c, buf.layout.size[d])
            coords.append(var)
            conditions += [condition] if condition else []
        else:
            coords.append(c)
    value = body.value(us)
    text = inner.value(value)
    if value.dtype != buf.layout.dtype:
        text = cast_text(text, value.dtype, buf.layout.dtype)
    pointer = codegen.pointer(name, writing=True)
    operator = "+=" if body.accumulate else "="
    store = f"{pointer}[{c_index(buf.layout.index(tuple(coords)))}] {operator} {text};"
    if conditions:
        store = f"if ({' && '.join(conditions)}) {store}"
    inner.line(store)
    for header, scope in zip(headers, scopes):
        lines += header + scope.lines
    if not scopes:
        lines += inner.lines
    closed = [d for d in range(len(order)) if not (collapsed and 0 < d < len(slab))]
    lines += ["  " * (depth0 + d) + "}" for d in reversed(closed)]
    if sliced:
        lines.append("  }")
    return lines


def _collapsed_header(loops, extent, pad) -> list[str]:
    """One loop over the iterations of `loops` (whole dims from 0), their variables
    computed from its counter."""
    names = "_".join(var.name for var in loops)
    sizes = [extent[var] for var in loops]
    header = [f"{pad}for (int64_t {names} = 0; {names} < {c_index(numel(sizes))}; ++{names}) {{"]
    for var, (quotient, size) in zip(loops, row_major_coordinates(names, sizes, c_index, "/")):
        value = quotient if size is None else f"{quotient} % {size}"
        header.append(f"{pad}  const int64_t {var} = {value};")
    return header


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


def _checked(
    codegen: KernelCodegen, scopes, order, coord: Target, size
) -> tuple[sympy.Symbol, str | None]:
    """The checked offset of a loaded coordinate, in the loop of the last dim it reads,
    and the condition the store needs (an offset that may be out of range and is then
    skipped), or None."""
    used = index_symbols(coord.offset)
    depth = max((order.index(v) for v in used if v in order), default=0)
    scope = scopes[depth] if depth < len(scopes) else scopes[-1]
    offset = scope.value(coord.offset)
    bound = c_index(sympy.sympify(size))
    if coord.wrap_negative:
        offset = f"({offset} < 0 ? {offset} + {bound} : {offset})"
    var = codegen.new_temp()
    if coord.skip_out_of_range:
        scope.line(f"const int64_t {var} = {offset};")
        # one unsigned compare: a negative offset is a large unsigned one
        condition = f"static_cast<uint64_t>({var}) < static_cast<uint64_t>({bound})"
        return sympy.Symbol(var, integer=True), condition
    number = codegen.index_check(coord.check)
    scope.line(
        f"const int64_t {var} = ember_checked_index({offset}, {bound}, {STATUS_PARAM}, {number});"
    )
    return sympy.Symbol(var, integer=True), None
