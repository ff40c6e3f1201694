"""Random programs from a seed: tables of op generators keyed by op.

Each generator takes a `Scope` (the seeded RNG and the variables defined so
far, with their eager values at every call's sizes) and returns the text of one
expression (`EXPRESSIONS`: assigned to a new variable) or of one statement
(`MUTATIONS`: in-place ops and metadata mutation), or None when no variable
fits. A candidate is kept only when eager runs it at every call's sizes, so a
program is valid for each call and sizes in it are written relative to its
inputs (`v.shape[0]`), never as literals of one call. Adding an op is one
function and one table entry.

    program = generate(seed=12)     # a `Program`; program.render() is its source
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import wide_ops
from program import HELPERS, InputSpec, Program
from python_constructs import CONSTRUCTS
from scope import Scope, ValueTooLarge, both, check_sizes, floating, integral, ranked
from scope import runs_everywhere as _runs_everywhere

FLOATS = ("float32", "float32", "float32", "float64", "float16", "bfloat16")
INTS = ("int64", "int32")
DTYPES = FLOATS + INTS + ("bool",)


# ---------------------------------------------------------------- expressions

UNARY_FLOAT = (
    "abs", "neg", "exp", "sin", "cos", "tanh", "sigmoid", "relu", "floor", "ceil", "round",
    "sign", "erf", "expm1", "log1p", "square", "reciprocal", "rsqrt", "sqrt", "log", "trunc",
    "frac", "nan_to_num",
)  # fmt: skip
UNARY_INT = ("abs", "neg", "square", "sign", "bitwise_not")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "eq", "lt", "ge", "ne")
BINARY_INT = ("floor_divide", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor")
CASTS = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "bool")


def unary(scope: Scope) -> str | None:
    name = scope.pick()
    if name is None:
        return None
    t = scope.value(name)
    if t.dtype == torch.bool:
        return f"torch.logical_not({name})"
    op = scope.rng.choice(UNARY_FLOAT if floating(t) else UNARY_INT)
    return f"torch.{op}({name})"


def _partner(scope: Scope, name: str) -> str:
    """A second operand for `name`: a broadcastable variable or a Python scalar."""
    shape = scope.value(name).shape

    def broadcasts(t):
        try:
            torch.broadcast_shapes(shape, t.shape)
            return True
        except RuntimeError:
            return False

    other = scope.pick(broadcasts)
    if other is None or scope.rng.random() < 0.25:
        return scope.rng.choice(["2", "-1.5", "0.5", "3", "True"])
    return other


def binary(scope: Scope) -> str | None:
    name = scope.pick()
    if name is None:
        return None
    t = scope.value(name)
    ops = BINARY + (BINARY_INT if integral(t) else ()) + (("pow", "atan2") if floating(t) else ())
    op = scope.rng.choice(ops)
    a, b = name, _partner(scope, name)
    if scope.rng.random() < 0.3:
        a, b = b, a
    if a[0].isdigit() or a[0] in "-T":
        return f"torch.{op}(torch.tensor({a}), {b})"
    return f"torch.{op}({a}, {b})"


def operator(scope: Scope) -> str | None:
    """Python operators, int division and modulo included (division by zero included)."""
    name = scope.pick(lambda t: t.dtype != torch.bool)
    if name is None:
        return None
    symbol = scope.rng.choice(["+", "-", "*", "/", "//", "%", "**"])
    return f"{name} {symbol} {_partner(scope, name)}"


def where(scope: Scope) -> str | None:
    name = scope.pick(lambda t: t.dtype != torch.bool)
    if name is None:
        return None
    other = _partner(scope, name)
    return f"torch.where({name} > 0, {name}, {other})"


def clamp(scope: Scope) -> str | None:
    name = scope.pick(lambda t: t.dtype != torch.bool)
    if name is None:
        return None
    low, high = scope.rng.choice([("-1", "2"), ("0", "None"), ("None", "1"), ("1", "-1")])
    return f"{name}.clamp(min={low}, max={high})"


def cast(scope: Scope) -> str | None:
    name = scope.pick()
    return None if name is None else f"{name}.to(torch.{scope.rng.choice(CASTS)})"


def reduction(scope: Scope) -> str | None:
    name = scope.pick(ranked(1))
    if name is None:
        return None
    t, rng = scope.value(name), scope.rng
    dim, keep = scope.dim(name), rng.random() < 0.4
    ops = ["sum", "amax", "amin", "argmax", "argmin", "prod", "cumsum", "any", "all"]
    if floating(t):
        ops += ["mean", "var", "std", "logsumexp", "max_values", "min_indices"]
    op = rng.choice(ops)
    if op == "max_values":
        return f"{name}.max({dim}, keepdim={keep}).values"
    if op == "min_indices":
        return f"{name}.min({dim}, keepdim={keep}).indices"
    if op == "cumsum":
        return f"{name}.cumsum({dim})"
    if op in ("var", "std"):
        return f"{name}.{op}({dim}, correction={rng.choice([0, 1])}, keepdim={keep})"
    if op == "sum" and t.dim() >= 2 and rng.random() < 0.3:
        return f"{name}.sum(({dim}, {scope.dim(name)}), keepdim={keep})"
    if op in ("sum", "amax", "any") and rng.random() < 0.2:
        return f"{name}.{op}()"
    if op in ("amax", "amin") and rng.random() < 0.3:
        return f"{name}.{op[1:]}()"  # max() / min() of every element
    return f"{name}.{op}({dim}, keepdim={keep})"


def view(scope: Scope) -> str | None:
    name = scope.pick()
    if name is None:
        return None
    t, rng = scope.value(name), scope.rng
    ndim = t.dim()
    choices = {
        "flatten": f"{name}.reshape(-1)",
        "view": f"{name}.view(-1)",
        "unsqueeze": f"{name}.unsqueeze({rng.randrange(-ndim - 1, ndim + 1)})",
        "expand": f"{name}.unsqueeze(0).expand(2, *{name}.shape)",
    }
    if ndim >= 1:
        d = scope.dim(name)
        step = rng.choice([1, 2, 3])
        index = ", ".join([":"] * (d % ndim) + [f"{rng.choice(['', '1'])}::{step}"])
        choices |= {
            "slice": f"{name}[{index}]",
            "narrow": f"{name}.narrow({d}, 0, {name}.shape[{d}] // 2)",
            "flip": f"{name}.flip({d})",
            "squeeze": f"{name}.squeeze({d})",
            "select": f"{name}.select({d}, {name}.shape[{d}] - 1)",
        }
    if ndim >= 2:
        perm = list(range(ndim))
        rng.shuffle(perm)
        a, b = rng.sample(range(ndim), 2)
        choices |= {
            "permute": f"{name}.permute({', '.join(map(str, perm))})",
            "transpose": f"{name}.transpose({a}, {b})",
            "mT": f"{name}.mT",
            "diagonal": f"{name}.diagonal({rng.choice([0, 1, -1])}, {a}, {b})",
            "reshape2": f"{name}.reshape({name}.shape[0], -1)",
            "view2": f"{name}.view(-1, {name}.shape[-1])",
            "movedim": f"{name}.movedim({a}, {b})",
        }
    if ndim == 2:
        choices["t"] = f"{name}.t()"
    return choices[rng.choice(sorted(choices))]


def index(scope: Scope) -> str | None:
    name = scope.pick(ranked(1))
    if name is None:
        return None
    t, rng = scope.value(name), scope.rng
    d = scope.dim(name)
    if any(env[name].dim() != t.dim() for env in scope.envs):
        return None  # its rank depends on the call's sizes (`squeeze_()`, a branch)
    size = min(env[name].shape[d] for env in scope.envs)
    picks = sorted(rng.randrange(size) for _ in range(3)) if size else []
    choices = {
        "int": f"{name}[{name}.shape[0] - 1]",
        "mask": f"{name}[{name} > 0]" if t.dtype != torch.bool else f"{name}[{name}]",
        "masked_fill": f"{name}.masked_fill({name} > 0, 0)",
        "index_select": f"{name}.index_select({d}, torch.tensor({picks}, dtype=torch.long))",
        "gather": (
            f"torch.gather({name}, {d}, torch.zeros_like({name}, dtype=torch.long)"
            f".narrow({d}, 0, 1))"
        ),
        "tensor_index": f"{name}[torch.tensor({picks}, dtype=torch.long)]",
    }
    return choices[rng.choice(sorted(choices))]


def join(scope: Scope) -> str | None:
    name = scope.pick(ranked(1))
    if name is None:
        return None
    t, rng = scope.value(name), scope.rng
    same = scope.pick(lambda u: u.shape == t.shape and u.dtype == t.dtype) or name
    d = scope.dim(name)
    if rng.random() < 0.5:
        return f"torch.cat([{name}, {same}.flip({d})], {d})"
    return f"torch.stack([{name}, {same}], {rng.randrange(-t.dim() - 1, t.dim() + 1)})"


def matmul(scope: Scope) -> str | None:
    name = scope.pick(both(floating, ranked(1), lambda t: t.dim() <= 3))
    if name is None:
        return None
    ndim, rng = scope.value(name).dim(), scope.rng
    if ndim == 1:
        return rng.choice([f"{name} @ {name}", f"torch.outer({name}, {name})"])
    if ndim == 3:
        return rng.choice([f"torch.bmm({name}, {name}.mT)", f"{name}.mT @ {name}"])
    return rng.choice(
        [f"torch.mm({name}, {name}.t())", f"{name}.t() @ {name}", f"{name}[0] @ {name}.mT",
         f"torch.matmul({name}, {name}[0])", f"{name} @ {name}.mT.unsqueeze(0)"]
    )  # fmt: skip


def normalization(scope: Scope) -> str | None:
    name = scope.pick(both(floating, ranked(1)))
    if name is None:
        return None
    d = scope.dim(name)
    return scope.rng.choice(
        [f"torch.softmax({name}, {d})", f"torch.log_softmax({name}, {d})",
         f"F.layer_norm({name}, {name}.shape[-1:])",
         f"{name} * torch.rsqrt({name}.pow(2).mean(-1, keepdim=True) + 1e-6)",
         f"F.normalize({name}, dim={d})"]
    )  # fmt: skip


def complex_view(scope: Scope) -> str | None:
    """A complex view of a float32/float64 variable whose last dim is 2."""
    name = scope.pick(lambda t: t.dtype in (torch.float32, torch.float64) and t.shape[-1:] == (2,))
    if name is None:
        return None
    return scope.rng.choice(
        [f"torch.view_as_complex({name}.contiguous())",
         f"torch.view_as_real(torch.view_as_complex({name}.contiguous()) * (1 + 2j))",
         f"torch.view_as_complex({name}.contiguous()).abs()"]
    )  # fmt: skip


def reduction_dims(scope: Scope) -> str | None:
    """A reduction over a list or tuple of dims (negative ones included), keepdim either way."""
    name = scope.pick(ranked(2))
    if name is None:
        return None
    t, rng = scope.value(name), scope.rng
    a, b = rng.sample(range(t.dim()), 2)
    b = b - t.dim() if rng.random() < 0.4 else b
    dims = rng.choice([f"({a}, {b})", f"[{a}, {b}]", f"[{b}]"])
    keep = rng.random() < 0.5
    ops = ["sum", "amax", "amin", "any", "all", "count_nonzero"]
    if floating(t):
        ops += ["mean", "var", "std", "logsumexp", "nansum", "norm"]
    op = rng.choice(ops)
    if op == "count_nonzero":
        return f"torch.count_nonzero({name}, dim={dims.replace('[', '(').replace(']', ',)')})"
    if op in ("var", "std"):
        return f"{name}.{op}(dim={dims}, correction={rng.choice([0, 1])}, keepdim={keep})"
    if op == "norm":
        return f"torch.linalg.vector_norm({name}, dim={dims}, keepdim={keep})"
    if op == "sum" and rng.random() < 0.3:
        return f"{name}.sum(dim={dims}, keepdim={keep}, dtype=torch.float64)"
    return f"{name}.{op}(dim={dims}, keepdim={keep})"


def promotion(scope: Scope) -> str | None:
    """Operands of different dtypes: int/bool/float tensors, 0-dim tensors, Python scalars."""
    name = scope.pick()
    if name is None:
        return None
    t, rng = scope.value(name), scope.rng
    shape = t.shape

    def other_dtype(u):
        try:
            torch.broadcast_shapes(shape, u.shape)
        except RuntimeError:
            return False
        return u.dtype != t.dtype

    other = scope.pick(other_dtype)
    choices = [f"{rng.choice(['2', '1.5', 'True', '-3'])}"]
    if other is not None:
        choices += [other, other]
    any_other = scope.pick(lambda u: u.numel() > 0 and u is not t)
    if any_other is not None:
        choices.append(f"{any_other}.{rng.choice(['sum()', 'amax()', 'to(torch.float64).sum()'])}")
    b = rng.choice(choices)
    op = rng.choice(["+", "-", "*", "/", "//", "%", "max", "where", "add_alpha"])
    if op == "max":
        return f"torch.maximum({name}, torch.as_tensor({b}))"
    if op == "where":
        return f"torch.where({name} != 0, {name}, {b})"
    if op == "add_alpha":
        return f"torch.add({name}, {b}, alpha=2)"
    a, b = (name, b) if rng.random() < 0.7 or b[0].isdigit() or b[0] in "-T" else (b, name)
    return f"{a} {op} {b}"


def symbolic_int(scope: Scope) -> str | None:
    """Sizes used as int arguments and Python numbers (symbolic under dynamic shapes)."""
    name = scope.pick(ranked(1))
    if name is None:
        return None
    t, rng = scope.value(name), scope.rng
    d = scope.dim(name)
    n = f"{name}.shape[{d}]"
    choices = [
        f"{name} * {n}",
        f"{name}.sum({d}) / {n}",
        f"{name}[..., : {name}.shape[-1] // 2]",
        f"{name}.narrow({d}, {n} // 2, {n} - {n} // 2)",
        f"{name}.roll({n} // 2 + 1, {d})",
        f"{name}.new_full(({n}, 2), {n})",
        f"torch.arange({n}, dtype={name}.dtype) + {name}.sum()",
        f"{name}.reshape({name}.numel() // max({n}, 1), -1) if {n} else {name}",
        f"{name}.repeat_interleave(2, {d}).narrow({d}, 0, {n})",
        f"F.pad({name}, (1, {name}.shape[-1] % 2))",
    ]
    if t.dim() >= 2:
        choices.append(f"{name}.flatten(0, 1).view({name}.shape[0], {name}.shape[1], -1)")
    return rng.choice(choices)


def item_scalar(scope: Scope) -> str | None:
    """A value read back to Python (`.item()`, `int(...)`) and used as a scalar or a size."""
    name = scope.pick(lambda t: t.dtype != torch.bool)
    other = scope.pick(lambda t: t.numel() > 0)
    if name is None or other is None:
        return None
    rng = scope.rng
    choices = [
        f"{name} * {other}.float().mean().item()",
        f"{name} + int(({other} > 0).sum())",
        f"{name}.reshape(-1)[: int(({other} > 0).sum())]",
        f"{name} - {other}.amax().item()",
    ]
    return rng.choice(choices)


EXPRESSIONS = {
    "unary": (unary, 4),
    "binary": (binary, 4),
    "operator": (operator, 2),
    "where": (where, 1),
    "clamp": (clamp, 1),
    "cast": (cast, 2),
    "reduction": (reduction, 3),
    "view": (view, 4),
    "index": (index, 2),
    "join": (join, 1),
    "matmul": (matmul, 1),
    "normalization": (normalization, 1),
    "complex_view": (complex_view, 1),
}


# ---------------------------------------------------------------- mutations


def inplace_arith(scope: Scope) -> str | None:
    name = scope.pick(lambda t: t.dtype != torch.bool)
    if name is None:
        return None
    op = scope.rng.choice(["add_", "mul_", "sub_", "div_", "clamp_", "neg_", "abs_"])
    if op == "clamp_":
        return f"{name}.clamp_(min=-1, max=1)"
    if op in ("neg_", "abs_"):
        return f"{name}.{op}()"
    return f"{name}.{op}({_partner(scope, name)})"


def inplace_view(scope: Scope) -> str | None:
    """A view of a variable mutated in place: the base must see it."""
    name = scope.pick(both(ranked(1), lambda t: t.dtype != torch.bool))
    if name is None:
        return None
    d = scope.dim(name)
    return scope.rng.choice(
        [f"{name}[::2].mul_(3)", f"{name}.narrow({d}, 0, 1).zero_()",
         f"{name}.select({d}, 0).fill_(1)", f"{name}.diagonal().add_(1)",
         f"{name}.transpose(0, -1).copy_({name}.transpose(0, -1).flip(0))"]
    )  # fmt: skip


def inplace_metadata(scope: Scope) -> str | None:
    name = scope.pick()
    if name is None:
        return None
    ndim = scope.value(name).dim()
    choices = [f"{name}.unsqueeze_(0)", f"{name}.unsqueeze_(-1)", f"{name}.squeeze_()"]
    if ndim == 2:
        choices.append(f"{name}.t_()")
    if ndim >= 2:
        choices.append(f"{name}.transpose_(0, 1)")
    return scope.rng.choice(choices)


def inplace_masked(scope: Scope) -> str | None:
    name = scope.pick(lambda t: t.dtype != torch.bool)
    if name is None:
        return None
    return f"{name}.masked_fill_({name} < 0, 0)"


def inplace_input_view(scope: Scope) -> str | None:
    """An input (or a variable viewing one) written in place through a fresh view of it."""
    inputs = [n for n in scope.names if n in scope.inputs and scope.value(n).dim() >= 1]
    name = scope.rng.choice(inputs) if inputs and scope.rng.random() < 0.6 else None
    name = name or scope.pick(ranked(1))
    if name is None:
        return None
    t, rng = scope.value(name), scope.rng
    views = ["[1:]", "[..., ::2]", ".unsqueeze(0)", ".select(0, -1)", ".view(-1)", "[:, None]"]
    if t.dim() >= 2:
        views += [".t()" if t.dim() == 2 else ".mT", ".diagonal()", ".transpose(0, -1)[0]"]
    view = rng.choice(views)
    if t.dtype == torch.bool:
        op = rng.choice(["zero_()", "fill_(True)", "logical_not_()"])
    else:
        op = rng.choice(
            ["add_(1)", "mul_(2)", "zero_()", "clamp_(max=0)", "neg_()", "fill_(3)",
             f"masked_fill_({name}{view} < 0, 1)", f"copy_({name}{view}.flip(0) * 2)"]
        )  # fmt: skip
    return f"{name}{view}.{op}"


MUTATIONS = {
    "inplace_arith": (inplace_arith, 3),
    "inplace_view": (inplace_view, 2),
    "inplace_metadata": (inplace_metadata, 1),
    "inplace_masked": (inplace_masked, 1),
}


EXTRA_EXPRESSIONS = {
    "reduction_dims": (reduction_dims, 2),
    "promotion": (promotion, 2),
    "symbolic_int": (symbolic_int, 2),
    "item_scalar": (item_scalar, 1),
}
EXTRA_MUTATIONS = {
    "inplace_input_view": (inplace_input_view, 2),
}
FULL_EXPRESSIONS = EXPRESSIONS | EXTRA_EXPRESSIONS
FULL_MUTATIONS = MUTATIONS | EXTRA_MUTATIONS


# ---------------------------------------------------------------- regions and branches
#
# A block is a statement of several lines: `with` regions (autocast, grad mode),
# possibly nested, and `if`/`else` on values and sizes. A region's statements are
# drawn from the tables one at a time and each is kept only when eager runs it,
# under the region's headers, at every call; the scope then knows its result.


def _indented(lines: list[tuple[int, str]]) -> str:
    return "\n".join("    " * depth + line for depth, line in lines)


def _under(headers: list[str], statement: str) -> str:
    return _indented([*enumerate(headers), (len(headers), statement)])


def _region_statement(scope: Scope, headers: list[str], expressions: dict) -> str | None:
    """One statement kept when eager runs it under `headers` at every call (scope updated)."""
    for _attempt in range(4):
        mutate = scope.rng.random() < 0.25
        text = _weighted(scope.rng, FULL_MUTATIONS if mutate else expressions)(scope)
        if text is None:
            continue
        statement = text if mutate else f"{scope.new_name()} = {text}"
        envs = _runs_everywhere(_under(headers, statement), scope.envs)
        if envs is None:
            continue
        scope.envs = envs
        if not mutate:
            scope.names.append(statement.split(" = ")[0])
        return statement
    return None


def _region(scope: Scope, headers: list[str], count: int, expressions: dict) -> list:
    """(depth, line) of up to `count` statements under `headers` (the last one's body)."""
    found = [_region_statement(scope, headers, expressions) for _ in range(count)]
    return [(len(headers), line) for line in found if line is not None]


def autocast_region(scope: Scope) -> str | None:
    """`with torch.autocast("cpu", ...)`, matmuls favoured, maybe a disabled sub-region."""
    rng = scope.rng
    dtype = rng.choice(["bfloat16", "bfloat16", "float16"])
    outer = f'with torch.autocast("cpu", dtype=torch.{dtype}):'
    inner = 'with torch.autocast("cpu", enabled=False):'
    table = FULL_EXPRESSIONS | {"matmul": (matmul, 6)}
    body = _region(scope, [outer], rng.randint(1, 2), table)
    if rng.random() < 0.6:
        disabled = _region(scope, [outer, inner], rng.randint(1, 2), FULL_EXPRESSIONS)
        body += [(1, inner), *disabled] if disabled else []
        body += _region(scope, [outer], rng.randint(0, 1), table)
    return _indented([(0, outer), *body]) if body else None


def grad_region(scope: Scope) -> str | None:
    """`with torch.no_grad()` (or set_grad_enabled(False)), maybe enable_grad inside."""
    rng = scope.rng
    outer = rng.choice(["with torch.no_grad():", "with torch.set_grad_enabled(False):"])
    inner = "with torch.enable_grad():"
    body = _region(scope, [outer], rng.randint(1, 2), FULL_EXPRESSIONS)
    if rng.random() < 0.4:
        enabled = _region(scope, [outer, inner], rng.randint(1, 2), FULL_EXPRESSIONS)
        body += [(1, inner), *enabled] if enabled else []
    return _indented([(0, outer), *body]) if body else None


def branch(scope: Scope) -> str | None:
    """`if` on a value (`.item()`, a tensor's truth) or a size: one new value per branch,
    or a mutation under the condition."""
    c = scope.pick()
    if c is None:
        return None
    rng = scope.rng
    cond = rng.choice(
        [f"{c}.sum() > 0", f"({c} > 0).any()", f"{c}.float().mean().item() > 0.25",
         f"{c}.numel() > 6", f"{c}.shape[0] % 2 == 0" if scope.value(c).dim() else f"{c} > 0",
         f"int(({c} != 0).sum()) >= 2"]
    )  # fmt: skip
    name = None
    if rng.random() < 0.3:
        mutation = _weighted(rng, FULL_MUTATIONS)(scope)
        if mutation is None:
            return None
        text = _indented([(0, f"if {cond}:"), (1, mutation)])
    else:
        then, other = (_weighted(rng, FULL_EXPRESSIONS)(scope) for _ in range(2))
        if then is None or other is None:
            return None
        name = scope.new_name()
        text = _indented(
            [(0, f"if {cond}:"), (1, f"{name} = {then}"), (0, "else:"), (1, f"{name} = {other}")]
        )
    envs = _runs_everywhere(text, scope.envs)
    if envs is None:
        return None
    scope.envs = envs
    if name is not None:
        scope.names.append(name)
    return text


BLOCKS = {
    "autocast_region": (autocast_region, 2),
    "grad_region": (grad_region, 2),
    "branch": (branch, 2),
}

BLOCK_RATE = 0.15


# ---------------------------------------------------------------- programs


def _weighted(rng: random.Random, table: dict):
    names = sorted(table)
    return table[rng.choices(names, weights=[table[n][1] for n in names])[0]][0]


def random_inputs(rng: random.Random, grad: bool) -> tuple[tuple[InputSpec, ...], tuple]:
    """1-3 inputs over shared dims d0..d2, and each call's sizes of those dims."""
    first = {d: rng.choice([1, 2, 3, 4, 5, 6]) for d in ("d0", "d1", "d2")}
    if rng.random() < 0.08:
        first[rng.choice(sorted(first))] = 0  # zero-size
    dims = [first]
    if rng.random() < 0.6:
        second = dict(first)
        changed = rng.choice(sorted(first))
        second[changed] = rng.choice([s for s in (1, 2, 3, 5, 7) if s != first[changed]])
        dims.append(second)
    dtype = rng.choice(FLOATS) if grad or rng.random() < 0.7 else rng.choice(DTYPES)
    specs = []
    for i in range(rng.choice([1, 2, 2, 3])):
        rank = rng.choice([1, 2, 2, 3, 3])
        shape = tuple(rng.sample(["d0", "d1", "d2"], rank))
        if rng.random() < 0.2:  # broadcast: a literal size-1 dim
            shape = tuple(1 if j == rank - 1 else s for j, s in enumerate(shape))
        this_dtype = dtype if rng.random() < 0.8 else rng.choice(DTYPES)
        layout = rng.choice(["contiguous"] * 3 + ["permuted", "sliced", "expanded", "offset"])
        requires_grad = grad and this_dtype in FLOATS
        if requires_grad and layout == "expanded":
            # NOTE: eager accumulates a stride-0 leaf's grad into overlapping memory
            # (the grad keeps the leaf's strides), so its grad values are not a reference.
            layout = "contiguous"
        specs.append(
            InputSpec(
                name=f"x{i}",
                shape=shape,
                dtype=this_dtype,
                layout=layout,
                values=rng.choices(["grid", "randn", "special"], weights=[10, 5, 1])[0],
                requires_grad=requires_grad,
            )
        )
    return tuple(specs), tuple(dims)


@dataclass(frozen=True)
class Profile:
    """What a program draws from: its inputs, and the tables of its statements."""

    expressions: dict
    mutations: dict
    blocks: dict
    inputs: Callable = random_inputs  # (rng, grad) -> (InputSpec tuple, each call's dims)
    grad_rate: float = 0.35  # share of float programs whose input grads are compared
    # Python constructs (python_constructs.py): the share of seeds whose programs draw
    # them (decided apart from the program's own draws, so that other seeds keep their
    # programs), and the share of such a program's statements that are constructs.
    constructs: dict = field(default_factory=dict)
    python_rate: float = 0.0
    construct_rate: float = 0.45


# Generator profiles. "base" programs are those of earlier fuzzer runs (seeds pinned in
# tests keep their programs); "full" adds the extra expressions and mutations and the
# multi-line blocks; "wide" adds larger and odd sizes, more input layouts, and the ops
# of wide_ops.py (nn ops, sort and scans, scatter, einsum, batch_norm's running stats);
# "python" is "full" with the Python constructs of python_constructs.py in every program
# ("full" draws them in PYTHON_IN_FULL of its seeds, the others keeping their programs).
PYTHON_IN_FULL = 0.08
PROFILES = {
    "base": Profile(EXPRESSIONS, MUTATIONS, {}),
    "full": Profile(
        FULL_EXPRESSIONS,
        FULL_MUTATIONS,
        BLOCKS,
        constructs=CONSTRUCTS,
        python_rate=PYTHON_IN_FULL,
    ),  # fmt: skip
    "python": Profile(
        FULL_EXPRESSIONS, FULL_MUTATIONS, BLOCKS, constructs=CONSTRUCTS, python_rate=1.0
    ),
    "wide": Profile(
        FULL_EXPRESSIONS | wide_ops.EXPRESSIONS,
        FULL_MUTATIONS | wide_ops.MUTATIONS,
        BLOCKS | wide_ops.BLOCKS,
        inputs=wide_ops.wide_inputs,
        grad_rate=0.45,
    ),
}
DEFAULT_PROFILE = "wide"


def input_values(program: Program) -> list[dict]:
    """Each call's inputs, by name, built by the program's own rendered `make_inputs`."""
    from program import render

    namespace: dict = {}
    exec(compile(render(program), f"<fuzz-inputs-{program.seed}>", "exec"), namespace)
    names = [spec.name for spec in program.inputs]
    return [dict(zip(names, namespace["make_inputs"](c))) for c in range(len(program.dims))]


def generate(seed: int, length: int | None = None, profile: str = DEFAULT_PROFILE) -> Program:
    """The program of one seed: random inputs, then up to `length` statements.

    A candidate statement that eager rejects is dropped, except now and then
    (RAISING_RATE): it is kept as the program's last statement, so that eager
    raises at some call and the compiled function must raise too. `profile` names
    the tables drawn from (PROFILES).
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown fuzzer profile {profile!r}; choose from {sorted(PROFILES)}")
    tables = PROFILES[profile]
    rng = random.Random(seed)
    grad = rng.random() < tables.grad_rate
    inputs, dims = tables.inputs(rng, grad)
    program = Program(seed=seed, inputs=inputs, statements=(), outputs=(), dims=dims, grad=grad)
    scope = Scope(rng, input_values(program))
    frame = Frame(program) if uses_constructs(seed, tables) else None
    statements: list[str] = []
    for _ in range(length or rng.randint(2, 9)):
        if frame is not None and rng.random() < tables.construct_rate:
            statement, raises = frame.next_construct(scope, statements, tables.constructs)
        else:
            statement, raises = _next_statement(rng, scope, grad, tables)
        if statement is None:
            continue
        statements.append(statement)
        if raises:
            break
    outputs = _choose_outputs(rng, scope)
    if frame is not None:
        if frame.values and rng.random() < 0.5:
            outputs += (rng.choice(frame.values),)
        program = program.replace(definitions=tuple(frame.definitions))
    return program.replace(statements=tuple(statements), outputs=outputs)


def uses_constructs(seed: int, tables: Profile) -> bool:
    """Whether program `seed` draws Python constructs: always at a rate of 1, else decided
    by a generator of its own, so that the programs of other seeds stay as they were."""
    if not tables.constructs or tables.python_rate <= 0:
        return False
    return tables.python_rate >= 1 or random.Random(f"constructs:{seed}").random() < (
        tables.python_rate
    )


# A construct that raises at some call is kept, as the program's last statement, this
# often when it raised the program's own FuzzError (an uncaught user exception), and at
# RAISING_RATE otherwise.
USER_RAISING_RATE = 0.25


class Frame:
    """The definitions and Python values of a program drawing constructs, and the check
    that keeps a construct: the whole program so far, rendered and run eagerly at every
    call from fresh inputs and a fresh outside state (nested functions, loops and the
    outside state are checked in the program itself)."""

    def __init__(self, program: Program):
        self.program = program
        self.definitions: list[str] = []
        self.values: list[str] = []  # Python values the program may return

    def next_construct(
        self, scope: Scope, statements: list[str], constructs: dict
    ) -> tuple[str | None, bool]:
        for _attempt in range(4):
            construct = _weighted(scope.rng, constructs)(scope)
            if construct is None:
                continue
            used = list(dict.fromkeys([*self.definitions, *construct.definitions]))
            envs, error = self.run(statements + [construct.text], used)
            if envs is None:
                rate = USER_RAISING_RATE if type(error).__name__ == "FuzzError" else RAISING_RATE
                if scope.rng.random() < rate:
                    self.definitions = used
                    return construct.text, True
                continue
            scope.envs = envs
            scope.names += [
                n for n in construct.tensors if all(isinstance(e[n], torch.Tensor) for e in envs)
            ]
            self.values += construct.values
            self.definitions = used
            return construct.text, False
        return None, False

    def run(self, statements: list[str], definitions: list[str]):
        """Each call's locals at the end of `statements`, or (None, the exception raised)."""
        from program import render

        trial = self.program.replace(
            statements=(*statements, "return dict(locals())"), definitions=tuple(definitions)
        )
        namespace: dict = {"__name__": "fuzz_program"}
        envs = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                exec(compile(render(trial), f"<fuzz-frame-{trial.seed}>", "exec"), namespace)
                for call in range(len(trial.dims)):
                    if "reset_state" in namespace:
                        namespace["reset_state"]()
                    env = namespace["program"](*namespace["make_inputs"](call))
                    check_sizes("a construct", env)
                    envs.append(env)
            except ValueTooLarge:
                raise
            except Exception as error:
                return None, error
        return envs, None


RAISING_RATE = 0.04


def _next_statement(
    rng: random.Random, scope: Scope, grad: bool, tables: Profile
) -> tuple[str | None, bool]:
    """A new statement that eager runs at every call (scope updated), and whether it raises."""
    expressions, mutations, blocks = tables.expressions, tables.mutations, tables.blocks
    for _attempt in range(8):
        if blocks and rng.random() < BLOCK_RATE:
            text = _weighted(rng, blocks)(scope)  # validated line by line, scope updated
            if text is not None:
                return text, False
            continue
        mutate = rng.random() < (0.12 if grad else 0.25)
        text = _weighted(rng, mutations if mutate else expressions)(scope)
        if text is None:
            continue
        statement = text if mutate else f"{scope.new_name()} = {text}"
        envs = _runs_everywhere(statement, scope.envs)
        if envs is None:
            if rng.random() < RAISING_RATE:
                return statement, True
            continue
        scope.envs = envs
        if not mutate:
            scope.names.append(statement.split(" = ")[0])
        return statement, False
    return None, False


def _choose_outputs(rng: random.Random, scope: Scope) -> tuple[str, ...]:
    """The newest variable, plus up to three others (inputs included: aliasing outputs)."""
    names = [n for n in scope.names if isinstance(scope.value(n), torch.Tensor)]
    chosen = [names[-1]]
    for name in rng.sample(names, min(len(names), rng.randint(0, 3))):
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


__all__ = [
    "BLOCKS",
    "DEFAULT_PROFILE",
    "EXPRESSIONS",
    "EXTRA_EXPRESSIONS",
    "EXTRA_MUTATIONS",
    "HELPERS",
    "MUTATIONS",
    "PROFILES",
    "Profile",
    "generate",
    "input_values",
]
