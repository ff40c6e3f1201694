"""The model set through ember.compile(backend="inductor"), inference and training, against eager.

The models come from benchmarks/models.py (small configs, random weights); the
transformers ones are skipped where transformers is not installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import ember

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
if not (BENCHMARKS / "models.py").is_file():
    pytest.skip("benchmarks/models.py is not beside this checkout", allow_module_level=True)
sys.path.insert(0, str(BENCHMARKS))

from models import MODELS  # noqa: E402

# Each model captures into one graph: a break or a fallback to eager is a regression.
WHOLE_GRAPH = {"mlp", "cnn", "gpt2", "bert", "llama", "t5", "vit"}


def _case(name):
    try:
        return MODELS[name]()
    except ImportError as missing:
        pytest.skip(f"needs {missing.name}")


def _no_dropout(model):
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def _graphs_and_breaks(compiled):
    runner = ember.api.compiled_callable_of(compiled)
    return sum(not entry.eager for entry in runner.entries), runner.graph_breaks


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt2", "bert", "llama", "t5", "vit"])
def test_inference_matches_eager(name):
    case = _case(name)
    model = case.model.eval()
    compiled = ember.compile(model, backend="inductor")
    with torch.no_grad():
        expected = case.loss(model(*case.inputs))
        actual = case.loss(compiled(*case.inputs))
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    graphs, breaks = _graphs_and_breaks(compiled)
    if name in WHOLE_GRAPH:
        assert graphs == 1 and not breaks, breaks


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt2", "bert", "llama", "t5"])
def test_training_step_matches_eager(name):
    case = _case(name)
    model = _no_dropout(case.model.train())
    compiled = ember.compile(model, backend="inductor")

    def step(module):
        for parameter in model.parameters():
            parameter.grad = None
        loss = case.loss(module(*case.inputs))
        loss.backward()
        return loss.detach(), {
            n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
        }

    torch.manual_seed(0)
    expected_loss, expected_grads = step(model)
    torch.manual_seed(0)
    actual_loss, actual_grads = step(compiled)
    torch.testing.assert_close(actual_loss, expected_loss, rtol=1e-4, atol=1e-4)
    assert actual_grads.keys() == expected_grads.keys()
    for parameter_name, grad in expected_grads.items():
        torch.testing.assert_close(
            actual_grads[parameter_name], grad, rtol=1e-3, atol=1e-4, msg=parameter_name
        )
    graphs, breaks = _graphs_and_breaks(compiled)
    if name in WHOLE_GRAPH:
        assert graphs == 1 and not breaks, breaks
