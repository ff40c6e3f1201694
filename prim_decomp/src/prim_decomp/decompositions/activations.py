"""Activation functions and their backward ops, as pointwise core ATen ops."""

from __future__ import annotations

import math

import torch

from prim_decomp.decompositions._opmath import aten, opmath
from prim_decomp.decompositions._registry import COMPOSITE, COMPOUND

__all__: list[str] = []

# As ATen's CUDA and CPU kernels write GELU: products by constants, no divisions.
_SQRT1_2 = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_PDF_SCALE = 2.0 / math.sqrt(math.pi) * math.sqrt(0.5) * 0.5  # 1 / sqrt(2 pi)


@COMPOUND.register(aten.gelu.default)
@opmath
def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    if approximate == "tanh":
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + aten.tanh.default(inner))
    return x * 0.5 * (1.0 + aten.erf.default(x * _SQRT1_2))


@COMPOSITE.register(aten.gelu_backward.default)
@opmath
def gelu_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none"):
    if approximate == "tanh":
        x_sq = x * x
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x_sq * x)
        tanh_inner = aten.tanh.default(inner)
        left = 0.5 * x
        right = 1.0 + tanh_inner
        d_inner = _SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x_sq)
        return grad * (0.5 * right + left * (1.0 - tanh_inner * tanh_inner) * d_inner)
    cdf = 0.5 * (1.0 + aten.erf.default(x * _SQRT1_2))
    pdf = aten.exp.default(-0.5 * x * x) * _PDF_SCALE
    return grad * (cdf + x * pdf)


@COMPOSITE.register(aten.silu.default)
@opmath
def silu(x: torch.Tensor) -> torch.Tensor:
    return x * aten.sigmoid.default(x)


@COMPOSITE.register(aten.silu_backward.default)
@opmath
def silu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    sig = aten.sigmoid.default(x)
    return grad * sig * (1.0 + x * (1.0 - sig))


@COMPOSITE.register(aten.softplus.default)
@opmath
def softplus(x: torch.Tensor, beta: float = 1.0, threshold: float = 20.0) -> torch.Tensor:
    scaled = x * beta
    soft = aten.log1p.default(aten.exp.default(scaled)) / beta
    return aten.where.self(scaled > threshold, x, soft)


@COMPOSITE.register(aten.softplus_backward.default)
@opmath
def softplus_backward(grad, x, beta: float = 1.0, threshold: float = 20.0):
    scaled = x * beta
    z = aten.exp.default(scaled)
    return aten.where.self(scaled > threshold, grad, grad * z / (z + 1.0))


