"""Exception types of aot_autograd: each message says what failed and how to fix it."""

from __future__ import annotations

__all__ = [
    "AotAutogradError",
    "DeviceMismatchError",
    "DoubleBackwardError",
    "EagerCallWarning",
    "IndexValueCheckError",
    "OverlappingWriteError",
    "RestridedLeafError",
    "SymbolicShapeError",
    "UnsupportedMutationError",
    "ValueChangedError",
    "ValueCheckError",
    "ValueValueCheckError",
]


class AotAutogradError(RuntimeError):
    """Base class of every error raised by aot_autograd."""


class DeviceMismatchError(AotAutogradError):
    """An op given tensors on devices its eager kernel refuses (a CUDA input with a CPU
    weight): eager's error, with its message (see device_checks)."""


class UnsupportedMutationError(AotAutogradError):
    """A mutation or aliasing pattern that the functionalization cannot express."""


class OverlappingWriteError(UnsupportedMutationError):
    """An in-place op writing into a tensor whose elements share memory (an expanded
    tensor), which eager's kernel refuses too, with the same message."""


class RestridedLeafError(UnsupportedMutationError):
    """A call passing a leaf tensor requiring grad that the graph restrides in place
    (`w.t_()` under no_grad): the compiled callable runs that call's ops eagerly."""


class EagerCallWarning(UserWarning):
    """A compiled callable ran one call's ops eagerly (the compiled graph cannot give
    eager's result for those arguments); the message says why."""


class DoubleBackwardError(AotAutogradError):
    """Backward through the backward of a compiled function (create_graph=True, then grad)."""


class ValueChangedError(AotAutogradError):
    """A tensor value read into Python while tracing (bool(t), .item()) changed at run time."""


class ValueCheckError(AotAutogradError):
    """A check of values eager makes (`F.one_hot`'s classes in range) failed at run time:
    the error eager raises, with its message (see value_assertions)."""


class IndexValueCheckError(ValueCheckError, IndexError):
    """A failed value check where eager raises an IndexError."""


class ValueValueCheckError(ValueCheckError, ValueError):
    """A failed value check where eager raises a ValueError."""


class SymbolicShapeError(AotAutogradError):
    """A graph with symbolic sizes could not be traced or compiled with its sizes symbolic.

    A caller holding the graph's static example inputs catches it and compiles for
    those sizes instead (capture does this for a backend that raises).
    """
