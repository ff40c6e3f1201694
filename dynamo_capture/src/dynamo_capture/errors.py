"""Exceptions raised by capture."""

from __future__ import annotations

__all__ = ["CaptureError", "CaptureUnavailableError", "RecompileError", "StanceError"]


class CaptureError(Exception):
    """Base of every error raised by dynamo_capture."""


class CaptureUnavailableError(CaptureError, NotImplementedError):
    """Compiled code was called, but this build of dynamo_capture cannot capture bytecode yet."""


class RecompileError(CaptureError):
    """A recompile was needed under the stance "fail_on_recompile"."""


class StanceError(CaptureError, ValueError):
    """An unknown stance, or a stance option that does not go with it."""
