"""Column partials in row kernels: a norm's backward from one read of its inputs.

A layer norm's (or RMS norm's) backward over [M, N] has two kinds of reductions over
the same values: per row (sum over N of dy * w and of dy * w * xhat, for dx) and per
column (sum over M of dy * xhat and of dy, for dweight and dbias). Scheduled apart they
are two kernels that both read dy and x. This pass moves the column sums into the row
kernel as partials:

    row kernel   program p runs rows [p * rows, (p + 1) * rows): dx as before, and for
                 each column sum a [1, N] accumulator of its value over those rows,
                 stored as partials[p, :] ([S, N] float32, S = ceil(M / rows))
    final        the column sum over the S partials (a small reduction)

so dy and x are read once. It applies to a kernel whose nodes are column sums over the
rows of an earlier row kernel (outer loops over M, every inner loop over the same N,
short enough for one block), whose values read nothing computed from that row kernel
on, either whole or already split into chunk partials (`lowering.split`, re-chunked
here to the row kernel's rows). The partial buffer's body is the exact chunk sum, so
the IR says what it holds; the code generator that honours `FusedKernel.column_partials`
computes it inside the row kernel.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

import sympy
import torch

from inductor_codegen.indexing import numel
from inductor_codegen.ir import ComputedBuffer, IndexValue, Layout, Load, Op, Reduction, expr_loads
from inductor_codegen.lowering.common import const, op
from inductor_codegen.lowering.split import REDUCTION_MASK
from inductor_codegen.scheduler import (
    FusedKernel,
    LoopGroup,
    Schedule,
    inner_vars,
    outer_vars,
    squeeze_ranges,
    unsqueeze_index,
    writes_in_place,
)

__all__ = [
    "ColumnPartialPolicy",
    "active_column_partial_policy",
    "column_partial_policy",
    "column_partials",
]


@dataclass(frozen=True, slots=True)
class ColumnPartialPolicy:
    """`max_row`: the longest row a row kernel holds in one block (longer rows loop, and
    a [1, N] accumulator per column sum would not fit). `programs`: about how many
    programs the row kernel runs (rows per program = ceil(M / programs)); `min_rows`:
    fewer rows per program than this save too little over a separate column kernel."""

    enabled: bool = True
    max_row: int = 4096
    programs: int = 1024
    min_rows: int = 4


_POLICY: ContextVar[ColumnPartialPolicy | None] = ContextVar(
    "ember_column_partial_policy", default=None
)


@contextmanager
def column_partial_policy(policy: ColumnPartialPolicy) -> Iterator[None]:
    """Compile with `policy` (instead of the driver's default) inside the block;
    `ColumnPartialPolicy(enabled=False)` keeps column sums in their own kernels."""
    token = _POLICY.set(policy)
    try:
        yield
    finally:
        _POLICY.reset(token)


def active_column_partial_policy() -> ColumnPartialPolicy | None:
    return _POLICY.get()


@dataclass(frozen=True, slots=True)
class _ColumnSum:
    """A column sum node: its value at row m, column n (`value(m, n)`), its rows."""

    name: str
    rows: int
    columns: int
    value: object
    partial_of: str | None  # the split partial it replaces, if it was split


def column_partials(plan: Schedule, buffers: dict, policy: ColumnPartialPolicy) -> Schedule:
    """The schedule with column sums computed as partials inside row kernels.

    `buffers` (name -> buffer) gains the partial buffers and the new final reductions.
    """
    if not policy.enabled:
        return plan
    steps = list(plan.steps)
    done: set[str] = set()
    while True:
        fused = _fuse_one(steps, buffers, policy, done)
        if fused is None:
            return Schedule(tuple(steps), plan.buffers)
        steps = fused


def _fuse_one(steps, buffers, policy, done) -> list | None:
    """The steps with the first column sum kernel not in `done` that can move into a row
    kernel moved there; None when there is none left."""
    readers = _readers(steps, buffers)
    for position, step in enumerate(steps):
        if not isinstance(step, FusedKernel) or step.name in done:
            continue
        done.add(step.name)
        sums = _column_sums(step, buffers, steps, position, readers)
        if not sums:
            continue
        rows, columns = sums[0].rows, sums[0].columns
        per_program = -(-rows // policy.programs)
        if per_program < policy.min_rows or columns > policy.max_row:
            continue
        if any((s.rows, s.columns) != (rows, columns) for s in sums):
            continue
        dropped = {s.partial_of for s in sums if s.partial_of}
        partial_steps = [k for k, other in enumerate(steps) if _produces(other, dropped)]
        if any(not set(steps[k].nodes) <= dropped for k in partial_steps):
            continue  # the split partials share their kernel with other nodes
        start = min([position, *partial_steps])
        row_at = _row_kernel_before(steps, start, rows, columns, sums, buffers)
        if row_at is None:
            row_at = _row_kernel_after(steps, start, position, rows, columns, sums, buffers)
        if row_at is None:
            continue
        splits = -(-rows // per_program)
        partials = []
        for s in sums:
            partial = _partial_buffer(s, splits, per_program)
            buffers[partial.name] = partial
            buffers[s.name] = _final_buffer(buffers[s.name], partial, splits)
            partials.append(partial.name)
        row = replace(steps[row_at], column_partials=tuple(partials), rows_per_program=per_program)
        final = _with_final_ranges(step, splits)
        result = []
        for k, other in enumerate(steps):
            if k == row_at:
                result += [row, final] if row_at > position else [row]
            elif k == position:
                result += [final] if row_at < position else []
            elif k not in partial_steps:
                result.append(other)
        return result
    return None


def _readers(steps, buffers) -> dict[str, set[int]]:
    result: dict[str, set[int]] = {}
    for k, step in enumerate(steps):
        if isinstance(step, FusedKernel):
            for name in step.nodes:
                for read in _reads(buffers[name]):
                    result.setdefault(read, set()).add(k)
        else:
            for read in getattr(step, "reads", ()):
                result.setdefault(read, set()).add(k)
    return result


def _reads(buf) -> set[str]:
    body = buf.body
    if isinstance(body, Reduction):
        zeros = tuple(sympy.Integer(0) for _ in body.ranges)
        rs = inner_vars("r", len(body.reduction_ranges))
        return {ld.buffer for ld in expr_loads(body.loader(zeros, rs))}
    zeros = tuple(sympy.Integer(0) for _ in body.ranges)
    return {ld.buffer for ld in expr_loads(body.loader(zeros))}


def _produces(step, names) -> bool:
    if step is None or not names:
        return False
    if isinstance(step, FusedKernel):
        return bool(set(step.nodes) & names)
    return step.name in names


def _is_sum(buf) -> bool:
    return (
        isinstance(buf, ComputedBuffer)
        and isinstance(buf.body, Reduction)
        and buf.body.reduction_type == "sum"
        and buf.layout.dtype.is_floating_point
        and buf.stored_into is None
    )


def _static_1d(ranges) -> int | None:
    squeezed = squeeze_ranges(ranges)
    if len(squeezed) != 1 or not isinstance(squeezed[0], sympy.Integer):
        return None
    return int(squeezed[0])


def _column_sums(step: FusedKernel, buffers, steps, position, readers) -> list[_ColumnSum]:
    """The column sums of `step`, or none: its one loop group must hold nothing else (the
    outer level may hold what is computed from them, a cast to the weight's dtype)."""
    groups = [item for item in step.items if isinstance(item, LoopGroup)]
    if len(groups) != 1 or groups[0].kind != "reduction" or step.items[0] is not groups[0]:
        return []
    result = []
    for name in groups[0].nodes:
        buf = buffers[name]
        if not _is_sum(buf):
            return []
        found = _split_sum(name, buf, buffers, readers, position) or _whole_sum(name, buf)
        if found is None:
            return []
        result.append(found)
    return result


def _whole_sum(name: str, buf) -> _ColumnSum | None:
    """A sum over one dim of M rows into N columns, its value at (m, n)."""
    body = buf.body
    columns, rows = _static_1d(body.ranges), _static_1d(body.reduction_ranges)
    if columns is None or rows is None:
        return None

    def value(m, n):
        return body.loader(
            unsqueeze_index(body.ranges, (n,)), unsqueeze_index(body.reduction_ranges, (m,))
        )

    if not _along_columns(value):
        return None
    return _ColumnSum(name, rows, columns, value, None)


def _split_sum(name: str, buf, buffers, readers, position) -> _ColumnSum | None:
    """A final reduction over the chunk partials of a split column sum (partials first)."""
    body = buf.body
    columns, splits = _static_1d(body.ranges), _static_1d(body.reduction_ranges)
    if columns is None or splits is None:
        return None
    zeros = tuple(sympy.Integer(0) for _ in body.ranges)
    loads = expr_loads(body.loader(zeros, (sympy.Integer(0),)))
    if len(loads) != 1 or not isinstance(buffers.get(loads[0].buffer), ComputedBuffer):
        return None
    partial = buffers[loads[0].buffer]
    if not _is_sum(partial) or readers.get(partial.name, set()) - {position}:
        return None
    pbody = partial.body
    pranges = squeeze_ranges(pbody.ranges)
    chunk = _static_1d(pbody.reduction_ranges)
    if chunk is None or len(pranges) != 2 or pranges[0] != splits or pranges[1] != columns:
        return None

    def raw(m, n):
        first = unsqueeze_index(pbody.ranges, (sympy.Integer(0), n))
        return pbody.loader(first, unsqueeze_index(pbody.reduction_ranges, (m,)))

    probe = raw(*_probe_vars())
    rows = splits * chunk
    if isinstance(probe, Op) and probe.name == REDUCTION_MASK:
        limit = probe.args[0].args[1]
        rows = int(limit.value)

    def value(m, n):
        v = raw(m, n)
        return v.args[1] if isinstance(v, Op) and v.name == REDUCTION_MASK else v

    if not _along_columns(value):
        return None
    return _ColumnSum(name, rows, columns, value, partial.name)


def _probe_vars():
    return outer_vars(1)[0], inner_vars("r", 1)[0]


def _along_columns(value) -> bool:
    """Whether some load of the value runs along the columns (else nothing is shared)."""
    m, n = _probe_vars()
    indices = [sympy.expand(ld.index) for ld in expr_loads(value(m, n))]
    return any(i.coeff(n) == 1 for i in indices)


def _wanted(sums) -> set[str]:
    m, n = _probe_vars()
    wanted = set()
    for s in sums:
        wanted |= {ld.buffer for ld in expr_loads(s.value(m, n))}
    return wanted


def _is_row_kernel(step, rows, columns, buffers, wanted) -> bool:
    """A kernel over M rows whose every inner loop runs over the N columns, reading some
    of what the column sums read."""
    if not isinstance(step, FusedKernel) or step.column_partials:
        return False
    groups = [i for i in step.items if isinstance(i, LoopGroup)]
    return (
        bool(groups)
        and numel(step.outer) == rows
        and all(_static_1d(g.ranges) == columns for g in groups)
        and _shares_reads(step, buffers, wanted)
    )


def _row_kernel_before(steps, start, rows, columns, sums, buffers) -> int | None:
    """The latest row kernel before `start` with nothing the column sums read computed
    (or written in place) at or after it."""
    wanted = _wanted(sums)
    for k in range(start - 1, -1, -1):
        step = steps[k]
        if _writes(step, buffers) & wanted:
            return None
        if _is_row_kernel(step, rows, columns, buffers, wanted):
            return k
    return None


def _row_kernel_after(steps, start, position, rows, columns, sums, buffers) -> int | None:
    """The first row kernel after `position` (an RMS norm's weight gradient is scheduled
    before its input gradient) with nothing from `start` (the column sums' first step) up
    to it writing what they read in place, nor from `position` on reading their results."""
    wanted = _wanted(sums)
    results = set(steps[position].nodes)
    if any(_writes(steps[k], buffers) & wanted for k in range(start + 1, position)):
        return None
    for k in range(position + 1, len(steps)):
        step = steps[k]
        if _step_reads(step, buffers) & results or _writes(step, buffers) & wanted:
            return None
        if _is_row_kernel(step, rows, columns, buffers, wanted):
            return k
    return None


def _step_reads(step, buffers) -> set[str]:
    if isinstance(step, FusedKernel):
        return set().union(*(_reads(buffers[name]) for name in step.nodes))
    return set(getattr(step, "reads", ()))


def _writes(step, buffers) -> set[str]:
    """What a step writes: its buffers, the inputs it stores into, and for an ATen call
    that mutates (its schema says so) everything it reads."""
    if isinstance(step, FusedKernel):
        names = set(step.nodes)
        return names | {buffers[n].stored_into for n in names if buffers[n].stored_into}
    mutates = writes_in_place(step, buffers)
    return {step.name} | (set(getattr(step, "reads", ())) if mutates else set())


def _shares_reads(step: FusedKernel, buffers, wanted) -> bool:
    return any(_reads(buffers[name]) & wanted for name in step.nodes)


def _partial_buffer(s: _ColumnSum, splits: int, rows: int) -> ComputedBuffer:
    """partials[p, n]: the column sum over rows [p * rows, (p + 1) * rows) (float32, or
    float64 for float64 values), masked past the last row."""
    m, n = _probe_vars()
    dtype = torch.float64 if s.value(m, n).dtype == torch.float64 else torch.float32
    ragged = splits * rows != s.rows

    def load(pidx, qidx):
        position = pidx[0] * rows + qidx[0]
        value = s.value(position, pidx[1])
        if not ragged:
            return value
        inside = op(
            "lt", IndexValue(position, torch.int64), const(s.rows, torch.int64), dtype=torch.bool
        )
        return Op(REDUCTION_MASK, (inside, value), value.dtype)

    ranges = (sympy.Integer(splits), sympy.Integer(s.columns))
    return ComputedBuffer(
        f"{s.name}_rowpart",
        Layout.contiguous(dtype, ranges),
        Reduction(ranges, (sympy.Integer(rows),), "sum", load),
    )


def _final_buffer(buf: ComputedBuffer, partial: ComputedBuffer, splits: int) -> ComputedBuffer:
    """The column sum over the partials, in the buffer's own layout and name."""
    body = buf.body
    playout = partial.layout

    def load(idx, sidx):
        column = squeeze_index(body.ranges, idx)
        return Load(partial.name, playout.index((sidx[0], column)), playout.dtype)

    return replace(buf, body=Reduction(body.ranges, (sympy.Integer(splits),), "sum", load))


def squeeze_index(ranges, idx):
    """The one index of `idx` over a non-1 entry of `ranges`."""
    return next(i for r, i in zip(ranges, idx) if r != 1)


def _with_final_ranges(step: FusedKernel, splits: int) -> FusedKernel:
    group = replace(step.items[0], ranges=(sympy.Integer(splits),))
    return replace(step, items=(group, *step.items[1:]))
