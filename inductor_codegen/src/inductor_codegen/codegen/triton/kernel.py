"""Triton code generation: one `@triton.jit` function per fused kernel.

The kernel's outer loop nest is flattened into `xindex`, one block of XBLOCK
elements per program. Kernels without inner loops are 1D; others are 2D:
outer values have shape [XBLOCK, 1], and each inner loop group g (reduction
or pointwise) runs over `rg_index` blocks of shape [1, RgBLOCK], persistent
(one block covers the whole row) when the row is short, looped otherwise.
Ragged edges are masked (`xmask`, `rgmask`); masked-out lanes of a reduction
hold the reduction's identity. Reductions keep one accumulator per lane and
combine lanes at the end (`tl.sum`, `tl.reduce` with the prelude's combine
functions; Welford for var/mean). Index math is printed from the IR's sympy
expressions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import sympy
import torch

from inductor_codegen.codegen.kernel import (
    KernelArg,
    KernelPrinter,
    ScopeChain,
    row_major_coordinates,
)
from inductor_codegen.codegen.ops import TRITON_OPS
from inductor_codegen.codegen.triton.ops import (
    LOW_PRECISION,
    POLYNOMIAL_MATH,
    TRITON_DTYPES,
    as_tensor_text,
    cast_text,
    compute_dtype,
    literal,
)
from inductor_codegen.errors import InductorError
from inductor_codegen.indexing import FloorDiv, IndexMod, numel, py_index
from inductor_codegen.ir import Constant, IndexValue, Load, Op, ScalarArg, expr_loads
from inductor_codegen.lowering.indirect import INDIRECT_LOAD, offset_in_range
from inductor_codegen.lowering.split import REDUCTION_MASK
from inductor_codegen.scheduler import (
    FusedKernel,
    LoopGroup,
    inner_vars,
    map_loads,
    node_body,
    outer_vars,
)
from inductor_codegen.symbols import kernel_size_symbols

__all__ = ["GroupMeta", "TritonKernelSource", "generate_triton_kernel", "triton_index"]

# Rows up to this many elements are reduced by one block (persistent reduction).
PERSISTENT_MAX = 4096
# 2D tiles only where the grid's second dimension (at most 65535 programs) covers the rows.
MAX_TILE_ROWS = 65535 * 16
# Rows at least this long that stay apart in the loop nest (rows of 50257 logits read into
# a buffer padded to 50264 columns) run as row tiles: a flat loop over them would divide
# every index by the row length, and its loads could not be vectorized.
ROW_TILE_MIN = 512
# A column reduction over more elements than this loops over XBLOCK x RBLOCK tiles; a
# smaller one (the final reduction over split partials) reads its rows in one block.
COLUMN_PERSISTENT_ELEMENTS = 1 << 18
# Rows of a looped column reduction this short are still read in one block: a tile of
# 64 rows would leave most lanes masked (summing 4 repeated attention heads' gradients).
COLUMN_PERSISTENT_ROWS = 64
REDUCTION_FAMILY = {"welford_mean": "welford", "welford_m2": "welford"}
# The maximum of bools is any(), their minimum all(): int8 accumulators (Triton's tl.max
# and tl.min do not compile over int1).
BOOL_FAMILY = {"max": "any", "min": "all"}


def reduction_family(rtype: str, dtype: torch.dtype) -> str:
    """The accumulator family of a reduction of `rtype` over values of `dtype`."""
    family = REDUCTION_FAMILY.get(rtype, rtype)
    if dtype == torch.bool:
        return BOOL_FAMILY.get(family, family)
    return family


def _welford_dtype(dtype: torch.dtype) -> torch.dtype:
    """A Welford reduction's accumulators: float64 for float64 values, else float32."""
    return torch.float64 if compute_dtype(dtype) == torch.float64 else torch.float32


# The element count launch heuristics assume for a symbolic one (the grid is computed per call).
SYMBOLIC_NUMEL_HINT = 1 << 20


@dataclass(frozen=True, slots=True)
class GroupMeta:
    """One inner loop group: its kind, elements per row, and whether one block covers it."""

    kind: str
    numel: int | str  # a symbolic count is its Triton expression over the size arguments
    persistent: bool


@dataclass(frozen=True, slots=True)
class TritonKernelSource:
    """A generated kernel: the function (named KERNEL_NAME), parameters and launch facts."""

    name: str
    source: str
    args: tuple[KernelArg, ...]
    xnumel: int
    groups: tuple[GroupMeta, ...]
    contiguous_x: bool
    ynumel: int = 0  # > 0: a 2D-tiled pointwise kernel, x over the last dim, y over the rest
    # Symbolic sizes: xnumel as a Python expression over the size arguments (grid per call);
    # `xnumel` then holds SYMBOLIC_NUMEL_HINT for the launch heuristics.
    xnumel_expr: str = ""
    # Reductions whose loads run along the outputs, not the rows (looped, wide XBLOCK).
    column_reduction: bool = False
    # A 2D-tiled kernel over long rows with no transposed access (wide, short tiles).
    row_tiles: bool = False
    # 2D tiles: elements along y over which the transposed accesses are contiguous.
    yrun: int = 0
    # Calls of software-evaluated math functions (ops.POLYNOMIAL_MATH) in the kernel body.
    math_calls: int = 0
    # > 1: a flat kernel of independent parts, each over all xnumel elements; the grid
    # holds `segments` times the programs of one part, each program running one part.
    segments: int = 0
    # > 0: each program runs this many rows, XBLOCK at a time (a row kernel computing
    # column partials, see inductor_codegen.column_partials); the grid counts row blocks.
    rows_per_program: int = 0


def triton_index(expr, names: dict | None = None) -> str:
    """An index expression as Triton/Python integer arithmetic (indices are non-negative)."""
    names = names or {}
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Symbol:
        return names.get(expr.name, expr.name)
    if expr.is_Add:
        return "(" + " + ".join(triton_index(a, names) for a in _ordered(expr.args)) + ")"
    if expr.is_Mul:
        return "(" + " * ".join(triton_index(a, names) for a in _ordered(expr.args)) + ")"
    if isinstance(expr, FloorDiv):
        return f"({triton_index(expr.args[0], names)} // {triton_index(expr.args[1], names)})"
    if isinstance(expr, IndexMod):
        return f"({triton_index(expr.args[0], names)} % {triton_index(expr.args[1], names)})"
    if isinstance(expr, (sympy.Max, sympy.Min)):
        fn = "tl.maximum" if isinstance(expr, sympy.Max) else "tl.minimum"
        a, b = expr.args[0], type(expr)(*expr.args[1:])
        return f"{fn}({triton_index(a, names)}, {triton_index(b, names)})"
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        return "(" + " * ".join([triton_index(expr.base, names)] * int(expr.exp)) + ")"
    raise InductorError(f"cannot print index expression {expr} for Triton")


def _ordered(args):
    return sorted(args, key=lambda a: (a.is_Number, sympy.default_sort_key(a)))


