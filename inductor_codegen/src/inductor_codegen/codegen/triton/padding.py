"""Matmuls on rows that are not 16 bytes long, padded (a vocabulary of 50257 columns).

cuBLAS runs 16-bit products whose leading dimensions are not multiples of
8 elements on slow kernels (align-1 loads; 3.4 ms instead of 0.45 ms for
GPT2's 4096 x 768 x 50257 head on an H200). `lower_matmul` pads N and K up
to multiples of 8 with zeros: the operands are copied into padded buffers
(one pass over each), the product goes to a padded buffer, and the result
is the (M, N) window of it, rows `Npad` apart. Zeros in K add nothing; the
padded columns are never read. Small products stay as they are: there the
copies would cost more than they save.

A graph output the user sees as it is (the output node's
`user_visible_output_idxs`) is returned as that window, as torch.compile does,
instead of copied to dense rows (a 0.28 ms copy for GPT2's logits, half the
product's time); other outputs get the traced strides.
"""

from __future__ import annotations

import sympy
import torch

from inductor_codegen.ir import (
    Constant,
    ExternBuffer,
    IndexValue,
    Layout,
    Load,
    Op,
    StridedView,
    TensorValue,
)
from inductor_codegen.lowering import BufferRef
from inductor_codegen.lowering.graph import load_order

__all__ = ["lower_matmul"]

aten = torch.ops.aten
PAD_TO = 8  # elements of a 16-bit dtype in 16 bytes
# Products of fewer multiply-adds than this are left alone.
MIN_PADDED_WORK = 1 << 30
PADDED_DTYPES = (torch.bfloat16, torch.float16)


def _up(n: int) -> int:
    return -(-n // PAD_TO) * PAD_TO


def _padded(ctx, value: TensorValue, size: tuple[int, ...]) -> TensorValue:
    """`value` zero-padded at the end of each dimension to `size`, stored in the order
    its loads read (a transposed weight stays column-major: its copy reads and writes
    rows)."""
    original = [int(s) for s in value.size]
    loader, dtype = value.loader, value.dtype

    def load(idx):
        conds = [
            Op("lt", (IndexValue(i, torch.int64), Constant(n, torch.int64)), torch.bool)
            for i, n, m in zip(idx, original, size)
            if n != m
        ]
        cond = conds[0]
        for c in conds[1:]:
            cond = Op("logical_and", (cond, c), torch.bool)
        return Op("masked", (cond, loader(idx), Constant(0, dtype)), dtype)

    sizes = tuple(sympy.Integer(s) for s in size)
    return ctx.realize(TensorValue(dtype, sizes, load), order=load_order(value))


def _wanted(node, a, b, bias) -> bool:
    val = node.meta.get("val")
    if not (isinstance(val, torch.Tensor) and val.dim() == 2 and val.dtype in PADDED_DTYPES):
        return False
    if not all(isinstance(s, int) for s in val.shape) or not isinstance(a, TensorValue):
        return False
    if not isinstance(b, TensorValue) or a.ndim != 2 or b.ndim != 2:
        return False
    if bias is not None and not (isinstance(bias, TensorValue) and bias.ndim == 1):
        return False
    m, n = val.shape
    k = int(a.size[1])
    return (n % PAD_TO or k % PAD_TO) and m * n * k >= MIN_PADDED_WORK


def lower_matmul(ctx, node, *args, **kwargs):
    """aten.mm / aten.addmm with N and K padded to multiples of 8 (see the module notes)."""
    addmm = node.target == aten.addmm.default
    bias, a, b = args[:3] if addmm else (None, *args[:2])
    if not _wanted(node, a, b, bias):
        return ctx.extern(node, node.target, args, kwargs, is_fallback=False)
    val = node.meta["val"]
    m, n = val.shape
    k = int(a.size[1])
    n_pad, k_pad = _up(n), _up(k)
    a = _padded(ctx, a, (m, k_pad)) if k_pad != k else a
    b = _padded(ctx, b, (k_pad, n_pad)) if (k_pad, n_pad) != (k, n) else b
    operands = (a, b)
    if addmm:
        operands = (_padded(ctx, bias, (n_pad,)) if n_pad != n else bias, a, b)
    ext_args = ctx.extern_arg((*operands, *args[len(operands) :]))
    ext_kwargs = {key: ctx.extern_arg(v) for key, v in kwargs.items()}
    reads = tuple(ref.name for ref in ext_args if isinstance(ref, BufferRef))
    storage = Layout.contiguous(val.dtype, (sympy.Integer(m), sympy.Integer(n_pad)))
    name = ctx.new_name()
    ctx.add_buffer(ExternBuffer(name, node.target, ext_args, ext_kwargs, (storage,), False, reads))
    ctx.padded_products.add(name)
    window = Layout(
        val.dtype, (sympy.Integer(m), sympy.Integer(n)), (sympy.Integer(n_pad), sympy.Integer(1))
    )

    def load(idx, _name=name, _layout=window):
        return Load(_name, _layout.index(idx), _layout.dtype)

    return TensorValue(val.dtype, window.size, load, StridedView(name, window))
