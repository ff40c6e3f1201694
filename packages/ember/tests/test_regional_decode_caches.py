"""Repeated layers compiled once in a decode step with a KV cache (ember.regions).

A decode step hands every layer the cache (transformers' DynamicCache or StaticCache);
each layer reads and writes its own cache tensors. The cache must not make each
layer's graph a piece of its own: the layers are one region, compiled once, and the
step (logits and the cache it writes) matches eager.
"""

from __future__ import annotations

import copy

import pytest
import torch

import ember
from ember.regions import plan_pieces

transformers = pytest.importorskip("transformers")

LAYERS = 4


def _gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(
        n_layer=LAYERS, n_embd=64, n_head=4, vocab_size=128, n_positions=64,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config).eval()


def _llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(
        num_hidden_layers=LAYERS, hidden_size=64, intermediate_size=128,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
        max_position_embeddings=64,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


MODELS = {"gpt2": (_gpt2, "GPT2Block"), "llama": (_llama, "LlamaDecoderLayer")}


def _prefilled(model: torch.nn.Module, kind: str) -> tuple:
    """A cache after a 6-token prompt, the next token and its position."""
    prompt = torch.randint(0, 128, (1, 6))
    if kind == "static":
        cache = transformers.StaticCache(config=model.config, max_cache_len=16)
        model(prompt, past_key_values=cache, use_cache=True, cache_position=torch.arange(6))
    else:
        cache = model(prompt, use_cache=True).past_key_values
        assert isinstance(cache, transformers.DynamicCache)
    return cache, torch.randint(0, 128, (1, 1)), torch.tensor([6])


def _decode_step(model: torch.nn.Module):
    def step(ids, cache, position):
        out = model(ids, past_key_values=cache, use_cache=True, cache_position=position)
        return out.logits

    return step


def _cache_tensors(cache) -> list[torch.Tensor]:
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("kind", ["dynamic", "static"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_decode_step_with_kv_cache_compiles_repeated_layers_once(name, kind):
    make, block = MODELS[name]
    torch.manual_seed(0)
    model = make()
    graphs = []

    def record(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    with torch.no_grad():
        cache, token, position = _prefilled(model, kind)
        ember.compile(_decode_step(model), backend=record)(token, copy.deepcopy(cache), position)
    ((gm, examples),) = graphs
    pieces = plan_pieces(gm, examples)
    assert pieces is not None, "the decode step was compiled whole"
    regions = [piece.region for piece in pieces if piece.region]
    assert [region.split(" ")[-1] for region in regions] == [f"({block})"] * LAYERS
    # before the layers, the layer (once for all of them), after them
    assert len({piece.signature for piece in pieces}) == 3


@pytest.mark.parametrize("kind", ["dynamic", "static"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_decode_step_with_kv_cache_matches_eager(name, kind):
    make, _ = MODELS[name]
    torch.manual_seed(0)
    model = make()
    with torch.no_grad():
        cache, token, position = _prefilled(model, kind)
        expected_cache = copy.deepcopy(cache)
        expected = _decode_step(model)(token, expected_cache, position)
        compiled = ember.compile(_decode_step(model), backend="aot_eager")
        got = compiled(token, cache, position)
    torch.testing.assert_close(got, expected)
    for written, reference in zip(
        _cache_tensors(cache), _cache_tensors(expected_cache), strict=True
    ):
        torch.testing.assert_close(written, reference)


class IndexedCacheLayer(torch.nn.Module):
    """A layer writing its keys and values into one cache tensor shared by all layers,
    at its own index (`cache[self.index, ...] = k`)."""

    def __init__(self, index: int, width: int = 16) -> None:
        super().__init__()
        self.index = index
        self.norm = torch.nn.LayerNorm(width)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(width, width) for _ in range(4))

    def forward(self, x, cache, position):
        h = self.norm(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        cache[self.index, 0, :, position] = k
        cache[self.index, 1, :, position] = v
        keys = cache[self.index, 0, :, : position + 1]
        values = cache[self.index, 1, :, : position + 1]
        weights = torch.softmax(q @ keys.transpose(-1, -2) / 4.0, dim=-1)
        return x + self.o(weights @ values)


class IndexedCacheStack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(IndexedCacheLayer(i) for i in range(LAYERS))

    def forward(self, x, cache, position):
        for layer in self.layers:
            x = layer(x, cache, position)
        return x


@pytest.mark.xfail(
    strict=True,
    reason="each layer's graph holds its own index into the shared cache tensor as a "
    "constant, so the layers' graphs differ and the step is compiled whole",
)
def test_decode_step_with_one_indexed_cache_tensor_compiles_layers_once():
    torch.manual_seed(0)
    model = IndexedCacheStack()
    graphs = []

    def record(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    x, cache = torch.randn(1, 1, 16), torch.zeros(LAYERS, 2, 1, 8, 16)
    with torch.no_grad():
        ember.compile(model, backend=record)(x, cache, 3)
    ((gm, examples),) = graphs
    pieces = plan_pieces(gm, examples)
    assert pieces is not None, "the decode step was compiled whole"


def test_decode_step_with_one_indexed_cache_tensor_matches_eager():
    torch.manual_seed(0)
    model = IndexedCacheStack()
    x, cache = torch.randn(1, 1, 16), torch.zeros(LAYERS, 2, 1, 8, 16)
    with torch.no_grad():
        expected_cache = cache.clone()
        expected = model(x, expected_cache, 3)
        got = ember.compile(model, backend="aot_eager")(x, cache, 3)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(cache, expected_cache)
