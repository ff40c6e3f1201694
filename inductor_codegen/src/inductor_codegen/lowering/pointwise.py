"""Lowerings of pointwise ATen ops: each composes the loaders of its inputs."""

from __future__ import annotations

import math

import torch

from inductor_codegen.ir import Constant, Op, ScalarArg, TensorValue
from inductor_codegen.lowering.common import (
    cast,
    const,
    make_pointwise,
    node_dtype,
    op,
    promote,
)
from inductor_codegen.lowering.registry import register_lowering

__all__: list[str] = []

aten = torch.ops.aten

# aten op -> the op-table name of the same math (input cast to the output dtype).
UNARY_MATH = {
    aten.exp.default: "exp",
    aten.exp2.default: "exp2",
    aten.expm1.default: "expm1",
    aten.log.default: "log",
    aten.log2.default: "log2",
    aten.log10.default: "log10",
    aten.log1p.default: "log1p",
    aten.sqrt.default: "sqrt",
    aten.rsqrt.default: "rsqrt",
    aten.sin.default: "sin",
    aten.cos.default: "cos",
    aten.tan.default: "tan",
    aten.asin.default: "asin",
    aten.acos.default: "acos",
    aten.atan.default: "atan",
    aten.sinh.default: "sinh",
    aten.cosh.default: "cosh",
    aten.tanh.default: "tanh",
    aten.asinh.default: "asinh",
    aten.acosh.default: "acosh",
    aten.atanh.default: "atanh",
    aten.sigmoid.default: "sigmoid",
    aten.erf.default: "erf",
    aten.erfc.default: "erfc",
    aten.reciprocal.default: "reciprocal",
    aten.lgamma.default: "lgamma",
    aten.neg.default: "neg",
    aten.abs.default: "abs",
    aten.sign.default: "sign",
    aten.sgn.default: "sign",
    aten.relu.default: "relu",
    aten.bitwise_not.default: "bitwise_not",
    aten.frac.default: "frac",
}
# Rounding ops: the identity on integer tensors.
ROUNDING = {
    aten.floor.default: "floor",
    aten.ceil.default: "ceil",
    aten.round.default: "round",
    aten.trunc.default: "trunc",
}
# Predicates: computed in the input dtype, bool result.
PREDICATES = {
    aten.isnan.default: "isnan",
    aten.isinf.default: "isinf",
    aten.signbit.default: "signbit",
    aten.logical_not.default: "logical_not",
}


def _unary(name):
    def lower(ctx, node, x):
        return make_pointwise(node, lambda a: op(name, a, dtype=a.dtype), x)

    return lower


def _rounding(name):
    def lower(ctx, node, x):
        if not node_dtype(node).is_floating_point:
            return make_pointwise(node, lambda a: a, x)
        return make_pointwise(node, lambda a: op(name, a, dtype=a.dtype), x)

    return lower


def _predicate(name):
    def lower(ctx, node, x):
        if name == "logical_not":
            return make_pointwise(
                node, lambda a: op(name, a, dtype=torch.bool), x, compute_dtype=torch.bool
            )
        if not x.dtype.is_floating_point and name in ("isnan", "isinf"):
            return make_pointwise(node, lambda a: const(False, torch.bool), x)
        return make_pointwise(
            node, lambda a: op(name, a, dtype=torch.bool), x, compute_dtype=x.dtype
        )

    return lower


for _op, _name in UNARY_MATH.items():
    register_lowering(_op)(_unary(_name))
for _op, _name in ROUNDING.items():
    register_lowering(_op)(_rounding(_name))
for _op, _name in PREDICATES.items():
    register_lowering(_op)(_predicate(_name))


def _binary(name):
    def lower(ctx, node, a, b):
        return make_pointwise(node, lambda x, y: op(name, x, y, dtype=x.dtype), a, b)

    return lower


BINARY_MATH = {
    aten.mul.Tensor: "mul",
    aten.mul.Scalar: "mul",
    aten.maximum.default: "maximum",
    aten.minimum.default: "minimum",
    aten.fmax.default: "fmax",
    aten.fmin.default: "fmin",
    aten.fmod.Tensor: "fmod",
    aten.fmod.Scalar: "fmod",
    aten.remainder.Tensor: "remainder",
    aten.remainder.Scalar: "remainder",
    aten.atan2.default: "atan2",
    aten.hypot.default: "hypot",
    aten.copysign.Tensor: "copysign",
    aten.bitwise_and.Tensor: "bitwise_and",
    aten.bitwise_and.Scalar: "bitwise_and",
    aten.bitwise_or.Tensor: "bitwise_or",
    aten.bitwise_or.Scalar: "bitwise_or",
    aten.bitwise_xor.Tensor: "bitwise_xor",
    aten.bitwise_xor.Scalar: "bitwise_xor",
}
for _op, _name in BINARY_MATH.items():
    register_lowering(_op)(_binary(_name))

