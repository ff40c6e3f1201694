"""Wrapper modules: a module whose forward runs machinery around one module it wraps.

    WRAPPER_MODULES = {DistributedDataParallel: "module", ...}

Compiling a wrapper (`ember.compile(DDP(model))`) runs the wrapper's forward
eagerly (DDP's bucket bookkeeping, its `record_function` region, the reducer's
hooks) and the wrapped module's forward as a compiled frame: while the wrapper's
call runs, the wrapped module's `forward` is looked up as the compiled callable
(break_callees.Shadow), so the wrapper calls it through its own hooks, exactly as
eager. torch.compile gets the same effect by skipping DDP's frames and compiling
the frames they call.

The wrapped module's graphs may get a backend of the wrapper's own: DDP's cuts
them at its gradient buckets (ddp_buckets.DDPBucketBackend), so that all-reduce
overlaps the backward; a graph captured while DDP's forward runs
(`DDP(ember.compile(model))`) gets it too. Add a wrapper with `register_wrapper_module(cls, attribute,
wrap_backend)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "WRAPPER_MODULES",
    "WrapperModule",
    "active_wrapper_backend",
    "register_wrapper_module",
    "wrapped_attribute",
    "wrapped_backend",
    "wrapped_module",
]

Backend = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class WrapperModule:
    """How a wrapper class holds its module, and the backend its module's graphs get."""

    attribute: str
    wrap_backend: Callable[[Any, Backend], Backend] | None = None


WRAPPER_MODULES: dict[type, WrapperModule] = {}


def register_wrapper_module(
    cls: type, attribute: str, wrap_backend: Callable[[Any, Backend], Backend] | None = None
) -> None:
    """Compiling a `cls` instance compiles the module at `instance.<attribute>` instead;
    `wrap_backend(instance, backend)`, if given, is the backend its graphs get."""
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise TypeError(f"register_wrapper_module expects an nn.Module class, got {cls!r}")
    if cls in WRAPPER_MODULES:
        raise ValueError(f"{cls.__qualname__} is already a wrapper module")
    WRAPPER_MODULES[cls] = WrapperModule(attribute, wrap_backend)


def wrapped_attribute(module: Any) -> str:
    return WRAPPER_MODULES[type(module)].attribute


def wrapped_backend(module: Any, backend: Backend) -> Backend:
    """The backend the graphs of the module `module` wraps are compiled with."""
    wrap = WRAPPER_MODULES[type(module)].wrap_backend
    return backend if wrap is None else wrap(module, backend)


def active_wrapper_backend(backend: Backend) -> Backend:
    """The backend for a graph captured while a wrapper's forward runs (DDP calling a
    compiled module, `DDP(ember.compile(model))`): the wrapper's, else `backend`."""
    for active in _ACTIVE_WRAPPERS:
        wrapper = active()
        if wrapper is not None:
            return wrapped_backend(wrapper, backend)
    return backend


# Functions giving the wrapper whose forward runs now, if any.
_ACTIVE_WRAPPERS: list[Callable[[], Any]] = []


def wrapped_module(target: Any) -> torch.nn.Module | None:
    """The module `target` wraps, if `target` is a wrapper module; else None."""
    wrapper = WRAPPER_MODULES.get(type(target))
    if wrapper is None:
        return None
    attribute = wrapper.attribute
    inner = target.__dict__.get("_modules", {}).get(attribute)
    return inner if isinstance(inner, torch.nn.Module) else None


def _register_torch_wrappers() -> None:
    if not torch.distributed.is_available():
        return
    from torch.nn.parallel import DistributedDataParallel

    from dynamo_capture.ddp_buckets import DDPBucketBackend, ddp_first_bucket_cap

    def bucketed(ddp: Any, backend: Backend) -> Backend:
        if isinstance(backend, DDPBucketBackend):
            return backend  # the module of a compiled DDP, captured inside DDP's forward
        return DDPBucketBackend(backend, ddp.bucket_bytes_cap, ddp_first_bucket_cap(ddp))

    register_wrapper_module(DistributedDataParallel, "module", bucketed)
    _ACTIVE_WRAPPERS.append(DistributedDataParallel._get_active_ddp_module)


_register_torch_wrappers()
