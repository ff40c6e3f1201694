"""Which user modules captured code may make while capturing (`Add(3)(x)` in a frame).

torch.compile traces a user module's `__init__` and calls the module in the graph.
Capture instead makes the module for real, once, and traces its forward where it is
called (as it does for torch.nn's own parameterless modules). That is sound only where
making it has no effect beyond the new object and reads nothing but its arguments, so
the `__init__` of each class between the module's class and nn.Module is read, not run:

    def __init__(self, k, scale=2):
        super().__init__()          # first, without arguments
        self.k = k                  # attributes from arguments and constants,
        self.s = self.k * scale     # with arithmetic and tuples of them

Anything else (another call, a global, a read of an attribute not set above, a
keyword, a loop) and the class is not plain: capture breaks at the call making it.
The arguments must be plain constants (numbers, strings, None, tuples of them).
"""

from __future__ import annotations

import dis
import inspect
import types
from typing import Any

import torch

__all__ = ["plain_constant", "plainly_made_module"]

_PLAIN_OPS = frozenset(
    {
        "RESUME", "NOP", "CACHE", "COPY_FREE_VARS", "LOAD_FAST", "STORE_FAST", "LOAD_CONST",
        "STORE_ATTR", "LOAD_ATTR", "BINARY_OP", "BUILD_TUPLE", "UNARY_NEGATIVE", "POP_TOP",
        "RETURN_VALUE", "RETURN_CONST",
    }
)  # fmt: skip
# the instructions of `super().__init__()` (3.11): the only calls allowed
_SUPER_INIT_OPS = frozenset({"LOAD_GLOBAL", "PRECALL", "CALL", "LOAD_METHOD", "PUSH_NULL"})
# methods whose definition on a class changes how making or setting attributes goes
_SPECIAL_METHODS = (
    "__new__",
    "__setattr__",
    "__getattr__",
    "__getattribute__",
    "__init_subclass__",
)


_UNPLAIN_FLAGS = (
    inspect.CO_VARARGS
    | inspect.CO_VARKEYWORDS
    | inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ITERABLE_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
)


def plain_constant(value: Any) -> bool:
    """A number, string, None, or a tuple of them."""
    if isinstance(value, tuple):
        return all(plain_constant(item) for item in value)
    return type(value) in (int, float, bool, str, type(None))


def plainly_made_module(cls: type) -> bool:
    """Whether making a `cls` (a user nn.Module subclass) only sets attributes of the new
    module from its arguments, as the module docstring describes."""
    if type(cls) is not type or not issubclass(cls, torch.nn.Module):
        return False
    for klass in cls.__mro__:
        if klass is torch.nn.Module:
            return True
        if not issubclass(klass, torch.nn.Module) or klass.__module__.startswith("torch."):
            return False  # a mixin, or a torch module class making state of its own
        if any(name in vars(klass) for name in _SPECIAL_METHODS):
            return False
        init = vars(klass).get("__init__")
        if init is not None and not (isinstance(init, types.FunctionType) and _plain_init(init)):
            return False
    return False


def _plain_init(init: types.FunctionType) -> bool:
    code = init.__code__
    if code.co_flags & _UNPLAIN_FLAGS:
        return False  # *args, **kwargs, a generator or coroutine
    defaults = (init.__defaults__ or ()) + tuple((init.__kwdefaults__ or {}).values())
    if not all(plain_constant(value) for value in defaults):
        return False
    instructions = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "NOP")]
    start = next((n for n, i in enumerate(instructions) if i.opname != "COPY_FREE_VARS"), 0)
    if instructions[start].opname == "RESUME":
        start += 1
    end = next((n for n, i in enumerate(instructions) if i.opname == "POP_TOP"), None)
    if end is None:
        return False
    head, body = instructions[start:end], instructions[end + 1 :]
    if not _super_init_call(head):
        return False
    stored = {i.argval for i in body if i.opname == "STORE_ATTR"}
    for instruction in body:
        if instruction.opname not in _PLAIN_OPS:
            return False
        if instruction.opname in ("LOAD_ATTR", "STORE_ATTR") and not _on_self(
            body, instruction, code
        ):
            return False
        if instruction.opname == "LOAD_ATTR" and instruction.argval not in stored:
            return False
    return True


def _super_init_call(head: list[dis.Instruction]) -> bool:
    """`super().__init__()`: super loaded as a global, called, its __init__ called, each
    without arguments."""
    names = [i.opname for i in head]
    if not set(names) <= _SUPER_INIT_OPS or names.count("CALL") != 2:
        return False
    if any(i.opname in ("PRECALL", "CALL") and i.arg != 0 for i in head):
        return False
    globals_read = [i.argval for i in head if i.opname == "LOAD_GLOBAL"]
    methods = [i.argval for i in head if i.opname == "LOAD_METHOD"]
    return globals_read == ["super"] and methods == ["__init__"] and names[0] == "LOAD_GLOBAL"


def _on_self(body: list[dis.Instruction], instruction: dis.Instruction, code: Any) -> bool:
    """The attribute instruction's object is `self` (loaded just before it)."""
    at = body.index(instruction)
    before = body[at - 1] if at else None
    self_name = code.co_varnames[0] if code.co_argcount else None
    return (
        before is not None
        and before.opname == "LOAD_FAST"
        and before.argval == self_name
        and _self_never_rebound(body, self_name)
    )


def _self_never_rebound(body: list[dis.Instruction], self_name: str | None) -> bool:
    return not any(i.opname == "STORE_FAST" and i.argval == self_name for i in body)
