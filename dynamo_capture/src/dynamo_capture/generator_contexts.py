"""`contextlib.contextmanager` generators used in a `with` inside captured code.

    @contextlib.contextmanager
    def scaled(factor):
        with torch.no_grad():        # runs at __enter__, stays open over the body
            yield factor
        LOG.append("left")            # runs at __exit__

    with scaled(2) as k:
        y = x * k

Calling the decorated function makes a `ContextValue` of kind "generator" that
holds the generator's Translator, not yet run. `__enter__` runs it up to its
first `yield` (the yielded value is what `as` binds) and suspends it there;
`__exit__` resumes it to its end. The generator's own `with` blocks stay open
while it is suspended, so the body runs in its grad mode, as eagerly. A
generator that yields twice, or not at all, is Unsupported (eagerly a
RuntimeError). An exception leaving the body is thrown into the generator at its
`yield`, as `generator.throw` does: a generator that catches it suppresses it.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import ExceptionRaised, Unsupported
from dynamo_capture.sources import CellContentsSource
from dynamo_capture.values import ContextValue, FunctionValue, PythonValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "CONTEXTMANAGER_HELPER",
    "construct_generator_context",
    "enter_generator",
    "exit_generator",
    "generator_context",
]


@contextlib.contextmanager
def _sample() -> Any:
    yield


# the code of the function `contextlib.contextmanager` returns (shared by all of them)
CONTEXTMANAGER_HELPER: types.CodeType = _sample.__code__


def _sdpa_kernel_of(backends: Any, set_priority: bool = False) -> Any:
    """torch.nn.attention.sdpa_kernel, its list of backends kept as a tuple (hashable)."""
    if isinstance(backends, tuple):
        backends = list(backends)
    return torch.nn.attention.sdpa_kernel(backends, set_priority)


# torch's contextmanager contexts that a fresh copy re-enters (a graph break inside
# their block resumes in it, as torch.compile's does): generator function -> factory
REENTERABLE: dict[Any, Any] = {
    torch.autograd.graph.disable_saved_tensors_hooks.__wrapped__: (
        torch.autograd.graph.disable_saved_tensors_hooks
    ),
    torch.nn.attention.sdpa_kernel.__wrapped__: _sdpa_kernel_of,
}


def generator_context(
    tx: Translator, helper: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`cm(*args)` for `cm` made by contextlib.contextmanager: a lazily run generator."""
    function = helper.obj
    if function.__code__.co_freevars != ("func",) or not function.__closure__:
        raise Unsupported("a contextlib.contextmanager function of an unknown form")
    source = helper.source
    cell_source = CellContentsSource(source, 0, "func") if source is not None else None
    wrapped = tx.ctx.wrap(function.__closure__[0].cell_contents, cell_source)
    return _lazy_generator(tx, wrapped, args, kwargs, cell_source)


def construct_generator_context(
    tx: Translator, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`_GeneratorContextManager(func, args, kwds)` (a contextmanager used as a decorator
    makes a fresh one per call): the same lazily run generator."""
    from dynamo_capture.operations import dict_items, sequence_items

    if len(args) != 3 or kwargs:
        raise Unsupported("contextlib._GeneratorContextManager with unknown arguments")
    func, call_args, call_kwargs = args
    keywords = {str(k): v for k, v in dict_items(tx, call_kwargs).items()}
    return _lazy_generator(tx, func, sequence_items(tx, call_args), keywords, func.source)


def _lazy_generator(
    tx: Translator, func_value: Value, args: list[Value], kwargs: dict[str, Value], source: Any
) -> Value:
    from dynamo_capture.calls import child_translator

    if isinstance(func_value, FunctionValue):  # a generator function made in the frame
        func: Any = func_value
        code = func_value.code
    else:
        func = func_value.obj if isinstance(func_value, PythonValue) else None
        code = getattr(func, "__code__", None)
    if not isinstance(func, types.FunctionType | FunctionValue) or not (
        code.co_flags & inspect.CO_GENERATOR
    ):
        raise Unsupported("contextlib.contextmanager around something other than a generator")
    child = child_translator(tx, func, args, kwargs, source)
    child.stop_at_yield = True
    return ContextValue("generator", _rebuild_args(func, args, kwargs), saved=child)


def _rebuild_args(func: Any, args: list[Value], kwargs: dict[str, Value]) -> tuple[Any, ...]:
    """(factory, constant arguments) that make a fresh copy of a torch context whose
    block the parts of a split frame may enter again (REENTERABLE); () for others."""
    from dynamo_capture.operations import NotConstant

    factory = REENTERABLE.get(func) if isinstance(func, types.FunctionType) else None
    if factory is None or kwargs:
        return ()
    try:
        return (factory, tuple(_constant_argument(arg) for arg in args))
    except NotConstant:
        return ()


def _enum_member(obj: Any) -> bool:
    """A member of a Python enum or of a C++ (pybind11) enum such as SDPBackend."""
    if isinstance(obj, enum.Enum):
        return True
    members = getattr(type(obj), "__members__", None)
    return isinstance(members, dict) and any(obj is member for member in members.values())


def _constant_argument(value: Value) -> Any:
    """A constant, or a list or tuple of constants (sdpa_kernel's list of backends) as a
    tuple: the arguments are part of a resume part's key."""
    from dynamo_capture.operations import as_constant
    from dynamo_capture.values import ListValue, TupleValue

    if isinstance(value, ListValue) and value.cls is list:
        return tuple(_constant_argument(item) for item in value.items)
    if isinstance(value, TupleValue) and value.cls is tuple:
        return tuple(_constant_argument(item) for item in value.items)
    if isinstance(value, PythonValue) and _enum_member(value.obj):
        return value.obj  # an enum member (SDPBackend.MATH): a singleton
    return as_constant(value)


def enter_generator(tx: Translator, context: ContextValue) -> Value:
    """`__enter__`: run the generator to its first yield; the yielded value."""
    child = context.saved
    if child.done or child.yielded:
        raise Unsupported("entering a contextlib.contextmanager context a second time")
    child.run_until_yield()
    if not child.suspended:
        raise Unsupported("a contextlib.contextmanager generator that did not yield")
    return child.yielded[-1]


def exit_generator(tx: Translator, context: ContextValue, exception: Value | None = None) -> Value:
    """`__exit__`: run the generator on to its end, the body's exception (if any) thrown
    in at its yield. True when the generator swallowed that exception."""
    child = context.saved
    if child.done or not child.suspended:
        raise Unsupported("leaving a contextlib.contextmanager context not entered")
    if exception is not None:
        assert isinstance(exception, PythonValue)
        child.pending = ExceptionRaised(exception)
        try:
            child.run_until_yield()
        except ExceptionRaised as raised:
            if raised.value.obj is exception.obj:
                return PythonValue(False)  # not swallowed: the `with` re-raises it
            raise
    else:
        child.run_until_yield()
    if child.suspended:
        raise Unsupported("a contextlib.contextmanager generator that yielded twice")
    return PythonValue(exception is not None)
