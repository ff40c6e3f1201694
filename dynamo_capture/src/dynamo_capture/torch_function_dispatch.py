"""`__torch_function__` overrides run while capturing, as eager runs them.

Eager hands a torch function, Tensor method, operator or property read to an override
before computing it: first to the innermost torch function mode on the stack (popped
while its `__torch_function__` runs), else to each tensor subclass among the arguments
that defines its own `__torch_function__` (a subclass before its bases, each type
once), until one does not return NotImplemented. Capture does the same with the
user's Python: the mode's (or the subclass's classmethod) `__torch_function__` is
inlined, given eager's `func` (`torch.add`, `Tensor.add`, `Tensor.__add__`,
`Tensor.shape.__get__`), the overriding types, the arguments and keyword arguments.
What the override computes is recorded like any other code; `super().__torch_function__`
(torch's default handling) is inlined as `default_torch_function` below.

Graph inputs of such a subclass are handed to the graph as plain tensors (`as_subclass
(torch.Tensor)` in the entry code) and the graph's operations give plain tensors, as
the operations inside an override do (it runs them under DisableTorchFunctionSubclass);
the compiled code converts outputs back to the subclass eager gives. The entry is
guarded on each input's exact type, on the override itself (an attribute guard on the
class) and on the torch function state and mode stack at entry.

Where capture cannot follow eager it breaks the graph (Unsupported): a mode entered
outside the frame while an override runs inside it (the graph's operations would meet
that mode again), a function an override does not see in eager or one capture does not
know whether eager hands to the mode, an override returning NotImplemented for all.
"""

from __future__ import annotations

import functools
import inspect
import operator
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.values import (
    DictValue,
    ListValue,
    ObjectValue,
    PythonValue,
    TensorValue,
    TupleValue,
    Value,
)
from guards.tensor_guards import has_own_torch_function

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "call_with_overrides",
    "default_torch_function",
    "dispatch_torch_function",
    "has_own_torch_function",
    "is_mode_class",
    "operator_override",
    "overrides_apply",
    "returns_unwrapped",
]


def is_mode_class(cls: Any) -> bool:
    """A TorchFunctionMode subclass keeping the base's `__enter__` and `__exit__`."""
    return (
        isinstance(cls, type)
        and issubclass(cls, torch.overrides.TorchFunctionMode)
        and cls.__enter__ is torch.overrides.TorchFunctionMode.__enter__
        and cls.__exit__ is torch.overrides.TorchFunctionMode.__exit__
    )


@functools.cache
def _overridable() -> frozenset[Any]:
    """The functions eager hands to overrides (torch.overrides' own table)."""
    table = torch.overrides.get_overridable_functions()
    return frozenset(f for functions in table.values() for f in functions)


def _overriding_kinds(args: list[Value], kwargs: dict[str, Value]) -> list[type]:
    """The subclasses with their own override among the arguments (and the items of
    list or tuple arguments), in eager's order: each once, a subclass before its bases."""
    kinds: list[type] = []

    def visit(value: Value, top: bool) -> None:
        if isinstance(value, TensorValue) and has_own_torch_function(value.python_type):
            kind = value.python_type
            if kind in kinds:
                return
            later_base = next((i for i, k in enumerate(kinds) if issubclass(kind, k)), None)
            if later_base is None:
                kinds.append(kind)
            else:
                kinds.insert(later_base, kind)
        elif top and isinstance(value, TupleValue | ListValue):
            for item in value.items:
                visit(item, False)

    for value in [*args, *kwargs.values()]:
        visit(value, True)
    return kinds


def _subclasses_on(tx: Translator) -> bool:
    return tx.ctx.torch_function_disabled == 0 and torch._C._is_torch_function_enabled()


def _modes_on(tx: Translator) -> list[Value]:
    """The modes entered in the frame that are in force now (innermost last)."""
    if tx.ctx.torch_function_all_disabled or torch._C._is_torch_function_all_disabled():
        return []
    return tx.ctx.function_modes  # ObjectValues


