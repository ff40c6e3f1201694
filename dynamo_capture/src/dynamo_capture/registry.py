"""What capture does with particular callables: put them in the graph whole,
trace a Python stand-in for them, or leave them to run eagerly.

    allow_in_graph(fn)                 calls to fn become one graph node, fn is not traced
    disallow_in_graph(fn)              calls to fn break the graph, fn runs eagerly there
    nonstrict_trace(fn)                calls to fn become one graph node whose inputs and
                                       outputs are flattened; capture does not trace fn
                                       (a break inside it cuts nothing), the backend does
    @substitute_in_graph(original)     trace this Python function where `original` is called
    disable(fn)                        fn always runs eagerly (a graph break where it is called)
    assume_constant_result(fn)         fn runs once while capturing; its result is a constant

Eagerly, all four leave behaviour unchanged. torch's own markers
(`torch.compiler.disable`, `allow_in_graph`, `assume_constant_result`) count as
these (see torch_markers).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from dynamo_capture.torch_markers import (
    torch_constant_result,
    torch_disabled_reason,
)

__all__ = [
    "Substitute",
    "allow_in_graph",
    "assume_constant_result",
    "disable",
    "disabled_reason",
    "disallow_in_graph",
    "eager_only_depth",
    "is_allowed_in_graph",
    "is_nonstrict_traced",
    "nonstrict_trace",
    "is_constant_result",
    "substitute_for",
    "substitute_in_graph",
]

F = TypeVar("F", bound=Callable[..., Any])

# id -> the object itself, so that the id cannot be reused while registered.
_allowed_in_graph: dict[int, Callable[..., Any]] = {}
_disallowed_in_graph: dict[int, Callable[..., Any]] = {}
_nonstrict_traced: dict[int, Callable[..., Any]] = {}


@dataclass(frozen=True, slots=True)
class Substitute:
    """A traceable stand-in registered for a function capture cannot trace."""

    original: Callable[..., Any]
    traceable: Callable[..., Any]
    can_constant_fold_through: bool


# id -> (the registered object, its stand-in): holding the object keeps its id from reuse.
_substitutes: dict[int, tuple[object, Substitute]] = {}


def allow_in_graph(fn: F | list[F] | tuple[F, ...]) -> Any:
    """Tell capture to put calls to `fn` in the graph as one node instead of tracing it.

    `fn` must be a pure function of tensors (no side effects, no data-dependent
    Python control flow that changes between calls); its body is run on fake
    values to learn the output's metadata. Returns `fn` itself (or the list).
    """
    if isinstance(fn, list | tuple):
        return type(fn)(allow_in_graph(one) for one in fn)
    if not callable(fn):
        raise TypeError(f"allow_in_graph expects a callable, got {type(fn).__name__}")
    _disallowed_in_graph.pop(id(fn), None)
    _nonstrict_traced.pop(id(fn), None)
    _allowed_in_graph[id(fn)] = fn
    return fn


def disallow_in_graph(fn: F | list[F] | tuple[F, ...]) -> Any:
    """Tell capture to break the graph where `fn` is called, so that it runs eagerly
    (torch.compiler.disallow_in_graph's meaning; `fn` may be a torch function such
    as `torch.sigmoid`). It undoes `allow_in_graph(fn)`; `allow_in_graph` undoes it.
    Returns `fn` itself (or the list).
    """
    if isinstance(fn, list | tuple):
        return type(fn)(disallow_in_graph(one) for one in fn)
    if not callable(fn):
        raise TypeError(f"disallow_in_graph expects a callable, got {type(fn).__name__}")
    _allowed_in_graph.pop(id(fn), None)
    _nonstrict_traced.pop(id(fn), None)
    _disallowed_in_graph[id(fn)] = fn
    return fn


def nonstrict_trace(fn: F) -> F:
    """Tell capture to put each call to `fn` in the graph as one node without tracing
    its body (the meaning of torch.compile's nonstrict_trace decorator, whose registry
    is torch's own and not read here):
    the arguments (tensors, Python constants, and tuples, lists and dicts of them) are
    the node's inputs, its result's tensors (a tensor, or tuples, lists and dicts of
    tensors) its outputs, each read by one getitem node. A graph break inside `fn`
    cuts nothing; the backend runs or traces `fn` itself. Capture runs `fn` on fake
    values to learn its outputs: it must not write outside state, and tensors it reads
    from globals or closures are taken as they are when the graph runs, not as inputs.
    Returns `fn` itself; `allow_in_graph` / `disallow_in_graph` undo it.

        @ember.nonstrict_trace
        def scaled(x, config):
            print("scaling")  # no cut: capture does not trace this body
            return x * config["scale"]
    """
    if not callable(fn):
        raise TypeError(f"nonstrict_trace expects a callable, got {type(fn).__name__}")
    _allowed_in_graph.pop(id(fn), None)
    _disallowed_in_graph.pop(id(fn), None)
    _nonstrict_traced[id(fn)] = fn
    return fn


def is_nonstrict_traced(fn: object) -> bool:
    """Whether `fn` was registered with nonstrict_trace."""
    return _nonstrict_traced.get(id(fn)) is fn


def is_allowed_in_graph(fn: object) -> bool:
    """Whether `fn` was registered with allow_in_graph (ember's or torch.compiler's)."""
    return _allowed_in_graph.get(id(fn)) is fn


def assume_constant_result(fn: F) -> F:
    """Tell capture that `fn` returns the same Python value for the same constant arguments.

    Capture calls `fn` once while tracing and uses the result as a constant, not
    guarded: the graph is not recompiled when what `fn` reads changes. The arguments
    must be known while capturing and the result must be a Python constant (not a
    tensor); otherwise the call is a graph break. Returns `fn` itself.
    `torch.compiler.assume_constant_result` is read the same way.

        @assume_constant_result
        def world_size():
            return int(os.environ.get("WORLD_SIZE", 1))
    """
    if not callable(fn):
        raise TypeError(f"assume_constant_result expects a callable, got {type(fn).__name__}")
    fn.__ember_constant_result__ = True  # type: ignore[attr-defined]
    return fn


def is_constant_result(fn: object) -> bool:
    """Whether `fn` is marked with assume_constant_result (ember's or torch.compiler's)."""
    try:
        marked = inspect.getattr_static(getattr(fn, "__func__", fn), "__ember_constant_result__")
    except AttributeError:
        return torch_constant_result(fn)
    return marked is True


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # many C functions have no introspectable signature


def substitute_in_graph(
    original_fn: Callable[..., Any],
    *,
    can_constant_fold_through: bool = False,
    skip_signature_check: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a traceable Python function to stand in for `original_fn` during capture.

    The decorated function must take the same parameters as `original_fn`
    (checked where `original_fn` has a signature, unless `skip_signature_check`).
    It returns a function that, called eagerly, calls `original_fn`; capture
    traces the stand-in wherever `original_fn` or the returned function is called.
    `can_constant_fold_through`: when every argument is a capture-time constant,
    capture may call the stand-in and use its result as a constant.

        @substitute_in_graph(operator.indexOf)
        def index_of(a, b, /):
            for i, item in enumerate(a):
                if item is b or item == b:
                    return i
            raise ValueError("sequence.index(x): x not in sequence")
    """
    if not callable(original_fn) or inspect.isclass(original_fn):
        raise TypeError(
            f"substitute_in_graph expects a function to stand in for, got {original_fn!r}"
        )
    if id(original_fn) in _substitutes:
        existing = _substitutes[id(original_fn)][1].traceable
        raise ValueError(
            f"substitute_in_graph: {original_fn!r} already has a stand-in, "
            f"{existing.__module__}.{existing.__qualname__}"
        )

    def register(traceable_fn: Callable[..., Any]) -> Callable[..., Any]:
        if not inspect.isfunction(traceable_fn):
            raise TypeError(
                f"substitute_in_graph: the stand-in must be a Python function, "
                f"got {type(traceable_fn).__name__}"
            )
        if not skip_signature_check:
            expected, actual = _signature(original_fn), _signature(traceable_fn)
            if expected is not None and actual is not None and expected != actual:
                raise TypeError(
                    f"substitute_in_graph: the stand-in {traceable_fn.__qualname__}{actual} "
                    f"does not match {getattr(original_fn, '__qualname__', original_fn)}"
                    f"{expected}; give it the same parameters or pass skip_signature_check=True"
                )
        substitute = Substitute(original_fn, traceable_fn, can_constant_fold_through)
        _substitutes[id(original_fn)] = (original_fn, substitute)

        @functools.wraps(original_fn)
        def call_original(*args: Any, **kwargs: Any) -> Any:
            return original_fn(*args, **kwargs)

        _substitutes[id(call_original)] = (call_original, substitute)
        call_original.__ember_substitute__ = substitute  # type: ignore[attr-defined]
        return call_original

    return register


def substitute_for(fn: object) -> Substitute | None:
    """The stand-in registered for `fn`, if any."""
    registered = _substitutes.get(id(fn))
    if registered is None or registered[0] is not fn:
        return None
    return registered[1]


class _EagerOnly(threading.local):
    depth = 0


_eager_only = _EagerOnly()


def eager_only_depth() -> int:
    """How many recursive `disable` wrappers are running on this thread right now.

    While it is above zero, compiled callables run eagerly.
    """
    return _eager_only.depth


def disabled_reason(fn: object) -> str | None:
    """The reason given to `disable` (ember's or torch's) for `fn`; None when not disabled."""
    reason = getattr(fn, "__ember_disabled__", None)
    if reason is None and _disallowed_in_graph.get(id(fn)) is fn:
        return "disallowed in the graph with disallow_in_graph"
    return reason if reason is not None else torch_disabled_reason(fn)


def disable(
    fn: Callable[..., Any] | None = None,
    recursive: bool = True,
    *,
    reason: str | None = None,
    wrapping: bool = True,
) -> Any:
    """Run `fn` eagerly, never captured; usable as `@disable` or `@disable(reason=...)`.

    Capture breaks the graph where a disabled function is called. With
    `recursive=True` (the default) compiled callables reached from inside `fn`
    also run eagerly; with `recursive=False` only `fn`'s own frame is skipped.
    `wrapping=False` leaves the wrapper's name and docstring its own instead of
    copying `fn`'s (torch.compiler.disable's keywords, same meaning).
    """
    if not isinstance(recursive, bool):
        raise TypeError(f"disable: recursive must be True or False, got {recursive!r}")
    if not isinstance(wrapping, bool):
        raise TypeError(f"disable: wrapping must be True or False, got {wrapping!r}")
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"disable: reason must be None or a str, got {reason!r}")
    if fn is None:
        return functools.partial(disable, recursive=recursive, reason=reason, wrapping=wrapping)
    if not callable(fn):
        raise TypeError(
            f"disable expects a function, method or nn.Module, got {type(fn).__name__}: {fn!r}"
        )
    why = reason or "disabled with ember.disable"

    if recursive:

        def run_eagerly(*args: Any, **kwargs: Any) -> Any:
            _eager_only.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                _eager_only.depth -= 1

    else:

        def run_eagerly(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

    # wrapping=False: the wrapper keeps its own name, docstring and signature
    if wrapping and inspect.isroutine(fn):
        functools.update_wrapper(run_eagerly, fn)
    elif wrapping:  # a module or another callable object: do not copy its __dict__ over
        run_eagerly.__wrapped__ = fn  # type: ignore[attr-defined]
        run_eagerly.__qualname__ = run_eagerly.__name__ = type(fn).__name__
    run_eagerly.__ember_disabled__ = why  # type: ignore[attr-defined]
    run_eagerly.__ember_disabled_recursive__ = recursive  # type: ignore[attr-defined]
    return run_eagerly
