"""Whole decoder layers as the regions (ember.regions), layers defining their own __call__.

transformers' decoder layers (Llama, Mistral, Qwen2, ...) derive from
`GradientCheckpointingLayer`, which in some versions defines its own `__call__` (a check
of its checkpointing flags, then `super().__call__(...)`). Capture tags that call as the
layer's module call, as for a layer without one, so the repeated region is the whole
layer (attention, norms and MLP), not each layer's attention with the rest cut out
between. Every test compares against eager PyTorch.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import ember
from ember.regions import plan_pieces


class OwnCallLayer(nn.Module):
    """A layer whose class defines `__call__`, reaching nn.Module's by super()."""

    def __init__(self, width: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)
        self.checkpointing = False

    def __call__(self, *args, **kwargs):
        if self.checkpointing and self.training:
            kwargs["scale"] = None
        return super().__call__(*args, **kwargs)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.up(self.norm(x)))
        h = self.down(h) * torch.sigmoid(x)
        if scale is not None:
            h = h * scale
        return x + torch.tanh(h) * 0.5


class Stack(nn.Module):
    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.layers = nn.ModuleList(layers)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h, scale=scale)
        return self.head(h)


def _graphs(model: nn.Module, *args, **kwargs) -> list:
    graphs = []

    def record(gm: torch.fx.GraphModule, example_inputs: list):
        graphs.append((gm, example_inputs))
        return gm.forward

    ember.compile(model, backend=record)(*args, **kwargs)
    return graphs


def _regions(model: nn.Module, *args, **kwargs) -> tuple[list[str], int]:
    """The regions' module calls ("self.layers.0 (Cls)") and how many distinct ones."""
    ((gm, examples),) = _graphs(model, *args, **kwargs)
    pieces = plan_pieces(gm, examples)
    assert pieces is not None
    regions = [piece for piece in pieces if piece.region]
    return [piece.region for piece in regions], len({piece.signature for piece in regions})


def _assert_step_matches_eager(model: nn.Module, step) -> None:
    """`step(fn)` (returning a tensor) through ember equals eager: output and gradients."""
    model.zero_grad()
    out = step(ember.compile(model))
    out.float().square().mean().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    expected = step(model)
    expected.float().square().mean().backward()
    torch.testing.assert_close(out, expected)
    assert grads.keys() == {n for n, p in model.named_parameters() if p.grad is not None}
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            torch.testing.assert_close(grads[name], parameter.grad, msg=name)


def test_layers_with_their_own_call_are_the_regions():
    torch.manual_seed(0)
    model = Stack([OwnCallLayer() for _ in range(4)])
    x, scale = torch.randn(2, 5, 8), torch.rand(16)
    names, distinct = _regions(model, x, scale)
    assert names == [f"self.layers.{i} (OwnCallLayer)" for i in range(4)]
    assert distinct == 1
    _assert_step_matches_eager(model, lambda fn: fn(x, scale))


def test_own_call_changing_arguments_matches_eager():
    """The class's __call__ drops an argument when its flags say so: traced, not skipped."""
    torch.manual_seed(0)
    model = Stack([OwnCallLayer() for _ in range(4)])
    for layer in model.layers:
        layer.checkpointing = True
    x, scale = torch.randn(2, 5, 8), torch.rand(16) + 1.0
    model.train()
    _assert_step_matches_eager(model, lambda fn: fn(x, scale))
    model.eval()
    _assert_step_matches_eager(model, lambda fn: fn(x, scale))


def test_own_call_layer_with_a_hook_or_other_shapes_is_not_merged():
    torch.manual_seed(0)
    layers = [OwnCallLayer() for _ in range(3)] + [OwnCallLayer(hidden=48)]
    layers += [OwnCallLayer() for _ in range(3)]
    model = Stack(layers)
    model.layers[5].register_forward_hook(lambda module, args, out: out * 2.0)
    x, scale = torch.randn(2, 5, 8), torch.rand(16)
    ((gm, examples),) = _graphs(model, x, scale)
    pieces = plan_pieces(gm, examples)
    by_layer = {p.region.split(" ")[0]: p.signature for p in pieces if p.region}
    alike = {by_layer[f"self.layers.{i}"] for i in (0, 1, 2, 4, 6)}
    assert len(alike) == 1
    for other in ("self.layers.3", "self.layers.5"):  # another MLP width; a hook
        assert by_layer.get(other) not in alike
    _assert_step_matches_eager(model, lambda fn: fn(x, scale))


# ----------------------------------------------------------------- transformers' layers

transformers = pytest.importorskip("transformers")

