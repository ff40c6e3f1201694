"""Calls: what capture does with `fn(*args, **kwargs)` for each kind of callee.

a user function, method, lambda or closure   inlined (a child Translator)
an nn.Module                                 forward pre-hooks, forward, forward hooks inlined
a torch function or Tensor method            a graph node (torch_calls)
a builtin                                    the builtin table (builtin_calls)
allow_in_graph(fn)                           one graph node
substitute_in_graph(original)                the stand-in is inlined
disable(fn)                                  Unsupported (the frame runs eagerly)
assume_constant_result(fn)                   called now, its result a constant
a torch.compile'd or traced function         the function it wraps is inlined
torch.func transforms, torch.cond             one graph node (function_transforms)
Fn.apply of a torch.autograd.Function        one graph node (autograd_functions)
a NumPy function on arrays from tensors       one graph node (numpy_arrays)
a user class                                 a new ObjectValue, its __init__ inlined
"""

from __future__ import annotations

import abc
import collections
import contextlib
import enum
import functools
import inspect
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.attributes import LRU_CACHE_WRAPPER, raw_attr, super_getattribute
from dynamo_capture.errors import (
    GraphValueArgument,
    NeedsEagerFrame,
    Unsupported,
    raised_by_python,
)
from dynamo_capture.made_modules import plain_constant, plainly_made_module
from dynamo_capture.operations import (
    NotConstant,
    as_constant,
    constant_arguments,
    describe,
    dict_items,
    hashable_key,
    python_type_of,
    sequence_items,
)
from dynamo_capture.output_graph import RECURRENT_MODULES, is_constant, recurrent_module_break
from dynamo_capture.region_reuse import MODULE_CALLS, module_call_counter, record_call
from dynamo_capture.registry import (
    disabled_reason,
    is_allowed_in_graph,
    is_constant_result,
    is_nonstrict_traced,
    substitute_for,
)
from dynamo_capture.scalar_subclasses import construct_scalar, scalar_base
from dynamo_capture.sources import (
    AttrSource,
    CellContentsSource,
    DefaultArgSource,
    ModuleGlobalSource,
    Source,
    item_source,
)
from dynamo_capture.state_setters import (
    DEFAULT_DTYPE_SETTERS,
    DETERMINISTIC_SETTERS,
    STATE_READERS,
    STATE_SETTERS,
    call_default_dtype_setter,
    call_deterministic_setter,
    call_state_setter,
)
from dynamo_capture.torch_markers import (
    is_torch_disable_factory,
    is_torch_graph_break,
    torch_inline_target,
)
from dynamo_capture.values import (
    EAGER_BUILTIN_TYPES,
    NULL,
    BuiltinMethodValue,
    CellValue,
    ContextValue,
    DictValue,
    FunctionValue,
    ListValue,
    MethodValue,
    ObjectValue,
    PartialValue,
    PythonValue,
    SetValue,
    TensorValue,
    TupleValue,
    Value,
    runs_eagerly_on_its_own,
)
from guards.tensor_subclasses import is_traceable_subclass, is_traceable_subclass_type

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "MODULE_CALLS",
    "call",
    "child_translator",
    "decorate_with_context",
    "inline_function",
    "is_made_in_frame",
]

_CO_GENERATOR = inspect.CO_GENERATOR
_nn_call = torch.nn.Module.__call__
_FX_WRAPPED_CALL = torch.fx.graph_module._WrappedCall
_FX_CALL_WRAPPED = "GraphModule.recompile.<locals>.call_wrapped"  # a GraphModule class's __call__


