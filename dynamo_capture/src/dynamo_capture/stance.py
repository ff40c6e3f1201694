"""The compiler's stance: what a compiled callable does when it is called.

    set_stance("force_eager")               # as a function
    with set_stance("fail_on_recompile"):   # as a context manager
        ...
    @set_stance("force_eager")              # as a decorator
    def evaluate(): ...

Stances (the names and meanings torch uses):
    default                 compile on a cache miss, run the cached entry on a hit
    force_eager             ignore every compile directive: run eagerly
    eager_on_recompile      run eagerly where a recompile would be needed
    fail_on_recompile       raise RecompileError where a recompile would be needed
    eager_then_compile      run the first call eagerly, compile from the second
    aot_eager_then_compile  run the first call with the aot_eager backend, then compile
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from dynamo_capture.errors import StanceError

__all__ = ["STANCES", "Stance", "current_stance", "set_stance"]

STANCES: dict[str, str] = {
    "default": "compile on a cache miss, run the cached entry on a hit",
    "force_eager": "ignore every compile directive and run eagerly",
    "eager_on_recompile": "run eagerly where a recompile would be needed",
    "fail_on_recompile": "raise where a recompile would be needed",
    "eager_then_compile": "run the first call eagerly, compile from the second",
    "aot_eager_then_compile": "run the first call with aot_eager, compile from the second",
}

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Stance:
    """The stance in force. `force_backend` (a name or a backend callable) only with default."""

    name: str = "default"
    skip_guard_eval_unsafe: bool = False
    force_backend: str | Callable[..., Any] | None = None


_current = Stance()


def current_stance() -> Stance:
    """The stance in force now."""
    return _current


def _validated(
    stance: str, skip_guard_eval_unsafe: bool, force_backend: str | Callable[..., Any] | None
) -> Stance:
    if not isinstance(stance, str) or stance not in STANCES:
        choices = "\n".join(f"  {name}: {meaning}" for name, meaning in STANCES.items())
        raise StanceError(f"unknown stance {stance!r}; the stances are:\n{choices}")
    if force_backend is not None and stance != "default":
        raise StanceError(
            f"force_backend is only accepted with stance 'default', not {stance!r}; "
            "to run eagerly use set_stance('force_eager')"
        )
    if (
        force_backend is not None
        and not isinstance(force_backend, str)
        and not callable(force_backend)
    ):
        raise StanceError(
            f"force_backend must be None, a backend name or a backend callable, got "
            f"{force_backend!r} ({type(force_backend).__name__})"
        )
    if not isinstance(skip_guard_eval_unsafe, bool):
        raise StanceError(
            f"skip_guard_eval_unsafe must be True or False, got {skip_guard_eval_unsafe!r} "
            f"({type(skip_guard_eval_unsafe).__name__})"
        )
    return Stance(stance, skip_guard_eval_unsafe, force_backend)


class set_stance:  # noqa: N801 - used as a function, like torch's set_stance
    """Set the stance; usable as a function, a context manager or a decorator.

    Called as a function the stance stays until changed. As a context manager
    or a decorator it is restored on exit. A stance is process-wide, as in torch.
    """

    def __init__(
        self,
        stance: str = "default",
        *,
        skip_guard_eval_unsafe: bool = False,
        force_backend: str | Callable[..., Any] | None = None,
    ) -> None:
        global _current
        self.stance = _validated(stance, skip_guard_eval_unsafe, force_backend)
        self.previous = _current
        _current = self.stance

    def __enter__(self) -> Stance:
        global _current
        _current = self.stance
        return self.stance

    def __exit__(self, *exc_info: object) -> None:
        global _current
        _current = self.previous

    def __call__(self, fn: F) -> F:
        # Used as a decorator: the stance applies only while `fn` runs.
        global _current
        _current = self.previous
        stance = self.stance

        @functools.wraps(fn)
        def with_stance(*args: Any, **kwargs: Any) -> Any:
            global _current
            saved = _current
            _current = stance
            try:
                return fn(*args, **kwargs)
            finally:
                _current = saved

        return with_stance  # type: ignore[return-value]
