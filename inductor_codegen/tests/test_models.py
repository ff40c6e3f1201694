"""Real model graphs (inference, and a training step with gradients) against eager."""

from __future__ import annotations

import pytest
import torch
from graph_helpers import compile_fn
from models import model_cases

CASES = {name: (model, x) for name, model, x in model_cases()}


@pytest.mark.parametrize("name", list(CASES))
def test_inference(name):
    model, x = CASES[name]
    with torch.no_grad():
        compiled, _ = compile_fn(lambda inp: model(inp), x)
        expected = model(x)
        torch.testing.assert_close(compiled(x), expected, rtol=1e-4, atol=1e-4)
    assert compiled.kernel_count > 0


@pytest.mark.parametrize("name", list(CASES))
def test_training_step_gradients(name):
    model, x = CASES[name]
    params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    names = [n for n, _ in model.named_parameters()]

    def step(inp, *weights):
        out = torch.func.functional_call(model, dict(zip(names, weights)), (inp,))
        loss = (out.float() ** 2).mean()
        return (loss, *torch.autograd.grad(loss, weights))

    compiled, _ = compile_fn(step, x, *params)
    expected = step(x, *params)
    torch.testing.assert_close(compiled(x, *params), expected, rtol=1e-3, atol=1e-4)
