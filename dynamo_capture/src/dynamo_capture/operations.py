"""Python's operators on Values: arithmetic, comparison, truth, subscripts, iteration.

Each operation folds capture-time constants, adds a graph node where a tensor
is involved, and calls the user's dunder method (inlined) for user objects.
"""

from __future__ import annotations

import collections.abc
import contextlib
import enum
import functools
import inspect
import operator
import os
import types
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dynamo_capture import side_effects
from dynamo_capture.errors import (
    ExceptionRaised,
    Unsupported,
    graph_value_arguments,
    raised_ahead,
)
from dynamo_capture.output_graph import is_constant
from dynamo_capture.scalar_subclasses import constant_scalar
from dynamo_capture.sources import item_source
from dynamo_capture.sym_numbers import is_symbolic_number, recomputed_from_values
from dynamo_capture.tensor_extremes import (
    ChoiceValue,
    choice_operand,
    choice_with_number,
    negated_choice,
)
from dynamo_capture.values import (
    NULL,
    BuiltinMethodValue,
    CellValue,
    ContextValue,
    DictValue,
    DictViewValue,
    FakeId,
    FunctionValue,
    IteratorValue,
    ListValue,
    MethodValue,
    ObjectValue,
    PartialValue,
    PythonValue,
    SetValue,
    SuperValue,
    TensorValue,
    TupleValue,
    Value,
    runs_eagerly_on_its_own,
)

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "BINARY",
    "COMPARE",
    "NotConstant",
    "as_constant",
    "binary_op",
    "compare_op",
    "constant_arguments",
    "contains",
    "get_item",
    "get_iter",
    "is_constant_value",
    "is_op",
    "python_type_of",
    "sequence_items",
    "set_item",
    "truth",
    "unary_op",
    "watched_mapping",
]

BINARY = {
    "+": operator.add, "&": operator.and_, "//": operator.floordiv, "<<": operator.lshift,
    "@": operator.matmul, "*": operator.mul, "%": operator.mod, "|": operator.or_,
    "**": operator.pow, ">>": operator.rshift, "-": operator.sub, "/": operator.truediv,
    "^": operator.xor,
    "+=": operator.iadd, "&=": operator.iand, "//=": operator.ifloordiv, "<<=": operator.ilshift,
    "@=": operator.imatmul, "*=": operator.imul, "%=": operator.imod, "|=": operator.ior,
    "**=": operator.ipow, ">>=": operator.irshift, "-=": operator.isub, "/=": operator.itruediv,
    "^=": operator.ixor,
}  # fmt: skip
COMPARE = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip
_DUNDER = {
    operator.add: ("__add__", "__radd__"), operator.sub: ("__sub__", "__rsub__"),
    operator.mul: ("__mul__", "__rmul__"), operator.truediv: ("__truediv__", "__rtruediv__"),
    operator.floordiv: ("__floordiv__", "__rfloordiv__"), operator.mod: ("__mod__", "__rmod__"),
    operator.matmul: ("__matmul__", "__rmatmul__"), operator.pow: ("__pow__", "__rpow__"),
    operator.eq: ("__eq__", "__eq__"), operator.ne: ("__ne__", "__ne__"),
    operator.lt: ("__lt__", "__gt__"), operator.gt: ("__gt__", "__lt__"),
    operator.le: ("__le__", "__ge__"), operator.ge: ("__ge__", "__le__"),
    operator.and_: ("__and__", "__rand__"), operator.or_: ("__or__", "__ror__"),
    operator.xor: ("__xor__", "__rxor__"), operator.lshift: ("__lshift__", "__rlshift__"),
    operator.rshift: ("__rshift__", "__rrshift__"),
}  # fmt: skip
_INPLACE_TO_PLAIN = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
    operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor,
    operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
}  # fmt: skip


_SYMBOLIC_NUMBERS = (torch.SymInt, torch.SymFloat, torch.SymBool)


def operator_dunders(fn: Any) -> tuple[str, ...]:
    """The methods through which a class can change what operator `fn` does to it
    (`__add__`, `__radd__`, and `__iadd__` for `+=`)."""
    plain = _INPLACE_TO_PLAIN.get(fn, fn)
    names = _DUNDER.get(plain, ())
    if fn in _INPLACE_TO_PLAIN and names:
        return (*names, "__i" + names[0][2:])
    return names


class NotConstant(Exception):
    """A value is not a capture-time constant."""


def missing_key(container: Value, key: Any) -> Unsupported:
    """The KeyError a plain dict raises for `key`, to raise in the captured code (a dict
    subclass, whose __missing__ might answer, or a key that is no constant: a break)."""
    from dynamo_capture.errors import ExceptionRaised

    if getattr(container, "cls", None) in (dict, collections.OrderedDict) and is_constant(key):
        return ExceptionRaised(PythonValue(KeyError(key)))
    return Unsupported(f"KeyError {key!r} while capturing")


def as_constant(value: Value) -> Any:
    """The Python constant `value` stands for, or NotConstant."""
    if isinstance(value, PythonValue):
        obj = value.obj
        shadow = side_effects.shadow_of(obj)
        if shadow is not None:  # an outside container the frame wrote: what it holds now
            if type(obj) not in (list, dict, set):
                raise NotConstant  # a deque's maxlen, a defaultdict's factory
            return as_constant(shadow)
        if is_constant(obj) or isinstance(obj, (torch.Size, FakeId, *_SYMBOLIC_NUMBERS)):
            return obj  # symbolic sizes compute on their own (recording guards)
        if isinstance(obj, list) and all(is_constant(item) for item in obj):
            return list(obj)
        if (
            value.source is None
            and type(obj) is dict
            and all(is_constant(k) and is_constant(v) for k, v in obj.items())
        ):
            return dict(obj)  # a folded result (`str.maketrans("ab", "xy")`)
        if isinstance(obj, set | frozenset) and all(is_constant(item) for item in obj):
            return obj
        if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
            return obj
        if type(obj).__module__ == "typing" or isinstance(
            obj, types.GenericAlias | types.UnionType
        ):
            return obj  # an annotation (a TypeVar, Callable[[T], Any], list[int]), immutable
        if isinstance(obj, np.dtype) and value.source is None:
            return obj  # a NumPy dtype met while capturing (`a.dtype`), immutable
        if isinstance(obj, BaseException) and value.source is None:
            if graph_value_arguments(obj):  # `ValueError(x * 2)`: read through .args only
                raise NotConstant
            if side_effects.attribute_written(obj, "args"):  # `e.args = (...)`: not in it yet
                raise NotConstant
            return obj  # an exception made while capturing (`str(e)` in an except block)
        if constant_scalar(value):
            return obj  # Name("a"), a str subclass made while capturing (scalar_subclasses)
        raise NotConstant
    if isinstance(value, TupleValue):
        items = [as_constant(item) for item in value.items]
        if value.cls is tuple:
            return tuple(items)
        if value.cls is torch.Size:
            return torch.Size(items)
        return value.cls(*items)
    if isinstance(value, ListValue):
        items = [as_constant(item) for item in value.items]
        if issubclass(value.cls, collections.deque):
            return value.cls(items, maxlen=value.maxlen)
        return items if value.cls is list else value.cls(items)
    if isinstance(value, SetValue):
        if any(isinstance(item, IdentityKey) for item in value.items):
            raise NotConstant
        return value.cls(value.items)
    if isinstance(value, DictValue) and value.cls in (dict, collections.OrderedDict):
        if any(isinstance(key, IdentityKey) for key in value.items):
            raise NotConstant
        return value.cls((key, as_constant(item)) for key, item in value.items.items())
    if isinstance(value, DictViewValue):
        from dynamo_capture.dict_views import view_constant

        return view_constant(value)
    raise NotConstant


class IdentityKey:
    """A dict key or set item hashed by identity, as a tensor is: stands for `value`."""

    __slots__ = ("value",)

    def __init__(self, value: Value) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdentityKey) and other.value is self.value

    def __repr__(self) -> str:
        return f"IdentityKey({self.value!r})"


class UserHashKey(IdentityKey):
    """A dict key or set item made in the frame whose class defines `__hash__` and
    `__eq__` in Python: hashed and compared by those methods, traced in the running
    capture where the dict or set operation calls them, as eagerly (CPython's dict
    calls them in the same order on keys with the same hashes)."""

    __slots__ = ("_hash",)

    def __init__(self, value: Value) -> None:
        super().__init__(value)
        self._hash: int | None = None

    def __hash__(self) -> int:
        if self._hash is None:
            result = _call_user_dunder(self.value, "__hash__", [])
            if type(result) is not int:
                raise Unsupported("a __hash__ that gives other than an int known while capturing")
            self._hash = result  # CPython makes it a hash as it does eagerly
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdentityKey):
            if other.value is self.value:
                return True
            other_value = other.value
        elif is_constant(other):
            other_value = PythonValue(other)
        else:
            raise Unsupported("comparing a key made in the frame with an outside object")
        result = _call_user_dunder(self.value, "__eq__", [other_value])
        if result is NotImplemented and isinstance(other, UserHashKey):
            result = _call_user_dunder(other_value, "__eq__", [self.value])
        if result is NotImplemented:
            return False  # neither compares: identity, and they are not the same object
        return bool(result)


