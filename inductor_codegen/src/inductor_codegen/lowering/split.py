"""Split reductions: a long reduction to few outputs as two reductions.

A reduction with few outputs and many elements per output (batch norm's
statistics over (N, H, W), one value per channel; a loss summed to a scalar)
gives a GPU one program per output: tens of programs for a hundred SMs, each
looping over a long row. Split, it runs as

    partial  [*out, S] (or [S, *out])  each of S chunks of the row reduced apart
    final    [*out]                    the S partials combined

The partial reduction reads the same value as the original one (its fused
pointwise producers included), so the input is read once; the final one reads
S partials per output.

One reduction dim is cut into S chunks of `chunk` elements (the first dim long
enough, so a chunk is a run of whole rows of the others and indices stay linear).
When the chunks do not divide the dim the last one is short: its missing
elements are masked out of the reduction (the `reduction_mask` op below), so
Welford counts stay right. Partials are stored in the compute dtype.

How partials combine:

* sum, prod, max, min, any, all: the same reduction over the partials;
* Welford (var, var_mean): per chunk mean_s and m2_s; then
  mean = sum(n_s * mean_s) / n and m2 = sum(m2_s + n_s * (mean_s - mean) ** 2);
* argmax/argmin: per chunk the extreme value and its index; then the extreme of
  the values, and the smallest global index among the chunks that hold it (NaN
  chunks when it is NaN), as eager picks the first.

Splits are decided from static sizes only (`plan_split`); a graph with symbolic
sizes is not split (a split is always correct, only its speed depends on sizes).
They happen while a `SplitPolicy` is active (`split_reductions`), which the
Triton driver sets; the C++ generator runs one thread per output block and
gets no splits.

`reduction_mask` is an IR op: `Op("reduction_mask", (cond, value))` as the value
of a reduction means "elements where cond is false are not part of it" (they
neither add to a sum nor count in a mean). Only the code generator of the
active policy needs to print it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import sympy
import torch
from sympy import Integer

from inductor_codegen.indexing import numel
from inductor_codegen.ir import IndexValue, Op, TensorValue, expr_loads
from inductor_codegen.lowering.common import cast, const, op

__all__ = [
    "REDUCTION_MASK",
    "SplitPlan",
    "SplitPolicy",
    "active_split_policy",
    "plan_split",
    "split_reduction",
    "split_reductions",
    "split_welford",
]

REDUCTION_MASK = "reduction_mask"
# The final reduction of each family over the partials.
FINAL_REDUCTION = {"sum": "sum", "prod": "prod", "max": "max", "min": "min", "any": "any"}
FINAL_REDUCTION |= {"all": "all"}
SPLITTABLE = frozenset(FINAL_REDUCTION) | {"argmax", "argmin", "welford"}


@dataclass(frozen=True, slots=True)
class SplitPolicy:
    """When a reduction is split, and into how many chunks.

    A reduction runs in about `programs` programs: one per output row, or, for
    a column reduction (loads contiguous along the outputs, see `_is_column`),
    one per `column_block` outputs. Split when every size is static, the rows
    have at least `min_reduction_numel` elements, the input at least
    `min_total_numel` (`min_column_total_numel` for a column reduction: its few
    programs each loop over all rows, so a small one is slow unsplit too: T5's
    norm weight gradients, 512 columns by 1024 rows in 8 programs, took 43 us
    where the split takes two launches of about 5), and there are at most
    `max_programs` programs (about 8
    per SM of an H100, which has 132). The number of chunks S aims at
    `target_programs` programs (`target_column_programs` for a column reduction,
    whose programs each read `column_block` columns), with chunks of at least `min_chunk` elements
    (`min_column_chunk` rows of a column reduction) and at most `max_splits`
    chunks. `enabled=False` turns splits off.
    """

    enabled: bool = True
    min_reduction_numel: int = 1024
    min_total_numel: int = 1 << 20
    min_column_total_numel: int = 1 << 18
    max_programs: int = 1024
    target_programs: int = 2048
    target_column_programs: int = 512
    column_block: int = 64
    min_chunk: int = 1024
    min_column_chunk: int = 32
    max_splits: int = 1024


_POLICY: ContextVar[SplitPolicy | None] = ContextVar("ember_split_policy", default=None)


@contextmanager
def split_reductions(policy: SplitPolicy | None = SplitPolicy()) -> Iterator[None]:
    """Lower with `policy` for split reductions (None: never split) inside the block."""
    token = _POLICY.set(policy)
    try:
        yield
    finally:
        _POLICY.reset(token)


def active_split_policy() -> SplitPolicy | None:
    return _POLICY.get()


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """Reduction dim `dim` cut into `splits` chunks of `chunk`; the partials' split
    position goes first (`outer_first`, column reductions) or last in their ranges."""

    dim: int
    splits: int
    chunk: int
    outer_first: bool

    def ragged(self, reduction_ranges) -> bool:
        return self.splits * self.chunk != int(reduction_ranges[self.dim])


def plan_split(ranges, reduction_ranges, loader, family: str) -> SplitPlan | None:
    """How to split this reduction under the active policy, or None to keep it whole."""
    policy = _POLICY.get()
    if policy is None or not policy.enabled or family not in SPLITTABLE or not reduction_ranges:
        return None
    sizes = (*ranges, *reduction_ranges)
    if not all(isinstance(s, (int, sympy.Integer)) for s in sizes):
        return None
    out, rnumel = int(numel(ranges)), int(numel(reduction_ranges))
    if rnumel < policy.min_reduction_numel:
        return None
    column = _is_column(ranges, reduction_ranges, loader)
    if out * rnumel < (policy.min_column_total_numel if column else policy.min_total_numel):
        return None
    programs = -(-out // policy.column_block) if column else out
    if programs > policy.max_programs:
        return None
    min_chunk = policy.min_column_chunk if column else policy.min_chunk
    target = policy.target_column_programs if column else policy.target_programs
    wanted = min(-(-target // programs), rnumel // min_chunk, policy.max_splits)
    extents = [int(r) for r in reduction_ranges]
    dim = next((d for d, e in enumerate(extents) if e >= wanted), None)
    if dim is None:
        dim = max(range(len(extents)), key=lambda d: extents[d])
    if family in ("argmax", "argmin") and dim != 0:
        return None  # a chunk's local index maps to the global one without division only here
    splits, chunk = _chunks(extents[dim], min(wanted, extents[dim]))
    if splits < 2:
        return None
    return SplitPlan(dim, splits, chunk, column)


def _chunks(extent: int, wanted: int) -> tuple[int, int]:
    """(splits, chunk) cutting `extent` into about `wanted` chunks: an exact divisor near
    `wanted` when there is one, else equal chunks and a shorter last one (none empty)."""
    for delta in range(max(1, wanted // 2) + 1):
        for splits in (wanted - delta, wanted + delta):
            if 2 <= splits <= extent and extent % splits == 0:
                return splits, extent // splits
    chunk = -(-extent // max(wanted, 1))
    return -(-extent // chunk), chunk


def _is_column(ranges, reduction_ranges, loader) -> bool:
    """Whether loads run along the output's last dim and not along the reduction
    (a column reduction): then partials go [S, *out] so they stay contiguous in x."""
    xs = tuple(
        Integer(0) if r == 1 else sympy.Symbol(f"x{k}", integer=True, nonnegative=True)
        for k, r in enumerate(ranges)
    )
    rs = tuple(
        sympy.Symbol(f"r{k}", integer=True, nonnegative=True) for k in range(len(reduction_ranges))
    )
    last_x = next((x for x in reversed(xs) if x != 0), None)
    if last_x is None:
        return False
    indices = [sympy.expand(ld.index) for ld in expr_loads(loader(xs, rs))]
    along_x = any(i.coeff(last_x) == 1 for i in indices)
    # A load along the rows that is the same for every output (a per-token scale of a
    # norm's weight gradient) is one small vector, broadcast over a column tile.
    along_r = any(i.coeff(rs[-1]) == 1 and i.coeff(last_x) != 0 for i in indices)
    return along_x and not along_r


# ---------------------------------------------------------------- building the two reductions


def _partial_ranges(plan: SplitPlan, ranges) -> tuple:
    s = Integer(plan.splits)
    return (s, *ranges) if plan.outer_first else (*ranges, s)


def _outer_and_split(plan: SplitPlan, pidx) -> tuple[tuple, object]:
    """(index into the original ranges, chunk number) of a partial's index."""
    if plan.outer_first:
        return tuple(pidx[1:]), pidx[0]
    return tuple(pidx[:-1]), pidx[-1]


