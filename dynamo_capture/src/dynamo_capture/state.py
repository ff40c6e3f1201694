"""Whether capture is running: `is_compiling()` is True while a frame is traced.

Traced code sees True (capture folds the call to a constant), eager code False.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["capturing", "is_compiling", "is_exporting"]


class _State(threading.local):
    depth = 0


_state = _State()


def is_compiling() -> bool:
    """True while ember is capturing a frame (and inside traced code), else False."""
    return _state.depth > 0


def is_exporting() -> bool:
    """True while an export traces; ember has no export, so always False."""
    return False


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    """Mark the current thread as capturing for the duration of the block."""
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
