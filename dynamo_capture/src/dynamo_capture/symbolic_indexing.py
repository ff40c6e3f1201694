"""Basic indexing of a tensor at a symbolic int, kept symbolic.

`Tensor.__getitem__` and `Tensor.__setitem__` read an int inside an index tuple with
`__index__`: given a SymInt (`cache[layer, 0, :, position] = k` with `position` an int
input made dynamic), tracing would fix it to its example value, and every new value
would compile again. A basic index (ints, SymInts, slices, None) is the same as a
chain of `select`, slicing and `unsqueeze`, which take SymInts as they are:

    x[(i, 0, slice(None), p)]       -> indexed_view(x, (i, 0, slice(None), p))
    x[(i, 0, slice(None), p)] = v   -> assign_indexed_(x, (i, 0, slice(None), p), v)

Capture records such a read or write with these functions as the node's target where
the index holds a SymInt (`symbolic_indexing_target`); ember's regions do the same for
the ints they lift into inputs of a region. They run as eager indexing does on any
value (a negative index counts from the end; one out of range raises). The write's
name ends in `_`, as torch's in-place ops do, so every check for in-place writes by
name (side effects, regions, replays of repeated blocks) sees it.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

__all__ = ["assign_indexed_", "basic_index", "indexed_view", "symbolic_indexing_target"]

_SYMBOLIC = (torch.SymInt,)


def _int_like(value: Any) -> bool:
    return type(value) is int or isinstance(value, _SYMBOLIC)


def basic_index(index: Any, entry_ok: Any = _int_like) -> bool:
    """`index` is a basic index `indexed_view` takes: entries that are ints (`entry_ok`),
    None, or slices of them (no tensor, list, bool or Ellipsis)."""
    for entry in index if isinstance(index, tuple) else (index,):
        if entry is None or entry_ok(entry):
            continue
        if isinstance(entry, slice):
            parts = (entry.start, entry.stop, entry.step)
            if all(part is None or entry_ok(part) for part in parts):
                continue
        return False
    return True


def indexed_view(tensor: torch.Tensor, index: Any) -> torch.Tensor:
    """`tensor[index]` for a basic index, its ints taken with `select` (which keeps a
    SymInt symbolic)."""
    view, dim = tensor, 0
    for entry in index if isinstance(index, tuple) else (index,):
        if entry is None:
            view, dim = view.unsqueeze(dim), dim + 1
        elif isinstance(entry, slice):
            view, dim = view[(slice(None),) * dim + (entry,)], dim + 1
        else:
            view = view.select(dim, entry)
    return view


def assign_indexed_(tensor: torch.Tensor, index: Any, value: Any) -> None:
    """`tensor[index] = value` for a basic index, as Tensor.__setitem__ does it: the value's
    leading dims of size 1 dropped, the rest broadcast to the view."""
    view = indexed_view(tensor, index)
    if not isinstance(value, torch.Tensor):
        view.fill_(value)
        return
    while value.dim() > view.dim() and value.shape[0] == 1:
        value = value.squeeze(0)
    view.copy_(value)


def _has_symbolic_int(index: Any) -> bool:
    """An entry of `index` is a SymInt (a SymInt bound of a slice stays symbolic in
    Tensor.__getitem__ and __setitem__: such indexing is left as it is)."""
    entries = index if isinstance(index, tuple) else (index,)
    return any(isinstance(entry, _SYMBOLIC) for entry in entries)


def symbolic_indexing_target(target: Any, example_args: tuple) -> Any:
    """`indexed_view` / `assign_indexed_` in place of `operator.getitem` / `setitem` on a
    tensor whose basic index has a SymInt entry (given the call's example values); else
    `target` itself."""
    if target is not operator.getitem and target is not operator.setitem:
        return target
    if len(example_args) < 2 or not isinstance(example_args[0], torch.Tensor):
        return target
    index = example_args[1]
    if not (_has_symbolic_int(index) and basic_index(index)):
        return target
    return indexed_view if target is operator.getitem else assign_indexed_
