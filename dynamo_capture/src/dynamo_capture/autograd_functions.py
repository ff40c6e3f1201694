"""Custom autograd Functions inside captured code: `Fn.apply(...)` as one graph node.

Where the call takes no gradient (grad mode off, or no tensor argument requiring grad)
its forward (and setup_context) is traced in place with an `InferenceContext`, as
torch.compile traces it; a graph break inside breaks the graph there. Otherwise:

    y, n = Sq.apply(x.sin(), 2.0)  ->  out = autograd_function_apply_Sq(sin, 2.0)
                                       y = out[0]    (its tensor outputs, flat)
                                       n: a constant output, kept by capture

The node calls the user's own `Fn.apply` when the graph runs, so the forward, the
ctx (saved tensors, attributes, needs_input_grad, mark_dirty, mark_non_differentiable,
set_materialize_grads), `setup_context` and the user's backward are eager's own, not
a derivative capture works out. A backend that traces the graph to ATen
(aot_autograd) runs the node under its tracer: the forward's operators become the
forward graph and autograd calls the user's backward while the joint graph is traced.
Tensor outputs are read by getitem nodes, as in torch.compile's graphs (graph and op
counts equal its, but for getitems of outputs the program drops, which torch removes).

The call is captured only where that is sound: at capture time the Function's
staticmethods (forward, backward or vjp, setup_context, vmap, jvp, and the functions
and classes they use, through globals, closure cells, module or class attributes and
imports) are checked to read only modules, functions, classes and constants (those
constants guarded), to call no printing, input or reflection builtin, no graph break
and nothing of Python's random numbers, the clock or the system, and to write no
global or closure cell (a bytecode check: a list or object they could change is
refused, not followed); then `Fn.apply` runs on
the capture's fake tensors, and its backward too (on ones as the gradients) where
an output requires grad, so data-dependent Python in either (`.item()`, `if t > 0`)
is found now. Anything else (a custom `apply`, keyword arguments, an argument that
is neither a tensor nor a constant, outputs other than tensors and constants) is
traced as before: capture inlines Function.apply, whose C call breaks the graph and
runs eagerly.

Unlike torch.compile, which traces the forward and backward into subgraphs, the node
is opaque to capture: a backend given the graph as it is (eager) runs the Function
in Python each call, and an aot_autograd backend traces it once per compile (hence
the checks: nothing in the staticmethods may change between calls unguarded).
"""

from __future__ import annotations

import builtins
import dis
import inspect
import sys
import types
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.operations import NotConstant, as_constant
from dynamo_capture.output_graph import is_constant
from dynamo_capture.registry import disabled_reason
from dynamo_capture.torch_markers import is_torch_graph_break
from dynamo_capture.values import ListValue, PythonValue, TensorValue, TupleValue, Value
from guards import artifact_enabled, artifact_logger

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "InferenceContext",
    "call_autograd_function",
    "check_pure",
    "is_autograd_function_apply",
]

_APPLY = torch.autograd.Function.apply.__func__  # type: ignore[attr-defined]
_BASE_SETUP_CONTEXT = torch.autograd.Function.setup_context
_BASE_VMAP = torch.autograd.Function.vmap
_BASE_JVP = torch.autograd.Function.jvp
_BASE_BACKWARD = torch.autograd.Function.backward

# builtins whose call has an effect beyond its result, or reads the caller's frame
_IMPURE_BUILTIN_NAMES = (
    "print", "input", "open", "exec", "eval", "compile", "globals", "locals", "vars",
    "setattr", "delattr", "breakpoint", "__import__", "exit", "quit",
)  # fmt: skip
_IMPURE_BUILTINS = frozenset(
    getattr(builtins, name) for name in _IMPURE_BUILTIN_NAMES if hasattr(builtins, name)
)
# modules whose functions draw Python-side random numbers or read the clock or the system
_IMPURE_MODULES = frozenset(("random", "time", "os", "sys", "logging", "numpy.random"))
# writes that reach past the function's own frame
_ESCAPING_STORES = frozenset(("STORE_GLOBAL", "DELETE_GLOBAL"))
# a graph-break marker (`graph_break()`), read as an attribute of a module
_GRAPH_BREAK_NAMES = frozenset(("graph_break",))
# methods that build an object (never run by a call of one already built)
_CONSTRUCTION = frozenset(("__init__", "__new__", "__setstate__", "__init_subclass__"))
_SCAN_DEPTH = 6  # how deep the functions the staticmethods call are checked
_NOTHING = object()  # what an instruction reading no module or class gives


