"""Dropout, embedding, attention and upsampling."""

from __future__ import annotations

import math

import torch

from prim_decomp.decompositions._opmath import aten, cast
from prim_decomp.decompositions._registry import COMPOSITE, COMPOUND
from prim_decomp.type_promotion import compute_dtype

__all__: list[str] = []


# --- dropout -------------------------------------------------------------------
@COMPOUND.register(aten.native_dropout.default)
def native_dropout(x: torch.Tensor, p: float, train: bool | None):
    if not train or p == 0:
        return aten.clone.default(x), aten.full_like.default(x, 1, dtype=torch.bool)
    if p == 1:
        return aten.zeros_like.default(x), aten.zeros_like.default(x, dtype=torch.bool)
    # NOTE: eager's CPU kernel draws its mask as `empty_like(x).bernoulli_(1 - p)` in the
    # input's dtype: drawn alike, the mask is the one eager draws from the same state
    keep = aten.bernoulli.p(aten.empty_like.default(x), 1.0 - p)
    scale = 1.0 / (1.0 - p)
    return x * keep * scale, aten.ne.Scalar(keep, 0)


@COMPOSITE.register(aten.native_dropout_backward.default)
def native_dropout_backward(grad: torch.Tensor, mask: torch.Tensor, scale: float):
    return cast(grad * (mask * scale), grad.dtype)


@COMPOSITE.register(aten.dropout.default)
def dropout(x: torch.Tensor, p: float, train: bool) -> torch.Tensor:
    # NOTE: eager returns its input itself when nothing is dropped (eval, or p == 0): a
    # write through the result writes the input, so the result is a view, not a copy.
    if not train or p == 0:
        return aten.alias.default(x)
    return aten.native_dropout.default(x, p, train)[0]


