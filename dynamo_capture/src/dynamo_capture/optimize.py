"""The run-time entry of a compiled callable: stance, eager-only regions, then capture.

`optimize(target, backend=...)` returns a `CompiledCallable`. Calling it checks
the stance and `disable` regions first (those run the target eagerly), then
captures the target's frame. This build has no bytecode capture yet: a call that
would need it raises CaptureUnavailableError instead of pretending to compile.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from dynamo_capture.errors import CaptureUnavailableError
from dynamo_capture.registry import eager_only_depth
from dynamo_capture.stance import current_stance

__all__ = ["CompiledCallable", "optimize", "reset"]

Backend = Callable[..., Any]
_live: weakref.WeakSet[CompiledCallable] = weakref.WeakSet()


class CompiledCallable:
    """A callable compiled by capture; holds its cache of compiled entries."""

    def __init__(
        self,
        target: Callable[..., Any],
        *,
        backend: Backend,
        fullgraph: bool = False,
        dynamic: bool | None = None,
        guard_filter_fn: Callable[..., Any] | None = None,
        recompile_limit: int = 8,
        resolve_backend: Callable[[Any], Backend] | None = None,
    ) -> None:
        self.target = target
        self.backend = backend
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.guard_filter_fn = guard_filter_fn
        self.recompile_limit = recompile_limit
        self.resolve_backend = resolve_backend
        self.calls = 0
        _live.add(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        stance = current_stance()
        if stance.name == "force_eager" or eager_only_depth() > 0:
            return self.target(*args, **kwargs)
        if stance.name == "eager_then_compile" and self.calls == 1:
            return self.target(*args, **kwargs)
        raise CaptureUnavailableError(
            f"cannot run compiled {_describe(self.target)}: this version of ember has no "
            "bytecode capture yet (dynamo_capture), so nothing can be compiled. "
            "Call the original function, or run under ember.set_stance('force_eager')."
        )

    def reset(self) -> None:
        """Drop every compiled entry; the next call captures again."""
        self.calls = 0


def _describe(target: Callable[..., Any]) -> str:
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"'{name}'"


def optimize(target: Callable[..., Any], *, backend: Backend, **settings: Any) -> CompiledCallable:
    """Wrap `target` for capture with `backend` (the contract of DESIGN.md)."""
    return CompiledCallable(target, backend=backend, **settings)


def reset() -> None:
    """Forget every compiled entry of every compiled callable in this process."""
    for compiled in list(_live):
        compiled.reset()
