"""Attribute reads and writes on Values (LOAD_ATTR, STORE_ATTR, getattr, super())."""

from __future__ import annotations

import collections
import functools
import inspect
import os
import sys
import types
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dynamo_capture.errors import (
    CAPTURED_TRACEBACK,
    ContextSwitchCall,
    ExceptionRaised,
    GraphValueArgument,
    Unsupported,
    graph_value_arguments,
)
from dynamo_capture.numpy_arrays import NUMPY_TYPE_DESCRIPTIONS, is_ndarray, ndarray_attribute
from dynamo_capture.output_graph import TRUSTED_MODULES, is_constant
from dynamo_capture.scalar_subclasses import made_scalar
from dynamo_capture.sources import (
    AttrSource,
    ModuleGlobalSource,
    ModuleSource,
    ParamBufferSource,
    RawAttrSource,
    is_builtin_module_class,
)
from dynamo_capture.torch_function_dispatch import has_own_torch_function
from dynamo_capture.values import (
    BuiltinMethodValue,
    CellValue,
    ContextValue,
    DictValue,
    DictViewValue,
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
)
from guards.tensor_subclasses import is_traceable_subclass, is_traceable_subclass_type

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "DELETED",
    "TENSOR_METADATA_ATTRS",
    "class_member_source",
    "delete_attr",
    "get_attr",
    "replay_delete",
    "set_attr",
]

# Tensor attributes that are metadata (known from the example), not graph values.
TENSOR_METADATA_ATTRS = {
    "shape", "dtype", "device", "ndim", "is_cuda", "is_sparse", "layout", "requires_grad",
    "is_leaf", "is_quantized", "is_meta", "is_cpu", "itemsize", "is_nested", "is_mkldnn",
    "nbytes", "is_xpu", "is_mps", "is_sparse_csr", "is_ipu", "is_xla", "is_vulkan", "is_maia",
    "is_mtia",
}  # fmt: skip
_TENSOR_GRAPH_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}
# Metadata attributes torch.compile reads through a `getattr` node of its graph (unused,
# the value itself folded): the count of operations includes it.
_TRACED_METADATA_ATTRS = {
    "itemsize", "nbytes", "is_leaf", "is_cpu", "is_meta", "is_mkldnn", "is_xpu", "is_mps",
    "is_sparse_csr", "is_ipu", "is_xla", "is_vulkan", "is_maia", "is_mtia",
}  # fmt: skip
_CONTAINER_VALUES = (TupleValue, ListValue, DictValue, SetValue)


_MODE_SWITCHES = ("__enter__", "__exit__")
_IINFO_LIMITS = ("min", "max", "bits", "kind")
_GRAD_MODE_CLASSES = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)
LRU_CACHE_WRAPPER = type(functools.lru_cache(None)(lambda: None))  # functools.cache's too


def _trusted_module(obj: Any) -> bool:
    name = getattr(obj, "__name__", "") or ""
    return name.split(".")[0] in TRUSTED_MODULES


def get_attr(tx: Translator, value: Value, name: str) -> Value:
    """value.name; raises AttributeError when the attribute does not exist."""
    grad_context = isinstance(value, ContextValue) and value.kind == "grad"
    if isinstance(value, PythonValue) and type(value.obj) in _GRAD_MODE_CLASSES:
        grad_context = True  # one made outside, or by an earlier part of a split frame
    if grad_context and name in _MODE_SWITCHES:
        # NOTE: torch.compile breaks the graph at an explicit `cm.__enter__()` or
        # `cm.__exit__(...)` of a grad-mode context (a `with` statement is captured)
        raise ContextSwitchCall(f"an explicit call of a grad-mode context's {name}")
    if isinstance(value, TensorValue):
        tx.ctx.note_realized(value.node)  # torch wraps an input where it is inspected
        if is_ndarray(value):
            return ndarray_attribute(tx, value, name)
        return _tensor_attr(tx, value, name)
    if isinstance(value, PythonValue | ObjectValue) and _user_getattribute(tx, value) is not None:
        return _through_getattribute(tx, value, name)
    if isinstance(value, PythonValue):
        if isinstance(value.obj, BaseException) and graph_value_arguments(value.obj):
            return _held_exception_attr(tx, value, name)
        return _python_attr(tx, value, name)
    if isinstance(value, ObjectValue | DictValue) and name == "__dict__" and value.source is None:
        return DictValue(value.attrs)  # a live view: writes go to the attributes
    if isinstance(value, ObjectValue):
        try:
            return object_attr(tx, value, name)
        except AttributeError:
            fallback = inspect.getattr_static(value.cls, "__getattr__", None)
            if not isinstance(fallback, types.FunctionType):
                raise
            from dynamo_capture.calls import call

            return call(tx, PythonValue(fallback), [value, PythonValue(name)], {})
    if isinstance(value, DictValue) and value.cls not in (dict,):
        if name in value.attrs:
            return value.attrs[name]
        static = inspect.getattr_static(value.cls, name, None)
        if static is not None and getattr(static, "__objclass__", None) not in (dict, object):
            if not (isinstance(static, types.BuiltinFunctionType | types.MethodDescriptorType)):
                return _class_attr(tx, value, value.cls, name)
    if isinstance(value, SuperValue):
        return _super_attr(tx, value, name)
    if isinstance(value, TupleValue) and value.cls not in (tuple, torch.Size):
        fields = getattr(value.cls, "_fields", None) or getattr(value.cls, "__match_args__", ())
        if name in fields:
            return value.items[list(fields).index(name)]
        if not _builtin_method(value.cls, name):
            return _class_attr(tx, value, value.cls, name)
    if isinstance(value, ListValue) and value.cls is collections.deque and name == "maxlen":
        return PythonValue(value.maxlen)
    if isinstance(value, ListValue) and name in value.attrs:
        if _user_data_descriptor(value.cls, name) is None:
            return value.attrs[name]
    if (
        isinstance(value, ListValue | SetValue)
        and value.cls not in (list, set, frozenset)
        and not _builtin_method(value.cls, name)
    ):
        return _class_attr(tx, value, value.cls, name)
    if isinstance(value, _CONTAINER_VALUES) and not hasattr(value.cls, name):
        fallback = inspect.getattr_static(value.cls, "__getattr__", None)
        if isinstance(fallback, types.FunctionType):  # a dict subclass reading keys as attributes
            from dynamo_capture.calls import call

            return call(tx, PythonValue(fallback), [value, PythonValue(name)], {})
        # NOTE: neither its class nor (above) its instance holds it: missing, as eagerly
        # (`hasattr({}, "x")` is False; it was taken for a method of the container)
        raise AttributeError(f"{value.cls.__name__!r} object has no attribute {name!r}")
    if isinstance(value, (*_CONTAINER_VALUES, IteratorValue, ContextValue, DictViewValue)):
        if name == "__class__":
            from dynamo_capture.operations import python_type_of

            return PythonValue(python_type_of(value))
        return BuiltinMethodValue(value, name)
    if isinstance(value, PartialValue):
        fields = {"func": value.func, "args": TupleValue(list(value.args))}
        if name in fields:
            return fields[name]
        if name == "keywords":
            return DictValue(dict(value.kwargs))
        if name == "__class__":
            return PythonValue(functools.partial)
        if name in ("__doc__", "__module__"):
            return PythonValue(getattr(functools.partial, name))
        if not hasattr(functools.partial(print), name):  # one made in the frame: empty __dict__
            from dynamo_capture.errors import raised_by_python

            error = AttributeError(f"'functools.partial' object has no attribute '{name}'")
            raise raised_by_python(error)
    if isinstance(value, CellValue) and name == "cell_contents":  # a cell made in the frame
        if value.contents is None:
            from dynamo_capture.errors import raised_by_python

            raise raised_by_python(ValueError("Cell is empty"))
        return value.contents
    if isinstance(value, FunctionValue):
        from dynamo_capture.function_values import function_attr

        found = function_attr(value, name)
        if found is not None:
            return found
    if isinstance(value, MethodValue):
        if name == "__self__":
            return value.self_value
        if name == "__func__":
            return value.func
        if name == "__doc__" or (name not in vars(types.MethodType) and name not in vars(object)):
            # a bound method reads other attributes from its function (`__wrapped__`)
            return get_attr(tx, value.func, name)
    raise Unsupported(f"attribute {name!r} of a {type(value).__name__}")


