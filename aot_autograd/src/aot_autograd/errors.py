"""Exception types of aot_autograd: each message says what failed and how to fix it."""

from __future__ import annotations

__all__ = [
    "AotAutogradError",
    "DoubleBackwardError",
    "UnsupportedMutationError",
    "ValueChangedError",
]


class AotAutogradError(RuntimeError):
    """Base class of every error raised by aot_autograd."""


class UnsupportedMutationError(AotAutogradError):
    """A mutation or aliasing pattern that the functionalization cannot express."""


class DoubleBackwardError(AotAutogradError):
    """Backward through the backward of a compiled function (create_graph=True, then grad)."""


class ValueChangedError(AotAutogradError):
    """A tensor value read into Python while tracing (bool(t), .item()) changed at run time."""