def overrides_apply(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> bool:
    """Whether eager would hand a call on these arguments to an override (a mode entered
    in the frame, or a subclass argument's own `__torch_function__`)."""
    if _modes_on(tx):
        return True
    return _subclasses_on(tx) and bool(_overriding_kinds(args, kwargs))


def call_with_overrides(
    tx: Translator, func: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """A call of torch function or Tensor method `func` where an override may apply:
    a Python one (F.relu, Tensor.split) is inlined, so that its own
    `has_torch_function` check hands it on with the arguments eager hands on; a C one
    is dispatched here. None where no override applies."""
    if not overrides_apply(tx, args, kwargs):
        return None
    if inspect.isfunction(func) and not _is_operator_wrapper(func):
        from dynamo_capture.calls import inline_function

        return inline_function(tx, func, args, kwargs, None)
    return dispatch_torch_function(tx, func, args, kwargs)


def _is_operator_wrapper(func: Any) -> bool:
    """Tensor.__rsub__ and its kind: Python wrappers whose override gets the wrapper."""
    return any(func is entry[0] for entry in _OPERATOR_FUNCS.values())


def dispatch_torch_function(
    tx: Translator,
    func: Any,
    args: list[Value],
    kwargs: dict[str, Value],
    *,
    kwargs_as_dict: bool = False,
) -> Value | None:
    """`func(*args, **kwargs)` handed to the override eager hands it to, inlined; None
    where no override applies (the caller records the call itself).

    The override gets `kwargs=None` for a C function called without keywords, as in
    eager; a dict where `kwargs_as_dict` (`handle_torch_function`) or func is Python."""
    modes = _modes_on(tx)
    kinds = _overriding_kinds(args, kwargs) if _subclasses_on(tx) else []
    if not modes and not kinds:
        return None
    name = getattr(func, "__qualname__", None) or repr(func)
    if torch._C._len_torch_function_stack() > 0:
        # NOTE: the graph's operations run under the modes entered outside the frame:
        # they would see what the override computes, where eager shows them the call
        raise Unsupported(
            f"{name} under a torch function mode entered outside the frame, handed to an "
            "override inside it"
        )
    try:
        overridable = func in _overridable()
    except TypeError:  # an unhashable callable
        overridable = False
    if not overridable:
        if modes:
            raise Unsupported(f"{name} under a torch function mode entered in the frame")
        return None  # eager does not hand it to the subclass's override either
    from dynamo_capture.calls import call

    types_value = TupleValue([PythonValue(kind) for kind in kinds])
    as_dict = kwargs or kwargs_as_dict or inspect.isfunction(func)
    handler_args = [
        PythonValue(func),
        types_value,
        TupleValue(list(args)),
        DictValue(dict(kwargs)) if as_dict else PythonValue(None),
    ]
    if modes:
        mode = modes.pop()  # eager pops the mode while its override runs
        try:
            handler = _mode_handler(tx, mode)
            result = call(tx, PythonValue(handler), [mode, *handler_args], {})
        finally:
            modes.append(mode)
        if _is_not_implemented(result):
            raise Unsupported(f"a torch function mode returned NotImplemented for {name}")
        return result
    for kind in kinds:
        raw = inspect.getattr_static(kind, "__torch_function__")
        if isinstance(raw, classmethod):  # read from the class, it binds a method each time
            tx.ctx.guards.class_attribute(kind, "__torch_function__", raw.__func__, bound=True)
        else:
            tx.ctx.guards.class_attribute(kind, "__torch_function__", raw)
        result = call(tx, PythonValue(kind.__torch_function__), handler_args, {})
        if not _is_not_implemented(result):
            return result
    raise Unsupported(f"every __torch_function__ override returned NotImplemented for {name}")


def operator_override(tx: Translator, op: Any, operands: list[Value]) -> Value | None:
    """`operands[0] <op> operands[1]` (or `<op> operands[0]`) handed to an override as
    eager hands it (`x * 2` as `Tensor.mul(x, 2)`, `1 - x` as `Tensor.__rsub__(x, 1)`,
    `1 < x` as `Tensor.gt(x, 1)`: see _record_operator); None where none applies."""
    if not overrides_apply(tx, operands, {}):
        return None
    entry = _OPERATOR_FUNCS.get((op, isinstance(operands[0], TensorValue)))
    if entry is None:
        name = getattr(op, "__name__", op)
        raise Unsupported(f"operator {name} on a tensor with a __torch_function__ override")
    func, swapped = entry
    return dispatch_torch_function(tx, func, operands[::-1] if swapped else operands, {})


class _Handed(Exception):  # noqa: N818 - not an error: what an override was handed
    def __init__(self, func: Any, handed_args: tuple[Any, ...]) -> None:
        super().__init__()
        self.func, self.handed_args = func, handed_args


class _Recorder(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        raise _Handed(func, args)


_UNARY = (operator.neg, operator.pos, operator.invert, operator.abs)
_BINARY = (
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
    operator.mod, operator.pow, operator.matmul, operator.and_, operator.or_, operator.xor,
    operator.lshift, operator.rshift, operator.iadd, operator.isub, operator.imul,
    operator.itruediv, operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul,
    operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift,
    operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
)  # fmt: skip


def _record_operator(op: Any, tensor_first: bool, other: Any = 1) -> tuple[Any, bool] | None:
    """What eager hands an override for `op` with a tensor first (or second, the other
    operand a number): the func, and whether the operands come swapped."""
    recorder = torch.zeros(2, dtype=torch.int64).as_subclass(_Recorder)
    if op in _UNARY:
        operands: tuple[Any, ...] = (recorder,)
    else:
        operands = (recorder, other) if tensor_first else (other, recorder)
    try:
        op(*operands)
    except _Handed as handed:
        return handed.func, handed.handed_args[0] is not operands[0]
    except Exception:  # noqa: BLE001 - Python refuses the operands: no entry
        return None
    return None


def _record_operators() -> dict[tuple[Any, bool], tuple[Any, bool]]:
    # NOTE: read from torch itself (once, when capture is imported), so the table is the
    # installed version's: `x * 2` hands Tensor.mul, `x // 2` Tensor.__floordiv__
    table = {}
    for op in (*_UNARY, *_BINARY):
        for tensor_first in (True, False) if op not in _UNARY else (True,):
            entry = _record_operator(op, tensor_first)
            if entry is None and tensor_first:  # `x @ y`: a tensor on both sides
                entry = _record_operator(op, tensor_first, torch.zeros(2, dtype=torch.int64))
            if entry is not None:
                table[(op, tensor_first)] = entry
    return table


_OPERATOR_FUNCS = _record_operators()


def _mode_handler(tx: Translator, mode: ObjectValue) -> Any:
    """The mode's `__torch_function__` (a mode made in the frame: calls.py enters only
    those), guarded on its class."""
    cls = mode.cls
    handler = inspect.getattr_static(cls, "__torch_function__", None)
    if not inspect.isfunction(handler):
        raise Unsupported(f"torch function mode {cls.__qualname__} without a Python override")
    tx.ctx.guards.class_attribute(cls, "__torch_function__", handler)
    return handler


def _is_not_implemented(value: Value) -> bool:
    return isinstance(value, PythonValue) and value.obj is NotImplemented


_NOWRAP = frozenset(torch.overrides.get_default_nowrap_functions())


def returns_unwrapped(func: Any) -> bool:
    """Whether torch's default handling gives `func`'s result as it is (a `.grad`
    read, say). Capture calls it on the constant `func` itself (no guard on the table)."""
    return func in _NOWRAP


def _convert(ret: Any, cls: type) -> Any:
    """torch._tensor._convert: results as `cls` (tuples and lists item by item)."""
    if cls is torch.Tensor:
        return ret
    if isinstance(ret, torch.Tensor) and not isinstance(ret, cls):
        ret = ret.as_subclass(cls)
    if isinstance(ret, (tuple, list)):
        ret = type(ret)(_convert(r, cls) for r in ret)
    return ret


def default_torch_function(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN201
    """torch.Tensor.__torch_function__ (torch's default handling), inlined for
    `super().__torch_function__(...)`: the call with subclass handling off, its tensor
    results converted to `cls`."""
    if kwargs is None:
        kwargs = {}
    if not all(issubclass(cls, t) for t in types):
        return NotImplemented
    with torch._C.DisableTorchFunctionSubclass():
        ret = func(*args, **kwargs)
        if returns_unwrapped(func):
            return ret
        return _convert(ret, cls)