def object_attr(tx: Translator, value: ObjectValue, name: str) -> Value:
    """`object.__getattribute__(value, name)` of an object made in the frame: data
    descriptors of its class, then its own attributes, then its class's (no
    `__getattr__`); raises AttributeError when there is none."""
    if _user_data_descriptor(value.cls, name) is not None:
        return _class_attr(tx, value, value.cls, name)  # wins over the instance's own
    if name in value.attrs:
        return value.attrs[name]
    if name == "__class__":
        return PythonValue(value.cls)
    if name == "__dict__" and value.source is None:
        return DictValue(value.attrs)  # a live view, as `get_attr` gives it
    return _class_attr(tx, value, value.cls, name)


def _user_getattribute(tx: Translator, value: PythonValue | ObjectValue) -> Any:
    """The Python `__getattribute__` of the value's class (guarded), or None."""
    cls = value.cls if isinstance(value, ObjectValue) else type(value.obj)
    if isinstance(value, PythonValue) and isinstance(value.obj, type | types.ModuleType):
        return None
    method = inspect.getattr_static(cls, "__getattribute__", None)
    if not isinstance(method, types.FunctionType):
        return None
    tx.ctx.guards.class_attribute(cls, "__getattribute__", method)
    return method


def _through_getattribute(tx: Translator, value: PythonValue | ObjectValue, name: str) -> Value:
    """value.name on a class with its own `__getattribute__`: that method, traced (its
    `object.__getattribute__`/`super().__getattribute__` reads the object's own
    attributes), then `__getattr__` where it raises AttributeError."""
    from dynamo_capture.calls import call

    # NOTE: an object known only while capturing (no source) is read through its
    # method too: its own attributes are read as any such object's are (as constants of
    # this capture), past the class's lookup rules
    method = _user_getattribute(tx, value)
    try:
        return call(tx, PythonValue(method), [value, PythonValue(name)], {})
    except ExceptionRaised as raised:
        cls = value.cls if isinstance(value, ObjectValue) else type(value.obj)
        fallback = inspect.getattr_static(cls, "__getattr__", None)
        if not (isinstance(fallback, types.FunctionType) and _is_attribute_error(raised)):
            raise
        return call(tx, PythonValue(fallback), [value, PythonValue(name)], {})


def _is_attribute_error(raised: ExceptionRaised) -> bool:
    error = raised.value
    if isinstance(error, ObjectValue):  # a user exception class made in the frame
        return issubclass(error.cls, AttributeError)
    return isinstance(getattr(error, "obj", None), AttributeError)


def _input_tensor(tx: Translator, value: TensorValue) -> torch.Tensor | None:
    """The real tensor behind a graph input (None for a value computed in the graph)."""
    if value.source is None:
        return None
    return next((real for _, real, known in tx.ctx.inputs if known is value), None)


def _tensor_attr(tx: Translator, value: TensorValue, name: str) -> Value:
    if value.source is None and name in _inner_names(value.example):
        # an inner tensor of a traceable subclass the graph computed: a node reading it
        # (the backend's trace rebuilds the subclass over traced inner tensors)
        import builtins

        return tx.ctx.call("call_function", builtins.getattr, (value, name), {})
    if _subclass_defines(value.python_type, name):
        # a user subclass's own member shadows Tensor's (an attribute the caller set on
        # the instance shadows a method, not a property)
        member = inspect.getattr_static(value.python_type, name)
        real = _input_tensor(tx, value)
        if not _is_data_descriptor(member) and (
            name in getattr(real, "__dict__", {}) or any(k[1] == name for k in tx.ctx.attr_writes)
        ):
            raise Unsupported(f"tensor attribute {name!r} set on the instance over its class's")
        return _class_attr(tx, value, value.python_type, name)
    static = inspect.getattr_static(torch.Tensor, name, None)
    if (
        isinstance(static, types.GetSetDescriptorType)
        and static.__objclass__ is torch._C.TensorBase
        and inspect.getattr_static(value.python_type, name, None) is static
    ):
        # a property read eager hands to an override as `Tensor.<name>.__get__`
        from dynamo_capture.torch_function_dispatch import dispatch_torch_function

        handled = dispatch_torch_function(tx, static.__get__, [value], {})
        if handled is not None:
            return handled
    if has_own_torch_function(value.python_type):
        if name in ("is_leaf", "grad", "grad_fn") and _input_tensor(tx, value) is not None:
            # NOTE: the guard on the input's attribute would run the override each call
            raise Unsupported(f"Tensor.{name} of an input whose subclass overrides it")
        with torch._C.DisableTorchFunctionSubclass():  # the real input's, not the override's
            return _tensor_metadata(tx, value, name)
    return _tensor_metadata(tx, value, name)


def _tensor_metadata(tx: Translator, value: TensorValue, name: str) -> Value:
    if name in _TRACED_METADATA_ATTRS:
        return _traced_metadata(tx, value, name)
    return _untraced_tensor_attr(tx, value, name)


