"""Convolution nets in training: saved activations stay channels-last between the
compiled forward and backward (values and gradients against eager).

Footguns, worst first:
  silent wrong result  the backward reading a saved NHWC activation with NCHW strides
  silent wrong result  a convolution output the user gets (also saved) in NHWC strides,
                       or a gradient the user gets in other strides than eager's
  slowdown             saved activations copied back to NCHW in the forward, or to NHWC
                       in the backward, at every step
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN"
)

TOL = {"rtol": 1e-4, "atol": 1e-4}


class Block(nn.Module):
    """conv-BN-ReLU, a grouped or depthwise conv-BN, a residual (strided shortcut)."""

    def __init__(self, cin, cout, stride=1, groups=1):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1, groups=groups, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = nn.Conv2d(cin, cout, 1, stride=stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.short is None else self.short(x)))


def _network():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        Block(8, 8, groups=8),  # depthwise
        Block(8, 16, stride=2, groups=4),  # strided, grouped, 1x1 strided shortcut
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4),
    )  # fmt: skip


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same strides on every dim of size above 1 (the only ones an index reads)."""
    return all(n == 1 or x == y for n, x, y in zip(a.shape, a.stride(), b.stride()))


def _train_steps(model, x, steps=2):
    outs = []
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        out = model(x)
        out.square().sum().backward()
        outs.append(out.detach())
    return outs, {n: p.grad for n, p in model.named_parameters()}


def test_conv_net_training_with_saved_channels_last_matches_eager():
    model = _network()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 16, 16)
    outs, grads = _train_steps(ember.compile(model, backend="inductor"), x)
    expected_outs, expected_grads = _train_steps(reference, x)
    torch.testing.assert_close(outs, expected_outs, **TOL)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], **TOL, msg=name)
        assert _same_layout(grad, expected_grads[name]), name
    for (name, b), (_, e) in zip(model.named_buffers(), reference.named_buffers()):
        torch.testing.assert_close(b, e, **TOL, msg=name)


def _returns_a_saved_convolution(x, w1, w2):
    y = F.conv2d(x, w1, padding=1)  # saved for the backward and returned
    z = F.conv2d(torch.relu(y), w2, padding=1, groups=2)
    return y, z.sum((2, 3))


def test_saved_convolution_output_also_returned_keeps_eager_layout():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    w1 = torch.randn(6, 4, 3, 3, requires_grad=True)
    w2 = torch.randn(6, 3, 3, 3, requires_grad=True)
    compiled = ember.compile(_returns_a_saved_convolution, backend="inductor")
    for _ in range(2):
        y, s = compiled(x, w1, w2)
        grads = torch.autograd.grad(y.sum() + s.square().sum(), (x, w1, w2))
    ey, es = _returns_a_saved_convolution(x, w1, w2)
    expected = torch.autograd.grad(ey.sum() + es.square().sum(), (x, w1, w2))
    torch.testing.assert_close((y, s), (ey, es), **TOL)
    assert _same_layout(y, ey)
    torch.testing.assert_close(grads, expected, **TOL)
    for g, e in zip(grads, expected):
        assert _same_layout(g, e)


def _conv_bn_relu_residual(x, w1, w2, g1, b1):
    y = F.conv2d(x, w1, padding=1)
    y = torch.relu(F.batch_norm(y, None, None, g1, b1, training=True))
    z = F.conv2d(y, w2, padding=1)
    return (torch.relu(z + y)).mean((2, 3))


def _activation_buffers(wrapper: str, shape: tuple, strides: tuple) -> int:
    """How many buffers of `shape` the wrapper allocates with `strides`."""
    return len(re.findall(re.escape(f"empty_strided({shape}, {strides}"), wrapper))


def _wrappers(compiled, role: str) -> list[str]:
    part = ember.last_artifacts(compiled).parts[0]
    return [
        a.text
        for a in part.stages
        if a.stage == "inductor" and a.role == role and a.name == "wrapper"
    ]


def test_backward_makes_no_layout_copies_of_saved_activations():
    torch.manual_seed(0)
    x = torch.randn(2, 8, 8, 8)
    params = (
        torch.randn(8, 8, 3, 3, requires_grad=True),
        torch.randn(8, 8, 3, 3, requires_grad=True),
        torch.rand(8, requires_grad=True),
        torch.randn(8, requires_grad=True),
    )
    compiled = ember.compile(_conv_bn_relu_residual, backend="inductor")
    grads = torch.autograd.grad(compiled(x, *params).square().sum(), params)
    expected = torch.autograd.grad(_conv_bn_relu_residual(x, *params).square().sum(), params)
    torch.testing.assert_close(grads, expected, **TOL)
    nchw = (512, 64, 8, 1)
    # the forward returns its saved activations channels-last, as computed: no NCHW
    # buffer of an activation's shape; the backward reads them as they are and computes
    # its gradients channels-last: none there either
    (forward,) = _wrappers(compiled, "forward")
    assert _activation_buffers(forward, (2, 8, 8, 8), nchw) == 0, forward
    (backward,) = _wrappers(compiled, "backward")
    assert _activation_buffers(backward, (2, 8, 8, 8), nchw) == 0, backward
    assert backward.count("convolution_backward_default(") == 2, backward


_BUFFER = re.compile(
    r"empty_strided\(\((\d+), (\d+), (\d+), (\d+)\), \((\d+), (\d+), (\d+), (\d+)\)"
)


def _nchw_activations(wrapper: str, batch: int) -> list[str]:
    """The (batch, C, H, W) buffers with several channels and square images (this file's
    activations; a kernel's own scratch, (N, H, W, C) sized, and weights are left out)
    that the wrapper allocates NCHW."""
    found = []
    for match in _BUFFER.finditer(wrapper):
        n, c, h, w, *stride = (int(g) for g in match.groups())
        if n == batch and c > 1 and h == w > 1 and stride == [c * h * w, h * w, w, 1]:
            found.append(match.group(0))
    return found


def test_max_pooling_between_convolutions_stays_channels_last_in_training():
    torch.manual_seed(0)
    layers = []
    channels = 3
    for width in (8, 16):
        layers += [
            nn.Conv2d(channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        ]  # fmt: skip
        channels = width
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 16, 16)
    compiled = ember.compile(model, backend="inductor")
    outs, grads = _train_steps(compiled, x)
    expected_outs, expected_grads = _train_steps(reference, x)
    torch.testing.assert_close(outs, expected_outs, **TOL)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], **TOL, msg=name)
        assert _same_layout(grad, expected_grads[name]), name
    for role in ("forward", "backward"):
        (wrapper,) = _wrappers(compiled, role)
        assert not _nchw_activations(wrapper, batch=2), (role, wrapper)
