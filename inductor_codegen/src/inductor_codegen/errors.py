"""Exception types of inductor_codegen; each message says what failed and how to fix it."""

from __future__ import annotations

__all__ = ["CppCompileError", "InductorError", "LoweringError", "UnsupportedGraphError"]


class InductorError(RuntimeError):
    """Base class of every error raised by inductor_codegen."""


class LoweringError(InductorError):
    """A node of the FX graph could not be lowered to the loop IR."""


class UnsupportedGraphError(InductorError):
    """The graph uses something the code generator does not handle (it is run by ATen instead)."""


class CppCompileError(InductorError):
    """The host C++ compiler rejected generated code."""