def _traced_metadata(tx: Translator, value: TensorValue, name: str) -> Value:
    """A metadata attribute known from the example, read through an unused `getattr` node
    as torch.compile records it; one that is not a plain constant (the byte count of a
    tensor of symbolic size) breaks."""
    result = _untraced_tensor_attr(tx, value, name)
    if not (isinstance(result, PythonValue) and type(result.obj) in (bool, int)):
        raise Unsupported(f"Tensor.{name} of a tensor of symbolic size")
    import builtins

    tx.ctx.graph.call_function(builtins.getattr, (value.node, name))
    return result


def _untraced_tensor_attr(tx: Translator, value: TensorValue, name: str) -> Value:
    if name == "is_leaf":
        # an input's example is always a leaf: answer from the real tensor, and guard it
        real = _input_tensor(tx, value)
        if real is not None:
            tx.ctx.guards.equals_match(AttrSource(value.source, "is_leaf"), real.is_leaf)
            return PythonValue(real.is_leaf)
    if name in TENSOR_METADATA_ATTRS:
        if name == "shape" and value.data_dependent_shape:
            raise Unsupported("the shape of a tensor whose shape depends on data (nonzero, masks)")
        result = getattr(value.example, name)
        if name == "shape":
            tx.ctx.note_size_read(result, value)
        return PythonValue(result)
    if name in _TENSOR_GRAPH_ATTRS:
        import builtins

        return tx.ctx.call("call_function", builtins.getattr, (value, name), {})
    if name == "data":
        return tx.ctx.call("call_method", "detach", (value,), {})
    if name == "__class__":
        return PythonValue(value.python_type)
    if name == "grad":
        # an input's gradient, as the caller left it: None (guarded to stay None) or a
        # tensor input of its own; nothing in a graph writes it (backward breaks)
        real = _input_tensor(tx, value)
        written = tx.ctx.attr_writes.get((id(real), "grad")) if real is not None else None
        if written is not None and written[0] is real:  # set by the frame: its value now
            tx.ctx.written_reads += 1
            return written[2]
        if real is not None:
            return tx.ctx.wrap(real.grad, AttrSource(value.source, "grad"))
    if name == "grad_fn":
        # None for a leaf input (guarded to stay a leaf) and for a tensor that needs no
        # gradient; a tensor with a grad_fn breaks, as torch.compile does
        real = _input_tensor(tx, value)
        if real is not None and real.grad_fn is None:
            tx.ctx.guards.equals_match(AttrSource(value.source, "is_leaf"), True)
            return PythonValue(None)
        if real is None and not value.example.requires_grad:
            return PythonValue(None)
    if name in ("grad_fn", "retain_grad"):
        # NOTE: torch.compile breaks on reading these (a grad_fn of a tensor with one; the
        # method, not its call), and cannot resume after the read: capture_frame cuts
        # the frame as it does
        error = Unsupported(f"Tensor.{name} inside captured code")
        error.read_not_resumed = True
        raise error
    if name in ("grad", "_base", "_version", "names"):
        raise Unsupported(f"Tensor.{name} inside captured code")
    instance = _tensor_instance_attr(tx, value, name)
    if instance is not None:
        return instance
    attr = getattr(torch.Tensor, name, None)
    if attr is None:
        raise AttributeError(f"'Tensor' object has no attribute {name!r}")
    if callable(attr):
        return BuiltinMethodValue(value, name)
    raise Unsupported(f"tensor attribute {name!r}")


def _inner_names(example: Any) -> tuple[str, ...]:
    """The attributes holding a traceable subclass's inner tensors (none for others)."""
    if not is_traceable_subclass(example):
        return ()
    return tuple(example.__tensor_flatten__()[0])


def _subclass_defines(kind: type, name: str) -> bool:
    """Whether a user tensor subclass `kind` (or a user base of it) defines `name`; a
    traceable `__torch_dispatch__` subclass's own methods count wherever it is defined
    (torch's TwoTensor's `get_elem_a`)."""
    if kind is torch.Tensor or not issubclass(kind, torch.Tensor):
        return False
    return any(
        name in vars(klass)
        for klass in kind.__mro__
        if issubclass(klass, torch.Tensor)
        and (not klass.__module__.startswith("torch") or is_traceable_subclass_type(klass))
    )


def _tensor_instance_attr(tx: Translator, value: TensorValue, name: str) -> Value | None:
    """An attribute the caller set on an input tensor (`x.scale = 2`, in its `__dict__`),
    read from the real tensor and guarded at its source, as torch.compile reads it; None
    where the tensor has no such attribute. One the frame may have written breaks."""
    real = _input_tensor(tx, value)
    if real is None or value.source is None:
        return None
    instance_dict = getattr(real, "__dict__", None)
    if not instance_dict or name not in instance_dict or hasattr(type(real), name):
        return None  # NOTE: a class attribute (a property, say) may take precedence
    if any(key[1] == name for key in tx.ctx.attr_writes):
        raise Unsupported(f"reading tensor attribute {name!r} the frame may have set")
    return tx.ctx.wrap(instance_dict[name], AttrSource(value.source, name))


def _is_plain_module(obj: Any) -> bool:
    return type(obj) is types.ModuleType and isinstance(getattr(obj, "__dict__", None), dict)


def _module_global_written(tx: Translator, module: types.ModuleType, name: str) -> Value | None:
    """`module.name` where the frame assigned it (as an attribute, or by a `global name`
    statement in a function of the module): the value assigned, else None."""
    scope = getattr(module, "__dict__", None)
    written = tx.ctx.global_writes.get((id(scope), name)) if scope is not None else None
    if written is None or written[0] is not scope:
        return None
    tx.ctx.written_reads += 1
    return written[1]


# attributes of an exception that hold no argument of it
_EXCEPTION_LINKS = frozenset(
    {"__traceback__", "__cause__", "__context__", "__suppress_context__", "__class__"}
)


def _held_exception_attr(tx: Translator, value: PythonValue, name: str) -> Value:
    """An attribute of an exception holding values of the graph (`ValueError(x * 2)`):
    `args` gives them back; an attribute that reads no argument as usual; anything else
    (a method, which would read the stand-ins) breaks."""
    if (id(value.obj), name) in tx.ctx.attr_writes:  # `e.args = (...)` earlier in the frame
        return _python_attr(tx, value, name)
    if name == "args":
        return TupleValue(
            [
                item.value if type(item) is GraphValueArgument else PythonValue(item)
                for item in value.obj.args
            ]
        )
    if name in _EXCEPTION_LINKS:
        return _python_attr(tx, value, name)
    raise Unsupported(f"reading .{name} of an exception holding values of the graph")


