"""A break inside an inlined call: the callee runs as a compiled frame of its own.

When capture breaks inside a function the compiled frame called (a method, a
submodule's `forward`, a staticmethod), the caller is split at the call's
statement and that statement runs eagerly. So that the callee's code around the
break is still compiled, the eager statement calls a compiled callable for it:
the attribute the call looks up is shadowed, for the duration of the statement
only, by the compiled callable.

    owner kind          looked up as            shadowed by
    closure variable    func(...)               the cell's contents
    module forward      module(...) -> forward  module.__dict__["forward"]
    method              obj.name(...)           obj.__dict__[name]
    staticmethod        cls.name(...)           cls.name (restored after)
    classmethod         cls.name(...)           cls.name (restored after)
    global function     name(...)               the frame's globals[name] (restored
                                                after, unless the frame rebound it)

A global function a torch context decorator wraps (`@torch.inference_mode()`) keeps
its wrapper eager, the function it wraps compiled (context_decorated_part).

A submodule's class is shadowed on every module of that class under the frame's
modules, so a loop over layers runs each layer's forward compiled. Global
functions of a split frame are handled by `resume.called_globals` (their load is
rewritten); a frame run eagerly as a whole (a break in a try block) shadows them.

A frame run eagerly as a whole (a break inside a loop, as torch.compile skips such a
frame; in a try block; in a `with` capture cannot re-enter) gets `frame_shadows`: every user function it calls by a global name, every user method it
calls on a local (`self.helper(x)`) and the `forward` of every user module under its
local modules (`self.block(x)`, `for layer in self.layers: layer(x)`) runs as a
compiled frame of its own, as torch.compile compiles each frame its eager code
calls. Functions of torch and of the standard library stay eager, as there.
"""

from __future__ import annotations

import abc
import contextlib
import dis
import functools
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from dynamo_capture.optimizer_steps import StateInitialisingStep, optimizer_step_cell

__all__ = [
    "COMPREHENSIONS",
    "LocalFunctionRoute",
    "Shadow",
    "ShadowedPart",
    "context_decorated_part",
    "frame_shadows",
    "hooks_run_eagerly",
    "module_call_shadows",
    "module_hooks_hidden",
    "partialmethod_shadows",
    "shadows_for",
]

_MISSING = object()


@dataclass(frozen=True, slots=True)
class Shadow:
    """`owner.name` is looked up as `value` while the eager statement runs."""

    owner: Any
    name: str
    value: Any
    on_class: bool = False
    in_dict: bool = False  # owner is a dict (a module's globals), name a key of it

    def apply(self) -> Any:
        if self.in_dict:
            saved = self.owner.get(self.name, _MISSING)
            self.owner[self.name] = self.value
            return saved
        if self.name == "cell_contents":
            saved = self.owner.cell_contents
            self.owner.cell_contents = self.value
            return saved
        if self.on_class:
            saved = self.owner.__dict__.get(self.name, _MISSING)
            setattr(self.owner, self.name, self.value)
            return saved
        saved = self.owner.__dict__.get(self.name, _MISSING)
        self.owner.__dict__[self.name] = self.value
        return saved

    def restore(self, saved: Any) -> None:
        if self.in_dict:
            if self.owner.get(self.name, _MISSING) is not self.value:
                return  # the frame rebound the global: its value stays
            if saved is _MISSING:
                self.owner.pop(self.name, None)
            else:
                self.owner[self.name] = saved
            return
        if self.name == "cell_contents":
            self.owner.cell_contents = saved
        elif self.on_class:
            if saved is _MISSING:
                delattr(self.owner, self.name)
            else:
                setattr(self.owner, self.name, saved)
        elif saved is _MISSING:
            self.owner.__dict__.pop(self.name, None)
        else:
            self.owner.__dict__[self.name] = saved


