"""The named decomposition tables.

    core_aten         ops outside the core ATen set -> core ATen ops
    prims             core ATen ops -> ember_prims (with the compound core ops
                      such as _softmax and native_layer_norm first broken up);
                      `core_aten | prims` takes any ATen graph to prims
    inductor_default  what inductor_codegen lowers: every rule of core_aten plus
                      the compound core ops broken up, except the ops in
                      `INDUCTOR_KEPT` (matmuls, convolution, attention kernels,
                      pooling), which stay whole for library kernels

All three are frozen; grow a copy (`inductor_default.copy()`) or compose
(`inductor_default | mine`).
"""

from __future__ import annotations

import torch

from prim_decomp.decompositions import COMPOSITE, COMPOUND, TO_PRIMS
from prim_decomp.table import DecompositionTable

__all__ = ["core_aten", "prims", "inductor_default", "INDUCTOR_KEPT", "PRIMS_KEPT"]

aten = torch.ops.aten

INDUCTOR_KEPT: frozenset[torch._ops.OpOverload] = frozenset(
    {
        aten.mm.default,
        aten.bmm.default,
        aten.addmm.default,
        aten.baddbmm.default,
        aten.convolution.default,
        aten.convolution_backward.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention.default,
        aten.avg_pool2d.default,
        aten.avg_pool2d_backward.default,
        aten.max_pool2d_with_indices.default,
        aten.max_pool2d_with_indices_backward.default,
        aten._adaptive_avg_pool2d.default,
    }
)

# ATen ops that `core_aten | prims` leaves whole: library kernels (matmul,
# convolution, pooling), data-dependent shapes (boolean-mask indexing, nonzero),
# sorting, and the few core ops without a prim rule yet.
PRIMS_KEPT: frozenset[torch._ops.OpOverload] = frozenset(
    {
        aten.mm.default,
        aten.bmm.default,
        aten.convolution.default,
        aten.convolution_backward.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention.default,
        aten.avg_pool2d_backward.default,
        aten._adaptive_avg_pool2d.default,  # output sizes that do not divide the input
        aten.index.Tensor,  # boolean masks
        aten.index_put.default,  # boolean masks or non-leading indices
        aten.nonzero.default,
        aten.sort.default,
        aten.topk.default,
        aten._local_scalar_dense.default,
        aten.arange.start_step,  # floating-point steps
        aten.bernoulli.p,
        aten.scatter.reduce,  # reduce="multiply"
        aten.scatter.value_reduce,  # reduce="multiply"
    }
)

core_aten: DecompositionTable = COMPOSITE.copy(name="core_aten").freeze()
prims: DecompositionTable = (COMPOUND | TO_PRIMS).copy(name="prims").freeze()
inductor_default: DecompositionTable = (
    (COMPOSITE | COMPOUND).without(INDUCTOR_KEPT).copy(name="inductor_default").freeze()
)
