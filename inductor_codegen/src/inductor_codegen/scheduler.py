"""The scheduler: groups computed buffers into fused kernels and plans memory.

Buffers arrive in program order. Each is added to the open kernel when its
loops fit the kernel's loop nest and every value it reads from the kernel is
read at the very index where the kernel wrote it (so one outer iteration
computes everything it needs); otherwise the kernel is closed and a new one
opened. That one rule gives:

* vertical fusion: a pointwise buffer fused into the reductions and pointwise
  buffers that consume it (softmax: max, sum and the division in one kernel);
* horizontal fusion: independent loops over the same range in one loop nest.

Extern calls that read nothing from the open kernel are moved before it, so
they do not split it. A buffer whose readers all sit in the same loop body of
its kernel, and that is no output, becomes a local variable (no memory).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import sympy

from guards import artifact_enabled, artifact_logger
from inductor_codegen.errors import DynamicShapeError
from inductor_codegen.indexing import (
    FloorDiv,
    Index,
    IndexMod,
    numel,
    reshape_index,
    simplify_with_ranges,
)
from inductor_codegen.ir import (
    ComputedBuffer,
    ExternBuffer,
    Load,
    Op,
    Pointwise,
    Reduction,
    expr_loads,
)
from inductor_codegen.lowering.scatter import Scatter, Target
from inductor_codegen.runtime import WRITES_FIRST_ARGUMENT

__all__ = [
    "FusedKernel",
    "LoopGroup",
    "Schedule",
    "CPU_FUSION_POLICY",
    "FusionPolicy",
    "HORIZONTAL_RULES",
    "is_column_reduction",
    "schedule",
    "squeeze_ranges",
    "writes_in_place",
]

# The shortest inner loop a split of an outer loop may leave (see _split_outer).
MIN_SPLIT = 8


@dataclass(frozen=True, slots=True)
class LoopGroup:
    """Nodes sharing one inner loop nest: kind is "reduction" or "pointwise"."""

    kind: str
    ranges: tuple[Index, ...]
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FusedKernel:
    """One generated function: an outer loop nest whose body runs `items` in order.

    An item is a node name (computed at the outer level) or a LoopGroup.
    `locals_` are buffers that never reach memory. `kernel_only` are the buffers no other
    step reads and the graph does not return: those of them that `locals_` leaves out
    are read here from another loop group, which a code generator holding a whole row
    in registers (Triton's persistent reductions) may still keep from memory.
    """

    name: str
    outer: tuple[Index, ...]
    items: tuple[str | LoopGroup, ...]
    nodes: tuple[str, ...]
    locals_: frozenset[str] = frozenset()
    kernel_only: frozenset[str] = frozenset()
    # Column sums computed here as partials over each program's rows (column_partials):
    # the partial buffers, and the rows a program runs (0: one block of rows a program).
    column_partials: tuple[str, ...] = ()
    rows_per_program: int = 0


@dataclass(frozen=True, slots=True)
class Schedule:
    steps: tuple[FusedKernel | ExternBuffer, ...]
    buffers: dict


def squeeze_ranges(ranges) -> tuple[Index, ...]:
    return tuple(r for r in ranges if r != 1)


def outer_vars(n: int):
    return tuple(sympy.Symbol(f"x{k}", integer=True, nonnegative=True) for k in range(n))


def inner_vars(prefix: str, n: int):
    return tuple(sympy.Symbol(f"{prefix}{k}", integer=True, nonnegative=True) for k in range(n))


def unsqueeze_index(ranges, variables) -> tuple[Index, ...]:
    """Spread `variables` over the non-1 entries of `ranges` (size-1 dims get index 0)."""
    it = iter(variables)
    return tuple(sympy.Integer(0) if r == 1 else next(it) for r in ranges)


_BODIES: ContextVar[dict | None] = ContextVar("ember_node_bodies", default=None)


# ---------------------------------------------------------------- fusion policy
#
# What MAY fuse is decided by one rule, `plan_kernel` (the loops fit and every value
# read from the kernel is read where it was written), and by the limits below. What
# SHOULD fuse, among the horizontal fusions that may, is a device's policy: a
# `FusionPolicy` names the rules that refuse a fusion and holds its numbers as data.


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the scheduler asks of a buffer, computed once when it is scheduled."""

    value: object  # its value over its own loop nest
    reads: frozenset[str]  # the buffers it loads


def node_facts(buf: ComputedBuffer) -> NodeFacts:
    natural = () if isinstance(buf.body, Pointwise) else squeeze_ranges(buf.body.ranges)
    value = node_body(buf, natural, "r")[0]
    return NodeFacts(value, frozenset(load.buffer for load in expr_loads(value)))


@dataclass(slots=True)
class KernelDraft:
    """A kernel being filled: its plan, its buffers, their index divisions and reads."""

    plan: tuple
    bufs: list
    divisions: int
    reads: set

    def add(self, buf: ComputedBuffer, facts: NodeFacts, plan: tuple, divisions: int) -> None:
        self.plan, self.divisions = plan, divisions
        self.bufs.append(buf)
        self.reads |= facts.reads


@dataclass(frozen=True, slots=True)
class Candidate:
    """A legal horizontal fusion under consideration: `buf` joining `draft` as `plan`."""

    buf: ComputedBuffer
    facts: NodeFacts
    draft: KernelDraft
    plan: tuple
    divisions: int
    alone: tuple  # the plan of `buf` in a kernel of its own
    policy: FusionPolicy

    @property
    def shares_reads(self) -> bool:
        return bool(self.facts.reads & self.draft.reads)


def _loop_nest(plan) -> tuple:
    return plan[0], tuple((i.kind, i.ranges) for i in plan[1] if isinstance(i, LoopGroup))


def _inner_pointwise_nodes(plan) -> int:
    return sum(
        len(item.nodes)
        for item in plan[1]
        if isinstance(item, LoopGroup) and item.kind == "pointwise"
    )


def stores_along_rows(plan, buf: ComputedBuffer) -> bool:
    """Whether `buf` in `plan` stores at the outer level or along its inner loop."""
    _value, store, inner = node_body(buf, plan[0], "r")
    return not inner or store.coeff(inner_vars("r", len(inner))[-1]) == 1


def small_reduction_beside(c: Candidate) -> bool:
    """Whether `c.buf` is a reduction of at most `small_reduction_elements` (outputs x
    reduced) that joins its kernel without changing the kernel's loops."""
    body = c.buf.body
    if isinstance(body, Pointwise) or _loop_nest(c.plan) != _loop_nest(c.draft.plan):
        return False
    elements = sympy.Mul(*body.ranges, *body.reduction_ranges)
    return bool(elements.is_Integer and int(elements) <= c.policy.small_reduction_elements)


def adds_index_divisions(c: Candidate) -> bool:
    """No loop gains division or modulo index math by a horizontal fusion.

    (tests/test_cpu_train_codegen.py::test_head_merge_copy_loops_without_division)
    """
    return c.divisions > c.draft.divisions + index_divisions(c.alone, [c.buf])


def mixes_strides_in_vector_loop(c: Candidate) -> bool:
    """The vector loop does not mix accesses strided along it with contiguous ones: the
    strided ones would keep the loop from vectorizing for all.

    (tests/test_scheduler_policy.py::test_a_transposed_copy_stays_out_of_a_contiguous_kernel)
    """
    return mixes_strides(c.plan, [*c.draft.bufs, c.buf]) and not mixes_strides(
        c.draft.plan, c.draft.bufs
    )


def loops_inside_across_rows(c: Candidate) -> bool:
    """An inner pointwise loop pays only for reads shared along rows contiguous in memory
    (a norm's rows): across them (a column sum's few programs each walking many rows)
    the node would lose its flat parallelism.

    (tests/test_triton_codegen.py::test_a_returned_residual_sum_joins_the_norm_over_it,
    test_a_copy_across_the_rows_of_a_norm_it_shares_reads_with_stays_out)
    """
    return _inner_pointwise_nodes(c.plan) > _inner_pointwise_nodes(c.draft.plan) and not (
        c.shares_reads and stores_along_rows(c.plan, c.buf)
    )


def joins_unrelated_reduction(c: Candidate) -> bool:
    """A node sharing no read with a reduction kernel would take the reduction's tiles
    (XBLOCK outputs a program) and save only a launch: a permuted copy there reads
    across its tile. Small reductions over the same loops are the exception: the last
    step of split column sums (a layer norm's weight and bias gradients, each summing
    32 partial rows of 768) is two tiny kernels over the same tiles, where launching,
    not memory, is the cost.

    (tests/test_triton_codegen.py::test_a_cast_sharing_no_read_stays_out_of_a_reduction_kernel,
    test_small_reductions_over_the_same_loops_share_a_launch)
    """
    return _has_groups(c.draft.plan) and not c.shares_reads and not small_reduction_beside(c)


def breaks_a_column_reduction(c: Candidate) -> bool:
    """A reduction read along columns (a sum over rows: a layer norm's weight gradient,
    a bias gradient) keeps a kernel where C++ reads it row by row over a tile of
    outputs, in memory order. Joined to a kernel over as many rows (the token count
    equal to the hidden size) it would stride through memory for every output.

    (tests/test_scheduler_policy.py::test_a_column_sum_stays_out_of_a_row_kernel_of_equal_size)
    """
    if is_column_reduction(c.plan, [*c.draft.bufs, c.buf]):
        return False
    return is_column_reduction(c.alone, [c.buf]) or is_column_reduction(c.draft.plan, c.draft.bufs)


def is_column_reduction(plan, bufs: list[ComputedBuffer]) -> bool:
    """Whether `plan` is one reduction loop group followed by outer-level nodes only,
    whose reductions read memory along the last outer dim and never along the last
    reduced dim while moving with the outer loops (a sum over rows).

    Such a kernel reads best in the order r outside, x inside over a tile of
    accumulators (the C++ generator's tiled reduction); the usual order would stride.
    A load along r that does not move with x (a per-row statistic) is one value per
    tile row in that order: it does not stand in the way.
    """
    outer, items = plan
    if not outer or not items or isinstance(items[0], str) or items[0].kind != "reduction":
        return False
    if not items[0].ranges or not all(isinstance(item, str) for item in items[1:]):
        return False
    xs = outer_vars(len(outer))
    last_x, last_r = xs[-1], inner_vars("r", len(items[0].ranges))[-1]
    by_name = {buf.name: buf for buf in bufs}
    loads = [
        load
        for name in items[0].nodes
        for load in expr_loads(node_body(by_name[name], outer, "r")[0])
    ]
    along_x = [load for load in loads if load.index.coeff(last_x) == 1]
    along_r = [
        load
        for load in loads
        if load.index.coeff(last_r) == 1 and load.index.free_symbols & set(xs)
    ]
    return bool(along_x) and not along_r


def _has_groups(plan) -> bool:
    return any(isinstance(item, LoopGroup) for item in plan[1])


# Rule name -> (refuses a candidate, what the schedule log says when it does).
HORIZONTAL_RULES = {
    "index_divisions": (adds_index_divisions, "its indices would divide"),
    "mixed_strides": (mixes_strides_in_vector_loop, "strided in its vector loop"),
    "inner_loops_along_shared_rows": (loops_inside_across_rows, "it would loop inside"),
    "reductions_need_shared_reads": (
        joins_unrelated_reduction,
        "it shares no read with the reduction kernel",
    ),
    "column_reductions_tiled": (
        breaks_a_column_reduction,
        "a reduction over rows would stride through memory",
    ),
}


@dataclass(frozen=True, slots=True)
class FusionPolicy:
    """A device's choice among legal fusions, as data.

    max_kernel_nodes:  buffers one kernel takes at most.
    search_window:     how many earlier steps a buffer may move back to join a kernel.
    horizontal_rules:  names in HORIZONTAL_RULES; each refuses a horizontal fusion.
    small_reduction_elements: a reduction of at most this many elements (outputs x
                       reduced) joins a reduction kernel over the same loops even when
                       they share no read ("reductions_need_shared_reads").
    """

    max_kernel_nodes: int = 48
    search_window: int = 8
    horizontal_rules: tuple[str, ...] = (
        "index_divisions",
        "mixed_strides",
        "column_reductions_tiled",
    )
    small_reduction_elements: int = 1 << 20

    def __post_init__(self):
        unknown = [name for name in self.horizontal_rules if name not in HORIZONTAL_RULES]
        if unknown:
            raise ValueError(
                f"unknown horizontal fusion rules {unknown}; choose from {list(HORIZONTAL_RULES)}"
            )

    def refusal(self, candidate: Candidate) -> str | None:
        """Why `candidate` should not fuse, or None when it should."""
        for name in self.horizontal_rules:
            refuses, reason = HORIZONTAL_RULES[name]
            if refuses(candidate):
                return reason
        return None


# The C++ kernels' policy: a CPU kernel's threads split the outer loop whatever runs
# inside it, so any legal fusion that adds no index math and keeps the vector loop
# contiguous is taken. (A GPU's policy is in codegen/triton/compile.py.)
CPU_FUSION_POLICY = FusionPolicy()


@contextlib.contextmanager
def memoized_bodies() -> Iterator[None]:
    """Inside, `node_body` remembers what it computed: fusion planning and code
    generation ask for the same bodies many times. Scoped to one compile, so the
    buffers (and the lowering state their loaders hold) are not kept after it."""
    token = _BODIES.set({})
    try:
        yield
    finally:
        _BODIES.reset(token)


def node_body(buf: ComputedBuffer, outer: tuple, inner_prefix: str):
    """(value, store index, inner ranges) of `buf` in a loop nest over `outer`, or None."""
    cache = _BODIES.get()
    if cache is None:
        return _node_body(buf, outer, inner_prefix)
    key = (id(buf), tuple(outer), inner_prefix)
    known = cache.get(key)
    if known is None or known[0] is not buf:
        known = cache[key] = (buf, _node_body(buf, outer, inner_prefix))
    return known[1]


def _node_body(buf: ComputedBuffer, outer: tuple, inner_prefix: str):
    """node_body, computed.

    A pointwise buffer fits when a prefix of its (size-1-free) ranges has the
    same number of elements as `outer`; a reduction when its ranges do. Its
    index is then re-expressed over the outer variables (a reshape of the loop
    nest), and index arithmetic is simplified with the loop bounds.
    """
    body = buf.body
    xs = outer_vars(len(outer))
    if isinstance(body, Scatter):
        return _scatter_reads(body), sympy.Integer(0), ()
    if isinstance(body, Pointwise):
        squeezed = squeeze_ranges(body.ranges)
        k = _matching_prefix(squeezed, outer)
        if k is None:
            return None
        inner = squeezed[k:]
        reshaped = _reshaped(squeezed[:k], outer, xs)
        if reshaped is None:
            return None
        variables = reshaped + inner_vars(inner_prefix, len(inner))
        idx = unsqueeze_index(body.ranges, variables)
        value, store = body.loader(idx), buf.layout.index(idx)
        inner_names = inner_vars(inner_prefix, len(inner))
    else:
        squeezed = squeeze_ranges(body.ranges)
        if _matching_prefix(squeezed, outer) != len(squeezed):
            return None
        inner = squeeze_ranges(body.reduction_ranges)
        inner_names = inner_vars("r", len(inner))
        reshaped = _reshaped(squeezed, outer, xs)
        if reshaped is None:
            return None
        idx = unsqueeze_index(body.ranges, reshaped)
        ridx = unsqueeze_index(body.reduction_ranges, inner_names)
        value, store = body.loader(idx, ridx), buf.layout.index(idx)
    ranges = dict(zip(xs, outer)) | dict(zip(inner_names, inner))
    if value_needs_simplify(value) or store.has(FloorDiv, IndexMod):
        value = map_loads(
            value, lambda ld: Load(ld.buffer, simplify_with_ranges(ld.index, ranges), ld.dtype)
        )
        store = simplify_with_ranges(store, ranges)
    return value, store, inner


def _scatter_reads(body: Scatter) -> Op:
    """Everything a scatter kernel reads, as one expression (for dependencies and symbols)."""
    us = inner_vars("r", len(body.ranges))
    base = body.base(inner_vars("y", len(body.target(us))))
    offsets = [c.offset for c in body.target(us) if isinstance(c, Target)]
    return Op("scatter_reads", (base, body.value(us), *offsets), base.dtype)


def writes_in_place(step, buffers) -> bool:
    """Whether `step` (a fused kernel or an extern call) writes memory it did not
    allocate: a graph input written in place (an ATen op whose schema mutates, the
    wrapper's `*_scatter_into`, a buffer `stored_into` an input). A pass moving a step
    that reads memory must not move it across such a step."""
    if isinstance(step, ExternBuffer):
        schema = getattr(step.op, "_schema", None)
        return step.op in WRITES_FIRST_ARGUMENT or (schema is not None and schema.is_mutable)
    return any(
        getattr(buffers.get(name), "stored_into", None) is not None
        for name in getattr(step, "nodes", ())
    )


def is_scatter(buf) -> bool:
    return isinstance(buf, ComputedBuffer) and isinstance(buf.body, Scatter)


def _matching_prefix(ranges, outer) -> int | None:
    """k with prod(ranges[:k]) == prod(outer), or None."""
    if tuple(ranges[: len(outer)]) == tuple(outer):
        return len(outer)
    target = numel(outer)
    running = sympy.Integer(1)
    for k in range(len(ranges) + 1):
        if running == target:
            return k
        if k < len(ranges):
            running = running * ranges[k]
    return None


def _reshaped(ranges, outer, xs):
    """`ranges`' index over the loop nest `outer`, or None when symbolic sizes do not line up."""
    if tuple(ranges) == tuple(outer):
        return tuple(xs)
    try:
        return tuple(reshape_index(tuple(ranges), tuple(outer), xs))
    except DynamicShapeError:
        return None


def value_needs_simplify(value) -> bool:
    return any(load.index.has(FloorDiv, IndexMod) for load in expr_loads(value))


def map_loads(expr, fn):
    """`expr` with every Load replaced by fn(load) (shared subtrees mapped once)."""
    memo: dict[int, object] = {}

    def visit(e):
        key = id(e)
        if key in memo:
            return memo[key]
        if isinstance(e, Load):
            result = fn(e)
        elif isinstance(e, Op):
            result = Op(e.name, tuple(visit(a) for a in e.args), e.dtype)
        else:
            result = e
        memo[key] = result
        return result

    return visit(expr)


def plan_kernel(bufs: list[ComputedBuffer]) -> tuple | None:
    """(outer, items) for these buffers in one kernel, or None when they cannot share one.

    Adjacent outer loops merge, innermost first, while every index stays
    linear in the merged variable (contiguous data): fewer, longer loops that
    vectorize better.
    """
    reductions = [b for b in bufs if not isinstance(b.body, Pointwise)]
    outer = squeeze_ranges(reductions[0].body.ranges if reductions else bufs[0].body.ranges)
    plan = _plan_with_outer(bufs, outer)
    while plan is not None and len(outer) > 1:
        merged = (*outer[:-2], outer[-2] * outer[-1])
        merged_plan = _plan_with_outer(bufs, merged)
        if merged_plan is None or not _linear(bufs, merged):
            break
        outer, plan = merged, merged_plan
    return plan


def index_divisions(plan, bufs: list[ComputedBuffer]) -> int:
    """How many of `bufs` compute a floor division or a modulo in an index under `plan`."""
    outer = plan[0]
    count = 0
    for buf in bufs:
        value, store, _ = node_body(buf, outer, "y")
        count += bool(store.has(FloorDiv, IndexMod) or value_needs_simplify(value))
    return count


def mixes_strides(plan, bufs: list[ComputedBuffer]) -> bool:
    """Whether, in a kernel of outer-level nodes only, some nodes access memory with a
    stride along the innermost loop (a transposed copy) and others contiguously: the
    strided ones would keep the loop from vectorizing for all."""
    outer, items = plan
    if not outer or any(isinstance(item, LoopGroup) for item in items):
        return False
    last = outer_vars(len(outer))[-1]
    kinds = set()
    for buf in bufs:
        value, store, _ = node_body(buf, outer, "y")
        steps = {store.coeff(last)} | {load.index.coeff(last) for load in expr_loads(value)}
        kinds.add(bool(steps - {0, 1}))
    return len(kinds) > 1


def _split_outer(bufs: list[ComputedBuffer], plan: tuple, divisions: int) -> tuple:
    """`plan` with outer loops split where indices divide a loop variable by a constant.

    A copy of a permuted view (attention heads split or merged) reads
    `x0 // 64` and `x0 % 64` over a loop of 128; as loops of 2 and 64 the same
    read is linear, and the inner loop vectorizes. Splits whose inner loop would
    be shorter than MIN_SPLIT (a stride-2 window) are not worth a loop.
    """
    if not divisions or is_scatter(bufs[0]):
        return plan
    while divisions:
        outer = plan[0]
        splits = _split_points(bufs, outer)
        if not splits:
            break
        refined: list = []
        for k, size in enumerate(outer):
            refined += [size // splits[k], sympy.Integer(splits[k])] if k in splits else [size]
        candidate = _plan_with_outer(bufs, tuple(refined))
        if candidate is None:
            break
        fewer = index_divisions(candidate, bufs)
        if fewer >= divisions:
            break
        plan, divisions = candidate, fewer
    return plan


def _split_points(bufs, outer) -> dict[int, int]:
    """Outer loop k -> the largest divisor d of its size that some index divides x_k by."""
    xs = outer_vars(len(outer))
    position = {x: k for k, x in enumerate(xs)}
    found: dict[int, int] = {}
    for buf in bufs:
        value, store, _ = node_body(buf, outer, "y")
        for index in [store, *(load.index for load in expr_loads(value))]:
            for term in index.atoms(FloorDiv, IndexMod):
                var, divisor = term.args
                k = position.get(var)
                if k is None or not divisor.is_Integer or not outer[k].is_Integer:
                    continue
                d, size = int(divisor), int(outer[k])
                if MIN_SPLIT <= d < size and size % d == 0:
                    found[k] = max(found.get(k, 0), d)
    return found


def _linear(bufs, outer) -> bool:
    for buf in bufs:
        value, store, _ = node_body(buf, outer, "y")
        if store.has(FloorDiv, IndexMod) or value_needs_simplify(value):
            return False
    return True


def _plan_with_outer(bufs: list[ComputedBuffer], outer: tuple) -> tuple | None:
    n = len(outer)
    if n == 0 and not _one_row(bufs):
        return None  # a loop nest with no outer loop would run pointwise loops serially
    items: list = []
    placed: dict[str, tuple] = {}  # buffer -> (item position, store index, inner prefix)
    for buf in bufs:
        kind = None if isinstance(buf.body, Pointwise) else "reduction"
        prefix = "r" if kind == "reduction" else "y"
        body = node_body(buf, outer, prefix)
        if body is None:
            return None
        value, store, inner = body
        if kind is None and inner:
            kind = "pointwise"
        reads_from_last = False
        for load in expr_loads(value):
            if load.buffer not in placed:
                continue
            position, produced_at, producer_prefix = placed[load.buffer]
            wanted = produced_at
            if producer_prefix not in ("x", prefix):
                wanted = produced_at.xreplace(_rename(producer_prefix, prefix, produced_at))
            if sympy.expand(load.index - wanted) != 0:
                return None
            if items and position == len(items) - 1 and isinstance(items[-1], LoopGroup):
                reads_from_last = True
            if producer_prefix != "x" and (kind is None or items[position].ranges != inner):
                return None
        last = items[-1] if items else None
        if kind is None:
            items.append(buf.name)
        elif (
            isinstance(last, LoopGroup)
            and last.kind == kind
            and last.ranges == inner
            and (kind == "pointwise" or not reads_from_last)
        ):
            items[-1] = LoopGroup(kind, inner, last.nodes + (buf.name,))
        else:
            items.append(LoopGroup(kind, inner, (buf.name,)))
        where_prefix = "x" if kind is None or kind == "reduction" else prefix
        placed[buf.name] = (len(items) - 1, store, where_prefix)
    return outer, tuple(items)


# The longest row a kernel without outer loops takes a pointwise loop over: one program
# (one thread on the CPU) runs it, as it runs the row's reduction loops.
ONE_ROW_LIMIT = 16384


def _one_row(bufs: list[ComputedBuffer]) -> bool:
    """Whether the pointwise nodes of a kernel with no outer loop (a reduction of one row,
    as a layer norm over a batch of one token) may join it: each loops over as many
    elements as a reduction of the kernel reduces, a known number of at most
    ONE_ROW_LIMIT. A longer or unrelated pointwise loop would run serially in one
    program, where a kernel of its own spreads it over the device."""
    rows = {
        numel(squeeze_ranges(b.body.reduction_ranges))
        for b in bufs
        if isinstance(b.body, Reduction)
    }
    for b in bufs:
        ranges = squeeze_ranges(b.body.ranges) if isinstance(b.body, Pointwise) else ()
        if not ranges:
            continue
        size = numel(ranges)
        if size not in rows or not size.is_Integer or int(size) > ONE_ROW_LIMIT:
            return False
    return True


def _rename(src: str, dst: str, expr):
    mapping = {}
    for symbol in expr.free_symbols:
        if symbol.name.startswith(src):
            mapping[symbol] = sympy.Symbol(
                dst + symbol.name[len(src) :], integer=True, nonnegative=True
            )
    return mapping


def schedule(
    buffers: list, output_buffers: set[str], policy: FusionPolicy = CPU_FUSION_POLICY
) -> Schedule:
    """Fuse `buffers` (program order) into kernels; extern calls stay in program order.

    A computed buffer may join any kernel placed at or after the last step that
    produces one of its inputs (then every input exists when that kernel runs);
    the kernel of its latest producer is tried first (vertical fusion), then
    later ones (horizontal fusion), the most recent first. `policy` decides
    which legal horizontal fusions are taken.
    """
    log = artifact_logger("schedule")
    by_name = {b.name: b for b in buffers}
    steps: list = []  # ExternBuffer or KernelDraft
    produced_at: dict[str, int] = {}
    for buf in buffers:
        if isinstance(buf, ExternBuffer):
            steps.append(buf)
            for i in range(len(buf.layouts)):
                produced_at[f"{buf.name}_{i}"] = len(steps) - 1
            produced_at[buf.name] = len(steps) - 1
            continue
        if is_scatter(buf):
            # A scatter kernel stands alone: nothing fuses into it, it fuses into nothing.
            log.debug("%s is a scatter kernel", buf.name)
            steps.append(KernelDraft(((), (buf.name,)), [buf], 0, set()))
            produced_at[buf.name] = len(steps) - 1
            continue
        facts = node_facts(buf)
        earliest = max((produced_at.get(name, -1) for name in facts.reads), default=-1)
        candidates = [earliest] if earliest >= 0 else []
        window = max(earliest, len(steps) - 1 - policy.search_window)
        candidates += [p for p in range(len(steps) - 1, window, -1)]
        placed = False
        alone = None
        for position in candidates:
            draft = steps[position]
            plan = _legal_plan(draft, buf, policy)
            if plan is None:
                continue
            divisions = index_divisions(plan, draft.bufs + [buf])
            if position != earliest:
                alone = alone or plan_kernel([buf])
                candidate = Candidate(buf, facts, draft, plan, divisions, alone, policy)
                reason = policy.refusal(candidate)
                if reason is not None:
                    log.debug("%s stays out of a kernel (%s)", buf.name, reason)
                    continue
            log.debug(
                "fuse %s into kernel with %s", buf.name, ", ".join(b.name for b in draft.bufs)
            )
            draft.add(buf, facts, plan, divisions)
            produced_at[buf.name] = position
            placed = True
            break
        if not placed:
            log.debug("%s starts a new kernel", buf.name)
            plan = alone or plan_kernel([buf])
            steps.append(KernelDraft(plan, [buf], index_divisions(plan, [buf]), set(facts.reads)))
            produced_at[buf.name] = len(steps) - 1
    steps = [
        s
        if isinstance(s, ExternBuffer)
        else (_split_outer(s.bufs, s.plan, s.divisions), [b.name for b in s.bufs])
        for s in steps
    ]
    kernels = _finish(steps, by_name, output_buffers)
    if artifact_enabled("schedule"):
        log.info("%s", describe(kernels))
    return Schedule(tuple(kernels), by_name)


def _legal_plan(step, buf: ComputedBuffer, policy: FusionPolicy) -> tuple | None:
    """The plan of `buf` joining `step`, or None when it may not: an extern call, a full
    kernel, a scatter kernel, or loops that do not fit (`plan_kernel`)."""
    if (
        isinstance(step, ExternBuffer)
        or len(step.bufs) >= policy.max_kernel_nodes
        or is_scatter(step.bufs[0])
    ):
        return None
    return plan_kernel(step.bufs + [buf])


def _finish(steps, by_name, output_buffers) -> list:
    readers: dict[str, set[int]] = {}
    for position, step in enumerate(steps):
        if isinstance(step, ExternBuffer):
            for name in step.reads:
                readers.setdefault(name, set()).add(position)
            continue
        (_outer, _items), names = step
        for name in names:
            value = node_body(by_name[name], _outer, "y")[0]
            for load in expr_loads(value):
                readers.setdefault(load.buffer, set()).add(position)
    result = []
    for position, step in enumerate(steps):
        if isinstance(step, ExternBuffer):
            result.append(step)
            continue
        (outer, items), names = step
        kernel_only = frozenset(
            name
            for name in names
            if name not in output_buffers
            and not readers.get(name, set()) - {position}
            and not is_scatter(by_name[name])
        )
        locals_ = _local_buffers(outer, items, names, by_name, kernel_only)
        label = "_".join(dict.fromkeys(_kernel_label(by_name[n]) for n in names))[:40]
        result.append(
            FusedKernel(
                f"cpp_fused_{label}_{len(result)}", outer, items, tuple(names), locals_, kernel_only
            )
        )
    return result


def _kernel_label(buf: ComputedBuffer) -> str:
    if isinstance(buf.body, Scatter):
        return "scatter"
    if isinstance(buf.body, Pointwise):
        return "pointwise"
    return buf.body.reduction_type.split("_")[0]


def _local_buffers(outer, items, names, by_name, kernel_only):
    """Buffers of this kernel read only here, at the outer level or in their own loop body."""
    item_of = {}
    for k, item in enumerate(items):
        for name in item.nodes if isinstance(item, LoopGroup) else (item,):
            item_of[name] = k
    result = set()
    for name in names:
        if name not in kernel_only:
            continue
        item = items[item_of[name]]
        at_outer = isinstance(item, str) or item.kind == "reduction"
        if at_outer:
            result.add(name)
            continue
        readers_here = [
            other
            for other in names
            if any(
                load.buffer == name for load in expr_loads(node_body(by_name[other], outer, "y")[0])
            )
        ]
        if all(item_of[other] == item_of[name] for other in readers_here):
            result.add(name)
    return frozenset(result)


def describe(steps) -> str:
    lines = ["schedule:"]
    for step in steps:
        if isinstance(step, ExternBuffer):
            kind = "fallback" if step.is_fallback else "extern"
            lines.append(f"  {step.name} = {kind} {step.op}")
            continue
        lines.append(f"  kernel {step.name} outer={list(step.outer)}")
        for item in step.items:
            if isinstance(item, LoopGroup):
                lines.append(f"    {item.kind} loop {list(item.ranges)}: {', '.join(item.nodes)}")
            else:
                lines.append(f"    {item}")
        if step.locals_:
            lines.append(f"    kept in registers: {', '.join(sorted(step.locals_))}")
        if step.column_partials:
            names = ", ".join(step.column_partials)
            lines.append(f"    column partials, {step.rows_per_program} rows a program: {names}")
    return "\n".join(lines)