class ShadowedPart:
    """An eager part run with its shadows applied (and removed after, even on an error)."""

    def __init__(self, part: Callable[..., Any], shadows: list[Shadow]) -> None:
        self.part = part
        self.shadows = shadows
        self.__code__ = getattr(part, "__code__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        saved = [shadow.apply() for shadow in self.shadows]
        try:
            return self.part(*args, **kwargs)
        finally:
            for shadow, old in zip(reversed(self.shadows), reversed(saved), strict=True):
                shadow.restore(old)


Compile = Callable[[Any], Any]


class LocalFunctionRoute:
    """Gives the compiled frame of the function a local holds where a cut call loads it.

    `known`: a function that came from outside the frame (a parameter, a global copied
    to a local); that very function is routed to `compile_part(known)`. `code`: the
    code of a function made in the frame (a new object each call): one with no
    closure or attributes of its own, constant defaults equal to the first one's,
    and the first one's globals runs as one compiled frame made for the first (the
    two run the same code the same way). Any other callable is returned as it is.

    A function with a closure (`def g(t): return t * k` over the frame's `k`) runs as
    one compiled frame of a private function of the same code whose cells get the
    called function's contents at each call, where nothing can change those contents
    while it runs: the function only reads its free variables (no `nonlocal` write,
    no inner function capturing them), each is a cell of `maker` (the code that made
    the function, suspended at the call) and no other code made inside `maker`
    writes it.
    """

    def __init__(
        self,
        compile_part: Compile,
        code: types.CodeType | None = None,
        known: Any = None,
        maker: types.CodeType | None = None,
    ) -> None:
        self.code = code
        self.known = known
        self.compile_part = compile_part
        self.maker = maker
        self.first: types.FunctionType | None = None
        self.part: Any = None
        self.private: types.FunctionType | None = None
        self.private_part: Any = None
        self.private_running = False
        self.wrapped_routes: dict[types.CodeType, LocalFunctionRoute] = {}

    def __call__(self, function: Any) -> Any:
        if self.known is not None:
            return self.compile_part(function) if function is self.known else function
        wrapped = _context_decorated(function)
        if wrapped is not None:
            return self._decorated_call(function, wrapped)
        if not (
            type(function) is types.FunctionType
            and function.__code__ is self.code
            and not function.__dict__
            and _constant_defaults(function)
        ):
            return function
        if function.__closure__:
            return self._closure_call(function)
        if self.first is None:
            self.first, self.part = function, self.compile_part(function)
        elif function.__globals__ is not self.first.__globals__ or _defaults(function) != _defaults(
            self.first
        ):
            return function
        return self.part

    def _decorated_call(self, wrapper: types.FunctionType, cell: types.CellType) -> Any:
        """A function made in the frame under a torch context decorator (`@torch.no_grad()`):
        the decorator's wrapper runs eagerly, as torch.compile skips torch's frames,
        and the function it calls is routed to its compiled frame for the call."""
        inner = cell.cell_contents
        route = self.wrapped_routes.get(inner.__code__)
        if route is None:
            route = LocalFunctionRoute(self.compile_part, code=inner.__code__, maker=self.maker)
            self.wrapped_routes[inner.__code__] = route
        routed = route(inner)
        if routed is inner:
            return wrapper

        def call_decorated(*args: Any, **kwargs: Any) -> Any:
            cell.cell_contents = routed
            try:
                return wrapper(*args, **kwargs)
            finally:
                cell.cell_contents = inner

        return call_decorated

    def _closure_call(self, function: types.FunctionType) -> Any:
        """The compiled frame of the private function, its cells filled from
        `function`'s for the call; `function` itself where that is not sound."""
        if self.maker is None or not _cells_fixed_while_called(function.__code__, self.maker):
            return function
        if self.private is None:
            cells = tuple(types.CellType() for _ in function.__closure__ or ())
            self.private = types.FunctionType(
                function.__code__, function.__globals__, function.__name__,
                function.__defaults__, cells,
            )  # fmt: skip
            self.private.__kwdefaults__ = function.__kwdefaults__
            self.private.__qualname__ = function.__qualname__
            self.private_part = self.compile_part(self.private)
        private = self.private
        if function.__globals__ is not private.__globals__ or _defaults(function) != _defaults(
            private
        ):
            return function
        part = self.private_part

        def call_with_cells(*args: Any, **kwargs: Any) -> Any:
            if self.private_running:  # a call inside one: the private cells are taken
                return function(*args, **kwargs)
            cells = private.__closure__ or ()
            for mine, theirs in zip(cells, function.__closure__ or (), strict=True):
                mine.cell_contents = theirs.cell_contents
            self.private_running = True
            try:
                return part(*args, **kwargs)
            finally:
                self.private_running = False
                for mine in cells:  # keep nothing of the call alive
                    del mine.cell_contents

        return call_with_cells


_CELL_WRITES = frozenset({"STORE_DEREF", "DELETE_DEREF"})
# the names of the codes Python 3.11 makes for comprehensions and generator expressions
COMPREHENSIONS = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"})


@functools.cache
def _decorator_wrapper_codes() -> frozenset[types.CodeType]:
    """The codes of the wrappers context decorators (`@torch.no_grad()`) make: torch's,
    and the one capture hands on for a function it decorated (calls.py)."""
    from dynamo_capture.calls import decorated_by_context

    codes = {decorated_by_context(lambda: None, lambda: None).__code__}
    try:
        codes.add(torch.utils._contextlib.context_decorator(lambda: None, lambda: None).__code__)
    except Exception:  # noqa: BLE001 - another torch: its wrappers are not routed
        pass
    return frozenset(codes)


def _context_decorated(function: Any) -> types.CellType | None:
    """The cell of a torch context decorator's wrapper that holds the function it wraps
    (a plain Python function); None for anything else."""
    if type(function) is not types.FunctionType:
        return None
    if function.__code__ not in _decorator_wrapper_codes():
        return None
    inner = getattr(function, "__wrapped__", None)
    if type(inner) is not types.FunctionType:
        return None
    return next((c for c in function.__closure__ or () if _contents(c) is inner), None)


def context_decorated_part(function: Any, compile_part: Compile) -> Any:
    """For the wrapper a torch context decorator made (`@torch.inference_mode()` on a
    global function the split frame calls): the wrapper run eagerly, as torch.compile
    skips torch's frames, the function it wraps routed to its compiled frame for the
    call. None for any other function."""
    cell = _context_decorated(function)
    if cell is None:
        return None
    inner = cell.cell_contents
    part = compile_part(inner)

    def call_decorated(*args: Any, **kwargs: Any) -> Any:
        cell.cell_contents = part
        try:
            return function(*args, **kwargs)
        finally:
            cell.cell_contents = inner

    return call_decorated


def _nested_codes(code: types.CodeType) -> list[types.CodeType]:
    """The code objects made inside `code`, at any depth."""
    found = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += [const, *_nested_codes(const)]
    return found


def _cells_fixed_while_called(code: types.CodeType, maker: types.CodeType) -> bool:
    """Whether the free variables of `code` (a function made by `maker`'s frame, called
    there) keep their contents while it runs: `code` only reads them, each is a cell of
    `maker`, and no code made in `maker` other than `code` writes a cell of that name."""
    if any(name not in maker.co_cellvars for name in code.co_freevars):
        return False
    if code.co_name in code.co_freevars:
        return False  # it calls itself: a call inside a call
    lazy = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    if code.co_flags & lazy:
        return False  # it reads its cells after the call returns
    for instruction in dis.get_instructions(code):
        if instruction.opname in _CELL_WRITES or instruction.opname == "LOAD_CLOSURE":
            return False
    for nested in _nested_codes(maker):
        if nested is code:
            continue
        for instruction in dis.get_instructions(nested):
            if instruction.opname in _CELL_WRITES and instruction.argval in code.co_freevars:
                return False
    return True


_CONSTANT_TYPES = (bool, int, float, str, bytes, type(None))


def _defaults(function: types.FunctionType) -> tuple[Any, ...]:
    """The function's defaults with their types (`1 == 1.0 == True` are not the same)."""
    values = (*(function.__defaults__ or ()), *sorted((function.__kwdefaults__ or {}).items()))
    return tuple((type(value), value) for value in values)


def _constant_defaults(function: types.FunctionType) -> bool:
    values = (*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values())
    return all(type(value) in _CONSTANT_TYPES for value in values)


def shadows_for(
    callee: Any,
    frame_function: types.FunctionType,
    f_locals: dict[str, Any],
    compile_part: Compile,
    *,
    global_functions: bool = False,
) -> list[Shadow]:
    """Shadows that route the call to `callee` (an interpreter.Callee) to compiled frames;
    a global function only with `global_functions` (a frame run eagerly as a whole)."""
    function, receiver = callee.function, callee.receiver
    step = optimizer_step_cell(function)
    if step is not None:  # torch's wrappers around an optimizer's step: its body compiled
        cell, body = step
        return [Shadow(cell, "cell_contents", StateInitialisingStep(compile_part(body), body))]
    if not isinstance(function, types.FunctionType) or _stdlib_function(function):
        return []  # the standard library's frames run eagerly, as torch.compile skips them
    name = function.__name__
    f_globals = frame_function.__globals__
    for cell in frame_function.__closure__ or ():
        if _contents(cell) is function:  # a decorator's wrapper calling the function it wraps
            return [Shadow(cell, "cell_contents", compile_part(function))]
    if isinstance(receiver, torch.nn.Module):
        forward = _class_attr(receiver, "forward")  # a custom __call__ runs forward inside
        custom_call = name == "__call__" and isinstance(forward, types.FunctionType)
        if forward is function or custom_call:
            modules = _same_class_modules(receiver, f_locals)
            shadows = [
                Shadow(module, "forward", compile_part(types.MethodType(forward, module)))
                for module in modules
            ]
            # nn.Module.__call__ runs eagerly around the forward: its user hooks run as
            # compiled frames of their own, as torch.compile runs them
            for module in modules:
                for table in (module._forward_pre_hooks, module._forward_hooks):
                    for key, hook in list(table.items()):
                        if _user_hook(hook):
                            shadows.append(Shadow(table, key, compile_part(hook), in_dict=True))
            return shadows
    if name.startswith("__") and name.endswith("__"):
        # special methods are looked up on the class: an operator's one is shadowed there
        owner = _special_method_owner(callee.receiver_class or type(receiver), name, function)
        if owner is None:
            return []
        return [Shadow(owner, name, _CompiledMethod(compile_part(function)), on_class=True)]
    if receiver is not None and _class_attr(receiver, name) is function:
        if hasattr(receiver, "__dict__") and not isinstance(receiver, type):
            bound = types.MethodType(function, receiver)
            return [Shadow(receiver, name, compile_part(bound))]
    if isinstance(receiver, type):
        owner = _owner_of(receiver, name, classmethod, function)
        if owner is not None:
            return [Shadow(owner, name, classmethod(compile_part(function)), on_class=True)]
    owner = _static_owner(function, f_locals, f_globals)
    if owner is not None:
        return [Shadow(owner, name, staticmethod(compile_part(function)), on_class=True)]
    if global_functions and receiver is None and f_globals.get(name) is function:
        return [Shadow(f_globals, name, compile_part(function), in_dict=True)]
    return []


# special methods an operator or builtin calls on a user object (`obj[i]`, `obj + y`,
# `len(obj)`), looked up on its class: one that broke goes to a compiled frame of its own
# while the eager statement runs, as torch.compile's frame hook compiles the method's
# frame there (in a frame run eagerly as a whole after a break in a loop, torch.compile
# compiles none of them, and neither does capture)
ROUTED_SPECIAL_METHODS = frozenset(
    {
        "__init__", "__getitem__", "__setitem__", "__delitem__", "__len__", "__contains__", "__call__",
        "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__matmul__",
        "__rmatmul__", "__truediv__", "__rtruediv__", "__neg__",
    }
)  # fmt: skip


def _plain_user_class(cls: Any) -> bool:
    """A user class whose attributes capture may shadow for a statement: not torch's, not
    a module's, with no metaclass of its own (one may refuse or watch attribute writes)."""
    if not isinstance(cls, type) or cls.__module__.split(".")[0] in ("torch", "builtins"):
        return False
    if issubclass(cls, (torch.nn.Module, torch.Tensor)):
        return False
    return type(cls) in (type, abc.ABCMeta)


def _routed_special(function: Any) -> bool:
    generator_flags = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    return _user_function(function) and not function.__code__.co_flags & generator_flags


def _special_method_owner(cls: type, name: str, function: Any) -> type | None:
    """The user class in the receiver's class `cls`'s MRO defining `function` as special
    method `name` (none for a class itself or None as the receiver)."""
    if name not in ROUTED_SPECIAL_METHODS or cls in (type, type(None)):
        return None
    if not _routed_special(function):
        return None
    for klass in cls.__mro__:
        if klass.__dict__.get(name) is function:
            return klass if _plain_user_class(klass) else None
    return None


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return None


def _class_attr(obj: Any, name: str) -> Any:
    try:
        return inspect.getattr_static(type(obj), name)
    except AttributeError:
        return None


def _same_class_modules(receiver: torch.nn.Module, f_locals: dict[str, Any]) -> list[Any]:
    """`receiver` and every module of its class under the frame's modules (no hooks' owners)."""
    found = {id(receiver): receiver}
    for value in f_locals.values():
        if isinstance(value, torch.nn.Module):
            for module in value.modules():
                if type(module) is type(receiver) and "forward" not in module.__dict__:
                    found.setdefault(id(module), module)
    return list(found.values())


def _static_owner(
    function: types.FunctionType, f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> type | None:
    """The class holding `function` as a staticmethod: a local's class or a global class."""
    candidates = [type(value) for value in f_locals.values()]
    candidates += [value for value in f_locals.values() if isinstance(value, type)]
    for scope in (f_globals, function.__globals__):
        candidates += [value for value in scope.values() if isinstance(value, type)]
    for cls in candidates:
        owner = _owner_of(cls, function.__name__, staticmethod, function)
        if owner is not None:
            return owner
    return None


def _owner_of(cls: type, name: str, kind: type, function: types.FunctionType) -> type | None:
    """The class in `cls`'s MRO whose `name` is a `kind` (static/classmethod) of `function`."""
    for klass in getattr(cls, "__mro__", ()):
        found = klass.__dict__.get(name)
        if isinstance(found, kind) and found.__func__ is function:
            return klass
    return None


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__)) + os.sep