def _python_attr(tx: Translator, value: PythonValue, name: str) -> Value:
    obj, source = value.obj, value.source
    if obj is CAPTURED_TRACEBACK:
        raise Unsupported(f"reading .{name} of the traceback of an exception raised in the frame")
    written = tx.ctx.attr_writes.get((id(obj), name))
    if written is not None and written[0] is obj:
        tx.ctx.written_reads += 1
        return _written_value(obj, name, written[2])
    child = AttrSource(source, name) if source is not None else None
    if isinstance(obj, types.ModuleType):
        global_written = _module_global_written(tx, obj, name)
        if global_written is not None:
            return global_written
        attr = getattr(obj, name)
        if _trusted_module(obj) and not isinstance(attr, torch.Tensor):
            # torch's (math's, ...) functions are replaced by users too (a patched
            # F.scaled_dot_product_attention): one identity check per module attribute
            if not isinstance(attr, types.ModuleType):
                tx.ctx.guards.class_attribute(obj, name, attr)
            return PythonValue(attr)
        return tx.ctx.wrap(attr, child)
    if isinstance(obj, os._Environ):
        return BuiltinMethodValue(value, name)  # read-only environment lookups are folded
    from dynamo_capture.tensor_hooks import PendingHookHandle

    if isinstance(obj, PendingHookHandle):
        if name != "remove":
            raise Unsupported(f"reading .{name} of a hook handle made in the frame")
        return BuiltinMethodValue(value, name)  # replayed after the graph (tensor_hooks)
    if (
        isinstance(obj, NUMPY_TYPE_DESCRIPTIONS)
        and source is None  # folded in the frame (one from outside is guarded as before)
        and not callable(getattr(obj, name))
    ):
        return PythonValue(getattr(obj, name))  # np.finfo(...).max: a limit, fixed
    if isinstance(obj, np.iinfo) and name in _IINFO_LIMITS and source is not None:
        # an np.iinfo from outside: its limits are properties of its kind and bits,
        # which the guards fix
        tx.ctx.guards.type_match(source, obj)
        for part in ("kind", "bits"):
            tx.ctx.guards.equals_match(AttrSource(source, part), getattr(obj, part))
        return PythonValue(getattr(obj, name))
    if name == "__dict__":
        names_now = _read_instance_dict(tx, obj, source)
        if names_now is not None:
            return names_now
    if isinstance(obj, torch.nn.Module):
        if name in ("_buffers", "__dict__") and _buffer_written(tx, obj):
            # NOTE: the table still holds the buffer the frame replaced (the write is
            # replayed after the graph): reading it whole would see the old tensor
            raise Unsupported("reading a module's buffers after the frame assigned one")
        replaced = tx.ctx.replaced_members.get((id(obj), name))
        if replaced is not None:  # torch.func.functional_call's tensor for it
            return replaced
        for table in ("_parameters", "_buffers", "_modules"):
            entries = obj.__dict__.get(table)
            written = tx.ctx.shadows.get(id(entries)) if entries is not None else None
            if written is not None:
                # the frame wrote the table (register_buffer in forward): its shadow holds
                # what eager's Module.__getattr__ would find now
                if not isinstance(written[2], DictValue):
                    raise Unsupported(f"reading a module attribute after its {table} changed")
                if name in written[2].items:
                    tx.ctx.written_reads += 1
                    return written[2].items[name]
                continue
            if entries is not None and name in entries:
                return tx.ctx.wrap(
                    entries[name], _module_member_source(source, table, entries[name], name)
                )
    if is_constant(obj) or isinstance(obj, list | tuple | dict | set | frozenset | torch.Size):
        if type(obj).__module__ != "builtins" and isinstance(
            inspect.getattr_static(type(obj), name, None),
            types.FunctionType | property | classmethod | staticmethod,
        ):
            return _class_attr(tx, value, type(obj), name)  # a subclass's Python method
        if name == "__class__":
            return PythonValue(type(obj))
        if not hasattr(obj, name):
            raise AttributeError(f"{type(obj).__name__!r} object has no attribute {name!r}")
        if callable(getattr(obj, name)) and callable(inspect.getattr_static(type(obj), name)):
            return BuiltinMethodValue(value, name)
        # a field (a namedtuple's, which may hold a function): its value
        return tx.ctx.wrap(getattr(obj, name), child)
    if isinstance(obj, type):
        return _type_attr(tx, value, obj, name)
    return _instance_attr(tx, value, name, child)


def _module_member_source(source: Any, table: str, member: Any, name: str) -> Any:
    if source is None:
        return None
    if table == "_modules":
        builtin = member is not None and is_builtin_module_class(type(member))
        return ModuleSource(source, name, builtin)
    return ParamBufferSource(source, name, table == "_buffers")


def _instance_attr(tx: Translator, value: PythonValue, name: str, child: Any) -> Value:
    obj = value.obj
    if name == "__class__":
        return PythonValue(type(obj))
    instance_dict = getattr(obj, "__dict__", None)
    if isinstance(instance_dict, dict) and id(instance_dict) in tx.ctx.shadows:
        raise Unsupported("reading an attribute of an object whose __dict__ the frame changed")
    if _user_data_descriptor(type(obj), name) is not None:
        return _class_attr(tx, value, type(obj), name)
    if isinstance(instance_dict, dict) and name in instance_dict:
        return tx.ctx.wrap(instance_dict[name], child)
    try:
        static = inspect.getattr_static(type(obj), name)
    except AttributeError:
        static = None
    if static is not None:
        if not _is_data_descriptor(static) and not _torch_defines(type(obj), name):
            # an attribute set on the object later would hide the class's
            tx.ctx.guards.not_in_instance_dict(value.source, obj, name)
        return _class_attr(tx, value, type(obj), name)
    attr = getattr(obj, name)  # a __getattr__ or a slot: read it now, guard on it
    if isinstance(attr, types.MethodType) and attr.__self__ is obj:
        return MethodValue(PythonValue(attr.__func__), value)
    return tx.ctx.wrap(attr, child)


def _builtin_method(cls: type, name: str) -> bool:
    """Whether `name` on a builtin subclass `cls` is a method of the builtin (list.append)."""
    static = inspect.getattr_static(cls, name, None)
    return isinstance(static, types.MethodDescriptorType | types.WrapperDescriptorType)


