"""A count of nn.Module mutations, so that a module tree's guards run only after one.

torch's nn.Module has no version counter. This module keeps one process-wide
count, `mutation_stamp()`, that changes after any of nn.Module's own ways of
changing a module ran:

- `Module.__setattr__` / `__delattr__`: parameters, buffers and submodules
  assigned or deleted, `.training` (`train()` / `eval()` assign it), `forward`
  or any other attribute assigned on the instance, `__class__` changed;
- `register_parameter`, `register_buffer`, `add_module` / `register_module`;
- `Module._apply` (`to()`, `half()`, `cuda()`, ...: it writes `_parameters`
  and `_buffers` directly);
- the containers' `insert` (ModuleList, Sequential) and `ModuleDict.pop`,
  which write `_modules` directly;
- every hook registration (module hooks of each kind, tensor hooks, ...): torch
  numbers its hook handles with one class-level counter, `RemovableHandle.next_id`,
  which the stamp includes. Removing a hook cannot add one; a guard that
  expects hooks present does not rely on the stamp (see module_tree.py).

`install()` wraps those methods once, on the class (no instance or subclass is
touched); each wrapper runs the original and counts in a `finally`, after the
change, so a check that read the stamp before its full check never records a
stamp older than what it saw. `installed()` says whether the wrappers are
still the ones on nn.Module (another library may re-patch it; then the stamp
is not trusted).

NOTE: what bypasses those methods is not counted: `object.__setattr__` on a
module, writes into a module's `__dict__`, `_modules` or hook dicts by hand, a
module class that overrides `__setattr__` / `__delattr__` (module_tree.py does
not trust the stamp for trees with such a class). Parameters and buffers are
read afresh on every call anyway (module_tree.py), so writes into
`_parameters` / `_buffers` (as `torch.func.functional_call` does) are seen.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

__all__ = ["install", "installed", "mutation_stamp"]

_COUNT = [0]
_WRAPPED: dict[tuple[type, str], Callable[..., Any]] = {}


def _counting(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        finally:
            _COUNT[0] += 1

    counted.__ember_counts_mutations__ = True  # type: ignore[attr-defined]
    return counted


def _targets() -> list[tuple[type, str]]:
    module = torch.nn.Module
    targets = [
        (module, name)
        for name in (
            "__setattr__",
            "__delattr__",
            "register_parameter",
            "register_buffer",
            "add_module",
            "register_module",
            "_apply",
        )
    ]
    targets += [(torch.nn.ModuleList, "insert"), (torch.nn.Sequential, "insert")]
    targets += [(torch.nn.ModuleDict, "pop")]
    return [(cls, name) for cls, name in targets if name in cls.__dict__]


def install() -> None:
    """Wrap nn.Module's mutation methods (once) so that `mutation_stamp()` counts them."""
    if _WRAPPED:
        return
    for cls, name in _targets():
        original = cls.__dict__[name]
        if getattr(original, "__ember_counts_mutations__", False):
            continue
        wrapper = _counting(original)
        setattr(cls, name, wrapper)
        _WRAPPED[(cls, name)] = wrapper


def installed() -> bool:
    """Whether every wrapper `install()` put on nn.Module is still in place."""
    return bool(_WRAPPED) and all(
        cls.__dict__.get(name) is wrapper for (cls, name), wrapper in _WRAPPED.items()
    )


def mutation_stamp() -> tuple[int, int]:
    """A value that changes after any counted module mutation or hook registration."""
    return (_COUNT[0], RemovableHandle.next_id)


def counted_methods() -> dict[tuple[type, str], Callable[..., Any]]:
    """The wrappers in place, by (class, method name); empty before `install()`."""
    return dict(_WRAPPED)