def _call_user_dunder(value: Value, name: str, args: list[Value]) -> Any:
    """value.<name>(*args) through its class's Python method, traced in the running
    capture; the result as a capture-time constant."""
    from dynamo_capture.calls import call
    from dynamo_capture.interpreter import RUNNING

    if not RUNNING:
        raise Unsupported(f"{name} of a key outside a running capture")
    tx = RUNNING[-1]
    cls = python_type_of(value)
    method = inspect.getattr_static(cls, name, None)
    if not isinstance(method, types.FunctionType):
        if name == "__eq__":
            return NotImplemented
        raise Unsupported(f"{cls.__name__}.{name} not a Python function")
    tx.ctx.guards.class_attribute(cls, name, method)
    result = call(tx, PythonValue(method), [value, *args], {})
    if isinstance(result, TensorValue):
        raise Unsupported(f"{cls.__name__}.{name} giving a tensor (its truth is data-dependent)")
    try:
        return as_constant(result)
    except NotConstant:
        raise Unsupported(f"{cls.__name__}.{name} giving a value known only when it runs") from None


def _user_hashed(value: Value) -> bool:
    """An instance made in the frame whose class hashes and compares it in Python."""
    if not isinstance(value, ObjectValue) or value.source is not None:
        return False
    hash_method = inspect.getattr_static(value.cls, "__hash__", None)
    return isinstance(hash_method, types.FunctionType)


class TupleKey(IdentityKey):
    """A dict key or set item that is a tuple holding items hashed by identity (`(1, t)`
    for a tensor `t`): hashed and compared item by item, as Python hashes a tuple; it
    stands for the first tuple value seen with those items."""

    __slots__ = ("members",)

    def __init__(self, value: Value, members: tuple[Any, ...]) -> None:
        super().__init__(value)
        self.members = members

    def __hash__(self) -> int:
        return hash(self.members)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TupleKey) and other.members == self.members


def key_value(key: Any) -> Value:
    """The value a dict key or set item stands for (see hashable_key)."""
    return key.value if isinstance(key, IdentityKey) else PythonValue(key)


def hashable_key(value: Value) -> Any:
    """A dict key or set item: a constant, or an object compared by identity (a module,
    a tensor: an `IdentityKey`). An unhashable one raises eager's TypeError."""
    if isinstance(value, ListValue | DictValue | SetValue | ObjectValue):
        kind = python_type_of(value)
        if kind.__hash__ is None:  # a list, dict or set, a class with __eq__ only
            from dynamo_capture.errors import raised_by_python

            raise raised_by_python(TypeError(f"unhashable type: '{kind.__name__}'"))
    if isinstance(value, TupleValue) and value.cls is tuple:
        members = tuple(hashable_key(item) for item in value.items)
        if any(isinstance(member, IdentityKey) for member in members):
            # NOTE: only as a dict key or set item (hashed first): an `in` on a list
            # compares tuples with ==, which compares the tensors in them
            return TupleKey(value, members)
    key = comparable_key(value)
    if not isinstance(key, IdentityKey):
        try:
            hash(key)
        except TypeError as error:  # a tuple holding a list: eager's error
            from dynamo_capture.errors import raised_by_python

            raise raised_by_python(error) from None
    return key


def comparable_key(value: Value) -> Any:
    """What list.index/count/remove compare an item by: a constant (a list too), or an
    object compared by identity (an `IdentityKey`)."""
    if isinstance(value, TensorValue):
        return IdentityKey(value)
    if isinstance(value, ObjectValue) and value.cls.__hash__ is object.__hash__:
        return IdentityKey(value)  # an instance made in the frame, hashed by identity
    if _user_hashed(value):
        return UserHashKey(value)
    try:
        return as_constant(value)
    except NotConstant:
        if (
            isinstance(value, PythonValue)
            and getattr(type(value.obj), "__hash__", None) is object.__hash__
        ):
            return value.obj
        if isinstance(value, PythonValue) and isinstance(value.obj, torch.nn.Module):
            return value.obj
        raise Unsupported("a dict key or set item that is not a capture-time constant") from None


def constant_arguments(
    args: list[Value] | tuple[Value, ...], kwargs: dict[str, Value]
) -> tuple[list[Any], dict[str, Any]]:
    """The Python constants a call's arguments stand for (`as_constant` of each), or
    NotConstant where one is known only when the code runs."""
    return [as_constant(a) for a in args], {k: as_constant(v) for k, v in kwargs.items()}


def is_constant_value(value: Value) -> bool:
    try:
        as_constant(value)
    except NotConstant:
        return False
    return True


_SYMBOLIC_TYPES: dict[type, type] = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


def python_type_of(value: Value) -> type:
    """The Python type the value has when the code runs eagerly."""
    if isinstance(value, TensorValue):
        return value.python_type
    if isinstance(value, PythonValue):
        kind = type(value.obj)
        return _SYMBOLIC_TYPES.get(kind, kind)  # a symbolic size stands for an int
    if isinstance(value, TupleValue | ListValue | DictValue | SetValue | ObjectValue):
        return value.cls
    if isinstance(value, DictViewValue):
        from dynamo_capture.dict_views import VIEW_TYPES

        return VIEW_TYPES[value.kind]
    if isinstance(value, FunctionValue):
        return types.FunctionType
    if isinstance(value, MethodValue):
        return types.MethodType
    if isinstance(value, PartialValue):
        import functools

        return functools.partial
    if isinstance(value, SuperValue):
        return super
    if isinstance(value, CellValue):
        return types.CellType
    if isinstance(value, IteratorValue) and value.kind in _ITERATOR_TYPES:
        return _ITERATOR_TYPES[value.kind]
    if isinstance(value, ContextValue) and value.kind in _CONTEXT_TYPES:
        return _CONTEXT_TYPES[value.kind]
    raise Unsupported(f"the type of a {type(value).__name__} is not known at capture time")


# the kinds of ContextValue of one Python type: their `type(cm).__enter__(cm)` and
# `__exit__` (contextlib.ExitStack calls them so) are the context's own (calls._context_dunder)
_CONTEXT_TYPES: dict[str, type] = {
    "generator": contextlib._GeneratorContextManager,
    "null": contextlib.nullcontext,
}


# the kinds of IteratorValue whose Python type is known (others: many C iterators)
_ITERATOR_TYPES: dict[str, type] = {
    "zip": zip,
    "map": map,
    "filter": filter,
    "generator": types.GeneratorType,
    "range": type(iter(range(0))),
    "tuple": type(iter(())),
    "enumerate": enumerate,
    "enumerate_range": enumerate,
    "enumerate_iterator": enumerate,
    "enumerate_modules": enumerate,
    "enumerate_sequence": enumerate,
}


# ----- truth -------------------------------------------------------------
def truth(tx: Translator, value: Value) -> bool:
    """bool(value) at capture time; a tensor's truth is data-dependent. An outside list,
    dict or set the frame wrote is read through its shadow (the real object holds the
    writes only after the graph)."""
    value = side_effects.current(tx, value)
    if isinstance(value, TensorValue):
        error = Unsupported(
            "data-dependent control flow: the truth value of a tensor (if/while/and/or on a "
            "tensor) is only known when it runs"
        )
        error.data_branch = True
        raise error
    if user_override(value, "__bool__") or user_override(value, "__len__"):
        return _object_truth(tx, value, python_type_of(value))
    if isinstance(value, TupleValue | ListValue):
        return bool(value.items)
    if isinstance(value, DictValue | SetValue):
        return bool(value.items)
    if isinstance(value, DictViewValue):
        return bool(sequence_items(tx, value))
    if isinstance(value, PythonValue):
        obj = value.obj
        if obj is None or is_constant(obj) or isinstance(obj, list | tuple | dict | set):
            return bool(obj)
        if isinstance(obj, torch.SymFloat):
            return bool(obj != 0)  # a condition on the sizes, not the float's value
        if isinstance(obj, _SYMBOLIC_NUMBERS):
            return bool(obj)  # decided by the hint, recorded as a shape guard
        return _object_truth(tx, value, type(obj))
    if isinstance(value, ObjectValue):
        return _object_truth(tx, value, value.cls)
    return True


def _object_truth(tx: Translator, value: Value, cls: type) -> bool:
    from dynamo_capture.calls import call

    for name in ("__bool__", "__len__"):
        method = getattr(cls, name, None)
        if method is None:
            continue
        if isinstance(method, types.FunctionType):
            result = call(tx, PythonValue(method), [value], {})
            return truth(tx, result)
        if isinstance(value, PythonValue) and isinstance(value.obj, torch.nn.Module):
            guard_module_children(tx, value)
            return bool(value.obj)
        raise Unsupported(f"truth value of a {cls.__name__} with a C {name}")
    return True


# ----- arithmetic --------------------------------------------------------
def _has_tensor(*values: Value) -> bool:
    for value in values:
        if isinstance(value, TensorValue):
            return True
        if isinstance(value, TupleValue | ListValue) and _has_tensor(*value.items):
            return True
    return False


def operator_override(tx: Translator, fn: Any, operands: list[Value]) -> Value | None:
    from dynamo_capture.torch_function_dispatch import operator_override as handed_on

    return handed_on(tx, fn, operands)