LAYERS = 4
_COMMON = {
    "num_hidden_layers": LAYERS, "hidden_size": 32, "intermediate_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 101,
    "max_position_embeddings": 64,
}  # fmt: skip
DECODERS = {
    "llama": ("LlamaConfig", "LlamaModel", "LlamaDecoderLayer"),
    "mistral": ("MistralConfig", "MistralModel", "MistralDecoderLayer"),
    "qwen2": ("Qwen2Config", "Qwen2Model", "Qwen2DecoderLayer"),
}


def _decoder(kind: str, **config) -> tuple[nn.Module, str]:
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            n_layer=LAYERS, n_embd=32, n_head=2, n_positions=64, vocab_size=101,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **config,
        )  # fmt: skip
        return transformers.GPT2Model(config), "self.h"
    config_class, model_class, _ = DECODERS[kind]
    config = getattr(transformers, config_class)(**_COMMON, **config)
    return getattr(transformers, model_class)(config), "self.layers"


def _layer_class(kind: str) -> str:
    return "GPT2Block" if kind == "gpt2" else DECODERS[kind][2]


def _inputs(mask: bool) -> dict:
    ids = torch.randint(0, 101, (2, 12), generator=torch.Generator().manual_seed(1))
    kwargs = {"input_ids": ids}
    if mask:
        attention_mask = torch.ones(2, 12, dtype=torch.long)
        attention_mask[0, :3] = 0  # left padding
        kwargs["attention_mask"] = attention_mask
    return kwargs


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "gpt2"])
@pytest.mark.parametrize("mode", ["train", "eval_mask", "eval_mask_cache"])
def test_decoder_layers_are_whole_regions(kind, mode):
    cache = mode.endswith("cache")
    model, prefix = _decoder(kind, use_cache=cache)
    model.train(mode == "train")
    kwargs = _inputs(mask="mask" in mode)
    if cache:
        kwargs["past_key_values"] = transformers.DynamicCache(config=model.config)
    with torch.set_grad_enabled(mode == "train"):
        names, distinct = _regions(model, **kwargs)
    assert names == [f"{prefix}.{i} ({_layer_class(kind)})" for i in range(LAYERS)]
    assert distinct == 1


def _with_own_call(layer_class: type) -> type:
    """`layer_class` defining `__call__` as transformers 5.17's GradientCheckpointingLayer
    does: the checkpointing flags checked, then super().__call__."""

    def __call__(self, *args, **kwargs):
        if self.gradient_checkpointing and self.training:
            if "past_key_values" in kwargs and kwargs["past_key_values"] is not None:
                kwargs["past_key_values"] = None
            return self._gradient_checkpointing_func(
                functools.partial(super(own, self).__call__, **kwargs), *args
            )
        return super(own, self).__call__(*args, **kwargs)

    own = type(f"OwnCall{layer_class.__name__}", (layer_class,), {"__call__": __call__})
    return own


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_decoder_layers_with_their_own_call_are_whole_regions(kind):
    model, _ = _decoder(kind, use_cache=False)
    own = _with_own_call(type(model.layers[0]))
    for layer in model.layers:
        layer.__class__ = own
    kwargs = _inputs(mask=True)
    names, distinct = _regions(model.train(), **kwargs)
    assert names == [f"self.layers.{i} ({own.__name__})" for i in range(LAYERS)]
    assert distinct == 1
    _assert_step_matches_eager(model, lambda fn: fn(**kwargs).last_hidden_state)
    # with checkpointing on, the class's __call__ checkpoints super().__call__
    model.gradient_checkpointing_enable()
    for layer in model.layers:
        assert layer.gradient_checkpointing
    _assert_step_matches_eager(model, lambda fn: fn(**kwargs).last_hidden_state)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "gpt2"])
def test_decoder_layer_regions_match_eager(kind):
    """A training step with a padding mask, and a prefill then a decode step through a
    DynamicCache (logits of a causal LM and the cache written), equal eager."""
    model, _ = _decoder(kind, use_cache=False)
    kwargs = _inputs(mask=True)
    _assert_step_matches_eager(model.train(), lambda fn: fn(**kwargs).last_hidden_state)

    torch.manual_seed(0)
    lm = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}.get(kind)
    lm = lm or {"mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}[kind]
    lm = getattr(transformers, lm)(model.config).eval()
    compiled = ember.compile(lm)
    results = []
    for fn in (compiled, lm):
        cache = transformers.DynamicCache(config=lm.config)
        with torch.no_grad():
            first = fn(**kwargs, past_key_values=cache, use_cache=True).logits
            mask = torch.cat([kwargs["attention_mask"], torch.ones(2, 1, dtype=torch.long)], 1)
            ids = first[:, -1:].argmax(-1)
            second = fn(input_ids=ids, attention_mask=mask, past_key_values=cache).logits
        results.append((first, second, [layer.keys.clone() for layer in cache.layers]))
    torch.testing.assert_close(results[0], results[1])
