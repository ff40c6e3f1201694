"""Autocast and grad-mode regions inside compiled code give eager's dtypes, values and grads.

Tracing records the casts autocast makes, region by region, so a compiled graph
runs with autocast off; the backward differentiates each op in the dtypes its
forward ran in. The yardstick for mixed precision is eager's own error: against
a float32 reference, the compiled error may be at most 3x eager-bf16's + 2e-3.
"""

from __future__ import annotations

import pytest
import torch

import aot_autograd
import ember

BACKENDS = ["aot_eager", "inductor"]


def _copies(args):
    return [
        a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
        for a in args
    ]


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _run(fn, args, *, autocast: bool, backward: bool):
    """Outputs and input grads of `fn(*args)`, called under CPU bf16 autocast when asked."""
    args = _copies(args)
    with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        outs = _as_tuple(fn(*args))
    if backward and any(o.requires_grad for o in outs):
        sum(o.float().sum() for o in outs if o.requires_grad).backward()
    grads = [a.grad if isinstance(a, torch.Tensor) else None for a in args]
    return outs, grads


def _assert_same_as_eager(fn, args, backend, *, autocast=True, backward=True):
    expected, expected_grads = _run(fn, args, autocast=autocast, backward=backward)
    compiled = ember.compile(fn, backend=backend)
    actual, actual_grads = _run(compiled, args, autocast=autocast, backward=backward)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.dtype == want.dtype
        assert got.requires_grad == want.requires_grad
        torch.testing.assert_close(got, want, rtol=2e-2, atol=5e-2)
    for got, want in zip(actual_grads, expected_grads):
        assert (got is None) == (want is None)
        if want is not None:
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=2e-2, atol=5e-2)


def _rope(x, pos):
    inv = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8))
    with torch.autocast("cpu", enabled=False):
        cos = (pos[:, None].float() @ inv[None, :]).cos()
    return (x @ x.t()).sum() + cos.sum(), cos


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_disabled_region_keeps_float32(backend):
    x, pos = torch.randn(16, 16), torch.arange(500, 520)
    with torch.autocast("cpu", torch.bfloat16):
        expected = _rope(x, pos)
        actual = ember.compile(_rope, backend=backend)(x, pos)
    assert actual[1].dtype == torch.float32 and actual[0].dtype == expected[0].dtype
    torch.testing.assert_close(actual[1], expected[1])


def _grad_through_disabled_region(x, w, pos):
    with torch.autocast("cpu", enabled=False):
        angles = pos[:, None].float() @ w.float()[None, :]
    return (x @ x.t()) * angles.cos()[:, :1].to(x.dtype) + angles.sin().sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_disabled_region_differentiates_in_float32(backend):
    x = torch.randn(12, 12, requires_grad=True)
    w = torch.randn(6, requires_grad=True)
    _assert_same_as_eager(_grad_through_disabled_region, [x, w, torch.arange(300, 312)], backend)


def _nested(x, w):
    with torch.autocast("cpu", enabled=False):
        a = x @ w
        with torch.autocast("cpu", dtype=torch.bfloat16):
            b = x @ w
    return a, b, (a * b.float()) @ w


