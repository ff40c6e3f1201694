"""The exceptions of the guards package.

Every error raised on purpose by this package derives from `GuardsError`, so a
caller (capture, for instance) can catch the whole family at once and turn the
ones it understands into graph breaks.
"""

from __future__ import annotations

__all__ = [
    "DataDependentError",
    "FakeTensorError",
    "GuardsError",
    "SourceError",
    "UnsupportedOpError",
]


class GuardsError(Exception):
    """Base class of every error this package raises on purpose."""


class FakeTensorError(GuardsError, RuntimeError):
    """A fake tensor was used in a way fake tensors cannot support.

    Examples: a real tensor mixed with fakes while the mode does not allow it,
    fakes of two different modes in one call, tensors on incompatible devices.
    """


class UnsupportedOpError(FakeTensorError, NotImplementedError):
    """An operator has no meta kernel, so its output shape cannot be computed.

    `op` holds the operator's name (e.g. "aten.foo.default").
    """

    def __init__(self, message: str, op: str = "") -> None:
        super().__init__(message)
        self.op = op


class DataDependentError(FakeTensorError):
    """The result depends on tensor values, which fake tensors do not have.

    Raised by `.item()`, `.tolist()`, `bool(t)`, `nonzero`, `masked_select`,
    `unique` and similar. Capture turns it into a graph break. `op` names the
    operator (or Python method) that needed the data.
    """

    def __init__(self, message: str, op: str = "") -> None:
        super().__init__(message)
        self.op = op


class SourceError(GuardsError, ValueError):
    """A `Source` was built with arguments it cannot render as a Python expression."""
