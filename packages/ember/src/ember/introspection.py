"""What the compiler did, without patching internals: `explain` and `last_artifacts`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dynamo_capture
from ember.api import compiled_callable_of
from ember.artifacts import CompileArtifacts, last_compile
from ember.errors import EmberError, InvalidArgumentError

__all__ = ["explain", "last_artifacts"]


def explain(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`ember.explain(fn)(*args)`: capture `fn` on these arguments with a recording
    backend and return the graphs, the graph breaks (reason and user source line)
    and the guards, as an `ExplainOutput`. Stable API."""
    if not callable(fn):
        raise TypeError(f"ember.explain expects a callable, got {type(fn).__name__}")
    try:  # something ember.compile returned: explain what it compiles
        fn = compiled_callable_of(fn).target
    except InvalidArgumentError:
        pass
    return dynamo_capture.explain(fn)


def last_artifacts(compiled: Callable[..., Any]) -> CompileArtifacts:
    """The readable artifacts of the last compile of a compiled function or module,
    for every part of a frame split by graph breaks, in the order they ran: entry
    code, guard source, captured graph, AOT graphs, schedule, kernels, wrapper.

        artifacts = ember.last_artifacts(compiled)
        print(artifacts.parts[0].kernels)

    Stable API (see `ember.artifacts.CompileArtifacts`)."""
    runner = compiled_callable_of(compiled)
    artifacts = last_compile(runner)
    if artifacts is None:
        raise EmberError(
            f"{getattr(compiled, '__name__', type(compiled).__name__)} has not been compiled "
            "yet: call it once first"
        )
    return artifacts