COMPARISONS = {
    aten.eq.Tensor: "eq",
    aten.eq.Scalar: "eq",
    aten.ne.Tensor: "ne",
    aten.ne.Scalar: "ne",
    aten.lt.Tensor: "lt",
    aten.lt.Scalar: "lt",
    aten.le.Tensor: "le",
    aten.le.Scalar: "le",
    aten.gt.Tensor: "gt",
    aten.gt.Scalar: "gt",
    aten.ge.Tensor: "ge",
    aten.ge.Scalar: "ge",
}


LOW_PRECISION = (torch.bfloat16, torch.float16)


def _rounded(expr):
    """`expr` rounded to its own dtype where that is float16/bfloat16 and it is computed
    (kept in float32 inside a kernel, unrounded), or a constant (a Python scalar, which
    eager converts to the comparison's dtype); a load is exact already.

    A comparison's result jumps at a rounding boundary, so it must see the values eager
    compares: `x == amax(x)` of a recomputed low-precision `x` against the stored (rounded)
    amax would otherwise match no element (amax's backward divides by that count)."""
    if expr.dtype not in LOW_PRECISION:
        return expr
    if isinstance(expr, Constant):
        return const(torch.tensor(float(expr.value)).to(expr.dtype).item(), expr.dtype)
    if isinstance(expr, Op) and expr.name == "to_dtype":
        return expr  # a cast to float16/bfloat16 rounds already
    if isinstance(expr, Op | ScalarArg):
        return Op("to_dtype", (expr,), expr.dtype)
    return expr


def _comparison(name):
    def lower(ctx, node, a, b):
        return make_pointwise(
            node,
            lambda x, y: op(name, _rounded(x), _rounded(y), dtype=torch.bool),
            a,
            b,
            compute_dtype=promote(a, b),
        )

    return lower


for _op, _name in COMPARISONS.items():
    register_lowering(_op)(_comparison(_name))

LOGICAL = {
    aten.logical_and.default: "logical_and",
    aten.logical_or.default: "logical_or",
    aten.logical_xor.default: "logical_xor",
}


def _logical(name):
    def lower(ctx, node, a, b):
        return make_pointwise(
            node, lambda x, y: op(name, x, y, dtype=torch.bool), a, b, compute_dtype=torch.bool
        )

    return lower


for _op, _name in LOGICAL.items():
    register_lowering(_op)(_logical(_name))


@register_lowering(aten.add.Tensor, aten.add.Scalar)
def add(ctx, node, a, b, alpha=1):
    return _add_sub(node, "add", a, b, alpha)


@register_lowering(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, node, a, b, alpha=1):
    return _add_sub(node, "sub", a, b, alpha)


