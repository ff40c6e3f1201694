"""torch.nn modules made inside captured code (a loss or an activation built in a forward)."""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture


def _one():
    return (torch.randn(4),)


class LossInForward(torch.nn.Module):
    def forward(self, x):
        loss = torch.nn.MSELoss()
        return loss(x, x * 2)


LOSS_IN_FORWARD = LossInForward()


def loss_module_in_forward(x):
    return LOSS_IN_FORWARD(x)


def cross_entropy_in_frame(x):
    return torch.nn.CrossEntropyLoss()(x.view(2, 2), torch.tensor([0, 1]))


def activation_in_frame(x):
    return torch.nn.ReLU()(x) + 1


def loss_with_keyword_arguments(x):
    logits = torch.log_softmax(x.view(2, 2), 1)
    return torch.nn.NLLLoss(reduction="sum")(logits, torch.tensor([0, 1]))


def sequential_of_new_modules(x):
    return torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh())(x)


def softmax_and_dropout(x):
    return torch.nn.Softmax(dim=0)(x) + torch.nn.Dropout(0.0)(x)


PROGRAMS = [
    loss_module_in_forward,
    cross_entropy_in_frame,
    activation_in_frame,
    loss_with_keyword_arguments,
    sequential_of_new_modules,
    softmax_and_dropout,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_module_made_in_frame_is_one_graph_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


def test_module_made_in_frame_under_fullgraph():
    compiled = dynamo_capture.optimize(
        cross_entropy_in_frame, backend=lambda gm, ex: gm.forward, fullgraph=True
    )
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), cross_entropy_in_frame(x))


def test_module_made_in_frame_and_returned_is_new_each_call():
    def make(x):
        return torch.nn.ReLU(), x + 1

    compiled = dynamo_capture.optimize(make, backend=lambda gm, ex: gm.forward)
    first, _ = compiled(torch.randn(2))
    second, _ = compiled(torch.randn(2))
    assert isinstance(first, torch.nn.ReLU) and first is not second


def test_module_with_parameters_made_in_frame_runs_eagerly():
    def make_linear(x):
        return torch.nn.Linear(4, 2)(x)

    compiled = dynamo_capture.optimize(make_linear, backend=lambda gm, ex: gm.forward)
    torch.manual_seed(0)
    expected = make_linear(torch.ones(4))
    torch.manual_seed(0)
    torch.testing.assert_close(compiled(torch.ones(4)), expected)
    assert compiled.graph_breaks and "parameters" in str(compiled.graph_breaks[0])


# ----- forward hooks registered with with_kwargs=True, lazy modules ----------------------
class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, scale=1.0):
        return self.linear(x) * scale


def _with_pre_hook_kwargs():
    module = Scaled()
    module.register_forward_pre_hook(
        lambda m, args, kwargs: ((args[0] + 1,), {"scale": 2.0}), with_kwargs=True
    )
    return module


def _with_pre_hook_kwargs_none():
    module = Scaled()
    module.register_forward_pre_hook(lambda m, args, kwargs: None, with_kwargs=True)
    return module


def _with_hook_kwargs():
    module = Scaled()
    module.register_forward_hook(
        lambda m, args, kwargs, out: out + kwargs.get("scale", 0), with_kwargs=True
    )
    return module


@pytest.mark.parametrize(
    "make", [_with_pre_hook_kwargs, _with_pre_hook_kwargs_none, _with_hook_kwargs]
)
def test_forward_hook_with_kwargs_is_traced_like_torch(make):
    module = make()

    def run(x):
        return module(x, scale=3.0)

    counter = check_like_torch(run, lambda: (torch.randn(2, 4),))
    assert counter.frame_count == 1


def test_lazy_module_first_called_in_frame_is_one_graph():
    torch.manual_seed(0)
    lazy = torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.ReLU())
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.ReLU())
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = dynamo_capture.optimize(lazy, backend=backend)
    x = torch.randn(2, 5)
    torch.manual_seed(1)
    got = compiled(x)
    torch.manual_seed(1)
    torch.testing.assert_close(got, reference(x))
    torch.testing.assert_close(compiled(x), reference(x))
    assert len(graphs) == 1 and type(lazy[0]) is torch.nn.Linear