class Scope(ScopeChain):
    """A block of generated lines and the values already held in variables."""

    def __init__(self, codegen: TritonKernelCodegen, parent: Scope | None, indent: int, mask: str):
        self.codegen = codegen
        self.parent = parent
        self.indent = indent
        self.mask = mask  # the mask of loads in this scope
        self.group: int | None = parent.group if parent else None
        self.lines: list[str] = []
        self.cache: dict = {}

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def value(self, expr, mask: str | None = None) -> str:
        """A variable holding `expr` (in its compute dtype); `mask` guards extra loads."""
        key = (expr, mask)
        hit = self.lookup(key) or (self.lookup((expr, None)) if mask else None)
        if hit is not None:
            return hit
        if isinstance(expr, Constant):
            return literal(expr.value, compute_dtype(expr.dtype))
        if isinstance(expr, ScalarArg):
            return self.codegen.scalar(expr)
        if isinstance(expr, IndexValue):
            text = f"({self.codegen.index(expr.index, self)}).to({TRITON_DTYPES[compute_dtype(expr.dtype)]})"
        elif isinstance(expr, Load):
            text = self.codegen.load(expr, self, mask)
        elif isinstance(expr, Op):
            text = self._op(expr, mask)
        else:
            raise InductorError(f"cannot print {expr!r} as Triton")
        name = self.codegen.new_temp()
        self.line(f"{name} = {text}")
        self.cache[key] = name
        return name

    def _op(self, expr: Op, mask: str | None) -> str:
        if expr.name == INDIRECT_LOAD:
            return self.codegen.indirect_load(expr, self, mask)
        if expr.name == "masked":
            # Each branch loads only where it is taken: the other may index out of bounds
            # (the pieces of a cat, the border of a pad).
            cond = self.value(expr.args[0], mask)
            inner = cond if mask is None else f"({mask}) & ({cond})"
            other = f"({cond} == 0)" if mask is None else f"({mask}) & ({cond} == 0)"
            a = self.value(expr.args[1], inner)
            b = self.value(expr.args[2], other)
            a = cast_text(a, expr.args[1].dtype, expr.dtype)
            b = cast_text(b, expr.args[2].dtype, expr.dtype)
            return f"tl.where({cond}, {a}, {b})"
        if expr.name == "to_dtype":
            return cast_text(self.value(expr.args[0], mask), expr.args[0].dtype, expr.dtype)
        args = [self.value(a, mask) for a in expr.args]
        if expr.name in POLYNOMIAL_MATH:
            self.codegen.math_calls += 1
        emit = TRITON_OPS.get(expr.name)
        if emit is None:
            raise InductorError(
                f"the Triton op table has no entry for {expr.name!r}; add a row to codegen.ops.OPS"
            )
        return emit(args, [a.dtype for a in expr.args], expr.dtype)


