"""SGD steps through aot match eager: losses, grads, parameters and buffers."""

from __future__ import annotations

import copy

import pytest
import torch
from aot_checks import RecordingCompiler

from aot_autograd import aot_module, default_partition, min_cut_rematerialization_partition


def _mlp():
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.GELU(),
        torch.nn.Dropout(0.0),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.LayerNorm(64),
        torch.nn.Linear(64, 10),
    )
    return model, (torch.randn(16, 32),)


def _cnn():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    )
    return model, (torch.randn(4, 3, 16, 16),)


def _gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=32,
        vocab_size=100,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = transformers.GPT2LMHeadModel(config)
    tokens = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    return model, (tokens,)


def _loss(output) -> torch.Tensor:
    logits = output.logits if hasattr(output, "logits") else output
    return logits.sin().mean()


MODELS = {
    "mlp": (_mlp, default_partition),
    "cnn_batchnorm": (_cnn, min_cut_rematerialization_partition),
    "gpt2": (_gpt2, min_cut_rematerialization_partition),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_sgd_steps_match_eager(name):
    build, partition = MODELS[name]
    torch.manual_seed(0)
    eager, inputs = build()
    eager.train()
    compiled_model = copy.deepcopy(eager)
    compiler = RecordingCompiler()
    compiled = aot_module(compiled_model, compiler, partition_fn=partition)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.05)
    aot_opt = torch.optim.SGD(compiled_model.parameters(), lr=0.05)
    for _ in range(3):
        eager_loss = _loss(eager(*inputs))
        aot_loss = _loss(compiled(*inputs))
        torch.testing.assert_close(aot_loss, eager_loss, rtol=1e-4, atol=1e-5)
        eager_loss.backward()
        aot_loss.backward()
        for (pname, p), q in zip(eager.named_parameters(), compiled_model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=pname)
        eager_opt.step()
        aot_opt.step()
        eager_opt.zero_grad()
        aot_opt.zero_grad()
    for b, c in zip(eager.buffers(), compiled_model.buffers()):
        torch.testing.assert_close(c, b, rtol=1e-4, atol=1e-5)
    assert len(compiler.graphs) == 2  # one forward, one backward: no retracing per step


def test_dropout_training_matches_eager_under_the_same_seed():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.Dropout(0.3), torch.nn.ReLU(), torch.nn.Linear(64, 4)
    )
    compiled_model = copy.deepcopy(eager)
    compiled = aot_module(compiled_model, RecordingCompiler())
    x = torch.randn(16, 32)
    for seed in (1, 2):
        torch.manual_seed(seed)
        aot_loss = _loss(compiled(x))
        torch.manual_seed(seed)
        eager_loss = _loss(eager(x))
        torch.testing.assert_close(aot_loss, eager_loss)
        aot_loss.backward()
        eager_loss.backward()
    for p, q in zip(eager.parameters(), compiled_model.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