def _stdlib_function(function: types.FunctionType) -> bool:
    """A function of the standard library (`logging.Logger.info`), not an installed package's."""
    filename = os.path.abspath(function.__code__.co_filename)
    if not filename.startswith(_STDLIB_DIR):
        return False
    return not filename[len(_STDLIB_DIR) :].startswith(("site-packages", "dist-packages"))


def _user_function(value: Any) -> bool:
    """A Python function of the user's code (not torch's, not the standard library's)."""
    if not isinstance(value, types.FunctionType):
        return False
    filename = os.path.abspath(value.__code__.co_filename)
    if filename.startswith(_TORCH_DIR):
        return False
    if filename.startswith(_STDLIB_DIR):
        return filename[len(_STDLIB_DIR) :].startswith(("site-packages", "dist-packages"))
    return True


def _user_forward(module: Any) -> types.FunctionType | None:
    """The Python `forward` of a module of a user class (none for torch's own modules)."""
    if not isinstance(module, torch.nn.Module) or "forward" in module.__dict__:
        return None
    if type(module).__call__ is not torch.nn.Module.__call__:
        return None
    forward = _class_attr(module, "forward")
    return forward if _user_function(forward) else None


def frame_shadows(
    frame_function: types.FunctionType, f_locals: dict[str, Any], compile_part: Compile
) -> list[Shadow]:
    """Shadows that make the calls of a frame run eagerly as a whole go to compiled frames:
    global user functions, and user methods and submodules' forwards of its locals."""
    f_globals = frame_function.__globals__
    shadows: dict[tuple[int, str], Shadow] = {}
    insts = [i for i in dis.get_instructions(frame_function.__code__) if i.opname != "CACHE"]
    # the comprehensions' codes (Python 3.11 runs each as a function of its own) call the
    # frame's globals too: `[helper(t) for t in xs]`, `sum(helper(t) for t in xs)`
    comprehension_insts = [
        inst
        for code in _nested_codes(frame_function.__code__)
        if code.co_name in COMPREHENSIONS
        for inst in dis.get_instructions(code)
        if inst.opname in ("LOAD_GLOBAL", "STORE_GLOBAL")
    ]
    # NOTE: only names the frame loads for a call alone: one it also reads as a value
    # (`f = helper`, `g is helper`) or rebinds must stay the function itself
    as_values = {
        inst.argval
        for inst in [*insts, *comprehension_insts]
        if (inst.opname == "LOAD_GLOBAL" and not inst.arg & 1) or inst.opname == "STORE_GLOBAL"
    }
    for index, inst in enumerate([*insts, *comprehension_insts]):
        if inst.opname == "LOAD_GLOBAL":
            value = f_globals.get(inst.argval)
            if inst.argval in as_values or value is frame_function:
                continue
            if _user_function(value):
                key = (id(f_globals), inst.argval)
                shadows.setdefault(key, Shadow(f_globals, inst.argval, None, in_dict=True))
            continue
        if index >= len(insts) or not _method_load(inst) or index == 0:
            continue
        loader = insts[index - 1]
        if loader.opname != "LOAD_FAST" or loader.argval not in f_locals:
            continue
        receiver = f_locals[loader.argval]
        if isinstance(receiver, type) or not hasattr(receiver, "__dict__"):
            continue
        name = inst.argval
        member = _class_attr(receiver, name)
        if (
            name not in receiver.__dict__
            and _user_function(member)
            and not (name.startswith("__") and name.endswith("__"))
        ):
            shadows.setdefault((id(receiver), name), Shadow(receiver, name, member))
            continue
    if any(inst.opname == "BEFORE_WITH" for inst in insts):
        closure = frame_function.__closure__ or ()
        for cls in _context_classes(insts, f_locals, f_globals, closure):
            for name in ("__enter__", "__exit__"):
                shadows.setdefault((id(cls), name), Shadow(cls, name, None, on_class=True))
    for value in f_locals.values():  # submodules, called by name or from a container
        if isinstance(value, torch.nn.Module):
            for module in value.modules():
                if _user_forward(module) is not None and module is not value:
                    shadows.setdefault((id(module), "forward"), Shadow(module, "forward", None))
    return [_compiled_shadow(shadow, compile_part) for shadow in shadows.values()]


