"""2-d pooling as strided slices of the padded input, reduced.

`inductor_default` keeps pooling whole (see `INDUCTOR_KEPT`); these rules serve
`prims` and any table that wants pooling broken up.
"""

from __future__ import annotations

import math

import torch

from prim_decomp.decompositions._opmath import aten, cast
from prim_decomp.decompositions._registry import COMPOUND
from prim_decomp.type_promotion import compute_dtype

__all__: list[str] = []


def _pair(value, default=None) -> list:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return list(default)
    if isinstance(value, int):
        return [value, value]
    return list(value) * 2 if len(value) == 1 else list(value)


def _out_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil: bool) -> int:
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _windows(padded, kernel, stride, dilation, out_hw):
    """The kernel positions' views of `padded`, each of shape (..., out_h, out_w)."""
    views = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            h0, w0 = i * dilation[0], j * dilation[1]
            rows = aten.slice.Tensor(
                padded, -2, h0, h0 + stride[0] * (out_hw[0] - 1) + 1, stride[0]
            )
            views.append(
                aten.slice.Tensor(rows, -1, w0, w0 + stride[1] * (out_hw[1] - 1) + 1, stride[1])
            )
    return views


def _pad_to(x, pad, out_hw, kernel, stride, dilation, value):
    """Pad H and W by `pad` before, and after as far as the last window needs."""
    extra = []
    for axis in range(2):
        needed = (out_hw[axis] - 1) * stride[axis] + dilation[axis] * (kernel[axis] - 1) + 1
        after = max(needed - x.shape[-2 + axis] - pad[axis], 0)
        extra.append(after)
    return aten.constant_pad_nd.default(x, [pad[1], extra[1], pad[0], extra[0]], value)


@COMPOUND.register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    kernel = _pair(kernel_size)
    stride, pad, dilation = _pair(stride, kernel), _pair(padding), _pair(dilation)
    height, width = x.shape[-2], x.shape[-1]
    out_hw = [
        _out_size(height, kernel[0], stride[0], pad[0], dilation[0], ceil_mode),
        _out_size(width, kernel[1], stride[1], pad[1], dilation[1], ceil_mode),
    ]
    padded = _pad_to(x, pad, out_hw, kernel, stride, dilation, -math.inf)
    stacked = aten.stack.default(_windows(padded, kernel, stride, dilation, out_hw), -1)
    values = aten.amax.default(stacked, [-1])
    position = aten.argmax.default(stacked, -1)
    ki = aten.div.Tensor_mode(position, kernel[1], rounding_mode="floor")
    kj = aten.remainder.Scalar(position, kernel[1])
    rows = aten.arange.start_step(0, out_hw[0], dtype=torch.int64, device=x.device)
    cols = aten.arange.start_step(0, out_hw[1], dtype=torch.int64, device=x.device)
    h = aten.unsqueeze.default(rows * stride[0] - pad[0], 1) + ki * dilation[0]
    w = cols * stride[1] - pad[1] + kj * dilation[1]
    return values, h * width + w


@COMPOUND.register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(
    grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    flat_shape = list(x.shape[:-2]) + [x.shape[-2] * x.shape[-1]]
    grad_flat = aten.reshape.default(grad, list(grad.shape[:-2]) + [-1])
    index_flat = aten.reshape.default(indices, list(indices.shape[:-2]) + [-1])
    zeros = aten.zeros.default(flat_shape, dtype=compute_dtype(grad.dtype), device=grad.device)
    summed = aten.scatter_add.default(zeros, -1, index_flat, cast(grad_flat, zeros.dtype))
    return cast(aten.view.default(summed, list(x.shape)), grad.dtype)


@COMPOUND.register(aten.avg_pool2d.default)
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):  # fmt: skip
    kernel = _pair(kernel_size)
    stride, pad, dilation = _pair(stride, kernel), _pair(padding), [1, 1]
    height, width = x.shape[-2], x.shape[-1]
    out_hw = [
        _out_size(height, kernel[0], stride[0], pad[0], 1, ceil_mode),
        _out_size(width, kernel[1], stride[1], pad[1], 1, ceil_mode),
    ]
    xc = cast(x, compute_dtype(x.dtype))
    padded = _pad_to(xc, pad, out_hw, kernel, stride, dilation, 0.0)
    total = aten.sum.dim_IntList(
        aten.stack.default(_windows(padded, kernel, stride, dilation, out_hw), -1), [-1]
    )
    if divisor_override:
        return cast(total / divisor_override, x.dtype)
    divisor = _avg_divisor(xc, kernel, stride, pad, out_hw, count_include_pad)
    return cast(total / divisor, x.dtype)


def _avg_divisor(x, kernel, stride, pad, out_hw, count_include_pad: bool):
    """How many elements each window averages: the part inside the (padded) input."""
    sizes = []
    for axis in range(2):
        size = x.shape[-2 + axis]
        starts = aten.arange.start_step(0, out_hw[axis], dtype=torch.int64, device=x.device)
        starts = starts * stride[axis] - pad[axis]
        ends = aten.clamp.default(starts + kernel[axis], None, size + pad[axis])
        if not count_include_pad:
            starts = aten.clamp.default(starts, 0, None)
            ends = aten.clamp.default(ends, None, size)
        else:
            starts = aten.clamp.default(starts, -pad[axis], None)
        sizes.append(cast(ends - starts, x.dtype))
    return aten.unsqueeze.default(sizes[0], 1) * sizes[1]


@COMPOUND.register(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(x, output_size):
    out_h, out_w = _pair(output_size)
    height, width = x.shape[-2], x.shape[-1]
    if height % out_h != 0 or width % out_w != 0:
        return NotImplemented
    shape = list(x.shape[:-2]) + [out_h, height // out_h, out_w, width // out_w]
    grouped = aten.view.default(aten.clone.default(x, memory_format=torch.contiguous_format), shape)
    return aten.mean.dim(grouped, [-3, -1])
