"""The first generate() call compiles two entries, not three (option `deferred_recompiles`).

HF `generate()` with `model.forward` compiled makes three entries: the prefill, the
first decode step (the cache as long as the prompt: static) and the decode steps with
that length symbolic. The first decode step's entry is made after the frame's first
and is static, so its graph runs as captured on its one call of the first generate(),
uncompiled; in the second generate() the symbolic entry accepts its inputs, and it is
dropped without ever being compiled. Tokens equal eager's in every call; with the
option off, all three entries are compiled in the first call, as before.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import ember
from dynamo_capture.deferred_compile import DeferredCompile
from dynamo_capture.testing import CountingBackend
from ember.api import compiled_callable_of

transformers = pytest.importorskip("transformers")


def tiny_model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32,
            bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        return transformers.GPT2LMHeadModel(config).eval()
    config = transformers.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, hidden_size=32,
        intermediate_size=64, vocab_size=64, max_position_embeddings=32,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


def generate(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)


def _pending(compiled) -> list[bool]:
    return [
        isinstance(e.compiled, DeferredCompile) and e.compiled.pending for e in compiled.entries
    ]


@pytest.mark.parametrize(
    "kind, backend",
    [
        ("gpt2", "aot_eager"),
        ("llama", "aot_eager"),
        pytest.param("gpt2", "inductor", marks=pytest.mark.slow),
    ],
)
def test_first_decode_step_never_compiled(kind, backend):
    model = tiny_model(kind)
    ids = torch.randint(1, 64, (1, 6))
    expected = generate(model, ids)
    model.forward = ember.compile(model.forward, backend=backend)
    compiled = compiled_callable_of(model.forward)
    torch.testing.assert_close(generate(model, ids), expected, rtol=0, atol=0)
    assert _pending(compiled) == [False, True, False]  # the first decode step ran as captured
    for _ in range(2):
        torch.testing.assert_close(generate(model, ids), expected, rtol=0, atol=0)
        assert _pending(compiled) == [False, False]  # dropped: the symbolic steps cover it


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_option_off_compiles_every_entry(kind):
    model = tiny_model(kind)
    ids = torch.randint(1, 64, (1, 6))
    expected = generate(model, ids)
    options = {"deferred_recompiles": False}
    model.forward = ember.compile(model.forward, backend="aot_eager", options=options)
    compiled = compiled_callable_of(model.forward)
    for _ in range(2):
        torch.testing.assert_close(generate(model, ids), expected, rtol=0, atol=0)
        assert _pending(compiled) == [False, False, False]


def test_custom_backend_sees_every_entry_at_once():
    """A backend of the user's is called as each entry is made, as torch.compile does."""
    model = tiny_model("gpt2")
    ids = torch.randint(1, 64, (1, 6))
    backend = CountingBackend()
    model.forward = ember.compile(model.forward, backend=backend)
    generate(model, ids)
    assert backend.frame_count == len(compiled_callable_of(model.forward).entries) == 3


def test_option_checked():
    with pytest.raises(ember.InvalidArgumentError, match="deferred_recompiles"):
        ember.compile(lambda x: x, options={"deferred_recompiles": 1})
