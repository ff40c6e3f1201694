"""Exception types of inductor_codegen; each message says what failed and how to fix it."""

from __future__ import annotations

__all__ = [
    "CppCompileError",
    "DynamicShapeError",
    "InductorError",
    "LoweringError",
    "MixedDeviceGraphError",
    "UnsupportedGraphError",
]


class InductorError(RuntimeError):
    """Base class of every error raised by inductor_codegen."""


class LoweringError(InductorError):
    """A node of the FX graph could not be lowered to the loop IR."""


class UnsupportedGraphError(InductorError):
    """The graph uses something the code generator does not handle (it is run by ATen instead)."""


class MixedDeviceGraphError(UnsupportedGraphError):
    """The graph holds a tensor on another device than its kernels run on (a CPU tensor
    made beside CUDA inputs): it is run by ATen, each op on its tensors' device, and
    never recorded into a CUDA graph (whose replays would skip the CPU work)."""


class CppCompileError(InductorError):
    """The host C++ compiler rejected generated code."""


class DynamicShapeError(UnsupportedGraphError):
    """A graph with symbolic sizes needs something only static sizes allow.

    Raised at compile time (never a wrong result); the caller compiles the graph
    again with static sizes.
    """
