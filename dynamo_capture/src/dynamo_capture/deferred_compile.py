"""Deferred backend compiles: an entry whose graph runs as captured until its second call.

A frame recompiled with static sizes often makes an entry that runs once: HF
`generate()` compiles its prefill, then its first decode step (a key/value cache of
the prompt's length, static), then the decode steps with that length symbolic
(automatic dynamic), which from then on cover the first decode step as well. Compiled
in full, the second entry costs as much as either other (its AOT trace, lowering,
kernels and their build) for one call per `generate()`.

`CompiledCallable(defer_recompiles=True)` gives such an entry a `DeferredCompile` as
its compiled graph:

    1st call    the captured FX graph runs as it is (its GraphModule: the torch
                operations one by one, as eager runs them)
    2nd call    the backend compiles the graph (`backend(gm, example_inputs)`, the
                capture's fakes), and this call and every later one run what it gave;
                the entry's code then calls that directly

and where another entry's guards also pass on the second call's inputs, that entry
runs and the deferred one is dropped before its compile (`CompiledCallable._hit`):
any entry whose guards pass was compiled for those inputs.

Every guard is checked as before; only when the backend runs changes. A backend that
fails raises `BackendCompilerFailed` at the second call, naming the frame.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.fx

__all__ = ["DeferredCompile", "DeferredParts"]


@dataclass(frozen=True, slots=True)
class DeferredParts:
    """What the backend's compile needs, kept from the capture (not its whole context)."""

    target: Any  # the FrameTarget: its code names the frame in a backend's error
    graph_module: torch.fx.GraphModule
    example_inputs: tuple[Any, ...]


class DeferredCompile:
    """The compiled graph of an entry, compiled by the backend at the entry's second call.

    >>> deferred = DeferredCompile(backend, DeferredParts(target, gm, tuple(fakes)))
    >>> deferred(*inputs)   # gm(*inputs)
    >>> deferred(*inputs)   # backend(gm, fakes) compiled, then run
    """

    def __init__(self, backend: Callable[..., Any], parts: DeferredParts) -> None:
        self.backend = backend
        self.calls = 0
        self.compiled: Any = None  # what the backend returned, once it ran
        self._parts: DeferredParts | None = parts
        self._graph = parts.graph_module
        self._lock = threading.Lock()
        self._scope: dict[str, Any] | None = None
        self._entry: Any = None

    @property
    def pending(self) -> bool:
        """Whether the backend has not compiled the graph yet."""
        return self.compiled is None

    def bind(self, scope: dict[str, Any], entry: Any) -> None:
        """The entry whose code calls this as `___compiled` (in `scope`): both get the
        backend's result once it is made, so later calls go to it directly."""
        self._scope = scope
        self._entry = entry

    def discard(self) -> None:
        """The entry was dropped uncompiled: let go of the fakes kept for the backend (the
        compile artifacts may still hold this object)."""
        self._parts = None

    def __call__(self, *args: Any) -> Any:
        compiled = self.compiled
        if compiled is None:
            with self._lock:
                if self.compiled is None and self.calls > 0:
                    self.compile()
                self.calls += 1
                compiled = self.compiled
            if compiled is None:
                return self._graph(*args)
        return compiled(*args)

    def compile(self) -> Any:
        """Run the backend now (once); what it returned (None once the entry was dropped)."""
        if self.compiled is not None:
            return self.compiled
        from dynamo_capture.capture import _call_backend

        parts = self._parts
        if parts is None:  # dropped (a call racing the drop runs the graph as captured)
            return None
        start = time.perf_counter()
        compiled = _call_backend(self.backend, parts)
        seconds = time.perf_counter() - start
        self.compiled = compiled
        self._parts = None  # the fakes are no longer needed
        if self._scope is not None:
            self._scope["___compiled"] = compiled
        entry = self._entry
        if entry is not None:
            entry.compiled = compiled
            entry.artifacts.compiled = compiled
            entry.artifacts.backend_seconds += seconds
        return compiled

    def __getattr__(self, name: str) -> Any:
        # NOTE: what reads the backend's own attributes (ember's `stage_artifacts`) reads
        # them off the compiled graph once there is one, as it would without deferring.
        compiled = self.__dict__.get("compiled")
        if compiled is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(compiled, name)
