"""The op tables and the inputs of the `wide` profile (generator.PROFILES).

The `wide` profile is `full` plus what exercises other code paths of the
compilers: inputs with larger and odd sizes (vector lanes and their tails,
tiles, block masks; one dim sometimes in the thousands) and more layouts
(a transposed last pair of dims, rows padded to an odd stride), and ops of
neural networks and of scatter/gather:

    activation    gelu / silu / softplus / hardtanh / dropout(p=0) ...
    sort_scan     sort / argsort (stable) / topk / cumprod / cummax / cummin
    scatter       scatter / scatter_add / scatter_reduce / index_add / index_put / index_fill
    embedding     F.embedding over an int variable taken modulo the rows
    convolution   F.conv1d / F.conv2d (weights from linspace, scaled by a value)
    pooling       max_pool1d/2d / avg_pool2d / adaptive_avg_pool2d
    interpolate   nearest / linear / bilinear
    shape_op      tril / triu / repeat / tile / split / chunk / unbind / einsum
    scatter_into  (mutation) scatter_ / scatter_add_ / index_add_ / index_put_ / x[idx] = ...
    batch_norm    (block) F.batch_norm with running stats mutated in training mode

Indices are written so that every call has one right answer: a permutation or
sorted distinct positions where duplicates would race (scatter, index_put
without accumulate), duplicates only where they add up.
"""

from __future__ import annotations

import random

import torch
from program import InputSpec
from scope import Scope, both, floating, integral, ranked

FLOATS = ("float32", "float32", "float32", "float64", "float16", "bfloat16")
DTYPES = FLOATS + ("int64", "int32", "bool")

# ---------------------------------------------------------------- inputs

# Sizes around vector widths (8/16 lanes), tile edges (16, 32) and block sizes.
LANE_EDGES = (8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129)
LARGE = (257, 1000, 1025, 2049, 4097)
MAX_NUMEL = 70_000  # of d0 * d1 * d2: a rank-3 input at most this large


def _size(rng: random.Random) -> int:
    kind = rng.choices(["small", "medium", "edge"], weights=[3, 3, 3])[0]
    if kind == "small":
        return rng.randint(1, 6)
    if kind == "medium":
        return rng.randint(7, 70)
    return rng.choice(LANE_EDGES)


def _bounded(sizes: dict, keep: str | None) -> dict:
    """`sizes` with dims other than `keep` made small until their product is bounded."""
    sizes = dict(sizes)
    for name in sorted(sizes, key=lambda n: -sizes[n]):
        product = sizes["d0"] * sizes["d1"] * sizes["d2"]
        if product <= MAX_NUMEL:
            break
        if name != keep:
            sizes[name] = max(1, min(sizes[name], 6))
    return sizes


def wide_sizes(rng: random.Random) -> tuple[dict, ...]:
    """Each call's sizes of d0..d2: larger and odd, sometimes one dim large, sometimes 0."""
    first = {d: _size(rng) for d in ("d0", "d1", "d2")}
    large = None
    if rng.random() < 0.25:
        large = rng.choice(sorted(first))
        first[large] = rng.choice(LARGE)
    if rng.random() < 0.05:
        first[rng.choice(sorted(first))] = 0
    first = _bounded(first, large)
    dims = [first]
    if rng.random() < 0.6:
        changed = rng.choice(sorted(first))
        sizes = [s for s in (1, 2, 7, 16, 17, 33, 64, 129, _size(rng)) if s != first[changed]]
        dims.append(_bounded({**first, changed: rng.choice(sizes)}, changed))
    return tuple(dims)


def wide_inputs(rng: random.Random, grad: bool) -> tuple[tuple[InputSpec, ...], tuple]:
    """1-3 inputs over d0..d2 (wide_sizes), in any of program.LAYOUTS."""
    dims = wide_sizes(rng)
    dtype = rng.choice(FLOATS) if grad or rng.random() < 0.75 else rng.choice(DTYPES)
    layouts = ["contiguous"] * 3 + ["permuted", "sliced", "expanded", "offset"]
    layouts += ["transposed"] * 2 + ["padded"] * 2
    specs = []
    for i in range(rng.choice([1, 2, 2, 3])):
        rank = rng.choice([1, 2, 2, 3, 3])
        shape = tuple(rng.sample(["d0", "d1", "d2"], rank))
        if rng.random() < 0.15:  # broadcast: a literal size-1 dim
            shape = tuple(1 if j == rank - 1 else s for j, s in enumerate(shape))
        this_dtype = dtype if rng.random() < 0.8 else rng.choice(DTYPES)
        layout = rng.choice(layouts)
        requires_grad = grad and this_dtype in FLOATS
        if requires_grad and layout == "expanded":
            layout = "contiguous"  # see generator.random_inputs
        values = rng.choices(["grid", "randn", "special"], weights=[10, 5, 1])[0]
        specs.append(InputSpec(f"x{i}", shape, this_dtype, layout, values, requires_grad))
    return tuple(specs), dims


