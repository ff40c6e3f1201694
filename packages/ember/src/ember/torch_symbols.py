"""Graphs from torch.compile with symbolic sizes, made ready for ember's stages.

Under torch's compiler, with an ember backend as its backend and dynamic sizes
(`dynamic=True`, automatic dynamic after a size change, `mark_dynamic`), a
backend receives torch's own symbols: SymInt example inputs over torch's shape
environment, and placeholders whose `meta["example_value"]` are torch's fakes
with SymInt sizes. ember's stages reason about sizes through `guards.ShapeEnv`
only, and torch reuses the compiled graph for every size its symbols may take,
so a graph compiled for the example's sizes would give results shaped for
another call. Two ways out, in order:

1. `adopt_torch_symbols`: one `guards.ShapeEnv` symbol per torch symbol (same
   hint; ranges from 2, which torch's own guards ensure), placeholders' `val`s
   rebuilt as guards fakes and SymInts over it. aot_autograd then compiles once
   for all sizes, checking at each call what its trace assumed (a call that
   breaks an assumption runs a graph compiled for its own sizes).
2. `SpecializingCall`: where a value cannot be carried over (a size that is an
   expression, a symbol without a hint, a range reaching below 2), a graph is
   compiled per distinct input signature (sizes, strides, dtypes, int values),
   so every call runs a graph compiled for its own sizes.

This module only reads torch's objects (`SymInt.node.expr`, `.hint`,
`shape_env.var_to_range`); it imports nothing of torch's compiler stack.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from torch.utils._mode_utils import no_dispatch

import guards

__all__ = ["SpecializingCall", "adopt_torch_symbols", "has_torch_symbols"]

Compile = Callable[[torch.fx.GraphModule, list], Callable[..., Any]]


class _Refused(Exception):
    """A value of torch's that cannot be carried over to guards' ShapeEnv."""


def _foreign(value: Any) -> bool:
    """A SymInt (SymFloat, SymBool) of torch's own shape environment, not guards'."""
    return isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool) and not isinstance(
        value.node, guards.SymNode
    )


def _placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return list(gm.graph.find_nodes(op="placeholder"))


def _tensor_sizes(value: Any) -> tuple[Any, ...]:
    if not isinstance(value, torch.Tensor):
        return ()
    return (*value.shape, *value.stride(), value.storage_offset())


def has_torch_symbols(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    """Whether the graph's inputs carry sizes symbolic in torch's shape environment."""
    values = list(example_inputs)
    values += [node.meta.get("example_value") for node in _placeholders(gm)]
    for value in values:
        if _foreign(value) or any(_foreign(size) for size in _tensor_sizes(value)):
            return True
    return False


class _Translator:
    """torch's sympy expressions over its symbols -> guards' expressions over new symbols."""

    def __init__(self) -> None:
        self.shape_env = guards.ShapeEnv(duck_shape=False)
        self.mode = guards.FakeTensorMode(shape_env=self.shape_env)
        self._symbols: dict[sympy.Symbol, sympy.Expr] = {}

    def expression(self, value: Any, hint: int | None, source: guards.Source) -> sympy.Expr:
        """guards' expression for a size: an int, or a SymInt of torch's."""
        if not isinstance(value, torch.SymInt):
            return sympy.Integer(int(value))
        node = value.node
        expr = node.expr
        if expr.is_Integer:
            return sympy.Integer(int(expr))
        if expr.is_Symbol:
            known = self._symbols.get(expr)
            if known is not None:
                return known
            hint = _hint(value, hint)
            _check_range(node, expr)
            created = self.shape_env.create_symbol(hint, source, duck=False)
            self._symbols[expr] = created
            return created
        missing = [s for s in expr.free_symbols if s not in self._symbols]
        if missing:
            raise _Refused(f"the size {expr} uses symbols no input provides ({missing})")
        return expr.xreplace(self._symbols)

    def symint(self, expr: sympy.Expr, hint: int) -> Any:
        return self.shape_env.create_symint(expr, hint)

    def fake(self, name: str, fake: torch.Tensor, real: Any) -> torch.Tensor:
        """guards' fake for a tensor input (torch's fake `fake`, the real example `real`)."""
        source = guards.LocalSource(name)
        real = real if _is_real(real) else None  # a fake's sizes may be torch's SymInts
        real_sizes = tuple(real.shape) if isinstance(real, torch.Tensor) else (None,) * fake.dim()
        real_strides = (
            tuple(real.stride()) if isinstance(real, torch.Tensor) else (None,) * fake.dim()
        )
        sizes, strides = [], []
        for dim, (size, hint) in enumerate(zip(fake.shape, real_sizes, strict=True)):
            prop = guards.TensorPropertySource(source, "size", dim)
            expr = self.expression(size, hint, prop)
            sizes.append(self.symint(expr, _hint(size, hint)))
        for dim, (stride, hint) in enumerate(zip(fake.stride(), real_strides, strict=True)):
            prop = guards.TensorPropertySource(source, "stride", dim)
            expr = self.expression(stride, hint, prop)
            strides.append(self.symint(expr, _hint(stride, hint)))
        real_offset = real.storage_offset() if isinstance(real, torch.Tensor) else None
        offset_source = guards.TensorPropertySource(source, "storage_offset")
        offset_expr = self.expression(fake.storage_offset(), real_offset, offset_source)
        offset = self.symint(offset_expr, _hint(fake.storage_offset(), real_offset))
        with no_dispatch(), torch.no_grad():
            meta = torch.empty_strided(sizes, strides, dtype=fake.dtype, device="meta")
            if not (isinstance(offset, int) and offset == 0):
                meta = meta.as_strided(sizes, strides, offset)
        with torch.inference_mode(fake.is_inference()):
            return guards.FakeTensor(
                self.mode,
                meta,
                fake.device,
                requires_grad=fake.requires_grad,
                is_parameter=isinstance(fake, torch.nn.Parameter),
            )


def _hint(value: Any, fallback: int | None) -> int:
    if not isinstance(value, torch.SymInt):
        return int(value)
    hint = getattr(value.node, "hint", None)
    if hint is None:
        hint = fallback
    if hint is None:
        raise _Refused(f"the size {value.node.expr} has no example value (a data-dependent size)")
    return int(hint)


def _check_range(node: Any, symbol: sympy.Symbol) -> None:
    """guards' symbols range from 2: torch's must not reach lower (its guards ensure it)."""
    ranges = getattr(getattr(node, "shape_env", None), "var_to_range", None)
    value_range = ranges.get(symbol) if isinstance(ranges, dict) else None
    lower = getattr(value_range, "lower", None)
    try:
        if lower is None or int(lower) < 2:
            raise _Refused(f"the size {symbol} may be below 2 (range {value_range})")
    except TypeError as error:
        raise _Refused(f"the size {symbol} has no known lower bound") from error


def adopt_torch_symbols(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> list[Any]:
    """The example inputs over a new guards ShapeEnv; sets each placeholder's `val` to match.

    Raises `ValueError` where a value cannot be carried over (see the module docstring);
    nothing is changed then.
    """
    placeholders = _placeholders(gm)
    if len(placeholders) != len(example_inputs):
        raise ValueError(
            f"{len(placeholders)} placeholders but {len(example_inputs)} example inputs"
        )
    translator = _Translator()
    values: list[Any] = []
    try:
        for node, example in zip(placeholders, example_inputs, strict=True):
            torch_value = node.meta.get("example_value", example)
            values.append(_adopt(translator, node.name, torch_value, example))
    except _Refused as error:
        raise ValueError(str(error)) from error
    for node, value in zip(placeholders, values, strict=True):
        node.meta["val"] = value
    return values


def _adopt(translator: _Translator, name: str, torch_value: Any, example: Any) -> Any:
    if isinstance(torch_value, torch.SymInt) or isinstance(example, torch.SymInt):
        value = torch_value if isinstance(torch_value, torch.SymInt) else example
        hint = example if isinstance(example, int) else None
        expr = translator.expression(value, hint, guards.LocalSource(name))
        return translator.symint(expr, _hint(value, hint))
    if _foreign(torch_value) or _foreign(example):
        raise _Refused(f"input {name!r} is a symbolic float or bool")
    if isinstance(torch_value, torch.Tensor):
        static = not any(_foreign(size) for size in _tensor_sizes(torch_value))
        if static and _is_real(example) and example.shape == torch_value.shape:
            return translator.mode.from_real(example)  # keeps aliasing between inputs
        return translator.fake(name, torch_value, example)
    return example


def _is_real(value: Any) -> bool:
    """A tensor with data: not a fake of guards' or of torch's (those are subclasses)."""
    return type(value) in (torch.Tensor, torch.nn.Parameter) and value.device.type != "meta"


class SpecializingCall:
    """Compiles the graph per distinct input signature, and runs the one for each call.

    The signature holds each tensor's sizes, strides, dtype, device and
    requires_grad, and each other input's type and value, so no call ever runs a
    graph compiled for other sizes.
    """

    def __init__(self, gm: torch.fx.GraphModule, compile_fn: Compile) -> None:
        self.gm = gm
        self.compile_fn = compile_fn
        self.compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def __call__(self, *args: Any) -> Any:
        key = tuple(_signature(arg) for arg in args)
        compiled = self.compiled.get(key)
        if compiled is None:
            for node in _placeholders(self.gm):
                node.meta.pop("val", None)  # the call's own values decide every size
            compiled = self.compiled[key] = self.compile_fn(self.gm, list(args))
        return compiled(*args)


def _signature(arg: Any) -> Any:
    if isinstance(arg, torch.Tensor):
        return (
            tuple(arg.shape),
            tuple(arg.stride()),
            arg.storage_offset(),
            arg.dtype,
            arg.device,
            arg.requires_grad,
        )
    try:
        hash(arg)
    except TypeError:
        return (type(arg), id(arg))
    return (type(arg), arg)
