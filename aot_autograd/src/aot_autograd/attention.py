"""Attention masks laid out so that a fused GPU attention kernel can take them.

`scaled_dot_product_attention` picks its kernel from its arguments' layouts:
the fused CUDA kernels (cuDNN, flash, memory-efficient) need the mask's last
dimension dense. A mask made by broadcasting (transformers builds its
bidirectional and padding masks with `expand`, which gives the key dimension
stride 0) sends the call to the unfused math path: two batched matmuls in
float32 and a softmax over the whole score tensor. Eager code usually skips
such a mask when it sees no padding, which a traced program cannot (it would
read the mask's values), so the compiled program would run the slow path where
eager runs the fused one.

`dense_attention_masks` gives each such mask a `contiguous()` copy before the
call, in the Torch-level graph before tracing, so the kernel choice made while
tracing sees the dense layout. Values are unchanged; the cost is one small
pointwise kernel writing the mask once.
"""

from __future__ import annotations

import torch
from torch import fx

import guards

__all__ = ["dense_attention_masks", "needs_dense_mask"]

_ATTENTION = (
    torch._C._nn.scaled_dot_product_attention,
    torch.nn.functional.scaled_dot_product_attention,
)
_MASK_POSITION = 3


def _mask_of(node: fx.Node) -> tuple[fx.Node | None, str | int | None]:
    if "attn_mask" in node.kwargs:
        mask = node.kwargs["attn_mask"]
        return (mask, "attn_mask") if isinstance(mask, fx.Node) else (None, None)
    if len(node.args) > _MASK_POSITION and isinstance(node.args[_MASK_POSITION], fx.Node):
        return node.args[_MASK_POSITION], _MASK_POSITION
    return None, None


def _needs_dense(mask: fx.Node) -> bool:
    value = mask.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.device.type != "cuda" or value.dim() == 0:
        return False
    last, stride = value.shape[-1], value.stride(-1)
    if not (isinstance(last, int) and isinstance(stride, int)):
        return False  # symbolic: asking would add a guard on the sizes
    return last > 1 and stride != 1


def needs_dense_mask(node: fx.Node) -> bool:
    """Whether `node` is an attention call whose CUDA mask's last dim is not dense."""
    if node.op != "call_function" or node.target not in _ATTENTION:
        return False
    mask, _ = _mask_of(node)
    return mask is not None and _needs_dense(mask)


def dense_attention_masks(gm: fx.GraphModule) -> int:
    """Give CUDA attention masks whose last dim is not dense a contiguous copy; how many."""
    changed = 0
    for node in list(gm.graph.nodes):
        if not needs_dense_mask(node):
            continue
        mask, slot = _mask_of(node)
        with gm.graph.inserting_before(node):
            dense = gm.graph.call_method("contiguous", (mask,))
        value = mask.meta["val"]
        if isinstance(value, guards.FakeTensor):
            dense.meta["val"] = guards.FakeTensor(
                value.fake_mode, value.meta.contiguous(), value.device
            )
        if isinstance(slot, str):
            node.kwargs = {**node.kwargs, slot: dense}
        else:
            node.args = (*node.args[:slot], dense, *node.args[slot + 1 :])
        changed += 1
    if changed:
        gm.recompile()
    return changed
