"""C++/OpenMP code generation: one `extern "C"` function per fused kernel.

The outer loop nest is OpenMP-parallel when there is enough work; each item
of the kernel body (see `scheduler.FusedKernel`) becomes a statement, a
reduction loop with its accumulators, or an inner pointwise loop. Scalar
expressions are printed through `CPP_OPS` (a table keyed by op name) with
common-subexpression elimination per loop body; a value already computed in
an enclosing body is reused.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import sympy
import torch

from inductor_codegen.codegen.cpp.loop_split import LoopSplit, loop_split, substitute
from inductor_codegen.codegen.cpp.ops import COMPUTE_TYPES, STORAGE_TYPES, compute_type
from inductor_codegen.codegen.cpp.residues import ResidueUnroll, expr_indices, residue_unroll
from inductor_codegen.codegen.cpp.row_buffers import RowBuffer, row_buffers
from inductor_codegen.codegen.kernel import (
    KernelArg,
    KernelPrinter,
    KernelSource,
    ScopeChain,
    row_major_coordinates,
)
from inductor_codegen.codegen.ops import CPP_OPS
from inductor_codegen.errors import InductorError
from inductor_codegen.indexing import c_index, contiguous_strides, flat_index, numel
from inductor_codegen.ir import (
    Constant,
    IndexValue,
    Load,
    Op,
    ScalarArg,
    expr_loads,
)
from inductor_codegen.runtime import DivisorCheck, IndexCheck
from inductor_codegen.scheduler import (
    FusedKernel,
    LoopGroup,
    inner_vars,
    is_column_reduction,
    node_body,
    outer_vars,
)
from inductor_codegen.symbols import expr_symbols, kernel_size_symbols

__all__ = ["KernelCodegen"]

PARALLEL_MIN_WORK = 32768
# The parallel loop spans (collapses) outer loops until it has this many iterations.
MIN_PARALLEL_ITERATIONS = 16
# The kernel parameter where bounds checks record a failure (see runtime.IndexStatus).
STATUS_PARAM = "index_status"
INDIRECT_CHECK = "checked_index"
# Longest float32 sum accumulated in float (see accumulate_type).
FLOAT_ACCUMULATE_MAX = 4096
# Names of loop variables (outer x, inner y and r, scatter u); others are sizes.
LOOP_VARIABLE = re.compile(r"^[xyru]\d+$")
# Side of the square tiles of a kernel that reads its loop nest transposed.
TRANSPOSE_TILE = 16
# Accumulators per tile when reducing along outer dimensions.
TILE = 16


def parallel_clause(work) -> str | None:
    """How an outer loop doing `work` iterations goes parallel: "" (always), an OpenMP
    `if()` clause (symbolic work: decided per call), or None (too little work)."""
    if work.is_Integer:
        return "" if int(work) >= PARALLEL_MIN_WORK else None
    return f" if({c_index(work)} >= {PARALLEL_MIN_WORK})"


def _collapsed(loops: list[OuterLoop], sizes) -> OuterLoop:
    """One loop over the iterations of `loops` (whole loops from 0), their variables
    computed from its counter. Unlike OpenMP's collapse clause, this keeps the
    inner loops vectorizable (gcc does not vectorize inside a collapsed nest)."""
    names = "_".join(loop.var.name for loop in loops)
    header = [f"for (int64_t {names} = 0; {names} < {c_index(numel(sizes))}; ++{names}) {{"]
    for loop, (quotient, size) in zip(loops, row_major_coordinates(names, sizes, c_index, "/")):
        value = quotient if size is None else f"{quotient} % {size}"
        header.append(f"  const int64_t {loop.var} = {value};")
    return OuterLoop(loops[0].var, "\n".join(header), loops[0].hoisted, False)


def kernel_work(kernel: FusedKernel):
    """Elements `kernel` stores or reduces: each node times the trip count of its loops."""
    per_outer = sum(
        len(item.nodes) * numel(item.ranges) if isinstance(item, LoopGroup) else 1
        for item in kernel.items
    )
    return numel(kernel.outer) * per_outer


@dataclass(frozen=True, slots=True)
class OuterLoop:
    """One loop of a kernel's outer nest: its variable, its header and whether the
    values hoisted for `var` (those depending only on enclosing loops) go before it."""

    var: sympy.Symbol
    header: str
    hoisted: bool
    whole: bool = True  # over the whole dim, from 0 (a tile's loops are not)
    bounds: tuple[str, str] | None = None  # (start, end) of a loop of one variable


def _loop(var, start: str, end: str, hoisted: bool, whole: bool) -> OuterLoop:
    header = f"for (int64_t {var} = {start}; {var} < {end}; ++{var}) {{"
    return OuterLoop(var, header, hoisted, whole, (start, end))


def literal(value, dtype: torch.dtype) -> str:
    ctype = compute_type(dtype)
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        value = float(value)
        if math.isnan(value):
            return f"std::numeric_limits<{ctype}>::quiet_NaN()"
        if math.isinf(value):
            sign = "-" if value < 0 else ""
            return f"{sign}std::numeric_limits<{ctype}>::infinity()"
        text = repr(value)
        return f"{text}f" if ctype == "float" else text
    if ctype == "int64_t":
        value = int(value)
        if value == -(2**63):
            return "std::numeric_limits<int64_t>::min()"
        return f"INT64_C({value})"
    return f"static_cast<{ctype}>({int(value)})"


class Scope(ScopeChain):
    """A loop body being printed: its lines and the values already in variables."""

    def __init__(self, codegen: KernelCodegen, parent: Scope | None, indent: int):
        self.codegen = codegen
        self.parent = parent
        self.indent = indent
        self.lines: list[str] = []
        self.cache: dict = {}
        # (position, indent) of the header of a loop open in this scope: lines
        # written meanwhile (values hoisted out of that loop) go before it.
        self.loop_start: tuple[int, int] | None = None
        # The loop variables of the loops between the parent scope and this one:
        # a value that reads none of them is computed in the parent, once per loop.
        self.loop_vars: frozenset = frozenset()
        # The innermost body of the outer loops: values of outer indices only move out.
        self.is_body = False

    def line(self, text: str) -> None:
        if self.loop_start is None:
            self.lines.append("  " * self.indent + text)
            return
        position, indent = self.loop_start
        self.lines.insert(position, "  " * indent + text)
        self.loop_start = (position + 1, indent)

    def value(self, expr, inline: bool = False) -> str:
        """C++ text of `expr`; with CSE into temporaries unless `inline` (masked branches)."""
        hit = self.lookup(expr)
        if hit is not None:
            return hit
        if isinstance(expr, Constant):
            return literal(expr.value, expr.dtype)
        if isinstance(expr, IndexValue):
            return f"static_cast<{compute_type(expr.dtype)}>({c_index(expr.index)})"
        if isinstance(expr, ScalarArg):
            return self.codegen.scalar(expr)
        if not inline and self.loop_vars and self.codegen.invariant(expr, self.loop_vars):
            return self.parent.value(expr)
        if not inline and self.is_body:
            home = self.codegen.outer_home(expr)
            if home is not None:
                return home.value(expr)
        if isinstance(expr, Load):
            text = self.codegen.load(expr)
        elif isinstance(expr, Op):
            text = self._op(expr, inline)
        else:
            raise InductorError(f"cannot print {expr!r} as C++")
        if inline:
            return text
        name = self.codegen.new_temp()
        self.line(f"const {compute_type(expr.dtype)} {name} = {text};")
        self.cache[expr] = name
        return name

    def _op(self, expr: Op, inline: bool) -> str:
        if expr.name == "indirect_load":
            return self._indirect_load(expr, inline)
        if expr.name == "masked":
            cond = self.value(expr.args[0], inline)
            picked = self._load_at_picked_index(cond, expr.args[1], expr.args[2])
            if picked is not None:
                return self._as(picked, expr.args[1].dtype, expr.dtype)
            a = self.value(expr.args[1], inline=True)
            b = self.value(expr.args[2], inline=True)
            return f"({cond} ? {self._as(a, expr.args[1].dtype, expr.dtype)} : {self._as(b, expr.args[2].dtype, expr.dtype)})"
        if expr.name == "where" and inline:
            # NOTE: in a masked branch the sides are inline text (loads among them). Both
            # are read wherever the branch is taken (as eager computes both sides of a
            # where), through a call: a `?:` with loads in its sides becomes masked loads,
            # which gcc 12 and 13 get wrong in fully unrolled loops (the mask of the first
            # vector reused for the others: `c[i] > 0 ? a[i] : b[i]` over 4x6 elements).
            cond, a, b = (self.value(arg, inline) for arg in expr.args)
            return f"ember_where<{compute_type(expr.dtype)}>({cond}, {a}, {b})"
        if expr.name == "to_dtype":
            return cast_text(self.value(expr.args[0], inline), expr.args[0].dtype, expr.dtype)
        args = [self.value(a, inline) for a in expr.args]
        if expr.name in INTEGER_DIVISIONS and _is_integral(expr.args[1].dtype):
            number = self.codegen.index_check(DivisorCheck(INTEGER_DIVISIONS[expr.name]))
            divisor_type = compute_type(expr.args[1].dtype)
            args[1] = f"ember_checked_divisor<{divisor_type}>({args[1]}, {STATUS_PARAM}, {number})"
        emit = CPP_OPS.get(expr.name)
        if emit is None:
            raise InductorError(
                f"the C++ op table has no entry for {expr.name!r}; add a row to codegen.ops.OPS"
            )
        return emit(args, [a.dtype for a in expr.args], expr.dtype)

    def _load_at_picked_index(self, cond: str, a, b) -> str | None:
        """`c ? p[i] : p[j]` (two pieces of one buffer: a roll, its backward) printed as
        `p[c ? i : j]`: the same single read. gcc 12 vectorizes the first form wrongly
        where c changes along an outer loop (the row where it switches read the other
        branch); the second it gets right. Two buffers (the pieces of a cat) are read
        through the picked address, `*(c ? &p[i] : &q[j])`: gcc 12 and 13 at -O3 turned
        `c ? p[i] : q[j]` into masked loads reading far outside both buffers (a cat of
        x and x.flip(0) 6 wide, 2050 rows, batch-normed: garbage rows, fuzz seed
        179598938804). Only for plain reads of buffers in memory."""
        if not (isinstance(a, Load) and isinstance(b, Load)):
            return None
        if a.dtype != b.dtype:
            return None
        codegen = self.codegen
        if (
            a.buffer in codegen.rows
            or a.buffer in codegen.kernel.locals_
            or a in codegen.staged
            or b in codegen.staged
            or self.lookup(a) is not None
            or self.lookup(b) is not None
        ):
            return None
        if a.buffer == b.buffer:
            index = sympy.Symbol(
                f"({cond} ? {c_index(a.index)} : {c_index(b.index)})", integer=True
            )
            return codegen.load(Load(a.buffer, index, a.dtype))
        if b.buffer in codegen.rows or b.buffer in codegen.kernel.locals_:
            return None
        first = f"&{codegen.pointer(a.buffer, writing=False)}[{c_index(a.index)}]"
        second = f"&{codegen.pointer(b.buffer, writing=False)}[{c_index(b.index)}]"
        return codegen.read_as_computed(f"*({cond} ? {first} : {second})", a.dtype)

    def _indirect_load(self, expr: Op, inline: bool) -> str:
        """A load whose address holds a loaded offset (see lowering.indirect).

        The offset goes through one bounds check (`ember_checked_index`, a single
        unsigned compare) per loaded value; the same checked offset is reused.
        """
        load, offset, marker, bound, check = expr.args
        key = (INDIRECT_CHECK, offset, bound, check)
        text = self.lookup(key)
        if text is None:
            # NOTE: hoisting keeps the check's branch out of the element loop, which
            # gcc then vectorizes; a masked (inline) offset stays where its mask is.
            home = self if inline else (self.codegen.hoist_scope(offset) or self)
            number = self.codegen.index_check(check)
            text = (
                f"ember_checked_index({home.value(offset, inline)}, {c_index(bound.index)}, "
                f"{STATUS_PARAM}, {number})"
            )
            if not inline:
                name = self.codegen.new_temp()
                home.line(f"const int64_t {name} = {text};")
                home.cache[key] = name
                text = name
        where = sympy.Symbol(text if text.isidentifier() else f"({text})", integer=True)
        return self.codegen.load(
            Load(load.buffer, load.index.xreplace({marker.index: where}), load.dtype)
        )

    def _as(self, text, src, dst):
        return text if src == dst else cast_text(text, src, dst)


# Ops dividing integers: eager raises ZeroDivisionError for a zero divisor (the name
# each one's error gives).
INTEGER_DIVISIONS = {
    "floordiv": "floor division",
    "truncdiv": "division",
    "remainder": "remainder",
    "fmod": "fmod",
}


def _is_integral(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


# A float to a narrow integer type goes through this wider one and wraps, as eager's
# kernels do (c10's `static_cast_with_inter_type` takes uint8 through int64; the C++
# compiler takes int8 and int16 through int32): 300.5 -> int8 44, NaN and inf -> 0.
NARROW_INTEGER_CASTS = {
    torch.int8: torch.int32,
    torch.int16: torch.int32,
    torch.uint8: torch.int64,
}


def cast_text(text: str, src: torch.dtype, dst: torch.dtype) -> str:
    if dst == torch.bool:
        return f"({text} != 0)"
    if src == torch.bool and dst.is_floating_point:
        # NOTE: through int32: gcc 12 leaves a loop converting bool to float scalar
        # (a dropout mask times its input), but vectorizes int32 to float.
        text = f"static_cast<int32_t>({text})"
    if dst == torch.bfloat16:
        return f"ember_round_bf16(static_cast<float>({text}))"
    if dst == torch.float16:
        return f"ember_round_f16(static_cast<float>({text}))"
    if src.is_floating_point and dst in (torch.int32, torch.int64):
        return f"ember_float_to_int<{compute_type(dst)}>({text})"
    if src.is_floating_point and dst in NARROW_INTEGER_CASTS:
        wide = compute_type(NARROW_INTEGER_CASTS[dst])
        return f"static_cast<{compute_type(dst)}>(ember_float_to_int<{wide}>({text}))"
    return f"static_cast<{compute_type(dst)}>({text})"


REDUCTION_FAMILY = {"welford_mean": "welford", "welford_m2": "welford"}


class KernelCodegen(KernelPrinter):
    """Prints one FusedKernel as a C++ function."""

    def __init__(self, kernel: FusedKernel, buffers: dict):
        super().__init__(kernel, buffers)
        self.checks: list[IndexCheck] = []
        # Scopes before each outer loop, then the body (see generate); empty when tiled.
        self.hoisted: list[Scope] = []
        # Buffers the loop being printed stores (their loads stay in the loop).
        self.looped_nodes: frozenset[str] = frozenset()
        self._reads: dict[int, tuple] = {}
        # Whether the body being printed is a piece of a split loop (see generate).
        self.in_piece = False
        # Whether a tile's element loops run the last dim outside (see _outer_loops):
        # then no scope sits between them.
        self.stores_along_second_last = False
        # Loads of a tiled kernel read across the tile, each from its transposed copy on
        # the stack (see _stage_transposed_loads), and the lines that fill those copies.
        self.staged: dict[Load, str] = {}
        self.stage_lines: list[str] = []
        # Buffers kept in an array of one row on the stack (see row_buffers), set by generate.
        self.rows: dict[str, RowBuffer] = {}

    def hoist_scope(self, expr) -> Scope | None:
        """The outermost scope where every loop variable `expr` reads is defined.

        None when `expr` reads an inner loop's variable (or the kernel is tiled).
        """
        if self.in_piece or not self.hoisted:
            return None
        if any(load.buffer in self.produced for load in expr_loads(expr)):
            return None
        if any(extent == 0 for extent in self.kernel.outer) or self._empty_inner_loop():
            return None  # the loops never run: a load moved before them would read nothing
        outer = {v: depth for depth, v in enumerate(outer_vars(len(self.kernel.outer)))}
        variables = index_symbols(expr) - expr_symbols(expr)
        if not variables <= outer.keys():
            return None
        depth = max((outer[v] + 1 for v in variables), default=0)
        if self.stores_along_second_last and depth == len(self.kernel.outer) - 1:
            return None
        return self.hoisted[depth]

    def _empty_inner_loop(self) -> bool:
        """Whether an inner loop nest of the kernel runs zero times (an empty reduction):
        an offset hoisted out of it would be read from an empty buffer."""
        return any(
            not isinstance(item, str) and any(extent == 0 for extent in item.ranges)
            for item in self.kernel.items
        )

    def invariant(self, expr, loop_vars: frozenset) -> bool:
        """Whether `expr` (a Load or an Op) has one value for every iteration of `loop_vars`.

        Loads of buffers the loop itself stores and indirect loads (hoisted by
        their own rule) are never invariant.
        """
        if not isinstance(expr, (Load, Op)):
            return False
        symbols, movable, _ = self._read_set(expr)
        return movable and not (symbols & loop_vars)

    def outer_home(self, expr) -> Scope | None:
        """For a value of the innermost body: the scope before the first outer loop it
        does not read (a per-channel statistic is computed once per channel), or None."""
        if not isinstance(expr, (Load, Op)) or not self.hoisted or self.in_piece:
            return None
        symbols, movable, reads_produced = self._read_set(expr)
        if not movable or reads_produced or any(e == 0 for e in self.kernel.outer):
            return None
        depth = {v: k for k, v in enumerate(outer_vars(len(self.kernel.outer)))}
        loop_symbols = {v for v in symbols if LOOP_VARIABLE.match(v.name)}
        if not loop_symbols <= depth.keys():
            return None
        home = max((depth[v] + 1 for v in loop_symbols), default=0)
        last = len(self.hoisted) - (3 if self.stores_along_second_last else 2)
        return self.hoisted[home] if home <= last else None

    def _read_set(self, expr) -> tuple[frozenset, bool, bool]:
        """(index symbols `expr` reads, whether it may move out of a loop, whether it
        reads a buffer this kernel produces), memoized."""
        hit = self._reads.get(id(expr))
        if hit is not None and hit[0] is expr:
            return hit[1:]
        if isinstance(expr, Load):
            symbols = frozenset(expr.index.free_symbols)
            movable = expr.buffer not in self.looped_nodes
            produced = expr.buffer in self.produced
        elif isinstance(expr, IndexValue):
            symbols, movable, produced = frozenset(expr.index.free_symbols), True, False
        elif isinstance(expr, Op):
            symbols, movable, produced = frozenset(), expr.name != "indirect_load", False
            for arg in expr.args:
                arg_symbols, arg_movable, arg_produced = self._read_set(arg)
                symbols |= arg_symbols
                movable = movable and arg_movable
                produced = produced or arg_produced
        else:
            symbols, movable, produced = frozenset(), True, False
        self._reads[id(expr)] = (expr, symbols, movable, produced)
        return symbols, movable, produced

    def index_check(self, check: IndexCheck) -> int:
        """The number (from 1) of `check` in this kernel's status reports."""
        if check not in self.checks:
            self.checks.append(check)
        return self.checks.index(check) + 1

    # ---------------------------------------------------------- arguments

    def pointer_type(self, kind: str, dtype: torch.dtype, aliased: bool = False) -> str:
        # NOTE: buffers of one kernel never overlap (reuse happens after a last use),
        # so pointers are __restrict__: loop-invariant loads hoist, loops vectorize. A
        # buffer stored into an input the kernel reads is that input's memory: plain.
        const = "const " if kind == "in" else ""
        restrict = "" if aliased else " __restrict__"
        return f"{const}{STORAGE_TYPES[dtype]}*{restrict}"

    def scalar_type(self, dtype: torch.dtype) -> str:
        return COMPUTE_TYPES[dtype]

    def load(self, expr: Load) -> str:
        if expr in self.staged:
            return self.staged[expr]
        row = self.rows.get(expr.buffer)
        if row is not None:
            text = f"{row.array}[{c_index(row.local_index(expr.index))}]"
        else:
            text = f"{self.pointer(expr.buffer, writing=False)}[{c_index(expr.index)}]"
        return self.read_as_computed(text, expr.dtype)

    def read_as_computed(self, text: str, dtype: torch.dtype) -> str:
        """An element read from memory (`text`) as kernels compute with it."""
        if dtype == torch.bfloat16:
            return f"ember_bf16_to_float({text})"
        if dtype == torch.float16:
            return f"static_cast<float>({text})"
        return text

    def store(self, scope: Scope, name: str, index, value_text: str, value_expr_dtype) -> None:
        buf = self.buffers[name]
        dtype = buf.layout.dtype
        if value_expr_dtype != dtype:
            value_text = cast_text(value_text, value_expr_dtype, dtype)
        load_key = Load(name, index, dtype)
        if name in self.kernel.locals_:
            var = f"{name}_v"
            if dtype == torch.bfloat16:  # what the buffer would hold, as a load reads it
                value_text = f"ember_round_bf16({value_text})"
            elif dtype == torch.float16:
                value_text = f"static_cast<float>(static_cast<_Float16>({value_text}))"
            scope.line(f"const {compute_type(dtype)} {var} = {value_text};")
            scope.cache[load_key] = var
            return
        row = self.rows.get(name)
        if row is not None:
            ptr, index = row.array, row.local_index(index)
        else:
            ptr = self.pointer(name, writing=True)
        if dtype == torch.bfloat16:
            scope.line(f"{ptr}[{c_index(index)}] = ember_float_to_bf16({value_text});")
        elif dtype == torch.float16:
            scope.line(f"{ptr}[{c_index(index)}] = static_cast<_Float16>({value_text});")
        else:
            scope.line(f"{ptr}[{c_index(index)}] = {value_text};")
        # NOTE: a float16/bfloat16 buffer holds the value rounded: a later read in this
        # kernel loads it again rather than reuse the unrounded value (`x == amax(x)`)
        exact = dtype not in (torch.bfloat16, torch.float16)
        scope.cache[load_key] = value_text if exact and value_text.isidentifier() else None
        if scope.cache[load_key] is None:
            del scope.cache[load_key]

    # ---------------------------------------------------------- body

    def generate(self) -> KernelSource:
        kernel = self.kernel
        outer = kernel.outer
        xs = outer_vars(len(outer))
        if self._wants_tiling():
            return self.finish(self._tiled_reduction_kernel())
        self.rows = row_buffers(kernel, self.buffers)
        # One scope before each outer loop and the body: a loaded index that depends
        # only on the enclosing loops is loaded and checked there, not per element.
        loops = self._outer_loops()
        position = {loop.var: k for k, loop in enumerate(loops)}
        position.update({loop.var: k for k, loop in enumerate(loops) if loop.hoisted})
        scope = None
        for depth in range(len(outer) + 1):
            indent = 1 + (position[xs[depth]] if depth < len(outer) else len(loops))
            scope = Scope(self, scope, indent)
            self.hoisted.append(scope)
        body = scope
        body.is_body = True
        residues = self._residue_unroll(loops)
        if residues:  # the innermost loop runs over the quotient
            last = loops[-1]
            quotient = str(residues.extent // residues.divisor)
            loops[-1] = _loop(last.var, "0", quotient, last.hoisted, True)
        split = self._outer_split(loops, residues)
        # NOTE: a piece's loads were guarded before the split and its loop may run zero
        # times: nothing of it moves out of the loop (gcc hoists what is safe to hoist).
        self.in_piece = split is not None
        pieces = []  # for each piece of a split loop, the body of each residue
        for piece in range(len(split.thresholds) + 1 if split else 1):
            known = split.piece_values(piece) if split else {}
            blocks = []
            for residue in range(residues.divisor if residues else 1):
                # NOTE: each piece of a split loop, and each residue, prints the body
                # afresh, in a scope of its own.
                if piece or residue:
                    body = Scope(self, body.parent, body.indent)
                    body.is_body = True
                    self.hoisted[-1] = body
                for row in self.rows.values():
                    body.line(row.declaration())
                for item in kernel.items:
                    if isinstance(item, str):
                        self._outer_node(body, item, known, residues and (residues, residue))
                    elif item.kind == "pointwise":
                        self._pointwise_group(body, item)
                    else:
                        self._reduction_group(body, item)
                blocks.append(body.lines)
            pieces.append(_join_residues(blocks, len(loops)) if residues else blocks[0])
        self.in_piece = False
        lines = []
        clause = parallel_clause(kernel_work(kernel))
        collapse = self._collapse_depth(loops) if clause is not None else 1
        if collapse > 1:
            loops = [_collapsed(loops[:collapse], outer[:collapse]), *loops[collapse:]]
        vector_loop = not any(isinstance(i, LoopGroup) for i in kernel.items)
        for k, loop in enumerate(loops):
            pad = "  " * (1 + k)
            if loop.hoisted:
                lines += self.hoisted[xs.index(loop.var)].lines
            headers = [loop.header]
            if split and k == len(loops) - 1:
                headers = self._piece_headers(split, loop)
            for piece, header in enumerate(headers):
                if k == 0 and clause is not None:
                    lines.append(f"{pad}#pragma omp parallel for{clause}")
                elif k == len(loops) - 1 and vector_loop:
                    lines.append(f"{pad}#pragma GCC ivdep")
                lines += [pad + line for line in header.split("\n")]
                if self.stage_lines and k == len(loops) - 3:  # the tile loop of the last dim
                    lines += [pad + "  " + line for line in self.stage_lines]
                if len(headers) > 1:
                    lines += pieces[piece]
                    lines.append(pad + "}")
        if not split:
            lines += pieces[0]
        for k in reversed(range(len(loops) - (1 if split else 0))):
            lines.append("  " * (1 + k) + "}")
        return self.finish(lines)

    def _residue_unroll(self, loops: list[OuterLoop]) -> ResidueUnroll | None:
        """How the innermost loop (over a whole dim) of a kernel of outer-level nodes runs
        over the quotient of the divisions of its variable (see residues), or None."""
        kernel = self.kernel
        if not loops or not loops[-1].whole or not all(isinstance(i, str) for i in kernel.items):
            return None
        var = outer_vars(len(kernel.outer))[-1]
        indices = []
        for name in kernel.items:
            value, store = node_body(self.buffers[name], kernel.outer, "y")[:2]
            indices += [store, *expr_indices(value)]
        return residue_unroll(indices, var, kernel.outer[-1])

    def _outer_split(
        self, loops: list[OuterLoop], residues: ResidueUnroll | None = None
    ) -> LoopSplit | None:
        """How the innermost loop of a kernel of outer-level nodes splits into pieces
        where its masks are constant (see loop_split), or None. With `residues`, the
        loop runs over the quotient and its masks are those of every residue."""
        kernel = self.kernel
        if not loops or loops[-1].bounds is None or self.stores_along_second_last:
            return None
        if not all(isinstance(i, str) for i in kernel.items):
            return None
        var = outer_vars(len(kernel.outer))[-1]
        values = [node_body(self.buffers[name], kernel.outer, "y")[0] for name in kernel.items]
        if residues:
            values = [residues.rewrite(v, r) for v in values for r in range(residues.divisor)]
        split = loop_split(values, var)
        if split is None:
            return None
        start, end = loops[-1].bounds
        before = self.hoisted[-2]
        for k, threshold in enumerate(split.thresholds):
            before.line(
                f"const int64_t {var}_split{k} = std::min<int64_t>("
                f"std::max<int64_t>({c_index(threshold)}, {start}), {end});"
            )
        return split

    @staticmethod
    def _piece_headers(split: LoopSplit, loop: OuterLoop) -> list[str]:
        """The headers of the pieces of `loop`, split at its thresholds."""
        var, (start, end) = loop.var, loop.bounds
        bounds = [start, *(f"{var}_split{k}" for k in range(len(split.thresholds))), end]
        return [_loop(var, a, b, False, False).header for a, b in zip(bounds, bounds[1:])]

    def _outer_loops(self) -> list[OuterLoop]:
        """The outer loop nest; the last two loops go in square tiles when an access reads
        or writes the nest transposed (then each tile's reads stay in a few cache lines).
        Within a tile, the element loop along which the stores run is innermost."""
        outer = self.kernel.outer
        xs = outer_vars(len(outer))
        loops = [_loop(var, "0", c_index(size), True, True) for var, size in zip(xs, outer)]
        self.stores_along_second_last = False
        tiling = self._transposed_tiling()
        if tiling is None:
            return loops
        (a, a_size), (b, b_size) = zip(xs[-2:], outer[-2:])
        tile = TRANSPOSE_TILE

        def tile_loop(var, size):
            return OuterLoop(
                var,
                f"for (int64_t {var}_tile = 0; {var}_tile < {c_index(size)}; "
                f"{var}_tile += {tile}) {{",
                False,
                False,
            )

        def element_loop(var, size, hoisted):
            end = f"std::min<int64_t>({var}_tile + {tile}, {c_index(size)})"
            return _loop(var, f"{var}_tile", end, hoisted, False)

        tiles = [OuterLoop(a, tile_loop(a, a_size).header, True, False), tile_loop(b, b_size)]
        inner, across = (b, a) if tiling == "last" else (a, b)
        self._stage_transposed_loads(inner, across)
        if tiling == "last":
            return (
                loops[:-2] + tiles + [element_loop(a, a_size, False), element_loop(b, b_size, True)]
            )
        # NOTE: the element loop over the last dim is outside the one over the second-last:
        # nothing is computed between them (see outer_home), each value in the body.
        self.stores_along_second_last = True
        return loops[:-2] + tiles + [element_loop(b, b_size, False), element_loop(a, a_size, False)]

    def _stage_transposed_loads(self, inner: sympy.Symbol, across: sympy.Symbol) -> None:
        """Each 4-byte load of a tiled kernel that runs along `across` (its index steps by 1
        with it) and strides along `inner`, the tile's innermost loop, reads a copy of its
        tile made before the element loops (`ember_transpose_tile`, in vector registers),
        contiguous along `inner`: the element loop then vectorizes.

        Only where every load is unconditional (no masked branch, no indirect load): the
        copy reads the whole tile, each element of which the body reads anyway.
        """
        kernel, outer = self.kernel, self.kernel.outer
        values = [node_body(self.buffers[name], outer, "y")[0] for name in kernel.nodes]
        if any(_has_branch(value) for value in values):
            return
        xs = outer_vars(len(outer))
        sizes = dict(zip(xs, outer))
        corner = {v: sympy.Symbol(f"{v}_tile", integer=True) for v in (inner, across)}
        extent = {
            v: f"std::min<int64_t>({v}_tile + {TRANSPOSE_TILE}, {c_index(sizes[v])}) - {v}_tile"
            for v in (inner, across)
        }
        skip = self.produced | self._aliased()
        for value in values:
            for load in expr_loads(value):
                if load in self.staged or load.buffer in skip:
                    continue
                if load.dtype not in (torch.float32, torch.int32):
                    continue
                index = sympy.expand(load.index)
                stride = index.coeff(inner)
                rest = sympy.expand(index - across - stride * inner)
                if index.coeff(across) != 1 or stride in (0, 1):
                    continue
                if (rest.free_symbols | stride.free_symbols) & {inner, across}:
                    continue
                tile = f"tile{len(self.staged)}"
                ctype = STORAGE_TYPES[load.dtype]
                ptr = self.pointer(load.buffer, writing=False)
                self.stage_lines += [
                    f"{ctype} {tile}[{TRANSPOSE_TILE}][{TRANSPOSE_TILE}];",
                    f"ember_transpose_tile<{ctype}>({tile}, {ptr} + {c_index(index.xreplace(corner))}, "
                    f"{c_index(stride)}, {extent[across]}, {extent[inner]});",
                ]
                self.staged[load] = f"{tile}[{across} - {across}_tile][{inner} - {inner}_tile]"

    def _transposed_tiling(self) -> str | None:
        """For a kernel of outer-level nodes only (two outer loops at least, sizes of a
        tile or more) that loads and stores the last two loops in different orders: the
        loop every store runs along ("last" or "second-last"), or None (no tiles).

        An access runs along a loop when its index steps by 1 with it; it reads the
        nest transposed when it runs along one loop and steps by more along the other.
        """
        kernel = self.kernel
        outer = kernel.outer
        if len(outer) < 2 or any(isinstance(i, LoopGroup) for i in kernel.items):
            return None
        if not all(s.is_Integer and int(s) >= TRANSPOSE_TILE for s in outer[-2:]):
            return None
        a, b = outer_vars(len(outer))[-2:]

        def along(index, var, other) -> bool:
            return index.coeff(var) == 1 and index.coeff(other) not in (0, 1)

        stores, loads = set(), set()
        for name in kernel.nodes:
            value, store, _ = node_body(self.buffers[name], outer, "y")
            if name not in kernel.locals_:
                stores.add(
                    "last" if store.coeff(b) == 1 else "second-last" if along(store, a, b) else None
                )
            for load in expr_loads(value):
                index = sympy.expand(load.index)
                loads.add(
                    "second-last" if along(index, a, b) else "last" if along(index, b, a) else None
                )
        if len(stores) != 1 or None in stores:
            return None
        (order,) = stores
        return order if ({"last", "second-last"} - {order}) & loads else None

    def _collapse_depth(self, loops: list[OuterLoop]) -> int:
        """How many outer loops the parallel loop spans: more than the first when it has
        fewer iterations than MIN_PARALLEL_ITERATIONS and the loops nest perfectly
        (plain loops over a whole dim, nothing computed between them)."""
        outer = self.kernel.outer
        # The innermost loop of a kernel without inner loops is its vector loop: kept apart.
        vector_loop = not any(isinstance(i, LoopGroup) for i in self.kernel.items)
        depth, iterations = 1, outer[0] if outer else sympy.Integer(1)
        while (
            depth < len(outer) - vector_loop
            and loops[depth].whole
            and iterations.is_Integer
            and int(iterations) < MIN_PARALLEL_ITERATIONS
            and not self.hoisted[depth].lines
        ):
            iterations = iterations * outer[depth]
            depth += 1
        return depth

    def finish(self, lines) -> KernelSource:
        """The kernel source of a body printed as `lines`, with its parameters."""
        for symbol in kernel_size_symbols(self.kernel, self.buffers):
            self.args["size:" + symbol] = KernelArg("size", symbol, "int64_t")
        if self.checks:
            self.args[STATUS_PARAM] = KernelArg("status", STATUS_PARAM, "int64_t* __restrict__")
        params = ", ".join(f"{a.ctype} {self._param_name(key)}" for key, a in self.args.items())
        source = f'extern "C" void KERNEL_NAME({params})\n{{\n' + "\n".join(lines) + "\n}\n"
        args = tuple(self.args.values())
        return KernelSource(self.kernel.name, source, args, tuple(self.checks))

    # ---------------------------------------------------------- reductions along outer dims

    def _wants_tiling(self) -> bool:
        """A column reduction (`scheduler.is_column_reduction`: one reduction group read
        along the last outer dim, then outer-level nodes such as a mean's division or a
        norm's epilogue) runs r outside, x inside over a tile of accumulators, reading
        memory in order. (Channels-last data reduced over H and W, an average pool, is
        such a reduction.)"""
        items = self.kernel.items
        if not items or isinstance(items[0], str):
            return False
        plan = (self.kernel.outer, items)
        return is_column_reduction(plan, [self.buffers[name] for name in items[0].nodes])

    def _tiled_reduction_kernel(self) -> list[str]:
        group = self.kernel.items[0]
        outer = self.kernel.outer
        xs = outer_vars(len(outer))
        rs = inner_vars("r", len(group.ranges))
        last, size = xs[-1], c_index(outer[-1])
        tile = TILE
        lines = []
        work = numel(outer) * numel(group.ranges)
        clause = parallel_clause(work)
        parallel = clause is not None
        for depth, (var, extent) in enumerate(zip(xs[:-1], outer[:-1])):
            if depth == 0 and parallel:
                lines.append("  " * (1 + depth) + f"#pragma omp parallel for{clause}")
            lines.append(
                "  " * (1 + depth)
                + f"for (int64_t {var} = 0; {var} < {c_index(extent)}; ++{var}) {{"
            )
        depth = len(outer) - 1
        pad = "  " * (1 + depth)
        if depth == 0 and parallel:
            lines.append(f"{pad}#pragma omp parallel for{clause}")
        lines.append(
            f"{pad}for (int64_t {last}_tile = 0; {last}_tile < {size}; {last}_tile += {tile}) {{"
        )
        lines.append(
            f"{pad}  const int64_t {last}_end = std::min<int64_t>({last}_tile + {tile}, {size});"
        )
        scope = Scope(self, None, depth + 2)
        bodies = [(name, *node_body(self.buffers[name], outer, "r")[:2]) for name in group.nodes]
        accumulators: dict = {}
        for name, value, _ in bodies:
            rtype = self.buffers[name].body.reduction_type
            key = (REDUCTION_FAMILY.get(rtype, rtype), value)
            if key not in accumulators:
                acc = f"acc{len(accumulators)}"
                accumulators[key] = acc
                declaration = self._acc_init(
                    key[0], f"{acc}_init", value.dtype, numel(group.ranges)
                )
                scope.line(declaration)
                ctype = declaration.split(f" {acc}_init")[0]
                scope.line(f"{ctype} {acc}[{tile}];")
                scope.line(f"for (int64_t t = 0; t < {tile}; ++t) {acc}[t] = {acc}_init;")
        for var, extent in zip(rs, group.ranges):
            scope.line(f"for (int64_t {var} = 0; {var} < {c_index(extent)}; ++{var}) {{")
            scope.indent += 1
        start = (len(scope.lines), scope.indent)
        scope.line("#pragma GCC ivdep")
        scope.line(f"for (int64_t {last} = {last}_tile; {last} < {last}_end; ++{last}) {{")
        scope.indent += 1
        scope.loop_start = start
        inner = Scope(self, scope, scope.indent)
        if all(extent != 0 for extent in group.ranges):
            # NOTE: an empty reduction keeps its loads in the loop (they read nothing).
            inner.loop_vars = frozenset({last})
        flat_r = c_index(flat_index(rs, contiguous_strides(group.ranges)))
        for (family, value), acc in accumulators.items():
            text = inner.value(value)
            inner.line(
                self._acc_update(family, f"{acc}[{last} - {last}_tile]", text, value.dtype, flat_r)
            )
        scope.loop_start = None
        scope.lines.extend(inner.lines)
        for _ in range(len(rs) + 1):
            scope.indent -= 1
            scope.line("}")
        scope.line(f"for (int64_t {last} = {last}_tile; {last} < {last}_end; ++{last}) {{")
        scope.indent += 1
        store_scope = Scope(self, None, scope.indent)
        for name, value, index in bodies:
            rtype = self.buffers[name].body.reduction_type
            acc = accumulators[(REDUCTION_FAMILY.get(rtype, rtype), value)]
            result, dtype = self._acc_result(rtype, f"{acc}[{last} - {last}_tile]", value.dtype)
            self.store(store_scope, name, index, result, dtype)
        for name in self.kernel.items[1:]:
            self._outer_node(store_scope, name)
        scope.lines.extend(store_scope.lines)
        scope.indent -= 1
        scope.line("}")
        lines += scope.lines
        lines.append(f"{pad}}}")
        for d in reversed(range(depth)):
            lines.append("  " * (1 + d) + "}")
        return lines

    def _param_name(self, key: str) -> str:
        if key == STATUS_PARAM:
            return STATUS_PARAM
        if key.startswith("size:"):
            return key[len("size:") :]
        if key.startswith("scalar:"):
            return self.scalars[key[len("scalar:") :]]
        return self.pointer_names[key]

    def _outer_node(self, scope: Scope, name: str, known: dict | None = None, residue=None) -> None:
        buf = self.buffers[name]
        value, index = node_body(buf, self.kernel.outer, "y")[:2]
        if residue:  # (ResidueUnroll, the residue printed)
            unroll, r = residue
            value, index = unroll.rewrite(value, r), unroll.index(index, r)
        if known:
            value = substitute(value, known)
        self.store(scope, name, index, scope.value(value), value.dtype)

    def _loop_open(
        self, scope: Scope, variables, ranges, innermost="#pragma GCC ivdep", outermost=None
    ) -> Scope:
        start = (len(scope.lines), scope.indent)
        for depth, (var, size) in enumerate(zip(variables, ranges)):
            if depth == 0 and outermost:
                scope.line(
                    outermost if len(ranges) > 1 else outermost.replace(" for ", " for simd ", 1)
                )
            elif depth == len(ranges) - 1 and innermost:
                scope.line(innermost)
            scope.line(f"for (int64_t {var} = 0; {var} < {c_index(size)}; ++{var}) {{")
            scope.indent += 1
        scope.loop_start = start
        inner = Scope(self, scope, scope.indent)
        if all(size != 0 for size in ranges):
            # NOTE: a loop that may run zero times keeps its loads (empty tensors).
            inner.loop_vars = frozenset(variables)
        return inner

    def _loop_close(self, scope: Scope, inner: Scope, depth: int) -> None:
        scope.loop_start = None
        scope.lines.extend(inner.lines)
        for _ in range(depth):
            scope.indent -= 1
            scope.line("}")

    def _pointwise_group(self, scope: Scope, group: LoopGroup) -> None:
        ys = inner_vars("y", len(group.ranges))
        inner = self._loop_open(scope, ys, group.ranges)
        self.looped_nodes = frozenset(group.nodes)
        for name in group.nodes:
            value, index = node_body(self.buffers[name], self.kernel.outer, "y")[:2]
            self.store(inner, name, index, inner.value(value), value.dtype)
        self.looped_nodes = frozenset()
        self._loop_close(scope, inner, len(group.ranges))

    def _reduction_group(self, scope: Scope, group: LoopGroup) -> None:
        rs = inner_vars("r", len(group.ranges))
        outer = self.kernel.outer
        bodies = [(name, *node_body(self.buffers[name], outer, "r")[:2]) for name in group.nodes]
        accumulators: dict = {}
        for name, value, _ in bodies:
            rtype = self.buffers[name].body.reduction_type
            key = (REDUCTION_FAMILY.get(rtype, rtype), value)
            if key not in accumulators:
                accumulators[key] = f"acc{len(accumulators)}_{self.kernel.nodes.index(name)}"
                scope.line(
                    self._acc_init(key[0], accumulators[key], value.dtype, numel(group.ranges))
                )
        innermost, outermost = "#pragma GCC ivdep", None
        if all(family == "sum" for family, _ in accumulators):
            names = ", ".join(accumulators.values())
            innermost = f"#pragma omp simd reduction(+:{names})"
            whole = not self.kernel.outer and len(self.kernel.items) == 1
            work = numel(group.ranges)
            clause = parallel_clause(work)
            if whole and rs and clause is not None:
                outermost = f"#pragma omp parallel for reduction(+:{names}){clause}"
        inner = self._loop_open(scope, rs, group.ranges, innermost, outermost)
        flat_r = c_index(flat_index(rs, contiguous_strides(group.ranges))) if rs else "0"
        for (family, value), acc in accumulators.items():
            text = inner.value(value)
            inner.line(self._acc_update(family, acc, text, value.dtype, flat_r))
        self._loop_close(scope, inner, len(group.ranges))
        for name, value, index in bodies:
            rtype = self.buffers[name].body.reduction_type
            acc = accumulators[(REDUCTION_FAMILY.get(rtype, rtype), value)]
            result, dtype = self._acc_result(rtype, acc, value.dtype)
            self.store(scope, name, index, result, dtype)

    def _acc_init(self, family: str, acc: str, dtype, extent) -> str:
        if family in ("sum", "prod"):
            ctype = accumulate_type(dtype, extent)
        else:
            ctype = compute_type(dtype)
        if family == "welford":
            return f"EmberWelford {acc};"
        if family in ("argmax", "argmin"):
            return f"EmberArgAcc<{compute_type(dtype)}> {acc}{{{compute_type(dtype)}(0), -1}};"
        init = {
            "sum": "0",
            "prod": "1",
            "any": "false",
            "all": "true",
            "max": _lowest(dtype),
            "min": _highest(dtype),
        }[family]
        return f"{ctype} {acc} = {init};"

    def _acc_update(self, family, acc, value, dtype, flat_r) -> str:
        if family == "sum":
            return f"{acc} += {value};"
        if family == "prod":
            return f"{acc} *= {value};"
        if family == "max":
            return f"{acc} = ember_maximum<{compute_type(dtype)}>({acc}, {value});"
        if family == "min":
            return f"{acc} = ember_minimum<{compute_type(dtype)}>({acc}, {value});"
        if family == "any":
            return f"{acc} = {acc} || {value};"
        if family == "all":
            return f"{acc} = {acc} && {value};"
        if family in ("argmax", "argmin"):
            return f"ember_{family}_update({acc}, {value}, {flat_r});"
        if family == "welford":
            return f"ember_welford_update({acc}, static_cast<double>({value}));"
        raise InductorError(f"unknown reduction {family!r}")

    def _acc_result(self, rtype, acc, dtype):
        if rtype == "welford_mean":
            nan = f"std::numeric_limits<{compute_type(dtype)}>::quiet_NaN()"
            return f"({acc}.n == 0 ? {nan} : static_cast<{compute_type(dtype)}>({acc}.mean))", dtype
        if rtype == "welford_m2":
            return f"static_cast<{compute_type(dtype)}>({acc}.m2)", dtype
        if rtype in ("argmax", "argmin"):
            return f"{acc}.index", torch.int64
        if rtype in ("any", "all"):
            return acc, torch.bool
        return f"static_cast<{compute_type(dtype)}>({acc})", dtype


def _join_residues(blocks: list[list[str]], depth: int) -> list[str]:
    """The bodies of a loop's residues (see residues), one after another, each a block
    of its own (their local variables are declared again)."""
    pad = "  " * (1 + depth)
    lines = []
    for block in blocks:
        lines += [pad + "{", *("  " + line for line in block), pad + "}"]
    return lines


def _has_branch(expr) -> bool:
    """Whether `expr` loads under a condition (a masked select) or through a loaded index."""
    stack, seen = [expr], set()
    while stack:
        e = stack.pop()
        if not isinstance(e, Op) or id(e) in seen:
            continue
        seen.add(id(e))
        if e.name in ("masked", "indirect_load"):
            return True
        stack.extend(e.args)
    return False


def index_symbols(expr) -> set[sympy.Symbol]:
    """Every symbol in the indices `expr` loads at or computes (loop variables and sizes)."""
    found: set[sympy.Symbol] = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, (Load, IndexValue)):
            found |= e.index.free_symbols
        elif isinstance(e, Op):
            stack.extend(e.args)
    return found


def accumulate_type(dtype, extent) -> str:
    """The C++ type of a sum or product over `extent` values of `dtype`.

    Floats of 32 bits or less add in float (vector registers hold twice as many
    lanes, as eager does) when each lane adds a few hundred values at most:
    a reduction of at most FLOAT_ACCUMULATE_MAX elements. Longer or symbolic
    ones add in double, which keeps the result within float32 rounding of eager's
    cascade sum.
    """
    if dtype in (torch.float32, torch.bfloat16, torch.float16):
        short = extent.is_Integer and int(extent) <= FLOAT_ACCUMULATE_MAX
        return "float" if short else "double"
    return compute_type(dtype)


def _lowest(dtype) -> str:
    if dtype.is_floating_point:
        return f"-std::numeric_limits<{compute_type(dtype)}>::infinity()"
    if dtype == torch.bool:
        return "false"
    return f"std::numeric_limits<{compute_type(dtype)}>::lowest()"


def _highest(dtype) -> str:
    if dtype.is_floating_point:
        return f"std::numeric_limits<{compute_type(dtype)}>::infinity()"
    if dtype == torch.bool:
        return "true"
    return f"std::numeric_limits<{compute_type(dtype)}>::max()"
