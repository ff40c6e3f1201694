"""The global-state guard: process-wide settings a traced graph depends on.

Grad mode, inference mode, autocast (per device type, with its dtype),
deterministic algorithms, the default dtype, and torch function handling (whether
DisableTorchFunction(Subclass) is in force, and the types of the torch function modes
on the stack: a mode's override runs in the graph's operations and answers the frame's
questions about the stack). `GlobalStateGuard.current()`
snapshots them; the generated check compares each with one C call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from guards.guard_kinds import Guard, GuardCode
from guards.sources import GlobalStateSource

__all__ = ["AUTOCAST_DEVICE_TYPES", "GlobalStateGuard"]

AUTOCAST_DEVICE_TYPES: tuple[str, ...] = ("cpu", "cuda")


# The C functions behind torch.are_deterministic_algorithms_enabled and
# torch.is_deterministic_algorithms_warn_only_enabled (one Python call fewer each).
_deterministic = getattr(
    torch._C, "_get_deterministic_algorithms", torch.are_deterministic_algorithms_enabled
)
_deterministic_warn_only = getattr(
    torch._C,
    "_get_deterministic_algorithms_warn_only",
    torch.is_deterministic_algorithms_warn_only_enabled,
)


def _autocast_state() -> tuple[tuple[str, torch.dtype], ...]:
    """(device type, dtype) for each device type whose autocast is on; () when none is."""
    if not torch._C._is_any_autocast_enabled():
        return ()
    return tuple(
        (device, torch.get_autocast_dtype(device))
        for device in AUTOCAST_DEVICE_TYPES
        if torch.is_autocast_enabled(device)
    )


def _torch_function_modes() -> tuple[type, ...]:
    """The types of the torch function modes on the stack, innermost last."""
    return tuple(
        type(torch._C._get_function_stack_at(index))
        for index in range(torch._C._len_torch_function_stack())
    )


@dataclass(frozen=True, slots=True)
class GlobalStateGuard(Guard):
    """Grad mode, inference mode, autocast, deterministic algorithms, default dtype and
    torch function handling (its state and the types of the modes on its stack)."""

    source: GlobalStateSource = field(default_factory=GlobalStateSource)
    grad_enabled: bool = True
    inference_mode: bool = False
    autocast: tuple[tuple[str, torch.dtype], ...] = ()
    deterministic: bool = False
    deterministic_warn_only: bool = False
    default_dtype: torch.dtype = torch.float32
    # torch._C._TorchFunctionState as its int (a plain value, kept in warm-start records)
    torch_function_state: int = 0
    torch_function_modes: tuple[type, ...] = ()

    guard_type: ClassVar[str] = "GLOBAL_STATE"
    rank: ClassVar[int] = 30

    @classmethod
    def current(cls) -> GlobalStateGuard:
        """A snapshot of the global state now."""
        return cls(
            GlobalStateSource(),
            torch.is_grad_enabled(),
            torch.is_inference_mode_enabled(),
            _autocast_state(),
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.get_default_dtype(),
            int(torch._C._get_torch_function_state()),
            _torch_function_modes(),
        )

    def sources(self) -> tuple:
        return ()

    def failure(self) -> str | None:
        now = GlobalStateGuard.current()
        for what in (
            "grad_enabled",
            "inference_mode",
            "autocast",
            "deterministic",
            "deterministic_warn_only",
            "default_dtype",
            "torch_function_state",
            "torch_function_modes",
        ):
            want, have = getattr(self, what), getattr(now, what)
            if want != have:
                return f"global state {what.replace('_', ' ')} mismatch: expected {want}, actual {have}"
        return None

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        c = code.const
        checks = [
            f"{c(torch.is_grad_enabled, 'is_grad_enabled')}() is {self.grad_enabled}",
            f"{c(torch.get_default_dtype, 'get_default_dtype')}() is {c(self.default_dtype, 'dtype')}",
            f"{c(torch.is_inference_mode_enabled, 'is_inference_mode')}() is {self.inference_mode}",
            f"{c(_deterministic, 'deterministic')}() is {self.deterministic}",
            f"{c(_deterministic_warn_only, 'warn_only')}() is {self.deterministic_warn_only}",
        ]
        checks.append(
            f"{c(torch._C._get_torch_function_state, 'torch_function_state')}() == "
            f"{c(torch._C._TorchFunctionState(self.torch_function_state), 'tf_state_value')}"
        )
        if not self.torch_function_modes:
            checks.append(f"{c(torch._C._len_torch_function_stack, 'function_modes')}() == 0")
        else:
            checks.append(
                f"{c(_torch_function_modes, 'torch_function_modes')}() == "
                f"{c(self.torch_function_modes, 'modes')}"
            )
        if not self.autocast:
            checks.append(f"{c(torch._C._is_any_autocast_enabled, 'any_autocast')}() is False")
        else:
            checks.append(
                f"{c(_autocast_state, 'autocast_state')}() == {c(self.autocast, 'autocast')}"
            )
        return [(self.rank, " and ".join(checks))]

    @property
    def value(self) -> Any:
        return None

    @property
    def has_value(self) -> bool:
        return False

    def describe(self) -> str:
        return (
            f"{self.guard_type}: grad={self.grad_enabled} inference={self.inference_mode} "
            f"autocast={self.autocast} deterministic={self.deterministic} "
            f"default_dtype={self.default_dtype} "
            f"torch_function={torch._C._TorchFunctionState(self.torch_function_state).name} "
            f"modes={[mode.__qualname__ for mode in self.torch_function_modes]}"
        )