def binary_op(tx: Translator, fn: Any, left: Value, right: Value) -> Value:
    """left <op> right (fn is an operator function such as operator.add or operator.iadd)."""
    if _numpy_operand(left, right):
        from dynamo_capture.numpy_arrays import ndarray_in_place_operator, ndarray_operator

        if fn in _INPLACE_TO_PLAIN:
            return ndarray_in_place_operator(tx, _INPLACE_TO_PLAIN[fn], left, right)
        return ndarray_operator(tx, fn, [left, right])
    if isinstance(left, ChoiceValue) or isinstance(right, ChoiceValue):
        derived = choice_with_number(tx, fn, left, right)
        if derived is not None:
            return derived
        left, right = choice_operand(fn, left, right)
    if isinstance(left, TensorValue) or isinstance(right, TensorValue):
        if fn in _INPLACE_TO_PLAIN and not isinstance(left, TensorValue):
            fn = _INPLACE_TO_PLAIN[fn]  # `number += tensor` rebinds, like number + tensor
        left, right = _python_scalar(left), _python_scalar(right)
        handled = operator_override(tx, fn, [left, right])
        if handled is not None:
            return handled  # eager rebinds `x += 1` to what the override returns
        result = tx.ctx.call("call_function", fn, (left, right), {})
        if fn in _INPLACE_TO_PLAIN and isinstance(left, TensorValue):
            return left
        return result
    method = _container_in_place_method(fn, left, right)
    if method is not None:  # `items += more` writes the list, dict or set itself
        from dynamo_capture.methods import call_method

        call_method(tx, left, method, [right], {})
        # the name stays bound to the object itself (`items is other` as before); its
        # reads go through the shadow the write made
        return left
    if (
        fn is operator.imul
        and _sequence_kind(left) is list
        and isinstance(right, PythonValue)
        and isinstance(right.obj, int)
        and not user_override(left, "__imul__")
    ):
        # `items *= n` repeats the list itself (folding it would make a new list)
        _repeat_list_in_place(tx, left, sequence_items(tx, left) * right.obj)
        return left
    # an outside list, dict or set the frame wrote is read through its shadow
    left, right = side_effects.current(tx, left), side_effects.current(tx, right)
    plain = _INPLACE_TO_PLAIN.get(fn, fn)
    names = _DUNDER.get(plain, ())
    if fn in _INPLACE_TO_PLAIN and names:  # `a += b` tries a user class's __iadd__ first
        inplace = getattr(python_type_of(left), "__i" + names[0][2:], None)
        if isinstance(inplace, types.FunctionType):
            from dynamo_capture.calls import call

            result = call(tx, PythonValue(inplace), [left, right], {})
            if not (isinstance(result, PythonValue) and result.obj is NotImplemented):
                return result
    if any(user_override(side, name) for side in (left, right) for name in names):
        return _dunder_op(tx, plain, left, right)  # a container subclass's own operator
    try:
        if fn in _INPLACE_TO_PLAIN and _writes_itself(left, fn):
            # `xs *= 2` on a list of constants writes that list (an alias sees it)
            raise NotConstant
        constants = (as_constant(left), as_constant(right))
        return _folded(tx, plain, constants)
    except NotConstant:
        pass
    except TypeError:
        pass
    except ArithmeticError as error:  # 1 / 0 on plain numbers: the code raises it
        if all(type(c) in (int, float, bool, complex) for c in constants):
            from dynamo_capture.errors import raised_by_python

            raise raised_by_python(error) from None
        raise
    sequence = _sequence_op(tx, fn, left, right)
    if sequence is not None:
        return sequence
    repeated = _deque_repeated_in_place(tx, fn, left, right)
    if repeated is not None:
        return repeated
    if isinstance(left, SetValue) and isinstance(right, SetValue) and plain in _SET_OPS:
        result = plain(set(left.items), set(right.items))  # identity keys: tensors by id
        if isinstance(result, set):
            return SetValue(result, cls=frozenset if issubclass(left.cls, frozenset) else set)
        return PythonValue(result)
    return _dunder_op(tx, plain, left, right, written=fn)


_SET_OPS = frozenset(
    {operator.or_, operator.and_, operator.sub, operator.xor, operator.eq, operator.ne,
     operator.le, operator.lt, operator.ge, operator.gt}
)  # fmt: skip


# (container type, in-place operator) -> the method it calls, and the right operand's types
_CONTAINER_IN_PLACE: dict[tuple[type, Any], tuple[str, tuple[type, ...] | None]] = {
    (list, operator.iadd): ("extend", None),
    (collections.deque, operator.iadd): ("extend", None),
    (dict, operator.ior): ("update", None),
    (set, operator.ior): ("update", (set, frozenset)),
    (set, operator.iand): ("intersection_update", (set, frozenset)),
    (set, operator.isub): ("difference_update", (set, frozenset)),
    (set, operator.ixor): ("symmetric_difference_update", (set, frozenset)),
}


_IN_PLACE_DUNDER = {
    operator.iadd: "__iadd__",
    operator.ior: "__ior__",
    operator.iand: "__iand__",
    operator.isub: "__isub__",
    operator.ixor: "__ixor__",
}


def _container_in_place_method(fn: Any, left: Value, right: Value) -> str | None:
    """The method an in-place operator on a plain list, deque, dict or set calls (which
    writes the object, an input's too), or None."""
    if fn not in _INPLACE_TO_PLAIN or not isinstance(
        left, PythonValue | ListValue | DictValue | SetValue
    ):
        return None
    kind = python_type_of(left)
    entry = next(
        (
            value
            for (base, op), value in _CONTAINER_IN_PLACE.items()
            if op is fn
            and issubclass(kind, base)
            and getattr(kind, _IN_PLACE_DUNDER[fn]) is getattr(base, _IN_PLACE_DUNDER[fn])
        ),
        None,
    )  # a subclass that keeps the builtin's in-place operator (OrderedDict's |=) too
    if entry is None:
        return None
    method, right_types = entry
    if right_types is not None and python_type_of(right) not in right_types:
        return None  # Python raises TypeError: left to the operator's own path
    return method


def _writes_itself(left: Value, fn: Any) -> bool:
    """Whether `left <fn>= right` writes `left` in place: its type defines the in-place
    method (a list's `__imul__`, a bytearray's `__iadd__`), so no folded copy stands for it."""
    name = _DUNDER.get(_INPLACE_TO_PLAIN[fn], ("",))[0]
    return bool(name) and hasattr(python_type_of(left), "__i" + name[2:])


def _folded(tx: Translator, fn: Any, args: tuple[Any, ...]) -> PythonValue:
    """fn(*args) on constants; a symbolic number's recipe is kept for the graph."""
    result = fn(*args)
    if isinstance(result, _SYMBOLIC_NUMBERS) and tx.ctx.shape_env is not None:
        tx.ctx.sym_numbers.record(result, fn, args)
    # `"%s" % (x.shape,)`: a text naming symbolic sizes is made again from their values
    where = f"{getattr(fn, '__name__', fn)} of a symbolic number"
    return PythonValue(recomputed_from_values(fn, args, {}, result, where))


def _sequence_op(tx: Translator, fn: Any, left: Value, right: Value) -> Value | None:
    plain = _INPLACE_TO_PLAIN.get(fn, fn)
    left_kind, right_kind = _sequence_kind(left), _sequence_kind(right)
    if plain is operator.add and left_kind is not None and right_kind is not None:
        if left_kind is not right_kind and not (fn is operator.iadd and left_kind is list):
            raise _raised_like_python(lambda: left_kind() + right_kind())
        items = sequence_items(tx, left) + sequence_items(tx, right)
        if fn is operator.iadd and isinstance(left, ListValue):
            left.items[:] = items
            return left
        return ListValue(items) if left_kind is list else TupleValue(items)
    if plain is operator.mul and (left_kind is not None or right_kind is not None):
        # `seq * n` and `n * seq`: a list or tuple repeated (a subclass gives the base type)
        sequence, count_value = (left, right) if left_kind is not None else (right, left)
        kind = left_kind or right_kind
        if not isinstance(count_value, PythonValue) or type(count_value.obj) in _SYMBOLIC_TYPES:
            return None  # a number known only when it runs: the length is not known
        count = count_value.obj
        if not isinstance(count, int):
            raise _raised_like_python(lambda: kind() * count)
        items = sequence_items(tx, sequence) * count
        if fn is operator.imul and kind is list and sequence is left:
            return _repeat_list_in_place(tx, left, items)
        return ListValue(items) if kind is list else TupleValue(items)
    if plain in (operator.eq, operator.ne) and left_kind is not None and right_kind is not None:
        same = _sequences_equal(tx, left, right) if left_kind is right_kind else False
        if same is None:
            return None
        return PythonValue(same if plain is operator.eq else not same)
    if (
        plain is operator.or_
        and isinstance(left, DictValue | PythonValue)
        and isinstance(right, DictValue | PythonValue)
    ):
        if python_type_of(left) is dict and python_type_of(right) is dict:
            return DictValue({**dict_items(tx, left), **dict_items(tx, right)})
    return None


def _sequences_equal(tx: Translator, left: Value, right: Value) -> bool | None:
    """list == list, tuple == tuple of items not all constants, as Python compares them:
    the lengths, then each pair of items by identity, else by ==; None where an item's
    == gives no Python truth known now (a tensor's)."""
    left_items, right_items = sequence_items(tx, left), sequence_items(tx, right)
    if len(left_items) != len(right_items):
        return False
    for a, b in zip(left_items, right_items, strict=True):
        constants = is_constant_value(a) and is_constant_value(b)
        if not constants and _identical(a, b):
            guard_identity(tx, a, b)
            continue
        equal = binary_op(tx, operator.eq, a, b)
        if not (isinstance(equal, PythonValue) and type(equal.obj) is bool):
            return None
        if not equal.obj:
            return False
    return True


def _user_equal(tx: Translator, left: Value, right: Value) -> bool:
    """`left == right` where a side defines its own equality, as a Python truth known now."""
    equal = binary_op(tx, operator.eq, left, right)
    if isinstance(equal, TensorValue):
        raise Unsupported("`in` with an __eq__ that gives a tensor is data-dependent")
    return truth(tx, equal)


def _sequence_kind(value: Value) -> type | None:
    """list or tuple: the builtin sequence type `value` is an instance of; None for any
    other value (a deque, whose operators keep its maxlen, included)."""
    if not _is_sequence(value):
        return None
    kind = python_type_of(value)
    return list if issubclass(kind, list) else tuple if issubclass(kind, tuple) else None


