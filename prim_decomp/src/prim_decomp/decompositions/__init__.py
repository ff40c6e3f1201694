"""Decomposition rules, one module per family; importing this registers them all."""

from prim_decomp.decompositions import (  # noqa: F401  (imported to register)
    activations,
    elementwise,
    factories,
    layers,
    linear_algebra,
    losses,
    normalization,
    pooling,
    reductions,
    shapes,
    to_prims_elementwise,
    to_prims_structure,
)
from prim_decomp.decompositions._registry import COMPOSITE, COMPOUND, TO_PRIMS

__all__ = ["COMPOSITE", "COMPOUND", "TO_PRIMS"]
