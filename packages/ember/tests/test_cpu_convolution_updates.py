"""A CNN compiled by the inductor backend for CPU inference folds each eval-mode batch
norm into its convolution's weight, computed at every call. Whatever changes a parameter or a
running statistic between calls must show in the next compiled call.

| footgun                                                  | without the check    |
| -------------------------------------------------------- | -------------------- |
| an optimizer step (SGD, Adam foreach, Adam fused)        | silent wrong result  |
| batch norm running statistics updated by a train() pass | silent wrong result  |
| load_state_dict                                          | silent wrong result  |
| a parameter replaced by a new tensor                     | silent wrong result  |
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import ember

TOL = {"rtol": 1e-4, "atol": 1e-4}


def _cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 4),
    )
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model


def _check_inference(compiled, model, x):
    model.eval()
    with torch.no_grad():
        assert_close(compiled(x), model(x), **TOL)


def _train_step(model, optimizer, x):
    model.train()
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        lambda p: torch.optim.Adam(p, lr=0.05, foreach=True),
        lambda p: torch.optim.Adam(p, lr=0.05, fused=True),
    ],
    ids=["sgd", "adam_foreach", "adam_fused"],
)
def test_optimizer_step_between_inference_calls_is_seen(make_optimizer):
    model = _cnn()
    compiled = ember.compile(model, backend="inductor")
    optimizer = make_optimizer(model.parameters())
    x = torch.randn(2, 3, 16, 16)
    _check_inference(compiled, model, x)
    for _ in range(2):
        _train_step(model, optimizer, x)  # also updates the running statistics
        _check_inference(compiled, model, x)


def test_load_state_dict_between_inference_calls_is_seen():
    model = _cnn()
    compiled = ember.compile(model, backend="inductor")
    x = torch.randn(2, 3, 16, 16)
    _check_inference(compiled, model, x)
    other = _cnn()
    torch.manual_seed(1)
    for p in other.parameters():
        p.data.normal_()
    model.load_state_dict(other.state_dict())
    _check_inference(compiled, model, x)


def test_parameter_replaced_between_inference_calls_is_seen():
    model = _cnn()
    compiled = ember.compile(model, backend="inductor")
    x = torch.randn(2, 3, 16, 16)
    _check_inference(compiled, model, x)
    model[0].weight = torch.nn.Parameter(torch.randn_like(model[0].weight))
    model[1].running_var = torch.rand(8) + 0.5
    _check_inference(compiled, model, x)


def test_training_through_the_compiled_model_matches_eager():
    model = _cnn()
    reference = _cnn()
    compiled = ember.compile(model, backend="inductor")
    x = torch.randn(2, 3, 16, 16)
    model.train()
    reference.train()
    compiled(x).square().mean().backward()
    reference(x).square().mean().backward()
    for got, expected in zip(model.parameters(), reference.parameters(), strict=True):
        assert_close(got.grad, expected.grad, **TOL)
    _check_inference(compiled, model, x)
