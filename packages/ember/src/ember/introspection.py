"""What the compiler did, without patching internals: `explain` and `last_artifacts`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dynamo_capture
from ember.api import compiled_callable_of
from ember.errors import EmberError

__all__ = ["explain", "last_artifacts"]


def explain(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`ember.explain(fn)(*args)`: capture `fn` on these arguments with a recording
    backend and return the graphs, the graph breaks (reason and user source line)
    and the guards, as an `ExplainOutput`. Stable API."""
    if not callable(fn):
        raise TypeError(f"ember.explain expects a callable, got {type(fn).__name__}")
    return dynamo_capture.explain(fn)


def last_artifacts(compiled: Callable[..., Any]) -> Any:
    """The readable artifacts of the last compile of a compiled function or module:
    transformed code, guard source, captured graphs, AOT graphs, kernels. Stable API."""
    runner = compiled_callable_of(compiled)
    artifacts = runner.last_artifacts
    if artifacts is None:
        raise EmberError(
            f"{getattr(compiled, '__name__', type(compiled).__name__)} has not been compiled "
            "yet: call it once first"
        )
    return artifacts
