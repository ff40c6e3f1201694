"""Loss functions (nll_loss, cross_entropy, mse_loss, ...) forward and backward."""

from __future__ import annotations

import torch

from prim_decomp.decompositions._opmath import aten, cast
from prim_decomp.decompositions._registry import COMPOSITE

__all__: list[str] = []

_NONE, _MEAN, _SUM = 0, 1, 2


def _reduce(loss: torch.Tensor, reduction: int) -> torch.Tensor:
    if reduction == _MEAN:
        return aten.mean.default(loss)
    if reduction == _SUM:
        return aten.sum.default(loss)
    return loss


def _nll_terms(x, target, weight, ignore_index):
    """Per-element loss and weight, with classes on dim 1 (or 0 for 1-d input)."""
    class_dim = 0 if x.dim() == 1 else 1
    keep = target != ignore_index
    safe_target = aten.where.self(keep, target, aten.zeros_like.default(target))
    picked = aten.gather.default(x, class_dim, aten.unsqueeze.default(safe_target, class_dim))
    picked = aten.squeeze.dims(picked, [class_dim])
    if weight is not None:
        w = aten.index.Tensor(weight, [safe_target])
    else:
        w = aten.full_like.default(picked, 1)
    w = aten.where.self(keep, w, aten.zeros_like.default(w))
    return -picked * w, w


