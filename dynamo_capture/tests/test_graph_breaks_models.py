"""Real models with a break inside a layer: transformers GPT2, Llama and T5 from small
configs, with a `print` inserted in the MLP's forward (the class's forward is replaced
for the test). The result equals eager's; the model's code before and after the loop
over layers, each layer's forward around its MLP call and each MLP's forward around
the print are compiled; the second call compiles nothing new."""

from __future__ import annotations

import contextlib
import copy
import io

import pytest
import torch
from test_models import make_inputs

import dynamo_capture
from dynamo_capture.testing import CountingBackend

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

_ORIGINAL: dict[str, object] = {}


def printing_mlp_forward(self, *args, **kwargs):
    out = _ORIGINAL[type(self).__name__](self, *args, **kwargs)
    print("mlp", type(self).__name__)
    return out


def gpt2():
    from transformers.models.gpt2 import modeling_gpt2

    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64)
    model = transformers.GPT2LMHeadModel(config)
    return model, {"input_ids": (2, 8), "use_cache": False}, modeling_gpt2.GPT2MLP


def llama():
    from transformers.models.llama import modeling_llama

    config = transformers.LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, vocab_size=100,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    return model, {"input_ids": (2, 8), "use_cache": False}, modeling_llama.LlamaMLP


def t5():
    from transformers.models.t5 import modeling_t5

    config = transformers.T5Config(
        d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, vocab_size=100
    )
    inputs = {"input_ids": (2, 8), "decoder_input_ids": (2, 5), "use_cache": False}
    return transformers.T5ForConditionalGeneration(config), inputs, modeling_t5.T5LayerFF


MODELS = {"gpt2": gpt2, "llama": llama, "t5": t5}
# graphs a call compiles at most (model code, layers around the MLP call, MLPs around print)
MAX_GRAPHS = {"gpt2": 12, "llama": 12, "t5": 30}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_with_a_print_in_its_mlp(name, monkeypatch):
    torch.manual_seed(0)
    model, spec, mlp_class = MODELS[name]()
    _ORIGINAL[mlp_class.__name__] = mlp_class.forward
    monkeypatch.setattr(mlp_class, "forward", printing_mlp_forward)
    model.eval()
    eager, target = model, copy.deepcopy(model)
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(target, backend=backend)
    inputs = make_inputs(spec)
    for call in range(2):
        eager_text, got_text = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(eager_text):
            expected = eager(**inputs)
        with contextlib.redirect_stdout(got_text):
            got = compiled(**inputs)
        torch.testing.assert_close(got.to_tuple(), expected.to_tuple())
        assert got_text.getvalue() == eager_text.getvalue()
        if call == 0:
            graphs, breaks = len(backend.graphs), len(compiled.graph_breaks)
    assert (len(backend.graphs), len(compiled.graph_breaks)) == (graphs, breaks)
    assert breaks >= 1
    mlp_parts = [p for p in compiled.parts if "printing_mlp_forward" in p.frame.name]
    assert mlp_parts, "the MLP's forward ran as a compiled frame of its own"
    assert 2 <= graphs <= MAX_GRAPHS[name], f"{graphs} graphs"