@register_lowering(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(ctx, node, a, b, alpha=1):
    return _add_sub(node, "sub", b, a, alpha, scale_first=True)


def _add_sub(node, name, a, b, alpha, scale_first=False):
    def fn(x, y):
        if alpha != 1:
            if scale_first:
                x = op("mul", x, const(alpha, x.dtype), dtype=x.dtype)
            else:
                y = op("mul", y, const(alpha, y.dtype), dtype=y.dtype)
        if node_dtype(node) == torch.bool:
            return op("logical_or" if name == "add" else "logical_xor", x, y, dtype=torch.bool)
        return op(name, x, y, dtype=x.dtype)

    return make_pointwise(node, fn, a, b)


@register_lowering(aten.div.Tensor, aten.div.Scalar)
def div(ctx, node, a, b):
    return make_pointwise(node, lambda x, y: op("truediv", x, y, dtype=x.dtype), a, b)


@register_lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(ctx, node, a, b, *, rounding_mode=None):
    if rounding_mode is None:
        return div(ctx, node, a, b)
    dtype = node_dtype(node)
    if dtype.is_floating_point:
        name = "floor" if rounding_mode == "floor" else "trunc"
        if rounding_mode == "floor":
            return make_pointwise(node, lambda x, y: op("floordiv", x, y, dtype=dtype), a, b)
        return make_pointwise(
            node, lambda x, y: op(name, op("truediv", x, y, dtype=dtype), dtype=dtype), a, b
        )
    name = "floordiv" if rounding_mode == "floor" else "truncdiv"
    return make_pointwise(node, lambda x, y: op(name, x, y, dtype=dtype), a, b)


@register_lowering(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def pow_(ctx, node, a, b):
    dtype = node_dtype(node)
    if not isinstance(b, TensorValue) and isinstance(b, (int, float)) and dtype.is_floating_point:
        special = SCALAR_POWERS.get(float(b))
        if special is not None:
            return make_pointwise(node, lambda x: special(x, dtype), a)
    return make_pointwise(node, lambda x, y: op("pow", x, y, dtype=dtype), a, b)


def _square(x, dtype):
    return op("mul", x, x, dtype=dtype)


# Exponents eager's pow kernel special-cases (as multiplications and roots, the
# same rounding); std::pow would be a slow library call per element.
SCALAR_POWERS = {
    1.0: lambda x, d: x,
    2.0: _square,
    3.0: lambda x, d: op("mul", _square(x, d), x, dtype=d),
    0.5: lambda x, d: op("sqrt", x, dtype=d),
    -0.5: lambda x, d: op("rsqrt", x, dtype=d),
    -1.0: lambda x, d: op("reciprocal", x, dtype=d),
    -2.0: lambda x, d: op("reciprocal", _square(x, d), dtype=d),
}


@register_lowering(aten.where.self)
def where(ctx, node, cond, a, b):
    dtype = node_dtype(node)
    from inductor_codegen.lowering.common import broadcast_loader, node_size

    size = node_size(node)
    lc = broadcast_loader(cond, size, torch.bool)
    la = broadcast_loader(a, size, dtype)
    lb = broadcast_loader(b, size, dtype)
    return TensorValue(dtype, size, lambda i: op("where", lc(i), la(i), lb(i), dtype=dtype))


@register_lowering(aten.clamp.default, aten.clamp.Tensor)
def clamp(ctx, node, x, min=None, max=None):  # noqa: A002
    dtype = node_dtype(node)

    def fn(*vals):
        value = vals[0]
        rest = list(vals[1:])
        if min is not None:
            value = op("clamp_min", value, rest.pop(0), dtype=dtype)
        if max is not None:
            value = op("clamp_max", value, rest.pop(0), dtype=dtype)
        return value

    inputs = [x] + [v for v in (min, max) if v is not None]
    return make_pointwise(node, fn, *inputs)


@register_lowering(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(ctx, node, x, bound):
    return make_pointwise(node, lambda v, b: op("clamp_min", v, b, dtype=v.dtype), x, bound)


@register_lowering(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(ctx, node, x, bound):
    return make_pointwise(node, lambda v, b: op("clamp_max", v, b, dtype=v.dtype), x, bound)


@register_lowering(aten.gelu.default)
def gelu(ctx, node, x, approximate="none"):
    def fn(v):
        d = v.dtype
        half = op("mul", v, const(0.5, d), dtype=d)
        if approximate == "tanh":
            cube = op("mul", op("mul", v, v, dtype=d), v, dtype=d)
            inner = op("add", v, op("mul", cube, const(0.044715, d), dtype=d), dtype=d)
            inner = op("mul", inner, const(math.sqrt(2 / math.pi), d), dtype=d)
            return op(
                "mul", half, op("add", const(1, d), op("tanh", inner, dtype=d), dtype=d), dtype=d
            )
        scaled = op("mul", v, const(math.sqrt(0.5), d), dtype=d)
        return op("mul", half, op("add", const(1, d), op("erf", scaled, dtype=d), dtype=d), dtype=d)

    return make_pointwise(node, fn, x)


@register_lowering(aten.silu.default)
def silu(ctx, node, x):
    return make_pointwise(
        node, lambda v: op("mul", v, op("sigmoid", v, dtype=v.dtype), dtype=v.dtype), x
    )


@register_lowering(aten._to_copy.default)
def to_copy(
    ctx,
    node,
    x,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    non_blocking=False,
    memory_format=None,
):
    if device is not None and _moves(node, torch.device(device)):
        return ctx.fallback(node, (x,), dict(dtype=dtype, layout=layout, device=device))
    return make_pointwise(node, lambda v: v, x, compute_dtype=x.dtype)


def _moves(node, target: torch.device) -> bool:
    """Whether `_to_copy` moves its input to another device (a copy ATen makes): a cast
    that names the input's own device (autocast's casts do) is a pointwise kernel."""
    source = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(source, torch.Tensor):
        return target.type != "cpu"
    here = source.device
    return target.type != here.type or (target.index is not None and target.index != here.index)


@register_lowering(aten.clone.default)
def clone(ctx, node, x, *, memory_format=None):
    return make_pointwise(node, lambda v: v, x)


@register_lowering(aten.lift_fresh_copy.default)
def lift_fresh_copy(ctx, node, x):
    return make_pointwise(node, lambda v: v, x)


@register_lowering(aten.copy.default)
def copy(ctx, node, dst, src, non_blocking=False):
    return make_pointwise(node, lambda v: v, src)


@register_lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(ctx, node, x, mask, value):
    dtype = node_dtype(node)
    return make_pointwise(
        node,
        lambda v, m, f: op("where", cast(m, torch.bool), f, v, dtype=dtype),
        x,
        mask,
        value,
    )