# ---------------------------------------------------------------- expressions


def activation(scope: Scope) -> str | None:
    name = scope.pick(floating)
    if name is None:
        return None
    return scope.rng.choice(
        [f"F.gelu({name})", f'F.gelu({name}, approximate="tanh")', f"F.silu({name})",
         f"F.softplus({name})", f"F.softplus({name}, beta=2, threshold=1)",
         f"F.hardtanh({name})", f"F.hardtanh({name}, -0.5, 0.25)", f"F.leaky_relu({name}, 0.1)",
         f"F.elu({name})", f"F.mish({name})", f"F.hardswish({name})",
         f"F.dropout({name}, p=0.0)", f"F.dropout({name}, 0.0, training=True)"]
    )  # fmt: skip


def sort_scan(scope: Scope) -> str | None:
    name = scope.pick(both(ranked(1), lambda t: t.dtype != torch.bool))
    if name is None:
        return None
    t, rng = scope.value(name), scope.rng
    d = scope.dim(name)
    k = rng.choice([1, 3, 8])
    choices = [
        f"{name}.sort({d}).values",
        f"{name}.sort({d}, descending=True).values",
        f"{name}.sort({d}, stable=True).indices",
        f"torch.argsort({name}, {d}, descending=True, stable=True)",
        f"{name}.topk(min({k}, {name}.shape[{d}]), {d}).values",
        f"{name}.topk(min({k}, {name}.shape[{d}]), {d}, largest=False).values",
        f"{name}.cummax({d}).values",
        f"{name}.cummin({d}).indices",
        f"torch.cumsum({name}, {d})",
    ]
    if floating(t):  # an int cumprod overflows (undefined in C++)
        choices += [f"{name}.cumprod({d})", f"torch.logcumsumexp({name}, {d})"]
    return rng.choice(choices)


def _along(scope: Scope, name: str, d: int, positions: str) -> str:
    """An index of `name`'s shape holding `positions` (a 1-D tensor expression) along `d`."""
    ndim = scope.value(name).dim()
    shape = ", ".join("-1" if i == d % ndim else "1" for i in range(ndim))
    return f"{positions}.reshape({shape}).expand_as({name})"


def _source(scope: Scope, name: str) -> str:
    """A tensor of `name`'s shape and dtype to scatter from."""
    t = scope.value(name)
    other = scope.pick(lambda u: u.shape == t.shape and u.dtype == t.dtype)
    if other is not None and other != name and scope.rng.random() < 0.5:
        return other
    return f"({name} * 2)" if t.dtype != torch.bool else f"(~{name})"


def _positions(scope: Scope, name: str, d: int, distinct: bool) -> str | None:
    size = scope.least_size(name, d)
    if size == 0:
        return None
    picks = [scope.rng.randrange(size) for _ in range(scope.rng.randint(1, 4))]
    picks = sorted(set(picks)) if distinct else picks
    return f"torch.tensor({picks})"


def scatter(scope: Scope) -> str | None:
    name = scope.pick(both(ranked(1), lambda t: t.dtype != torch.bool))
    if name is None or not scope.steady_rank(name):
        return None
    rng, d = scope.rng, scope.dim(name)
    n = f"{name}.shape[{d}]"
    permutation = _along(scope, name, d, f"torch.arange({n}).roll(1)")
    halves = _along(scope, name, d, f"(torch.arange({n}) // 2)")
    src = _source(scope, name)
    op = rng.choice(["scatter", "scatter_value", "scatter_add", "scatter_reduce", "index_add",
                     "index_put", "index_fill", "index_copy"])  # fmt: skip
    if op == "scatter":
        return f"{name}.scatter({d}, {permutation}, {src})"
    if op == "scatter_value":
        return f"{name}.scatter({d}, {halves}, 3)"
    if op == "scatter_add":
        return f"{name}.scatter_add({d}, {halves}, {src})"
    if op == "scatter_reduce":
        reduce = rng.choice(["sum", "prod", "amax", "amin", "mean"])
        return (
            f'{name}.scatter_reduce({d}, {halves}, {src}, "{reduce}", '
            f"include_self={rng.random() < 0.5})"
        )
    picks = _positions(scope, name, d, distinct=op in ("index_put", "index_copy"))
    if picks is None:
        return None
    if op == "index_add":
        return f"{name}.index_add({d}, {picks}, {name}.index_select({d}, {picks}), alpha=2)"
    if op == "index_fill":
        return f"{name}.index_fill({d}, {picks}, -1)"
    if op == "index_copy":
        return f"{name}.index_copy({d}, {picks}, {name}.index_select({d}, {picks}).flip({d}))"
    accumulate = rng.random() < 0.5
    picks = _positions(scope, name, 0, distinct=not accumulate)
    return f"{name}.index_put(({picks},), {name}[{picks}] * 3, accumulate={accumulate})"