class TritonKernelCodegen(KernelPrinter):
    """Prints one FusedKernel as a Triton kernel."""

    def __init__(self, kernel: FusedKernel, buffers: dict):
        super().__init__(kernel, buffers)
        self.math_calls = 0
        self.bounds_checked = False  # the kernel checks offsets of indirect loads
        self.local_names: dict[str, str] = {}
        self.groups = [i for i in kernel.items if isinstance(i, LoopGroup)]
        self.column = self._column_reduction()
        looped = self.column and self._elements() > COLUMN_PERSISTENT_ELEMENTS
        self.group_ids, self.group_meta = _number_groups(self.groups, looped=looped)
        self.group_ranges = {g: grp.ranges for g, grp in zip(self.group_ids, self.groups)}
        self.shared_scopes: dict[int, Scope] = {}
        self.locals_ = kernel.locals_ | self._row_locals()
        self.accumulator_count = 0
        self.masks: dict[str, str] = {}  # accumulator -> the mask of its lanes
        self.two_d = bool(self.groups)
        self.row_tiles = False
        self.tiled = self._wants_tiles()
        self.y_order = self._tile_y_order() if self.tiled else ()
        self.int64 = self._needs_int64()
        # Column reductions over a static [*lead, last] outer nest: the size of the last
        # dim, whose multiples a tile of outputs must not cross for `_uniform_load`.
        outer = kernel.outer
        self.tile_uniform_size = (
            int(outer[-1])
            if self.column
            and not self.tiled
            and len(outer) >= 2
            and all(isinstance(s, sympy.Integer) for s in outer)
            else None
        )
        self.segments = self._segments()
        self.column_group: int | None = None  # the group printing column partials
        self.column_values: list = []
        # Looped max groups printed as one online loop with the sum that follows them.
        self.online = self._online_logsumexp_pairs()
        self.online_second = {id(pair[0]) for pair in self.online.values()}

    # ---------------------------------------------------------- arguments and memory

    def pointer_type(self, kind: str, dtype: torch.dtype, aliased: bool = False) -> str:
        return TRITON_DTYPES[dtype]

    def scalar_type(self, dtype: torch.dtype) -> str:
        return TRITON_DTYPES[dtype]

    def _names(self, group: int | None) -> dict:
        """Inner loop variables of group g print as r{g}_{k}: each group has its own."""
        if group is None:
            return {}
        return {f"{p}{k}": f"r{group}_{k}" for p in "ry" for k in range(8)}

    def index(self, expr, scope: Scope, store: bool = False) -> str:
        text = self._linear_index(expr, scope) or triton_index(expr, self._names(scope.group))
        if not any(s.name.startswith(("x", "r", "y")) for s in expr.free_symbols):
            # a block of pointers, not one (a load in a tile: one per row of the tile)
            text = f"({text} + {'yzero' if self.tiled and not store else 'xzero'})"
        return text

    def _linear_index(self, expr, scope: Scope) -> str | None:
        """`a * xindex + b * rindex + c` when `expr` is that in the flat loop indices.

        Printing the flat index itself (not the per-dimension variables it was
        split into) lets Triton see contiguous runs and vectorize loads and stores.
        """
        xs = outer_vars(len(self.kernel.outer))
        terms = [(xs, self.kernel.outer, "xindex")]
        if self.tiled:
            outer = self.kernel.outer
            ys = tuple(xs[k] for k in self.y_order)
            y_sizes = tuple(outer[k] for k in self.y_order)
            terms = [(ys, y_sizes, "yindex"), (xs[-1:], outer[-1:], "xindex")]
        if scope.group is not None:
            ranges = self.group_ranges[scope.group]
            terms.append((inner_vars("r", len(ranges)), ranges, f"r{scope.group}index"))
        rest, parts, loop_vars = sympy.expand(expr), [], set()
        for variables, sizes, flat_name in terms:
            if not variables:
                continue
            loop_vars |= set(variables)
            coefficient = rest.coeff(variables[-1])
            if not coefficient.is_Integer or coefficient == 0:
                continue
            flat, below = sympy.Integer(0), sympy.Integer(1)
            for var, size in zip(reversed(variables), reversed(sizes)):
                flat, below = flat + var * below, below * size
            rest = sympy.expand(rest - coefficient * flat)
            parts.append(flat_name if coefficient == 1 else f"{int(coefficient)} * {flat_name}")
        if not parts or rest.free_symbols & loop_vars:
            return None
        if rest != 0:
            parts.append(triton_index(rest))
        return "(" + " + ".join(parts) + ")"

    def _mask_for(self, expr, scope: Scope, store: bool = False) -> str:
        if scope.group is None:
            if (
                self.tiled
                and not store
                and outer_vars(len(self.kernel.outer))[-1] not in expr.free_symbols
            ):
                # the same for every column of the tile: one load per row (a [YBLOCK, 1]
                # block that broadcasts), not one per element
                return "ymask"
            return "xmask"
        inner = any(s.name.startswith(("r", "y")) for s in expr.free_symbols)
        # An empty loop reads nothing, not even values that do not vary along it.
        if inner or self.group_meta[scope.group].numel == 0:
            return f"xmask & r{scope.group}mask"
        return "xmask"

    def load(self, expr: Load, scope: Scope, extra_mask: str | None) -> str:
        ptr = self.pointer(expr.buffer, writing=False)
        mask = self._mask_for(expr.index, scope)
        if extra_mask is not None:
            mask = f"({mask}) & ({extra_mask})"
        text = f"tl.load({ptr} + {self.index(expr.index, scope)}, {mask}, other=0)"
        uniform = self._uniform_load(expr, scope, extra_mask)
        if uniform is not None:
            # Chosen when the kernel compiles: the tile's outputs share their leading
            # indices only when XBLOCK divides the last outer size.
            held = self.new_temp()
            scope.line(f"if {self.tile_uniform_size} % XBLOCK == 0:")
            scope.line(f"    {held} = {uniform}")
            scope.line("else:")
            scope.line(f"    {held} = {text}")
            text = held
        if expr.dtype in LOW_PRECISION:
            return f"{text}.to(tl.float32)"
        return text

    def indirect_load(self, expr: Op, scope: Scope, extra_mask: str | None) -> str:
        """A load whose address holds a loaded offset (see lowering.indirect):

            tmp3 = tl.load(in_ptr1 + (xindex), xmask, other=0)      # the offset
            tmp4 = (tmp3 >= 0) & (tmp3 < 5001)                      # its bounds check
            tl.device_assert(tmp4 | ~(xmask), "index out of range in gather (dim 1)")
            tmp5 = tl.load(in_ptr0 + (5001 * xindex + tmp3), (xmask) & (tmp4), other=0)

        The lanes the kernel computes check their offset (`tl.device_assert`: an error
        under the interpreter and in debug builds); an offset out of range is never read
        and gives NaN in a floating-point table (0 in others), so that a run without
        the assertion shows the fault in its result rather than an inconspicuous value.
        """
        load, offset, marker, bound, check = expr.args
        where = scope.value(offset, extra_mask)
        address = load.index.xreplace({marker.index: sympy.Symbol(where, integer=True)})
        # Lanes are masked along the loop the address or the offset runs over.
        reads = [address] + [e.index for e in expr_loads(offset)]
        mask = self._mask_for(sympy.Add(*reads, evaluate=False), scope)
        if extra_mask is not None:
            mask = f"({mask}) & ({extra_mask})"
        key = ("indirect_check", where, bound.index, mask)
        in_range = scope.lookup(key)
        if in_range is None and offset_in_range(offset, bound, self._outer_ranges()):
            # in range by construction (a clamp, an arange): no check, no assertion
            ptr = self.pointer(load.buffer, writing=False)
            text = f"tl.load({ptr} + {self.index(address, scope)}, {mask}, other=0)"
            return f"{text}.to(tl.float32)" if load.dtype in LOW_PRECISION else text
        if in_range is None:
            in_range = self.new_temp()
            limit = triton_index(bound.index, self._names(scope.group))
            scope.line(f"{in_range} = ({where} >= 0) & ({where} < {limit})")
            message = f"index out of range in {check.op} (dim {check.dim})"
            scope.line(f'tl.device_assert({in_range} | ~({mask}), "{message}")')
            self.bounds_checked = True
            scope.cache[key] = in_range
        ptr = self.pointer(load.buffer, writing=False)
        text = f"tl.load({ptr} + {self.index(address, scope)}, ({mask}) & ({in_range}), other=0)"
        if load.dtype in LOW_PRECISION:
            text = f"{text}.to(tl.float32)"
        if load.dtype.is_floating_point:
            held = self.new_temp()
            scope.line(f"{held} = {text}")
            text = f'tl.where({in_range}, {held}, float("nan"))'
        return text

    def _outer_ranges(self) -> dict:
        """{outer loop variable: its size}, the ranges an offset's index values lie in."""
        outer = self.kernel.outer
        return dict(zip(outer_vars(len(outer)), outer))

    def _uniform_load(self, expr: Load, scope: Scope, extra_mask: str | None) -> str | None:
        """A column reduction's load of a value per reduced row (a norm's mean and rstd
        in its weight gradient's partial sums), as one [1, RBLOCK] row for the tile.

        Such a load's index has the reduction's variables and the leading outer ones
        but not the last: every output of a tile of XBLOCK contiguous outputs reads the
        same row, when the tile lies within one run of the last dim. Loaded as a full
        [XBLOCK, RBLOCK] tile it repeats each value XBLOCK times: layer norm's backward
        partials ran at half the speed (benchmarks/RESULTS.md)."""
        if self.tile_uniform_size is None or scope.group is None or extra_mask is not None:
            return None
        xs = outer_vars(len(self.kernel.outer))
        symbols = expr.index.free_symbols
        leading = [x for x in xs[:-1] if x in symbols]
        if xs[-1] in symbols or not leading:
            return None
        if not any(s.name.startswith(("r", "y")) for s in symbols):
            return None  # one value per output: already an [XBLOCK, 1] load
        index = expr.index.subs({x: sympy.Symbol(f"xu{x.name[1:]}", integer=True) for x in leading})
        text = triton_index(index, self._names(scope.group))
        ptr = self.pointer(expr.buffer, writing=False)
        return f"tl.load({ptr} + {text}, r{scope.group}mask, other=0)"

    def store(self, scope: Scope, name: str, index, value_text: str, value_dtype) -> None:
        dtype = self.buffers[name].layout.dtype
        if compute_dtype(value_dtype) != compute_dtype(dtype) or dtype == torch.bool:
            value_text = cast_text(value_text, value_dtype, dtype)
        # NOTE: a float16/bfloat16 buffer holds its values rounded; a read of it in this
        # kernel (a local, or the value just stored) must see them rounded too, as a load
        # would: `x == amax(x)` against an unrounded max matches no element
        rounded = dtype in (torch.float16, torch.bfloat16)
        if name in self.locals_:
            # Numbered per kernel, not named after the buffer: each layer's copy of a
            # kernel then has the same text, and the same compiled function.
            var = self.local_names.setdefault(name, f"local{len(self.local_names)}")
            if rounded:
                value_text = f"({value_text}).to({TRITON_DTYPES[dtype]}).to(tl.float32)"
            scope.line(f"{var} = {value_text}")
            scope.cache[(Load(name, index, dtype), None)] = var
            return
        ptr = self.pointer(name, writing=True)
        value_text = as_tensor_text(value_text, dtype)
        if not value_text.isidentifier():
            # Held in a variable, so a later read of the buffer in this kernel (a norm's
            # mean, stored for the backward and used at once) takes it from registers:
            # a load would wait on memory, with no barrier after the store.
            held = self.new_temp()
            scope.line(f"{held} = {value_text}")
            value_text = held
        stored = f"{value_text}.to({TRITON_DTYPES[dtype]})"
        mask = self._mask_for(index, scope, store=True)
        scope.line(f"tl.store({ptr} + {self.index(index, scope, store=True)}, {stored}, {mask})")
        if rounded:
            value_text = f"{stored}.to(tl.float32)"
        scope.cache[(Load(name, index, dtype), None)] = value_text

    # ---------------------------------------------------------- body

    def generate(self) -> TritonKernelSource:
        outer = self.kernel.outer
        if self.kernel.column_partials:
            return self._generate_row_blocks(outer)
        body = Scope(self, None, 1, "xmask")
        self._prologue(body, outer)
        if self.segments:  # each part under its own branch, one part a program
            for k, names in enumerate(self.segments):
                body.line(f"if xsegment == {k}:")
                part = Scope(self, body, 2, "xmask")
                for name in names:
                    value, index = node_body(self.buffers[name], outer, "y")[:2]
                    self.store(part, name, index, part.value(value), value.dtype)
                body.lines.extend(part.lines)
            return self._finish(body.lines)
        for item in self.kernel.items:
            if isinstance(item, str):
                value, index = node_body(self.buffers[item], outer, "y")[:2]
                self.store(body, item, index, body.value(value), value.dtype)
            else:
                self._group(body, item)
        return self._finish(body.lines)

    def _generate_row_blocks(self, outer) -> TritonKernelSource:
        """A row kernel that also sums columns over its rows (`FusedKernel.column_partials`):

            colacc0 = tl.zeros([1, R0BLOCK], tl.float32)
            for xrow in range(0, ROWS, XBLOCK):     # this program's rows, XBLOCK at a time
                ...                                 # the row kernel's body
                colacc0 = colacc0 + tl.sum(tl.where(xmask & r0mask, <value>, 0.0), 0)[None, :]
            tl.store(out_ptr + (N * pid + r0index), colacc0, r0mask)   # partials[pid, :]

        The column values are printed in the last loop group's scope, where the row
        kernel's own loads of the same elements are already held in registers."""
        rows = self.kernel.rows_per_program
        g = self.group_ids[-1]
        meta = self.group_meta[g]
        if not all(m.persistent for m in self.group_meta) or not isinstance(meta.numel, int):
            raise InductorError(
                f"kernel {self.kernel.name}: column partials need rows held in one block"
            )
        head = Scope(self, None, 1, "xmask")
        pid = "tl.program_id(0).to(tl.int64)" if self.int64 else "tl.program_id(0)"
        head.line(f"xnumel = {triton_index(numel(outer))}")
        head.line(f"xstart = {pid} * {rows}")
        self.column_values = []
        for k, name in enumerate(self.kernel.column_partials):
            dtype = TRITON_DTYPES[self.buffers[name].layout.dtype]
            head.line(f"colacc{k} = tl.zeros([1, R{g}BLOCK], {dtype})")
            self.column_values.append(_column_value(self.buffers[name], outer))
        head.line(f"for xrow in range(0, {rows}, XBLOCK):")
        body = Scope(self, None, 2, "xmask")
        body.line("xlocal = xrow + tl.arange(0, XBLOCK)[:, None]")
        body.line("xindex = xstart + xlocal")
        body.line(f"xmask = (xindex < xnumel) & (xlocal < {rows})")
        body.line("xzero = xindex * 0")
        self._split_flat(body, "xindex", outer_vars(len(outer)), outer)
        self.column_group = g
        for item in self.kernel.items:
            if isinstance(item, str):
                value, index = node_body(self.buffers[item], outer, "y")[:2]
                self.store(body, item, index, body.value(value), value.dtype)
            else:
                self._group(body, item)
        head.lines.extend(body.lines)
        head.line(f"r{g}index = tl.arange(0, R{g}BLOCK)[None, :]")
        for k, name in enumerate(self.kernel.column_partials):
            ptr = self.pointer(name, writing=True)
            head.line(
                f"tl.store({ptr} + ({meta.numel} * {pid} + r{g}index), colacc{k}, "
                f"r{g}index < {meta.numel})"
            )
        return self._finish(head.lines)

    def _column_sums(self, inner: Scope, g: int) -> None:
        """Add this block's rows of each column value to its accumulator (row blocks)."""
        for k, value in enumerate(self.column_values):
            text = inner.value(value)
            acc_dtype = self.buffers[self.kernel.column_partials[k]].layout.dtype
            if compute_dtype(value.dtype) != acc_dtype:
                text = cast_text(text, value.dtype, acc_dtype)
            inner.line(
                f"colacc{k} = colacc{k} + tl.sum(tl.where(xmask & r{g}mask, {text}, 0.0), 0)[None, :]"
            )

    def _segments(self) -> list[list[str]]:
        """The independent parts of a flat pointwise kernel (horizontally fused nodes that
        neither read one another nor share a read), in kernel order; none if one part.

        One program running every part over its XBLOCK elements, one after another, would
        leave the device idle when the parts are many: an AMP step's 45 weight casts of
        [768, 768] in 576 programs of 45 loads and stores each took 66 us on an H200,
        against 43 us for a copy of as many bytes. Each program runs one part instead.
        """
        if self.groups or self.tiled or self.tile_uniform_size is not None:
            return []
        names = list(self.kernel.nodes)
        part = {name: name for name in names}

        def root(name: str) -> str:
            while part[name] != name:
                part[name] = part[part[name]]
                name = part[name]
            return name

        first_user: dict[str, str] = {}
        for name in names:
            value = node_body(self.buffers[name], self.kernel.outer, "y")[0]
            for buffer in {load.buffer for load in expr_loads(value)} | {name}:
                other = first_user.setdefault(buffer, name)
                part[root(name)] = root(other)
        parts: dict[str, list[str]] = {}
        for name in names:
            parts.setdefault(root(name), []).append(name)
        return list(parts.values()) if len(parts) > 1 else []

    def _row_locals(self) -> frozenset[str]:
        """Buffers read only in this kernel, computed and read in persistent groups over the
        same row (one straight-line scope holding the whole row in registers) at the index
        they are stored at: a softmax's exp, read by its sum and by the division."""
        group_of = {}
        for group, g in zip(self.groups, self.group_ids):
            for name in group.nodes:
                group_of[name] = g
        candidates = {}
        for name in self.kernel.kernel_only - self.kernel.locals_:
            g = group_of.get(name)
            if g is not None and self.group_meta[g].persistent:
                candidates[name] = (g, node_body(self.buffers[name], self.kernel.outer, "r")[1])
        for other in self.kernel.nodes:
            if not candidates:
                break
            value = node_body(self.buffers[other], self.kernel.outer, "r")[0]
            for load in expr_loads(value):
                if load.buffer not in candidates:
                    continue
                g, index = candidates[load.buffer]
                if group_of.get(other) != g or sympy.expand(load.index - index) != 0:
                    del candidates[load.buffer]
        return frozenset(candidates)

    def _wants_tiles(self) -> bool:
        """A pointwise kernel that reads or writes across the last dim (a transpose):
        2D tiles keep both the transposed and the straight accesses contiguous. Also one
        over long rows that do not merge into one flat loop (`row_tiles`)."""
        outer = self.kernel.outer
        if self.groups or len(outer) < 2 or not numel(outer).is_Integer:
            return False
        if int(numel(outer[:-1])) > MAX_TILE_ROWS:
            return False
        xs = outer_vars(len(outer))
        straight = across = False
        for index in self._accesses():
            coefficients = [index.coeff(x) for x in xs]
            if coefficients[-1] == 1:
                straight = True
            elif coefficients[-1] != 0 and any(c == 1 for c in coefficients[:-1]):
                across = True
        self.row_tiles = straight and not across and int(outer[-1]) >= ROW_TILE_MIN
        return straight and (across or self.row_tiles)

    def _tile_y_order(self) -> tuple[int, ...]:
        """The outer dims but the last, in the order yindex runs over them: the dim along
        which the transposed loads are contiguous goes last, so that a tile's YBLOCK
        rows are contiguous in memory (NHWC data read into NCHW order: C, not H)."""
        xs = outer_vars(len(self.kernel.outer))
        rest = list(range(len(self.kernel.outer) - 1))
        for index in self._accesses():
            coefficients = [index.coeff(x) for x in xs]
            if coefficients[-1] in (0, 1):
                continue
            along = [k for k in rest if coefficients[k] == 1]
            if along:
                return (*(k for k in rest if k != along[0]), along[0])
        return tuple(rest)

    def _tile_run(self) -> int:
        """Elements along yindex over which every transposed access stays contiguous (its
        coefficients along the y dims, last first, are 1, then the sizes multiplied):
        NHWC data read into NCHW order runs over C; T5's [keys, heads] position bias
        broadcast into [batch, heads, queries, keys] runs over the 8 heads only."""
        outer = self.kernel.outer
        xs = outer_vars(len(outer))
        run = int(numel(outer[:-1])) if numel(outer[:-1]).is_Integer else 0
        for index in self._accesses():
            coefficients = [index.coeff(x) for x in xs]
            if coefficients[-1] in (0, 1):
                continue
            extent = 1
            for k in reversed(self.y_order):
                if coefficients[k] != extent or not outer[k].is_Integer:
                    break
                extent *= int(outer[k])
            run = min(run, extent)
        return run

    def _accesses(self) -> list:
        """Index expressions of every store and load of the kernel, over the outer loops."""
        indices = []
        for name in self.kernel.nodes:
            value, store = node_body(self.buffers[name], self.kernel.outer, "r")[:2]
            indices += [store] + [ld.index for ld in expr_loads(value)]
        return indices

    def _tiled_prologue(self, scope: Scope, outer) -> None:
        pid = ".to(tl.int64)" if self.int64 else ""
        scope.line(f"ynumel = {int(numel(outer[:-1]))}")
        scope.line(f"xnumel = {int(outer[-1])}")
        scope.line(f"yindex = tl.program_id(1){pid} * YBLOCK + tl.arange(0, YBLOCK)[:, None]")
        scope.line(f"xindex = tl.program_id(0){pid} * XBLOCK + tl.arange(0, XBLOCK)[None, :]")
        scope.line("ymask = yindex < ynumel")
        scope.line("xmask = ymask & (xindex < xnumel)")
        scope.line("xzero = xindex * 0 + yindex * 0")
        scope.line("yzero = yindex * 0")
        xs = outer_vars(len(outer))
        ys = [xs[k] for k in self.y_order]
        self._split_flat(scope, "yindex", ys, [outer[k] for k in self.y_order])
        scope.line(f"{xs[-1]} = xindex")

    def _prologue(self, scope: Scope, outer) -> None:
        if self.tiled:
            return self._tiled_prologue(scope, outer)
        xnumel = triton_index(numel(outer))
        pid = "tl.program_id(0).to(tl.int64)" if self.int64 else "tl.program_id(0)"
        arange = "tl.arange(0, XBLOCK)[:, None]" if self.two_d else "tl.arange(0, XBLOCK)"
        scope.line(f"xnumel = {xnumel}")
        if self.segments:  # see `_segments`
            # At least one block per segment, as the launch grid counts them: with no
            # elements (a zero-size tensor) the segment is still told apart, never `// 0`.
            scope.line("xblocks = (xnumel + XBLOCK - 1) // XBLOCK + (xnumel == 0)")
            scope.line(f"xsegment = {pid} // xblocks")
            pid = f"({pid} - xsegment * xblocks)"
        scope.line(f"xindex = {pid} * XBLOCK + {arange}")
        scope.line("xmask = xindex < xnumel")
        scope.line("xzero = xindex * 0")
        self._split_flat(scope, "xindex", outer_vars(len(outer)), outer)
        if self.tile_uniform_size is not None:
            # The leading indices of the tile's first output (see `_uniform_load`).
            lead = [sympy.Symbol(f"xu{k}", integer=True) for k in range(len(outer) - 1)]
            self._split_flat(scope, f"({pid} * XBLOCK)", lead, outer)

    def _split_flat(self, scope: Scope, flat: str, variables, sizes) -> None:
        """Loop variables from a flat index over `sizes` (row-major)."""
        parts = row_major_coordinates(flat, sizes, triton_index, "//")
        for var, (quotient, size) in zip(variables, parts):
            scope.line(f"{var} = {quotient if size is None else f'({quotient} % {size})'}")

    def _group(self, scope: Scope, group: LoopGroup) -> None:
        if id(group) in self.online_second:
            return  # printed in the loop of the max before it
        g = self.group_ids[self.groups.index(group)]
        meta = self.group_meta[g]
        if id(group) in self.online:
            return self._online_logsumexp(scope, group, g, meta, *self.online[id(group)])
        prefix = "r"  # one name for inner variables, so equal loads are equal keys
        bodies = [
            (n, *node_body(self.buffers[n], self.kernel.outer, prefix)[:2]) for n in group.nodes
        ]
        accumulators = (
            self._accumulators(scope, group, g, bodies) if group.kind == "reduction" else {}
        )
        inner = self._inner_scope(scope, group, g, meta)
        if group.kind == "pointwise":
            for name, value, index in bodies:
                self.store(inner, name, index, inner.value(value), value.dtype)
        else:
            for (family, value), acc in accumulators.items():
                text, mask = self._reduction_value(inner, value, g)
                self.masks[acc] = mask
                self._update(inner, family, acc, text, value.dtype, g, mask)
        if g == self.column_group and group is self.groups[-1]:
            self._column_sums(inner, g)
        if not meta.persistent:
            scope.lines.extend(inner.lines)
        for name, value, index in bodies if group.kind == "reduction" else ():
            rtype = self.buffers[name].body.reduction_type
            acc = accumulators[(reduction_family(rtype, value.dtype), value)]
            result, dtype = self._result(scope, rtype, acc, value.dtype, g)
            self.store(scope, name, index, result, dtype)

    def _inner_scope(self, scope: Scope, group: LoopGroup, g: int, meta: GroupMeta) -> Scope:
        """The body of group g: a loop, or (persistent) straight-line code shared by the
        persistent groups over the same ranges, so a value loaded once serves them all."""
        if meta.persistent and g in self.shared_scopes:
            return self.shared_scopes[g]
        if meta.persistent:
            inner = Scope(self, scope, scope.indent, f"xmask & r{g}mask")
            inner.lines = scope.lines  # straight-line code: lines go to the kernel body
            self.shared_scopes[g] = inner
            inner.line(f"r{g}offset = 0")
        else:
            scope.line(f"for r{g}offset in range(0, {meta.numel}, R{g}BLOCK):")
            inner = Scope(self, scope, scope.indent + 1, f"xmask & r{g}mask")
        inner.group = g
        inner.line(f"r{g}index = r{g}offset + tl.arange(0, R{g}BLOCK)[None, :]")
        inner.line(f"r{g}mask = r{g}index < {meta.numel}")
        variables = [f"r{g}_{k}" for k in range(len(group.ranges))]
        self._split_flat(inner, f"r{g}index", variables, group.ranges)
        return inner

    # ---------------------------------------------------------- online logsumexp

    def _online_logsumexp_pairs(self) -> dict:
        """{id(max group): (sum group, max node, sum node)} for adjacent looped groups
        computing m = max(v) and then s = sum(exp(v - m)) over the same row (softmax,
        log_softmax, logsumexp, cross-entropy over a long vocabulary). Each pair is printed
        as one loop (`_online_logsumexp`): the row is read once instead of twice."""
        pairs = {}
        items = self.kernel.items
        for first, second in zip(items, items[1:]):
            if not (isinstance(first, LoopGroup) and isinstance(second, LoopGroup)):
                continue
            if (first.kind, second.kind) != ("reduction", "reduction") or first.ranges != (
                second.ranges
            ):
                continue
            if len(first.nodes) != 1 or len(second.nodes) != 1:
                continue
            g = self.group_ids[self.groups.index(first)]
            if self.group_meta[g].persistent:
                continue
            top, total = self.buffers[first.nodes[0]], self.buffers[second.nodes[0]]
            if (top.body.reduction_type, total.body.reduction_type) != ("max", "sum"):
                continue
            value, index = node_body(top, self.kernel.outer, "r")[:2]
            summed = node_body(total, self.kernel.outer, "r")[0]
            if compute_dtype(value.dtype) == torch.float32 and _is_exp_minus(
                summed, value, top.name, index
            ):
                pairs[id(first)] = (second, top.name, total.name)
        return pairs

    def _online_logsumexp(self, scope: Scope, group, g, meta, second, top, total) -> None:
        """m = max(v) and s = sum(exp(v - c)), c a function of m (m itself, or logsumexp's
        `where(isinf(m), 0, m)`), in one loop.

        Each step takes the block's maximum along the row (one reduction a step) into the
        row's running maximum m, and its reference r = m clamped to the finite floats;
        the lanes' sums of exp(v - r) are rescaled by exp(r_old - r), one exp a row. An
        element costs one exp and one multiply-add. No flags are kept: what eager gives
        for non-finite elements follows from the results.

        * NaN: exp(NaN - r) is NaN and stays so (r is finite: no inf - inf, no 0 * inf
          arises otherwise), so the row's sum S is NaN exactly when a NaN was read;
          m is then reported NaN (tl.max may drop NaN).
        * +inf: m = +inf, r = FLT_MAX, S = inf (exp(inf - r)), and the rescale is 1 from
          then on; S * exp(r - c) is inf, or NaN where c = +inf (log_softmax), as eager.
        * -inf (and masked lanes): exp(-inf - r) = 0. A row of only -inf has S = 0 and
          r = -FLT_MAX: 0 * exp(r - c) is NaN where c = -inf (log_softmax), else 0.
          Only a shift c that may be -inf with m finite needs to know whether some
          element was -inf: such shifts keep a flag (see `_finite_when_max_finite`).

        The sum is then moved to c: s = S * exp(r - c), exactly S where c = m."""
        value, top_index = node_body(self.buffers[top], self.kernel.outer, "r")[:2]
        summed, total_index = node_body(self.buffers[total], self.kernel.outer, "r")[:2]
        shift = summed.args[0].args[1]
        flag_neg_inf = not _finite_when_max_finite(shift)
        m, ref, s, k = (f"acc{self.accumulator_count}{part}" for part in ("", "_ref", "_s", "_k"))
        self.accumulator_count += 1
        scope.line(f'{m} = tl.full([XBLOCK, 1], float("-inf"), tl.float32)')
        scope.line(f"{ref} = tl.full([XBLOCK, 1], {-_FLOAT32_MAX!r}, tl.float32)")
        scope.line(f"{s} = tl.zeros([XBLOCK, R{g}BLOCK], tl.float32)")
        if flag_neg_inf:
            scope.line(f"{k} = tl.zeros([XBLOCK, R{g}BLOCK], tl.int8)")
        inner = self._inner_scope(scope, group, g, meta)
        v, mask = self._reduction_value(inner, value, g)
        inner.line(f'{m}_x = tl.where({mask}, {v}, float("-inf"))')
        inner.line(f"{m} = tl.maximum({m}, tl.max({m}_x, 1)[:, None])")
        inner.line(f"{ref}_new = tl.minimum(tl.maximum({m}, {-_FLOAT32_MAX!r}), {_FLOAT32_MAX!r})")
        inner.line(
            f"{s} = {s} * libdevice.exp({ref} - {ref}_new) + libdevice.exp({m}_x - {ref}_new)"
        )
        inner.line(f"{ref} = {ref}_new")
        if flag_neg_inf:
            inner.line(f'{k} = {k} | ({mask} & ({v} == float("-inf"))).to(tl.int8)')
        scope.lines.extend(inner.lines)
        scope.line(f"{s}_row = tl.sum({s}, 1)[:, None]")
        scope.line(f'{m}_done = tl.where({s}_row != {s}_row, float("nan"), {m})')
        self.store(scope, top, top_index, f"{m}_done", value.dtype)
        c = scope.value(shift)
        scope.line(f"{s}_done = {s}_row * libdevice.exp({ref} - {c})")
        if flag_neg_inf:
            flag = f"(tl.max({k}, 1) != 0)[:, None]"
            scope.line(
                f'{s}_done = {s}_done + tl.where({flag}, libdevice.exp(float("-inf") - {c}), 0.0)'
            )
        self.store(scope, total, total_index, f"{s}_done", summed.dtype)

    # ---------------------------------------------------------- reductions

    def _reduction_value(self, scope: Scope, value, g: int) -> tuple[str, str]:
        """(variable, lane mask) of a reduction's value; `reduction_mask(cond, v)` (a split
        reduction's short last chunk) leaves the lanes where cond is false out."""
        mask = f"xmask & r{g}mask"
        if isinstance(value, Op) and value.name == REDUCTION_MASK:
            inside = scope.value(value.args[0])
            inner = value.args[1]
            text = scope.value(inner, inside)
            if compute_dtype(inner.dtype) != compute_dtype(value.dtype):
                text = cast_text(text, inner.dtype, value.dtype)
            return text, f"{mask} & ({inside})"
        return scope.value(value), mask

    def _accumulators(self, scope: Scope, group: LoopGroup, g: int, bodies) -> dict:
        accumulators: dict = {}
        for name, value, _ in bodies:
            rtype = self.buffers[name].body.reduction_type
            key = (reduction_family(rtype, value.dtype), value)
            if key in accumulators:
                continue
            acc = f"acc{self.accumulator_count}"
            self.accumulator_count += 1
            accumulators[key] = acc
            family, dtype = key[0], compute_dtype(value.dtype)
            shape = f"[XBLOCK, R{g}BLOCK]"
            if family == "welford":  # float64 values keep float64 accumulators
                wide = TRITON_DTYPES[_welford_dtype(dtype)]
                for part in ("mean", "m2", "n"):
                    scope.line(f"{acc}_{part} = tl.zeros({shape}, {wide})")
            elif family in ("argmax", "argmin"):
                init = _lowest(dtype) if family == "argmax" else _highest(dtype)
                scope.line(f"{acc} = tl.full({shape}, {init}, {TRITON_DTYPES[dtype]})")
                scope.line(f"{acc}_index = tl.full({shape}, 2**62, tl.int64)")
            else:
                init, tdtype = _identity(family, dtype)
                scope.line(f"{acc} = tl.full({shape}, {init}, {tdtype})")
        return accumulators

    def _update(
        self, scope: Scope, family: str, acc: str, value: str, dtype, g: int, mask: str
    ) -> None:
        if family == "sum":
            scope.line(f"{acc} = {acc} + tl.where({mask}, {value}, 0)")
        elif family == "prod":
            scope.line(f"{acc} = {acc} * tl.where({mask}, {value}, 1)")
        elif family in ("max", "min"):
            identity = (
                _lowest(compute_dtype(dtype)) if family == "max" else _highest(compute_dtype(dtype))
            )
            scope.line(
                f"{acc} = ember_{family}_combine({acc}, tl.where({mask}, {value}, {identity}))"
            )
        elif family == "any":
            scope.line(f"{acc} = {acc} | tl.where({mask}, {value} != 0, 0).to(tl.int8)")
        elif family == "all":
            scope.line(f"{acc} = {acc} & tl.where({mask}, {value} != 0, 1).to(tl.int8)")
        elif family in ("argmax", "argmin"):
            scope.line(
                f"{acc}_new, {acc}_index_new = ember_{family}_combine("
                f"{acc}, {acc}_index, {value}, (r{g}index + xzero).to(tl.int64))"
            )
            scope.line(f"{acc} = tl.where({mask}, {acc}_new, {acc})")
            scope.line(f"{acc}_index = tl.where({mask}, {acc}_index_new, {acc}_index)")
        elif family == "welford" and self.group_meta[g].persistent:
            scope.line(f"{acc}_x = tl.where({mask}, {value}, 0.0)")  # reduced in _result
        elif family == "welford":
            scope.line(f"{acc}_count = {acc}_n + tl.where({mask}, 1.0, 0.0)")
            scope.line(f"{acc}_delta = {value} - {acc}_mean")
            scope.line(
                f"{acc}_mean = {acc}_mean + tl.where({mask}, ember_div_rn({acc}_delta, tl.maximum({acc}_count, 1.0)), 0.0)"
            )
            scope.line(
                f"{acc}_m2 = {acc}_m2 + tl.where({mask}, {acc}_delta * ({value} - {acc}_mean), 0.0)"
            )
            scope.line(f"{acc}_n = {acc}_count")
        else:
            raise InductorError(f"unknown reduction {family!r}")

    def _result(self, scope: Scope, rtype: str, acc: str, dtype, g: int):
        family = reduction_family(rtype, dtype)
        done = f"{acc}_done"
        if scope.lookup(("done", acc)) is None:
            if family == "sum":
                scope.line(f"{done} = tl.sum({acc}, 1)[:, None]")
            elif family in ("max", "min"):
                # tl.max/tl.min drop NaN; a NaN anywhere in the row makes the result NaN.
                scope.line(f"{done} = tl.{family}({acc}, 1)[:, None]")
                if compute_dtype(dtype).is_floating_point:
                    scope.line(
                        f"{done} = tl.where((tl.max(({acc} != {acc}).to(tl.int8), 1) != 0)[:, None], "
                        f'float("nan"), {done})'
                    )
            elif family == "welford" and self.group_meta[g].persistent:
                mask = self.masks[acc]
                scope.line(f"{done}_n = tl.sum(tl.where({mask}, 1.0, 0.0), 1)")
                scope.line(
                    f"{done}_mean = ember_div_rn(tl.sum({acc}_x, 1), tl.maximum({done}_n, 1.0))"
                )
                scope.line(
                    f"{done}_m2 = tl.sum(tl.where({mask}, ({acc}_x - {done}_mean[:, None]) "
                    f"* ({acc}_x - {done}_mean[:, None]), 0.0), 1)"
                )
            elif family == "prod":
                scope.line(f"{done} = tl.reduce({acc}, 1, ember_prod_combine)[:, None]")
            elif family == "any":
                scope.line(f"{done} = (tl.max({acc}, 1) != 0)[:, None]")
            elif family == "all":
                scope.line(f"{done} = (tl.min({acc}, 1) != 0)[:, None]")
            elif family in ("argmax", "argmin"):
                scope.line(
                    f"_, {done} = tl.reduce(({acc}, {acc}_index), 1, ember_{family}_combine)"
                )
                scope.line(f"{done} = {done}[:, None]")
            elif family == "welford":
                scope.line(
                    f"{done}_mean, {done}_m2, {done}_n = tl.reduce(({acc}_mean, {acc}_m2, {acc}_n), 1, ember_welford_combine)"
                )
            scope.cache[("done", acc)] = done
        if rtype == "welford_mean":
            mean = f'tl.where({done}_n == 0, float("nan"), {done}_mean)[:, None]'
            return mean, _welford_dtype(dtype)
        if rtype == "welford_m2":
            return f"{done}_m2[:, None]", _welford_dtype(dtype)
        if family in ("argmax", "argmin"):
            return done, torch.int64
        if family in ("any", "all"):
            return done, torch.bool
        return done, dtype

    # ---------------------------------------------------------- finish

    def _finish(self, lines) -> TritonKernelSource:
        for symbol in kernel_size_symbols(self.kernel, self.buffers):
            self.args["size:" + symbol] = KernelArg("size", symbol, TRITON_DTYPES[torch.int64])
        # Size parameters are named by position (ks0, ks1, ...), not after the graph's
        # symbols: each layer's copy of a kernel over its own cache length (s53, s40, ...)
        # then has the same text, and the same compiled function.
        self.size_params = {
            key[len("size:") :]: f"ks{k}"
            for k, key in enumerate(key for key in self.args if key.startswith("size:"))
        }
        if self.size_params:
            pattern = re.compile(
                r"\b(" + "|".join(map(re.escape, sorted(self.size_params, key=len, reverse=True)))
                + r")\b"
            )  # fmt: skip
            lines = [pattern.sub(lambda m: self.size_params[m.group(1)], line) for line in lines]
        params = [self._param_name(key) for key in self.args]
        params += ["XBLOCK: tl.constexpr"] + (["YBLOCK: tl.constexpr"] if self.tiled else [])
        params += [f"R{g}BLOCK: tl.constexpr" for g in range(len(self.group_meta))]
        # NOTE: in debug mode, so that the bounds checks of indirect loads run (Triton drops
        # `tl.device_assert` otherwise); runtime.COMPILE_OPTIONS keeps overflow checks off.
        # Symbolic sizes are not specialized (Triton would compile a kernel again for a size
        # that is 1 or a multiple of 16: a decode step's cache length every 16 tokens); the
        # values they multiply keep their own divisibility.
        settings = ["debug=True"] if self.bounds_checked else []
        sizes = [self._param_name(key) for key in self.args if key.startswith("size:")]
        if sizes:
            settings.append(f"do_not_specialize={sizes!r}")
        jit = f"@triton.jit({', '.join(settings)})" if settings else "@triton.jit"
        source = f"{jit}\ndef KERNEL_NAME(" + ", ".join(params) + "):\n" + "\n".join(lines) + "\n"
        groups = tuple(self.group_meta)
        xnumel = numel(self.kernel.outer)
        symbolic = not xnumel.is_Integer
        return TritonKernelSource(
            self.kernel.name,
            source,
            tuple(self.args.values()),
            int(self.kernel.outer[-1])
            if self.tiled
            else (SYMBOLIC_NUMEL_HINT if symbolic else int(xnumel)),
            groups,
            self._contiguous_x(),
            int(numel(self.kernel.outer[:-1])) if self.tiled else 0,
            py_index(xnumel) if symbolic else "",
            self.column,
            self.tiled and self.row_tiles,
            self._tile_run() if self.tiled else 0,
            self.math_calls,
            len(self.segments),
            self.kernel.rows_per_program,
        )

    def _param_name(self, key: str) -> str:
        if key.startswith("size:"):
            return self.size_params[key[len("size:") :]]
        if key.startswith("scalar:"):
            return self.scalars[key[len("scalar:") :]]
        return self.pointer_names[key]

    def _contiguous_x(self) -> bool:
        """Whether loads from memory run along the last outer variable (then wide XBLOCK
        tiles read in order). In a reduction only the loads that step along its rows
        count: one element per output (a bias, a row's max) says nothing of the bulk of
        the reads, and a buffer the kernel itself computes is not read from memory. Each
        load weighs its group's length: where loads along the rows of a long group (the
        logits of a cross-entropy backward, [4096, 50257]) outweigh loads along x of a
        short one (8 partial sums of each row), the rows run along memory."""
        if not self.kernel.outer:
            return False
        last_x = outer_vars(len(self.kernel.outer))[-1]
        inside = set(self.kernel.nodes)
        along_x = along_rows = 0
        for item in self.groups:
            r_vars = set(inner_vars("r", len(item.ranges))) if item.ranges else set()
            last_r = inner_vars("r", len(item.ranges))[-1] if item.ranges else None
            length = numel(item.ranges) if item.ranges else sympy.Integer(1)
            weight = int(length) if length.is_Integer else SYMBOLIC_NUMEL_HINT
            for name in item.nodes:
                value = node_body(self.buffers[name], self.kernel.outer, "r")[0]
                for load in expr_loads(value):
                    if load.buffer in inside:
                        continue
                    if r_vars and not (load.index.free_symbols & r_vars):
                        continue
                    index = sympy.expand(load.index)
                    if index.coeff(last_x) == 1:
                        along_x += weight
                    elif last_r is not None and index.coeff(last_r) == 1:
                        along_rows += weight
        return along_x > along_rows

    def _elements(self) -> int:
        """Outer elements times the longest inner loop (a hint for symbolic sizes)."""
        sizes = [numel(self.kernel.outer), *(numel(g.ranges) for g in self.groups)]
        if not all(size.is_Integer for size in sizes):
            return SYMBOLIC_NUMEL_HINT
        return int(sizes[0]) * max([1, *(int(size) for size in sizes[1:])])

    def _column_reduction(self) -> bool:
        """Whether the kernel's reductions read along the last outer dim and never along
        their own rows (`sum(dim=0)` of [tokens, hidden], batch norm on channels-last data):
        then wide XBLOCK tiles of contiguous outputs keep loads coalesced."""
        if not self.kernel.outer or not any(g.kind == "reduction" for g in self.groups):
            return False
        last_x = outer_vars(len(self.kernel.outer))[-1]
        along_x = False
        for group in self.groups:  # a pointwise loop along the rows reads them too
            last_r = inner_vars("r", len(group.ranges))[-1] if group.ranges else None
            for name in group.nodes:
                value = node_body(self.buffers[name], self.kernel.outer, "r")[0]
                for load in expr_loads(value):
                    index = sympy.expand(load.index)
                    steps_x = index.coeff(last_x)
                    if last_r is not None and index.coeff(last_r) == 1 and steps_x != 0:
                        return False  # a row-major read (one the same for all x is broadcast)
                    along_x = along_x or (group.kind == "reduction" and steps_x == 1)
        return along_x

    def _needs_int64(self) -> bool:
        limit = 2**31 - 1
        sizes = [numel(self.kernel.outer), *(numel(g.ranges) for g in self.groups)]
        if not all(size.is_Integer for size in sizes):
            return True  # symbolic sizes: any size may come
        total = int(numel(self.kernel.outer)) * max(
            [1] + [int(numel(g.ranges)) for g in self.groups]
        )
        if total >= limit:
            return True
        for name in self.kernel.nodes:
            count = self.buffers[name].layout.storage_numel()
            if not count.is_Integer or int(count) >= limit:
                return True
        return False