def is_autograd_function_apply(obj: Any) -> bool:
    """Whether `obj` is `Fn.apply` of a torch.autograd.Function subclass (not overridden)."""
    return (
        isinstance(obj, types.MethodType)
        and obj.__func__ is _APPLY
        and isinstance(obj.__self__, type)
        and issubclass(obj.__self__, torch.autograd.Function)
    )


def call_autograd_function(
    tx: Translator, fn: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """The value of `Fn.apply(*args)` (or of `Function.apply` called with the class
    first, as a bound classmethod is called): one graph node calling it; None for any
    other callee, or where capturing the call is not sound (the reason is logged as a
    graph break's)."""
    if is_autograd_function_apply(fn.obj):
        cls, source = fn.obj.__self__, fn.source
    elif fn.obj is _APPLY and args and isinstance(args[0], PythonValue):
        cls, source, args = args[0].obj, args[0].source, args[1:]
        if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
            return None
    else:
        return None
    if not kwargs and source is not None and _without_autograd(tx, args):
        return _inlined_forward(tx, cls, args)
    try:
        return _captured_apply(tx, cls, source, args, kwargs)
    except Unsupported as error:
        # NOTE: the call is then traced as before this module: capture inlines
        # Function.apply and breaks the graph at its C call, which runs eagerly
        if artifact_enabled("graph_breaks"):
            artifact_logger("graph_breaks").info("%s.apply not captured: %s", cls, error.reason)
        return None


class InferenceContext:
    """The ctx a Function's forward gets where no gradient is taken, traced with it:
    what it saves and marks is dropped, as eager's apply drops it without autograd."""

    def __init__(self, inputs: int) -> None:
        self.needs_input_grad = (False,) * inputs
        self.materialize_grads = True
        self.to_save: tuple[Any, ...] = ()

    def save_for_backward(self, *tensors: Any) -> None:
        self.to_save = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        pass

    def mark_dirty(self, *tensors: Any) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Any) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


def _without_autograd(tx: Translator, args: list[Value]) -> bool:
    """Whether the call takes no gradient (grad mode off, or no tensor argument that
    requires grad) outside torch.func's transforms: torch.compile then traces the
    forward in place, as eager's apply only runs it (under no_grad, which changes
    nothing for tensors that do not require grad)."""
    if tx.ctx.functorch_level or tx.ctx.jvp_nesting:
        return False
    if not all(isinstance(arg, TensorValue) or _is_constant_value(arg) for arg in args):
        return False
    tensors = [arg.example for arg in args if isinstance(arg, TensorValue)]
    return not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors)


def _is_constant_value(value: Value) -> bool:
    try:
        as_constant(value)
    except NotConstant:
        return False
    return True


def _inlined_forward(tx: Translator, cls: type, args: list[Value]) -> Value:
    """The forward (and setup_context) traced in place with an InferenceContext; a
    graph break inside breaks the graph there, as in torch.compile."""
    from dynamo_capture.calls import call, construct

    forward = inspect.getattr_static(cls, "forward")
    if not isinstance(forward, staticmethod):
        raise Unsupported(f"{cls.__qualname__}.forward is not a staticmethod")
    tx.ctx.guards.class_attribute(cls, "forward", forward.__func__)
    ctx = construct(tx, PythonValue(InferenceContext), [PythonValue(len(args))], {})
    if not _overridden(cls, "setup_context", _BASE_SETUP_CONTEXT):
        return call(tx, PythonValue(forward.__func__), [ctx, *args], {})
    setup = inspect.getattr_static(cls, "setup_context")
    if not isinstance(setup, staticmethod):
        raise Unsupported(f"{cls.__qualname__}.setup_context is not a staticmethod")
    tx.ctx.guards.class_attribute(cls, "setup_context", setup.__func__)
    output = call(tx, PythonValue(forward.__func__), list(args), {})
    inputs = TupleValue(list(args), tuple)
    call(tx, PythonValue(setup.__func__), [ctx, inputs, output], {})
    return output