def _class_attr(tx: Translator, receiver: Value, cls: type, name: str) -> Value:
    """An attribute found on the class of `receiver` (an instance)."""
    from dynamo_capture.calls import call

    static = inspect.getattr_static(cls, name)
    _guard_class_attribute(tx, cls, name, static)
    if isinstance(static, property):
        if isinstance(static.fget, types.FunctionType):
            return call(tx, PythonValue(static.fget), [receiver], {})
        raise Unsupported(f"property {name!r} with a C getter")
    if isinstance(static, staticmethod):
        return PythonValue(static.__func__)
    if isinstance(static, classmethod):
        _check_plain_classmethod(static, name)
        return MethodValue(PythonValue(static.__func__), PythonValue(cls))
    if isinstance(static, types.FunctionType):
        # with a source, the method's defaults and cells are guarded where it reads them
        return MethodValue(PythonValue(static, class_member_source(cls, name)), receiver)
    if isinstance(static, LRU_CACHE_WRAPPER):
        # a method wrapped by functools.lru_cache / cache: bound as its __get__ binds it
        # (the call skips the cache and traces the method, as torch.compile does)
        return MethodValue(PythonValue(static, class_member_source(cls, name)), receiver)
    if type(static) is functools.partialmethod:
        # NOTE: torch.compile fails inside partialmethod.__get__ and runs the frame
        # eagerly, the method's function compiled as a frame of its own; so does capture
        error = Unsupported(
            f"functools.partialmethod {cls.__name__}.{name} read through an instance"
        )
        error.cannot_resume = True  # an inlined callee's frame too: it fails there
        error.partial_methods = [
            member
            for klass in cls.__mro__
            for member in vars(klass).values()
            if type(member) is functools.partialmethod
            and isinstance(member.func, types.FunctionType)
        ]
        raise error
    if isinstance(receiver, PythonValue):
        attr = getattr(receiver.obj, name)
        if isinstance(attr, types.MethodType):
            return MethodValue(PythonValue(attr.__func__), PythonValue(attr.__self__))
        if callable(attr) and not isinstance(attr, type):
            return BuiltinMethodValue(receiver, name)
        source = AttrSource(receiver.source, name) if receiver.source is not None else None
        return tx.ctx.wrap(attr, source)
    if is_constant(static) or static is None:
        return PythonValue(static)
    getter = getattr(type(static), "__get__", None)
    if isinstance(getter, types.FunctionType):  # a user descriptor
        return call(tx, PythonValue(getter), [PythonValue(static), receiver, PythonValue(cls)], {})
    if hasattr(static, "__get__") and not isinstance(static, type):
        raise Unsupported(f"descriptor {name!r} of {cls.__name__}")
    return _held_class_value(tx, cls, name, static)


def _held_class_value(tx: Translator, cls: type, name: str, static: Any) -> Value:
    """A class attribute (a dict, a list, an object) read through an instance made in the frame.

    A class its module holds as a global is read through it, so the value is guarded
    like any other (a dict's keys and the items read); for a class defined in a
    function, `cls.name` is guarded by identity only.
    """
    source = class_member_source(cls, name)
    if source is not None:
        tx.ctx.guards.id_match(source.base, cls)
        return tx.ctx.wrap(static, source)
    if isinstance(static, torch.Tensor):
        return tx.ctx.wrap(static, None)  # a tensor needs a source: Unsupported
    if not _torch_defines(cls, name):
        tx.ctx.guards.class_attribute(cls, name, static)
    return PythonValue(static)


def class_member_source(cls: type, name: str) -> AttrSource | None:
    """`cls.name` read through the module that holds `cls` as a global; None for a class
    defined in a function (or one of torch's, whose members are not guarded)."""
    module = sys.modules.get(cls.__module__)
    if module is None or getattr(module, cls.__qualname__, None) is not cls:
        return None
    if cls.__module__.split(".")[0] in TRUSTED_MODULES:
        return None
    return AttrSource(ModuleGlobalSource(cls.__module__, cls.__qualname__), name)


def _is_data_descriptor(static: Any) -> bool:
    """Whether a class attribute wins over an instance attribute of its name."""
    kind = type(static)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")


def _holds_attributes(target: Value) -> bool:
    """An object made in the frame whose attributes capture keeps: a user object, a dict,
    or an instance of a user list subclass."""
    if target.source is not None:  # type: ignore[attr-defined]
        return False
    if isinstance(target, ListValue):
        return target.cls not in (list, collections.deque)
    return isinstance(target, ObjectValue | DictValue)


def _can_hold(cls: type, name: str) -> bool:
    """Whether instances of `cls` take an attribute `name`: they have a __dict__, or a slot
    of that name."""
    if cls.__dictoffset__:
        return True
    static = inspect.getattr_static(cls, name, None)
    return isinstance(static, types.MemberDescriptorType)


def _user_data_descriptor(cls: type, name: str) -> Any:
    """The property or user descriptor with `__set__` that `cls.name` is, else None.

    Such a class attribute wins over the instance's own attribute of that name, on
    reads and on writes (slots and other C descriptors keep the instance's value).
    """
    if _torch_defines(cls, name):
        return None
    try:
        static = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    if isinstance(static, property):
        return static
    if isinstance(static, types.MemberDescriptorType | types.GetSetDescriptorType):
        return None
    if _is_data_descriptor(static) and not isinstance(static, type):
        return static
    return None


def _set_through_descriptor(
    tx: Translator, target: Value, cls: type, name: str, value: Value
) -> bool:
    """obj.name = value where the class's data descriptor takes the write: its setter runs."""
    from dynamo_capture.calls import call

    descriptor = _user_data_descriptor(cls, name)
    if descriptor is None:
        return False
    _guard_class_attribute(tx, cls, name, descriptor)
    if isinstance(descriptor, property):
        if descriptor.fset is None:
            from dynamo_capture.errors import raised_by_python

            error = AttributeError(f"property {name!r} of {cls.__name__!r} object has no setter")
            raise raised_by_python(error)
        if not isinstance(descriptor.fset, types.FunctionType):
            raise Unsupported(f"property {name!r} of {cls.__name__} with a C setter")
        call(tx, PythonValue(descriptor.fset), [target, value], {})
        return True
    setter = getattr(type(descriptor), "__set__", None)
    if not isinstance(setter, types.FunctionType):
        raise Unsupported(f"write through the descriptor {name!r} of {cls.__name__}")
    call(tx, PythonValue(setter), [PythonValue(descriptor), target, value], {})
    return True


def _torch_defines(cls: type, name: str) -> bool:
    """Whether `cls.name` resolves to a definition in torch's (or another trusted) module.

    Such methods are fixed like torch's own globals: neither the class attribute nor
    an instance attribute hiding it is guarded (a module's `forward` always is, by
    the module call itself).
    """
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__module__.split(".")[0] in TRUSTED_MODULES
    return False


def _torch_class_setting(cls: type, static: Any) -> bool:
    """Whether a class attribute torch defines is a setting its functions change
    (Distribution._validate_args, set by set_default_validate_args): a constant on a
    class other than a module's, guarded like a user class's constant. A module's
    class constants (`_version`, `call_super_init`) are fixed, as its methods are."""
    return is_constant(static) and not issubclass(cls, torch.nn.Module)


def _in_class_dicts(cls: type, name: str) -> bool:
    """Whether `name` is found in the class or its bases, not only on its metaclass."""
    return any(name in vars(klass) for klass in cls.__mro__)


def _chains(static: classmethod) -> bool:
    """Whether reading the classmethod runs its wrapped descriptor's `__get__` (before
    Python 3.13, `@classmethod @property`) instead of binding a function."""
    func = static.__func__
    return (
        sys.version_info < (3, 13)
        and not isinstance(func, types.FunctionType)
        and hasattr(type(func), "__get__")
    )