def _identity(family: str, dtype) -> tuple[str, str]:
    if family == "sum":
        return literal(0, dtype), TRITON_DTYPES[dtype]
    if family == "prod":
        return literal(1, dtype), TRITON_DTYPES[dtype]
    if family == "max":
        return _lowest(dtype), TRITON_DTYPES[dtype]
    if family == "min":
        return _highest(dtype), TRITON_DTYPES[dtype]
    if family == "any":
        return "0", "tl.int8"
    if family == "all":
        return "1", "tl.int8"
    raise InductorError(f"unknown reduction {family!r}")


def _lowest(dtype) -> str:
    if dtype.is_floating_point:
        return 'float("-inf")'
    if dtype == torch.bool:
        return "0"
    return str(torch.iinfo(dtype).min)


def _highest(dtype) -> str:
    if dtype.is_floating_point:
        return 'float("inf")'
    if dtype == torch.bool:
        return "1"
    return str(torch.iinfo(dtype).max)


def _number_groups(
    groups: list[LoopGroup], looped: bool = False
) -> tuple[list[int], list[GroupMeta]]:
    """A loop id per group: persistent groups over the same ranges share one (and one RBLOCK).

    `looped`: no group longer than COLUMN_PERSISTENT_ROWS is persistent (a column
    reduction reads a tile of XBLOCK contiguous outputs by RBLOCK rows per step
    instead of whole rows).
    """
    ids: list[int] = []
    metas: list[GroupMeta] = []
    shared: dict[tuple, int] = {}
    for group in groups:
        count = numel(group.ranges)
        rnumel = int(count) if count.is_Integer else triton_index(count)
        limit = COLUMN_PERSISTENT_ROWS if looped else PERSISTENT_MAX
        persistent = count.is_Integer and rnumel <= limit
        key = tuple(group.ranges)
        if persistent and key in shared:
            ids.append(shared[key])
            continue
        ids.append(len(metas))
        metas.append(GroupMeta(group.kind, rnumel, persistent))
        if persistent:
            shared[key] = ids[-1]
    return ids, metas