def _deque_repeated_in_place(tx: Translator, fn: Any, left: Value, right: Value) -> Value | None:
    """`queue *= n` on a deque: the deque itself holds its items repeated (its maxlen
    keeps the last ones, as `extend` does); None where it does not apply."""
    kind = python_type_of(left)
    if fn is not operator.imul or not issubclass(kind, collections.deque):
        return None
    if kind.__imul__ is not collections.deque.__imul__:
        return None  # a subclass's own operator
    if not isinstance(right, PythonValue) or type(right.obj) is not int:
        return None
    return _repeat_list_in_place(tx, left, sequence_items(tx, left) * max(right.obj, 0))


def _repeat_list_in_place(tx: Translator, target: Value, items: list[Value]) -> Value:
    """`items *= n`: the list itself holds its items repeated (an alias sees them)."""
    from dynamo_capture.methods import call_method

    call_method(tx, target, "clear", [], {})
    call_method(tx, target, "extend", [TupleValue(items)], {})
    return target


def _raised_like_python(operation: Any) -> Exception:
    """The TypeError Python raises for `operation` on stand-in operands, raised in the
    captured code."""
    from dynamo_capture.errors import raised_by_python

    try:
        operation()
    except TypeError as error:
        return raised_by_python(error)
    raise AssertionError("the stand-in operation was expected to raise")


def _members_of_a_c_enum(left: Value, right: Value) -> bool:
    """Both operands members of one pybind11 enum (a C++ enum torch binds, whose members
    are listed in the class's `__members__`)."""
    if not (isinstance(left, PythonValue) and isinstance(right, PythonValue)):
        return False
    kind = type(left.obj)
    if type(right.obj) is not kind or not any(
        base.__module__ == "pybind11_builtins" for base in kind.__mro__[1:]
    ):
        return False
    members = getattr(kind, "__members__", None)
    return (
        isinstance(members, dict)
        and any(member is left.obj for member in members.values())
        and any(member is right.obj for member in members.values())
    )


def _is_sequence(value: Value) -> bool:
    if isinstance(value, TupleValue | ListValue):
        return True
    return isinstance(value, PythonValue) and isinstance(value.obj, list | tuple)


def _dunder_op(tx: Translator, fn: Any, left: Value, right: Value, written: Any = None) -> Value:
    """`left fn right` by the operands' own methods; `written` the operator as the code
    wrote it (`-=` for `-`), which names it in Python's TypeError."""
    from dynamo_capture.calls import call

    names = _DUNDER.get(fn)
    if names is not None:
        for receiver, other, name in ((left, right, names[0]), (right, left, names[1])):
            method = getattr(python_type_of(receiver), name, None)
            if isinstance(method, types.FunctionType):
                result = call(tx, PythonValue(method), [receiver, other], {})
                if not (isinstance(result, PythonValue) and result.obj is NotImplemented):
                    return result
    if fn is operator.ne:  # object.__ne__ inverts a user __eq__
        for receiver, other in ((left, right), (right, left)):
            method = getattr(python_type_of(receiver), "__eq__", None)
            if isinstance(method, types.FunctionType):
                result = call(tx, PythonValue(method), [receiver, other], {})
                if not (isinstance(result, PythonValue) and result.obj is NotImplemented):
                    return PythonValue(not truth(tx, result))
    if fn in (operator.eq, operator.ne) and _c_callables(left, right):
        # NOTE: builtin functions, method descriptors and method-wrappers compare by what
        # they wrap (no user code): `func in (torch.add, Tensor.add)` in an override
        guard_identity(tx, left, right)
        same = left.obj == right.obj
        return PythonValue(same if fn is operator.eq else not same)
    if fn in (operator.eq, operator.ne) and _members_of_a_c_enum(left, right):
        # NOTE: members of a C++ enum bound by pybind11 (SDPBackend) are single objects
        # comparing by their number, with no user code: identity guarded, then folded
        guard_identity(tx, left, right)
        same = left.obj == right.obj
        return PythonValue(same if fn is operator.eq else not same)
    if fn in (operator.eq, operator.ne) and _identity_comparable(left, right):
        guard_same_object(tx, left, right)
        same = _identical(left, right)
        return PythonValue(same if fn is operator.eq else not same)
    error = _builtin_operand_error(written or fn, left, right)
    if error is not None:
        raise error
    raise Unsupported(
        f"operator {getattr(fn, '__name__', fn)} on {python_type_of(left).__name__} and "
        f"{python_type_of(right).__name__}"
    )


_EMPTY_BUILTINS = (set, frozenset, list, tuple, dict, int, float, complex, bool, str, bytes)


def _builtin_operand_error(fn: Any, left: Value, right: Value) -> Exception | None:
    """The TypeError Python raises for an operator its builtin operand types do not
    support (`{x} - 1`), raised in the captured code; None where empty values of the
    two types do not raise it (the operator may be defined for them)."""
    kinds = []
    for side in (left, right):
        if isinstance(side, TensorValue):
            return None
        kind = python_type_of(side)
        if kind not in _EMPTY_BUILTINS:
            return None
        kinds.append(kind)
    try:
        fn(kinds[0](), kinds[1]())
    except TypeError as error:
        from dynamo_capture.errors import raised_by_python

        return raised_by_python(error)
    except Exception:  # noqa: BLE001 - any other outcome: not known to be a TypeError
        return None
    return None


_C_CALLABLES = (
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.FunctionType,
)


def _c_callables(left: Value, right: Value) -> bool:
    """Both sides are functions known now, one at least a C one (whose `==` is its own)."""
    sides = (left, right)
    return all(isinstance(v, PythonValue) and isinstance(v.obj, _C_CALLABLES) for v in sides)


def _identity_comparable(left: Value, right: Value) -> bool:
    """Both sides compare by identity (object.__eq__): `==` is `is`."""
    kinds = (PythonValue, ObjectValue, FunctionValue)
    if not (isinstance(left, kinds) and isinstance(right, kinds)):
        return False
    return all(
        getattr(python_type_of(side), "__eq__", None) is object.__eq__
        or isinstance(side, FunctionValue)
        or (isinstance(side, PythonValue) and isinstance(side.obj, type | types.FunctionType))
        for side in (left, right)
    )


def guard_identity(tx: Translator, *values: Value) -> None:
    """Capture relied on which object a value is: guard its identity."""
    for value in values:
        if (
            isinstance(value, PythonValue)
            and value.source is not None
            and not is_constant(value.obj)
        ):
            tx.ctx.guards.id_match(value.source, value.obj)


def guard_same_object(tx: Translator, left: Value, right: Value) -> None:
    """Capture relied on whether `left is right`: guard what decides it.

    Objects of different types are never the same object, so their types decide:
    `cache is None` on a cache object guards the cache's type, not which cache it is
    (a new cache each call keeps the entry). Objects of one type guard their identity.
    """
    if python_type_of(left) is python_type_of(right):
        guard_identity(tx, left, right)
        return
    for value in (left, right):
        if (
            isinstance(value, PythonValue)
            and value.source is not None
            and not is_constant(value.obj)
        ):
            tx.ctx.guards.type_match(value.source, value.obj)


def guard_module_children(tx: Translator, value: PythonValue) -> None:
    """Capture relied on a module container's children (len, iteration): guard their names."""
    if value.source is not None:
        from dynamo_capture.sources import AttrSource

        tx.ctx.guards.dict_keys(AttrSource(value.source, "_modules"), value.obj._modules)


def _identical(left: Value, right: Value) -> bool:
    if isinstance(left, PythonValue) and isinstance(right, PythonValue):
        return left.obj is right.obj
    return left is right


def compare_op(tx: Translator, symbol: str, left: Value, right: Value) -> Value:
    fn = COMPARE[symbol]
    if _numpy_operand(left, right) and symbol in ("<", "<=", "==", "!=", ">", ">="):
        from dynamo_capture.numpy_arrays import ndarray_operator

        return ndarray_operator(tx, fn, [left, right])
    if isinstance(left, ChoiceValue) or isinstance(right, ChoiceValue):
        left, right = choice_operand(fn, left, right)
    if isinstance(left, TensorValue) or isinstance(right, TensorValue):
        left, right = _python_scalar(left), _python_scalar(right)
        handled = operator_override(tx, fn, [left, right])
        if handled is not None:
            return handled
        if symbol in ("==", "!=") and (_is_none(left) or _is_none(right)):
            # NOTE: Tensor.__eq__ / __ne__ give NotImplemented for None, and Python then
            # compares identities: `t == None` is False, `t != None` True, no tensor made
            return PythonValue(symbol == "!=")
        return tx.ctx.call("call_function", fn, (left, right), {})
    if symbol in ("==", "!=") and _values_view_equality(left, right):
        # NOTE: a values view has no __eq__ of its own: Python compares it by identity
        same = _identical(left, right)
        return PythonValue(same if symbol == "==" else not same)
    return binary_op(tx, fn, left, right)


def _is_none(value: Value) -> bool:
    return isinstance(value, PythonValue) and value.obj is None


def _values_view_equality(left: Value, right: Value) -> bool:
    """`==` with a dict values view on one side and a view or a constant on the other
    (whose __eq__ does not know the view either)."""
    views = [v for v in (left, right) if isinstance(v, DictViewValue) and v.kind == "values"]
    if not views:
        return False
    other = right if left is views[0] else left
    if isinstance(other, DictViewValue):
        return True
    try:
        as_constant(other)
    except NotConstant:
        return False
    return True


def _python_scalar(value: Value) -> Value:
    """A NumPy integer or float scalar operand of a tensor operator as the Python number
    it holds: the operators promote the two alike (np.bool_ does not: kept)."""
    obj = value.obj if isinstance(value, PythonValue) else None
    if type(obj).__module__ == "numpy" and hasattr(obj, "item") and not isinstance(obj, bool):
        kind = getattr(obj, "dtype", None)
        if kind is not None and kind.kind in "iuf" and getattr(obj, "ndim", 1) == 0:
            return PythonValue(obj.item())
    return value


