"""The three rule sets every decomposition module registers into.

    COMPOSITE  ops outside the core ATen set -> core ATen ops
    COMPOUND   core ATen ops with an inner structure (softmax, layer_norm, ...)
               -> simpler core ATen ops (pointwise, reductions, views)
    TO_PRIMS   simple core ATen ops -> ember_prims

The named tables of `prim_decomp.tables` are built from these.
"""

from __future__ import annotations

from prim_decomp.table import DecompositionTable

__all__ = ["COMPOSITE", "COMPOUND", "TO_PRIMS"]

COMPOSITE = DecompositionTable(name="composite")
COMPOUND = DecompositionTable(name="compound")
TO_PRIMS = DecompositionTable(name="to_prims")