def _check_plain_classmethod(static: classmethod, name: str) -> None:
    if _chains(static):
        raise Unsupported(
            f"class attribute {name!r}: a classmethod wrapping a "
            f"{type(static.__func__).__name__} reached through super() or an instance"
        )


def _chained_classmethod(tx: Translator, cls: type, name: str, static: classmethod) -> Value:
    """`cls.name` for `@classmethod @property` (Python 3.11, 3.12): the property's getter
    called with the class. Guarded on the class dicts along the MRO: the classes before
    the one defining it still lack `name`, and that one still holds this classmethod."""
    from dynamo_capture.calls import call

    func = static.__func__
    if not (isinstance(func, property) and isinstance(func.fget, types.FunctionType)):
        raise Unsupported(
            f"class attribute {name!r}: a classmethod wrapping a {type(func).__name__}"
        )
    for klass in cls.__mro__:
        where = f"{klass.__qualname__}.__dict__"
        if name in vars(klass):
            tx.ctx.guards.mapping_item(vars(klass), where, name)
            break
        tx.ctx.guards.mapping_item(vars(klass), where, name, presence_only=True)
    return call(tx, PythonValue(func.fget), [PythonValue(cls)], {})


def _guard_class_attribute(tx: Translator, cls: type, name: str, static: Any) -> None:
    """Guard what `cls.name` resolves to, where capture used it (a method, a constant).

    Read through the class, a function is itself, a staticmethod its function, a
    classmethod a new bound method each time (its `__func__` is compared), a
    property the property. Other descriptors are left to the guards of their results.
    """
    if _torch_defines(cls, name) and not _torch_class_setting(cls, static):
        return  # torch's own methods (nn.Module.named_modules, ...): fixed, not guarded
    if isinstance(cls, type) and not _in_class_dicts(cls, name):
        # found on the metaclass: read through the class, a function binds to it and a
        # property runs (its result is guarded where it is read)
        if isinstance(static, types.FunctionType):
            tx.ctx.guards.class_attribute(cls, name, static, bound=True)
        return
    if isinstance(static, classmethod):
        if not _chains(static):  # a chained one guards the class dicts where it is read
            tx.ctx.guards.class_attribute(cls, name, static.__func__, bound=True)
    elif isinstance(static, staticmethod):
        tx.ctx.guards.class_attribute(cls, name, static.__func__)
    elif isinstance(static, types.FunctionType | property | type) or is_constant(static):
        tx.ctx.guards.class_attribute(cls, name, static)
    elif isinstance(static, types.BuiltinFunctionType) and getattr(cls, name, None) is static:
        tx.ctx.guards.class_attribute(cls, name, static)


def _type_attr(tx: Translator, value: PythonValue, cls: type, name: str) -> Value:
    try:
        static = inspect.getattr_static(cls, name)
    except AttributeError:
        static = None
    if static is not None and not _trusted_module(inspect.getmodule(cls)):
        _guard_class_attribute(tx, cls, name, static)
    if isinstance(static, classmethod):
        if _chains(static):
            return _chained_classmethod(tx, cls, name, static)
        return MethodValue(PythonValue(static.__func__), value)
    if isinstance(static, staticmethod):
        return PythonValue(static.__func__)
    if isinstance(static, types.FunctionType) and not _in_class_dicts(cls, name):
        return MethodValue(PythonValue(static), value)  # a method of the metaclass
    attr = getattr(cls, name)
    if isinstance(attr, types.FunctionType | types.BuiltinFunctionType | type):
        return PythonValue(attr)
    if _trusted_module(inspect.getmodule(cls)):
        if isinstance(attr, torch.Tensor):
            return tx.ctx.wrap(attr, AttrSource(value.source, name) if value.source else None)
        return PythonValue(attr)
    if value.source is None:
        return _held_class_value(tx, cls, name, attr)  # `type(obj).TABLE`
    return tx.ctx.wrap(attr, AttrSource(value.source, name))


def _super_attr(tx: Translator, value: SuperValue, name: str) -> Value:
    from dynamo_capture.calls import call
    from dynamo_capture.operations import python_type_of

    self_value = value.self_value
    if (
        isinstance(self_value, PythonValue)
        and isinstance(self_value.obj, type)
        and issubclass(self_value.obj, value.cls)
    ):
        mro, receiver_is_class = self_value.obj.__mro__, True
    else:
        mro, receiver_is_class = python_type_of(self_value).__mro__, False
    start = mro.index(value.cls) + 1 if value.cls in mro else 0
    for klass in mro[start:]:
        if name not in klass.__dict__:
            continue
        attr = klass.__dict__[name]
        _guard_class_attribute(tx, klass, name, attr)  # a base class's method patched later
        if isinstance(attr, staticmethod):
            return PythonValue(attr.__func__)
        if isinstance(attr, classmethod):
            _check_plain_classmethod(attr, name)
            owner = self_value if receiver_is_class else PythonValue(python_type_of(self_value))
            return MethodValue(PythonValue(attr.__func__), owner)
        if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
            return call(tx, PythonValue(attr.fget), [self_value], {})
        if isinstance(attr, types.FunctionType):
            return MethodValue(PythonValue(attr), self_value)
        if name == "__init__" and klass is object:
            return MethodValue(PythonValue(_object_init), self_value)
        if name == "__getattribute__" and klass is object and _raw_readable(self_value):
            return MethodValue(PythonValue(super_getattribute), self_value)
        if isinstance(attr, types.WrapperDescriptorType | types.MethodDescriptorType):
            return MethodValue(PythonValue(attr), self_value)
        return PythonValue(attr)
    raise AttributeError(f"'super' object has no attribute {name!r}")


def _replayable_attribute(obj: Any, name: str, value: Value) -> bool:
    """Whether a write of obj.name can be replayed after the graph: not a module's
    parameters or submodules; a buffer only given a plain tensor (which nn.Module's
    __setattr__, run by the replay, files among the buffers again)."""
    if isinstance(obj, type | types.ModuleType | types.FunctionType):
        return False
    if isinstance(obj, torch.nn.Module):
        if name in obj.__dict__.get("_buffers", ()):
            return isinstance(value, TensorValue) and value.python_type is torch.Tensor
        return not any(name in obj.__dict__.get(t, ()) for t in ("_parameters", "_modules"))
    return hasattr(obj, "__dict__")