def _captured_apply(
    tx: Translator, cls: type, source: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    name = cls.__qualname__
    if not tx.ctx.autograd_function_nodes:
        raise Unsupported(f"{name}.apply: the backend cannot compile such calls as graph nodes")
    if tx.ctx.jvp_nesting:
        raise Unsupported(f"{name}.apply inside a torch.func.jvp traced into the graph")
    if kwargs:
        raise Unsupported(f"{name}.apply with keyword arguments (apply takes them by position)")
    if tx.ctx.reading_ahead is not None:
        # NOTE: the forward may write its inputs in place (mark_dirty) or draw random
        # numbers, which a part left unfinished must not do twice
        raise Unsupported(f"{name}.apply in {tx.ctx.reading_ahead}")
    if source is None:
        raise Unsupported(f"{name}.apply of a Function class capture cannot guard")
    for arg in args:
        if not isinstance(arg, TensorValue):
            try:
                as_constant(arg)
            except NotConstant:
                raise Unsupported(
                    f"{name}.apply with an argument that is neither a tensor nor a constant"
                ) from None
    _check_function_class(tx, cls)
    target = _apply_target(cls)
    tx.ctx.autograd_function_nodes_made += 1  # a backend refusing them gets a graph without
    flat = tx.ctx.call("call_function", target, tuple(args), {})
    return _rebuild(target.structure, flat.items)  # type: ignore[attr-defined]


class _TensorSlot:
    """Where the Function's outputs hold the node's tensor output `index`."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def _apply_target(cls: type[torch.autograd.Function]) -> Any:
    """The node's target: `cls.apply` with its tensor outputs as a flat tuple, each read
    by a getitem node as torch.compile reads them. Its `structure` (known once the
    example has run) places those tensors and the constant outputs as apply returns
    them."""

    def autograd_function_apply(*args: Any) -> tuple[torch.Tensor, ...]:
        return tuple(_tensors(cls.apply(*args)))

    def example(*args: Any) -> tuple[torch.Tensor, ...]:
        result = cls.apply(*args)
        _probe_backward(cls, args, result)
        tensors: list[torch.Tensor] = []
        autograd_function_apply.structure = _structure(cls, result, tensors)
        return tuple(tensors)

    name = "".join(c if c.isalnum() else "_" for c in cls.__name__)
    autograd_function_apply.__name__ = f"autograd_function_apply_{name}"
    autograd_function_apply.__qualname__ = autograd_function_apply.__name__
    autograd_function_apply.__ember_example__ = example  # type: ignore[attr-defined]
    return autograd_function_apply


def _structure(cls: type, result: Any, tensors: list[torch.Tensor]) -> Any:
    """`result` with each tensor replaced by its slot in `tensors` (appended to)."""
    if isinstance(result, torch.Tensor):
        tensors.append(result)
        return _TensorSlot(len(tensors) - 1)
    if isinstance(result, tuple | list):
        return type(result)(_structure(cls, item, tensors) for item in result)
    if result is None or is_constant(result):
        return result
    raise Unsupported(
        f"{cls.__qualname__}.forward returns a {type(result).__name__}, which is neither "
        "a tensor nor a constant"
    )


def _rebuild(structure: Any, items: list[Value]) -> Value:
    if isinstance(structure, _TensorSlot):
        return items[structure.index]
    if isinstance(structure, list):
        return ListValue([_rebuild(item, items) for item in structure])
    if isinstance(structure, tuple):
        return TupleValue([_rebuild(item, items) for item in structure], tuple)
    return PythonValue(structure)


def _probe_backward(cls: type, args: tuple[Any, ...], result: Any) -> None:
    """Runs the user's backward on fakes where the graph would differentiate the call,
    so that what it cannot trace is found while capturing."""
    if not torch.is_grad_enabled():
        return
    outputs = [t for t in _tensors(result) if t.requires_grad and t.grad_fn is not None]
    inputs = [t for t in args if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outputs or not inputs:
        return
    try:
        torch.autograd.grad(
            outputs,
            inputs,
            [torch.ones_like(t) for t in outputs],
            retain_graph=True,  # the fakes after the call may be differentiated again
            allow_unused=True,
            materialize_grads=False,
        )
    except Unsupported:
        raise
    except Exception as error:
        raise Unsupported(
            f"{cls.__qualname__}.backward cannot run on the capture's example values "
            f"({type(error).__name__}: {error})"
        ) from error


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for item in value for t in _tensors(item)]
    return []


def _check_function_class(tx: Translator, cls: type) -> None:
    """The Function's staticmethods are plain functions, guarded, and pure (see module
    docstring); Unsupported otherwise."""
    name = cls.__qualname__
    methods = ["forward"]
    methods.append("backward" if _overridden(cls, "backward", _BASE_BACKWARD) else "vjp")
    for optional, base in (("setup_context", _BASE_SETUP_CONTEXT), ("vmap", _BASE_VMAP),
                           ("jvp", _BASE_JVP)):  # fmt: skip
        if _overridden(cls, optional, base):
            methods.append(optional)
    seen: set[types.CodeType] = set()
    for method in methods:
        static = inspect.getattr_static(cls, method)
        if not isinstance(static, staticmethod):
            raise Unsupported(f"{name}.{method} is not a staticmethod")
        function = static.__func__
        tx.ctx.guards.class_attribute(cls, method, getattr(cls, method))
        _check_pure(tx, function, f"{name}.{method}", seen, 0)


def _overridden(cls: type, attr: str, base: Any) -> bool:
    value = getattr(cls, attr, None)
    return value is not None and getattr(value, "__func__", value) is not getattr(
        base, "__func__", base
    )


def check_pure(tx: Translator, function: Any, where: str, *, reads_objects: bool = False) -> None:
    """Unsupported unless `function` (and what it calls) writes no global or closure
    cell and reads only modules, classes, functions and constants; with `reads_objects`,
    tensors and modules too (a module's class checked in turn)."""
    _check_pure(tx, function, where, set(), 0, reads_objects)


def _check_pure(
    tx: Translator, function: Any, where: str, seen: set, depth: int, reads_objects: bool = False
) -> None:
    """`function` writes no global or closure cell and reads only what `_check_read`
    takes; the functions it reads are checked too."""
    while isinstance(function, types.MethodType | staticmethod | classmethod):
        function = function.__func__
    if not isinstance(function, types.FunctionType):
        return  # a builtin or torch's own C function: no Python of the user's to check
    if _is_torch_function(function):
        # torch's own Python (a decorator's wrapper: once_differentiable); the user's
        # functions it wraps are checked
        for cell in function.__closure__ or ():
            inner = cell.cell_contents if _bound(cell) else None
            if isinstance(inner, types.FunctionType):
                _check_pure(tx, inner, where, seen, depth + 1, reads_objects)
        return
    code = function.__code__
    if code in seen:
        return
    if depth > _SCAN_DEPTH:
        raise Unsupported(f"{where} calls functions nested too deeply to check")
    seen.add(code)
    cells = dict(zip(code.co_freevars, function.__closure__ or (), strict=True))
    _check_code(tx, code, function, cells, where, seen, depth, reads_objects)


def _check_code(
    tx: Translator,
    code: types.CodeType,
    function: types.FunctionType,
    cells: dict[str, Any],
    where: str,
    seen: set,
    depth: int,
    reads_objects: bool = False,
) -> None:
    scope = function.__globals__
    if _GRAPH_BREAK_NAMES & set(code.co_names):
        raise Unsupported(f"{where} calls a graph break")
    owner: Any = None  # the module or class the last load gave: its attributes are read
    imported: Any = None  # the module the last import gave
    for inst in dis.get_instructions(code):
        op, read = inst.opname, _NOTHING
        if op in _ESCAPING_STORES:
            raise Unsupported(f"{where} writes the global {inst.argval!r}")
        if reads_objects and op in ("STORE_ATTR", "DELETE_ATTR"):
            # NOTE: the objects it may read (modules) it must not write: capture runs
            # it on fakes, so the write would happen at capture time
            raise Unsupported(f"{where} writes the attribute {inst.argval!r} of an object")
        if op in ("STORE_DEREF", "DELETE_DEREF") and inst.argval in cells:
            raise Unsupported(f"{where} writes the closure variable {inst.argval!r}")
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            known = inst.argval in scope
            read = scope[inst.argval] if known else getattr(builtins, inst.argval, None)
            _check_read(tx, read, inst.argval, where, seen, depth, reads_objects)
            if known and _guard_needed(read):
                _guard_global(tx, function, inst.argval, read, where)
        elif op in ("LOAD_DEREF", "LOAD_CLOSURE") and inst.argval in cells:
            cell = cells[inst.argval]
            if not _bound(cell) or inst.argval == "__class__":
                owner = None
                continue  # unbound: the function's own local, bound before use
            read = cell.cell_contents
            if reads_objects and type(read) in (list, tuple, dict) and _rebuilt(function):
                # NOTE: the cells of a function branch_functions rebuilt are fresh
                # copies made for it: reading their items changes nothing outside
                for item in read.values() if isinstance(read, dict) else read:
                    _check_read(tx, item, inst.argval, where, seen, depth, reads_objects)
                owner = None
                continue
            _check_read(tx, read, inst.argval, where, seen, depth, reads_objects)
            if _guard_needed(read):  # a constant of the enclosing function
                tx.ctx.guards.class_attribute(cell, "cell_contents", read)
        elif op == "IMPORT_NAME":  # `import random` inside: the module it binds
            read = sys.modules.get(inst.argval)
            if inst.argval.split(".")[0] in _IMPURE_MODULES or read is None:
                raise Unsupported(f"{where} imports {inst.argval}")
            _check_read(tx, read, inst.argval, where, seen, depth, reads_objects)
            imported = read  # on the stack for `from ... import` names that follow
        elif op == "IMPORT_FROM" and isinstance(imported, types.ModuleType):
            read = _attribute(imported, inst.argval, where)
            _check_read(tx, read, inst.argval, where, seen, depth, reads_objects)
            if _guard_needed(read):
                tx.ctx.guards.class_attribute(imported, inst.argval, read)
        elif op in ("LOAD_ATTR", "LOAD_METHOD") and owner is not None:
            read = _attribute(owner, inst.argval, where)
            _check_read(tx, read, inst.argval, where, seen, depth, reads_objects)
            if _guard_needed(read):  # `config.SCALE`: a constant the graph may keep
                tx.ctx.guards.class_attribute(owner, inst.argval, read)
        owner = read if isinstance(read, types.ModuleType | type) else None
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):  # a nested function, lambda or comprehension
            # NOTE: its free variables are the enclosing function's locals or cells
            inner_cells = {n: c for n, c in cells.items() if n in constant.co_freevars}
            _check_code(tx, constant, function, inner_cells, where, seen, depth, reads_objects)


