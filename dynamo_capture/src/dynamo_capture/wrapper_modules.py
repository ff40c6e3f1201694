"""Wrapper modules: a module whose forward runs machinery around one module it wraps.

    WRAPPER_MODULES = {DistributedDataParallel: "module", ...}

Compiling a wrapper (`ember.compile(DDP(model))`) runs the wrapper's forward
eagerly (DDP's bucket bookkeeping, its `record_function` region, the reducer's
hooks) and the wrapped module's forward as a compiled frame: while the wrapper's
call runs, the wrapped module's `forward` is looked up as the compiled callable
(break_callees.Shadow), so the wrapper calls it through its own hooks, exactly as
eager. torch.compile gets the same effect by skipping DDP's frames and compiling
the frames they call.

Add a wrapper with `register_wrapper_module(cls, attribute)`.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["WRAPPER_MODULES", "register_wrapper_module", "wrapped_attribute", "wrapped_module"]

WRAPPER_MODULES: dict[type, str] = {}


def register_wrapper_module(cls: type, attribute: str) -> None:
    """Compiling a `cls` instance compiles the module at `instance.<attribute>` instead."""
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise TypeError(f"register_wrapper_module expects an nn.Module class, got {cls!r}")
    if cls in WRAPPER_MODULES:
        raise ValueError(f"{cls.__qualname__} is already a wrapper module")
    WRAPPER_MODULES[cls] = attribute


def wrapped_attribute(module: Any) -> str:
    return WRAPPER_MODULES[type(module)]


def wrapped_module(target: Any) -> torch.nn.Module | None:
    """The module `target` wraps, if `target` is a wrapper module; else None."""
    attribute = WRAPPER_MODULES.get(type(target))
    if attribute is None:
        return None
    inner = target.__dict__.get("_modules", {}).get(attribute)
    return inner if isinstance(inner, torch.nn.Module) else None


def _register_torch_wrappers() -> None:
    if not torch.distributed.is_available():
        return
    from torch.nn.parallel import DistributedDataParallel

    register_wrapper_module(DistributedDataParallel, "module")


_register_torch_wrappers()