def _context_classes(
    insts: list[dis.Instruction],
    f_locals: dict[str, Any],
    f_globals: dict[str, Any],
    closure: tuple[Any, ...],
) -> list[type]:
    """User classes whose instances the frame may enter in a `with`: the classes it loads
    by a global name or from a closure cell and the classes of its locals, with `__enter__` and `__exit__` both
    user functions (the `with` statement calls them, looked up on the class)."""
    candidates = [f_globals.get(inst.argval) for inst in insts if inst.opname == "LOAD_GLOBAL"]
    candidates += [type(value) for value in f_locals.values()]
    candidates += [_contents(cell) for cell in closure]
    found: dict[int, type] = {}
    for cls in candidates:
        if not isinstance(cls, type) or cls.__module__.split(".")[0] == "torch":
            continue
        if type(cls) not in (type, abc.ABCMeta):
            continue  # a metaclass of its own may refuse or watch class attribute writes
        enter, leave = getattr(cls, "__enter__", None), getattr(cls, "__exit__", None)
        if _user_function(enter) and _user_function(leave):
            found.setdefault(id(cls), cls)
    return list(found.values())


class _CompiledMethod:
    """A class attribute standing for a method: looked up on an instance it gives the
    compiled frame of the function bound to that instance (the `with` statement looks
    `__enter__` and `__exit__` up on the class)."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self.compiled
        return types.MethodType(self.compiled, instance)


def _method_load(inst: dis.Instruction) -> bool:
    """A load of an attribute for a call of it (`obj.name(...)`), not as a value."""
    if inst.opname == "LOAD_METHOD":  # 3.11
        return True
    return inst.opname == "LOAD_ATTR" and sys.version_info >= (3, 12) and bool(inst.arg & 1)


def _compiled_shadow(shadow: Shadow, compile_part: Compile) -> Shadow:
    """The shadow with its compiled frame (one per function and receiver)."""
    owner, name = shadow.owner, shadow.name
    if shadow.in_dict:
        return Shadow(owner, name, compile_part(owner[name]), in_dict=True)
    if shadow.on_class:  # a context manager's __enter__ / __exit__, found on its class
        method = _CompiledMethod(compile_part(getattr(owner, name)))
        return Shadow(owner, name, method, on_class=True)
    function = _class_attr(owner, "forward") if name == "forward" else shadow.value
    return Shadow(owner, name, compile_part(types.MethodType(function, owner)))


def hooks_run_eagerly(module: Any) -> bool:
    """Whether `module` is called as torch's compiler calls a compiled module of a user
    class that has hooks of its own: nn.Module.__call__ runs eagerly, and its forward and
    each hook written in user code run as compiled frames of their own (module_call_shadows).
    torch's own modules (nn.Linear, nn.Sequential) keep their hooks inlined in one graph."""
    if _user_forward(module) is None:
        return False
    own = (
        module._forward_hooks,
        module._forward_pre_hooks,
        module._backward_hooks,
        module._backward_pre_hooks,
    )
    return any(bool(hooks) for hooks in own)


