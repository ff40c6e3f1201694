"""Training graphs hand tensors from the compiled forward to the compiled backward.

The backward's kernels are compiled for the strides the traced graph gives the
saved tensors, so the forward must return them in those strides, whichever
partitioner chose them (min-cut saves values the default one recomputes).
"""

from __future__ import annotations

import pytest
import torch


def _rotary_attention(x, wq, wk, cos, sin):
    batch, length, _ = x.shape
    q = (x @ wq).view(batch, length, 4, 8).transpose(1, 2)  # [B, H, T, D], not contiguous
    k = (x @ wk).view(batch, length, 4, 8).transpose(1, 2)

    def rotate(t):
        first, second = t[..., :4], t[..., 4:]
        return torch.cat((-second, first), dim=-1)

    q = q * cos + rotate(q) * sin  # pointwise over the transposed layout
    k = k * cos + rotate(k) * sin
    scores = (q @ k.transpose(-1, -2)).softmax(-1)
    return (scores @ k).sum()


@pytest.mark.parametrize("partitioner", ["min_cut", "default"])
def test_saved_tensors_reach_the_backward_in_the_traced_strides(partitioner):
    import ember

    torch.manual_seed(0)
    x = torch.randn(2, 16, 32, requires_grad=True)
    wq = (torch.randn(32, 32) * 0.2).requires_grad_()
    wk = (torch.randn(32, 32) * 0.2).requires_grad_()
    cos, sin = torch.randn(16, 8), torch.randn(16, 8)
    inputs = (x, wq, wk)
    expected = torch.autograd.grad(_rotary_attention(*inputs, cos, sin), inputs)
    compiled = ember.compile(
        _rotary_attention, backend="inductor", options={"partitioner": partitioner}
    )
    got = torch.autograd.grad(compiled(*inputs, cos, sin), inputs)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_a_llama_layer_trains_like_eager():
    transformers = pytest.importorskip("transformers")
    import ember

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100, max_position_embeddings=64, use_cache=False,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 100, (2, 16))

    def grads(run):
        model.zero_grad(set_to_none=True)
        run(ids).logits.float().sin().mean().backward()
        return [p.grad.clone() for p in model.parameters()]

    expected = grads(model)
    got = grads(ember.compile(model, backend="inductor"))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