def _is_exp_minus(summed, value, top: str, index) -> bool:
    """Whether `summed` is exp(value - c(top[index])): c reads only the max at its own
    index (m itself, or where(isinf(m), 0, m))."""
    if not (isinstance(summed, Op) and summed.name == "exp" and len(summed.args) == 1):
        return False
    inner = summed.args[0]
    if not (isinstance(inner, Op) and inner.name == "sub" and inner.args[0] == value):
        return False
    shift = inner.args[1]
    loads = expr_loads(shift)
    return (
        bool(loads)
        and all(ld.buffer == top and sympy.expand(ld.index - index) == 0 for ld in loads)
        and not _has_index_values(shift)
        and summed.dtype == value.dtype == inner.dtype == shift.dtype
    )


_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def _finite_when_max_finite(shift) -> bool:
    """Whether the online logsumexp's shift c(m) is finite wherever m is (m itself,
    a finite constant, or a `where` choosing between such): then the -inf elements of a
    row add exp(-inf - c) = 0 whatever the row holds, and need no flag."""
    if isinstance(shift, Load):
        return True  # the max itself (`_is_exp_minus` allows no other load)
    if isinstance(shift, Constant):
        return isinstance(shift.value, (int, float)) and math.isfinite(shift.value)
    if isinstance(shift, Op) and shift.name == "where":
        return all(_finite_when_max_finite(arm) for arm in shift.args[1:])
    return False


def _has_index_values(expr) -> bool:
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, IndexValue):
            return True
        if isinstance(e, Op):
            stack.extend(e.args)
    return False


def _column_value(partial, outer):
    """A column partial's value at the row of the outer loops and column r0 (the partial's
    body read at chunk 0, element = the flat row; its last-chunk mask dropped: every row
    of the kernel is inside), loads expanded so they meet the row kernel's own."""
    xs = outer_vars(len(outer))
    row = sum((x * numel(outer[k + 1 :]) for k, x in enumerate(xs)), sympy.Integer(0))
    column = sympy.Symbol("r0", integer=True, nonnegative=True)
    value = partial.body.loader((sympy.Integer(0), column), (row,))
    if isinstance(value, Op) and value.name == REDUCTION_MASK:
        value = value.args[1]
    return map_loads(value, lambda ld: Load(ld.buffer, sympy.expand(ld.index), ld.dtype))


def generate_triton_kernel(kernel: FusedKernel, buffers: dict) -> TritonKernelSource:
    """The Triton source of `kernel` (function named KERNEL_NAME), its parameters and sizes."""
    return TritonKernelCodegen(kernel, buffers).generate()