def is_op(left: Value, right: Value) -> bool:
    if isinstance(left, PythonValue) and isinstance(right, PythonValue):
        if left.obj is not right.obj and _symbolic_int_identity(left.obj, right.obj):
            # NOTE: eagerly two reads of a size are one object when the int is small
            # (CPython caches -5..256) and two otherwise: known only when it runs
            raise Unsupported("`is` between ints one of which is a symbolic size")
        return left.obj is right.obj
    return left is right


def _symbolic_int_identity(left: Any, right: Any) -> bool:
    """Whether `left is right` compares two ints, one of them symbolic."""
    numbers = (int, torch.SymInt)
    both = isinstance(left, numbers) and isinstance(right, numbers)
    return both and (is_symbolic_number(left) or is_symbolic_number(right))


def _numpy_operand(*values: Value) -> bool:
    return any(
        isinstance(value, TensorValue) and value.python_type is not torch.Tensor
        and not issubclass(value.python_type, torch.Tensor)
        for value in values
    )  # fmt: skip


def unary_op(tx: Translator, fn: Any, value: Value) -> Value:
    if _numpy_operand(value) and fn is not operator.not_:
        from dynamo_capture.numpy_arrays import ndarray_operator

        return ndarray_operator(tx, fn, [value])
    if isinstance(value, TensorValue):
        handled = operator_override(tx, fn, [value])
        if handled is not None:
            return handled
        return tx.ctx.call("call_function", fn, (value,), {})
    if isinstance(value, ChoiceValue) and fn is operator.neg:
        return negated_choice(tx, value)
    if fn is operator.not_:
        return PythonValue(not truth(tx, value))
    try:
        return _folded(tx, fn, (as_constant(value),))
    except NotConstant:
        pass
    name = {operator.neg: "__neg__", operator.pos: "__pos__", operator.invert: "__invert__"}[fn]
    method = getattr(python_type_of(value), name, None)
    if isinstance(method, types.FunctionType):
        from dynamo_capture.calls import call

        return call(tx, PythonValue(method), [value], {})
    raise Unsupported(f"unary {name} on a {python_type_of(value).__name__}")


# ----- containers --------------------------------------------------------
def sequence_items(tx: Translator, value: Value) -> list[Value]:
    """The items iterating `value` gives (consumes an iterator)."""
    value = side_effects.current(tx, value)
    if user_override(value, "__iter__") is not None:
        return _user_iter(tx, value)
    return builtin_items(tx, value)


def builtin_items(tx: Translator, value: Value) -> list[Value]:
    """The items iterating `value` gives, past a container subclass's own __iter__."""
    if isinstance(value, TupleValue | ListValue):
        return list(value.items)
    if isinstance(value, IteratorValue):
        from dynamo_capture.lazy_iterators import drain

        return drain(tx, value)
    if isinstance(value, DictValue):
        return [key_value(key) for key in value.items]
    if isinstance(value, SetValue):
        return [key_value(item) for item in value.items]
    if isinstance(value, DictViewValue):
        from dynamo_capture.dict_views import view_items

        return view_items(tx, value)
    if isinstance(value, TensorValue):
        if value.data_dependent_shape:
            raise Unsupported("iterating a tensor whose length depends on data")
        if value.example.dim() == 0:
            raise Unsupported("iteration over a 0-d tensor")
        length = value.example.shape[0]
        if isinstance(length, torch.SymInt) and tx.ctx.shape_env is not None:
            reason = "iterating a tensor (a Python loop runs once per row)"
            length = tx.ctx.sym_numbers.specialize(length, reason)
        return [get_item(tx, value, PythonValue(index)) for index in range(length)]
    if isinstance(value, PythonValue):
        return _real_items(tx, value)
    if isinstance(value, ObjectValue):
        return _user_iter(tx, value)
    raise Unsupported(f"iteration over a {type(value).__name__}")


def _sliced_items(tx: Translator, obj: Any) -> list[Value] | None:
    """The submodule values of a container a slice made in the frame, else None."""
    sliced = tx.ctx.sliced_modules.get(id(obj))
    return sliced[1] if sliced is not None and sliced[0] is obj else None


def _real_items(tx: Translator, value: PythonValue) -> list[Value]:
    obj, source = value.obj, value.source
    sliced = _sliced_items(tx, obj)
    if sliced is not None:
        return list(sliced)
    if isinstance(obj, torch.nn.Module):
        written = side_effects.module_members_written(tx, obj)
        if written is not None:
            if isinstance(obj, torch.nn.ModuleDict | torch.nn.ParameterDict):
                return [PythonValue(key) for key in written.items]
            if isinstance(obj, torch.nn.Sequential | torch.nn.ModuleList | torch.nn.ParameterList):
                return list(written.items.values())
            raise Unsupported(f"iterating a {type(obj).__name__} whose members the frame changed")
    if isinstance(obj, torch.nn.Module):
        guard_module_children(tx, value)  # the items read hold for these names only
    if isinstance(obj, torch.nn.ModuleDict):
        return [PythonValue(key) for key in obj.keys()]
    if isinstance(obj, torch.nn.Sequential | torch.nn.ModuleList):
        names = list(obj._modules)
        return [
            tx.ctx.wrap(item, _submodule_source(source, names[index], item))
            for index, item in enumerate(obj)
        ]
    if isinstance(obj, torch.nn.ParameterList):
        return [tx.ctx.wrap(item, item_source(source, index)) for index, item in enumerate(obj)]
    if isinstance(obj, list | tuple | dict) and type(obj).__module__ != "builtins":
        if _defines_in_python(obj, "__iter__"):
            return _user_iter(tx, value)
        _check_items_read_as_iterated(obj)
    if isinstance(obj, list | tuple | collections.deque):
        return [tx.ctx.wrap(item, item_source(source, index)) for index, item in enumerate(obj)]
    if isinstance(obj, dict):
        return [PythonValue(key) for key in obj]
    if isinstance(obj, types.MappingProxyType) and source is None:
        # a read-only view made while capturing (`inspect.signature(fn).parameters`):
        # its keys are those of the mapping it was made from, fixed by then
        return [PythonValue(key) for key in obj]
    if isinstance(obj, range | str | bytes | set | frozenset) or _enum_method(obj, "__iter__"):
        return [PythonValue(item) for item in obj]
    if isinstance(obj, types.GeneratorType | map | filter | zip | enumerate):
        raise Unsupported("iterating a generator or iterator created outside the frame")
    return _user_iter(tx, value)


def _enum_method(obj: Any, name: str) -> bool:
    """Whether `obj` is an enum member whose method `name` is the enum module's own
    (a Flag's `in`, iteration, len): pure functions of constants, run at capture time."""
    if not isinstance(obj, enum.Enum):
        return False
    method = getattr(type(obj), name, None)
    return getattr(method, "__module__", None) == "enum"


def _defines_in_python(obj: Any, name: str) -> bool:
    import inspect

    return isinstance(inspect.getattr_static(type(obj), name, None), types.FunctionType)


def _check_items_read_as_iterated(obj: Any) -> None:
    """An outside container's items are read back as `obj[key]`: a subclass whose own
    __getitem__ gives other values than iterating it would feed the graph those."""
    if _defines_in_python(obj, "__getitem__"):
        raise Unsupported(
            f"iterating a {type(obj).__name__} from outside the frame, whose __getitem__ is "
            "its own (its items are read back by index)"
        )


def _user_iter(tx: Translator, value: Value) -> list[Value]:
    from dynamo_capture.calls import call

    method = getattr(python_type_of(value), "__iter__", None)
    if method is None and isinstance(
        getattr(python_type_of(value), "__getitem__", None), types.FunctionType
    ):
        return _old_sequence_items(tx, value)
    if method is collections.abc.Sequence.__iter__:
        # Sequence.__iter__ stops at the IndexError of __getitem__; iterate up to len() instead.
        length = as_constant(call(tx, PythonValue(len), [value], {}))
        return [get_item(tx, value, PythonValue(index)) for index in range(length)]
    if isinstance(method, types.FunctionType):
        iterator = call(tx, PythonValue(method), [value], {})
        if isinstance(iterator, ObjectValue) and isinstance(
            getattr(iterator.cls, "__next__", None), types.FunctionType
        ):
            return _drain_user_iterator(tx, iterator)
        return sequence_items(tx, iterator)
    kind = python_type_of(value)
    if method is None and getattr(kind, "__getitem__", None) is None:
        # not iterable by either protocol: eager's TypeError, raised in the captured code
        from dynamo_capture.errors import raised_by_python

        raise raised_by_python(TypeError(f"'{kind.__name__}' object is not iterable"))
    raise Unsupported(f"iteration over a {kind.__name__}")


MAX_USER_ITERATOR_ITEMS = 10_000


def _old_sequence_items(tx: Translator, value: Value) -> list[Value]:
    """Iterating an object with __getitem__ and no __iter__: items 0, 1, ... until its
    __getitem__ raises IndexError (or StopIteration)."""
    items: list[Value] = []
    while len(items) < MAX_USER_ITERATOR_ITEMS:
        try:
            items.append(get_item(tx, value, PythonValue(len(items))))
        except ExceptionRaised as error:
            if isinstance(error.value.obj, IndexError | StopIteration):
                return items
            raise raised_ahead(error, "a sequence's __getitem__") from None
    raise Unsupported(f"a user sequence gave more than {MAX_USER_ITERATOR_ITEMS} items")


