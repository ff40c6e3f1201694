"""Frames that run eagerly because capture failed: said once, kept healable.

When capture cannot put a frame in a graph and cannot split it, the frame gets an
eager cache entry. That entry is guarded by every guard capture recorded up to the
failure (the inputs' types and sizes, module hooks, global state): what made capture
fail is among them, so when it changes (the hook is removed, an input of another
type comes) the entry fails and the frame is captured again.

Each such frame warns once per (frame, reason), with `warnings.warn_explicit` at
the user's file and line (where capture stopped, else the call of the compiled
callable), as `EagerFallbackWarning`:

    EagerFallbackWarning: ember runs Linear.forward eagerly: a forward pre-hook
    registered with with_kwargs=True (compiling it again when that changes)

Silence them with `warnings.filterwarnings("ignore", category=EagerFallbackWarning)`.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass

from dynamo_capture.errors import Unsupported

__all__ = ["EagerFallback", "EagerFallbackWarning", "forget_warnings", "warn_eager_frame"]

_warned: set[tuple[str, str]] = set()


class EagerFallbackWarning(UserWarning):
    """A compiled frame runs eagerly: capture could not put it in a graph."""


@dataclass(frozen=True, slots=True)
class EagerFallback:
    """A frame run eagerly, why, and where in the user's code (file, line)."""

    frame: str
    reason: str
    filename: str
    line: int

    def __str__(self) -> str:
        return (
            f'{self.frame} runs eagerly: {self.reason} (File "{self.filename}", line {self.line})'
        )


def user_location(error: Unsupported) -> tuple[str, int]:
    """The user's file and line to point at: where capture stopped, else the line that
    called the compiled callable."""
    if error.where:
        location = error.where[-1]
        return location.filename, location.line
    frame = sys._getframe(1)
    while frame is not None and _is_dispatch(frame.f_globals.get("__name__", "")):
        frame = frame.f_back
    if frame is None:
        return "<unknown>", 0
    return frame.f_code.co_filename, frame.f_lineno


def _is_dispatch(module: str) -> bool:
    """Frames of the compiled call's machinery, between the user's call and here."""
    root = module.split(".")[0]
    return root in _DISPATCH_PACKAGES or module in _DISPATCH_MODULES


_DISPATCH_PACKAGES = ("dynamo_capture", "ember")
_DISPATCH_MODULES = ("torch.nn.modules.module",)


def warn_eager_frame(name: str, error: Unsupported) -> EagerFallback:
    """Warn (once per frame and reason) that frame `name` runs eagerly; return the record."""
    filename, line = user_location(error)
    fallback = EagerFallback(name, error.reason, filename, line)
    key = (name, error.reason)
    if key not in _warned:
        _warned.add(key)
        warnings.warn_explicit(
            f"ember runs {name} eagerly: {error.reason} (compiling it again when that changes)",
            EagerFallbackWarning,
            filename,
            line,
        )
    return fallback


def forget_warnings() -> None:
    """Warn again for frames already warned about (after `reset()`)."""
    _warned.clear()