@COMPOSITE.register(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def nll_loss_forward(x, target, weight, reduction: int, ignore_index):
    loss, w = _nll_terms(x, target, weight, ignore_index)
    if reduction == _NONE:
        return loss, aten.zeros.default([], dtype=x.dtype, device=x.device)
    total_weight = aten.sum.default(w)
    total = aten.sum.default(loss)
    if reduction == _MEAN:
        total = total / total_weight
    return total, total_weight


@COMPOSITE.register(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def nll_loss_backward(grad, x, target, weight, reduction: int, ignore_index, total_weight):
    class_dim = 0 if x.dim() == 1 else 1
    keep = target != ignore_index
    safe_target = aten.where.self(keep, target, aten.zeros_like.default(target))
    if weight is not None:
        w = aten.index.Tensor(weight, [safe_target])
    else:
        w = aten.full.default(target.shape, 1, dtype=x.dtype, device=x.device)
    w = aten.where.self(keep, w, aten.zeros_like.default(w))
    scale = grad / total_weight if reduction == _MEAN else grad
    per_element = aten.unsqueeze.default(-w * scale, class_dim)
    # NOTE: a comparison with the class index, not a scatter into zeros: elementwise, it
    # fuses into what reads the gradient (log_softmax's backward), so the one-hot rows
    # are never stored; ignored targets give zero rows, whatever the upstream gradient.
    classes = x.shape[class_dim]
    shape = [1] * x.dim()
    shape[class_dim] = classes
    index = aten.view.default(
        aten.arange.start_step(0, classes, 1, dtype=target.dtype, device=x.device), shape
    )
    hit = aten.logical_and.default(
        aten.eq.Tensor(index, aten.unsqueeze.default(safe_target, class_dim)),
        aten.unsqueeze.default(keep, class_dim),
    )
    zero = aten.zeros.default([], dtype=x.dtype, device=x.device)
    return aten.where.self(hit, per_element, zero)


@COMPOSITE.register(aten.nll_loss.default, aten.nll_loss_nd.default)
def nll_loss(x, target, weight=None, reduction: int = _MEAN, ignore_index=-100):
    return aten.nll_loss_forward.default(x, target, weight, reduction, ignore_index)[0]


@COMPOSITE.register(aten.cross_entropy_loss.default)
def cross_entropy(x, target, weight=None, reduction=_MEAN, ignore_index=-100, label_smoothing=0.0):
    class_dim = 0 if x.dim() == 1 else 1
    logp = aten._log_softmax.default(x, class_dim, False)
    if target.dtype.is_floating_point:
        return _soft_cross_entropy(logp, target, weight, reduction, label_smoothing, class_dim)
    loss = aten.nll_loss_forward.default(logp, target, weight, _NONE, ignore_index)[0]
    if label_smoothing > 0:
        return _smoothed(logp, target, weight, reduction, ignore_index, label_smoothing, loss)
    if reduction == _MEAN:
        _, w = _nll_terms(logp, target, weight, ignore_index)
        return aten.sum.default(loss) / aten.sum.default(w)
    return _reduce(loss, reduction)


def _class_weight(weight, logp, class_dim):
    shape = [1] * logp.dim()
    shape[class_dim] = logp.shape[class_dim]
    return aten.view.default(weight, shape)


def _soft_cross_entropy(logp, target, weight, reduction, smoothing, class_dim):
    classes = logp.shape[class_dim]
    if smoothing > 0:
        target = target * (1 - smoothing) + smoothing / classes
    terms = logp * target
    if weight is not None:
        terms = terms * _class_weight(weight, logp, class_dim)
    loss = -aten.sum.dim_IntList(terms, [class_dim])
    if reduction == _MEAN:
        return aten.sum.default(loss) / (logp.numel() // classes)
    return _reduce(loss, reduction)


def _smoothed(logp, target, weight, reduction, ignore_index, smoothing, nll):
    class_dim = 0 if logp.dim() == 1 else 1
    classes = logp.shape[class_dim]
    keep = target != ignore_index
    terms = logp if weight is None else logp * _class_weight(weight, logp, class_dim)
    smooth = -aten.sum.dim_IntList(terms, [class_dim])
    smooth = aten.where.self(keep, smooth, aten.zeros_like.default(smooth))
    if reduction == _MEAN:
        _, w = _nll_terms(logp, target, weight, ignore_index)
        denominator = aten.sum.default(w)
        nll_part = aten.sum.default(nll) / denominator
        smooth_part = aten.sum.default(smooth) / denominator
    else:
        nll_part, smooth_part = _reduce(nll, reduction), _reduce(smooth, reduction)
    return (1 - smoothing) * nll_part + (smoothing / classes) * smooth_part


@COMPOSITE.register(aten.mse_loss.default)
def mse_loss(x, target, reduction: int = _MEAN):
    diff = x - target
    return _reduce(diff * diff, reduction)


@COMPOSITE.register(aten.mse_loss_backward.default)
def mse_loss_backward(grad, x, target, reduction: int):
    scale = 2.0 / x.numel() if reduction == _MEAN else 2.0
    return scale * (x - target) * grad


@COMPOSITE.register(aten.l1_loss.default)
def l1_loss(x, target, reduction: int = _MEAN):
    return _reduce(aten.abs.default(x - target), reduction)


@COMPOSITE.register(aten.smooth_l1_loss.default)
def smooth_l1_loss(x, target, reduction: int = _MEAN, beta: float = 1.0):
    diff = aten.abs.default(x - target)
    if beta == 0:
        return _reduce(diff, reduction)
    loss = aten.where.self(diff < beta, 0.5 * diff * diff / beta, diff - 0.5 * beta)
    return _reduce(loss, reduction)


@COMPOSITE.register(aten.huber_loss.default)
def huber_loss(x, target, reduction: int = _MEAN, delta: float = 1.0):
    diff = aten.abs.default(x - target)
    loss = aten.where.self(diff < delta, 0.5 * diff * diff, delta * (diff - 0.5 * delta))
    return _reduce(loss, reduction)


@COMPOSITE.register(aten.binary_cross_entropy.default)
def binary_cross_entropy(x, target, weight=None, reduction: int = _MEAN):
    log_x = aten.clamp.default(aten.log.default(x), -100)
    log_1mx = aten.clamp.default(aten.log.default(1 - x), -100)
    loss = (target - 1) * log_1mx - target * log_x
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@COMPOSITE.register(aten.binary_cross_entropy_with_logits.default)
def bce_with_logits(x, target, weight=None, pos_weight=None, reduction: int = _MEAN):
    log_sig = -aten.log1p.default(aten.exp.default(-aten.abs.default(x))) + aten.clamp.default(
        x, None, 0
    )
    log_sig_neg = log_sig - x
    if pos_weight is not None:
        loss = -(pos_weight * target * log_sig + (1 - target) * log_sig_neg)
    else:
        loss = -(target * log_sig + (1 - target) * log_sig_neg)
    if weight is not None:
        loss = loss * weight
    return cast(_reduce(loss, reduction), x.dtype)
