"""The symbolic values on the interpreter's stack and in its locals.

TensorValue     a tensor in the graph: its fx Node and an example (metadata only)
PythonValue     a Python object known at capture time (a constant, a module, a function...)
TupleValue / ListValue / DictValue / SetValue   containers built while capturing
DictViewValue   a live keys() / values() / items() view of a dict value
FunctionValue   a function created while capturing (MAKE_FUNCTION: lambdas, closures)
CellValue       a closure cell created while capturing
MethodValue     a function bound to a value (user methods)
BuiltinMethodValue  a method of a value, handled by capture (list.append, Tensor.view, ...)
IteratorValue   an iterator over known items (range, zip) or made as read (a generator, map)
ObjectValue     an instance of a user class created while capturing
SuperValue      super(cls, obj)
ContextValue    a context manager capture knows (no_grad, enable_grad, autocast, ...)
PartialValue    functools.partial created while capturing
NULL            the NULL the call convention pushes
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from dynamo_capture.sources import Source

__all__ = [
    "FakeId",
    "NULL",
    "BuiltinMethodValue",
    "CellValue",
    "ContextValue",
    "DictValue",
    "DictViewValue",
    "FunctionValue",
    "HandedOnValue",
    "IteratorValue",
    "ListValue",
    "MethodValue",
    "ObjectValue",
    "PartialValue",
    "PythonValue",
    "SetValue",
    "SuperValue",
    "TensorValue",
    "TupleValue",
    "Value",
    "CONSTANT_TYPES",
    "EAGER_BUILTIN_TYPES",
    "runs_eagerly_on_its_own",
]

CONSTANT_TYPES = (
    int,
    float,
    bool,
    complex,
    str,
    bytes,
    type(None),
    type(Ellipsis),
    type(NotImplemented),
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    range,
    slice,
)


class Value:
    """Base of the interpreter's values; `source` says where an input came from."""

    __slots__ = ()
    source: Source | None = None


class _Null(Value):
    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


@dataclass(eq=False, slots=True)
class TensorValue(Value):
    """A tensor of the graph. `example` carries its metadata (never read for data).

    data_dependent_shape: its shape depends on tensor data (nonzero, boolean masks).
    """

    node: torch.fx.Node
    example: torch.Tensor
    source: Source | None = None
    python_type: type = torch.Tensor
    data_dependent_shape: bool = False


@dataclass(eq=False, slots=True)
class PythonValue(Value):
    """A Python object known at capture time; `source` when it came from the inputs."""

    obj: Any
    source: Source | None = None


# builtin types capture does not model (mutable byte buffers): a call, method call or
# subscript making, reading or changing one runs eagerly on its own, cut at the
# instruction (its operands computed in the graph before, its result handed to the
# graph after), as torch.compile cuts there
EAGER_BUILTIN_TYPES = (bytearray, memoryview)


def runs_eagerly_on_its_own(value: Value) -> bool:
    """Whether `value` is an object of one of EAGER_BUILTIN_TYPES."""
    return isinstance(value, PythonValue) and type(value.obj) in EAGER_BUILTIN_TYPES


@dataclass(eq=False, slots=True)
class HandedOnValue(Value):
    """A local a part of a split frame only hands on to the next part (its epilogue
    reads it, none of its own instructions do): read again from `source` when the part
    returns, never looked at, so never guarded (resume.handed_on_only)."""

    source: Source


@dataclass(eq=False, slots=True)
class TupleValue(Value):
    """A tuple built while capturing; `cls` is a namedtuple class or torch.Size, else tuple."""

    items: list[Value]
    cls: type = tuple
    source: Source | None = None


@dataclass(eq=False, slots=True)
class ListValue(Value):
    """A list built while capturing; `cls` is a user subclass of list, else list."""

    items: list[Value]
    source: Source | None = None
    cls: type = list
    maxlen: int | None = None  # a collections.deque's bound
    attrs: dict[str, Value] = field(default_factory=dict)  # a user subclass instance's own


@dataclass(eq=False, slots=True)
class DictValue(Value):
    """A dict built while capturing; keys are capture-time constants."""

    items: dict[Any, Value]
    cls: type = dict
    source: Source | None = None
    attrs: dict[str, Value] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class DictViewValue(Value):
    """`mapping.keys()`, `.values()` or `.items()` (kind): a live view of a dict value."""

    mapping: Value
    kind: str
    source: Source | None = None
    tx: Any = None  # the Translator that made it: reading the dict later needs its capture


@dataclass(eq=False, slots=True)
class SetValue(Value):
    """A set (or frozenset: `cls`) of capture-time constants and identity keys."""

    items: set[Any]
    source: Source | None = None
    cls: type = set


@dataclass(eq=False, slots=True)
class CellValue(Value):
    contents: Value | None = None
    source: Source | None = None


@dataclass(eq=False, slots=True)
class FunctionValue(Value):
    """A function made by MAKE_FUNCTION while capturing."""

    code: types.CodeType
    globals: dict[str, Any]
    name: str
    defaults: tuple[Value, ...] = ()
    kwdefaults: dict[str, Value] = field(default_factory=dict)
    closure: tuple[CellValue, ...] = ()
    source: Source | None = None
    attrs: dict[str, Value] = field(default_factory=dict)  # __wrapped__, __name__ set...
    annotations: Value | None = None  # the (name, value, ...) tuple MAKE_FUNCTION got
    closure_read: Value | None = None  # `__closure__` once read: one tuple, as eagerly


@dataclass(eq=False, slots=True)
class MethodValue(Value):
    """`func` bound to `self_value` (a user method looked up on a value)."""

    func: Value
    self_value: Value
    source: Source | None = None


@dataclass(eq=False, slots=True)
class BuiltinMethodValue(Value):
    """Method `name` of `receiver`, interpreted by capture's method tables."""

    receiver: Value
    name: str
    source: Source | None = None


@dataclass(eq=False, slots=True)
class IteratorValue(Value):
    """An iterator over known items; `endless(i)` gives item i of one without an end
    (itertools.count, repeat, cycle), appended to `items` as it is read."""

    items: list[Value]
    position: int = 0
    source: Source | None = None
    endless: Any = None
    kind: str = "iter"  # what it is eagerly, where it leaves the frame: zip, map, filter
    # a lazy one's next item, made when read (None at its end): lazy_iterators
    produce: Any = None
    # a zip over sequences (lists, tuples, ranges): (the sequences, strict), so that it
    # is made again over them, each read from the zip's position on (capture.OutputPlan)
    zipped: tuple[tuple[Value, ...], bool] | None = None


@dataclass(eq=False, slots=True)
class ObjectValue(Value):
    """An instance of a user class (dataclasses included) created while capturing."""

    cls: type
    attrs: dict[str, Value] = field(default_factory=dict)
    source: Source | None = None


@dataclass(eq=False, slots=True)
class SuperValue(Value):
    cls: type
    self_value: Value
    source: Source | None = None


@dataclass(eq=False, slots=True)
class ContextValue(Value):
    """A context manager capture knows: kind is grad, autocast, inference, null,
    torch_function (DisableTorchFunction) or generator."""

    kind: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    saved: Any = None
    source: Source | None = None


@dataclass(eq=False, slots=True)
class PartialValue(Value):
    func: Value
    args: list[Value]
    kwargs: dict[str, Value]
    source: Source | None = None


class FakeId(int):
    """id() of a value made during capture: compares like the real id, never leaves the frame."""
