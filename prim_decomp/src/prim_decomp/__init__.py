"""prim_decomp: the ember_prims operator set and swappable ATen decomposition tables.

    from prim_decomp import core_aten, prims, inductor_default, decompose

    table = inductor_default.without(torch.ops.aten.gelu)   # keep gelu whole
    gm2 = decompose(gm, core_aten | prims)                   # a graph of prims

Stable API: everything in `__all__`.
"""

from prim_decomp import primitives
from prim_decomp.decompose import decompose
from prim_decomp.errors import (
    DecomposeError,
    DuplicateDecompositionError,
    FrozenTableError,
    PrimDecompError,
)
from prim_decomp.mode import DecompositionMode
from prim_decomp.primitives import PRIM_SCHEMAS, is_prim, prim_ops
from prim_decomp.table import Decomposition, DecompositionTable
from prim_decomp.tables import INDUCTOR_KEPT, PRIMS_KEPT, core_aten, inductor_default, prims
from prim_decomp.type_promotion import Promotion, elementwise_dtypes, result_dtype

__version__ = "0.1.0"

__all__ = [
    "DecomposeError",
    "Decomposition",
    "DecompositionMode",
    "DecompositionTable",
    "DuplicateDecompositionError",
    "FrozenTableError",
    "INDUCTOR_KEPT",
    "PRIMS_KEPT",
    "PRIM_SCHEMAS",
    "PrimDecompError",
    "Promotion",
    "core_aten",
    "decompose",
    "elementwise_dtypes",
    "inductor_default",
    "is_prim",
    "prim_ops",
    "prims",
    "primitives",
    "result_dtype",
]