def _check_read(
    tx: Translator,
    value: Any,
    name: str,
    where: str,
    seen: set,
    depth: int,
    reads_objects: bool = False,
) -> None:
    """What the staticmethods may read: modules (but those of the clock, the system and
    Python's random numbers), classes, functions (checked in turn), constants."""
    if isinstance(value, types.ModuleType):
        if value.__name__ in _IMPURE_MODULES:
            raise Unsupported(f"{where} uses the module {value.__name__}")
        return
    if value in _IMPURE_BUILTINS if _hashable(value) else False:
        raise Unsupported(f"{where} calls {name}(), which must run eagerly")
    if isinstance(value, type):
        _check_class(tx, value, where, seen, depth, reads_objects)
        return
    if value is None or is_constant(value):
        return
    if isinstance(value, torch.Size | torch.dtype | torch.device):
        return
    if _hashable(value) and (disabled_reason(value) is not None or is_torch_graph_break(value)):
        raise Unsupported(f"{where} calls {name}, which breaks the graph")
    if isinstance(value, types.FunctionType | types.MethodType):
        _check_pure(tx, value, f"{where} (through {name})", seen, depth + 1, reads_objects)
        return
    if isinstance(value, types.BuiltinFunctionType | types.BuiltinMethodType):
        receiver = getattr(value, "__self__", None)
        if isinstance(receiver, types.ModuleType):
            if receiver.__name__ in _IMPURE_MODULES:
                raise Unsupported(f"{where} calls {name}, which must run eagerly")
            return
        if receiver is None or isinstance(receiver, type) or _is_torch_object(receiver):
            return
        raise Unsupported(f"{where} calls {name}, a method of an object it could change")
    if callable(value) and type(value).__module__.startswith("torch") and not reads_objects:
        return  # torch's own callables (OpOverloadPackets, ufunc-like objects)
    if reads_objects and isinstance(value, torch.Tensor):
        return  # read when the function runs, as eager reads it
    if reads_objects and isinstance(value, torch.nn.Module):
        _check_class(tx, type(value), where, seen, depth, reads_objects)
        return
    if callable(value) and type(value).__module__.startswith("torch"):
        return
    raise Unsupported(
        f"{where} reads {name!r}, a {type(value).__name__} it could change or that changes"
    )


