"""The exceptions of prim_decomp: each message says what failed and how to fix it."""

from __future__ import annotations

__all__ = [
    "PrimDecompError",
    "DuplicateDecompositionError",
    "FrozenTableError",
    "DecomposeError",
]


class PrimDecompError(Exception):
    """Base class of every error prim_decomp raises."""


class DuplicateDecompositionError(PrimDecompError):
    """A table already holds a decomposition for the op being registered."""


class FrozenTableError(PrimDecompError):
    """A named (frozen) table was asked to grow in place."""


class DecomposeError(PrimDecompError):
    """`decompose` could not retrace a graph."""
