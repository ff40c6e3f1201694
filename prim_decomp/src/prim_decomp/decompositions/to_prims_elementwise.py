"""Core ATen elementwise ops -> ember_prims, with promotion and broadcasting."""

from __future__ import annotations

import torch

from prim_decomp.decompositions._opmath import aten
from prim_decomp.decompositions._prim_operands import (
    broadcast_shape,
    convert,
    device_of,
    elementwise,
    prim,
    to_operand,
)
from prim_decomp.decompositions._registry import TO_PRIMS
from prim_decomp.type_promotion import Promotion, elementwise_dtypes

__all__: list[str] = []

_FLOAT = Promotion.INT_TO_FLOAT
_BOOL = Promotion.ALWAYS_BOOL

# aten op name -> (prim name, promotion)
_UNARY = {
    "exp": ("exp", _FLOAT), "exp2": ("exp2", _FLOAT), "expm1": ("expm1", _FLOAT),
    "log": ("log", _FLOAT), "log1p": ("log1p", _FLOAT), "log2": ("log2", _FLOAT),
    "log10": ("log10", _FLOAT), "sqrt": ("sqrt", _FLOAT), "rsqrt": ("rsqrt", _FLOAT),
    "reciprocal": ("reciprocal", _FLOAT), "sin": ("sin", _FLOAT), "cos": ("cos", _FLOAT),
    "tan": ("tan", _FLOAT), "asin": ("asin", _FLOAT), "acos": ("acos", _FLOAT),
    "atan": ("atan", _FLOAT), "sinh": ("sinh", _FLOAT), "cosh": ("cosh", _FLOAT),
    "tanh": ("tanh", _FLOAT), "asinh": ("asinh", _FLOAT), "acosh": ("acosh", _FLOAT),
    "atanh": ("atanh", _FLOAT), "sigmoid": ("logistic", _FLOAT), "erf": ("erf", _FLOAT),
    "erfc": ("erfc", _FLOAT), "erfinv": ("erfinv", _FLOAT), "lgamma": ("lgamma", _FLOAT),
    "digamma": ("digamma", _FLOAT), "neg": ("neg", Promotion.DEFAULT),
    "sign": ("sign", Promotion.DEFAULT), "bitwise_not": ("bitwise_not", Promotion.DEFAULT),
}  # fmt: skip
_ROUNDING = {"floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "round"}
_PREDICATES = {"isnan": "isnan", "isinf": "isinf", "signbit": "signbit"}

_BINARY = {
    "mul": ("mul", Promotion.DEFAULT), "maximum": ("maximum", Promotion.DEFAULT),
    "minimum": ("minimum", Promotion.DEFAULT), "atan2": ("atan2", _FLOAT),
    "remainder": ("remainder", Promotion.DEFAULT), "fmod": ("fmod", Promotion.DEFAULT),
    "bitwise_and": ("bitwise_and", Promotion.DEFAULT),
    "bitwise_or": ("bitwise_or", Promotion.DEFAULT),
    "bitwise_xor": ("bitwise_xor", Promotion.DEFAULT),
    "hypot": ("hypot", Promotion.DEFAULT), "copysign": ("copysign", _FLOAT),
    "nextafter": ("nextafter", Promotion.DEFAULT),
    "eq": ("eq", _BOOL), "ne": ("ne", _BOOL), "lt": ("lt", _BOOL), "le": ("le", _BOOL),
    "gt": ("gt", _BOOL), "ge": ("ge", _BOOL),
}  # fmt: skip


def _overloads(name: str, kinds: tuple[str, ...]) -> list:
    """The overloads of `name` among `kinds` that take and return tensors."""
    packet = getattr(aten, name)
    found = [getattr(packet, kind) for kind in kinds if kind in packet.overloads()]
    return [op for op in found if _is_tensor_op(op)]


def _is_tensor_op(op) -> bool:
    schema = op._schema
    returns_tensor = len(schema.returns) == 1 and str(schema.returns[0].type) == "Tensor"
    takes_tensor = any(str(arg.type) == "Tensor" for arg in schema.arguments)
    return returns_tensor and takes_tensor


def _unary_rule(prim_name: str, promotion: Promotion):
    fn = getattr(prim, prim_name).default

    def rule(x):
        return elementwise(fn, x, promotion=promotion)

    rule.__name__ = rule.__qualname__ = f"{prim_name}_to_prim"
    return rule


def _binary_rule(prim_name: str, promotion: Promotion):
    fn = getattr(prim, prim_name).default

    def rule(a, b):
        return elementwise(fn, a, b, promotion=promotion)

    rule.__name__ = rule.__qualname__ = f"{prim_name}_to_prim"
    return rule


def _register_tables() -> None:
    for name, (prim_name, promotion) in _UNARY.items():
        TO_PRIMS.add(_overloads(name, ("default",)), _unary_rule(prim_name, promotion))
    for name, prim_name in _PREDICATES.items():
        TO_PRIMS.add(_overloads(name, ("default",)), _unary_rule(prim_name, _BOOL))
    for name, (prim_name, promotion) in _BINARY.items():
        kinds = ("Tensor", "Scalar", "default", "Scalar_Tensor", "Self")
        TO_PRIMS.add(_overloads(name, kinds), _binary_rule(prim_name, promotion))


_register_tables()


def _rounding_rule(prim_name: str):
    fn = getattr(prim, prim_name).default

    def rule(x):
        if not (x.dtype.is_floating_point or x.dtype.is_complex):
            return aten.clone.default(x)
        return elementwise(fn, x)

    rule.__name__ = rule.__qualname__ = f"{prim_name}_to_prim"
    return rule


for _name, _prim_name in _ROUNDING.items():
    TO_PRIMS.add(getattr(aten, _name).default, _rounding_rule(_prim_name))


@TO_PRIMS.register(aten.abs.default)
def abs_(x):
    if x.dtype == torch.bool:
        return aten.clone.default(x)
    return elementwise(prim.abs.default, x, promotion=Promotion.COMPLEX_TO_FLOAT)


@TO_PRIMS.register(aten.add.Tensor, aten.add.Scalar)
def add(a, b, *, alpha=1):
    if alpha != 1:
        b = aten.mul.Tensor(b, alpha) if isinstance(b, torch.Tensor) else b * alpha
    return elementwise(prim.add.default, a, b)


@TO_PRIMS.register(aten.sub.Tensor, aten.sub.Scalar)
def sub(a, b, *, alpha=1):
    if alpha != 1:
        b = aten.mul.Tensor(b, alpha) if isinstance(b, torch.Tensor) else b * alpha
    return elementwise(prim.sub.default, a, b)


@TO_PRIMS.register(aten.div.Tensor, aten.div.Scalar)
def div(a, b):
    return elementwise(prim.div.default, a, b, promotion=_FLOAT)


@TO_PRIMS.register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(a, b, *, rounding_mode=None):
    if rounding_mode is None:
        return div(a, b)
    computing, result = elementwise_dtypes(a, b)
    if rounding_mode == "trunc":
        quotient = elementwise(prim.div.default, a, b)
        if computing.is_floating_point:
            quotient = elementwise(prim.trunc.default, quotient)
        return convert(quotient, result)
    if not computing.is_floating_point:
        return _int_floor_divide(a, b, result)
    return convert(_float_floor_divide(a, b, computing), result)


def _float_floor_divide(a, b, computing):
    """floor(a / b) computed from fmod, exact where the rounded quotient is not."""
    a = a if not isinstance(a, torch.Tensor) else convert(a, computing)
    b = b if not isinstance(b, torch.Tensor) else convert(b, computing)
    mod = aten.fmod.Tensor(a, b) if isinstance(b, torch.Tensor) else aten.fmod.Scalar(a, b)
    quotient = aten.div.Tensor(aten.sub.Tensor(a, mod), b)
    mod_negative = aten.lt.Scalar(mod, 0)
    b_negative = aten.lt.Scalar(b, 0) if isinstance(b, torch.Tensor) else b < 0
    adjust = aten.bitwise_and.Tensor(
        aten.ne.Scalar(mod, 0), aten.ne.Tensor(mod_negative, b_negative)
    )
    quotient = aten.where.self(adjust, aten.sub.Tensor(quotient, 1), quotient)
    floored = aten.floor.default(quotient)
    rounds_up = aten.gt.Scalar(aten.sub.Tensor(quotient, floored), 0.5)
    floored = aten.where.self(rounds_up, aten.add.Tensor(floored, 1), floored)
    by_zero = aten.eq.Scalar(b, 0) if isinstance(b, torch.Tensor) else None
    if by_zero is None:
        return aten.div.Tensor(a, b) if b == 0 else floored
    return aten.where.self(by_zero, aten.div.Tensor(a, b), floored)


def _int_floor_divide(a, b, result):
    """Integer floor division: truncate, then step down where signs differ with a remainder."""
    quotient = elementwise(prim.div.default, a, b)
    remainder = elementwise(prim.fmod.default, a, b)
    negative = elementwise(prim.lt.default, remainder, 0, promotion=_BOOL)
    signs_differ = elementwise(prim.ne.default, negative, _lt0(b), promotion=_BOOL)
    nonzero = elementwise(prim.ne.default, remainder, 0, promotion=_BOOL)
    adjust = elementwise(prim.bitwise_and.default, nonzero, signs_differ)
    return convert(elementwise(prim.sub.default, quotient, convert(adjust, quotient.dtype)), result)


def _lt0(value):
    if isinstance(value, torch.Tensor):
        return elementwise(prim.lt.default, value, 0, promotion=_BOOL)
    return value < 0


@TO_PRIMS.register(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def pow_(a, b):
    if isinstance(b, (int, float)) and not isinstance(b, bool) and b == 2:
        return aten.mul.Tensor(a, a)
    return elementwise(prim.pow.default, a, b)


@TO_PRIMS.register(aten.logical_not.default)
def logical_not(x):
    return elementwise(prim.eq.default, x, False if x.dtype == torch.bool else 0, promotion=_BOOL)


def _as_bool(x):
    return x if x.dtype == torch.bool else elementwise(prim.ne.default, x, 0, promotion=_BOOL)


@TO_PRIMS.register(aten.logical_and.default)
def logical_and(a, b):
    return elementwise(prim.bitwise_and.default, _as_bool(a), _as_bool(b))


@TO_PRIMS.register(aten.logical_or.default)
def logical_or(a, b):
    return elementwise(prim.bitwise_or.default, _as_bool(a), _as_bool(b))


@TO_PRIMS.register(aten.logical_xor.default)
def logical_xor(a, b):
    return elementwise(prim.bitwise_xor.default, _as_bool(a), _as_bool(b))


@TO_PRIMS.register(aten.relu.default)
def relu(x):
    return elementwise(prim.maximum.default, x, 0)


@TO_PRIMS.register(aten.where.self)
def where(condition, a, b):
    _, result = elementwise_dtypes(a, b)
    shape = broadcast_shape(condition, a, b)
    device = device_of(condition, a, b)
    pred = to_operand(condition, torch.bool, shape, device)
    a, b = (to_operand(v, result, shape, device) for v in (a, b))
    return prim.where.default(pred, a, b)


@TO_PRIMS.register(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, min=None, max=None):
    operands = [x] + [v for v in (min, max) if v is not None]
    _, result = elementwise_dtypes(*operands)
    out = convert(x, result)
    if min is not None:
        out = _clamp_side(prim.maximum.default, out, min, result)
    if max is not None:
        out = _clamp_side(prim.minimum.default, out, max, result)
    return out


def _clamp_side(fn, x, bound, dtype):
    """One side of clamp; NaN in `x` stays NaN (maximum/minimum propagate it)."""
    return convert(elementwise(fn, x, bound), dtype)
