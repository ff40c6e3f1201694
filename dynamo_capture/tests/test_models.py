"""Real model code: transformers GPT2, BERT, Llama and T5 from small configs, one graph each."""

from __future__ import annotations

import copy

import pytest
import torch

import dynamo_capture

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def gpt2():
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64)
    return transformers.GPT2LMHeadModel(config), {"input_ids": (2, 8), "use_cache": False}


def bert():
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
    )
    return transformers.BertModel(config), {"input_ids": (2, 8)}


def llama():
    config = transformers.LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, vocab_size=100,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config), {"input_ids": (2, 8), "use_cache": False}


def t5():
    config = transformers.T5Config(
        d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, vocab_size=100
    )
    inputs = {"input_ids": (2, 8), "decoder_input_ids": (2, 5), "use_cache": False}
    return transformers.T5ForConditionalGeneration(config), inputs


MODELS = {"gpt2": gpt2, "bert": bert, "llama": llama, "t5": t5}


def make_inputs(spec):
    generator = torch.Generator().manual_seed(0)
    return {
        key: torch.randint(0, 100, value, generator=generator)
        if isinstance(value, tuple)
        else value
        for key, value in spec.items()
    }


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_model_one_graph_equal_to_eager(name, train):
    torch.manual_seed(0)
    model, spec = MODELS[name]()
    model.train(train)
    eager, target = model, copy.deepcopy(model)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = dynamo_capture.optimize(target, backend=backend, fullgraph=True)
    inputs = make_inputs(spec)
    for _ in range(2):
        torch.manual_seed(1)
        expected = eager(**inputs)
        torch.manual_seed(1)
        got = compiled(**inputs)
        assert type(got) is type(expected)
        torch.testing.assert_close(got.to_tuple(), expected.to_tuple())
    assert len(graphs) == 1
    assert len(compiled.entries) == 1
    if train:
        expected[0].sum().backward()
        got[0].sum().backward()
        for (pname, a), (_, b) in zip(
            target.named_parameters(), eager.named_parameters(), strict=True
        ):
            if b.grad is not None:
                torch.testing.assert_close(a.grad, b.grad, msg=f"grad of {pname}")
