"""The cyclic garbage collector while a frame compiles: objects older than the compile unscanned.

A compile allocates many container objects (FX nodes, fakes, sympy expressions,
loop IR), so the collector runs hundreds of times during it, and each full
collection walks every tracked object of the process: the model, torch's and
the user's modules, none of which the compile made or frees. `old_objects_frozen`
moves the objects that exist when the compile starts to the permanent generation
(`gc.freeze`) and back when it ends (`gc.unfreeze`): collections during the compile
scan only what it allocated. Nothing is lost: a cycle among the older objects that
became garbage meanwhile is collected by the first full collection after.

    >>> with old_objects_frozen():
    ...     entry = compile_frame(...)

Nested compiles (a resume function compiled inside a frame's compile) leave the
outer one's freeze as it is, and a process that froze its heap itself (a server
before it forks workers) keeps it: then nothing is done.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["old_objects_frozen"]


_frozen_here = [0]  # old_objects_frozen blocks open (of every thread): the outermost froze


@contextlib.contextmanager
def old_objects_frozen() -> Iterator[None]:
    """Run the block with the objects that exist now frozen (see the module docstring)."""
    # NOTE: gc.get_freeze_count() walks the frozen objects: asked only outside any block.
    if _frozen_here[0] or not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    _frozen_here[0] += 1
    try:
        yield
    finally:
        _frozen_here[0] -= 1
        gc.unfreeze()
