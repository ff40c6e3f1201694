"""Index arithmetic: sympy expressions over loop variables, and their C printing.

Sizes, strides and indices in the IR are sympy expressions, so that symbolic
sizes can flow through unchanged. Integer division and modulo of non-negative
indices are the two functions `FloorDiv` and `IndexMod`; `simplify_index`
folds the patterns that reshapes create (`FloorDiv(n, b) * b + IndexMod(n, b)`).

Symbolic sizes: a graph traced with dynamic shapes carries `torch.SymInt`s whose
node holds a sympy expression over size symbols (`s0`, `s1`, ...). `as_index`
turns them into index expressions (`index_of_shape_expr` maps the shape
environment's division and modulo onto `FloorDiv` / `IndexMod`). A size symbol
is at least `MIN_SYMBOLIC_SIZE` (sizes 0 and 1 are kept static by the tracer), so
comparisons between sizes are decided for every size (`statically_lt`) or not at
all; the code generator never decides one from the example sizes.

A symbol of an int input (`step`, `n`) may be any integer; where the shape
environment's guarded range gives it a lower bound (`slice(..., step=n)` guards
`n >= 1`), or a guarded relation orders two of them (`end >= start`),
`guarded_facts` lets the proofs here use it: the graph's guard checks it at every
call.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import sympy
import torch

from inductor_codegen.errors import DynamicShapeError

__all__ = [
    "FloorDiv",
    "IndexMod",
    "Index",
    "MIN_SYMBOLIC_SIZE",
    "as_index",
    "contiguous_strides",
    "c_index",
    "flat_index",
    "GuardedFacts",
    "guarded_facts",
    "index_of_shape_expr",
    "is_symbolic",
    "numel",
    "py_index",
    "py_number",
    "reshape_index",
    "simplify_index",
    "statically_lt",
    "view_strides",
]

Index = sympy.Expr
# Symbolic sizes start at 2: a tracer keeps sizes 0 and 1 static.
MIN_SYMBOLIC_SIZE = 2


class FloorDiv(sympy.Function):
    """`a // b` for a non-negative index `a` and a positive `b`."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if b == 1:
            return a
        if a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        return None