def _partial_index(plan: SplitPlan, idx, s) -> tuple:
    return (s, *idx) if plan.outer_first else (*idx, s)


def _partial_loader(plan: SplitPlan, reduction_ranges, loader):
    """The original value at chunk s, element q of the chunk (masked past the dim's end)."""
    extent = int(reduction_ranges[plan.dim])
    ragged = plan.ragged(reduction_ranges)

    def load(pidx, qidx):
        idx, s = _outer_and_split(plan, pidx)
        position = s * plan.chunk + qidx[plan.dim]
        ridx = (*qidx[: plan.dim], position, *qidx[plan.dim + 1 :])
        value = loader(idx, ridx)
        if not ragged:
            return value
        inside = op(
            "lt",
            IndexValue(position, torch.int64),
            const(extent, torch.int64),
            dtype=torch.bool,
        )
        return Op(REDUCTION_MASK, (inside, value), value.dtype)

    return load


def _partial_reduction_ranges(plan: SplitPlan, reduction_ranges) -> tuple:
    rr = list(reduction_ranges)
    rr[plan.dim] = Integer(plan.chunk)
    return tuple(rr)


def _accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def split_reduction(ctx, plan: SplitPlan, out_dtype, ranges, reduction_ranges, rtype, loader):
    """The reduction `rtype` as partials plus a final reduction (see the module notes)."""
    pranges = _partial_ranges(plan, ranges)
    prr = _partial_reduction_ranges(plan, reduction_ranges)
    pload = _partial_loader(plan, reduction_ranges, loader)
    if rtype in ("argmax", "argmin"):
        return _split_arg(ctx, plan, ranges, reduction_ranges, rtype, pranges, prr, pload)
    value_dtype = loader(*_probe(ranges, reduction_ranges)).dtype
    pdtype = torch.bool if rtype in ("any", "all") else _accumulate_dtype(value_dtype)
    if rtype in ("sum", "prod"):
        pdtype = _accumulate_dtype(out_dtype)
    partial = ctx.reduction(pdtype, pranges, prr, rtype, pload)
    return ctx.reduction(
        out_dtype, ranges, (Integer(plan.splits),), FINAL_REDUCTION[rtype], _reader(plan, partial)
    )


