"""Python builtins (and operator/functools/math functions) on Values: one handler each.

`BUILTIN_HANDLERS` maps the real builtin to `handler(tx, args, kwargs) -> Value`.
Builtins not in the table are folded when every argument is a constant and the
builtin is known to be pure (`PURE_FUNCTIONS`); anything else is Unsupported.
"""

from __future__ import annotations

import abc
import builtins
import cmath
import collections
import copy
import functools
import inspect
import itertools
import math
import operator
import os
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture import side_effects
from dynamo_capture.attributes import get_attr, set_attr
from dynamo_capture.errors import ExceptionRaised, Unsupported, raised_by_python
from dynamo_capture.lazy_iterators import (
    is_lazy,
    lazy_enumerate,
    lazy_filter,
    lazy_map,
    lazy_zip,
    next_item,
)
from dynamo_capture.operations import (
    COMPARE,
    NotConstant,
    as_constant,
    binary_op,
    compare_op,
    constant_arguments,
    contains,
    dict_items,
    get_item,
    get_iter,
    guard_identity,
    guard_module_children,
    guard_same_object,
    hashable_key,
    key_value,
    python_type_of,
    sequence_items,
    set_item,
    truth,
    unary_op,
    user_override,
)
from dynamo_capture.output_graph import TRUSTED_MODULES, is_constant
from dynamo_capture.state import is_compiling, is_exporting
from dynamo_capture.sym_numbers import (
    SYM_FUNCTIONS,
    concrete_numbers,
    is_symbolic_number,
    recomputed_from_values,
)
from dynamo_capture.tensor_extremes import ChoiceValue, tensor_extreme
from dynamo_capture.values import (
    BuiltinMethodValue,
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

__all__ = ["BUILTIN_HANDLERS", "PURE_FUNCTIONS", "call_c_function", "sorted_values"]

Handler = Callable[["Translator", list[Value], dict[str, Value]], Value]
BUILTIN_HANDLERS: dict[Any, Handler] = {}


def handles(*functions: Any) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for fn in functions:
            if fn in BUILTIN_HANDLERS:
                raise RuntimeError(f"two builtin handlers for {fn!r}")
            BUILTIN_HANDLERS[fn] = handler
        return handler

    return register


def _fold(fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    try:
        real_args, real_kwargs = constant_arguments(args, kwargs)
    except NotConstant:
        name = getattr(fn, "__name__", fn)
        raise Unsupported(f"{name}() on values known only when it runs") from None
    try:
        result = fn(*real_args, **real_kwargs)
        where = f"{getattr(fn, '__name__', fn)}() of a symbolic number"
        if not isinstance(result, bool) and not is_symbolic_number(result):
            if any(is_symbolic_number(a) for a in (*real_args, *real_kwargs.values())):
                # a plain result from a symbolic number (`str(n)`): from its guarded value
                result = fn(*concrete_numbers(real_args, where), **concrete_numbers(real_kwargs))
        # text naming symbolic sizes inside an argument (`repr(x.shape)`): from their values
        return PythonValue(recomputed_from_values(fn, real_args, real_kwargs, result, where))
    except (ValueError, TypeError, ArithmeticError, LookupError) as error:
        from dynamo_capture.errors import raised_by_python

        raise raised_by_python(error) from None  # `int("x")`: the code raises it
    except Exception as error:
        raise Unsupported(
            f"{getattr(fn, '__name__', fn)}() raised {type(error).__name__}: {error}"
        ) from error


@handles(is_compiling)
def _is_compiling(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    tx.ctx.read_compiling_state = True
    return PythonValue(True)


@handles(is_exporting)
def _is_exporting(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return PythonValue(False)


@handles(builtins.hash)
def _hash(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """hash() of an object made in the frame whose class defines `__hash__` in Python (a
    frozen dataclass's, over its fields), or of a tuple holding such objects: the methods
    traced, their results checked as eagerly (ints); else folded on a constant."""
    if len(args) == 1 and not kwargs and _hashed_by_python(args[0]):
        return PythonValue(_hash_of(tx, args[0]))
    return call_c_function(tx, builtins.hash, args, kwargs)


class _HashedAs:
    """A stand-in hashing as a value already hashed: a tuple of them hashes as the tuple
    of the values (a tuple's hash combines its items' hashes alone)."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def __hash__(self) -> int:
        return self.value


def _hashed_by_python(value: Value) -> bool:
    if isinstance(value, ObjectValue):
        return isinstance(getattr(value.cls, "__hash__", None), types.FunctionType)
    if isinstance(value, TupleValue) and value.cls is tuple:
        return any(_hashed_by_python(item) for item in value.items)
    return False


def _hash_of(tx: Translator, value: Value) -> int:
    from dynamo_capture.calls import call

    if isinstance(value, TupleValue) and value.cls is tuple:
        return hash(tuple(_HashedAs(_hash_of(tx, item)) for item in value.items))
    if not (isinstance(value, ObjectValue) and _hashed_by_python(value)):
        try:
            return hash(as_constant(value))
        except NotConstant as error:
            raise Unsupported("hash() on values known only when it runs") from error
    result = call(tx, PythonValue(value.cls.__hash__), [value], {})
    try:
        number = as_constant(result)
    except NotConstant as error:
        raise Unsupported("hash() whose __hash__ gives a value known only when it runs") from error
    if not isinstance(number, int):
        raise raised_by_python(TypeError("__hash__ method should return an integer"))
    return hash(number)


@handles(builtins.len)
def _len(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.calls import call

    (value,) = args
    value = side_effects.current(tx, value)
    override = user_override(value, "__len__")
    if override is not None:
        return call(tx, PythonValue(override), [value], {})
    if isinstance(value, TensorValue):
        from dynamo_capture.torch_function_dispatch import call_with_overrides

        handled = call_with_overrides(tx, torch.Tensor.__len__, [value], {})
        if handled is not None:  # Tensor.__len__ hands itself to an override
            return handled
        if value.data_dependent_shape:
            raise Unsupported("len() of a tensor whose shape depends on data")
        if value.example.dim() == 0:
            raise Unsupported("len() of a 0-d tensor")
        return PythonValue(value.example.shape[0])
    if isinstance(value, TupleValue | ListValue | DictValue | SetValue):
        return PythonValue(len(value.items))
    if isinstance(value, DictViewValue):
        return PythonValue(len(sequence_items(tx, value)))
    if isinstance(value, IteratorValue):
        raise Unsupported("len() of an iterator")
    method = getattr(python_type_of(value), "__len__", None)
    if isinstance(method, types.FunctionType):
        return call(tx, PythonValue(method), [value], {})
    if (
        isinstance(value, PythonValue)
        and isinstance(value.obj, torch.nn.Module)
        and method is not None
    ):
        written = side_effects.module_members_written(tx, value.obj)
        if written is not None:  # items added in the frame (a ModuleList's `+`, append)
            return PythonValue(len(written.items))
        guard_module_children(tx, value)
        return PythonValue(len(value.obj))
    if isinstance(value, PythonValue) and (
        value.source is None  # made at capture time from guarded values
        or isinstance(
            value.obj, list | tuple | dict | str | bytes | range | set | frozenset | torch.Size
        )
    ):
        try:
            return PythonValue(len(value.obj))  # guarded on length (or value) when wrapped
        except TypeError as error:  # `len(5)`: the code raises it
            from dynamo_capture.errors import raised_by_python

            raise raised_by_python(error) from None
    if method is None and isinstance(value, PythonValue | ObjectValue):
        from dynamo_capture.errors import raised_by_python

        # `len(5)`: the type (guarded or made in the frame) has no __len__
        name = python_type_of(value).__name__
        raise raised_by_python(TypeError(f"object of type '{name}' has no len()"))
    error = Unsupported(f"len() of a {python_type_of(value).__name__}")
    error.eager_call = runs_eagerly_on_its_own(value)
    raise error


@handles(builtins.isinstance)
def _isinstance(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    value, classes = args
    try:
        real_classes = as_constant(classes)
    except NotConstant:
        if isinstance(classes, PythonValue):
            real_classes = classes.obj
        else:
            raise Unsupported("isinstance() with classes known only when it runs") from None
    kind = python_type_of(value)
    if isinstance(value, PythonValue) and kind is type(value.obj):
        return PythonValue(isinstance(value.obj, real_classes))
    for cls in _flat_classes(real_classes):
        if _is_instance_of(tx, value, kind, cls):
            return PythonValue(True)
    return PythonValue(False)


def _flat_classes(classes: Any) -> list[Any]:
    """The classes of isinstance's second argument (nested tuples flattened, in order)."""
    if isinstance(classes, tuple):
        return [cls for item in classes for cls in _flat_classes(item)]
    return [classes]


# the metaclass of torch.FloatTensor and the other legacy tensor types
_LEGACY_TENSOR_TYPE = type(torch.FloatTensor)
# metaclasses whose __instancecheck__ agrees with __subclasscheck__ on the value's type
_PLAIN_INSTANCECHECKS = (type, abc.ABCMeta, torch.nn.parameter._ParameterMeta)


def _is_instance_of(tx: Translator, value: Value, kind: type, cls: Any) -> bool:
    """isinstance(value, cls) for one class: a legacy tensor type (torch.FloatTensor)
    by the tensor's dtype, device and layout; a class whose metaclass defines its own
    __instancecheck__ in Python by calling it; any other by the value's type."""
    meta = type(cls)
    if meta is _LEGACY_TENSOR_TYPE:
        if not isinstance(value, TensorValue):
            return False
        example = value.example
        return (
            example.dtype == cls.dtype
            and example.device.type == ("cuda" if cls.is_cuda else "cpu")
            and (example.layout == torch.sparse_coo) == cls.is_sparse
        )
    check = inspect.getattr_static(meta, "__instancecheck__", None)
    if isinstance(check, types.FunctionType) and not issubclass(meta, _PLAIN_INSTANCECHECKS[1:]):
        from dynamo_capture.calls import call

        return truth(tx, call(tx, PythonValue(check), [PythonValue(cls), value], {}))
    return issubclass(kind, cls)


@handles(builtins.issubclass)
def _issubclass(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return PythonValue(
        issubclass(
            args[0].obj, args[1].obj if isinstance(args[1], PythonValue) else as_constant(args[1])
        )
    )  # type: ignore[attr-defined]


@handles(builtins.type)
def _type(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) == 3 and not kwargs:
        return _new_class(tx, *args)
    if len(args) != 1:
        raise Unsupported("type() with other than one or three arguments")
    return PythonValue(python_type_of(args[0]))


def _new_class(tx: Translator, name: Value, bases: Value, namespace: Value) -> Value:
    """type(name, bases, namespace): the class made now, once, where its namespace holds
    constants and plain functions and its bases run no code at its creation.

    NOTE: eagerly each call makes a new class; the compiled code holds this one. So it
    must not leave the compiled part (nor an instance of it), nor be written: the frame
    runs eagerly where it would (OutputPlan, set_attr)."""
    try:
        real_name = as_constant(name)
        real_bases = tuple(base.obj for base in sequence_items(tx, bases))  # type: ignore[attr-defined]
    except (NotConstant, AttributeError):
        raise Unsupported("type() with a name or bases known only when it runs") from None
    if not isinstance(real_name, str) or not isinstance(namespace, DictValue):
        raise Unsupported("type() with a name other than a str or a namespace other than a dict")
    for base in real_bases:
        if not isinstance(base, type) or type(base) is not type:
            raise Unsupported("type() with bases of another metaclass than type")
        hook = inspect.getattr_static(base, "__init_subclass__", None)
        if hook is not object.__dict__["__init_subclass__"]:
            raise Unsupported("type() with a base whose __init_subclass__ runs code")
    real_namespace = {}
    for key in namespace.items:
        item = namespace.items[key]
        real_key = as_constant(key_value(key))
        real_namespace[real_key] = _class_member(item)
    cls = type(real_name, real_bases or (object,), real_namespace)
    tx.ctx.classes_made.append(cls)
    return PythonValue(cls)


def _class_member(value: Value) -> Any:
    """The real object a namespace value of a class made in the frame stands for: an
    immutable constant, or a function made in the frame without cells."""
    if isinstance(value, FunctionValue):
        if value.closure or value.attrs or value.annotations is not None:
            raise Unsupported("type() with a function that has cells or attributes")
        try:
            defaults = tuple(as_constant(d) for d in value.defaults) or None
            kwdefaults = {k: as_constant(v) for k, v in value.kwdefaults.items()} or None
        except NotConstant:
            raise Unsupported("type() with a function whose defaults are not constants") from None
        function = types.FunctionType(value.code, value.globals, value.name, defaults)
        function.__kwdefaults__ = kwdefaults
        function.__qualname__ = value.code.co_qualname
        return function
    if isinstance(value, PythonValue) and (
        is_constant(value.obj) or isinstance(value.obj, types.FunctionType)
    ):
        if not isinstance(value.obj, list | dict | set):
            return value.obj
    raise Unsupported("type() with a namespace value other than a constant or function")


@handles(builtins.getattr)
def _getattr(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    name = as_constant(args[1])
    try:
        return get_attr(tx, args[0], name)
    except AttributeError:
        _guard_missing(tx, args[0], name)
        if len(args) > 2:
            return args[2]
        raise missing_attribute(tx, args[0], name) from None
    except ExceptionRaised as raised:  # a __getattr__ the code defines raised it
        if len(args) > 2 and _is_attribute_error(raised):
            return args[2]
        raise


@handles(builtins.hasattr)
def _hasattr(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if isinstance(args[0], PartialValue):
        # a partial made in the frame has only its class's attributes (its __dict__ is empty)
        return PythonValue(hasattr(functools.partial(print), as_constant(args[1])))
    return PythonValue(attr_or_missing(tx, args[0], as_constant(args[1])) is not None)


def attr_or_missing(tx: Translator, value: Value, name: str) -> Value | None:
    """`value.name`, or None where reading it raises AttributeError (as hasattr and a
    class pattern's reads take it: the attribute is missing)."""
    try:
        return get_attr(tx, value, name)
    except AttributeError:
        _guard_missing(tx, value, name)
        return None
    except ExceptionRaised as raised:  # a __getattr__ the code defines raised it
        if _is_attribute_error(raised):
            return None
        raise


def _is_attribute_error(raised: ExceptionRaised) -> bool:
    """Whether the captured code raised an AttributeError, which getattr with a default
    and hasattr take as a missing attribute (what they do eagerly with a user
    __getattr__ or property that raises it)."""
    return isinstance(raised.value, PythonValue) and isinstance(raised.value.obj, AttributeError)


def missing_attribute(
    tx: Translator, value: Value, name: str, error: AttributeError | None = None
) -> Unsupported:
    """The AttributeError the code raises reading `name` of `value` (a real object, its
    lack of the attribute guarded, or one made in the frame, whose attributes capture
    knows); a break for other values."""
    _guard_missing(tx, value, name)
    if isinstance(value, PythonValue | ObjectValue | TupleValue | ListValue | DictValue | SetValue):
        # a container made in the frame: capture holds its attributes (get_attr)
        from dynamo_capture.errors import raised_by_python
        from dynamo_capture.operations import python_type_of

        owner = python_type_of(value).__name__
        message = str(error) if error is not None else ""
        return raised_by_python(
            AttributeError(message or f"{owner!r} object has no attribute {name!r}")
        )
    if (
        isinstance(value, TensorValue)
        and value.python_type in (torch.Tensor, torch.nn.Parameter)
        and not any(key[1] == name for key in tx.ctx.attr_writes)
    ):
        # a plain tensor's missing attribute (an input's absence guarded above); one the
        # frame may have set, or a subclass's (its own __getattr__), breaks
        from dynamo_capture.errors import raised_by_python

        owner = value.python_type.__name__
        return raised_by_python(AttributeError(f"{owner!r} object has no attribute {name!r}"))
    return Unsupported(f"AttributeError while capturing: no attribute {name!r}")


def _guard_missing(tx: Translator, value: Value, name: str) -> None:
    """Capture relied on an outside object lacking an attribute: guard that it still does."""
    if isinstance(value, PythonValue | TensorValue) and value.source is not None:
        tx.ctx.guards.has_attr(value.source, name, False)


@handles(builtins.setattr)
def _setattr(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    set_attr(tx, args[0], as_constant(args[1]), args[2])
    return PythonValue(None)


@handles(object.__setattr__)
def _object_setattr(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    set_attr(tx, args[0], as_constant(args[1]), args[2], raw=True)
    return PythonValue(None)


@handles(object.__new__)
def _object_new(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    cls = as_constant(args[0])
    if (len(args) > 1 or kwargs) and (
        cls.__new__ is not object.__new__ or cls.__init__ is object.__init__
    ):
        error = TypeError(f"{cls.__name__}() takes no arguments")
        if cls.__new__ is not object.__new__:
            error = TypeError(
                "object.__new__() takes exactly one argument (the type to instantiate)"
            )
        raise raised_by_python(error)
    return ObjectValue(cls)


@handles(builtins.callable)
def _callable(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    value = args[0]
    if isinstance(value, PythonValue):
        return PythonValue(callable(value.obj))
    if isinstance(value, FunctionValue | MethodValue | PartialValue | BuiltinMethodValue):
        return PythonValue(True)
    if isinstance(value, IteratorValue):
        return PythonValue(False)  # no iterator type defines __call__
    if isinstance(value, ContextValue):
        # torch's grad/autocast/inference modes and contextmanager objects decorate
        return PythonValue(value.kind not in ("null", "torch_function"))
    # NOTE: an instance is callable when its class (not the class's metaclass) defines
    # __call__ somewhere in its MRO; `getattr(cls, "__call__")` would find type.__call__.
    cls = python_type_of(value)
    return PythonValue(any("__call__" in vars(klass) for klass in cls.__mro__))


@handles(builtins.iter)
def _iter(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) == 2:  # iter(function, sentinel)
        if isinstance(args[0], PythonValue) and not callable(args[0].obj):
            raise Unsupported("iter(function, sentinel) of a value that is not callable")
        from dynamo_capture.lazy_iterators import lazy_callable

        return lazy_callable(tx, args[0], args[1])
    return get_iter(tx, args[0])


@handles(builtins.next)
def _next(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.methods import call_method

    iterator = args[0]
    next_method = (
        getattr(iterator.cls, "__next__", None) if isinstance(iterator, ObjectValue) else None
    )
    if isinstance(next_method, types.FunctionType):
        from dynamo_capture.calls import call

        try:
            return call(tx, PythonValue(next_method), [iterator], {})
        except Unsupported as error:
            if error.stop_iteration and len(args) > 1:
                return args[1]
            raise
    if not isinstance(iterator, IteratorValue):
        raise Unsupported(f"next() of a {python_type_of(iterator).__name__}")
    return call_method(tx, iterator, "__next__", args[1:], {})


@handles(builtins.enumerate)
def _enumerate(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    start = (
        as_constant(args[1]) if len(args) > 1 else as_constant(kwargs.get("start", PythonValue(0)))
    )
    if is_lazy(args[0]):
        enumerated = lazy_enumerate(tx, args[0], start)
        enumerated.kind = "enumerate_iterator"
        return enumerated
    items = sequence_items(tx, args[0])
    return IteratorValue(
        [TupleValue([PythonValue(start + i), item]) for i, item in enumerate(items)],
        kind=_enumerate_kind(args[0]),
    )


def _enumerate_kind(value: Value) -> str:
    """An enumerate of a range, of a plain list or tuple, of another iterator (a zip, a
    generator), of a ModuleList or Sequential, or of anything else: where a
    data-dependent jump in its loop cuts the frame, torch.compile hands the first and
    fourth on and runs the frame eagerly for the second and third
    (capture._loop_iterators_handed_on, capture.loop_iterator_not_resumed)."""
    obj = value.obj if isinstance(value, PythonValue) else None
    if type(obj) is range:
        return "enumerate_range"
    if isinstance(value, IteratorValue):
        return "enumerate_iterator"
    if isinstance(obj, torch.nn.ModuleList | torch.nn.Sequential):
        return "enumerate_modules"  # handed on as the (index, module) pairs left
    if type(obj) in (list, tuple) or (
        isinstance(value, ListValue | TupleValue) and value.cls in (list, tuple)
    ):
        return "enumerate_sequence"
    return "enumerate"


def _columns(tx: Translator, args: list[Value]) -> list[list[Value]]:
    """The items of each argument of zip or map; endless iterators give as many as the rest."""
    from dynamo_capture.polyfills import endless_item

    endless = [isinstance(a, IteratorValue) and a.endless is not None for a in args]
    if not any(endless):
        return [sequence_items(tx, arg) for arg in args]
    if all(endless):
        raise Unsupported("zip() or map() of endless iterators only (itertools.count, repeat)")
    columns: list[list[Value] | None] = [
        None if is_endless else sequence_items(tx, arg) for arg, is_endless in zip(args, endless)
    ]
    length = min(len(column) for column in columns if column is not None)
    for index, arg in enumerate(args):
        if columns[index] is None:
            column = []
            for _ in range(length):
                if arg.position == len(arg.items):
                    endless_item(arg)
                arg.position += 1
                column.append(arg.items[arg.position - 1])
            columns[index] = column
    return columns  # type: ignore[return-value]


@handles(builtins.zip)
def _zip(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    strict = as_constant(kwargs["strict"]) if "strict" in kwargs else False
    if any(is_lazy(arg) for arg in args):
        return lazy_zip(tx, args, strict)
    columns = _columns(tx, args)
    if strict and len({len(column) for column in columns}) > 1:
        raise Unsupported("zip(strict=True) on sequences of different lengths raises ValueError")
    rows = [TupleValue(list(row)) for row in zip(*columns)]
    zipped = (tuple(args), strict) if all(_sequence_value(arg) for arg in args) else None
    return IteratorValue(rows, kind="zip", zipped=zipped)


def _sequence_value(value: Value) -> bool:
    """Whether `value` is a plain list, tuple or range (a zip over it is made again over
    it, where a part ends inside the zip's loop)."""
    if isinstance(value, ListValue | TupleValue):
        return value.cls in (list, tuple)
    return isinstance(value, PythonValue) and type(value.obj) in (list, tuple, range)


# the kinds of IteratorValue whose eager iterator has no __reversed__
_NOT_REVERSIBLE = (
    "generator", "map", "filter", "zip", "range", "tuple", "enumerate", "enumerate_range",
    "enumerate_sequence", "enumerate_iterator", "enumerate_modules", "dict", "modules",
    "reversed_fixed",
)  # fmt: skip


@handles(builtins.reversed)
def _reversed(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.calls import call

    (value,) = args
    if isinstance(value, IteratorValue) and value.kind in _NOT_REVERSIBLE:
        name = python_type_of(value).__name__
        raise ExceptionRaised(PythonValue(TypeError(f"'{name}' object is not reversible")))
    own = _user_dunder(tx, value, "__reversed__")
    if own is not None:
        return call(tx, PythonValue(own), [value], {})
    if isinstance(value, ObjectValue | PythonValue) and _user_dunder(tx, value, "__getitem__"):
        # the sequence protocol: __len__, then items len-1 ... 0
        length = as_constant(_len(tx, [value], {}))
        return IteratorValue([get_item(tx, value, PythonValue(i)) for i in reversed(range(length))])
    if _reversed_kind(value) == "reversed_fixed":
        from dynamo_capture.lazy_iterators import reversed_mapping_iterator
        from dynamo_capture.operations import watched_mapping

        watched = watched_mapping(tx, side_effects.current(tx, value))
        if watched is not None and watched[1] != "set":  # a write while it runs raises
            return reversed_mapping_iterator(tx, *watched)
    return IteratorValue(list(reversed(sequence_items(tx, value))), kind=_reversed_kind(value))


def _reversed_kind(value: Value) -> str:
    """ "reversed_fixed" for reversed() of a dict or one of its views, whose keys cannot
    change while it is read (eagerly a change ends the loop with an error): a loop over
    it is resumed inside with the items left (capture._rebuilt_as_eager), as
    torch.compile; "iter" for any other (a list's reversed iterator reads the list as it
    is then; torch.compile reads a tuple's through an index of its own)."""
    obj = value.obj if isinstance(value, PythonValue) else None
    fixed = type(obj) in (dict, collections.OrderedDict) or (
        isinstance(value, DictValue) and value.cls is dict
    )
    return "reversed_fixed" if fixed or isinstance(value, DictViewValue) else "iter"


@handles(builtins.map)
def _map(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if not args[1:]:
        raise ExceptionRaised(PythonValue(TypeError("map() must have at least two arguments.")))
    if sum(isinstance(a, IteratorValue) and a.endless is not None for a in args[1:]) == len(
        args[1:]
    ):
        raise Unsupported("map() of endless iterators only (itertools.count, repeat)")
    return lazy_map(tx, args[0], args[1:])  # the function runs as each item is read


@handles(builtins.filter)
def _filter(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return lazy_filter(tx, args[0], args[1])  # the predicate runs as each item is read


@handles(builtins.list)
def _list(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return ListValue(sequence_items(tx, args[0]) if args else [])


@handles(builtins.tuple)
def _tuple(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return TupleValue(sequence_items(tx, args[0]) if args else [])


@handles(collections.OrderedDict)
def _ordered_dict(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.methods import update_items

    items = update_items(tx, collections.OrderedDict, "construct", args, kwargs)
    return DictValue(items, collections.OrderedDict)


@handles(builtins.dict)
def _dict(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.methods import update_items

    return DictValue(update_items(tx, dict, "construct", args, kwargs))


def _fromkeys(cls: type) -> Handler:
    """cls.fromkeys(iterable, value=None) of dict, OrderedDict and defaultdict (whose
    default_factory is None): keys known at capture time, any value."""
    # dict's takes its arguments by position only; OrderedDict's by name too
    names = ("iterable", "value") if cls is collections.OrderedDict else ()

    def fromkeys(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
        bound = list(args) + [kwargs[name] for name in names[len(args) :] if name in kwargs]
        if set(kwargs) - set(names[len(args) :]) or not 1 <= len(bound) <= 2:
            raise Unsupported(f"{cls.__name__}.fromkeys with unknown arguments")
        fill = bound[1] if len(bound) == 2 else PythonValue(None)
        try:
            keys = [_enum_or_constant(key) for key in sequence_items(tx, bound[0])]
        except NotConstant as error:
            raise Unsupported(f"{cls.__name__}.fromkeys of keys known only when it runs") from error
        attrs = {"default_factory": PythonValue(None)} if cls is collections.defaultdict else {}
        return DictValue(dict.fromkeys(keys, fill), cls, attrs=attrs)

    return fromkeys


for _cls in (dict, collections.OrderedDict, collections.defaultdict):
    BUILTIN_HANDLERS[_cls.fromkeys] = _fromkeys(_cls)


def _enum_or_constant(value: Value) -> Any:
    """A constant, or an enum member (Python's or a pybind11 enum's, as torch's SDPBackend)."""
    if isinstance(value, PythonValue) and hasattr(type(value.obj), "__members__"):
        return value.obj
    return as_constant(value)


@handles(builtins.set)
def _set(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    items = sequence_items(tx, args[0]) if args else []
    return SetValue({hashable_key(item) for item in items})


@handles(builtins.frozenset)
def _frozenset(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    items = sequence_items(tx, args[0]) if args else []
    return SetValue({hashable_key(item) for item in items}, cls=frozenset)


@handles(builtins.bool)
def _bool(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return PythonValue(truth(tx, args[0]) if args else False)


def _scalar_fold(fn: Any) -> Handler:
    def fold(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if any(isinstance(arg, TensorValue) for arg in args):
            raise Unsupported(
                f"{fn.__name__}() of a tensor turns tensor data into a Python value (data-dependent)"
            )
        return _fold(fn, args, kwargs)

    return fold


for _fn in (builtins.int, builtins.float, builtins.str, builtins.complex):
    BUILTIN_HANDLERS[_fn] = _scalar_fold(_fn)


@handles(builtins.abs)
def _abs(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if isinstance(args[0], TensorValue):
        return unary_op(tx, operator.abs, args[0])
    return _number_call(tx, abs, args, kwargs)


def _number_call(tx: Translator, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """fn(*args) on numbers: folded, or on symbolic numbers the sym function, recorded.

    `float(n)`, `math.sqrt(d)`, `int(d / 2)` on sizes stay symbolic (torch.sym_float,
    torch._sym_sqrt, ...) instead of turning the size into a guarded constant.
    """
    try:
        real_args, real_kwargs = constant_arguments(args, kwargs)
    except NotConstant:
        return _fold(fn, args, kwargs)  # raises Unsupported, naming fn
    symbolic = any(is_symbolic_number(arg) for arg in real_args)
    if real_kwargs or not symbolic or tx.ctx.shape_env is None:
        return _fold(fn, args, kwargs)
    target = SYM_FUNCTIONS[fn]
    result = target(*real_args)
    tx.ctx.sym_numbers.record(result, target, tuple(real_args))
    return PythonValue(result)


def _number_function(fn: Any) -> Handler:
    def handler(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if fn in (builtins.float, builtins.int) and len(args) == 1 and not kwargs:
            from dynamo_capture.numpy_arrays import numpy_scalar_to_number

            number = numpy_scalar_to_number(tx, args[0], fn)
            if number is not None:
                return number
        if any(isinstance(arg, TensorValue) for arg in args):
            raise Unsupported(
                f"{fn.__name__}() of a tensor turns tensor data into a Python value (data-dependent)"
            )
        return _number_call(tx, fn, args, kwargs)

    return handler


def _extreme(symbol: str, name: str) -> Handler:
    def pick(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
        items = sequence_items(tx, args[0]) if len(args) == 1 else list(args)
        key = kwargs.get("key")
        if not items:
            if "default" in kwargs:
                return kwargs["default"]
            raise Unsupported(f"{name}() of an empty sequence raises ValueError")
        if key is None and _symbolic_numbers_of_one_kind(items):
            # NOTE: as torch.compile, max/min of symbolic numbers is torch.sym_max/sym_min,
            # no guard on which is larger (all ints or all floats: the result's type is
            # the same whichever item wins)
            target = torch.sym_max if name == "max" else torch.sym_min
            result = items[0].obj
            for item in items[1:]:
                args = (result, item.obj)
                result = target(*args)
                tx.ctx.sym_numbers.record(result, target, args)
            return PythonValue(result)
        if key is None and any(isinstance(item, TensorValue | ChoiceValue) for item in items):
            choice = tensor_extreme(tx, name, items)
            if choice is not None:
                return choice
        try:
            real = [as_constant(item) for item in items]
            keys = real if key is None else None
        except NotConstant:
            keys = None
        if keys is not None:
            best = getattr(builtins, name)(range(len(real)), key=lambda i: real[i])
            return items[best]
        from dynamo_capture.calls import call

        best_item = items[0]
        best_key = best_item if key is None else call(tx, key, [best_item], {})
        for item in items[1:]:
            item_key = item if key is None else call(tx, key, [item], {})
            if truth(tx, compare_op(tx, symbol, item_key, best_key)):
                best_item, best_key = item, item_key
        return best_item

    return pick


def _symbolic_numbers_of_one_kind(items: list[Value]) -> bool:
    """Items that are all ints (or all floats), a symbolic one among them."""
    numbers = [item.obj for item in items if isinstance(item, PythonValue)]
    if len(numbers) != len(items) or not any(is_symbolic_number(n) for n in numbers):
        return False
    kinds = {
        int
        if type(n) in (int, torch.SymInt)
        else float
        if type(n) in (float, torch.SymFloat)
        else None
        for n in numbers
    }
    return len(kinds) == 1 and None not in kinds


BUILTIN_HANDLERS[builtins.min] = _extreme("<", "min")
BUILTIN_HANDLERS[builtins.max] = _extreme(">", "max")


@handles(builtins.sum)
def _sum(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    total = args[1] if len(args) > 1 else kwargs.get("start", PythonValue(0))
    for item in sequence_items(tx, args[0]):
        total = _running_total(tx, binary_op(tx, operator.add, total, item))
    return total


def _running_total(tx: Translator, total: Value) -> Value:
    """A partial result of sum() or functools.reduce(), its node named `value` as the
    running total of torch.compile's functools.reduce polyfill (its sum is that reduce
    of operator.add) names it."""
    from dynamo_capture.graph_printouts import name_stored_node

    if isinstance(total, TensorValue):
        name_stored_node(total.node, "value", tx.ctx.named_nodes)
    return total


@handles(builtins.any)
def _any(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    iterator = get_iter(tx, args[0])
    while (item := next_item(tx, iterator)) is not None:
        if truth(tx, item):
            return PythonValue(True)  # the rest not read, as eagerly
    return PythonValue(False)


@handles(builtins.all)
def _all(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    iterator = get_iter(tx, args[0])
    while (item := next_item(tx, iterator)) is not None:
        if not truth(tx, item):
            return PythonValue(False)  # the rest not read, as eagerly
    return PythonValue(True)


class _Opaque:
    """A sort key part known only when the code runs: comparing it is Unsupported, but
    for instances of user classes, which `sorted` compares with their own `__lt__`,
    traced (functools.cmp_to_key's keys)."""

    __slots__ = ("tx", "value")

    def __init__(self, tx: Translator | None = None, value: Value | None = None) -> None:
        self.tx, self.value = tx, value

    def _fail(self, other: Any) -> bool:
        raise Unsupported("sorting compares values known only when the code runs")

    def __lt__(self, other: Any) -> bool:
        if self.tx is None or not isinstance(other, _Opaque) or other.value is None:
            return self._fail(other)
        from dynamo_capture.operations import binary_op, truth

        return truth(self.tx, binary_op(self.tx, operator.lt, self.value, other.value))

    __gt__ = __le__ = __ge__ = __eq__ = _fail
    __hash__ = None  # type: ignore[assignment]


def _sort_key(value: Value, tx: Translator | None = None) -> Any:
    try:
        return as_constant(value)
    except NotConstant:
        if isinstance(value, TupleValue):
            return tuple(_sort_key(item) for item in value.items)
        if isinstance(value, ObjectValue) and tx is not None:
            return _Opaque(tx, value)  # sorted compares it with `<` only, as eagerly
        return _Opaque()


def sorted_values(tx: Translator, items: list[Value], kwargs: dict[str, Value]) -> list[Value]:
    """Sort values by their capture-time keys (stable, like sorted)."""
    from dynamo_capture.calls import call

    key = kwargs.get("key")
    reverse = as_constant(kwargs["reverse"]) if "reverse" in kwargs else False
    if key is None or (isinstance(key, PythonValue) and key.obj is None):
        keys = [_sort_key(item, tx) for item in items]
    else:
        keys = [_sort_key(call(tx, key, [item], {}), tx) for item in items]
    try:
        order = sorted(range(len(items)), key=lambda i: keys[i], reverse=reverse)
    except TypeError as error:
        # keys known at capture time compare as eagerly, in the same order: its error
        if any(isinstance(key, _Opaque) for key in keys):
            raise
        raise raised_by_python(error) from None
    return [items[i] for i in order]


@handles(builtins.sorted)
def _sorted(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    try:
        return ListValue(sorted_values(tx, sequence_items(tx, args[0]), kwargs))
    except NotConstant:
        raise Unsupported("sorted() of values known only when it runs") from None


@handles(builtins.super)
def _super(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) == 2:
        return SuperValue(args[0].obj, args[1])  # type: ignore[attr-defined]
    if "__class__" not in tx.cells and "__class__" not in tx.real_cells:
        raise Unsupported("super() without arguments outside a method")
    cls = tx.cell("__class__").contents
    first = tx.code.co_varnames[0]
    self_value = tx.locals.get(first)
    if self_value is None and first in tx.cells:
        self_value = tx.cells[first].contents
    return SuperValue(cls.obj, self_value)  # type: ignore[union-attr,arg-type]


@handles(builtins.print)
def _print(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """print(...) runs eagerly on its own: the graph before computes its arguments, the
    code resumes after the call (as torch.compile breaks there)."""
    error = Unsupported("a call to print (needs a graph break)")
    error.eager_call = True
    raise error


@handles(
    builtins.input,
    builtins.open,
    builtins.exec,
    builtins.eval,
    builtins.globals,
    builtins.breakpoint,
)
def _unsupported_builtin(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    raise Unsupported("a call to input/open/exec/eval/globals/breakpoint (needs a graph break)")


@handles(builtins.locals)
def _locals(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """locals(): a new dict of the frame's bound variables, as eager's snapshot."""
    if args or kwargs:
        raise raised_by_python(TypeError("locals() takes no arguments"))
    return _frame_locals(tx)


@handles(builtins.vars)
def _vars(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """vars(obj) is obj.__dict__ (live); vars() with no argument is locals()."""
    if not args and not kwargs:
        return _frame_locals(tx)
    if len(args) != 1 or kwargs:
        raise raised_by_python(TypeError("vars expected at most 1 argument"))
    return get_attr(tx, args[0], "__dict__")


def _frame_locals(tx: Translator) -> DictValue:
    """The dict eager's locals() gives in this frame: its bound variables, cells' and
    free variables' contents, in the order of the code's variable names."""
    from dynamo_capture.resume import RESUME_PREFIX, UNBOUND

    code = tx.code
    if code.co_name.startswith(RESUME_PREFIX) or code.co_flags & inspect.CO_NEWLOCALS == 0:
        # NOTE: a part after a graph break holds the stack and other frames' variables
        # under its own names: its locals() is not the user's function's
        raise Unsupported("locals() in the part of a function after a graph break")
    cells = (*code.co_cellvars, *code.co_freevars)
    items: dict[Any, Value] = {}
    for name in dict.fromkeys((*code.co_varnames, *cells)):  # eager's order, each once
        value = tx.cell(name).contents if name in cells else tx.locals.get(name)
        if value is not None and not (isinstance(value, PythonValue) and value.obj is UNBOUND):
            items[name] = value
    return DictValue(items)


def _outside_object(value: Value, what: str) -> Any:
    """The real object behind a value that existed before the frame ran, else Unsupported."""
    if isinstance(value, PythonValue) and not isinstance(value.obj, torch.Tensor):
        return value.obj
    raise Unsupported(
        f"{what} of a {python_type_of(value).__name__} made or traced during capture "
        "(needs a graph break)"
    )


@handles(builtins.id)
def _id(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """id() of an object known at capture time: folded, with the object's identity guarded."""
    parameter = _input_parameter(tx, args[0])
    if parameter is not None:  # a module's parameter: the same object from call to call
        tx.ctx.guards.id_match(args[0].source, parameter)
        return PythonValue(id(parameter))
    value = args[0]
    if isinstance(value, TensorValue) or (
        isinstance(value, PythonValue) and isinstance(value.obj, torch.Tensor)
    ):
        _outside_object(value, "id()")  # a tensor of the graph: a break
    if not isinstance(value, PythonValue):
        # made or traced in the frame: a stand-in number, the same for the same object
        # while capturing (ids compare and key dicts as eagerly); it cannot leave the frame
        return PythonValue(FakeId(id(value)))
    guard_identity(tx, value)
    return PythonValue(id(value.obj))


def _input_parameter(tx: Translator, value: Value) -> torch.nn.Parameter | None:
    """The real nn.Parameter behind an input tensor of the graph, if it is one."""
    if not (isinstance(value, TensorValue) and value.source is not None):
        return None
    for _, real, known in tx.ctx.inputs:
        if known is value and isinstance(real, torch.nn.Parameter):
            return real
    return None


@handles(builtins.delattr)
def _delattr(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """delattr(obj, name) with a name known at capture time: as `del obj.name`."""
    from dynamo_capture.opcodes_data import delete_attribute

    if len(args) != 2 or kwargs:
        raise raised_by_python(TypeError(f"delattr expected 2 arguments, got {len(args)}"))
    name = as_constant(args[1])
    if type(name) is not str:
        raise raised_by_python(TypeError("attribute name must be string"))
    delete_attribute(tx, args[0], name)
    return PythonValue(None)


@handles(copy.deepcopy)
def _deepcopy(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """deepcopy of an object known at capture time: copied once, what the copy read
    guarded, the copy a value of the frame (deep_copies.py)."""
    from dynamo_capture.deep_copies import deepcopy_frame_value, deepcopy_outside_object

    if len(args) > 1 or kwargs:
        raise Unsupported("copy.deepcopy() with a memo (needs a graph break)")
    if not isinstance(args[0], PythonValue):
        return deepcopy_frame_value(tx, args[0])
    obj = _outside_object(args[0], "copy.deepcopy()")
    if isinstance(obj, torch.nn.Module):
        raise Unsupported("copy.deepcopy() of a module (needs a graph break)")
    return deepcopy_outside_object(tx, args[0])


@handles(copy.copy)
def _copy(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """copy.copy of an instance made in the frame whose class copies it by the default
    protocol: a new instance of the frame holding the same attribute values, as
    `object.__reduce_ex__` and `copy._reconstruct` make it; anything else: copy.copy's
    own Python traced."""
    from dynamo_capture.calls import inline_function
    from dynamo_capture.deep_copies import copies_by_default_protocol, copy_outside_object

    if len(args) == 1 and not kwargs:
        value = side_effects.current(tx, args[0])
        if isinstance(value, ObjectValue) and copies_by_default_protocol(
            value.cls, value.attrs, "__copy__"
        ):
            return ObjectValue(value.cls, dict(value.attrs))
        if isinstance(value, PythonValue):
            copied = copy_outside_object(tx, value)
            if copied is not None:
                return copied
    return inline_function(tx, copy.copy, args, kwargs, None)


@handles(inspect.signature)
def _signature(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """inspect.signature of a callable known at capture time."""
    from dynamo_capture.function_values import function_attr

    target = args[0]
    if isinstance(target, MethodValue) and isinstance(target.func, PythonValue):
        receiver = target.self_value.obj if isinstance(target.self_value, PythonValue) else object()
        real: Any = types.MethodType(target.func.obj, receiver)
    elif isinstance(target, FunctionValue):
        try:  # the signature shows the defaults and annotations: they must be constants
            defaults = tuple(as_constant(d) for d in target.defaults) or None
            kwdefaults = {k: as_constant(v) for k, v in target.kwdefaults.items()} or None
            annotations = function_attr(target, "__annotations__")
            annotations = dict_items(tx, annotations) if annotations is not None else None
            if annotations is None or "__annotations__" in target.attrs:
                raise NotConstant
            annotations = {k: as_constant(v) for k, v in annotations.items()}
        except NotConstant:
            raise Unsupported(
                "inspect.signature of a function with non-constant defaults"
            ) from None
        real = types.FunctionType(
            target.code,
            target.globals,
            target.name,
            defaults,
            tuple(types.CellType() for _ in target.code.co_freevars),
        )
        real.__kwdefaults__ = kwdefaults
        real.__annotations__ = annotations
    elif isinstance(target, PythonValue):
        real = target.obj
    else:
        raise Unsupported(f"inspect.signature of a {python_type_of(target).__name__}")
    return PythonValue(inspect.signature(real))


@handles(itertools.product)
def _product(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    repeat = as_constant(kwargs["repeat"]) if "repeat" in kwargs else 1
    pools = [sequence_items(tx, arg) for arg in args] * repeat
    return IteratorValue([TupleValue(list(row)) for row in itertools.product(*pools)])


@handles(itertools.chain)
def _chain(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return IteratorValue([item for arg in args for item in sequence_items(tx, arg)])


@handles(functools.partial)
def _partial(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    func = args[0]
    if isinstance(func, PartialValue):  # partial(partial(f, a), b) is partial(f, a, b)
        return PartialValue(func.func, [*func.args, *args[1:]], {**func.kwargs, **kwargs})
    return PartialValue(func, list(args[1:]), dict(kwargs))


@handles(types.MethodType)
def _method_type(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`types.MethodType(func, obj)`: `func` bound to `obj` (contextlib.ExitStack binds a
    context's `__exit__` so)."""
    if len(args) != 2 or kwargs:
        raise Unsupported("types.MethodType() with other than (function, instance)")
    func, receiver = args
    plain = isinstance(func, FunctionValue) or (
        isinstance(func, PythonValue) and isinstance(func.obj, types.FunctionType)
    )
    if not plain or (isinstance(receiver, PythonValue) and receiver.obj is None):
        raise Unsupported("types.MethodType() of other than a Python function and an instance")
    return MethodValue(func, receiver)


@handles(functools.reduce)
def _reduce(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.calls import call

    items = sequence_items(tx, args[1])
    if len(args) > 2:
        total = args[2]
    elif items:
        total, items = items[0], items[1:]
    else:
        raise Unsupported("reduce() of an empty sequence with no initial value")
    for item in items:
        total = _running_total(tx, call(tx, args[0], [total, item], {}))
    return total


# ----- operator module: the same operations as the bytecode ----------------------
def _binary_handler(fn: Any) -> Handler:
    return lambda tx, args, kwargs: binary_op(tx, fn, args[0], args[1])


for _op in (
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
    operator.pow, operator.matmul, operator.and_, operator.or_, operator.xor, operator.lshift,
    operator.rshift, operator.iadd, operator.isub, operator.imul, operator.itruediv,
    operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul, operator.iand,
    operator.ior, operator.ixor, operator.ilshift, operator.irshift,
):  # fmt: skip
    BUILTIN_HANDLERS[_op] = _binary_handler(_op)
for _symbol, _op in COMPARE.items():
    BUILTIN_HANDLERS[_op] = (
        lambda s: lambda tx, args, kwargs: compare_op(tx, s, args[0], args[1])
    )(_symbol)
for _op in (operator.neg, operator.pos, operator.invert, operator.not_):
    BUILTIN_HANDLERS[_op] = (lambda f: lambda tx, args, kwargs: unary_op(tx, f, args[0]))(_op)
BUILTIN_HANDLERS[operator.getitem] = lambda tx, args, kwargs: get_item(tx, args[0], args[1])
BUILTIN_HANDLERS[operator.contains] = lambda tx, args, kwargs: PythonValue(
    contains(tx, args[1], args[0])
)
BUILTIN_HANDLERS[operator.truth] = lambda tx, args, kwargs: PythonValue(truth(tx, args[0]))
BUILTIN_HANDLERS[operator.is_] = lambda tx, args, kwargs: PythonValue(_guarded_same(tx, *args))
BUILTIN_HANDLERS[operator.is_not] = lambda tx, args, kwargs: PythonValue(
    not _guarded_same(tx, *args)
)


def _guarded_same(tx: Translator, left: Value, right: Value) -> bool:
    guard_same_object(tx, left, right)
    return _same(left, right)


def _same(left: Value, right: Value) -> bool:
    from dynamo_capture.operations import is_op

    return is_op(left, right)


@handles(operator.setitem)
def _setitem(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    set_item(tx, args[0], args[1], args[2])
    return PythonValue(None)


@handles(os.fspath)
def _fspath(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """os.fspath of a str or bytes constant is itself; of another object (a PathLike's
    own `__fspath__`) it runs eagerly."""
    if len(args) == 1 and not kwargs and isinstance(args[0], PythonValue):
        if type(args[0].obj) in (str, bytes):
            return PythonValue(args[0].obj)
    raise Unsupported("os.fspath() of other than a str or bytes constant")


# ----- pure C functions folded on constants -----------------------------------
PURE_FUNCTIONS: set[Any] = {
    builtins.round, builtins.divmod, builtins.pow, builtins.repr, builtins.format, builtins.hash,
    builtins.chr, builtins.ord, builtins.hex, builtins.oct, builtins.bin, builtins.ascii,
    operator.index, operator.length_hint, operator.countOf, operator.indexOf,
    operator.floordiv, operator.abs,
    # alternative constructors of immutable builtin types
    int.from_bytes, float.fromhex, bytes.fromhex, str.maketrans, bytes.maketrans,
}  # fmt: skip
PURE_FUNCTIONS.update(
    getattr(module, name)
    for module in (math, cmath)
    for name in dir(module)
    if callable(getattr(module, name)) and not name.startswith("_")
)


def call_c_function(tx: Translator, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """A C function not in the handler table: folded when pure and constant, else Unsupported."""
    if fn in PURE_FUNCTIONS:
        return _fold(fn, args, kwargs)
    if fn is builtins.slice:
        return _fold(fn, args, kwargs)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    module = getattr(fn, "__module__", None) or "builtins"
    raise Unsupported(
        f"call to the C function {module}.{name}, which capture cannot trace; register a Python "
        "stand-in with substitute_in_graph, or mark it allow_in_graph"
    )


@handles(builtins.divmod)
def _divmod(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """divmod() of numbers one of which is symbolic: `(a // b, a % b)`, both symbolic (a
    fold reads the tuple's items as ints, which fixes the sizes to their values)."""
    try:
        real_args, _ = constant_arguments(args, kwargs)
    except NotConstant:
        real_args = None
    if (
        real_args is not None
        and not kwargs
        and len(real_args) == 2
        and any(is_symbolic_number(a) for a in real_args)
        and not (type(real_args[1]) is int and real_args[1] == 0)  # eager raises: the fold
        and all(isinstance(a, int | torch.SymInt) and not isinstance(a, bool) for a in real_args)
    ):
        return TupleValue(
            [PythonValue(real_args[0] // real_args[1]), PythonValue(real_args[0] % real_args[1])]
        )
    return call_c_function(tx, builtins.divmod, args, kwargs)


@handles(builtins.range)
def _range(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """range() folded; a symbolic bound specializes (a Python loop runs once per value)."""
    try:
        bounds = [as_constant(arg) for arg in args]
    except NotConstant:
        return _fold(range, args, kwargs)  # raises Unsupported, naming range
    if tx.ctx.shape_env is not None and any(is_symbolic_number(b) for b in bounds):
        reason = "range() of a symbolic size (a Python loop runs once per value)"
        bounds = [
            tx.ctx.sym_numbers.specialize(b, reason) if is_symbolic_number(b) else b for b in bounds
        ]
        args = [PythonValue(b) for b in bounds]
    return _fold(range, args, kwargs)


def _text_of(fn: Any, dunder: str, fallback: Handler) -> Handler:
    """str() / repr() calling a user class's __str__ / __repr__ (str falls back to __repr__)."""

    def text(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if len(args) == 1 and not kwargs and isinstance(args[0], ObjectValue):
            from dynamo_capture.calls import call

            for name in (dunder, "__repr__"):
                method = inspect.getattr_static(args[0].cls, name, None)
                if isinstance(method, types.FunctionType):
                    return call(tx, PythonValue(method), [args[0]], {})
        return fallback(tx, args, kwargs)

    return text


BUILTIN_HANDLERS[builtins.str] = _text_of(builtins.str, "__str__", BUILTIN_HANDLERS[builtins.str])
BUILTIN_HANDLERS[builtins.repr] = _text_of(
    builtins.repr, "__repr__", lambda tx, args, kwargs: _fold(repr, args, kwargs)
)
BUILTIN_HANDLERS[builtins.slice] = lambda tx, args, kwargs: _fold(slice, args, kwargs)
for _fn in SYM_FUNCTIONS:
    if _fn is not builtins.abs:
        BUILTIN_HANDLERS[_fn] = _number_function(_fn)
for _fn in PURE_FUNCTIONS:
    BUILTIN_HANDLERS.setdefault(
        _fn, (lambda f: lambda tx, args, kwargs: _fold(f, args, kwargs))(_fn)
    )
BUILTIN_HANDLERS[operator.abs] = BUILTIN_HANDLERS[builtins.abs]  # a tensor's: a graph node


# ----- builtins that call a dunder of their argument's class ---------------------------
def _user_dunder(tx: Translator, value: Value, name: str) -> types.FunctionType | None:
    """The Python method `name` of a user class `value` is an instance of, else None."""
    if not isinstance(value, ObjectValue | PythonValue | TupleValue | ListValue | DictValue):
        return None
    if isinstance(value, PythonValue) and is_constant(value.obj):
        return None  # an enum member, a number: folded
    cls = python_type_of(value)
    module = getattr(cls, "__module__", "builtins") or "builtins"
    if module == "builtins" or module.split(".")[0] in TRUSTED_MODULES:
        return None
    method = inspect.getattr_static(cls, name, None)
    if not isinstance(method, types.FunctionType):
        return None
    tx.ctx.guards.class_attribute(cls, name, method)
    return method


def _calls_dunder(name: str, fallback: Handler) -> Handler:
    """abs(obj) runs type(obj).__abs__(obj) for a user class, as eagerly."""

    def handler(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
        method = _user_dunder(tx, args[0], name) if args else None
        if method is None:
            return fallback(tx, args, kwargs)
        from dynamo_capture.calls import call

        return call(tx, PythonValue(method), list(args), kwargs)

    return handler


_PROTOCOL_DUNDERS = {
    builtins.abs: "__abs__", operator.abs: "__abs__", builtins.round: "__round__",
    builtins.divmod: "__divmod__", builtins.format: "__format__", operator.index: "__index__",
    builtins.int: "__int__", builtins.float: "__float__", builtins.complex: "__complex__",
    math.floor: "__floor__", math.ceil: "__ceil__", math.trunc: "__trunc__",
    operator.neg: "__neg__", operator.pos: "__pos__", operator.invert: "__invert__",
}  # fmt: skip
for _fn, _dunder in _PROTOCOL_DUNDERS.items():
    BUILTIN_HANDLERS[_fn] = _calls_dunder(
        _dunder,
        BUILTIN_HANDLERS.get(_fn)
        or (lambda f: lambda tx, args, kwargs: call_c_function(tx, f, args, kwargs))(_fn),
    )