def embedding(scope: Scope) -> str | None:
    weight = scope.pick(both(floating, lambda t: t.dim() == 2 and t.shape[0] > 0))
    if weight is None:
        return None
    rows = f"{weight}.shape[0]"
    ids = scope.pick(integral)
    ids = f"{ids}.remainder({rows})" if ids else f"(torch.arange(5) * 3).remainder({rows})"
    extra = scope.rng.choice(["", ", padding_idx=0", ", max_norm=None"])
    return f"F.embedding({ids}, {weight}{extra})"


def _weight(scope: Scope, name: str, shape: str, count: str) -> str:
    """A weight of `shape` (`count` elements) in `name`'s dtype, sometimes scaled by a value."""
    w = f"torch.linspace(-1, 1, {count}, dtype={name}.dtype).reshape({shape})"
    if scope.rng.random() < 0.3:
        w = f"({w} * {name}.mean())"
    return w


def convolution(scope: Scope) -> str | None:
    name = scope.pick(both(floating, lambda t: t.dim() in (2, 3)))
    if name is None:
        return None
    rng, ndim = scope.rng, scope.value(name).dim()
    out = rng.choice([1, 2, 4])
    bias = rng.choice(["", f", torch.ones({out}, dtype={name}.dtype)"])
    if ndim == 2 or rng.random() < 0.4:  # conv1d: (C, L) or (N, C, L)
        c, k = f"{name}.shape[-2]", rng.choice([1, 3])
        w = _weight(scope, name, f"{out}, {c}, {k}", f"{out * k} * {c}")
        options = rng.choice(["", ", padding=1", ", stride=2", ", dilation=2", ', padding="same"'])
        return f"F.conv1d({name}, {w}{bias}{options})"
    c, k = f"{name}.shape[0]", rng.choice([1, 3])
    w = _weight(scope, name, f"{out}, {c}, {k}, {k}", f"{out * k * k} * {c}")
    options = rng.choice(["", ", padding=1", ", stride=2", ", stride=(1, 2), padding=(1, 0)"])
    x = rng.choice([name, f"{name}.unsqueeze(0)"])
    return f"F.conv2d({x}, {w}{bias}{options})"


def pooling(scope: Scope) -> str | None:
    name = scope.pick(both(floating, lambda t: t.dim() in (2, 3)))
    if name is None:
        return None
    if scope.value(name).dim() == 2:
        return scope.rng.choice(
            [f"F.max_pool1d({name}, 2)", f"F.avg_pool1d({name}, 3, stride=2, padding=1)"]
        )
    return scope.rng.choice(
        [f"F.max_pool2d({name}, 2)", f"F.max_pool2d({name}, 3, stride=2, padding=1)",
         f"F.max_pool2d({name}, 2, ceil_mode=True)", f"F.avg_pool2d({name}, 2)",
         f"F.avg_pool2d({name}, 3, stride=1, padding=1, count_include_pad=False)",
         f"F.avg_pool2d({name}, 2, ceil_mode=True)", f"F.adaptive_avg_pool2d({name}, 1)",
         f"F.adaptive_avg_pool2d({name}, (2, 3))", f"F.adaptive_max_pool2d({name}, 2)"]
    )  # fmt: skip


def interpolate(scope: Scope) -> str | None:
    name = scope.pick(both(floating, lambda t: t.dim() == 3))
    if name is None:
        return None
    return scope.rng.choice(
        [f'F.interpolate({name}, scale_factor=2, mode="nearest")',
         f'F.interpolate({name}, size={name}.shape[-1] + 3, mode="linear")',
         f'F.interpolate({name}, scale_factor=0.5, mode="linear", align_corners=True)',
         f'F.interpolate({name}.unsqueeze(0), scale_factor=2, mode="bilinear")',
         f'F.interpolate({name}.unsqueeze(0), size=(3, 5), mode="nearest-exact")',
         f'F.interpolate({name}.unsqueeze(0), scale_factor=1.5, mode="bilinear", '
         f"align_corners=True)"]
    )  # fmt: skip


EINSUMS = {
    1: ("i,i->", "i,j->ij", "i->"),
    2: ("ij->ji", "ij,ij->i", "ij,kj->ik", "ij->", "ij,ij->j", "ji,jk->ik"),
    3: ("bij,bkj->bik", "bij->jb", "bij,bij->b", "ijk->kji", "bij,bjk->bik"),
}


