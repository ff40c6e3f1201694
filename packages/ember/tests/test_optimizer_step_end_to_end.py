"""A compiled Adam step through inductor equals eager's over several steps: the step's
body compiled as a frame of its own, its state created ahead (parameters, gradients and
the optimizer's state, `step` included)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import ember

pytestmark = pytest.mark.usefixtures("fresh_ember")


def _train(compile_fn, steps=3):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def step():
        opt.step()

    compiled = compile_fn(step)
    data = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    for index in range(steps):
        opt.zero_grad()
        model(data + index).pow(2).mean().backward()
        compiled()
    params = [p.detach().clone() for p in model.parameters()]
    return params, copy.deepcopy(opt.state_dict())


# the step compiled, not run eagerly: a fallback warning fails the test
@pytest.mark.filterwarnings("error::dynamo_capture.fallbacks.EagerFallbackWarning")
def test_adam_step_through_inductor_matches_eager():
    expected_params, expected_state = _train(lambda fn: fn)
    params, state = _train(lambda fn: ember.compile(fn, backend="inductor"))
    torch.testing.assert_close(params, expected_params)
    assert state["param_groups"] == expected_state["param_groups"]
    for key, expected in expected_state["state"].items():
        for name, value in expected.items():
            torch.testing.assert_close(state["state"][key][name], value)