def _probe(ranges, reduction_ranges):
    return tuple(Integer(0) for _ in ranges), tuple(Integer(0) for _ in reduction_ranges)


def _reader(plan: SplitPlan, partial: TensorValue, dtype: torch.dtype | None = None):
    """A final reduction's loader: partial s of output idx (cast to `dtype`)."""

    def load(idx, sidx):
        value = partial.loader(_partial_index(plan, idx, sidx[0]))
        return cast(value, dtype) if dtype is not None else value

    return load


def _split_arg(ctx, plan, ranges, reduction_ranges, rtype, pranges, prr, pload):
    """argmax/argmin: extreme value and index per chunk, then the first global index of
    the extreme (the module notes say how)."""
    family = "max" if rtype == "argmax" else "min"
    value_dtype = pload(*_probe(pranges, prr)).dtype
    values = ctx.reduction(value_dtype, pranges, prr, family, pload)
    local = ctx.reduction(torch.int64, pranges, prr, rtype, pload)
    splits = (Integer(plan.splits),)
    extreme = ctx.reduction(value_dtype, ranges, splits, family, _reader(plan, values))
    per_chunk = math.prod(int(r) for r in prr)
    limit = const(torch.iinfo(torch.int64).max, torch.int64)

    def candidate(idx, sidx):
        value = values.loader(_partial_index(plan, idx, sidx[0]))
        best = extreme.loader(idx)
        holds = op("eq", value, best, dtype=torch.bool)
        if value_dtype.is_floating_point:
            holds = op(
                "logical_or", holds, op("ne", value, value, dtype=torch.bool), dtype=torch.bool
            )
        offset = IndexValue(sidx[0] * per_chunk, torch.int64)
        index = op(
            "add", local.loader(_partial_index(plan, idx, sidx[0])), offset, dtype=torch.int64
        )
        return op("where", holds, index, limit, dtype=torch.int64)

    return ctx.reduction(torch.int64, ranges, splits, "min", candidate)


def split_welford(ctx, plan: SplitPlan, out_dtype, ranges, reduction_ranges, loader):
    """(mean, m2) of a Welford reduction from per-chunk means and m2s."""
    pranges = _partial_ranges(plan, ranges)
    prr = _partial_reduction_ranges(plan, reduction_ranges)
    pload = _partial_loader(plan, reduction_ranges, loader)
    compute = torch.float64 if out_dtype == torch.float64 else torch.float32
    means = ctx.reduction(compute, pranges, prr, "welford_mean", pload)
    m2s = ctx.reduction(compute, pranges, prr, "welford_m2", pload)
    total = int(numel(reduction_ranges))
    rest = total // int(reduction_ranges[plan.dim])
    extent = int(reduction_ranges[plan.dim])

    def count(s):
        if not plan.ragged(reduction_ranges):
            return const(plan.chunk * rest, compute)
        elements = sympy.Min(Integer(plan.chunk), extent - s * plan.chunk) * rest
        return cast(IndexValue(elements, torch.int64), compute)

    splits = (Integer(plan.splits),)

    def weighted_mean(idx, sidx):
        mean_s = means.loader(_partial_index(plan, idx, sidx[0]))
        return op("mul", count(sidx[0]), mean_s, dtype=compute)

    mean_sum = ctx.reduction(compute, ranges, splits, "sum", weighted_mean)

    def mean_at(idx):
        return op("truediv", mean_sum.loader(idx), const(total, compute), dtype=compute)

    def spread(idx, sidx):
        at = _partial_index(plan, idx, sidx[0])
        delta = op("sub", means.loader(at), mean_at(idx), dtype=compute)
        between = op("mul", count(sidx[0]), op("mul", delta, delta, dtype=compute), dtype=compute)
        return op("add", m2s.loader(at), between, dtype=compute)

    m2 = ctx.reduction(compute, ranges, splits, "sum", spread)
    size = tuple(ranges)
    mean = TensorValue(out_dtype, size, lambda i: cast(mean_at(i), out_dtype))
    m2_value = TensorValue(out_dtype, size, lambda i, _l=m2.loader: cast(_l(i), out_dtype))
    return mean, m2_value
