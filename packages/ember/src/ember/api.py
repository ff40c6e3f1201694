"""`ember.compile`: checks its arguments, resolves the backend and options, and
wraps the target so that each call goes through capture.

    compiled = ember.compile(fn)                  # a function or bound method
    model = ember.compile(module)                 # an nn.Module: an OptimizedModule
    ember.compile(module, inplace=True)           # the module itself compiles its calls
    compiled = ember.compile(functools.partial(fn, y=2))   # or torch.sin, a C method, ...
    @ember.compile                                # a decorator ...
    @ember.compile(backend="eager", fullgraph=True)   # ... with arguments
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, overload

import torch

import dynamo_capture
from ember.backends import check_backend_name, lookup_backend
from ember.config import resolve_options
from ember.errors import InvalidArgumentError

__all__ = ["CompiledCallImpl", "OptimizedModule", "compile", "compiled_callable_of", "reset"]

F = TypeVar("F", bound=Callable[..., Any])

_COMPILED_ATTRIBUTE = "_ember_compiled"
# The built-in backends whose recompiled static entries compile at their second call
# (option "deferred_recompiles"); a custom backend is called as each entry is made.
_AOT_BACKENDS = ("inductor", "aot_eager")


def _check_flags(fullgraph: object, dynamic: object, disable: object) -> None:
    if not isinstance(fullgraph, bool):
        raise InvalidArgumentError(f"fullgraph must be True or False, got {fullgraph!r}")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise InvalidArgumentError(
            f"dynamic must be None (automatic), True or False, got {dynamic!r}"
        )
    if not isinstance(disable, bool):
        raise InvalidArgumentError(f"disable must be True or False, got {disable!r}")


def _make_runner(
    target: Callable[..., Any],
    *,
    backend: Any,
    options: dict[str, Any],
    fullgraph: bool,
    dynamic: bool | None,
) -> dynamo_capture.CompiledCallable:
    from ember.warm_capture import capture_cache

    return dynamo_capture.optimize(
        target,
        backend=lookup_backend(backend, options),
        fullgraph=fullgraph,
        dynamic=dynamic,
        guard_filter_fn=options["guard_filter_fn"],
        recompile_limit=options["recompile_limit"],
        resolve_backend=lambda name: lookup_backend(name, options),
        capture_cache=capture_cache(backend, options, fullgraph, dynamic),
        defer_recompiles=options["deferred_recompiles"]
        and check_backend_name(backend) in _AOT_BACKENDS,
    )


@overload
def compile(model: F, **kwargs: Any) -> F: ...
@overload
def compile(model: None = None, **kwargs: Any) -> Callable[[F], F]: ...


def compile(
    model: Callable[..., Any] | None = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Callable[..., Any] = "inductor",
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
    disable: bool = False,
    inplace: bool = False,
) -> Any:
    """Compile a function, bound method or nn.Module; stable API, torch.compile's signature.

    Args:
        model: what to compile: a function, a bound method (of any object), an
            nn.Module, an object with `__call__`, a `functools.partial`, a builtin,
            a torch function or op. None returns a decorator taking it.
        fullgraph: raise at the first graph break (pointing at the user's line)
            instead of running that part eagerly.
        dynamic: True traces symbolic sizes from the start; False never; None
            specializes first and makes sizes dynamic when they change.
        backend: a name from `ember.list_backends()` or any callable
            `backend(gm, example_inputs) -> callable`.
        mode: "default", "reduce-overhead", "max-autotune" or
            "max-autotune-no-cudagraphs" (a named set of options for inductor).
        options: a dict of options (see `ember.config.OPTIONS`).
        disable: return `model` unchanged (handy to switch compiling off). A
            model marked with `ember.disable` or `torch.compiler.disable` is also
            returned unchanged.
        inplace: for an nn.Module, compile the module's own calls and return the
            module itself (ember's `nn.Module.compile()`): parameters, state_dict
            keys and type stay the original's. `module._compiled_call_impl = None`
            undoes it.

        >>> @ember.compile(backend="eager")
        ... def f(x):
        ...     return torch.sin(x) + 1
    """
    _check_flags(fullgraph, dynamic, disable)
    if not isinstance(inplace, bool):
        raise InvalidArgumentError(f"inplace must be True or False, got {inplace!r}")
    backend_name = check_backend_name(backend)
    resolved = resolve_options(mode, options, backend_name)

    def wrap(target: Callable[..., Any]) -> Any:
        if not callable(target):
            raise InvalidArgumentError(
                f"ember.compile expects a function, method or nn.Module, "
                f"got {type(target).__name__}: {target!r}"
            )
        if inplace and not isinstance(target, torch.nn.Module):
            raise InvalidArgumentError(
                f"inplace=True compiles an nn.Module in place; got {type(target).__name__}. "
                "Use the returned callable for functions."
            )
        if disable or dynamo_capture.disabled_reason(target) is not None:
            # marked with ember.disable or torch.compiler.disable: it runs eagerly
            return target
        make_runner = functools.partial(
            _make_runner,
            backend=backend,
            options=resolved,
            fullgraph=fullgraph,
            dynamic=dynamic,
        )
        if inplace:
            target._compiled_call_impl = CompiledCallImpl(target, make_runner)
            return target
        if isinstance(target, torch.nn.Module):
            return OptimizedModule(target, make_runner)
        return _wrap_function(target, make_runner(target))

    if model is None:
        return wrap
    return wrap(model)


def _wrap_function(fn: Callable[..., Any], runner: dynamo_capture.CompiledCallable) -> Any:
    # A plain function, so that it binds as a method when used to decorate one.
    def compiled(*args: Any, **kwargs: Any) -> Any:
        return runner(*args, **kwargs)

    if isinstance(fn, functools.partial) or not hasattr(fn, "__name__"):
        compiled.__wrapped__ = fn  # type: ignore[attr-defined]
        compiled.__qualname__ = compiled.__name__ = type(fn).__name__
    else:
        functools.update_wrapper(compiled, fn)
    setattr(compiled, _COMPILED_ATTRIBUTE, runner)
    return compiled


class CompiledCallImpl:
    """`module._compiled_call_impl` after `ember.compile(module, inplace=True)`.

    nn.Module.__call__ calls it instead of `_call_impl`. What the compiled callable
    runs eagerly (a fallback, a graph break) calls the module again: that nested call
    runs `_call_impl` itself. As with `nn.Module.compile()`, copies and pickles of
    the module drop it (nn.Module's own `__getstate__`) and run eagerly.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        make_runner: Callable[[torch.nn.Module], dynamo_capture.CompiledCallable],
    ) -> None:
        self.module = module
        self.make_runner = make_runner
        self._runner: dynamo_capture.CompiledCallable | None = None
        self._running = threading.local()

    @property
    def runner(self) -> dynamo_capture.CompiledCallable:
        if self._runner is None:
            self._runner = self.make_runner(self.module)
        return self._runner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(self._running, "active", False):
            return self.module._call_impl(*args, **kwargs)
        self._running.active = True
        try:
            return self.runner(*args, **kwargs)
        finally:
            self._running.active = False


def compiled_callable_of(obj: Any) -> dynamo_capture.CompiledCallable:
    """The capture-level object behind something `ember.compile` returned."""
    in_place = getattr(obj, "_compiled_call_impl", None)
    if isinstance(obj, torch.nn.Module) and isinstance(in_place, CompiledCallImpl):
        return in_place.runner
    runner = getattr(obj, _COMPILED_ATTRIBUTE, None)
    if not isinstance(runner, dynamo_capture.CompiledCallable):
        raise InvalidArgumentError(
            f"{obj!r} was not returned by ember.compile; pass the compiled function or module"
        )
    return runner


# Module methods that act on the original module's state and return it (or a view of it).
_DELEGATED = (
    "named_parameters",
    "named_buffers",
    "named_children",
    "parameters",
    "buffers",
    "children",
    "modules",
    "register_buffer",
    "register_parameter",
    "register_module",
    "add_module",
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_full_backward_pre_hook",
    "zero_grad",
    "extra_repr",
)
# Module methods that change the original module in place and return the wrapper.
_IN_PLACE = (
    "train",
    "eval",
    "requires_grad_",
    "to",
    "cuda",
    "cpu",
    "float",
    "double",
    "half",
    "bfloat16",
    "type",
    "apply",
    "to_empty",
    "share_memory",
)


_PREFIX = "_orig_mod."


class OptimizedModule(torch.nn.Module):
    """An nn.Module whose calls go through ember; everything else is the original's.

    Attributes, parameters, buffers, train()/eval(), hooks and repr are the
    original module's; calling it runs the compiled forward (with the original's
    hooks). The original is `._orig_mod`, as in torch.

    Checkpoints move both ways with torch.compile: `state_dict()` keys carry the
    `_orig_mod.` prefix (as torch.compile's OptimizedModule), and `load_state_dict`
    takes either form (the original module's keys or prefixed ones). The wrapper's
    own `named_parameters()` / `named_buffers()` / `named_modules()` give the
    original's names (no prefix); a parent module sees the wrapper's parameters under
    `<name>._orig_mod.`, as with torch.compile. `torch.save`, `pickle` and
    `copy.deepcopy` keep the original and the compile settings; the copy compiles
    again on its first call.
    """

    def __init__(
        self,
        mod: torch.nn.Module,
        make_runner: Callable[[torch.nn.Module], dynamo_capture.CompiledCallable],
    ) -> None:
        super().__init__()
        # A child under "_orig_mod", as in torch: state_dict() and a parent's recursion
        # use the prefixed names. Also kept in __dict__ for fast attribute access.
        object.__setattr__(self, "_orig_mod", mod)
        self._modules["_orig_mod"] = mod
        object.__setattr__(self, "_ember_make_runner", make_runner)
        object.__setattr__(self, _COMPILED_ATTRIBUTE, make_runner(mod))
        self.register_load_state_dict_pre_hook(_accept_unprefixed_keys)

    @property
    def training(self) -> bool:  # type: ignore[override]
        mod = self.__dict__.get("_orig_mod")
        return True if mod is None else mod.training

    @training.setter
    def training(self, value: bool) -> None:
        mod = self.__dict__.get("_orig_mod")
        if mod is not None:
            mod.training = value

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__[_COMPILED_ATTRIBUTE](*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The original module's hooks run inside the compiled call, as in eager.
        return self.__dict__[_COMPILED_ATTRIBUTE](*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in ("_orig_mod", "_ember_make_runner", _COMPILED_ATTRIBUTE):
            return self.__dict__[name]
        return getattr(self.__dict__["_orig_mod"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "training":
            object.__setattr__(self, name, value)
        elif "_orig_mod" in self.__dict__:
            setattr(self._orig_mod, name, value)
        else:
            super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._orig_mod, name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._orig_mod)) | {"_orig_mod"})

    def __repr__(self) -> str:
        return repr(self._orig_mod)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._orig_mod)  # type: ignore[call-overload]

    def __len__(self) -> int:
        return len(self._orig_mod)  # type: ignore[arg-type]

    def __getitem__(self, index: Any) -> Any:
        return self._orig_mod[index]  # type: ignore[index]

    def __deepcopy__(self, memo: dict[int, Any]) -> OptimizedModule:
        # A copy of the original module, compiled with the same settings.
        module = copy.deepcopy(self._orig_mod, memo)
        return OptimizedModule(module, self.__dict__["_ember_make_runner"])

    def __reduce_ex__(self, protocol: Any) -> Any:
        # The original module and the compile settings; the loaded copy compiles again.
        # A backend or option that cannot be pickled (a lambda) fails here, naming it.
        return (OptimizedModule, (self._orig_mod, self.__dict__["_ember_make_runner"]))

    def named_modules(
        self,
        memo: set[torch.nn.Module] | None = None,
        prefix: str = "",
        remove_duplicate: bool = True,
    ) -> Iterator[tuple[str, torch.nn.Module]]:
        """The original module's submodules, by the original's names."""
        if memo is not None:
            # NOTE: a parent module's recursion passes its memo: it sees the names
            # torch.compile gives (`<name>._orig_mod.linear`), agreeing with its state_dict.
            return super().named_modules(memo, prefix, remove_duplicate)
        return self._orig_mod.named_modules(memo, prefix, remove_duplicate)

    def get_submodule(self, target: str) -> torch.nn.Module:
        """The original's submodule at `target` (with or without `_orig_mod.`)."""
        if target == "_orig_mod":
            return self._orig_mod
        return self._orig_mod.get_submodule(_unprefixed(target))

    def get_parameter(self, target: str) -> torch.nn.Parameter:
        """The original's parameter at `target` (with or without `_orig_mod.`)."""
        return self._orig_mod.get_parameter(_unprefixed(target))

    def get_buffer(self, target: str) -> torch.Tensor:
        """The original's buffer at `target` (with or without `_orig_mod.`)."""
        return self._orig_mod.get_buffer(_unprefixed(target))


def _unprefixed(target: str) -> str:
    return target[len(_PREFIX) :] if target.startswith(_PREFIX) else target


def _accept_unprefixed_keys(
    module: OptimizedModule, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """A load_state_dict pre-hook: keys of the original module's own checkpoint (no
    `_orig_mod.`) are renamed to the prefixed ones in place, metadata included."""
    inner = prefix + _PREFIX
    renamed = [k for k in state_dict if k.startswith(prefix) and not k.startswith(inner)]
    for key in renamed:
        state_dict[inner + key[len(prefix) :]] = state_dict.pop(key)
    metadata = getattr(state_dict, "_metadata", None)
    if renamed and metadata is not None:
        scope = prefix[:-1]
        for key in [k for k in metadata if k == scope or k.startswith(prefix)]:
            rest = key[len(prefix) :] if key != scope else ""
            if rest == "_orig_mod" or rest.startswith(_PREFIX):
                continue
            metadata.setdefault((inner + rest).rstrip("."), metadata[key])


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: OptimizedModule, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._orig_mod, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(torch.nn.Module, name).__doc__
    return method


def _delegate_in_place(name: str) -> Callable[..., Any]:
    def method(self: OptimizedModule, *args: Any, **kwargs: Any) -> OptimizedModule:
        getattr(self._orig_mod, name)(*args, **kwargs)
        return self

    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(torch.nn.Module, name).__doc__
    return method


for _name in _DELEGATED:
    setattr(OptimizedModule, _name, _delegate(_name))
for _name in _IN_PLACE:
    setattr(OptimizedModule, _name, _delegate_in_place(_name))


def reset() -> None:
    """Forget every compiled entry in the process: the next call of any compiled
    function captures and compiles again. Stable API."""
    dynamo_capture.reset()
