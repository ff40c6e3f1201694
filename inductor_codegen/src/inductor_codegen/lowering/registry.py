"""The lowering table: ATen OpOverload -> function building loop IR.

A lowering is `fn(ctx, node, *args, **kwargs) -> value`, where `ctx` is the
running `GraphLowering`, `node` the FX node (for `meta["val"]`), and args are
the node's arguments with FX nodes replaced by their lowered values
(`TensorValue`, tuples of them, or Python numbers). Ops missing from the table
run through ATen from the generated wrapper (a counted, logged fallback).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = [
    "LOWERINGS",
    "LoweringTable",
    "is_cpp_table",
    "mark_cpp_table",
    "mark_indirect_load_table",
    "prints_indirect_loads",
    "register_lowering",
]

LoweringTable = dict[torch._ops.OpOverload, Callable]
LOWERINGS: LoweringTable = {}
# The table the C++ generator derives from LOWERINGS (codegen/cpp/convolution.py).
_CPP_TABLE: list[LoweringTable] = []
# Tables of other generators that print indirect loads (the Triton generator's).
_INDIRECT_LOAD_TABLES: list[LoweringTable] = []


def mark_cpp_table(table: LoweringTable) -> LoweringTable:
    """Mark `table` as the C++ generator's own (derived from LOWERINGS): lowerings that
    emit C++-only IR (indirect loads, scatters) run for it as for LOWERINGS."""
    _CPP_TABLE[:] = [table]
    return table


def is_cpp_table(table) -> bool:
    """Whether `table` is LOWERINGS or the C++ generator's table derived from it."""
    return table is LOWERINGS or any(table is t for t in _CPP_TABLE)


def mark_indirect_load_table(table: LoweringTable) -> LoweringTable:
    """Mark `table` (derived from LOWERINGS) as one whose generator prints indirect loads:
    gathers (embedding, index_select, gather) lower to them for it, not to ATen calls."""
    if not any(table is t for t in _INDIRECT_LOAD_TABLES):
        _INDIRECT_LOAD_TABLES.append(table)
    return table


def prints_indirect_loads(table) -> bool:
    """Whether the generator of `table` prints indirect loads (lowering.indirect)."""
    return is_cpp_table(table) or any(table is t for t in _INDIRECT_LOAD_TABLES)


def register_lowering(*ops: torch._ops.OpOverload, table: LoweringTable | None = None):
    """Decorator registering one function as the lowering of each op in `ops`.

    Fails at import on anything that is not an OpOverload or on a duplicate.
    """
    target = LOWERINGS if table is None else table

    def decorate(fn: Callable) -> Callable:
        for op in ops:
            if not isinstance(op, torch._ops.OpOverload):
                raise TypeError(
                    f"register_lowering({op!r}) for {fn.__name__}: expected an OpOverload "
                    "such as torch.ops.aten.add.Tensor, not a packet or a function"
                )
            if op in target:
                raise KeyError(f"{op} already has a lowering ({target[op].__name__})")
            target[op] = fn
        return fn

    return decorate
