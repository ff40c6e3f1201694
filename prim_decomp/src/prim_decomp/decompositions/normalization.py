"""Softmax, layer/RMS/batch/group norm and their backward ops."""

from __future__ import annotations

import torch

from prim_decomp.decompositions._opmath import aten, cast, normalize_dims
from prim_decomp.decompositions._registry import COMPOSITE, COMPOUND
from prim_decomp.type_promotion import compute_dtype

__all__: list[str] = []


def _upcast(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else cast(x, compute_dtype(x.dtype))


def _contiguous(x: torch.Tensor) -> torch.Tensor:
    """`x` in row-major order: eager's softmax kernels return their result so laid out,
    whatever the input's strides (a later `.view(-1)` relies on it)."""
    if x.is_contiguous():
        return x
    return aten.clone.default(x, memory_format=torch.contiguous_format)


# --- softmax -------------------------------------------------------------------
@COMPOUND.register(aten._softmax.default)
def softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    out_dtype = torch.float32 if half_to_float else x.dtype
    x = _contiguous(x)
    if x.numel() == 0:
        return cast(aten.clone.default(x), out_dtype)
    x = _upcast(x)
    shifted = x - aten.amax.default(x, [dim], True)
    exp = aten.exp.default(shifted)
    return cast(exp / aten.sum.dim_IntList(exp, [dim], True), out_dtype)


@COMPOUND.register(aten._log_softmax.default)
def log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    out_dtype = torch.float32 if half_to_float else x.dtype
    x = _contiguous(x)
    if x.numel() == 0:
        return cast(aten.clone.default(x), out_dtype)
    x = _upcast(x)
    shifted = x - aten.amax.default(x, [dim], True)
    total = aten.sum.dim_IntList(aten.exp.default(shifted), [dim], True)
    return cast(shifted - aten.log.default(total), out_dtype)


def _softmax_backward_dtype(grad: torch.Tensor, input_dtype: torch.dtype) -> torch.dtype:
    """The dtype of a (log-)softmax backward's result, as eager's meta function sets it:
    `grad`'s, except a float32 `grad` of a softmax run half-to-float (`input_dtype`
    float16) gives float16. `input_dtype` is otherwise only a hint: a float16 `grad`
    with `input_dtype=float32` gives float16."""
    if grad.dtype == torch.float32 and input_dtype == torch.float16:
        return torch.float16
    return grad.dtype


@COMPOSITE.register(aten._softmax_backward_data.default)
def softmax_backward_data(grad, output, dim: int, input_dtype: torch.dtype):
    out_dtype = _softmax_backward_dtype(grad, input_dtype)
    grad, output = _upcast(_contiguous(grad)), _upcast(_contiguous(output))
    weighted = grad * output
    result = weighted - output * aten.sum.dim_IntList(weighted, [dim], True)
    return cast(result, out_dtype)


@COMPOSITE.register(aten._log_softmax_backward_data.default)
def log_softmax_backward_data(grad, output, dim: int, input_dtype: torch.dtype):
    out_dtype = _softmax_backward_dtype(grad, input_dtype)
    grad, output = _upcast(_contiguous(grad)), _upcast(_contiguous(output))
    total = aten.sum.dim_IntList(grad, [dim], True)
    return cast(grad - aten.exp.default(output) * total, out_dtype)


@COMPOSITE.register(aten.softmax.int)
def softmax_int(x, dim: int, dtype: torch.dtype | None = None):
    if dtype is not None:
        x = cast(x, dtype)
    return aten._softmax.default(x, dim, False)


@COMPOSITE.register(aten.log_softmax.int)
def log_softmax_int(x, dim: int, dtype: torch.dtype | None = None):
    if dtype is not None:
        x = cast(x, dtype)
    return aten._log_softmax.default(x, dim, False)


@COMPOSITE.register(aten.logsumexp.default)
def logsumexp(x: torch.Tensor, dim, keepdim: bool = False) -> torch.Tensor:
    dims = normalize_dims(dim, x.dim())
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        x = cast(x, torch.get_default_dtype())
    xc = _upcast(x)
    if x.dim() == 0 and not x.is_complex():  # log(exp(z)) wraps a complex z's imaginary part
        return x
    if any(xc.shape[d] == 0 for d in dims):  # an empty sum: log(0) = -inf, no peak to take
        result = aten.log.default(aten.sum.dim_IntList(aten.exp.default(xc), dims, True))
        if not keepdim:
            result = aten.squeeze.dims(result, dims)
        return cast(result, x.dtype)
    # A complex input is shifted by the largest real part, as ATen's kernel does.
    peak = aten.amax.default(aten.real.default(xc) if xc.is_complex() else xc, dims, True)
    finite_peak = aten.where.self(aten.isinf.default(peak), aten.zeros_like.default(peak), peak)
    total = aten.sum.dim_IntList(aten.exp.default(xc - finite_peak), dims, True)
    result = aten.log.default(total) + finite_peak
    if not keepdim:
        result = aten.squeeze.dims(result, dims)
    return cast(result, x.dtype)


# --- layer norm and RMS norm -------------------------------------------------------
def _norm_dims(x: torch.Tensor, normalized_shape) -> list[int]:
    return list(range(x.dim() - len(normalized_shape), x.dim()))


def _mean_and_rstd(x: torch.Tensor, dims: list[int], eps: float):
    """Biased mean and 1/sqrt(var + eps) over `dims`, kept for broadcasting."""
    var, mean = aten.var_mean.correction(x, dims, correction=0, keepdim=True)
    return mean, aten.rsqrt.default(var + eps)


def _mixed_stats_dtype(x, weight, bias) -> torch.dtype | None:
    """The statistics' dtype of eager's layer and group norm kernels that keep them in the
    input's dtype, or None where the kernel refuses the dtypes (the op then runs whole and
    raises eager's error). A half or bfloat16 input with float32 parameters ("mixed"):
    float32, as a backward reading them in float32 expects; otherwise the input's."""
    first = next((p.dtype for p in (weight, bias) if p is not None), x.dtype)
    if first == x.dtype:
        return x.dtype
    params = {p.dtype for p in (weight, bias) if p is not None}
    if params == {torch.float32} and x.dtype in (torch.bfloat16, torch.float16):
        return torch.float32
    return None


def _layer_norm_stats_dtype(x, weight, bias) -> torch.dtype | None:
    """Eager's layer norm keeps mean and rstd in the accumulate dtype off the CPU (float32
    for a half input); on the CPU, as its group norm does (`_mixed_stats_dtype`)."""
    if x.device.type != "cpu":
        return compute_dtype(x.dtype)
    return _mixed_stats_dtype(x, weight, bias)


@COMPOUND.register(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps: float):
    stats = _layer_norm_stats_dtype(x, weight, bias)
    if stats is None:
        return NotImplemented
    dims = _norm_dims(x, normalized_shape)
    xc = _upcast(x)
    mean, rstd = _mean_and_rstd(xc, dims, eps)
    out = (xc - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    if x.dim() == len(normalized_shape):
        mean_shape = [1] * x.dim()
    else:
        mean_shape = list(x.shape[: x.dim() - len(normalized_shape)]) + [1] * len(dims)
    mean = aten.view.default(mean, mean_shape)
    rstd = aten.view.default(rstd, mean_shape)
    return cast(out, x.dtype), cast(mean, stats), cast(rstd, stats)


@COMPOUND.register(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias, mask):
    dims = _norm_dims(x, normalized_shape)
    outer = list(range(x.dim() - len(normalized_shape)))
    grad_c, x_c = _upcast(grad), _upcast(x)
    mean, rstd = _upcast(mean), _upcast(rstd)
    count = 1
    for axis in dims:
        count = count * x.shape[axis]
    x_hat = (x_c - mean) * rstd
    grad_x_hat = grad_c * weight if weight is not None else grad_c
    grad_input = grad_weight = grad_bias = None
    if mask[0] and x.device.type == "cpu":
        grad_input = cast(
            _layer_norm_grad_input_cpu(grad_x_hat, x_c, mean, rstd, dims, count), x.dtype
        )
    elif mask[0]:
        sum_g = aten.sum.dim_IntList(grad_x_hat, dims, True)
        sum_gx = aten.sum.dim_IntList(grad_x_hat * x_hat, dims, True)
        inner = grad_x_hat * count - sum_g - x_hat * sum_gx
        grad_input = cast((rstd / count) * inner, x.dtype)
    if mask[1] and weight is not None:
        grad_weight = cast(_sum_to(grad_c * x_hat, outer), weight.dtype)
    if mask[2] and bias is not None:
        grad_bias = cast(_sum_to(grad_c, outer), bias.dtype)
    return grad_input, grad_weight, grad_bias


def _layer_norm_grad_input_cpu(grad_x_hat, x, mean, rstd, dims: list[int], count):
    """The input's gradient as eager's CPU kernel computes it: from the sums of `g` and
    `g * x` (not of `g * x_hat`, as the CUDA kernel and the branch above do),
    `dx = rstd * g + b * x + c`. Equal for finite values; with a non-finite gradient the
    two disagree (an inf in `g` where `x == 0` makes eager's whole row NaN, where the
    other form gives -inf in part of it), so each device gets its own kernel's form."""
    sum_g = aten.sum.dim_IntList(grad_x_hat, dims, True)
    sum_gx = aten.sum.dim_IntList(grad_x_hat * x, dims, True)
    b = (sum_g * mean - sum_gx) * rstd * rstd * rstd / count
    c = -b * mean - sum_g * rstd / count
    return rstd * grad_x_hat + b * x + c


def _sum_to(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    return aten.sum.dim_IntList(x, dims, False) if dims else aten.clone.default(x)


@COMPOSITE.register(aten.layer_norm.default)
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return aten.native_layer_norm.default(x, normalized_shape, weight, bias, eps)[0]


@COMPOSITE.register(aten.rms_norm.default)
def rms_norm(x, normalized_shape, weight=None, eps: float | None = None):
    dims = _norm_dims(x, normalized_shape)
    xc = _upcast(x)
    if eps is None:
        eps = torch.finfo(xc.dtype).eps
    mean_sq = aten.mean.dim(xc * xc, dims, True)
    out = xc * aten.rsqrt.default(mean_sq + eps)
    out = cast(out, x.dtype)
    return out * weight if weight is not None else out


# --- batch norm ----------------------------------------------------------------------
def _channel_view(t: torch.Tensor, ndim: int) -> torch.Tensor:
    return aten.view.default(t, [t.shape[0]] + [1] * (ndim - 2))


def _stats_dtype(x, weight, bias, running_mean, running_var) -> torch.dtype | None:
    """The dtype eager's kernel keeps the batch statistics in, or None where it refuses
    the dtypes (the op then runs whole and raises eager's error).

    Parameters all of the input's dtype: the input's on CPU, its accumulate dtype elsewhere
    (CUDA saves float32 statistics for a half input). A half input with float32
    parameters ("mixed" batch norm): float32 on every device.
    """
    params = {p.dtype for p in (weight, bias, running_mean, running_var) if p is not None}
    if not params or params == {x.dtype}:
        return x.dtype if x.device.type == "cpu" else compute_dtype(x.dtype)
    if params == {torch.float32} and x.dtype in (torch.bfloat16, torch.float16):
        return torch.float32
    return None


def _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """(output, save_mean, save_rstd, new_running_mean, new_running_var), the statistics
    in the compute dtype.

    The output is row-major below 4 dims, as eager's kernel lays it out whatever the
    input's strides (4-D and 5-D ones follow the input's suggested memory format).
    Outside training, CPU saves empty statistics and CUDA the running mean and the
    inverse standard deviation, as their kernels do."""
    if x.dim() < 4:
        x = _contiguous(x)
    reduce = [0] + list(range(2, x.dim()))
    xc = _upcast(x)
    new_mean, new_var = running_mean, running_var
    if training:
        var, mean = aten.var_mean.correction(xc, reduce, correction=0, keepdim=True)
        rstd = aten.rsqrt.default(var + eps)
        save_mean = aten.squeeze.dims(mean, reduce)
        save_rstd = aten.squeeze.dims(rstd, reduce)
        if running_mean is not None:
            count = x.numel() // x.shape[1]
            unbiased = aten.squeeze.dims(var, reduce) * (count / torch.sym_max(count - 1, 1))
            new_mean = momentum * save_mean + (1 - momentum) * running_mean
            new_var = momentum * unbiased + (1 - momentum) * running_var
    else:
        save_mean = _upcast(running_mean)
        save_rstd = aten.rsqrt.default(_upcast(running_var) + eps)
        mean = _channel_view(save_mean, x.dim())
        rstd = _channel_view(save_rstd, x.dim())
        if x.device.type == "cpu":
            save_mean = aten.new_zeros.default(x, [0], dtype=xc.dtype)
            save_rstd = aten.new_zeros.default(x, [0], dtype=xc.dtype)
    out = (xc - mean) * rstd
    if weight is not None:
        out = out * _channel_view(weight, x.dim())
    if bias is not None:
        out = out + _channel_view(bias, x.dim())
    return cast(out, x.dtype), save_mean, save_rstd, new_mean, new_var


def _cast_like(new: torch.Tensor | None, old: torch.Tensor | None):
    return None if new is None else cast(new, old.dtype)


@COMPOUND.register(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_functional(
    x, weight, bias, running_mean, running_var, training, momentum, eps
):
    stats = _stats_dtype(x, weight, bias, running_mean, running_var)
    if stats is None:
        return NotImplemented
    out, mean, rstd, new_mean, new_var = _batch_norm(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    mean, rstd = cast(mean, stats), cast(rstd, stats)
    return out, mean, rstd, _cast_like(new_mean, running_mean), _cast_like(new_var, running_var)


@COMPOUND.register(aten._native_batch_norm_legit_no_training.default)
def native_batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    stats = _stats_dtype(x, weight, bias, running_mean, running_var)
    if stats is None:
        return NotImplemented
    out, mean, rstd, _, _ = _batch_norm(
        x, weight, bias, running_mean, running_var, False, momentum, eps
    )
    return out, cast(mean, stats), cast(rstd, stats)


@COMPOUND.register(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    if not training:
        raise RuntimeError("running_mean must be defined in evaluation mode")
    stats = _stats_dtype(x, weight, bias, None, None)
    if stats is None:
        return NotImplemented
    out, mean, rstd, _, _ = _batch_norm(x, weight, bias, None, None, training, momentum, eps)
    return out, cast(mean, stats), cast(rstd, stats)


@COMPOUND.register(aten._native_batch_norm_legit.default)
def native_batch_norm_legit(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Updates the running statistics in place, as the op does."""
    stats = _stats_dtype(x, weight, bias, running_mean, running_var)
    if stats is None:
        return NotImplemented
    out, mean, rstd, new_mean, new_var = _batch_norm(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    if training and running_mean is not None:
        aten.copy_.default(running_mean, cast(new_mean, running_mean.dtype))
        aten.copy_.default(running_var, cast(new_var, running_var.dtype))
    return out, cast(mean, stats), cast(rstd, stats)


@COMPOSITE.register(aten.native_batch_norm.default)
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if running_mean is None:
        return aten._native_batch_norm_legit.no_stats(x, weight, bias, training, momentum, eps)
    if not training:
        return aten._native_batch_norm_legit_no_training.default(
            x, weight, bias, running_mean, running_var, momentum, eps
        )
    return aten._native_batch_norm_legit.default(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )


@COMPOSITE.register(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(
    grad, x, weight, running_mean, running_var, save_mean, save_rstd, train, eps, mask
):
    reduce = [0] + list(range(2, x.dim()))
    grad_c, x_c = _upcast(grad), _upcast(x)
    if train:
        mean, rstd = _upcast(save_mean), _upcast(save_rstd)
    else:
        mean = _upcast(running_mean)
        rstd = aten.rsqrt.default(_upcast(running_var) + eps)
    count = x.numel() // x.shape[1]
    mean_b, rstd_b = _channel_view(mean, x.dim()), _channel_view(rstd, x.dim())
    x_hat = (x_c - mean_b) * rstd_b
    sum_g = aten.sum.dim_IntList(grad_c, reduce, False)
    sum_gx = aten.sum.dim_IntList(grad_c * x_hat, reduce, False)
    scale = rstd if weight is None else rstd * _upcast(weight)
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        if train:
            centered = grad_c - _channel_view(sum_g / count, x.dim())
            centered = centered - x_hat * _channel_view(sum_gx / count, x.dim())
            grad_input = centered * _channel_view(scale, x.dim())
        else:
            grad_input = grad_c * _channel_view(scale, x.dim())
        grad_input = cast(grad_input, x.dtype)
    if mask[1]:
        grad_weight = cast(sum_gx, weight.dtype if weight is not None else x.dtype)
    if mask[2]:
        grad_bias = cast(sum_g, weight.dtype if weight is not None else x.dtype)
    return grad_input, grad_weight, grad_bias


# --- group norm -------------------------------------------------------------------------
@COMPOUND.register(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, N, C, HxW, group: int, eps: float):
    stats = _mixed_stats_dtype(x, weight, bias)
    if stats is None:
        return NotImplemented
    xc = _upcast(x)
    # NOTE: sizes spelled out, not -1: an empty batch (N = 0) leaves -1 ambiguous.
    grouped = aten.view.default(xc, [N, group, (C // group) * HxW])
    mean, rstd = _mean_and_rstd(grouped, [2], eps)
    out = aten.view.default((grouped - mean) * rstd, x.shape)
    shape = [1, C] + [1] * (x.dim() - 2)
    if weight is not None:
        out = out * aten.view.default(weight, shape)
    if bias is not None:
        out = out + aten.view.default(bias, shape)
    mean = aten.view.default(mean, [N, group])
    rstd = aten.view.default(rstd, [N, group])
    return cast(out, x.dtype), cast(mean, stats), cast(rstd, stats)


@COMPOUND.register(aten.native_group_norm_backward.default)
def native_group_norm_backward(grad, x, mean, rstd, weight, N, C, HxW, group, mask):
    grad_c, x_c = _upcast(grad), _upcast(x)
    per_group = C // group
    g = aten.view.default(grad_c, [N, group, per_group, HxW])
    xv = aten.view.default(x_c, [N, group, per_group, HxW])
    mean_b = aten.view.default(_upcast(mean), [N, group, 1, 1])
    rstd_b = aten.view.default(_upcast(rstd), [N, group, 1, 1])
    x_hat = (xv - mean_b) * rstd_b
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        w = 1.0 if weight is None else aten.view.default(_upcast(weight), [1, group, per_group, 1])
        gw = g * w
        count = per_group * HxW
        sum_g = aten.sum.dim_IntList(gw, [2, 3], True)
        sum_gx = aten.sum.dim_IntList(gw * x_hat, [2, 3], True)
        inner = gw - sum_g / count - x_hat * sum_gx / count
        grad_input = cast(aten.view.default(inner * rstd_b, x.shape), x.dtype)
    if mask[1] and weight is not None:
        grad_weight = aten.view.default(aten.sum.dim_IntList(g * x_hat, [0, 3]), [C])
        grad_weight = cast(grad_weight, weight.dtype)
    if mask[2]:
        grad_bias = aten.view.default(aten.sum.dim_IntList(g, [0, 3]), [C])
        grad_bias = cast(grad_bias, x.dtype if weight is None else weight.dtype)
    return grad_input, grad_weight, grad_bias


@COMPOSITE.register(aten.group_norm.default)
def group_norm(x, num_groups: int, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    N, C = x.shape[0], x.shape[1]
    HxW = x.numel() // (N * C) if x.numel() else 0
    return aten.native_group_norm.default(x, weight, bias, N, C, HxW, num_groups, eps)[0]


@COMPOSITE.register(aten.batch_norm.default)
def batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn):
    return aten.native_batch_norm.default(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )[0]