def _drain_user_iterator(tx: Translator, iterator: ObjectValue) -> list[Value]:
    """The items of a user iterator: __next__ called until it raises StopIteration."""
    from dynamo_capture.calls import call

    next_method = PythonValue(iterator.cls.__next__)
    items: list[Value] = []
    while len(items) < MAX_USER_ITERATOR_ITEMS:
        try:
            items.append(call(tx, next_method, [iterator], {}))
        except Unsupported as error:
            if error.stop_iteration:
                return items
            if isinstance(error, ExceptionRaised):
                raise raised_ahead(error, "a user iterator's __next__") from None
            raise
    raise Unsupported(f"a user iterator gave more than {MAX_USER_ITERATOR_ITEMS} items")


def _submodule_source(source: Any, name: str, module: Any) -> Any:
    from dynamo_capture.sources import ModuleSource, is_builtin_module_class

    if source is None:
        return None
    return ModuleSource(source, name, is_builtin_module_class(type(module)))


def realize(tx: Translator, value: Value) -> Value:
    """An outside list/tuple/dict holding tensors, as a container of Values (items guarded);
    one the frame changed is its shadow (what it holds now)."""
    value = side_effects.current(tx, value)
    if isinstance(value, PythonValue) and value.source is not None and not is_constant(value.obj):
        if type(value.obj) in (list, tuple):
            items = [realize(tx, item) for item in _real_items(tx, value)]
            return ListValue(items) if isinstance(value.obj, list) else TupleValue(items)
        if type(value.obj) is dict:
            return DictValue({k: realize(tx, v) for k, v in dict_items(tx, value).items()})
    return value


def dict_items(tx: Translator, value: Value) -> dict[Any, Value]:
    """A dict value's items as {constant key: Value}."""
    value = side_effects.current(tx, value)
    if isinstance(value, DictValue):
        return dict(value.items)
    if isinstance(value, PythonValue) and isinstance(value.obj, dict):
        if own_getitem_outside_dict(value):
            return _builtin_dict_items(tx, value)
        source = value.source
        return {
            _outside_key(tx, key, source): tx.ctx.wrap(item, _outside_item_source(tx, source, key))
            for key, item in value.obj.items()
        }
    if isinstance(value, PythonValue) and isinstance(value.obj, torch.nn.ModuleDict):
        source = value.source
        return {
            key: tx.ctx.wrap(item, _submodule_source(source, key, item))
            for key, item in value.obj.items()
        }
    raise Unsupported(f"a {python_type_of(value).__name__} used as a mapping")


_VIEW_KEYS = (int, str, bytes, bool, type(None))


def _builtin_dict_items(tx: Translator, value: PythonValue) -> dict[Any, Value]:
    """The items of an outside dict subclass whose own `__getitem__` gives other values
    than the dict holds (transformers' ACT2FN builds a module per read): what
    `dict.__getitem__` reads (`super().__getitem__(key)`), each read back past the
    subclass's method (BuiltinViewSource), its keys guarded when it was wrapped."""
    return {key: builtin_dict_item(tx, value, key) for key in dict.keys(value.obj)}


def own_getitem_outside_dict(value: Value) -> bool:
    """A dict subclass from outside the frame whose own `__getitem__` gives other values
    than the dict holds: its items are read as `dict.__getitem__` reads them."""
    return (
        isinstance(value, PythonValue)
        and value.source is not None
        and isinstance(value.obj, dict)
        and _defines_in_python(value.obj, "__getitem__")
    )


def builtin_dict_item(tx: Translator, value: PythonValue, key: Any) -> Value:
    """`dict.__getitem__(obj, key)` of an outside dict subclass (own_getitem_outside_dict),
    read back past the subclass's method (BuiltinViewSource); its keys are guarded where
    it was wrapped."""
    from dynamo_capture.errors import raised_by_python
    from dynamo_capture.sources import BuiltinViewSource

    obj, source = value.obj, value.source
    # NOTE: the keys guard reads `obj.keys()`, which a subclass's own keys() could answer
    # otherwise than the dict holds; `dict.__getitem__` calls a __missing__ for a key
    # the dict lacks
    if _defines_in_python(obj, "keys") or hasattr(type(obj), "__missing__"):
        raise Unsupported(
            f"reading the items of a {type(obj).__name__} from outside the frame, whose "
            "__getitem__ is its own, past its own keys() or __missing__"
        )
    if type(key) not in _VIEW_KEYS:
        raise Unsupported(
            f"reading the items of a {type(obj).__name__} from outside the frame, whose "
            f"__getitem__ is its own, by a {type(key).__name__} key"
        )
    if key not in dict.keys(obj):
        raise raised_by_python(KeyError(key))
    return tx.ctx.wrap(dict.__getitem__(obj, key), BuiltinViewSource(source, "dict", key))


def get_iter(tx: Translator, value: Value) -> IteratorValue:
    if isinstance(value, IteratorValue):
        return value
    current = side_effects.current(tx, value)
    outside_list = (
        isinstance(current, PythonValue)
        and type(current.obj) is list
        and current.source is not None
    )
    if (isinstance(current, ListValue) and current.cls is list) or outside_list:
        from dynamo_capture.lazy_iterators import list_iterator

        return list_iterator(current)  # reads the list as it is then, as eagerly
    if isinstance(current, ObjectValue) or user_override(current, "__iter__") is not None:
        method = getattr(python_type_of(current), "__iter__", None)
        if isinstance(method, types.FunctionType):
            return _user_iterator(tx, current, method)
    watched = watched_mapping(tx, current)
    if watched is not None:  # a write while it is iterated raises, as eagerly
        from dynamo_capture.lazy_iterators import mapping_iterator

        return mapping_iterator(tx, *watched, _iterator_kind(current))
    return IteratorValue(sequence_items(tx, value), kind=_iterator_kind(current))


def watched_mapping(tx: Translator, value: Value) -> tuple[Value, str] | None:
    """(the container, "keys"/"values"/"items"/"set") for a dict, a view of one, or a
    set made in the frame whose iteration checks the container's size at each step."""
    if isinstance(value, DictViewValue):
        mapping = side_effects.current(tx, value.mapping)
        if user_override(mapping, "__iter__") is None and _plain_dict(mapping):
            return value.mapping, value.kind
        return None
    if _plain_dict(value):
        return value, "keys"
    if isinstance(value, SetValue):
        return value, "set"
    return None


def _plain_dict(value: Value) -> bool:
    if isinstance(value, DictValue):
        return True
    return isinstance(value, PythonValue) and type(value.obj) in (
        dict, collections.OrderedDict, collections.defaultdict
    )  # fmt: skip


def _iterator_kind(value: Value) -> str:
    """The kind of an iterator over `value`'s items read now: "range" and "tuple" (whose
    items cannot change while it runs) apart from any other."""
    if isinstance(value, PythonValue) and type(value.obj) in (range, tuple):
        return type(value.obj).__name__
    if isinstance(value, TupleValue) and value.cls is tuple:
        return "tuple"
    if isinstance(value, DictValue | DictViewValue) or (
        isinstance(value, PythonValue) and isinstance(value.obj, dict | torch.nn.ModuleDict)
    ):
        return "dict"  # over a dict's keys, values or items (capture._NOT_RESUMED_KINDS)
    if isinstance(value, PythonValue) and isinstance(
        value.obj, torch.nn.ModuleList | torch.nn.Sequential
    ):
        return "modules"  # torch.compile does not resume inside its loop either
    return "iter"


def _user_iterator(tx: Translator, value: Value, method: types.FunctionType) -> IteratorValue:
    """iter(obj) of a user class: its __iter__ called now; a generator it returns, or a
    user iterator's __next__, gives each item when it is read, as eagerly."""
    from dynamo_capture.calls import call

    iterator = call(tx, PythonValue(method), [value], {})
    if isinstance(iterator, IteratorValue):
        return iterator
    next_method = getattr(python_type_of(iterator), "__next__", None)
    if not (isinstance(iterator, ObjectValue) and isinstance(next_method, types.FunctionType)):
        return IteratorValue(sequence_items(tx, iterator))

    def produce(reader: Translator) -> Value | None:
        try:
            return call(reader, PythonValue(next_method), [iterator], {})
        except Unsupported as error:
            if error.stop_iteration:
                return None
            raise

    return IteratorValue([], produce=produce)


def _dict_key(tx: Translator, index: Value) -> Any:
    """The key of a dict made in the frame: tensors and plain instances by identity."""
    if isinstance(index, TensorValue | ObjectValue | TupleValue):
        return hashable_key(index)
    return _index_constant(tx, index)


def _index_constant(tx: Translator, index: Value) -> Any:
    try:
        return as_constant(index)
    except NotConstant:
        if isinstance(index, PythonValue):
            return hashable_key(index)
        if isinstance(index, TensorValue):
            raise Unsupported("indexing a Python container with a tensor") from None
        raise Unsupported(f"indexing with a {python_type_of(index).__name__}") from None


def get_item(tx: Translator, container: Value, index: Value) -> Value:
    """container[index]."""
    container = side_effects.current(tx, container)
    if isinstance(container, TensorValue):
        from dynamo_capture.torch_function_dispatch import dispatch_torch_function

        handled = dispatch_torch_function(tx, torch.Tensor.__getitem__, [container, index], {})
        if handled is not None:
            return handled
    if isinstance(container, PythonValue) and isinstance(container.obj, os._Environ):
        from dynamo_capture.methods import fold_environ_read

        return fold_environ_read(tx, container, "__getitem__", [index])
    override = user_override(container, "__getitem__")
    if override is not None:
        return _call_override(tx, override, container, [index])
    return builtin_get_item(tx, container, index)