def call(tx: Translator, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """fn(*args, **kwargs) while capturing."""
    if isinstance(fn, MethodValue):
        return call(tx, fn.func, [fn.self_value, *args], kwargs)
    if isinstance(fn, FunctionValue):
        return inline_function(tx, fn, args, kwargs, None)
    if isinstance(fn, BuiltinMethodValue):
        from dynamo_capture.methods import call_method
        from dynamo_capture.numpy_arrays import is_ndarray, ndarray_method, tensor_to_numpy

        if is_ndarray(fn.receiver):
            return ndarray_method(tx, fn.receiver, fn.name, args, kwargs)
        if isinstance(fn.receiver, TensorValue) and fn.name == "numpy":
            if args or any(key != "force" for key in kwargs):
                raise Unsupported("Tensor.numpy() with arguments other than force=")
            force = kwargs.get("force", PythonValue(False))
            return tensor_to_numpy(tx, fn.receiver, bool(as_constant(force)))
        return call_method(tx, fn.receiver, fn.name, args, kwargs)
    if isinstance(fn, PartialValue):
        return call(tx, fn.func, [*fn.args, *args], {**fn.kwargs, **kwargs})
    if isinstance(fn, ObjectValue):
        method = getattr(fn.cls, "__call__", None)  # noqa: B004
        if isinstance(method, types.FunctionType):
            tx.ctx.guards.class_attribute(fn.cls, "__call__", method)
            return call(tx, PythonValue(method), [fn, *args], kwargs)
    if isinstance(fn, PythonValue):
        if fn.obj is super_getattribute and len(args) == 2:
            # `super().__getattribute__(name)` in a class's own __getattribute__: the
            # object's attributes, past that method
            try:
                return raw_attr(tx, args[0], as_constant(args[1]))
            except AttributeError as error:
                raise raised_by_python(error) from None
        return _call_python(tx, fn, args, kwargs)
    if isinstance(fn, ContextValue) and len(args) == 1 and not kwargs:
        return decorate_with_context(tx, fn, args[0])
    if fn is NULL:
        raise Unsupported("internal: called NULL")
    raise Unsupported(f"calling a {python_type_of(fn).__name__} object")


_CONSTANT_TYPES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def _is_python_constant(value: object) -> bool:
    if isinstance(value, tuple | frozenset):
        return all(_is_python_constant(item) for item in value)
    return isinstance(value, _CONSTANT_TYPES)


def _call_constant_result(
    tx: Translator, obj: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """A call to an assume_constant_result function: run now, the result a constant.
    Its arguments are constants, or objects from outside the frame (a method's `self`)
    where the frame has written no outside object yet (what the function reads of them
    is what it would read eagerly), as torch.compile calls it while tracing."""
    name = getattr(obj, "__qualname__", type(obj).__name__)
    nothing_written = not (tx.ctx.attr_writes or tx.ctx.shadows or tx.ctx.global_writes)

    def real(value: Value) -> Any:
        outside = isinstance(value, PythonValue) and value.source is not None
        if outside and nothing_written and not isinstance(value.obj, torch.Tensor):
            return value.obj
        return as_constant(value)

    try:
        real_args, real_kwargs = [real(a) for a in args], {k: real(v) for k, v in kwargs.items()}
    except NotConstant:
        raise Unsupported(
            f"{name} is marked assume_constant_result but is called with values known "
            "only when it runs"
        ) from None
    result = obj(*real_args, **real_kwargs)
    if not _is_python_constant(result):
        raise Unsupported(
            f"{name} is marked assume_constant_result but returned a "
            f"{type(result).__name__}, not a Python constant"
        )
    return PythonValue(result)


_PROFILERS = (torch.profiler.profile, torch.autograd.profiler.profile)


def decorate_with_context(tx: Translator, context: ContextValue, func: Value) -> Value:
    """`@torch.no_grad()` (or another torch context) applied inside the frame: torch's own
    decorator, inlined, with a fresh context made for each call."""
    from dynamo_capture.methods import context_factory

    made = context_factory(context)
    if made is None or not isinstance(func, FunctionValue | PythonValue):
        raise Unsupported("a context manager capture knows used as a decorator of this object")
    factory, factory_args = made
    if context.kwargs.get("set_on_construction") and context.saved is not None:
        # set_grad_enabled(mode) set the mode when made; its __call__ (the decorator)
        # restores the mode before, and each call of the function sets it again
        from dynamo_capture.methods import set_grad_mode

        set_grad_mode(tx, context.saved)
        context.saved = None
    fresh = PythonValue(functools.partial(factory, *factory_args))
    return call(tx, PythonValue(decorated_by_context), [fresh, func], {})


def decorated_by_context(
    factory: Callable[[], Any], func: Callable[..., Any]
) -> Callable[..., Any]:
    """`func` run inside a context `factory()` makes at each call: what torch's context
    decorators do for a plain function, written here so that capture inlines the same
    code whatever torch's version (its private helper changed between versions)."""
    if inspect.isgeneratorfunction(func) or inspect.isclass(func):
        return torch.utils._contextlib.context_decorator(factory, func)

    @functools.wraps(func)
    def decorated(*args: Any, **kwargs: Any) -> Any:
        with factory():
            return func(*args, **kwargs)

    return decorated


def _inference_mode(args: list[Value], kwargs: dict[str, Value]) -> Value:
    """torch.inference_mode(mode): entered and left by graph nodes, as torch.compile does."""
    try:
        real_args, real_kwargs = constant_arguments(args, kwargs)
    except NotConstant as error:
        raise Unsupported("torch.inference_mode with a mode known only when it runs") from error
    mode = real_args[0] if real_args else real_kwargs.get("mode", True)
    if not isinstance(mode, bool):
        raise Unsupported("torch.inference_mode used as a decorator inside captured code")
    return ContextValue("inference", (mode,))


def _set_grad_enabled(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """torch._C._set_grad_enabled(mode): the mode changes now and in the graph."""
    from dynamo_capture.grad_mode_pass import KEEP
    from dynamo_capture.methods import set_grad_mode

    try:
        (mode,), _ = constant_arguments(args, kwargs)
    except (NotConstant, ValueError) as error:
        raise Unsupported(
            "torch._C._set_grad_enabled with a mode known only when it runs"
        ) from error
    node = set_grad_mode(tx, bool(mode))
    node.meta[KEEP] = True  # a call the code makes: kept like torch.compile keeps it
    return PythonValue(None)


def _class_source(cls_value: Value, name: str) -> Source | None:
    """Where a class's own `__init__` / `__new__` is read from: its closure cells (a class
    made by a factory function) are then outside values read and written as such."""
    source = getattr(cls_value, "source", None)
    return AttrSource(source, name) if source is not None else None


def _made_exception(value: Value) -> bool:
    """An exception instance made while capturing (not one from outside the frame)."""
    return (
        isinstance(value, PythonValue)
        and value.source is None
        and isinstance(value.obj, BaseException)
    )


def _construct_exception(
    tx: Translator, cls_value: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> PythonValue:
    """An exception instance made while capturing: a real object (what `raise` raises),
    from constant arguments. A class's own Python `__init__` is interpreted on it, not
    run for real: its writes (to the instance, to outside objects) and reads are the
    captured code's, done every call (run once at capture they would be lost)."""
    cls = cls_value.obj
    try:
        real_args, real_kwargs = constant_arguments(args, kwargs)
    except NotConstant as error:
        made = _exception_holding_values(cls, args, kwargs)
        if made is None:
            raise Unsupported(f"creating a {cls.__name__} from non-constant values") from error
        return made
    own_new = any(
        "__new__" in vars(klass) for klass in cls.__mro__ if klass.__module__ != "builtins"
    )
    init = cls.__init__
    if not isinstance(init, types.FunctionType):
        if own_new:
            raise Unsupported(f"creating a {cls.__name__}, whose class defines __new__")
        return PythonValue(cls(*real_args, **real_kwargs))
    if own_new:
        raise Unsupported(f"creating a {cls.__name__}, whose class defines __new__")
    tx.ctx.guards.class_attribute(cls, "__init__", init)
    # BaseException.__new__ sets `args` (what `__init__` may replace through super())
    instance = PythonValue(cls.__new__(cls, *real_args, **real_kwargs))
    returned = inline_function(
        tx, init, [instance, *args], kwargs, _class_source(cls_value, "__init__")
    )
    if not (isinstance(returned, PythonValue) and returned.obj is None):
        raise Unsupported(f"{cls.__name__}.__init__ returned a value")
    return instance


# builtin exception classes whose __init__ keeps its arguments as `args` and nothing else
_PLAIN_ARGS_EXCEPTIONS = frozenset(
    {Exception, ValueError, TypeError, RuntimeError, KeyError, IndexError, LookupError,
     AssertionError, ArithmeticError, ZeroDivisionError, NotImplementedError, AttributeError}
)  # fmt: skip


def _exception_holding_values(
    cls: type, args: list[Value], kwargs: dict[str, Value]
) -> PythonValue | None:
    """`ValueError(x * 2)`: the exception, its arguments known only when the graph runs
    kept as GraphValueArgument stand-ins (read back through `.args`), as torch.compile
    keeps the tensor in the exception. None where its class could read or change them
    (an own `__init__` / `__new__` or another builtin base) or keywords are passed."""
    builtin = next(klass for klass in cls.__mro__ if klass.__module__ == "builtins")
    own = cls.__mro__[: cls.__mro__.index(builtin)]
    if kwargs or builtin not in _PLAIN_ARGS_EXCEPTIONS:
        return None
    if any(name in vars(klass) for klass in own for name in ("__init__", "__new__", "__str__")):
        return None
    real = []
    for argument in args:
        try:
            real.append(as_constant(argument))
        except NotConstant:
            real.append(GraphValueArgument(argument))
    return PythonValue(cls(*real))


def _call_torch_disable(obj: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`torch.compiler.disable(f)` in the frame: made now, as torch.compile makes it
    while tracing, of a function or method known while capturing (or with no function:
    the decorator `disable(reason=...)` gives). It only wraps `f` in a function marked
    to run eagerly; a call of that wrapper breaks the graph."""
    try:
        real_args, real_kwargs = constant_arguments(args, kwargs)
    except NotConstant as error:
        raise Unsupported("torch.compiler.disable of a value known only when it runs") from error
    target = real_args[0] if real_args else real_kwargs.get("fn")
    if target is not None and not isinstance(target, types.FunctionType | types.MethodType):
        kind = type(target).__name__
        raise Unsupported(f"torch.compiler.disable of a {kind} inside captured code")
    return PythonValue(obj(*real_args, **real_kwargs))


def _context_dunder(context: ContextValue, obj: Any) -> bool:
    """Whether `obj` is the `__enter__` or `__exit__` of the type of `context`."""
    from dynamo_capture.operations import python_type_of

    name = getattr(obj, "__name__", None)
    if name not in ("__enter__", "__exit__"):
        return False
    try:
        kind = python_type_of(context)
    except Unsupported:
        return False
    return getattr(kind, name, None) is obj


def _call_python(
    tx: Translator, fn: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    from dynamo_capture.argument_counts import check_call_arguments
    from dynamo_capture.autograd_functions import call_autograd_function
    from dynamo_capture.builtin_calls import BUILTIN_HANDLERS, call_c_function
    from dynamo_capture.function_transforms import call_function_transform, call_outside_transform
    from dynamo_capture.generator_contexts import CONTEXTMANAGER_HELPER, generator_context
    from dynamo_capture.nonstrict_calls import call_nonstrict_traced
    from dynamo_capture.numpy_arrays import call_numpy
    from dynamo_capture.optimizer_steps import unpatched_init_group
    from dynamo_capture.polyfills import call_polyfill
    from dynamo_capture.torch_calls import call_torch, is_torch_callable

    obj = fn.obj
    if isinstance(obj, weakref.ReferenceType) and not args and not kwargs:
        # before any table lookup: a weak reference hashes its referent (a hook table)
        return _dereference(tx, obj)
    if type(obj).__hash__ is None and not isinstance(obj, type):
        # an unhashable callable (a list subclass with `__call__`) is in no table of
        # callees: its class's own `__call__`
        return _call_instance(tx, fn, args, kwargs)
    if args and isinstance(args[0], ContextValue) and _context_dunder(args[0], obj):
        # `type(cm).__enter__(cm)`: the context's own enter (or exit)
        from dynamo_capture.methods import call_method

        return call_method(tx, args[0], obj.__name__, list(args[1:]), kwargs)
    overridden = _torch_function_machinery(tx, obj, args, kwargs)
    if overridden is not None:
        return overridden
    if isinstance(getattr(type(obj), "__ember_capture_target__", None), property):
        # a compiled callable called from captured code: inline what it compiles
        compiled_target = obj.__ember_capture_target__
        source = AttrSource(fn.source, "target") if fn.source is not None else None
        return call(tx, tx.ctx.wrap(compiled_target, source), args, kwargs)
    substitute = substitute_for(obj)
    if substitute is not None:
        return _call_substitute(tx, substitute, args, kwargs)
    transformed = call_function_transform(tx, obj, args, kwargs)
    if transformed is not None:
        return transformed
    transformed = call_outside_transform(tx, fn, args, kwargs)
    if transformed is not None:
        return transformed
    applied = call_autograd_function(tx, fn, args, kwargs)
    if applied is not None:
        return applied
    numpy_result = call_numpy(tx, obj, args, kwargs)
    if numpy_result is not None:
        return numpy_result
    if is_allowed_in_graph(obj):
        return tx.ctx.call("call_function", obj, tuple(args), kwargs, allow_python_result=True)
    if is_nonstrict_traced(obj):
        return call_nonstrict_traced(tx, obj, args, kwargs)
    reason = disabled_reason(obj)
    if reason is not None and isinstance(obj, types.MethodType):
        original = unpatched_init_group(obj.__func__, obj.__self__)
        if original is not None:  # torch.compile's patch of an optimizer's _init_group
            source = AttrSource(fn.source, "__self__") if fn.source is not None else None
            receiver = tx.ctx.wrap(obj.__self__, source)
            return inline_function(tx, original, [receiver, *args], kwargs, None)
    elif reason is not None and args and isinstance(args[0], PythonValue):
        original = unpatched_init_group(obj, args[0].obj)
        if original is not None:
            return inline_function(tx, original, args, kwargs, None)
    if reason is not None:
        error = Unsupported(f"call to {describe(fn)}, which must run eagerly: {reason}")
        error.eager_call = True
        raise error
    if is_torch_graph_break(obj):
        raise Unsupported(f"{describe(fn)}() forces a graph break here")
    if obj is torch._C._set_grad_enabled:  # a grad-mode context's own __enter__/__exit__
        return _set_grad_enabled(tx, args, kwargs)
    if obj is torch.is_inference_mode_enabled and tx.ctx.open_inference_modes:
        # NOTE: torch.compile breaks here (it folds the query outside such a block)
        raise Unsupported("torch.is_inference_mode_enabled() inside an inference_mode block")
    if obj in UNTRACED_CONTEXT_FUNCTIONS:
        error = Unsupported(f"{describe(fn)}(...) is not traced (as torch.compile)")
        error.outside_context = True
        raise error
    if obj in DEFAULT_DTYPE_SETTERS:
        return call_default_dtype_setter(tx, obj, args, kwargs)
    if obj in DETERMINISTIC_SETTERS:
        return call_deterministic_setter(tx, obj, args, kwargs)
    if obj in STATE_SETTERS:  # torch contexts' own state changes (sdpa_kernel's)
        tx.ctx.state_set_in_graph = True
        return call_state_setter(tx, obj, args, kwargs)
    if obj in STATE_READERS:  # the state such a context restores: read now
        if tx.ctx.state_set_in_graph:
            # NOTE: the graph sets that state when it runs, not while capturing: a read
            # now would see the state from before (a break: read it eagerly)
            raise Unsupported(f"{describe(fn)} after the graph set the state it reads")
        try:
            real_args, real_kwargs = constant_arguments(args, kwargs)
        except NotConstant as error:
            raise Unsupported(f"{describe(fn)} of values known only when it runs") from error
        return PythonValue(obj(*real_args, **real_kwargs))
    _check_not_eager_package(obj)
    if is_constant_result(obj):
        tx.ctx.unguarded_constants.append(getattr(obj, "__qualname__", type(obj).__name__))
        return _call_constant_result(tx, obj, args, kwargs)
    if is_torch_disable_factory(obj):
        return _call_torch_disable(obj, args, kwargs)
    inline_target = torch_inline_target(obj)
    if inline_target is not None:
        source = AttrSource(fn.source, "_torchdynamo_inline") if fn.source is not None else None
        return call(tx, tx.ctx.wrap(inline_target, source), args, kwargs)
    handler = _lookup(BUILTIN_HANDLERS, obj)
    if handler is not None:
        check_call_arguments(obj, len(args), tuple(kwargs))
        return handler(tx, args, kwargs)
    polyfilled = call_polyfill(tx, obj, args, kwargs)
    if polyfilled is not None:
        return polyfilled
    if isinstance(obj, torch.nn.Module):
        return call_module(tx, fn, args, kwargs)
    if obj is _nn_call and args and isinstance(args[0], PythonValue):
        if isinstance(args[0].obj, torch.nn.Module):
            # nn.Module.__call__(module, ...), as a class's own __call__ reaches it by
            # super().__call__(...): the module's hooks and forward, as call_module runs
            # them (the class's __call__ around it was tagged as the module's call)
            if isinstance(args[0].obj, RECURRENT_MODULES):
                raise recurrent_module_break(args[0].obj)
            return _call_module_hooks_and_forward(tx, args[0], list(args[1:]), kwargs)
    if isinstance(obj, types.FunctionType) and obj.__code__ is CONTEXTMANAGER_HELPER:
        return generator_context(tx, fn, args, kwargs)  # torch's own contextmanagers too
    if _is_grad_switch_clone(obj):
        # NOTE: `@torch.set_grad_enabled(mode)`'s wrapper makes a fresh context by
        # `self.clone()`, which sets the mode when made: traced (its `self.__class__(mode)`
        # records the switch and the mode to restore), never run while capturing
        source = AttrSource(fn.source, "__self__") if fn.source is not None else None
        receiver = tx.ctx.wrap(obj.__self__, source)
        return inline_function(tx, obj.__func__, [receiver, *args], kwargs, None)
    if is_torch_callable(obj) and not _inlined_for_callable_argument(obj, args, kwargs):
        return call_torch(tx, obj, args, kwargs)
    if isinstance(obj, types.FunctionType):
        return inline_function(tx, obj, args, kwargs, fn.source)
    if isinstance(obj, types.MethodType):
        source = AttrSource(fn.source, "__self__") if fn.source is not None else None
        receiver = tx.ctx.wrap(obj.__self__, source)
        return call(tx, PythonValue(obj.__func__), [receiver, *args], kwargs)
    if isinstance(obj, functools.partial):
        return _call_real_partial(tx, fn, args, kwargs)
    if isinstance(obj, LRU_CACHE_WRAPPER) and callable(getattr(obj, "__wrapped__", None)):
        # NOTE: as torch.compile does, the cache is skipped and the wrapped function
        # traced: the graph computes what the function computes on these arguments
        source = AttrSource(fn.source, "__wrapped__") if fn.source is not None else None
        return call(tx, tx.ctx.wrap(obj.__wrapped__, source), args, kwargs)
    if isinstance(obj, type):
        return construct(tx, fn, args, kwargs)
    if obj is type.__call__ and args and isinstance(args[0], PythonValue):
        if isinstance(args[0].obj, type) and not issubclass(args[0].obj, torch.nn.Module):
            return construct(tx, args[0], args[1:], kwargs, by_type_call=True)
    if (
        obj is object.__getattribute__
        and len(args) == 2
        and (isinstance(args[0], ObjectValue) or _own_getattribute(args[0]))
    ):
        # NOTE: as torch.compile, a direct `object.__getattribute__(self, name)` on an
        # object made in the frame, or on one whose class has its own, runs the frame
        # eagerly
        raise NeedsEagerFrame(
            "object.__getattribute__ called directly on an object made in the frame, or "
            "whose class defines __getattribute__"
        )
    if isinstance(obj, types.MethodDescriptorType | types.WrapperDescriptorType) and args:
        from dynamo_capture.methods import call_method

        receiver = args[0]
        if (
            obj.__name__ == "__init__"
            and issubclass(obj.__objclass__, BaseException)
            and obj.__objclass__.__module__ == "builtins"
            and _made_exception(receiver)
            and isinstance(receiver.obj, obj.__objclass__)  # type: ignore[attr-defined]
        ):
            # super().__init__(...) in an exception class's own __init__: sets `args`
            assert isinstance(receiver, PythonValue)
            try:
                real_args, real_kwargs = constant_arguments(args[1:], kwargs)
            except NotConstant as error:
                raise Unsupported("an exception's args that are not constants") from error
            obj(receiver.obj, *real_args, **real_kwargs)
            return PythonValue(None)
        if isinstance(receiver, PythonValue) and receiver.source is None:
            resolved = inspect.getattr_static(type(receiver.obj), obj.__name__, None)
            if resolved is not None and resolved is not obj:
                # NOTE: called by name, the receiver's class's own method would run
                raise Unsupported(
                    f"{obj.__qualname__} called on a {type(receiver.obj).__name__}, "
                    "whose class overrides it"
                )
        return call_method(tx, receiver, obj.__name__, list(args[1:]), kwargs)
    if isinstance(obj, types.BuiltinMethodType) and isinstance(obj.__self__, torch.Tensor):
        # a tensor's bound method held as a value (`op = t.add`): a method call on the tensor
        from dynamo_capture.methods import call_method

        source = AttrSource(fn.source, "__self__") if fn.source is not None else None
        return call_method(tx, tx.ctx.wrap(obj.__self__, source), obj.__name__, args, kwargs)
    if isinstance(obj, types.BuiltinFunctionType | types.BuiltinMethodType):
        return call_c_function(tx, obj, args, kwargs)
    return _call_instance(tx, fn, args, kwargs)


def _call_instance(
    tx: Translator, fn: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """An instance called: its class's own Python `__call__`, inlined."""
    obj = fn.obj
    method = getattr(type(obj), "__call__", None)  # noqa: B004
    if isinstance(method, types.FunctionType):
        tx.ctx.guards.class_attribute(type(obj), "__call__", method)
        return call(tx, PythonValue(method), [fn, *args], kwargs)
    raise Unsupported(f"call to {describe(fn)} ({type(obj).__name__}), which capture cannot trace")


_TENSOR_TORCH_FUNCTION = torch.Tensor.__torch_function__.__func__  # type: ignore[attr-defined]


def _torch_function_machinery(
    tx: Translator, obj: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """torch's own override machinery called from the user's overrides (see
    torch_function_dispatch); None for any other callee."""
    from dynamo_capture.torch_function_dispatch import (
        default_torch_function,
        is_mode_class,
        returns_unwrapped,
    )

    if obj is returns_unwrapped and len(args) == 1 and isinstance(args[0], PythonValue):
        return PythonValue(returns_unwrapped(args[0].obj))
    if obj is _TENSOR_TORCH_FUNCTION or getattr(obj, "__func__", None) is _TENSOR_TORCH_FUNCTION:
        # `super().__torch_function__(...)`: torch's default handling
        owner = [PythonValue(obj.__self__)] if obj is not _TENSOR_TORCH_FUNCTION else []
        return inline_function(tx, default_torch_function, [*owner, *args], kwargs, None)
    mode_methods = (
        torch.overrides.TorchFunctionMode.__enter__,
        torch.overrides.TorchFunctionMode.__exit__,
    )
    if any(obj is method for method in mode_methods) and args and isinstance(args[0], ObjectValue):
        mode = args[0]
        if not is_mode_class(mode.cls):
            raise Unsupported(f"torch function mode {mode.cls.__qualname__} with its own __enter__")
        if obj is torch.overrides.TorchFunctionMode.__enter__:
            tx.ctx.function_modes.append(mode)
            return mode
        if not tx.ctx.function_modes or tx.ctx.function_modes[-1] is not mode:
            raise Unsupported("a torch function mode left other than innermost first")
        tx.ctx.function_modes.pop()
        return PythonValue(None)
    if (
        isinstance(obj, types.MethodWrapperType)
        and obj.__name__ == "__get__"
        and isinstance(obj.__self__, types.GetSetDescriptorType)
        and obj.__self__.__objclass__ is torch._C.TensorBase
        and len(args) == 1
        and not kwargs
    ):
        # `Tensor.shape.__get__(t)`: the func eager hands an override for a property read
        from dynamo_capture.attributes import get_attr

        return get_attr(tx, args[0], obj.__self__.__name__)
    return None


def _is_grad_switch_clone(obj: Any) -> bool:
    """`obj` is the bound `clone` of a real `torch.set_grad_enabled` (its decorator's)."""
    return (
        isinstance(obj, types.MethodType)
        and type(obj.__self__) is torch.set_grad_enabled
        and obj.__func__ is torch.set_grad_enabled.clone
    )


def _own_getattribute(value: Value) -> bool:
    """An outside object whose class defines `__getattribute__` in Python."""
    return isinstance(value, PythonValue) and isinstance(
        inspect.getattr_static(type(value.obj), "__getattribute__", None), types.FunctionType
    )


def _inlined_for_callable_argument(obj: Any, args: list[Value], kwargs: dict[str, Value]) -> bool:
    """A torch Python function given a callable a graph cannot hold (a module, a lambda):
    traced like user code, so that the callable is traced too
    (`F.triplet_margin_with_distance_loss(distance_function=nn.PairwiseDistance())`)."""
    if not isinstance(obj, types.FunctionType):
        return False
    return any(_opaque_callable(v) for v in [*args, *kwargs.values()])


def _opaque_callable(value: Value) -> bool:
    from dynamo_capture.output_graph import is_graph_callable

    if isinstance(value, FunctionValue | MethodValue | PartialValue):
        return True
    if isinstance(value, ObjectValue):
        return any("__call__" in vars(klass) for klass in value.cls.__mro__)
    if isinstance(value, TupleValue | ListValue):
        return any(_opaque_callable(item) for item in value.items)
    if isinstance(value, PythonValue):
        obj = value.obj
        return callable(obj) and not isinstance(obj, type) and not is_graph_callable(obj)
    return False


def _dereference(tx: Translator, ref: weakref.ReferenceType) -> Value:
    """ref() for a weak reference to a tensor capture already has (an nn.RNN's weights)."""
    referent = ref()
    if referent is None:
        return PythonValue(None)
    known = tx.ctx.known_tensor(referent) if isinstance(referent, torch.Tensor) else None
    if known is None:
        raise Unsupported("calling a weak reference to an object capture has not seen")
    return known


def _lookup(table: dict[Any, Any], obj: Any) -> Any:
    try:
        return table.get(obj)
    except TypeError:  # unhashable callables
        return None


def _call_substitute(
    tx: Translator, substitute: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    if substitute.can_constant_fold_through:
        try:
            real_args, real_kwargs = constant_arguments(args, kwargs)
        except NotConstant:
            pass
        else:
            return PythonValue(substitute.original(*real_args, **real_kwargs))
    return inline_function(tx, substitute.traceable, args, kwargs, None)


def _call_real_partial(
    tx: Translator, fn: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    obj, source = fn.obj, fn.source

    def item(attr: str, key: Any) -> Source | None:
        return item_source(AttrSource(source, attr), key) if source is not None else None

    func = tx.ctx.wrap(obj.func, AttrSource(source, "func") if source else None)
    bound = [tx.ctx.wrap(a, item("args", i)) for i, a in enumerate(obj.args)]
    keywords = {k: tx.ctx.wrap(v, item("keywords", k)) for k, v in obj.keywords.items()}
    return call(tx, func, [*bound, *args], {**keywords, **kwargs})


# ----- inlining ----------------------------------------------------------
class _Default:
    """Marks a parameter that took its default, until the default is resolved."""

    __slots__ = ("key",)

    def __init__(self, key: int | str) -> None:
        self.key = key


# code -> (number of defaults, keyword-only defaults) -> signature; weak in the code so
# that the signatures of a dropped function go with it.
_stand_ins: weakref.WeakKeyDictionary[
    types.CodeType, dict[tuple[int, tuple[str, ...]], inspect.Signature]
] = weakref.WeakKeyDictionary()


def _signature(
    code: types.CodeType, defaults: int, kwdefaults: tuple[str, ...]
) -> inspect.Signature:
    key = (defaults, kwdefaults)
    by_defaults = _stand_ins.get(code)
    if by_defaults is None:
        by_defaults = _stand_ins[code] = {}
    signature = by_defaults.get(key)
    if signature is None:
        cells = tuple(types.CellType() for _ in code.co_freevars)
        stand_in = types.FunctionType(code, {}, code.co_name, None, cells)
        stand_in.__defaults__ = tuple(_Default(i) for i in range(defaults)) or None
        stand_in.__kwdefaults__ = {name: _Default(name) for name in kwdefaults} or None
        signature = inspect.signature(stand_in)
        by_defaults[key] = signature
    return signature


def _bind(
    tx: Translator,
    code: types.CodeType,
    args: list[Value],
    kwargs: dict[str, Value],
    defaults: tuple[Any, ...],
    kwdefaults: dict[str, Any],
    resolve_default: Any,
) -> dict[str, Value]:
    signature = _signature(code, len(defaults), tuple(kwdefaults))
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise Unsupported(
            f"call to {code.co_name} with arguments that do not fit: {error}"
        ) from error
    bound.apply_defaults()
    f_locals: dict[str, Value] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if isinstance(value, _Default):
            value = resolve_default(value.key)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            value = TupleValue(list(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            value = DictValue(dict(value))
        if name not in code.co_varnames and name.startswith("implicit"):
            name = "." + name[len("implicit") :]  # inspect renames comprehension arguments
        f_locals[name] = value
    return f_locals


# Packages whose code capture neither inlines nor puts in a graph: their functions
# communicate between processes or swap sharded parameters in place (FSDP's hooks,
# DDP's reducer), which a graph cannot replay and fake tensors must not reach. Calls
# into them run eagerly (a graph break).
EAGER_PACKAGES = ("torch.distributed.", "torch._C._distributed")
# Standard library modules torch.compile never traces (their frames are skipped): a call
# into one is a break, its code run eagerly; inlined, a logger's cached levels would
# decide at capture whether a message is written, and its locks cannot be traced.
EAGER_STDLIB_MODULES = ("logging.", "threading.")
# torch modules whose classes' methods torch.compile skips (their frames run eagerly, a
# break at the call): GradScaler's scale / unscale_ / step / update. Its module functions
# (a defaultdict factory) are traced.
EAGER_TORCH_CLASS_MODULES = frozenset({"torch.amp.grad_scaler"})
# Their queries of the process group, fixed for a process: folded to constants.
_PROCESS_QUERIES = frozenset(
    {"is_available", "is_initialized", "is_torchelastic_launched", "get_rank", "get_world_size"}
)


def _check_not_eager_package(obj: Any) -> None:
    """Raise Unsupported for a function, method or partial of an EAGER_PACKAGES module."""
    inner = obj.func if isinstance(obj, functools.partial) else getattr(obj, "__func__", obj)
    if not isinstance(inner, types.FunctionType | types.BuiltinFunctionType):
        return  # a module or an object with __call__: its call is captured as such
    module = getattr(inner, "__module__", None)
    if inner.__name__ in _PROCESS_QUERIES:
        return
    if isinstance(module, str) and f"{module}.".startswith(EAGER_PACKAGES):
        name = getattr(inner, "__qualname__", None) or repr(inner)
        raise Unsupported(
            f"call to {name} ({module}), library code that runs eagerly: it communicates "
            "between processes or changes sharded state"
        )
    if module in EAGER_TORCH_CLASS_MODULES and "." in inner.__qualname__:
        error = Unsupported(
            f"call to {inner.__qualname__} ({module}): torch.compile skips this code of "
            "torch's; it runs eagerly"
        )
        error.eager_call = True
        raise error
    if isinstance(module, str) and f"{module}.".startswith(EAGER_STDLIB_MODULES):
        name = getattr(inner, "__qualname__", None) or repr(inner)
        error = Unsupported(
            f"call to {name} ({module}): the standard library's {module.split('.')[0]} "
            "runs eagerly, as torch.compile does not trace it"
        )
        error.eager_call = True
        raise error


def inline_function(
    tx: Translator,
    fn: types.FunctionType | FunctionValue,
    args: list[Value],
    kwargs: dict[str, Value],
    source: Source | None,
) -> Value:
    """Interpret `fn`'s body on the values; a generator's body runs as it is read."""
    from dynamo_capture.lazy_iterators import generator_iterator

    child = child_translator(tx, fn, args, kwargs, source)
    if child.yielded is None:
        return child.run()
    return generator_iterator(child)


def child_translator(
    tx: Translator,
    fn: types.FunctionType | FunctionValue,
    args: list[Value],
    kwargs: dict[str, Value],
    source: Source | None,
) -> Translator:
    """A Translator for a call of `fn` from `tx`, its arguments bound, not yet run."""
    from dynamo_capture.interpreter import Callee, Translator

    if isinstance(fn, FunctionValue):
        code, f_globals = fn.code, fn.globals
        defaults, kwdefaults = fn.defaults, fn.kwdefaults

        def resolve(key: int | str) -> Value:
            return defaults[key] if isinstance(key, int) else kwdefaults[key]

        cells = dict(zip(code.co_freevars, fn.closure, strict=True))
        real_cells: dict[str, tuple[Any, Source | None]] = {}
    else:
        code, f_globals = fn.__code__, fn.__globals__
        _check_not_eager_package(fn)
        defaults, kwdefaults = fn.__defaults__ or (), fn.__kwdefaults__ or {}

        def resolve(key: int | str) -> Value:
            real = defaults[key] if isinstance(key, int) else kwdefaults[key]
            child = DefaultArgSource(source, key) if source is not None else None
            return tx.ctx.wrap(real, child)

        if source is not None and fn.__module__.split(".")[0] != "torch":
            # the code replaced in place (`fn.__code__ = ...`, as autoreload does)
            tx.ctx.guards.id_match(AttrSource(source, "__code__"), code)
        cells = {}
        real_cells = {
            name: (cell, _closure_source(source, index, name))
            for index, (name, cell) in enumerate(zip(code.co_freevars, fn.__closure__ or ()))
        }
    if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raise Unsupported(f"async function {code.co_name}")
    f_locals = _bind(tx, code, args, kwargs, defaults, kwdefaults, resolve)
    generator = bool(code.co_flags & _CO_GENERATOR)
    receiver, receiver_source = None, None
    if args and isinstance(args[0], PythonValue):
        receiver, receiver_source = args[0].obj, args[0].source
    function = fn if isinstance(fn, types.FunctionType) else None
    receiver_class = args[0].cls if args and isinstance(args[0], ObjectValue) else None
    callee = Callee(
        function,
        receiver,
        source if function is not None else None,
        receiver_source,
        receiver_class,
    )
    return Translator(
        tx.ctx, code, f_locals, f_globals,
        cells=cells, real_cells=real_cells, parent=tx, generator=generator, callee=callee,
    )  # fmt: skip


def _closure_source(source: Source | None, index: int, name: str) -> Source | None:
    if source is None:
        return None
    return CellContentsSource(source, index, name)


# ----- modules -----------------------------------------------------------
def _hooks_guard(tx: Translator, module_value: PythonValue) -> None:
    from torch.nn.modules import module as nn_module

    global_hooks = (
        nn_module._global_forward_hooks,
        nn_module._global_forward_pre_hooks,
        nn_module._global_backward_hooks,
        nn_module._global_backward_pre_hooks,
    )
    if any(global_hooks):
        raise Unsupported("global nn.Module hooks are registered")
    for table in (
        "_global_forward_hooks", "_global_forward_pre_hooks",
        "_global_backward_hooks", "_global_backward_pre_hooks",
    ):  # fmt: skip
        source = ModuleGlobalSource(nn_module.__name__, table)
        tx.ctx.guards.length_check(source, getattr(nn_module, table))
    module, source = module_value.obj, module_value.source
    if module._backward_hooks or module._backward_pre_hooks:
        raise Unsupported(f"backward hooks on {type(module).__name__}")
    if source is None:
        return
    if not (module._forward_hooks or module._forward_pre_hooks):
        tx.ctx.guards.no_module_hooks(source)
        return
    # the hooks are inlined: both dicts' keys are guarded, so one added later recompiles
    for table in ("_forward_hooks", "_forward_pre_hooks"):
        tx.ctx.wrap(getattr(module, table), AttrSource(source, table))
    tx.ctx.guards.no_module_hooks(source, forward=False)


def call_module(
    tx: Translator, module_value: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """module(*args, **kwargs): pre-hooks, forward, hooks, as nn.Module.__call__ runs them.

    The graph nodes the call makes are tagged with it (`MODULE_CALLS`), outermost call
    first, so that a backend can find the calls of identical blocks."""
    module, source = module_value.obj, module_value.source
    if isinstance(module, RECURRENT_MODULES):  # one made in the frame
        raise recurrent_module_break(module)
    guards = tx.ctx.guards
    guards.class_attribute(type(module), "__call__", type(module).__call__)
    if type(module).__call__ is not _nn_call and not _fx_module_call(module):
        # the class's own __call__ (transformers' GradientCheckpointingLayer: a check of
        # its flags, then super().__call__): traced, and the call tagged as any module
        # call, so that identical layers defining it are found as regions too
        method = type(module).__call__

        def trace() -> Value:
            return call(tx, PythonValue(method), [module_value, *args], kwargs)
    else:

        def trace() -> Value:
            return _call_module_hooks_and_forward(tx, module_value, args, kwargs)

    graph = tx.ctx.graph
    last = graph._root.prev  # the graph's last node before the call
    output = record_call(tx, module_value, args, kwargs, trace)
    tag = (next(module_call_counter), source.name if source else "", type(module))
    node = last.next
    while node is not graph._root:
        node.meta[MODULE_CALLS] = (tag, *node.meta.get(MODULE_CALLS, ()))
        node = node.next
    return output


def _fx_module_call(module: torch.nn.Module) -> bool:
    """Whether calling `module` is nn.Module's call: a torch.fx GraphModule (fx-traced,
    symbolic_trace's result), whose class's `__call__` hands the call to its `_WrappedCall`,
    which calls nn.Module.__call__ where no class between defines its own `__call__` (its
    only other work: printing the generated code's line for an error raised in it)."""
    if not isinstance(module, torch.fx.GraphModule):
        return False
    wrapped = vars(type(module)).get("_wrapped_call")  # set on the class by recompile()
    if "_wrapped_call" in module.__dict__:
        return False
    if type(wrapped) is not _FX_WRAPPED_CALL or wrapped.cls_call is not None:
        return False
    call = type(module).__call__
    if (
        getattr(call, "__qualname__", None) != _FX_CALL_WRAPPED
        or call.__module__ != "torch.fx.graph_module"
    ):
        return False
    mro = type(module).__mro__
    if wrapped.cls not in mro:
        return False
    between = mro[mro.index(wrapped.cls) + 1 : mro.index(torch.nn.Module)]  # super(cls, m)
    return not any("__call__" in vars(cls) for cls in between)


def _call_module_hooks_and_forward(
    tx: Translator, module_value: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    module, source = module_value.obj, module_value.source
    guards = tx.ctx.guards
    from dynamo_capture.lazy_modules import initialize_lazy_module

    initialize_lazy_module(tx, module_value, args, kwargs)
    _hooks_guard(tx, module_value)
    try:
        args, kwargs = _pre_hooks(tx, module_value, args, kwargs)
    except Unsupported as error:
        raise _hooks_failed(tx, error, module) from error.__cause__
    if "forward" in module.__dict__:
        forward = tx.ctx.wrap(module.forward, AttrSource(source, "forward") if source else None)
        output = call(tx, forward, list(args), kwargs)
    else:
        # forward found on the class: guard it there, and that the instance does not
        # override it (`module.forward = ...` after compiling); called through call(), so
        # that a forward marked disable / allow_in_graph is honoured
        from dynamo_capture.attributes import class_member_source

        forward_function = type(module).forward
        guards.class_attribute(type(module), "forward", forward_function)
        guards.not_in_instance_dict(source, module, "forward")
        forward_source = class_member_source(type(module), "forward")  # its defaults, cells
        forward = PythonValue(forward_function, forward_source)
        output = call(tx, forward, [module_value, *args], kwargs)
    try:
        return _forward_hooks(tx, module_value, args, kwargs, output)
    except Unsupported as error:
        raise _hooks_failed(tx, error, module) from error.__cause__


def _pre_hooks(
    tx: Translator, module_value: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> tuple[list[Value], dict[str, Value]]:
    """The forward pre-hooks, in order: each may replace the arguments (with_kwargs=True
    hooks take and return both args and kwargs, as nn.Module.__call__)."""
    module = module_value.obj
    for key in list(module._forward_pre_hooks):
        hook = _hook(tx, module_value, "_forward_pre_hooks", key)
        if key in module._forward_pre_hooks_with_kwargs:
            result = call(tx, hook, [module_value, TupleValue(list(args)), DictValue(kwargs)], {})
            if isinstance(result, PythonValue) and result.obj is None:
                continue
            pair = sequence_items(tx, result) if isinstance(result, TupleValue) else None
            if pair is None or len(pair) != 2:
                raise Unsupported(
                    "a with_kwargs forward pre-hook returning something other than None or "
                    "(args, kwargs)"
                )
            args, kwargs = list(sequence_items(tx, pair[0])), dict(dict_items(tx, pair[1]))
            continue
        result = call(tx, hook, [module_value, TupleValue(list(args))], {})
        if not (isinstance(result, PythonValue) and result.obj is None):
            args = sequence_items(tx, result) if isinstance(result, TupleValue) else [result]
    return list(args), kwargs


def _forward_hooks(
    tx: Translator,
    module_value: PythonValue,
    args: list[Value],
    kwargs: dict[str, Value],
    output: Value,
) -> Value:
    """The forward hooks, in order: each may replace the output."""
    module = module_value.obj
    for key in list(module._forward_hooks):
        hook = _hook(tx, module_value, "_forward_hooks", key)
        arguments = [module_value, TupleValue(list(args))]
        if key in module._forward_hooks_with_kwargs:
            arguments.append(DictValue(dict(kwargs)))
        result = call(tx, hook, [*arguments, output], {})
        if not (isinstance(result, PythonValue) and result.obj is None):
            output = result
    return output


def _hooks_failed(tx: Translator, error: Unsupported, module: torch.nn.Module) -> Unsupported:
    """A hook capture cannot inline (one that communicates, as FSDP's): when the compiled
    frame itself calls the module, the call runs eagerly with the module's forward
    as a compiled frame of its own (break_callees), so only the hooks run eagerly."""
    from dynamo_capture.interpreter import Callee

    forward = inspect.getattr_static(type(module), "forward", None)
    if tx.depth == 0 and isinstance(forward, types.FunctionType):
        error.callee = Callee(forward, module)
    return error


def _hook(tx: Translator, module_value: PythonValue, table: str, key: int) -> Value:
    source = module_value.source
    hooks = getattr(module_value.obj, table)
    if source is not None:
        tx.ctx.wrap(hooks, AttrSource(source, table))
        return tx.ctx.wrap(hooks[key], item_source(AttrSource(source, table), key))
    return PythonValue(hooks[key])


# ----- classes -----------------------------------------------------------
# the standard library's context managers torch.compile does not trace: making one is a
# break at the call, and a `with` on one (made outside) a break it cannot resume from
UNTRACED_CONTEXTS: tuple[type, ...] = (
    contextlib.closing,
    contextlib.chdir,
    contextlib.redirect_stdout,
    contextlib.redirect_stderr,
)
# torch's context-manager functions torch.compile does not trace, taken alike: a
# random-state fork saves and restores the generator's state, which a graph cannot
UNTRACED_CONTEXT_FUNCTIONS: frozenset[Any] = frozenset({torch.random.fork_rng})


def construct(
    tx: Translator,
    cls_value: PythonValue,
    args: list[Value],
    kwargs: dict[str, Value],
    *,
    by_type_call: bool = False,
) -> Value:
    """cls(*args, **kwargs) for a user class, a namedtuple or a dataclass.

    by_type_call: `type.__call__(cls, ...)` itself (what a metaclass's own `__call__`
    reaches through `super().__call__`): the metaclass's `__call__` is not run again."""
    from dynamo_capture.torch_calls import INLINED_TORCH_MODULES, construct_torch_class

    cls = cls_value.obj
    if issubclass(cls, torch.nn.Module):
        return _construct_module(tx, cls, args, kwargs)
    if is_traceable_subclass_type(cls):
        return _construct_tensor_subclass(tx, cls, args, kwargs)
    if cls is torch.inference_mode:
        return _inference_mode(args, kwargs)
    if cls in _PROFILERS:  # a profiling session: ignored in a graph, as torch.compile does
        return ContextValue("null")
    if cls in UNTRACED_CONTEXTS:
        error = Unsupported(f"contextlib.{cls.__name__}(...) is not traced (as torch.compile)")
        error.outside_context = True
        raise error
    if cls.__module__.split(".")[0] == "torch" and not cls.__module__.startswith(
        INLINED_TORCH_MODULES
    ):
        return construct_torch_class(tx, cls, args, kwargs)
    if issubclass(cls, BaseException):
        return _construct_exception(tx, cls_value, args, kwargs)
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return _construct_namedtuple(tx, cls, args, kwargs)
    if (
        issubclass(cls, tuple)
        and type(cls) is type
        and isinstance(cls.__new__, types.FunctionType)
        and cls.__init__ is tuple.__init__
    ):
        return inline_function(tx, cls.__new__, [cls_value, *args], kwargs, None)
    if _plain_builtin_subclass(cls, tuple) and not kwargs and len(args) <= 1:
        return TupleValue(sequence_items(tx, args[0]) if args else [], cls)
    if _plain_builtin_subclass(cls, list) and not kwargs and len(args) <= 1:
        return ListValue(sequence_items(tx, args[0]) if args else [], cls=cls)
    if issubclass(cls, list) and type(cls) is type and cls.__new__ is list.__new__:
        # type.__call__: list.__new__ makes an empty list, then the class's __init__ runs
        return _initialized(tx, cls, ListValue([], cls=cls), args, kwargs)
    if (
        (_plain_builtin_subclass(cls, set) or _plain_builtin_subclass(cls, frozenset))
        and not kwargs
        and len(args) <= 1
    ):
        items = sequence_items(tx, args[0]) if args else []
        return SetValue({hashable_key(item) for item in items}, cls=cls)
    if cls is collections.defaultdict or _plain_builtin_subclass(cls, collections.defaultdict):
        factory = args[0] if args else kwargs.pop("default_factory", PythonValue(None))
        instance_dict = DictValue({}, cls, attrs={"default_factory": factory})
        from dynamo_capture.methods import call_method

        call_method(tx, instance_dict, "update", list(args[1:]), kwargs)
        return instance_dict
    if issubclass(cls, dict) and cls.__new__ in (dict.__new__, OrderedDict.__new__):
        return _initialized(tx, cls, DictValue({}, cls), args, kwargs)
    if isinstance(cls, enum.EnumMeta) and not kwargs:
        try:  # Color("red"): a lookup of an existing member by its value
            return PythonValue(cls(*(as_constant(a) for a in args)))
        except NotConstant:
            raise Unsupported(f"{cls.__name__}(...) of a value known only when it runs") from None
        except ValueError as error:
            from dynamo_capture.errors import raised_by_python

            raise raised_by_python(error) from None
    metaclass = type(cls)
    if metaclass not in (type, abc.ABCMeta) and not by_type_call:
        if metaclass.__call__ is not type.__call__:
            meta_call = inspect.getattr_static(metaclass, "__call__", None)
            if not isinstance(meta_call, types.FunctionType):
                raise Unsupported(
                    f"creating an instance of {cls.__name__}, whose metaclass's __call__ is "
                    "not a Python function"
                )
            # the metaclass's __call__ is traced like a method of the class (`cls` its
            # receiver); its `super().__call__(...)` comes back here as type.__call__
            tx.ctx.guards.class_attribute(metaclass, "__call__", meta_call)
            return inline_function(tx, meta_call, [cls_value, *args], kwargs, None)
        # a metaclass that only shapes the class (registries, properties): instances are
        # made by type.__call__, as for any class
        tx.ctx.guards.class_attribute(metaclass, "__call__", type.__call__)
    if scalar_base(cls) is not None:
        return construct_scalar(tx, cls_value, args, kwargs)
    if any(base.__module__ == "builtins" and base is not object for base in cls.__mro__):
        error = Unsupported(f"creating an instance of {cls.__name__} (a builtin subclass)")
        error.eager_call = cls in EAGER_BUILTIN_TYPES or any(
            runs_eagerly_on_its_own(value) for value in [*args, *kwargs.values()]
        )
        raise error
    new = cls.__new__
    if getattr(cls, "__abstractmethods__", None):
        try:
            object.__new__(cls)  # raises TypeError, naming the abstract methods
        except TypeError as error:
            from dynamo_capture.errors import raised_by_python

            raise raised_by_python(error) from None
    if new is object.__new__:
        instance: Value = ObjectValue(cls)
    elif isinstance(new, types.FunctionType):
        # type.__call__: cls.__new__(cls, ...), then __init__ where it made an instance of cls
        tx.ctx.guards.class_attribute(cls, "__new__", new)
        instance = inline_function(
            tx, new, [cls_value, *args], kwargs, _class_source(cls_value, "__new__")
        )
        if not issubclass(python_type_of(instance), cls):
            return instance
        cls = python_type_of(instance)
    else:
        raise Unsupported(f"creating an instance of {cls.__name__}, whose __new__ is in C")
    init = cls.__init__
    tx.ctx.guards.class_attribute(cls, "__init__", init)
    if isinstance(init, types.FunctionType):
        inline_function(tx, init, [instance, *args], kwargs, _class_source(cls_value, "__init__"))
    elif (args or kwargs) and new is object.__new__:
        raise Unsupported(f"{cls.__name__}() takes no arguments")
    return instance


def _initialized(
    tx: Translator, cls: type, instance: Value, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`instance`, a new empty list or dict of `cls` (made as its builtin `__new__` makes
    it), after the class's `__init__` ran on it (type.__call__'s second step): a Python
    `__init__` inlined, a builtin one called as a method; `__init__` guarded."""
    init = cls.__init__
    tx.ctx.guards.class_attribute(cls, "__init__", init)
    if isinstance(init, types.FunctionType):
        inline_function(tx, init, [instance, *args], kwargs, None)
    else:
        from dynamo_capture.methods import call_method

        call_method(tx, instance, "__init__", list(args), kwargs)
    return instance


def _construct_module(
    tx: Translator, cls: type, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """A torch.nn module without parameters or buffers made in the frame (a loss, an
    activation), or a user module whose __init__ only sets attributes (made_modules),
    from constants: made now; its forward is traced where it is called."""
    user_module = not cls.__module__.startswith("torch.nn.modules.")
    if user_module and not plainly_made_module(cls):
        raise Unsupported(f"creating a module ({cls.__name__}) inside captured code")
    container = _container_of_modules(tx, cls, args, kwargs)
    if container is not None:
        return container
    try:
        real_args = [_module_or_constant(a) for a in args]
        real_kwargs = {k: _module_or_constant(v) for k, v in kwargs.items()}
    except NotConstant as error:
        raise Unsupported(
            f"creating a module ({cls.__name__}) from values known only when it runs"
        ) from error
    if user_module:
        if not all(plain_constant(a) for a in [*real_args, *real_kwargs.values()]):
            raise Unsupported(f"creating a module ({cls.__name__}) from other than constants")
        for klass in cls.__mro__[: cls.__mro__.index(torch.nn.Module)]:
            # NOTE: the __init__ read stays the one run (a class patched later recompiles)
            tx.ctx.guards.class_attribute(klass, "__init__", klass.__init__)
        try:
            module = cls(*real_args, **real_kwargs)
        except Exception as error:  # noqa: BLE001 - it raises eagerly too, where it runs
            raise Unsupported(f"creating a module ({cls.__name__}) raised {error!r}") from error
    else:
        module = cls(*real_args, **real_kwargs)
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        raise Unsupported(f"creating a module with parameters ({cls.__name__}) in captured code")
    if cls is not torch.nn.CrossEntropyLoss:
        # nn.Module.__init__ logs its API use: the graph keeps the call as torch.compile's
        # does (which makes a CrossEntropyLoss without tracing its __init__)
        tx.ctx.graph.call_function(torch._C._log_api_usage_once, ("python.nn_module",))
    _made_in_frame.add(module)
    return PythonValue(module)


# Modules made by captured code: a frame that hands one out makes a copy each call.
_made_in_frame: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def is_made_in_frame(obj: Any) -> bool:
    """Whether `obj` is a module captured code made (see _construct_module)."""
    try:
        return obj in _made_in_frame
    except TypeError:
        return False


def _container_of_modules(
    tx: Translator, cls: type, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """`nn.Sequential(*modules)` / `nn.ModuleList(modules)` of modules the frame reads
    (`nn.Sequential(*self.layers)`): made now of the same real modules, its items the
    values read, with their sources (as a slice's: calls, iteration, len and indexing go
    through them; the container itself may not leave the frame). None where other."""
    if cls not in (torch.nn.Sequential, torch.nn.ModuleList) or kwargs:
        return None
    if cls is torch.nn.ModuleList:
        if len(args) != 1 or not isinstance(args[0], ListValue | TupleValue):
            return None
        items = list(args[0].items)
    else:
        items = list(args)
    for item in items:
        if not (isinstance(item, PythonValue) and isinstance(item.obj, torch.nn.Module)):
            return None
        if item.source is None and not (
            is_made_in_frame(item.obj)
            and not any(True for _ in item.obj.parameters())
            and not any(True for _ in item.obj.buffers())
        ):
            return None
    real = [item.obj for item in items]
    module = cls(*real) if cls is torch.nn.Sequential else cls(real)
    tx.ctx.sliced_modules[id(module)] = (module, items)
    # nn.Module.__init__ logs its API use: kept as torch.compile keeps it
    tx.ctx.graph.call_function(torch._C._log_api_usage_once, ("python.nn_module",))
    return PythonValue(module)


def _module_or_constant(value: Value) -> Any:
    """A constant, or a module made in the frame (nn.Sequential(nn.ReLU(), ...))."""
    if (
        isinstance(value, PythonValue)
        and value.source is None
        and isinstance(value.obj, torch.nn.Module)
    ):
        return value.obj
    return as_constant(value)


def _construct_tensor_subclass(
    tx: Translator, cls: type, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`TwoTensor(a, b)` in the frame: one graph node calling the class, as torch.compile
    records it, where the arguments are plain tensors and constants and the instance made
    on the examples holds exactly those tensors (a wrapper over its arguments, no
    computation on them). The backend takes the instance apart like a subclass input."""
    tensors = [v for v in [*args, *kwargs.values()] if isinstance(v, TensorValue)]
    for value in [*args, *kwargs.values()]:
        if isinstance(value, TensorValue):
            if value.python_type is not torch.Tensor and not is_traceable_subclass_type(
                value.python_type
            ):
                raise Unsupported(f"{cls.__qualname__}(...) over a tensor of another kind")
        elif not (isinstance(value, PythonValue) and is_constant(value.obj)):
            raise Unsupported(f"{cls.__qualname__}(...) with an argument that is not a constant")
    if not tensors:
        raise Unsupported(f"{cls.__qualname__}(...) without tensor arguments")

    def example(value: Value) -> Any:
        return value.example if isinstance(value, TensorValue) else value.obj

    held = [t.example for t in tensors]
    try:
        with tx.ctx.fake_mode if tx.ctx.use_fakes else contextlib.nullcontext():
            made = cls(*map(example, args), **{k: example(v) for k, v in kwargs.items()})
        inner = None
        if is_traceable_subclass(made):
            inner = [getattr(made, name) for name in made.__tensor_flatten__()[0]]
    except Exception as error:
        raise Unsupported(
            f"{cls.__qualname__}(...) raised {type(error).__name__} on the capture's example "
            f"values: {error}"
        ) from error
    if (
        inner is None
        or len(inner) != len(held)
        or not all(any(i is t for t in held) for i in inner)
    ):
        # NOTE: the constructor computed its inner tensors (or kept some other tensor):
        # the node would hide that computation from the tracer of the backend
        raise Unsupported(f"{cls.__qualname__}(...) does not hold exactly its tensor arguments")
    return tx.ctx.call("call_function", cls, tuple(args), dict(kwargs))


def _plain_builtin_subclass(cls: type, base: type) -> bool:
    """A user subclass of `base` (tuple, list) keeping its __new__ and __init__ and metaclass."""
    return (
        issubclass(cls, base)
        and type(cls) is type
        and cls.__new__ is base.__new__
        and cls.__init__ is base.__init__
    )


def _construct_namedtuple(
    tx: Translator, cls: type, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    fields = cls._fields  # type: ignore[attr-defined]
    defaults = cls._field_defaults  # type: ignore[attr-defined]
    values: dict[str, Value] = dict(zip(fields, args))
    for name, value in kwargs.items():
        values[name] = value
    items = []
    for name in fields:
        if name in values:
            items.append(values[name])
        elif name in defaults:
            items.append(PythonValue(defaults[name]))
        else:
            raise Unsupported(f"{cls.__name__}() is missing field {name!r}")
    return TupleValue(items, cls)


def new_cell(contents: Value | None = None) -> CellValue:
    return CellValue(contents)


def tensor_args(args: list[Value], kwargs: dict[str, Value]) -> bool:
    return any(isinstance(v, TensorValue) for v in [*args, *kwargs.values()])