def _attribute(owner: Any, name: str, where: str) -> Any:
    """`owner.name` of a module or class, read without running a descriptor's code."""
    try:
        found = inspect.getattr_static(owner, name)
    except AttributeError:
        raise Unsupported(f"{where} reads {name!r}, which capture cannot find now") from None
    if isinstance(found, staticmethod | classmethod):
        return found.__func__
    if isinstance(found, property) or (
        hasattr(type(found), "__get__")
        and not isinstance(found, types.FunctionType | type)
        and not _is_torch_object(found)
    ):
        raise Unsupported(f"{where} reads {name!r}, a descriptor that runs code")
    return found


def _is_torch_object(value: Any) -> bool:
    module = getattr(type(value), "__module__", "") or ""
    return module == "torch" or module.startswith("torch.")


def _check_class(
    tx: Translator, cls: type, where: str, seen: set, depth: int, reads_objects: bool = False
) -> None:
    """A class the staticmethods use (a nested Function, a helper they construct): its
    functions are checked in turn; torch's and Python's own classes are not."""
    for klass in cls.__mro__:
        module = klass.__module__ or ""
        if module == "builtins" or module == "torch" or module.startswith("torch."):
            continue
        if klass in seen:
            continue
        seen.add(klass)
        for name, member in vars(klass).items():
            if reads_objects and name in _CONSTRUCTION:
                continue  # an object read was built already: its construction never runs
            if isinstance(member, staticmethod | classmethod):
                member = member.__func__
            if isinstance(member, property):
                member = member.fget
            if isinstance(member, types.FunctionType):
                through = f"{where} (through {cls.__name__}.{name})"
                _check_pure(tx, member, through, seen, depth + 1, reads_objects)


def _rebuilt(function: Any) -> bool:
    """Whether `function` was made by branch_functions, its cells fresh copies."""
    return getattr(function, "__ember_rebuilt__", False) is True


def _bound(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _is_torch_function(function: types.FunctionType) -> bool:
    module = function.__module__ or ""
    return module == "torch" or module.startswith("torch.")


def _guard_needed(value: Any) -> bool:
    """Constants read from globals or cells: the compiled graph may have kept them."""
    return (
        not isinstance(value, types.ModuleType | type | types.FunctionType)
        and (is_constant(value) or isinstance(value, torch.Size | torch.dtype | torch.device))
        and not isinstance(value, types.BuiltinFunctionType)
    )


def _guard_global(
    tx: Translator, function: types.FunctionType, name: str, value: Any, where: str
) -> None:
    module = sys.modules.get(function.__module__ or "")
    if module is None or vars(module) is not function.__globals__:
        raise Unsupported(f"{where} reads the global {name!r} of a namespace capture cannot guard")
    tx.ctx.guards.class_attribute(module, name, value)