def builtin_get_item(tx: Translator, container: Value, index: Value) -> Value:
    """container[index] as the builtin type does it (list.__getitem__ of a subclass)."""
    if _numpy_operand(container):
        from dynamo_capture.numpy_arrays import ndarray_item

        return ndarray_item(tx, container, index)
    if isinstance(container, TensorValue):
        if isinstance(index, PythonValue) and isinstance(index.obj, torch.SymInt):
            # NOTE: tensor[n] with a symbolic n is torch.select (as torch.compile writes
            # it): Tensor.__getitem__ reads an int index with __index__, which would fix n
            return tx.ctx.call("call_function", torch.select, (container, 0, index), {})
        return tx.ctx.call("call_function", operator.getitem, (container, index), {})
    if isinstance(container, TupleValue | ListValue):
        key = _index_constant(tx, index)
        if isinstance(key, slice):
            if isinstance(container, ListValue) and container.cls is collections.deque:
                raise Unsupported("slicing a deque raises TypeError")
            items = container.items[key]
            if isinstance(container, ListValue):
                return ListValue(items)
            return TupleValue(items, container.cls if container.cls is torch.Size else tuple)
        try:
            return container.items[operator.index(key)]
        except (IndexError, TypeError) as error:
            if container.source is None:  # its items are known: the code raises eager's error
                raise _sequence_lookup_error(container, key) from None
            raise Unsupported(f"{type(error).__name__} while capturing: {error}") from error
    if isinstance(container, DictValue):
        key = _dict_key(tx, index)
        factory = container.attrs.get("default_factory")
        missing = user_override(container, "__missing__")
        if key not in container.items and missing is not None:
            return _call_override(tx, missing, container, [index])
        if key not in container.items and factory is not None and container.source is None:
            if not (isinstance(factory, PythonValue) and factory.obj is None):
                from dynamo_capture.calls import call

                container.items[key] = call(tx, factory, [], {})  # defaultdict.__missing__
        if key not in container.items:
            raise missing_key(container, key)
        return container.items[key]
    if isinstance(container, PythonValue):
        return _real_get_item(tx, container, index)
    if isinstance(container, ObjectValue):
        return _dunder_call(tx, container, "__getitem__", [index])
    raise Unsupported(f"subscript of a {type(container).__name__}")


def _sequence_lookup_error(container: TupleValue | ListValue, key: Any) -> Exception:
    """The IndexError or TypeError `container[key]` raises eagerly: the same lookup on
    a stand-in of the builtin sequence type it is (whose message names that type)."""
    from dynamo_capture.errors import raised_by_python

    kind = python_type_of(container)
    base = next((t for t in (list, collections.deque) if issubclass(kind, t)), tuple)
    try:
        base([None] * len(container.items))[key]
    except (IndexError, TypeError) as error:
        return raised_by_python(error)
    raise AssertionError("the stand-in lookup was expected to raise")


def _real_get_item(tx: Translator, container: PythonValue, index: Value) -> Value:
    obj, source = container.obj, container.source
    if isinstance(index, TensorValue) and type(obj) in (dict, collections.defaultdict):
        return _tensor_keyed_item(tx, container, index)
    if type(obj) is collections.defaultdict and source is not None:
        key = _index_constant(tx, index)
        if key not in obj:  # the factory fills the key: a write, replayed after the graph
            return get_item(tx, side_effects.for_write(tx, container), index)
    if isinstance(obj, list | tuple | dict | collections.deque) and isinstance(
        inspect.getattr_static(type(obj), "__getitem__", None), types.FunctionType
    ):
        # a subclass's own __getitem__ runs as code (not at capture time, item by item)
        return _dunder_call(tx, container, "__getitem__", [index])
    if isinstance(
        obj,
        torch.nn.Module
        | list
        | tuple
        | dict
        | str
        | bytes
        | range
        | torch.Size
        | collections.deque,
    ):
        key = _index_constant(tx, index)
        written = (
            side_effects.module_members_written(tx, obj)
            if isinstance(obj, torch.nn.Module)
            else None
        )
        if written is not None:  # members added in the frame: read from the shadow
            if isinstance(obj, torch.nn.ModuleDict) and isinstance(key, str):
                if key in written.items:
                    return written.items[key]
            elif isinstance(obj, torch.nn.ModuleList | torch.nn.Sequential) and type(key) is int:
                members = list(written.items.values())
                if -len(members) <= key < len(members):
                    return members[key]
            raise Unsupported(f"indexing a {type(obj).__name__} whose members the frame changed")
        try:
            item = obj[key]
        except (IndexError, KeyError) as error:
            if type(obj) in (list, tuple, dict, str, bytes, range, collections.deque):
                from dynamo_capture.errors import ExceptionRaised

                # the container's length or keys are guarded: the code raises this
                raise ExceptionRaised(PythonValue(type(error)(*error.args))) from None
            raise Unsupported(f"{type(error).__name__} while capturing: {error}") from error
        except TypeError as error:
            raise Unsupported(f"{type(error).__name__} while capturing: {error}") from error
        if isinstance(key, slice):
            if isinstance(obj, torch.nn.Module | list | tuple) and not isinstance(obj, torch.Size):
                positions = range(len(obj))[key]
                items = [_real_get_item(tx, container, PythonValue(i)) for i in positions]
                if type(obj) in (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ParameterList):
                    # a new container of the same submodules or parameters (a module as
                    # in eager): its items are the values just read, with their sources
                    tx.ctx.sliced_modules[id(item)] = (item, items)
                    # nn.Module.__init__ logs its API use: kept as torch.compile keeps it
                    tx.ctx.graph.call_function(torch._C._log_api_usage_once, ("python.nn_module",))
                    return PythonValue(item)
                return ListValue(items) if isinstance(obj, list) else TupleValue(items)
            return PythonValue(item)
        sliced = _sliced_items(tx, obj)
        if sliced is not None:
            return sliced[operator.index(key)]
        if isinstance(obj, torch.nn.ModuleDict | torch.nn.ModuleList | torch.nn.Sequential):
            names = list(obj._modules)
            name = key if isinstance(key, str) else names[operator.index(key)]
            return tx.ctx.wrap(item, _submodule_source(source, name, item))
        return tx.ctx.wrap(item, item_source(source, key))
    if isinstance(obj, type):
        return _class_subscript(tx, container, index)
    if type(obj).__module__ in ("typing", "types"):  # typing.Optional[int], List[int]
        try:
            return PythonValue(obj[as_constant(index)])
        except NotConstant:
            raise Unsupported("a typing subscript of values known only when it runs") from None
    return _dunder_call(tx, container, "__getitem__", [index])


def _outside_key(tx: Translator, key: Any, source: Any) -> Any:
    """A key of an outside dict as the frame's keys compare with it: a tensor (hashed by
    identity) as the IdentityKey of the input the frame read it as. A tensor the frame
    has not read breaks: no value of the frame could be that key, but its item could not
    be read either (it has no source)."""
    if not isinstance(key, torch.Tensor):
        return key
    known = tx.ctx.known_tensor(key)
    if known is None or known.source is None or source is None:
        raise Unsupported("reading a dict keyed by tensors the frame has not read")
    return IdentityKey(known)


def _outside_item_source(tx: Translator, source: Any, key: Any) -> Any:
    if isinstance(key, torch.Tensor):
        from dynamo_capture.sources import TensorKeySource

        return TensorKeySource(source, tx.ctx.known_tensor(key).source)
    return item_source(source, key)


def _tensor_keyed_item(tx: Translator, container: PythonValue, index: TensorValue) -> Value:
    """`state[param]` on an outside dict keyed by tensors (by identity): the item of an
    input tensor the dict holds, read through a source keyed by the tensor's source (its
    guards fail where the dict no longer holds that tensor). A tensor the frame made, or
    one the dict lacks (a defaultdict would add it), breaks."""
    from dynamo_capture.sources import TensorKeySource

    obj, source = container.obj, container.source
    real = next((tensor for _, tensor, value in tx.ctx.inputs if value is index), None)
    if source is None or index.source is None or real is None:
        raise Unsupported("indexing a Python container with a tensor")
    if not any(key is real for key in obj):
        raise Unsupported("indexing a dict with a tensor it does not hold")
    return tx.ctx.wrap(obj[real], TensorKeySource(source, index.source))


def _class_subscript(tx: Translator, cls_value: PythonValue, index: Value) -> Value:
    """cls[index]: a user class's __class_getitem__ inlined, a builtin generic (list[int],
    a typing generic) folded on a constant index."""
    import inspect

    cls = cls_value.obj
    static = inspect.getattr_static(cls, "__class_getitem__", None)
    method = static.__func__ if isinstance(static, classmethod) else static
    if isinstance(method, types.FunctionType):
        from dynamo_capture.calls import call

        tx.ctx.guards.class_attribute(cls, "__class_getitem__", method, bound=True)
        return call(tx, PythonValue(method), [cls_value, index], {})
    if static is None:
        import enum

        if isinstance(cls, enum.EnumMeta):  # Color["RED"]: a member by its name
            try:
                return PythonValue(cls[as_constant(index)])
            except KeyError as error:
                from dynamo_capture.errors import raised_by_python

                raise raised_by_python(error) from None
            except NotConstant:
                raise Unsupported(
                    f"{cls.__name__}[...] of a value known only when it runs"
                ) from None
        return _dunder_call(tx, cls_value, "__getitem__", [index])  # the metaclass's own
    try:
        return PythonValue(cls[as_constant(index)])
    except NotConstant:
        raise Unsupported(f"{cls.__name__}[...] of a value known only when it runs") from None


_BUILTIN_CONTAINER_CLASSES = frozenset(
    {tuple, list, dict, set, frozenset, torch.Size, collections.deque, collections.OrderedDict,
     collections.defaultdict}
)  # fmt: skip


_CONTAINER_BASES = (list, tuple, dict, set, frozenset, collections.deque)


