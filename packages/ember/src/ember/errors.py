"""Exceptions raised by the umbrella package.

Every message says what was wrong, what is accepted, and how to fix it.
"""

from __future__ import annotations

from dynamo_capture import CaptureError, CaptureUnavailableError, RecompileError, StanceError

__all__ = [
    "BackendNotFoundError",
    "CaptureError",
    "CaptureUnavailableError",
    "EmberError",
    "InvalidArgumentError",
    "RecompileError",
    "StanceError",
]


class EmberError(Exception):
    """Base of the umbrella's own errors."""


class InvalidArgumentError(EmberError, ValueError):
    """An argument of a public function has a value that is not accepted."""


class BackendNotFoundError(InvalidArgumentError):
    """A backend name that is neither built in, registered, nor an installed entry point."""