def _read_instance_dict(tx: Translator, obj: Any, source: Any) -> Value | None:
    """`obj.__dict__` (or vars(obj)) of an outside object, read live: a break where the
    frame set or deleted one of its attributes before (the dict still holds the old
    ones until the replay after the graph); noted, so that such a write after it breaks.
    Read only for `key in obj.__dict__` (nn.Module.register_buffer's test), it is the
    names the dict holds now, the frame's writes and deletes included (returned)."""
    written = {
        name: item for (_, name), (target, _, item) in tx.ctx.attr_writes.items() if target is obj
    }
    if written:
        if not _consumed_by_contains(tx):
            # NOTE: the dict still holds what the frame replaced or deleted: reading it
            # whole would see the old values
            raise Unsupported(
                "reading the __dict__ of an object after the frame set or deleted one"
            )
        real = object.__getattribute__(obj, "__dict__")
        if source is not None:
            tx.ctx.guards.dict_keys(AttrSource(source, "__dict__"), real)
        names = {name for name in real if written.get(name) is not DELETED}
        names.update(name for name, item in written.items() if item is not DELETED)
        return DictValue({name: PythonValue(None) for name in names})
    tx.ctx.dicts_read.add(id(obj))
    return None


def _consumed_by_contains(tx: Translator) -> bool:
    """Whether the value the current instruction pushes is only tested with `in` by the
    next one (`key in obj.__dict__`), never kept."""
    current = tx.current
    if current is None or current.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
        return False
    index = tx.index_of[current.offset] + 1
    return index < len(tx.instructions) and tx.instructions[index].opname == "CONTAINS_OP"


def _check_dict_not_read(tx: Translator, obj: Any, name: str) -> None:
    if id(obj) in tx.ctx.dicts_read:
        raise Unsupported(f"setting or deleting .{name} of an object whose __dict__ the frame read")


def _buffer_written(tx: Translator, module: torch.nn.Module) -> bool:
    """The frame wrote one of the module's buffers (replayed after the graph)."""
    return any(
        written is module and name in module.__dict__.get("_buffers", ())
        for (_, name), (written, _, _) in tx.ctx.attr_writes.items()
    )


def _raw_readable(value: Value) -> bool:
    """An object whose attributes capture reads past its class's `__getattribute__`:
    one made in the frame, or one from outside (read by RawAttrSource)."""
    return isinstance(value, ObjectValue) or (
        isinstance(value, PythonValue) and not isinstance(value.obj, type | types.ModuleType)
    )


def raw_attr(tx: Translator, value: Value, name: str) -> Value:
    """`object.__getattribute__(value, name)`: the object's own attributes, then its
    class's, past the class's `__getattribute__`; raises AttributeError where none."""
    if isinstance(value, ObjectValue):
        return object_attr(tx, value, name)
    assert isinstance(value, PythonValue)
    obj = value.obj

    def raw_source():  # an object known only while capturing: its reads are too
        return None if value.source is None else RawAttrSource(value.source, name)

    written = tx.ctx.attr_writes.get((id(obj), name))
    if written is not None and written[0] is obj:  # written by the frame: its value now
        tx.ctx.written_reads += 1
        return _written_value(obj, name, written[2])
    if isinstance(obj, types.ModuleType):
        global_written = _module_global_written(tx, obj, name)
        if global_written is not None:
            return global_written
    if name == "__dict__":
        names_now = _read_instance_dict(tx, obj, value.source)
        if names_now is not None:
            return names_now
    instance_dict = (
        object.__getattribute__(obj, "__dict__") if hasattr(type(obj), "__dict__") else None
    )
    if isinstance(instance_dict, dict) and id(instance_dict) in tx.ctx.shadows:
        raise Unsupported("reading an attribute of an object whose __dict__ the frame changed")
    static = inspect.getattr_static(type(obj), name, _MISSING_ATTR)
    in_dict = isinstance(instance_dict, dict) and name in instance_dict
    if not in_dict and static is _MISSING_ATTR:
        raise AttributeError(name)
    if in_dict and (static is _MISSING_ATTR or not _is_data_descriptor(static)):
        return tx.ctx.wrap(instance_dict[name], raw_source())
    if static is not _MISSING_ATTR and not in_dict and not _is_data_descriptor(static):
        if value.source is not None:
            tx.ctx.guards.not_in_instance_dict(value.source, obj, name)
        return _class_attr(tx, value, type(obj), name)
    if isinstance(static, types.GetSetDescriptorType | types.MemberDescriptorType):
        # a slot, or `__dict__`: read as object.__getattribute__ reads it
        real = object.__getattribute__(obj, name)
        return tx.ctx.wrap(real, raw_source())
    return _class_attr(tx, value, type(obj), name)  # a property or another data descriptor


def _set_input_grad(tx: Translator, target: TensorValue, value: Value) -> bool:
    """`leaf.grad = g` on an input leaf tensor (a parameter): logged like an attribute
    write and replayed after the graph, as torch.compile does, where the setter cannot
    fail: `g` is None or a plain tensor of the leaf's static shape, dtype, device and
    layout (eager's setter raises otherwise; such a write breaks)."""
    real = _input_tensor(tx, target)
    if real is None or not real.is_leaf or type(real.grad) not in (torch.Tensor, type(None)):
        return False
    if isinstance(value, TensorValue):
        grad, leaf = value.example, target.example
        same = (
            value.python_type is torch.Tensor
            and all(type(size) is int for size in (*grad.shape, *leaf.shape))
            and (grad.shape, grad.dtype, grad.device, grad.layout)
            == (leaf.shape, leaf.dtype, leaf.device, leaf.layout)
        )
        if not same:
            return False
    elif not (isinstance(value, PythonValue) and value.obj is None):
        return False
    tx.ctx.guards.equals_match(AttrSource(target.source, "is_leaf"), True)
    key = (id(real), "grad")
    tx.ctx.attr_writes[key] = (real, target.source, value)
    tx.ctx.raw_attr_writes.discard(key)
    return True


_MISSING_ATTR = object()


class _Deleted:
    def __repr__(self) -> str:
        return "<attribute deleted by the frame>"


# What `attr_writes` holds for `del obj.name` on an outside object: replayed as delattr.
DELETED = PythonValue(_Deleted())


def replay_delete(obj: Any, name: str) -> None:
    """The replay of the frame's `del obj.name` (a write then a delete included): the
    instance's `__dict__` ends without `name`, as eager's does."""
    if name in vars(obj):
        delattr(obj, name)


def _written_value(obj: Any, name: str, value: Value) -> Value:
    """The value the frame wrote to `obj.name`; AttributeError, as eager raises it, for one
    the frame deleted (`delete_attr` took only attributes no class attribute backs)."""
    if value is DELETED:
        from dynamo_capture.errors import raised_by_python

        message = f"{type(obj).__name__!r} object has no attribute {name!r}"
        raise raised_by_python(AttributeError(message))
    return value


