"""Walking the arguments and results of ATen ops: tensors inside tuples and lists.

ATen op arguments nest at most a list or tuple deep (`Tensor[]`, `int[]`), so a
small recursive map is enough, and much cheaper than a general pytree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["leaves", "map_structure"]


def map_structure(fn: Callable[[Any], Any], value: Any) -> Any:
    """`value` with `fn` applied to every leaf (lists and tuples are rebuilt)."""
    cls = type(value)
    if cls is tuple or cls is list:
        return cls([map_structure(fn, item) for item in value])
    return fn(value)


def leaves(value: Any) -> Iterator[Any]:
    """Every leaf of `value`, depth first; lists and tuples show as ("[", length) markers."""
    cls = type(value)
    if cls is tuple or cls is list:
        yield ("[", len(value))
        for item in value:
            yield from leaves(item)
    else:
        yield value