# --- embedding ------------------------------------------------------------------
@COMPOUND.register(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if indices.dim() == 1:
        return aten.index_select.default(weight, 0, indices)
    # reshape: indices may be an expanded buffer (BERT's token_type_ids) that view rejects.
    flat = aten.reshape.default(indices, [-1])
    rows = aten.index_select.default(weight, 0, flat)
    return aten.view.default(rows, list(indices.shape) + [weight.shape[1]])


@COMPOUND.register(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    flat = aten.reshape.default(indices, [-1])
    grad_rows = aten.reshape.default(grad, [flat.shape[0], grad.shape[-1]])
    grad_rows = cast(grad_rows, compute_dtype(grad.dtype))
    if scale_grad_by_freq:
        ones = aten.full_like.default(flat, 1)
        counts = aten.index_put.default(
            aten.zeros.default([num_weights], dtype=flat.dtype, device=flat.device),
            [flat],
            ones,
            True,
        )
        per_row = aten.index.Tensor(counts, [flat])
        grad_rows = grad_rows / aten.unsqueeze.default(per_row, 1)
    keep = aten.unsqueeze.default(flat != padding_idx, 1)
    grad_rows = aten.where.self(keep, grad_rows, aten.zeros_like.default(grad_rows))
    table = aten.zeros.default(
        [num_weights, grad.shape[-1]], dtype=grad_rows.dtype, device=grad.device
    )
    return cast(aten.index_put.default(table, [flat], grad_rows, True), grad.dtype)


# --- attention -----------------------------------------------------------------
@COMPOSITE.register(aten.scaled_dot_product_attention.default)
def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    """The math path: softmax(q @ k^T * scale + mask) @ v."""
    head_dim = query.shape[-1]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        repeats = query.shape[-3] // key.shape[-3]
        key = aten.repeat_interleave.self_int(key, repeats, -3)
        value = aten.repeat_interleave.self_int(value, repeats, -3)
    key_t = aten.transpose.int(key, -2, -1)
    scores = aten.matmul.default(query, key_t) * scale
    length_q, length_k = query.shape[-2], key.shape[-2]
    if is_causal:
        ones = aten.ones.default([length_q, length_k], dtype=torch.bool, device=query.device)
        allowed = aten.tril.default(ones)
        attn_mask = allowed
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            minus_inf = aten.full_like.default(scores, -math.inf)
            scores = aten.where.self(attn_mask, scores, minus_inf)
        else:
            scores = scores + attn_mask
    weights = aten._softmax.default(scores, -1, False)
    if dropout_p > 0:
        weights = aten.native_dropout.default(weights, dropout_p, True)[0]
    return aten.matmul.default(weights, value)


@COMPOSITE.register(aten.tril.default)
def tril(x: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    rows = aten.arange.default(x.shape[-2], dtype=torch.int64, device=x.device)
    cols = aten.arange.default(x.shape[-1], dtype=torch.int64, device=x.device)
    keep = (aten.unsqueeze.default(cols, 0) - aten.unsqueeze.default(rows, 1)) <= diagonal
    return aten.where.self(keep, x, aten.zeros_like.default(x))


@COMPOSITE.register(aten.triu.default)
def triu(x: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    rows = aten.arange.default(x.shape[-2], dtype=torch.int64, device=x.device)
    cols = aten.arange.default(x.shape[-1], dtype=torch.int64, device=x.device)
    keep = (aten.unsqueeze.default(cols, 0) - aten.unsqueeze.default(rows, 1)) >= diagonal
    return aten.where.self(keep, x, aten.zeros_like.default(x))


# --- upsampling ----------------------------------------------------------------
def _source_index(out_size, in_size, scale, align_corners: bool, nearest: bool, like):
    """Float source coordinate of each output position along one axis."""
    dtype = compute_dtype(like.dtype) if like.dtype.is_floating_point else torch.float32
    dtype = torch.float32 if nearest else dtype
    positions = aten.arange.default(out_size, dtype=dtype, device=like.device)
    if nearest:
        ratio = (1.0 / scale) if scale else in_size / out_size
        return positions * ratio
    if align_corners:
        ratio = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
        return positions * ratio
    ratio = (1.0 / scale) if scale else in_size / out_size
    return aten.clamp.default((positions + 0.5) * ratio - 0.5, 0.0, None)


@COMPOSITE.register(aten.upsample_nearest2d.default)
def upsample_nearest2d(x, output_size, scales_h=None, scales_w=None):
    out_h, out_w = output_size
    in_h, in_w = x.shape[-2], x.shape[-1]
    src_h = _source_index(out_h, in_h, scales_h, False, True, x)
    src_w = _source_index(out_w, in_w, scales_w, False, True, x)
    rows = aten.clamp.default(cast(aten.floor.default(src_h), torch.int64), None, in_h - 1)
    cols = aten.clamp.default(cast(aten.floor.default(src_w), torch.int64), None, in_w - 1)
    return aten._unsafe_index.Tensor(x, [None, None, aten.unsqueeze.default(rows, 1), cols])


@COMPOSITE.register(aten.upsample_nearest2d.vec)
def upsample_nearest2d_vec(x, output_size, scale_factors):
    out_size, scales = _vec_sizes(x, output_size, scale_factors)
    return upsample_nearest2d(x, out_size, *scales)


def _vec_sizes(x, output_size, scale_factors):
    if output_size is not None:
        return list(output_size), [None, None]
    sizes = [int(x.shape[-2 + i] * scale_factors[i]) for i in range(2)]
    return sizes, list(scale_factors)


def _bilinear_corners(like, output_size, in_h, in_w, align_corners, scales_h, scales_w):
    """Rows h0/h1, columns w0/w1 and the weights toward h1 (per row) and w1 (per column)."""
    out_h, out_w = output_size
    src_h = _source_index(out_h, in_h, scales_h, align_corners, False, like)
    src_w = _source_index(out_w, in_w, scales_w, align_corners, False, like)
    h0 = aten.clamp.default(cast(aten.floor.default(src_h), torch.int64), None, in_h - 1)
    w0 = aten.clamp.default(cast(aten.floor.default(src_w), torch.int64), None, in_w - 1)
    h1 = aten.clamp.default(h0 + 1, None, in_h - 1)
    w1 = aten.clamp.default(w0 + 1, None, in_w - 1)
    dtype = compute_dtype(like.dtype)
    lambda_h = cast(aten.clamp.default(src_h - h0, 0.0, 1.0), dtype)
    lambda_w = cast(aten.clamp.default(src_w - w0, 0.0, 1.0), dtype)
    # NOTE: along an axis whose size does not change, eager's kernel reads each source
    # pixel twice, with weights 1 and 0 (whatever the scale), not its neighbour: an
    # infinite neighbour would make 0 * inf = NaN.
    if out_h == in_h:
        h0 = h1 = aten.arange.default(out_h, device=like.device)
        lambda_h = aten.zeros.default([out_h], dtype=dtype, device=like.device)
    if out_w == in_w:
        w0 = w1 = aten.arange.default(out_w, device=like.device)
        lambda_w = aten.zeros.default([out_w], dtype=dtype, device=like.device)
    return h0, h1, w0, w1, aten.unsqueeze.default(lambda_h, 1), lambda_w


@COMPOSITE.register(aten.upsample_bilinear2d.default)
def upsample_bilinear2d(x, output_size, align_corners, scales_h=None, scales_w=None):
    in_h, in_w = x.shape[-2], x.shape[-1]
    h0, h1, w0, w1, lambda_h, lambda_w = _bilinear_corners(
        x, output_size, in_h, in_w, align_corners, scales_h, scales_w
    )
    xc = cast(x, compute_dtype(x.dtype))
    rows0, rows1 = aten.unsqueeze.default(h0, 1), aten.unsqueeze.default(h1, 1)
    top_left = aten._unsafe_index.Tensor(xc, [None, None, rows0, w0])
    top_right = aten._unsafe_index.Tensor(xc, [None, None, rows0, w1])
    bottom_left = aten._unsafe_index.Tensor(xc, [None, None, rows1, w0])
    bottom_right = aten._unsafe_index.Tensor(xc, [None, None, rows1, w1])
    # NOTE: the sum of the corners times their weights' products, in eager's CPU kernel's
    # order (the same rounding: a value zero up to rounding keeps eager's sign): the lerp
    # form `a + (b - a) * w` gives NaN beside an infinite pixel (inf - inf) where eager
    # gives inf, and inf where eager's zero weight gives NaN.
    weight_w0, weight_h0 = 1 - lambda_w, 1 - lambda_h
    out = top_left * (weight_h0 * weight_w0) + top_right * (weight_h0 * lambda_w)
    out = out + bottom_left * (lambda_h * weight_w0)
    out = out + bottom_right * (lambda_h * lambda_w)
    return cast(out, x.dtype)


@COMPOSITE.register(aten.upsample_bilinear2d_backward.default)
def upsample_bilinear2d_backward(
    grad, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    """Each output gradient spread over its four source pixels with the forward's weights."""
    in_h, in_w = input_size[-2], input_size[-1]
    h0, h1, w0, w1, lambda_h, lambda_w = _bilinear_corners(
        grad, output_size, in_h, in_w, align_corners, scales_h, scales_w
    )
    dtype = compute_dtype(grad.dtype)
    g = cast(grad, dtype)
    lead = list(grad.shape[:-2])
    total = aten.zeros.default(lead + [in_h * in_w], dtype=dtype, device=grad.device)
    corners = [
        (h0, w0, (1 - lambda_h) * (1 - lambda_w)),
        (h0, w1, (1 - lambda_h) * lambda_w),
        (h1, w0, lambda_h * (1 - lambda_w)),
        (h1, w1, lambda_h * lambda_w),
    ]
    for rows, cols, weight in corners:
        flat_index = aten.expand.default(
            aten.unsqueeze.default(rows, 1) * in_w + cols, list(grad.shape)
        )
        total = aten.scatter_add.default(
            total,
            -1,
            aten.reshape.default(flat_index, lead + [-1]),
            aten.reshape.default(g * weight, lead + [-1]),
        )
    return cast(aten.view.default(total, list(input_size)), grad.dtype)


@COMPOSITE.register(aten.upsample_bilinear2d.vec)
def upsample_bilinear2d_vec(x, output_size, align_corners, scale_factors):
    out_size, scales = _vec_sizes(x, output_size, scale_factors)
    return upsample_bilinear2d(x, out_size, align_corners, *scales)


@COMPOSITE.register(aten._unsafe_index.Tensor)
def unsafe_index(x, indices):
    return aten.index.Tensor(x, indices)


@COMPOSITE.register(aten.upsample_nearest2d_backward.default)
def upsample_nearest2d_backward(grad, output_size, input_size, scales_h=None, scales_w=None):
    """Each output gradient added to the input pixel it was read from."""
    in_h, in_w = input_size[-2], input_size[-1]
    out_h, out_w = output_size
    like = aten.new_empty.default(grad, [0])
    src_h = _source_index(out_h, in_h, scales_h, False, True, like)
    src_w = _source_index(out_w, in_w, scales_w, False, True, like)
    rows = aten.clamp.default(cast(aten.floor.default(src_h), torch.int64), None, in_h - 1)
    cols = aten.clamp.default(cast(aten.floor.default(src_w), torch.int64), None, in_w - 1)
    flat_index = aten.unsqueeze.default(rows, 1) * in_w + cols
    flat_index = aten.expand.default(flat_index, list(grad.shape))
    lead = list(grad.shape[:-2])
    dtype = compute_dtype(grad.dtype)
    zeros = aten.zeros.default(lead + [in_h * in_w], dtype=dtype, device=grad.device)
    summed = aten.scatter_add.default(
        zeros,
        -1,
        aten.reshape.default(flat_index, lead + [-1]),
        aten.reshape.default(cast(grad, dtype), lead + [-1]),
    )
    return cast(aten.view.default(summed, list(input_size)), grad.dtype)


@COMPOSITE.register(aten._safe_softmax.default)
def safe_softmax(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Softmax whose rows of only -inf give zeros instead of NaN (attention masks)."""
    out = aten._softmax.default(cast(x, dtype) if dtype is not None else x, dim, False)
    masked = aten.eq.Scalar(x, -math.inf)
    all_masked = aten.amin.default(cast(masked, torch.int32), [dim], True)
    zeros = aten.zeros_like.default(out)
    return aten.where.self(aten.ne.Scalar(all_masked, 0), zeros, out)


@COMPOSITE.register(aten.upsample_nearest1d.default)
def upsample_nearest1d(x, output_size, scales=None):
    (out_w,) = output_size
    in_w = x.shape[-1]
    src_w = _source_index(out_w, in_w, scales, False, True, x)
    cols = aten.clamp.default(cast(aten.floor.default(src_w), torch.int64), None, in_w - 1)
    return aten._unsafe_index.Tensor(x, [None, None, cols])


@COMPOSITE.register(aten.upsample_nearest1d.vec)
def upsample_nearest1d_vec(x, output_size, scale_factors):
    if output_size is not None:
        return upsample_nearest1d(x, output_size)
    return upsample_nearest1d(x, [int(x.shape[-1] * scale_factors[0])], scale_factors[0])