def delete_attr(tx: Translator, target: Value, name: str) -> None:
    """`del obj.name` on an object from outside the frame: logged like an attribute write
    (DELETED), replayed after the graph as `delattr`, and later reads in the frame raise
    AttributeError. Only an attribute of the instance's `__dict__` that no class
    attribute shadows or backs, on a class without its own `__delattr__` (torch's
    nn.Module one aside: it deletes a plain attribute as object's does)."""
    if not isinstance(target, PythonValue) or target.source is None:
        from dynamo_capture.operations import python_type_of

        kind = python_type_of(target).__name__
        raise Unsupported(f"del of attribute {name!r} of a {kind} (not modelled)")
    obj, cls = target.obj, type(target.obj)
    if isinstance(obj, types.ModuleType):  # a global of the module's code (not modelled)
        raise Unsupported(f"del of the module attribute {name!r}")
    deleter = inspect.getattr_static(cls, "__delattr__", None)
    if isinstance(deleter, types.FunctionType) and not _torch_defines(cls, "__delattr__"):
        raise Unsupported(f"del on a {cls.__name__}, whose class defines __delattr__")
    if inspect.getattr_static(cls, name, _MISSING_ATTR) is not _MISSING_ATTR:
        raise Unsupported(f"del .{name} of a {cls.__name__}, whose class defines {name!r}")
    custom_lookup = any(
        inspect.getattr_static(cls, hook, None) not in (None, object.__getattribute__)
        for hook in ("__getattr__", "__getattribute__")
    )
    if custom_lookup and not _torch_defines(cls, "__getattr__"):
        raise Unsupported(f"del .{name} of a {cls.__name__}, whose class defines __getattr__")
    if not _replayable_attribute(obj, name, DELETED):
        raise Unsupported(f"del .{name} of a {cls.__name__} (not replayable)")
    key = (id(obj), name)
    written = tx.ctx.attr_writes.get(key)
    if written is not None and written[0] is obj:
        _written_value(obj, name, written[2])  # AttributeError where deleted already
    else:  # whether it is there now, guarded (its value is not read)
        present = name in vars(obj)
        tx.ctx.guards.has_attr(target.source, name, present)
        if not present:
            from dynamo_capture.errors import raised_by_python

            message = f"{cls.__name__!r} object has no attribute {name!r}"
            raise raised_by_python(AttributeError(message))
    if id(getattr(obj, "__dict__", None)) in tx.ctx.shadows:
        raise Unsupported("deleting an attribute of an object whose __dict__ the frame changed")
    _check_dict_not_read(tx, obj, name)
    tx.ctx.attr_writes[key] = (obj, target.source, DELETED)
    tx.ctx.raw_attr_writes.discard(key)


def super_getattribute(self: Any, name: str) -> Any:
    """object.__getattribute__ seen through super() (capture reads the object's own
    attributes for it)."""
    return object.__getattribute__(self, name)


def _object_init(self: Any, *args: Any, **kwargs: Any) -> None:
    """object.__init__ seen through super(): does nothing."""


def set_attr(tx: Translator, target: Value, name: str, value: Value, *, raw: bool = False) -> None:
    """target.name = value: kept on values made while capturing, replayed for outside objects.

    raw: object.__setattr__ itself (skips a Python __setattr__ of the class).
    """
    if name == "__class__":
        # NOTE: capture reads an object's class from its value (isinstance, type(),
        # methods, guards); a class changed in the frame would leave those reads stale
        # (as torch.compile, the write breaks the graph)
        raise Unsupported("assigning an object's __class__")
    if isinstance(target, PythonValue) and any(target.obj is cls for cls in tx.ctx.classes_made):
        raise Unsupported(f"writing .{name} of a class made by type() in the frame")
    if tx.ctx.reading_ahead is not None:
        from dynamo_capture.lazy_iterators import check_side_effect

        check_side_effect(tx, f"the attribute write .{name}")
    if _holds_attributes(target):
        setter = inspect.getattr_static(target.cls, "__setattr__", None)
        if isinstance(setter, types.FunctionType) and not raw:
            from dynamo_capture.calls import call

            call(tx, PythonValue(setter), [target, PythonValue(name), value], {})
            return
        if not _set_through_descriptor(tx, target, target.cls, name, value):
            if isinstance(target, ObjectValue | ListValue) and not _can_hold(target.cls, name):
                from dynamo_capture.errors import raised_by_python

                message = f"{target.cls.__name__!r} object has no attribute {name!r}"
                raise raised_by_python(AttributeError(message))
            target.attrs[name] = value
        return
    if isinstance(target, FunctionValue):
        from dynamo_capture.function_values import set_function_attr

        if set_function_attr(target, name, value):
            return
    if isinstance(target, PythonValue) and target.source is None and made_scalar(target.obj):
        raise Unsupported(f"setting {name!r} on a {type(target.obj).__name__} made in the frame")
    if isinstance(target, PythonValue) and _replayable_attribute(target.obj, name, value):
        cls = type(target.obj)
        setter = inspect.getattr_static(cls, "__setattr__", None)
        if (
            isinstance(setter, types.FunctionType)
            and not raw
            and not _torch_defines(cls, "__setattr__")
        ):
            if isinstance(target.obj, torch.nn.Module):
                # NOTE: its own __setattr__ would run nn.Module's in the frame; read back,
                # the attribute would be the value before that __setattr__ changed it
                raise Unsupported(f"setting {name!r} on a module whose class defines __setattr__")
            from dynamo_capture.calls import call

            call(tx, PythonValue(setter), [target, PythonValue(name), value], {})
            return
        if _set_through_descriptor(tx, target, cls, name, value):
            return
        if id(getattr(target.obj, "__dict__", None)) in tx.ctx.shadows:
            raise Unsupported("setting an attribute of an object whose __dict__ the frame changed")
        _check_dict_not_read(tx, target.obj, name)
        if _is_plain_module(target.obj) and not raw:
            # a module's attribute is a global of the code defined in it: one log for
            # both, so `module.name = v` reaches the module's functions' LOAD_GLOBAL and
            # a `global name` assignment in them reaches `module.name`
            scope = vars(target.obj)
            tx.ctx.global_writes[(id(scope), name)] = (scope, value)
            return
        key = (id(target.obj), name)
        tx.ctx.attr_writes[key] = (target.obj, target.source, value)
        if raw:
            tx.ctx.raw_attr_writes.add(key)
        else:
            tx.ctx.raw_attr_writes.discard(key)
        return
    if isinstance(target, TensorValue) and name == "grad" and _set_input_grad(tx, target, value):
        return
    if isinstance(target, TensorValue):  # made in the frame or not: no graph op writes it
        raise Unsupported(f"assignment to Tensor.{name} (no graph operation writes it)")
    kind = target.obj if isinstance(target, PythonValue) else target
    raise Unsupported(
        f"assignment to attribute {name!r} of a {type(kind).__name__} that exists outside the "
        "frame (a side effect; graph breaks are needed to replay it)"
    )