def shape_op(scope: Scope) -> str | None:
    name = scope.pick(ranked(1))
    if name is None or not scope.steady_rank(name):
        return None
    t, rng = scope.value(name), scope.rng
    ndim, d = t.dim(), scope.dim(name)
    ones = ", ".join(["1"] * ndim)
    choices = [
        f"{name}.repeat(2, {ones})",
        f"{name}.repeat({', '.join(['2'] + ['1'] * (ndim - 1))})",
        f"{name}.tile((2,))",
        f"{name}.split(2, {d})[-1]",
        f"{name}.chunk(3, {d})[0]",
        f"torch.cat({name}.chunk(3, {d})[::-1], {d})",
        f"torch.tensor_split({name}, 3, {d})[1]",
        f"torch.stack({name}.unbind({d}), -1)",
    ]
    if scope.least_size(name, d) > 0:
        choices.append(f"{name}.unbind({d})[0]")
    if ndim >= 2:
        k = rng.choice([0, 1, -1, 2])
        choices += [f"torch.tril({name}, {k})", f"{name}.triu({k})"]
    if floating(t) and ndim in EINSUMS:
        pattern = rng.choice(EINSUMS[ndim])
        operands = ", ".join([name] * len(pattern.split("->")[0].split(",")))
        choices += [f'torch.einsum("{pattern}", {operands})'] * 2
    return rng.choice(choices)


EXPRESSIONS = {
    "activation": (activation, 3),
    "sort_scan": (sort_scan, 3),
    "scatter": (scatter, 3),
    "embedding": (embedding, 2),
    "convolution": (convolution, 3),
    "pooling": (pooling, 2),
    "interpolate": (interpolate, 2),
    "shape_op": (shape_op, 3),
}


# ---------------------------------------------------------------- mutations


def scatter_into(scope: Scope) -> str | None:
    """scatter_ / scatter_add_ / index_add_ / index_put_ / x[idx] = ... on a variable."""
    name = scope.pick(both(ranked(1), lambda t: t.dtype != torch.bool))
    if name is None or not scope.steady_rank(name):
        return None
    rng, d = scope.rng, scope.dim(name)
    n = f"{name}.shape[{d}]"
    op = rng.choice(["scatter_", "scatter_add_", "index_add_", "index_put_", "setitem"])
    if op == "scatter_":
        index = _along(scope, name, d, f"torch.arange({n}).flip(0)")
        return f"{name}.scatter_({d}, {index}, {name} + 1)"
    if op == "scatter_add_":
        index = _along(scope, name, d, f"(torch.arange({n}) % 3)")
        return f"{name}.scatter_add_({d}, {index}, {_source(scope, name)})"
    picks = _positions(scope, name, d if op == "index_add_" else 0, distinct=op == "setitem")
    if picks is None:
        return None
    if op == "index_add_":
        return f"{name}.index_add_({d}, {picks}, {name}.index_select({d}, {picks}) + 1)"
    if op == "index_put_":
        return f"{name}.index_put_(({picks},), torch.ones_like({name}[{picks}]), accumulate=True)"
    return f"{name}[{picks}] = {name}[{picks}].flip(0) * 2"


MUTATIONS = {"scatter_into": (scatter_into, 3)}


# ---------------------------------------------------------------- blocks


def batch_norm(scope: Scope) -> str | None:
    """F.batch_norm in training mode: its running stats (new, or a variable) are mutated."""
    name = scope.pick(both(floating, ranked(2)))
    if name is None or not scope.steady_rank(name):
        return None
    rng, channels = scope.rng, f"{name}.shape[1]"
    lines, new = [], []
    stats = [
        n for n in scope.names
        if scope.value(n).dim() == 1 and floating(scope.value(n))
        and not scope.value(n).requires_grad and n != name
    ]  # fmt: skip
    if len(stats) >= 2 and rng.random() < 0.5:
        mean, var = rng.sample(stats, 2)
    else:
        mean, var = scope.new_name(), scope.new_name()
        dtype = rng.choice([f"{name}.dtype", "torch.float32"])
        lines += [
            f"{mean} = torch.zeros({channels}, dtype={dtype})",
            f"{var} = torch.ones({channels}, dtype={dtype})",
        ]
        new += [mean, var]
    out = scope.new_name()
    training = rng.random() < 0.8
    affine = rng.choice(
        ["", f", torch.linspace(0.5, 1.5, {channels}, dtype={name}.dtype), "
             f"torch.zeros({channels}, dtype={name}.dtype)"]
    )  # fmt: skip
    momentum = rng.choice(["0.1", "0.5"])
    lines.append(
        f"{out} = F.batch_norm({name}, {mean}, {var}{affine}, training={training}, "
        f"momentum={momentum})"
    )
    text = "\n".join(lines)
    return text if scope.keep(text, [*new, out]) else None


BLOCKS = {"batch_norm": (batch_norm, 2)}