_OWN_HOOK_TABLES = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
)


@contextlib.contextmanager
def module_hooks_hidden(module: torch.nn.Module) -> Iterator[None]:
    """While the block runs, `module` has no hooks of its own and no `forward` on the
    instance: nn.Module.__call__, run eagerly around the module's compiled frame, already
    ran its pre-hooks and runs its hooks after, so the frame is the module's call without
    them (the same frame a call without hooks compiled). A hook registered meanwhile
    is kept."""
    table = module.__dict__
    saved = {name: table[name] for name in _OWN_HOOK_TABLES if name in table}
    forward = table.pop("forward", _MISSING)
    for name, hooks in saved.items():
        table[name] = type(hooks)()
    try:
        yield
    finally:
        for name, hooks in saved.items():
            hooks.update(table[name])  # registered while hidden
            table[name] = hooks
        if forward is not _MISSING:
            table["forward"] = forward


def _user_hook(hook: Any) -> bool:
    """A hook torch.compile would compile as a frame: a function, bound method or callable
    object written in user code."""
    if isinstance(hook, types.MethodType):
        return _user_function(hook.__func__)
    if isinstance(hook, types.FunctionType):
        return _user_function(hook)
    return _user_function(getattr(type(hook), "__call__", None))  # noqa: B004


def module_call_shadows(
    module: torch.nn.Module, compile_forward: Compile, compile_hook: Compile
) -> list[Shadow]:
    """For one eager nn.Module.__call__: the compiled frames of the module's forward and
    of each user hook in its forward pre-hook and hook tables, read anew on every call,
    so that a hook added or removed later, or a forward replaced, is seen at once."""
    shadows = []
    if _user_forward(module) is not None:  # not one set on the instance
        shadows.append(Shadow(module, "forward", compile_forward(module.forward)))
    for table in (module._forward_pre_hooks, module._forward_hooks):
        for key, hook in list(table.items()):
            if _user_hook(hook):
                shadows.append(Shadow(table, key, compile_hook(hook), in_dict=True))
    return shadows


def partialmethod_shadows(methods: list[Any], compile_part: Compile) -> list[Shadow]:
    """For a frame run eagerly: each functools.partialmethod's function, read through an
    instance, gives the compiled frame of the function bound to it."""
    return [
        Shadow(method, "func", _CompiledMethod(compile_part(method.func))) for method in methods
    ]
