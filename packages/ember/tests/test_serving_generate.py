"""Serving: HF `generate()` with a compiled forward (or module) stays compiled across calls.

Each generate() call makes a new cache object (DynamicCache, or a StaticCache
with `cache_implementation="static"`); the compiled entries are guarded on the
cache's type and layout, not on which cache it is, so later calls reuse the
entries of the first: prefill, first decode step, decode steps with a symbolic
length (a static cache has one decode entry). Tokens are compared with eager's.
"""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from copy_counting import CopyShapes

import ember
from dynamo_capture.testing import CountingBackend
from ember.api import compiled_callable_of

transformers = pytest.importorskip("transformers")

PROMPT = 6
NEW_TOKENS = 5


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


def generate(model: torch.nn.Module, ids: torch.Tensor, cache: str) -> torch.Tensor:
    settings = {"max_new_tokens": NEW_TOKENS, "do_sample": False, "pad_token_id": 0}
    if cache == "static":
        settings["cache_implementation"] = "static"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(ids, **settings)


def compile_for_generate(model: torch.nn.Module, how: str, backend) -> object:
    """Compile the model's forward (as `model.forward = ember.compile(model.forward)`)
    or the module in place; return the capture-level compiled callable."""
    if how == "forward":
        model.forward = ember.compile(model.forward, backend=backend)
        return compiled_callable_of(model.forward)
    ember.compile(model, backend=backend, inplace=True)
    return compiled_callable_of(model)


@pytest.mark.parametrize("how", ["forward", "module"])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_generate_stays_compiled_across_calls(kind, cache, how):
    model = tiny_model(kind)
    ids = torch.randint(1, 64, (2, PROMPT))
    expected = generate(model, ids, cache)
    backend = CountingBackend()
    compiled = compile_for_generate(model, how, backend)
    entries_per_call = []
    for _ in range(4):
        torch.testing.assert_close(generate(model, ids, cache), expected, rtol=0, atol=0)
        entries_per_call.append(len(compiled.entries))
    first = entries_per_call[0]
    assert first <= 3
    assert entries_per_call == [first] * 4  # no compile after the first call
    assert backend.frame_count == first
    assert not any(entry.eager for entry in compiled.entries)
    assert not compiled.graph_breaks


def test_generate_with_inductor_matches_eager_tokens():
    model = tiny_model("gpt2")
    ids = torch.randint(1, 64, (1, PROMPT))
    expected = generate(model, ids, "dynamic")
    compiled = compile_for_generate(model, "forward", "inductor")
    entries = []
    for _ in range(2):
        torch.testing.assert_close(generate(model, ids, "dynamic"), expected, rtol=0, atol=0)
        entries.append(len(compiled.entries))
    # the first decode step's entry, static, ran as captured and is dropped at the second
    # call, which the symbolic steps' entry takes (option deferred_recompiles)
    assert entries == [3, 2]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_static_cache_generate_with_inductor_writes_the_cache_in_place(kind):
    """Each decode step writes one position of each layer's key and value cache (the
    inductor backend calls `index_copy_` on the cache) and copies no cache back."""
    model = tiny_model(kind)
    ids = torch.randint(1, 64, (2, PROMPT))
    expected = generate(model, ids, "static")
    compile_for_generate(model, "forward", "inductor")
    generate(model, ids, "static")
    with CopyShapes() as copies:
        actual = generate(model, ids, "static")
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    assert not [shape for shape in copies.shapes if len(shape) == 4]  # (batch, heads, len, d)


def test_generate_compiles_as_many_frames_as_torch_compile():
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    reference = tiny_model("gpt2")
    counter = CompileCounter()
    reference.forward = torch.compile(reference.forward, backend=counter)
    model = tiny_model("gpt2")
    backend = CountingBackend()
    compile_for_generate(model, "forward", backend)
    ids = torch.randint(1, 64, (1, PROMPT))
    for _ in range(3):
        torch.testing.assert_close(
            generate(model, ids, "dynamic"), generate(reference, ids, "dynamic"), rtol=0, atol=0
        )
    torch._dynamo.reset()
    assert backend.frame_count == counter.frame_count == 3


def test_generate_recompile_log_names_the_failing_guard_of_each_entry(capsys):
    model = tiny_model("gpt2")
    ids = torch.randint(1, 64, (1, PROMPT))
    compile_for_generate(model, "forward", CountingBackend())
    logger = logging.getLogger("ember.recompiles")
    saved = logger.level
    logger.setLevel(logging.INFO)
    try:
        generate(model, ids, "dynamic")
        generate(model, ids, "dynamic")
    finally:
        logger.setLevel(saved)
    messages = []  # each recompile: its line, then one indented line per cached entry
    for line in capsys.readouterr().err.splitlines():
        if "Recompiling" in line:
            messages.append([line])
        elif messages and line.startswith("  entry "):
            messages[-1].append(line)
    assert len(messages) == 2  # first decode step, then decode steps with a symbolic length
    # the decode step differs from the prefill entry in the cache's state, not its identity
    assert "is_initialized" in " ".join(messages[0])
    assert "is gone" not in " ".join(sum(messages, []))
    assert len(messages[0]) == 2 and len(messages[1]) == 3  # every cached entry named