@opmath
def _log_sigmoid(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    z = aten.exp.default(-aten.abs.default(x))
    return aten.minimum.default(x, aten.zeros_like.default(x)) - aten.log1p.default(z), z


@COMPOSITE.register(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(log(sigmoid(x)), buffer)`. ATen's buffer is `exp(-|x|)` on the CPU (its CPU
    backward reads it) and empty on CUDA and XPU, whose kernels neither write nor read
    one: the same here, so the buffer's size is the device's."""
    out, z = _log_sigmoid(x)
    if x.device.type in ("cuda", "xpu"):
        return out, aten.new_zeros.default(x, [0])
    return out, z


@COMPOSITE.register(aten.log_sigmoid_backward.default)
@opmath
def log_sigmoid_backward(grad: torch.Tensor, x: torch.Tensor, buffer: torch.Tensor):
    """d/dx log(sigmoid(x)) = 1 - sigmoid(x), computed from `exp(-|x|)` (the buffer is
    not read: it is empty on a GPU)."""
    negative = x < 0
    z = aten.exp.default(-aten.abs.default(x))
    # 1 - sigmoid(x): 1 / (1 + z) for x < 0, z / (1 + z) otherwise
    return grad * aten.where.self(negative, 1.0 / (1.0 + z), z / (1.0 + z))


@COMPOUND.register(aten.leaky_relu.default)
@opmath
def leaky_relu(x: torch.Tensor, negative_slope: float = 0.01) -> torch.Tensor:
    return aten.where.self(x > 0, x, x * negative_slope)


@COMPOSITE.register(aten.leaky_relu_backward.default)
@opmath
def leaky_relu_backward(grad, x, negative_slope: float, self_is_result: bool):
    return aten.where.self(x > 0, grad, grad * negative_slope)


@COMPOSITE.register(aten.hardswish.default)
@opmath
def hardswish(x: torch.Tensor) -> torch.Tensor:
    return x * aten.clamp.default(x + 3.0, 0.0, 6.0) / 6.0


@COMPOSITE.register(aten.hardswish_backward.default)
@opmath
def hardswish_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # Eager's kernel: the slope is 0 at -3 and 1 at 3 (the outer pieces' own slopes).
    middle = grad * ((x / 3.0) + 0.5)
    zero = aten.zeros_like.default(grad)
    return aten.where.self(x <= -3.0, zero, aten.where.self(x < 3.0, middle, grad))


@COMPOSITE.register(aten.hardsigmoid.default)
@opmath
def hardsigmoid(x: torch.Tensor) -> torch.Tensor:
    return aten.clamp.default(x + 3.0, 0.0, 6.0) / 6.0


@COMPOSITE.register(aten.hardsigmoid_backward.default)
@opmath
def hardsigmoid_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    inside = (x > -3.0) & (x < 3.0)
    return aten.where.self(inside, grad / 6.0, aten.zeros_like.default(grad))


@COMPOUND.register(aten.elu.default)
@opmath
def elu(x, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0):
    negative = alpha * aten.expm1.default(x * input_scale)
    return aten.where.self(x > 0, x, negative) * scale


@COMPOSITE.register(aten.elu_backward.default)
@opmath
def elu_backward(grad, alpha, scale, input_scale, is_result: bool, self_or_result):
    negcoef = alpha * scale
    if is_result:
        negative = grad * input_scale * (self_or_result + negcoef)
    else:
        negative = grad * input_scale * negcoef * aten.exp.default(self_or_result * input_scale)
    return aten.where.self(self_or_result > 0, grad * scale, negative)


@COMPOSITE.register(aten.mish.default)
@opmath
def mish(x: torch.Tensor) -> torch.Tensor:
    return x * aten.tanh.default(softplus(x))


@COMPOSITE.register(aten.mish_backward.default)
@opmath
def mish_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    tanh_sp = aten.tanh.default(softplus(x))
    sig = aten.sigmoid.default(x)
    return grad * (tanh_sp + x * sig * (1.0 - tanh_sp * tanh_sp))


@COMPOUND.register(aten.hardtanh.default)
def hardtanh(x: torch.Tensor, min_val: float = -1.0, max_val: float = 1.0) -> torch.Tensor:
    return aten.clamp.default(x, min_val, max_val)


@COMPOSITE.register(aten.hardtanh_backward.default)
def hardtanh_backward(grad, x, min_val: float, max_val: float):
    outside = (x <= min_val) | (x >= max_val)
    return aten.where.self(outside, aten.zeros_like.default(grad), grad)


@COMPOSITE.register(aten.threshold_backward.default)
def threshold_backward(grad, x, threshold: float):
    return aten.where.self(x <= threshold, aten.zeros_like.default(grad), grad)


@COMPOSITE.register(aten.sigmoid_backward.default)
@opmath
def sigmoid_backward(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return grad * _conjugate_if_complex(y * (1.0 - y))


@COMPOSITE.register(aten.tanh_backward.default)
@opmath
def tanh_backward(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return grad * _conjugate_if_complex(1.0 - y * y)


def _conjugate_if_complex(derivative: torch.Tensor) -> torch.Tensor:
    """Complex backward formulas multiply the grad by the conjugate derivative, as ATen's do."""
    if derivative.is_complex():
        return aten.conj_physical.default(derivative)
    return derivative


@COMPOSITE.register(aten.threshold.default)
def threshold(x: torch.Tensor, threshold: float, value: float) -> torch.Tensor:
    return aten.where.self(x <= threshold, aten.full_like.default(x, value), x)


@COMPOSITE.register(aten.relu6.default)
def relu6(x: torch.Tensor) -> torch.Tensor:
    return aten.clamp.default(x, 0, 6)


@COMPOSITE.register(aten.glu.default)
def glu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    first, second = aten.split.Tensor(x, x.shape[dim] // 2, dim)
    return first * aten.sigmoid.default(second)


@COMPOSITE.register(aten.logit.default)
@opmath
def logit(x: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    if eps is not None:
        x = aten.clamp.default(x, eps, 1.0 - eps)
    return aten.log.default(x / (1.0 - x))
