"""Instances of user subclasses of int, float, complex, str and bytes made in the frame.

    class Name(str):
        def __new__(cls, text):
            return super().__new__(cls, text.lower())   # traced: str.__new__ folded
        def shout(self):
            return self.upper() + "!"                    # traced: str.upper folded

    Name("ABC").shout()   # "abc!" at capture time, no graph node

A class qualifies when it only adds methods, properties and class attributes to its
builtin base: no dunder of its own besides `__new__` (a Python function, traced), so
every operator, comparison, hash, format and conversion on an instance is the base's C
code, pure on the instance's value. Such an instance made from constants is itself a
constant while capturing (`as_constant`); a graph operation is given its plain value
(`x * Idx(3)` records `x * 6`, as torch.compile does), and one leaving the frame is made
again each call (`base.__new__(cls, value)`), never handed out as one shared object.
Its attributes cannot be written (it would be a capture-time object written once).
An int or float subclass instance from outside the frame (an argument, a local kept
across a graph break) folds too, guarded on its type and on `obj.real` (its value).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynamo_capture.errors import Unsupported
from dynamo_capture.values import PythonValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "BASE_NEWS",
    "constant_scalar",
    "construct_scalar",
    "guarded_by_value",
    "made_scalar",
    "plain_value",
    "scalar_base",
]

_BASES = (int, float, complex, str, bytes)
# the class attributes that change nothing an instance's C operations do
_INERT_DUNDERS = frozenset(
    {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__",
     "__new__", "__annotations__", "__firstlineno__", "__static_attributes__",
     "__orig_bases__", "__parameters__", "__init_subclass__", "__class_getitem__"}
)  # fmt: skip


def scalar_base(cls: type) -> type | None:
    """The builtin base (int, float, complex, str, bytes) of a user subclass that adds no
    behaviour to the base's own operations, else None."""
    if type(cls) is not type or cls.__module__ == "builtins":
        return None
    base = next((klass for klass in cls.__mro__ if klass in _BASES), None)
    if base is None or cls.__init__ is not object.__init__:
        return None
    for klass in cls.__mro__[: cls.__mro__.index(base)]:
        if klass.__module__ == "builtins":
            return None  # a second builtin base
        for name in vars(klass):
            if name.startswith("__") and name.endswith("__") and name not in _INERT_DUNDERS:
                return None
    return base


def made_scalar(obj: Any) -> bool:
    """An instance of such a subclass with no attributes of its own."""
    return scalar_base(type(obj)) is not None and not getattr(obj, "__dict__", None)


def guarded_by_value(obj: Any) -> bool:
    """An instance of an int or float subclass from outside the frame: guarded on its type
    and its value (`obj.real`, the plain number), it folds as one made in the frame."""
    return scalar_base(type(obj)) in (int, float) and made_scalar(obj)


def constant_scalar(value: Value) -> bool:
    """Whether `value` stands for such an instance capture may fold on."""
    if not isinstance(value, PythonValue) or not made_scalar(value.obj):
        return False
    return value.source is None or guarded_by_value(value.obj)


def plain_value(obj: Any) -> Any:
    """The instance's value as its builtin base (what a graph operation is given)."""
    base = scalar_base(type(obj))
    assert base is not None
    return base(obj)


def construct_scalar(
    tx: Translator, cls_value: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """cls(*args, **kwargs): the class's own __new__ traced, else the base's folded."""
    from dynamo_capture.calls import inline_function

    cls = cls_value.obj
    tx.ctx.guards.class_attribute(cls, "__new__", cls.__new__)
    tx.ctx.guards.class_attribute(cls, "__init__", cls.__init__)
    if cls.__new__ is scalar_base(cls).__new__:  # type: ignore[union-attr]
        return _new(tx, [cls_value, *args], kwargs)
    return inline_function(tx, cls.__new__, [cls_value, *args], kwargs, None)


def _new(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """base.__new__(cls, *args) of constants (`super().__new__(cls, value)`)."""
    from dynamo_capture.errors import raised_by_python
    from dynamo_capture.operations import NotConstant, as_constant, constant_arguments

    try:
        cls = as_constant(args[0])
        real_args, real_kwargs = constant_arguments(args[1:], kwargs)
    except (NotConstant, IndexError):
        message = "making a builtin subclass instance of values known only when it runs"
        raise Unsupported(message) from None
    base = scalar_base(cls) if isinstance(cls, type) else None
    if base is None and not (isinstance(cls, type) and cls in _BASES):
        raise Unsupported(f"__new__ of {getattr(cls, '__name__', cls)!r}, a builtin subclass")
    try:
        return PythonValue((base or cls).__new__(cls, *real_args, **real_kwargs))
    except Exception as error:  # noqa: BLE001 - eager raises it where it runs
        raise raised_by_python(error) from None


BASE_NEWS = {base.__new__: _new for base in _BASES}
