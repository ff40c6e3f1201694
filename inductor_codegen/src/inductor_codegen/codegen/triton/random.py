"""Random numbers inside Triton kernels: Philox (`tl.rand`) keyed by a per-call seed.

The Triton lowering table is the shared one with `rand`, `bernoulli.p` and
`native_dropout` replaced (and `convolution`, channels-last: see `layouts`;
`mm` and `addmm` on unaligned rows, padded: see `padding`; attention calls
on tensors in their traced strides: see `strides`; shared values that read
many buffers stored once: see `realize`): each draws one seed per call of the graph (an
ATen `randint` in the wrapper, one element) and computes uniform numbers in
the kernel from (seed, flat element index), so dropout fuses with its
neighbours instead of materializing a random tensor. The stream differs from
eager's generator; the distribution is the same.
"""

from __future__ import annotations

import sympy
import torch

from inductor_codegen.codegen.triton.layouts import lower_convolution, lower_convolution_backward
from inductor_codegen.codegen.triton.padding import lower_matmul
from inductor_codegen.codegen.triton.realize import store_shared_reads
from inductor_codegen.codegen.triton.strides import ATTENTION_OPS, lower_attention
from inductor_codegen.indexing import as_index, contiguous_strides, flat_index
from inductor_codegen.ir import (
    Constant,
    ExternBuffer,
    IndexValue,
    Layout,
    Load,
    Op,
    TensorValue,
)
from inductor_codegen.lowering import LOWERINGS
from inductor_codegen.lowering.registry import mark_indirect_load_table

__all__ = ["TRITON_LOWERINGS", "philox_uniform"]

aten = torch.ops.aten
SEED_HIGH = 2**31 - 1


def _size(node) -> tuple:
    return tuple(as_index(s) for s in node.meta["val"].shape)  # symbolic sizes stay symbolic


def philox_uniform(ctx, node) -> TensorValue:
    """Uniform [0, 1) float32 numbers of `node`'s size: tl.rand(seed, flat index)."""
    val = node.meta["val"]
    seed_name = ctx.new_name()
    seed_layout = Layout.contiguous(torch.int64, (sympy.Integer(1),))
    ctx.add_buffer(
        ExternBuffer(
            seed_name,
            aten.randint.low,
            (0, SEED_HIGH, [1]),
            {"dtype": torch.int64, "device": val.device},
            (seed_layout,),
            False,
        )
    )
    seed = Load(seed_name, sympy.Integer(0), torch.int64)
    size = _size(node)
    strides = contiguous_strides(size)

    def load(idx):
        offset = IndexValue(flat_index(idx, strides), torch.int32)
        return Op("philox_rand", (seed, offset), torch.float32)

    return TensorValue(torch.float32, size, load)


def _cast(value: TensorValue, dtype: torch.dtype) -> TensorValue:
    if dtype == value.dtype:
        return value
    return TensorValue(dtype, value.size, lambda idx: Op("to_dtype", (value.loader(idx),), dtype))


def lower_rand(ctx, node, *args, **kwargs):
    if kwargs.get("generator") is not None:
        return ctx.extern(node, node.target, args, kwargs, is_fallback=False)
    return _cast(philox_uniform(ctx, node), node.meta["val"].dtype)


def lower_bernoulli(ctx, node, x, p=0.5, *, generator=None):
    if generator is not None:
        return ctx.extern(node, node.target, (x, p), {"generator": generator}, is_fallback=False)
    uniform = philox_uniform(ctx, node)
    dtype = node.meta["val"].dtype

    def load(idx):
        hit = Op("lt", (uniform.loader(idx), Constant(float(p), torch.float32)), torch.bool)
        return Op("to_dtype", (hit,), dtype)

    return TensorValue(dtype, uniform.size, load)


def lower_native_dropout(ctx, node, x, p, train):
    if not train or p == 0:
        return ctx.extern(node, node.target, (x, p, train), {}, is_fallback=False)
    out_val = node.meta["val"][0]
    uniform = philox_uniform(ctx, _FirstOutput(node, out_val))
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0

    def keep(idx):
        return Op("lt", (uniform.loader(idx), Constant(1.0 - p, torch.float32)), torch.bool)

    def out(idx):
        scaled = Op("mul", (x.loader(idx), Constant(scale, x.dtype)), x.dtype)
        return Op("where", (keep(idx), scaled, Constant(0.0, x.dtype)), x.dtype)

    return (
        TensorValue(x.dtype, uniform.size, out),
        TensorValue(torch.bool, uniform.size, keep),
    )


class _FirstOutput:
    """A node stand-in whose meta['val'] is one output of a tuple-valued node."""

    def __init__(self, node, val):
        self.name = node.name
        self.meta = {"val": val}


TRITON_LOWERINGS = {op: store_shared_reads(fn) for op, fn in LOWERINGS.items()}
TRITON_LOWERINGS[aten.rand.default] = lower_rand
TRITON_LOWERINGS[aten.bernoulli.p] = lower_bernoulli
TRITON_LOWERINGS[aten.native_dropout.default] = lower_native_dropout
TRITON_LOWERINGS[aten.convolution.default] = lower_convolution
TRITON_LOWERINGS[aten.convolution_backward.default] = lower_convolution_backward
TRITON_LOWERINGS[aten.mm.default] = lower_matmul
TRITON_LOWERINGS[aten.addmm.default] = lower_matmul
TRITON_LOWERINGS.update(dict.fromkeys(ATTENTION_OPS, lower_attention))
mark_indirect_load_table(TRITON_LOWERINGS)