def user_override(value: Value, name: str) -> types.FunctionType | None:
    """The Python method `name` of a user subclass of a builtin container, else None.

    `class Doubling(list): def __getitem__(self, i): ...` made in the frame is a
    ListValue whose `cls` is Doubling: its `d[i]`, `len(d)`, `x in d`, `for x in d`
    and operators run the subclass's methods, as eagerly.
    """
    if isinstance(value, TupleValue | ListValue | DictValue | SetValue):
        cls = value.cls
    elif isinstance(value, PythonValue) and isinstance(value.obj, _CONTAINER_BASES):
        cls = type(value.obj)  # one from outside the frame (an argument)
    else:
        return None
    if cls in _BUILTIN_CONTAINER_CLASSES or issubclass(cls, torch.Size):
        return None
    static = inspect.getattr_static(cls, name, None)
    return static if isinstance(static, types.FunctionType) else None


def _call_override(tx: Translator, method: Any, receiver: Value, args: list[Value]) -> Value:
    from dynamo_capture.calls import call

    return call(tx, PythonValue(method), [receiver, *args], {})


def _dunder_call(tx: Translator, receiver: Value, name: str, args: list[Value]) -> Value:
    from dynamo_capture.calls import call

    method = getattr(python_type_of(receiver), name, None)
    if isinstance(method, types.FunctionType):
        return call(tx, PythonValue(method), [receiver, *args], {})
    error = Unsupported(f"{name} of a {python_type_of(receiver).__name__}")
    error.eager_call = runs_eagerly_on_its_own(receiver)
    raise error


def set_item(tx: Translator, container: Value, index: Value, value: Value) -> None:
    """container[index] = value."""
    if tx.ctx.reading_ahead is not None:
        from dynamo_capture.lazy_iterators import check_side_effect

        check_side_effect(tx, "an item assignment")
    container = side_effects.for_write(tx, container)
    if isinstance(container, TensorValue):
        from dynamo_capture.torch_function_dispatch import dispatch_torch_function

        args = [container, index, value]
        if dispatch_torch_function(tx, torch.Tensor.__setitem__, args, {}) is not None:
            return
    override = user_override(container, "__setitem__")
    if override is not None:
        _call_override(tx, override, container, [index, value])
        return
    builtin_set_item(tx, container, index, value)


_MODULE_CONTAINERS = (torch.nn.ModuleDict, torch.nn.ModuleList, torch.nn.Sequential)


def builtin_set_item(tx: Translator, container: Value, index: Value, value: Value) -> None:
    """container[index] = value as the builtin type does it (dict.__setitem__ of a subclass)."""
    if _numpy_operand(container):
        from dynamo_capture.numpy_arrays import ndarray_set_item

        ndarray_set_item(tx, container, index, value)
        return
    if isinstance(container, TensorValue):
        tx.ctx.call(
            "call_function", operator.setitem, (container, index, value), {},
            allow_python_result=True,
        )  # fmt: skip
        return
    if isinstance(container, ListValue) and container.source is None:
        key = _index_constant(tx, index)
        if isinstance(key, slice):
            container.items[key] = sequence_items(tx, value)
        else:
            container.items[key] = value
        return
    if isinstance(container, DictValue) and container.source is None:
        container.items[_dict_key(tx, index)] = value
        return
    if isinstance(container, ObjectValue):
        _dunder_call(tx, container, "__setitem__", [index, value])
        return
    if isinstance(container, PythonValue) and type(container.obj) in _MODULE_CONTAINERS:
        # torch's own __setitem__ (add_module) traced: the write to the container's
        # `_modules` is replayed after the graph, reads before then see it (side_effects)
        _dunder_call(tx, container, "__setitem__", [index, value])
        return
    raise Unsupported(
        f"item assignment on a {python_type_of(container).__name__} that exists outside the "
        "frame (a side effect)"
    )


def _tensor_in_sequence(item: TensorValue, candidates: list[Value]) -> bool:
    """`tensor in sequence`: Python checks `is`, then `==`, item by item; an `==` between
    two tensors is data-dependent (and raises eagerly for more than one element)."""
    for candidate in candidates:
        if candidate is item:
            return True
        if isinstance(candidate, TensorValue):
            raise Unsupported("`in` compares two different tensors with == (data-dependent)")
        if isinstance(candidate, PythonValue) and candidate.obj is None:
            continue  # Tensor.__eq__(None) is False
        raise Unsupported(f"`in` compares a tensor with a {python_type_of(candidate).__name__}")
    return False


def contains(tx: Translator, item: Value, container: Value) -> bool:
    """item in container, for capture-time keys and items."""
    container = side_effects.current(tx, container)
    override = user_override(container, "__contains__")
    if override is not None:
        return truth(tx, _call_override(tx, override, container, [item]))
    return builtin_contains(tx, item, container)


def builtin_contains(tx: Translator, item: Value, container: Value) -> bool:
    """item in container as the builtin type does it (list.__contains__ of a subclass)."""
    if isinstance(item, TensorValue | ObjectValue | TupleValue) and isinstance(
        container, DictValue | SetValue
    ):
        return hashable_key(item) in container.items  # tensors hash by identity
    if isinstance(item, TensorValue) and isinstance(container, TupleValue | ListValue):
        return _tensor_in_sequence(item, container.items)
    if isinstance(container, ObjectValue):
        method = getattr(container.cls, "__contains__", None)
        if isinstance(method, types.FunctionType):
            from dynamo_capture.calls import call

            return truth(tx, call(tx, PythonValue(method), [container, item], {}))
    if isinstance(container, DictValue) and isinstance(item, TensorValue):
        return _dict_key(tx, item) in container.items  # tensors hash by identity
    if isinstance(container, TensorValue) or isinstance(item, TensorValue):
        raise Unsupported("`in` on tensors is data-dependent")
    if isinstance(container, DictValue):
        return _constant_in(_index_constant(tx, item), container.items)
    if isinstance(container, DictViewValue) and container.kind == "keys":
        return contains(tx, item, container.mapping)
    if isinstance(container, PythonValue) and isinstance(container.obj, torch.nn.ModuleDict):
        key = _index_constant(tx, item)
        written = side_effects.module_members_written(tx, container.obj)
        if written is not None:  # `heads[name] = ...` earlier in the frame
            return _constant_in(key, written.items)
        guard_module_children(tx, container)  # the answer holds for these names only
        return _constant_in(key, container.obj)
    if isinstance(container, PythonValue) and isinstance(container.obj, dict):
        return _constant_in(_index_constant(tx, item), container.obj)
    if isinstance(container, PythonValue) and isinstance(container.obj, os._Environ):
        from dynamo_capture.methods import fold_environ_read

        return truth(tx, fold_environ_read(tx, container, "__contains__", [item]))
    if isinstance(container, PythonValue) and (
        isinstance(container.obj, str | bytes | range | set | frozenset)
        or _enum_method(container.obj, "__contains__")
    ):
        return _constant_in(_index_constant(tx, item), container.obj)
    try:
        key = as_constant(item)
    except NotConstant:
        for candidate in _candidates(tx, container):
            if isinstance(candidate, TensorValue) or _identity_comparable(item, candidate):
                guard_identity(tx, item, candidate)
                if is_op(item, candidate):
                    return True
            elif is_op(item, candidate):  # the same object, equal before any __eq__
                return True
            elif _user_equal(tx, candidate, item):
                return True
        return False
    if is_symbolic_number(key) and isinstance(container, TupleValue | ListValue | PythonValue):
        matched = _symbolic_in(key, container)
        if matched is not None:
            return matched
    for candidate in _candidates(tx, container):
        if isinstance(candidate, TensorValue):
            raise Unsupported("`in` over a sequence of tensors is data-dependent")
        try:
            if as_constant(candidate) == key:
                return True
        except NotConstant:
            continue
    return False


def _symbolic_in(key: Any, container: Value) -> bool | None:
    """`n in (4, 8)` for a symbolic number and a tuple or list of plain numbers: one guard
    on the whole test (`Eq(s0, 4) | Eq(s0, 8)`), as torch.compile guards it, not one a
    candidate (which fixes `n` to the one it equals). None where an item is not a number."""
    if isinstance(container, PythonValue):
        if type(container.obj) not in (tuple, list):
            return None
        items = list(container.obj)
    else:
        try:
            items = [as_constant(item) for item in container.items]
        except NotConstant:
            return None
    if not items or not all(type(item) in (int, float, bool) for item in items):
        return None
    return bool(functools.reduce(operator.or_, [key == item for item in items]))


def _constant_in(key: Any, container: Any) -> bool:
    """`key in container` for a constant key: the TypeError eager raises (an unhashable
    key of a dict, an int tested in a str) is raised in the captured code."""
    try:
        return key in container
    except TypeError as error:
        from dynamo_capture.errors import raised_by_python

        raise raised_by_python(error) from None


def _candidates(tx: Translator, container: Value) -> collections.abc.Iterator[Value]:
    """The items `in` compares against: an iterator's read one at a time, so a match
    leaves the rest unread, as eagerly."""
    if isinstance(container, IteratorValue):
        from dynamo_capture.lazy_iterators import next_item

        while (item := next_item(tx, container)) is not None:
            yield item
        return
    yield from sequence_items(tx, container)


def is_null(value: Value) -> bool:
    return value is NULL


def describe(value: Value) -> str:
    """A short description for messages."""
    if isinstance(value, PythonValue):
        obj = value.obj
        name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
        return name if isinstance(name, str) else type(obj).__name__
    if isinstance(value, BuiltinMethodValue):
        return f"{python_type_of(value.receiver).__name__}.{value.name}"
    if isinstance(value, ContextValue):
        return f"context manager {value.kind}"
    return type(value).__name__