@pytest.mark.parametrize("outer", [True, False], ids=["outer_autocast", "no_outer_autocast"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_autocast_regions_keep_each_regions_dtype(backend, outer):
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    _assert_same_as_eager(_nested, [x, w], backend, autocast=outer)


@torch.autocast("cpu", enabled=False)
def _float32_helper(x, w):
    return x.float() @ w.float()


def _calls_decorated(x, w):
    return _float32_helper(x, w) + (x @ w).float()


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_used_as_a_decorator(backend):
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    _assert_same_as_eager(_calls_decorated, [x, w], backend)


class _Float32Product(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.t(), a.t() @ grad


def _custom_function(x, w):
    return _Float32Product.apply(x @ w, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_fwd_and_custom_bwd(backend):
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    _assert_same_as_eager(_custom_function, [x, w], backend)


def _region_across_a_break(x, w):
    with torch.autocast("cpu", enabled=False):
        a = x @ w
        print("a graph break inside the region")
        b = x @ w
    return a, b, x @ w


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_region_across_a_graph_break(backend, capsys):
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    _assert_same_as_eager(_region_across_a_break, [x, w], backend)


def _float16_region(x, w):
    with torch.autocast("cpu", dtype=torch.float16):
        return x @ w


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_region_with_another_dtype(backend):
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    _assert_same_as_eager(_float16_region, [x, w], backend)


def _grad_regions(x, w):
    y = x @ w
    with torch.no_grad():
        z = y * 2
        with torch.enable_grad():
            u = (x * w).sum()
    with torch.set_grad_enabled(False):
        v = x + w
    with torch.inference_mode():
        i = x @ w
    return y + z, z, u, v, x * i.sum().item()


@pytest.mark.parametrize("autocast", [True, False], ids=["autocast", "float32"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_mode_regions_inside_compiled_code(backend, autocast):
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    _assert_same_as_eager(_grad_regions, [x, w], backend, autocast=autocast)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_called_inside_autocast(backend):
    def fn(x, w):
        with torch.autocast("cpu", enabled=False):
            return (x @ w).sin()

    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    compiled = ember.compile(fn, backend=backend)
    grads = []
    for f in (fn, compiled):
        a, b = _copies([x, w])
        with torch.autocast("cpu", torch.bfloat16):
            f(a, b).sum().backward()
        grads.append((a.grad, b.grad))
    for got, want in zip(grads[1], grads[0]):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=2e-2, atol=5e-2)


def test_aot_function_retraces_for_another_autocast_state():
    compiled = aot_autograd.aot_function(lambda x, w: x @ w, fw_compiler=lambda gm, ex: gm)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    assert compiled(x, w).dtype == torch.float32
    with torch.autocast("cpu", torch.bfloat16):
        assert compiled(x, w).dtype == torch.bfloat16
    assert compiled(x, w).dtype == torch.float32


# -- models -----------------------------------------------------------------------------------


def _relative_error(value, reference):
    return ((value - reference).norm() / reference.norm().clamp_min(1e-12)).item()


def _within_eager_error(compiled_error: float, eager_error: float) -> bool:
    return compiled_error <= 3 * eager_error + 2e-3


def _training_step(model, inputs, amp: bool):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", torch.bfloat16, enabled=amp):
        loss = model(**inputs)
        loss = loss.loss if hasattr(loss, "loss") else loss
    loss.backward()
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach().float(), grads


def _assert_amp_training_within_eager_error(model, inputs, backend):
    ref_loss, ref_grads = _training_step(model, inputs, amp=False)
    eager_loss, eager_grads = _training_step(model, inputs, amp=True)
    compiled = ember.compile(model, backend=backend)
    loss, grads = _training_step(compiled, inputs, amp=True)
    assert set(grads) == set(ref_grads)
    assert _within_eager_error(
        _relative_error(loss, ref_loss), _relative_error(eager_loss, ref_loss)
    )
    for name in ref_grads:
        error = _relative_error(grads[name], ref_grads[name])
        eager_error = _relative_error(eager_grads[name], ref_grads[name])
        assert _within_eager_error(error, eager_error), (name, error, eager_error)


class _RotaryBlock(torch.nn.Module):
    """A Llama-style attention block whose rotary angles are a float32 matmul (autocast off)."""

    def __init__(self, dim=32, heads=4, vocab=64):
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.out = torch.nn.Linear(dim, dim, bias=False)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        half = dim // heads // 2
        self.register_buffer(
            "inv_freq", 1.0 / (10000 ** (torch.arange(0, half, dtype=torch.float32) / half))
        )

    def _rotate(self, t, cos, sin):
        first, second = t.chunk(2, dim=-1)
        return t * cos + torch.cat((-second, first), dim=-1) * sin

    def forward(self, input_ids, position_ids, labels):
        h = self.embed(input_ids)
        b, s, d = h.shape
        q, k, v = self.qkv(h).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        with torch.autocast("cpu", enabled=False):
            freqs = (self.inv_freq[None, :, None] @ position_ids[:, None, :].float()).transpose(
                1, 2
            )
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos()[:, :, None, :], emb.sin()[:, :, None, :]
        q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        logits = self.head(h + self.out(attn.transpose(1, 2).reshape(b, s, d)))
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


@pytest.mark.parametrize("backend", BACKENDS)
def test_rotary_block_amp_training_within_eager_error(backend):
    torch.manual_seed(0)
    model = _RotaryBlock()
    ids = torch.randint(0, 64, (2, 24))
    inputs = {
        "input_ids": ids,
        "position_ids": torch.arange(700, 724).expand(2, -1),
        "labels": ids.roll(1, 1),
    }
    _assert_amp_training_within_eager_error(model, inputs, backend)


class _NormBlock(torch.nn.Module):
    """Linear, a norm whose float32 parameters meet the linear's bfloat16 output under
    autocast, GELU and a residual add: the norm's saved statistics in eager's dtype.
    `channels`: the norm takes (batch, channels, length); `bias`: the linear's (a batch
    norm makes its true gradient zero, where relative errors say nothing)."""

    def __init__(self, norm, channels=False, bias=True):
        super().__init__()
        self.fc, self.norm = torch.nn.Linear(8, 16, bias=bias), norm
        self.out, self.channels = torch.nn.Linear(16, 8), channels

    def forward(self, x):
        h = self.fc(x) + 1.0
        h = self.norm(h.unsqueeze(-1)).squeeze(-1) if self.channels else self.norm(h)
        return (x + self.out(torch.nn.functional.gelu(h))).float().sin().mean()


NORMS = {
    "layer_norm": lambda: _NormBlock(torch.nn.LayerNorm(16)),
    "layer_norm_no_bias": lambda: _NormBlock(torch.nn.LayerNorm(16, bias=False)),
    "layer_norm_no_affine": lambda: _NormBlock(torch.nn.LayerNorm(16, elementwise_affine=False)),
    "rms_norm": lambda: _NormBlock(torch.nn.RMSNorm(16)),
    "group_norm": lambda: _NormBlock(torch.nn.GroupNorm(4, 16), channels=True),
    "group_norm_no_affine": lambda: _NormBlock(
        torch.nn.GroupNorm(4, 16, affine=False), channels=True
    ),
    "batch_norm": lambda: _NormBlock(torch.nn.BatchNorm1d(16), channels=True, bias=False),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("norm", sorted(NORMS))
def test_norm_of_autocast_output_trains_within_eager_error(backend, norm):
    torch.manual_seed(0)
    model = NORMS[norm]()
    _assert_amp_training_within_eager_error(model, {"x": torch.randn(6, 8)}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_under_autocast_backward_outside_the_region(backend):
    torch.manual_seed(0)
    fc, norm = torch.nn.Linear(8, 16), torch.nn.LayerNorm(16)
    x = torch.randn(4, 8)
    grads = []
    for f in (
        lambda x: norm(fc(x) + 1.0),
        ember.compile(lambda x: norm(fc(x) + 1.0), backend=backend),
    ):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = f(x).float().sin().mean()
        loss.backward()
        params = [*fc.parameters(), *norm.parameters()]
        grads.append([p.grad.clone() for p in params])
        for p in params:
            p.grad = None
    for got, want in zip(grads[1], grads[0]):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=2e-2, atol=5e-3)


def _hf_model(kind):
    transformers = pytest.importorskip("transformers")
    config_class, model_class = {
        "llama": ("LlamaConfig", "LlamaForCausalLM"),
        "mistral": ("MistralConfig", "MistralForCausalLM"),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    }[kind]
    config = getattr(transformers, config_class)(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    return getattr(transformers, model_class)(config)


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2"])
def test_hf_causal_lm_amp_training_within_eager_error(kind):
    model = _hf_model(kind)
    ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(1))
    inputs = {
        "input_ids": ids,
        "labels": ids,
        "position_ids": torch.arange(400, 432).expand(2, -1),
    }
    _assert_amp_training_within_eager_error(model, inputs, "inductor")


def test_inductor_compiled_graph_called_inside_autocast_keeps_its_dtypes():
    inductor_codegen = pytest.importorskip("inductor_codegen")
    graph = torch.fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    graph.output((graph.call_function(torch.ops.aten.mm.default, (x, w)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    x.meta["val"], w.meta["val"] = a, b
    next(n for n in graph.nodes if n.op == "call_function").meta["val"] = a @ b
    compiled = inductor_codegen.compile_graph(gm, [a, b])
    with torch.autocast("cpu", torch.bfloat16):
        (out,) = compiled(a, b)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, a @ b)