class IndexMod(sympy.Function):
    """`a % b` for a non-negative index `a` and a positive `b`."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if b == 1 or a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) % int(b))
        return None


def as_index(value) -> Index:
    """An int, a torch.SymInt or a sympy expression as a sympy index expression.

    A SymInt becomes its expression over the size symbols (never its example value).
    """
    if isinstance(value, sympy.Expr):
        return value
    if isinstance(value, torch.SymInt):
        constant = value.node.maybe_as_int()
        if constant is not None:
            return sympy.Integer(constant)
        return index_of_shape_expr(value.node.expr)
    return sympy.Integer(int(value))


def is_symbolic(expr) -> bool:
    """Whether an index expression (or an int) depends on a size symbol."""
    return bool(getattr(expr, "free_symbols", None))


def _python_divmod(kind: str):
    """Python's floored `a // b` or `a % b` (b > 0) as FloorDiv / IndexMod, which need a >= 0.

    A negative constant `a` (`Mod(-2, s0)` from `roll`) is shifted by a multiple of b
    first: a // b = (a + k*b) // b - k and a % b = (a + k*b) % b for any integer k.
    """

    def build(a, b):
        if not _provably(b, "positive"):
            raise DynamicShapeError(f"division by {b}, which may not be positive, in a size")
        shift = 0
        if not _provably(a, "nonnegative"):
            if a.is_Integer:
                shift = -(int(a) // MIN_SYMBOLIC_SIZE) if b.free_symbols else -(int(a) // int(b))
            else:  # -FloorDiv(s0, 2) % s0 (fftshift): a few multiples of b make it non-negative
                shift = next((k for k in range(1, 5) if _provably(a + k * b, "nonnegative")), 0)
            if shift == 0:
                raise DynamicShapeError(
                    f"{a} // {b} or {a} % {b} of a size that may be negative; "
                    "compile this graph with static sizes"
                )
            a = a + shift * b
        if kind == "mod":
            return IndexMod(a, b)
        return FloorDiv(a, b) - shift

    return build


def _rounded_division(expr) -> Index:
    """floor(a / q) and ceiling(a / q) for an integer q > 0 as FloorDiv (interpolate's sizes)."""
    value = expr.args[0]
    # A float factor exact in binary (0.5, 0.25): its product with a size is exact too.
    exact = {f: sympy.Rational(float(f)) for f in value.atoms(sympy.Float)}
    if any(r.q > 1024 for r in exact.values()):
        raise DynamicShapeError(f"size expression {expr} scales by an inexact float")
    numerator, denominator = sympy.fraction(sympy.together(value.xreplace(exact)))
    if not (denominator.is_Integer and int(denominator) > 0):
        raise DynamicShapeError(
            f"size expression {expr} divides by {denominator}; compile this graph with static sizes"
        )
    numerator = index_of_shape_expr(sympy.expand(numerator))
    if isinstance(expr, sympy.ceiling):
        numerator = numerator + int(denominator) - 1
    return _python_divmod("floordiv")(numerator, denominator)


def _provably(expr, sign: str) -> bool:
    expr = sympy.expand(expr)
    if expr.is_Integer:
        return int(expr) > 0 if sign == "positive" else int(expr) >= 0
    if _shifted_has_sign(expr, sign):
        return True
    # expr = (expr - k*d) + k*d with a guarded d >= 0: the first part's sign is enough
    facts = _FACTS.get()
    nonnegative = facts.nonnegative if facts is not None else ()
    return any(_shifted_has_sign(expr - k * d, sign) for d in nonnegative for k in (1, 2))


def _shifted_has_sign(expr, sign: str) -> bool:
    shifted = _shift_symbols(expr)
    return bool(shifted.is_positive if sign == "positive" else shifted.is_nonnegative)


# Function classes of shape expressions, by name (guards' and torch's spellings).
_SHAPE_FUNCTIONS = {
    "FloorDiv": _python_divmod("floordiv"),
    "CleanDiv": _python_divmod("floordiv"),
    "Mod": _python_divmod("mod"),
    "PythonMod": _python_divmod("mod"),
    "IndexMod": lambda a, b: IndexMod(a, b),
    "ModularIndexing": lambda a, b, c: IndexMod(FloorDiv(a, b), c),
    "Max": sympy.Max,
    "Min": sympy.Min,
}


def index_of_shape_expr(expr) -> Index:
    """A shape environment's size expression as an index expression of this module.

    Division and modulo of sizes (non-negative) map onto FloorDiv / IndexMod; any
    other function is a DynamicShapeError naming it.
    """
    expr = sympy.sympify(expr)
    if expr.is_Integer or expr.is_Symbol:
        return expr
    if expr.is_Number:
        raise DynamicShapeError(f"size expression {expr} is not an integer")
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        return _rounded_division(expr)
    args = [index_of_shape_expr(a) for a in expr.args]
    if expr.is_Add or expr.is_Mul or expr.is_Pow:
        return expr.func(*args)
    build = _SHAPE_FUNCTIONS.get(type(expr).__name__)
    if build is None:
        raise DynamicShapeError(
            f"size expression {expr} uses {type(expr).__name__}, which generated code cannot "
            "compute; compile this graph with static sizes"
        )
    return build(*args)


def numel(sizes: Sequence[Index]) -> Index:
    result = sympy.Integer(1)
    for size in sizes:
        result = result * size
    return result


def contiguous_strides(sizes: Sequence[Index]) -> tuple[Index, ...]:
    strides: list[Index] = []
    running = sympy.Integer(1)
    for size in reversed(sizes):
        strides.append(running)
        running = (
            running * sympy.Max(size, 1) if not size.is_Integer else running * max(int(size), 1)
        )
    return tuple(reversed(strides))


def flat_index(index: Sequence[Index], strides: Sequence[Index], offset: Index = 0) -> Index:
    """`offset + sum(index * strides)`, simplified.

    Memoized: the layers of a model repeat the same index and stride patterns,
    and the expansion in `simplify_index` dominates lowering time otherwise.
    """
    return _flat_index(tuple(index), tuple(strides), offset)


@functools.lru_cache(maxsize=1 << 16)
def _flat_index(index: tuple, strides: tuple, offset: Index) -> Index:
    result = as_index(offset)
    for i, s in zip(index, strides):
        result = result + i * s
    return simplify_index(result)


@functools.lru_cache(maxsize=1 << 16)
def simplify_index(expr: Index) -> Index:
    """Fold `c*b*FloorDiv(n, b) + c*IndexMod(n, b)` into `c*n`, repeatedly (memoized)."""
    expr = sympy.expand(expr)
    changed = True
    while changed and expr.is_Add:
        changed = False
        terms = dict(expr.as_coefficients_dict())
        for term, coeff in list(terms.items()):
            if not isinstance(term, IndexMod):
                continue
            n, b = term.args
            # The partner term coeff * b * FloorDiv(n, b), keyed as the dict keys it
            # (a symbolic b stays in the key, an integer one moves to the coefficient).
            factor, partner = (b * FloorDiv(n, b)).as_coeff_Mul()
            if terms.get(partner) == coeff * factor:
                del terms[term]
                del terms[partner]
                rebuilt = sum((c * t for t, c in terms.items()), sympy.Integer(0))
                expr = sympy.expand(rebuilt + coeff * n)
                changed = True
                break
    return expr


def reshape_index(
    old_sizes: Sequence[Index], new_sizes: Sequence[Index], new_index: Sequence[Index]
) -> list[Index]:
    """Map an index into `new_sizes` to the index into `old_sizes` (same elements, row-major).

    Dimensions are matched in groups of equal product, so that splitting or
    keeping a dimension needs no division; only merged dimensions use
    `FloorDiv`/`IndexMod`.
    """
    if any(s == 0 for s in old_sizes) or any(s == 0 for s in new_sizes):
        return [sympy.Integer(0)] * len(old_sizes)  # no element is ever loaded
    old_index: list[Index] = []
    i = j = 0
    n_old, n_new = len(old_sizes), len(new_sizes)
    while i < n_old or j < n_new:
        # Size-1 dimensions carry index 0 and need no matching.
        if i < n_old and old_sizes[i] == 1:
            old_index.append(sympy.Integer(0))
            i += 1
            continue
        if j < n_new and new_sizes[j] == 1:
            j += 1
            continue
        old_group, new_group = [i], [j]
        old_prod, new_prod = old_sizes[i], new_sizes[j]
        i += 1
        j += 1
        while not _same(old_prod, new_prod):
            if _less(old_prod, new_prod):
                old_group.append(i)
                old_prod = old_prod * old_sizes[i]
                i += 1
            else:
                new_group.append(j)
                new_prod = new_prod * new_sizes[j]
                j += 1
        flat = flat_index(
            [new_index[k] for k in new_group],
            contiguous_strides([new_sizes[k] for k in new_group]),
        )
        sub_sizes = [old_sizes[k] for k in old_group]
        sub_strides = contiguous_strides(sub_sizes)
        for position, stride in enumerate(sub_strides):
            value = FloorDiv(flat, stride)
            if position > 0:
                value = IndexMod(value, sub_sizes[position])
            old_index.append(value)
    return old_index


def _less(a: Index, b: Index) -> bool:
    if a.is_Integer and b.is_Integer:
        return int(a) < int(b)
    answer = statically_lt(a, b)
    if answer is None:
        raise DynamicShapeError(
            f"cannot tell whether {a} < {b} for every size (a reshape between symbolic sizes "
            "that do not line up); compile this graph with static sizes"
        )
    return answer


def _same(a: Index, b: Index) -> bool:
    return a == b or sympy.expand(a - b) == 0


def statically_lt(a: Index, b: Index) -> bool | None:
    """Whether a < b for every value of the size symbols (each >= MIN_SYMBOLIC_SIZE).

    None when that depends on the sizes.
    """
    diff = sympy.expand(sympy.sympify(b) - sympy.sympify(a))
    if diff.is_Integer:
        return int(diff) > 0
    shifted = _shift_symbols(diff)
    if shifted.is_positive:
        return True
    if shifted.is_nonpositive:
        return False
    return None


@dataclass(frozen=True, slots=True)
class GuardedFacts:
    """What a graph's guards (checked at every call) say of its symbols, for the proofs
    here: `lower_bounds`, the least value of symbols not known positive (an int input's
    `step >= 1`), and `nonnegative`, linear expressions of them the guards keep >= 0
    (`end - start` where `end >= start` is guarded)."""

    lower_bounds: Mapping[sympy.Symbol, int] = field(default_factory=dict)
    nonnegative: tuple[Index, ...] = ()


_FACTS: contextvars.ContextVar[GuardedFacts | None] = contextvars.ContextVar(
    "inductor_codegen_guarded_facts", default=None
)


@contextlib.contextmanager
def guarded_facts(facts: GuardedFacts) -> Iterator[None]:
    """Within the block, proofs (`FloorDiv(a, n)` needs `a >= 0` and `n > 0`) may use
    `facts`, which the caller guarantees the graph's guards check at every call."""
    token = _FACTS.set(facts)
    try:
        yield
    finally:
        _FACTS.reset(token)


def _shift_symbols(expr: Index) -> Index:
    """expr with each size symbol s written as t + MIN_SYMBOLIC_SIZE, t >= 0 (then expanded).

    Size symbols are the positive ones; loop variables (non-negative) stay as they are.
    Another symbol with a guarded lower bound b (see `guarded_facts`) is t + b.
    """
    facts = _FACTS.get()
    bounds = facts.lower_bounds if facts is not None else {}
    shift = {}
    for s in expr.free_symbols:
        if s.is_positive:
            least = MIN_SYMBOLIC_SIZE
        elif s in bounds:
            least = bounds[s]
        else:
            continue
        shift[s] = sympy.Symbol(f"_{s.name}_excess", integer=True, nonnegative=True) + least
    return sympy.expand(expr.xreplace(shift))


def view_strides(
    old_sizes: Sequence[Index], old_strides: Sequence[Index], new_sizes: Sequence[Index]
) -> tuple[Index, ...] | None:
    """Strides that let `new_sizes` view the same memory as (old_sizes, old_strides), or None.

    Walks the old dimensions from the innermost, in chunks that are contiguous
    in memory, and lays the new dimensions over each chunk.
    """
    if len(old_sizes) == 0:
        return tuple(sympy.Integer(1) for _ in new_sizes)
    new_strides: list[Index] = [sympy.Integer(1)] * len(new_sizes)
    view_d = len(new_sizes) - 1
    chunk_base_stride = old_strides[-1]
    tensor_numel = sympy.Integer(1)
    view_numel = sympy.Integer(1)
    for tensor_d in reversed(range(len(old_sizes))):
        tensor_numel = tensor_numel * old_sizes[tensor_d]
        chunk_ends = tensor_d == 0 or (
            old_sizes[tensor_d - 1] != 1
            and not _same(old_strides[tensor_d - 1], tensor_numel * chunk_base_stride)
        )
        if not chunk_ends:
            continue
        while view_d >= 0 and (_less(view_numel, tensor_numel) or new_sizes[view_d] == 1):
            new_strides[view_d] = view_numel * chunk_base_stride
            view_numel = view_numel * new_sizes[view_d]
            view_d -= 1
        if not _same(view_numel, tensor_numel):
            return None
        if tensor_d > 0:
            chunk_base_stride = old_strides[tensor_d - 1]
            tensor_numel = sympy.Integer(1)
            view_numel = sympy.Integer(1)
    if view_d != -1:
        return None
    return tuple(new_strides)


def _divides(a: Index, b: Index) -> bool:
    if a.is_Integer and b.is_Integer:
        return int(b) % int(a) == 0
    return sympy.simplify(b / a).is_integer is True


def c_index(expr: Index) -> str:
    """An index expression as C++ (int64_t arithmetic)."""
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Symbol:
        return expr.name
    if expr.is_Add:
        parts = [c_index(a) for a in _ordered(expr.args)]
        return "(" + " + ".join(parts) + ")"
    if expr.is_Mul:
        return "(" + " * ".join(c_index(a) for a in _ordered(expr.args)) + ")"
    if isinstance(expr, FloorDiv):
        return f"({c_index(expr.args[0])} / {c_index(expr.args[1])})"
    if isinstance(expr, IndexMod):
        return f"({c_index(expr.args[0])} % {c_index(expr.args[1])})"
    if isinstance(expr, sympy.Max):
        a, b = expr.args[0], sympy.Max(*expr.args[1:])
        return f"std::max<int64_t>({c_index(a)}, {c_index(b)})"
    if isinstance(expr, sympy.Min):
        a, b = expr.args[0], sympy.Min(*expr.args[1:])
        return f"std::min<int64_t>({c_index(a)}, {c_index(b)})"
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        return "(" + " * ".join([c_index(expr.base)] * int(expr.exp)) + ")"
    raise ValueError(f"cannot print index expression {expr} as C++")


def _divides(expr: Index) -> bool:
    """Whether a product divides (`s0*s1**(-2)`, `s0/2`): a size the shape environment
    knows to be whole (`tensorinv`'s reshape of `s0*s1` elements into rows of `s1**2`),
    printed as an exact floor division."""
    return sympy.fraction(expr)[1] != 1


def py_index(expr: Index) -> str:
    """An index expression as Python (the wrapper computes sizes with it at run time)."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Symbol:
        return expr.name
    if expr.is_Add:
        return "(" + " + ".join(py_index(a) for a in _ordered(expr.args)) + ")"
    if expr.is_Mul and _divides(expr):
        numerator, denominator = sympy.fraction(expr)
        return f"({py_index(numerator)} // {py_index(denominator)})"
    if expr.is_Mul:
        return "(" + " * ".join(py_index(a) for a in _ordered(expr.args)) + ")"
    if isinstance(expr, FloorDiv):
        return f"({py_index(expr.args[0])} // {py_index(expr.args[1])})"
    if isinstance(expr, IndexMod):
        return f"({py_index(expr.args[0])} % {py_index(expr.args[1])})"
    if isinstance(expr, (sympy.Max, sympy.Min)):
        name = "max" if isinstance(expr, sympy.Max) else "min"
        return f"{name}({', '.join(py_index(a) for a in _ordered(expr.args))})"
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        return f"({py_index(expr.base)} ** {int(expr.exp)})"
    raise DynamicShapeError(f"cannot print size expression {expr} as Python")


def py_number(expr) -> str:
    """A real-valued expression of size symbols (a SymFloat's) as Python float arithmetic."""
    expr = sympy.sympify(expr)
    if expr.is_Integer or expr.is_Symbol:
        return py_index(expr)
    if expr.is_Rational:
        return f"({expr.p} / {expr.q})"
    if expr.is_Float:
        return repr(float(expr))
    if expr.is_Add:
        return "(" + " + ".join(py_number(a) for a in expr.args) + ")"
    if expr.is_Mul:
        return "(" + " * ".join(py_number(a) for a in expr.args) + ")"
    if expr.is_Pow:
        if expr.exp.is_Integer and int(expr.exp) < 0:
            return f"(1 / {py_number(expr.base**-expr.exp)})"
        return f"({py_number(expr.base)} ** {py_number(expr.exp)})"
    build = _SHAPE_FUNCTIONS.get(type(expr).__name__)
    if build is not None:
        return py_index(build(*(index_of_shape_expr(a) for a in expr.args)))
    raise DynamicShapeError(
        f"size expression {expr} uses {type(expr).__name__}, which generated code cannot "
        "compute; compile this graph with static sizes"
    )


def _ordered(args):
    return sorted(args, key=lambda a: (a.is_Number, sympy.default_sort_key(a)))


def upper_bound(expr: Index, ranges: dict) -> int | None:
    """The largest value `expr` takes when each symbol s lies in [0, ranges[s]), or None."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        size = ranges.get(expr)
        if size is None or not sympy.sympify(size).is_Integer:
            return None
        return int(size) - 1
    if expr.is_Add or expr.is_Mul:
        bounds = [upper_bound(a, ranges) for a in expr.args]
        if any(b is None for b in bounds):
            return None
        if expr.is_Mul:
            if any(a.is_Integer and int(a) < 0 for a in expr.args):
                return None
            result = 1
            for b in bounds:
                result *= b
            return result
        if any(lower_bound_negative(a) for a in expr.args):
            return None
        return sum(bounds)
    if isinstance(expr, FloorDiv) and expr.args[1].is_Integer:
        inner = upper_bound(expr.args[0], ranges)
        return None if inner is None else inner // int(expr.args[1])
    if isinstance(expr, IndexMod) and expr.args[1].is_Integer:
        return int(expr.args[1]) - 1
    return None


def lower_bound_negative(expr: Index) -> bool:
    return any(a.is_Integer and int(a) < 0 for a in sympy.Add.make_args(expr)) or (
        expr.is_Mul and any(a.is_Integer and int(a) < 0 for a in expr.args)
    )


def simplify_with_ranges(expr: Index, ranges: dict) -> Index:
    """Remove FloorDiv/IndexMod that loop bounds make trivial: FloorDiv(16*a + b, 16) = a when b < 16."""
    if not expr.has(FloorDiv, IndexMod):
        return expr
    replacements = {}
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, (FloorDiv, IndexMod)) and node.args[1].is_Integer:
            replacements[node] = _simplify_divmod(node, ranges)
        elif isinstance(node, (FloorDiv, IndexMod)):
            replacements[node] = _simplify_symbolic_divmod(node, ranges)
    if not replacements:
        return expr
    return simplify_index(expr.xreplace(replacements))


def _simplify_divmod(node, ranges):
    a, d = node.args
    a = simplify_with_ranges(a, ranges)
    divisor = int(d)
    multiples, rest = [], []
    for term in sympy.Add.make_args(sympy.expand(a)):
        coeff, _ = term.as_coeff_Mul()
        (multiples if coeff.is_Integer and int(coeff) % divisor == 0 else rest).append(term)
    rest_expr = sympy.Add(*rest)
    bound = upper_bound(rest_expr, ranges) if rest else 0
    if bound is None or lower_bound_negative(rest_expr) or bound >= divisor:
        return type(node)(a, d)
    if isinstance(node, FloorDiv):
        return sympy.expand(sympy.Add(*multiples) / divisor)
    return rest_expr


def _simplify_symbolic_divmod(node, ranges):
    """FloorDiv(d*a + b, d) = a and IndexMod(d*a + b, d) = b for a symbolic d when 0 <= b < d."""
    a, d = node.args
    a = simplify_with_ranges(a, ranges)
    multiples, rest = [], []
    for term in sympy.Add.make_args(sympy.expand(a)):
        quotient = sympy.cancel(term / d)
        (multiples if sympy.fraction(quotient)[1] == 1 else rest).append(term)
    rest_expr = sympy.Add(*rest)
    bound = _symbolic_upper_bound(rest_expr, ranges) if rest else sympy.Integer(0)
    if bound is None or statically_lt(bound, d) is not True:
        return type(node)(a, d)
    if isinstance(node, FloorDiv):
        return sympy.expand(sympy.cancel(sympy.Add(*multiples) / d))
    return rest_expr


def _symbolic_upper_bound(expr: Index, ranges: dict) -> Index | None:
    """The largest value of a non-negative `expr` over loop variables in [0, ranges[v]), or None.

    Size symbols (not loop variables) stand for themselves.
    """
    if expr.is_Integer:
        return expr if int(expr) >= 0 else None
    if expr.is_Symbol:
        if expr in ranges:
            return sympy.sympify(ranges[expr]) - 1
        return expr if expr.is_positive else None  # a size symbol, or an unbounded variable
    if expr.is_Add or expr.is_Mul:
        bounds = [_symbolic_upper_bound(arg, ranges) for arg in expr.args]
        if any(b is None for b in bounds):
            return None
        return sympy.Add(*bounds) if expr.is_Add else sympy.Mul(*bounds)
    if isinstance(expr, IndexMod):
        return expr.args[1] - 1
    return None
