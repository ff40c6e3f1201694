"""Channels-last convolutions in the Triton generator, against eager (bf16, float64 reference).

Under the interpreter on the CPU the convolutions are ATen's CPU kernels on
channels-last tensors; on a GPU, cuDNN's.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from graph_helpers import trace

from inductor_codegen import compile_graph

pytest.importorskip("triton")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class Bottleneck(nn.Module):
    def __init__(self, channels=16, width=8):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(channels, width, 1, bias=False), nn.BatchNorm2d(width)
        self.c2, self.b2 = nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)
        self.c3, self.b3 = nn.Conv2d(width, channels, 1, bias=False), nn.BatchNorm2d(channels)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)))
        return torch.relu(self.b3(self.c3(y)) + x)


def network(dtype):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), Bottleneck(), Bottleneck(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )  # fmt: skip
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2)
            m.weight.data.normal_()
            m.bias.data.normal_()
    return model.eval().to(DEVICE, dtype)


def relative(actual, expected) -> float:
    return float((actual.double() - expected).norm() / expected.norm())


def test_convolutions_run_channels_last_and_match_eager():
    model = network(torch.bfloat16)
    x = torch.randn(2, 3, 20, 20, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        compiled = compile_graph(trace(model, x), [x], options={"device_codegen": "triton"})
        actual = compiled(x)
        expected = model.double()(x.double())
    assert relative(actual, expected) < 2e-2
    wrapper = compiled.artifact("wrapper")
    # Every convolution result is channels-last, and no activation is copied between them
    # (the only copies are of the graph input and the weights).
    assert wrapper.count("(1600, 1, 160, 16))") >= 3
    assert "(1600, 100, 10, 1)" not in wrapper


def test_a_returned_convolution_keeps_the_eager_layout():
    conv = nn.Conv2d(4, 8, 3, padding=1).to(DEVICE, torch.bfloat16)
    x = torch.randn(2, 4, 6, 6, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        compiled = compile_graph(trace(conv, x), [x], options={"device_codegen": "triton"})
        actual, expected = compiled(x), conv(x)
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=2e-2)


def test_float32_convolutions_are_left_alone():
    model = network(torch.float32)
    x = torch.randn(2, 3, 20, 20, device=DEVICE)
    with torch.no_grad():
        compiled = compile_graph(trace(model, x), [x], options={"device_codegen": "triton"})
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert "(1600, 1, 160, 16)" not in compiled.artifact("wrapper")


def test_bf16_training_step_through_channels_last_convolutions():
    model = network(torch.bfloat16).train()
    reference = copy.deepcopy(model).double()
    eager_model = copy.deepcopy(model)
    names = [n for n, _ in model.named_parameters()]
    x = torch.randn(2, 3, 12, 12, device=DEVICE, dtype=torch.bfloat16)

    def step_of(module):
        def step(inp, *weights):
            out = torch.func.functional_call(module, dict(zip(names, weights)), (inp,))
            loss = out.double().square().mean()
            return (loss, *torch.autograd.grad(loss, weights))

        return step

    weights = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    graph = trace(step_of(model), x, *weights)
    compiled = compile_graph(graph, [x, *weights], options={"device_codegen": "triton"})
    actual = compiled(x, *weights)
    weights64 = [w.detach().double().requires_grad_(True) for w in weights]
    expected = step_of(reference)(x.double(), *weights64)
    eager = step_of(eager_model)(x, *weights)  # bf16 eager: the error to stay near
    for a, e, b in zip(actual, expected, eager):
        assert relative(a.detach(), e.detach()) <= 2 * relative(b.detach(), e.detach()) + 1e-2


# ---------------------------------------------------------------- padded matmuls


@pytest.fixture
def pad_small_products(monkeypatch):
    from inductor_codegen.codegen.triton import padding

    monkeypatch.setattr(padding, "MIN_PADDED_WORK", 1)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, w, b: a @ w.t(),
        lambda a, w, b: torch.nn.functional.linear(a, w, b),
        lambda a, w, b: torch.relu(a @ w.t().contiguous()) * 2,
    ],
    ids=["mm_transposed_weight", "addmm", "mm_then_pointwise"],
)
def test_unaligned_products_are_padded(pad_small_products, fn):
    a = torch.randn(12, 30, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(50, 30, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(50, device=DEVICE, dtype=torch.bfloat16)
    compiled = compile_graph(trace(fn, a, w, b), [a, w, b], options={"device_codegen": "triton"})
    actual = compiled(a, w, b)
    expected = fn(a.double(), w.double(), b.double())
    assert actual.shape == expected.shape
    assert relative(actual, expected) < 1e-2
    wrapper = compiled.artifact("wrapper")
    # the weight padded in its own order (N 50 -> 56 rows, K 30 -> 32), read transposed
    assert "empty_strided((56, 32), (32, 1)" in wrapper and "torch_linear(" in wrapper


@pytest.mark.parametrize("visible", [True, False], ids=["user_visible", "unmarked"])
def test_a_padded_product_the_user_gets_is_returned_as_its_window(pad_small_products, visible):
    """GPT2's logits: the (M, N) window of the padded product, rows N_pad apart, as
    torch.compile returns them; an output not marked user-visible gets eager's strides."""
    from inductor_codegen.lowering.graph import USER_VISIBLE_OUTPUTS

    def fn(a, w):
        return (a @ w.t()).view(2, 6, 50), a.sum()

    a = torch.randn(12, 30, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(50, 30, device=DEVICE, dtype=torch.bfloat16)
    gm = trace(fn, a, w)
    if visible:
        output = next(n for n in gm.graph.nodes if n.op == "output")
        output.meta[USER_VISIBLE_OUTPUTS] = (0, 1)
    compiled = compile_graph(gm, [a, w], options={"device_codegen": "triton"})
    logits, total = compiled(a, w)
    expected = fn(a.double(), w.double())[0]
    assert relative(logits, expected) < 1e-2
    assert logits.stride() == ((6 * 56, 56, 1) if visible else (300, 50, 1))
    torch.testing.assert_close(total, a.sum())


# ---------------------------------------------------------------- attention strides


def test_attention_gets_its_traced_strides():
    from inductor_codegen.codegen.triton.strides import _traced

    class Recorder:
        def realize(self, value, layout_hint=None):
            self.hint = layout_hint
            return value

    x = torch.randn(2, 3, 4).transpose(1, 2)  # traced as a transposed view
    gm = trace(lambda t: t * 2, x)
    node = next(n for n in gm.graph.nodes if n.op == "placeholder")
    from inductor_codegen.ir import Layout, TensorValue

    contiguous = TensorValue.of_buffer(
        "buf0", Layout.contiguous(x.dtype, tuple(map(sympy_int, x.shape)))
    )
    ctx = Recorder()
    _traced(ctx, contiguous, node)
    assert tuple(int(s) for s in ctx.hint.stride) == x.stride()
    same = TensorValue.of_buffer("buf1", ctx.hint)
    assert _traced(Recorder(), same, node) is same  # already in the traced strides: no copy


def test_an_attention_operand_the_graph_returns_is_stored_once():
    """A value computed for an attention call and returned by the graph (the key/value cache
    a decode step extends and returns) is one buffer, not stored for the call and again
    for the output."""
    from inductor_codegen.codegen.triton.strides import _traced
    from inductor_codegen.ir import TensorValue
    from inductor_codegen.lowering.graph import layout_of

    x = torch.randn(2, 3, 4)
    gm = trace(lambda t: t * 2, x)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.meta["val"] = x * 2

    class Context:
        def __init__(self):
            self.stored = {}

        def realize(self, value, layout_hint=None):
            return self.stored.setdefault(
                id(value), TensorValue.of_buffer(f"buf{len(self.stored)}", layout_hint)
            )

    computed = TensorValue(x.dtype, tuple(map(sympy_int, x.shape)), lambda idx: None)
    ctx = Context()
    first = _traced(ctx, computed, node)
    assert ctx.realize(computed, layout_of(node.meta["val"], where="out")) is first
    assert len(ctx.stored) == 1


def test_attention_takes_a_slice_at_an_aligned_offset_as_it_is():
    """k and v sliced out of one qkv projection reach the kernel as views, not copies."""
    from inductor_codegen.codegen.triton.strides import _traced
    from inductor_codegen.ir import Layout, TensorValue

    class Recorder:
        hint = None

        def realize(self, value, layout_hint=None):
            self.hint = layout_hint
            return value

    qkv = torch.randn(2, 5, 3 * 32)

    def fn(t):
        return t.split(32, dim=2)[1].view(2, 5, 4, 8).transpose(1, 2) * 2

    gm = trace(fn, qkv)
    node = next(n for n in gm.graph.nodes if n.op == "call_function" and "mul" in str(n.target))
    k = node.args[0]  # the sliced, transposed view the multiply reads
    stride = tuple(map(sympy_int, k.meta["val"].stride()))
    size = tuple(map(sympy_int, k.meta["val"].shape))
    for offset, copied in ((32, False), (0, False), (33, True)):  # 128 B, 0 B, 132 B
        view = TensorValue.of_buffer("buf0", Layout(qkv.dtype, size, stride, sympy_int(offset)))
        ctx = Recorder()
        result = _traced(ctx, view, k)
        assert (ctx.hint is not None) == copied, offset
        assert copied or result is view


def sympy_int(n):
    import sympy

    return sympy.Integer(n)


# ---------------------------------------------------------------- shared values


def test_a_shared_value_reading_many_buffers_is_stored_once(monkeypatch):
    from inductor_codegen.codegen.triton import realize

    def fn(a, b, c, d, e):
        stream = a + b + c + d + e  # a residual stream after four layers
        return stream.softmax(-1), (stream * 2).sum(0)

    args = [torch.randn(6, 40, device=DEVICE) for _ in range(5)]
    stored = compile_graph(trace(fn, *args), args, options={"device_codegen": "triton"})
    for actual, expected in zip(stored(*args), fn(*args)):
        torch.testing.assert_close(actual, expected)
    monkeypatch.setattr(realize, "READS_THRESHOLD", 100)
    recomputed = compile_graph(trace(fn, *args), args, options={"device_codegen": "triton"})
    count = lambda c: c.artifact("lower").count("ComputedBuffer")  # noqa: E731
    assert count(stored) == count(recomputed) + 1


def test_small_broadcast_reads_do_not_count_toward_storing_a_shared_value(monkeypatch):
    # one large read and four per-column vectors (a norm's statistics and affine
    # parameters): recomputing it in each reader reads the large one again, no more
    def fn(x, m, v, w, b):
        y = (x - m) * v * w + b
        return y.softmax(-1), (y * 2).sum(0)

    from inductor_codegen.codegen.triton import realize

    x = torch.randn(64, 40, device=DEVICE)
    args = [x, *(torch.randn(40, device=DEVICE) for _ in range(4))]
    options = {"device_codegen": "triton"}
    compiled = compile_graph(trace(fn, *args), args, options=options)
    for actual, expected in zip(compiled(*args), fn(*args)):
        torch.testing.assert_close(actual, expected)
    monkeypatch.setattr(realize, "READS_THRESHOLD", 100)
    recomputed = compile_graph(trace(fn, *args), args, options=options)
    count = lambda c: c.artifact("lower").count("ComputedBuffer")  # noqa: E731
    assert count(compiled) == count(recomputed)


def compiled_module(model, x):
    """`model` (bf16, eval) compiled with its parameters and buffers as graph inputs, checked
    against a float64 copy of it; returns the compiled graph."""
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    values = [*model.parameters(), *model.buffers()]

    def fn(x, *params):
        return torch.func.functional_call(model, dict(zip(names, params)), (x,))

    with torch.no_grad():
        compiled = compile_graph(
            trace(fn, x, *values), [x, *values], options={"device_codegen": "triton"}
        )
        reference = copy.deepcopy(model).double()(x.double())
        assert relative(compiled(x, *values), reference) < 1e-2
    return compiled


def test_normalized_activation_feeds_the_next_convolution_in_bf16():
    # conv -> batch norm -> hardswish -> depthwise conv (channels-last, as its result is
    # not a graph output) -> relu: the normalized value, cast to float32 for hardswish,
    # is read twice by one expression; it is not stored as a float32 buffer (and copied
    # again to channels-last), the kernel writes NHWC bf16
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(8, 32, 1, bias=False), nn.BatchNorm2d(32), nn.Hardswish(),
        nn.Conv2d(32, 32, 5, padding=2, groups=32, bias=False), nn.ReLU(),
    )  # fmt: skip
    model[1].running_mean.normal_()
    model[1].running_var.uniform_(0.5, 2)
    model = model.eval().to(DEVICE, torch.bfloat16)
    x = torch.randn(2, 8, 14, 14, device=DEVICE, dtype=torch.bfloat16)
    wrapper = compiled_module(model, x).artifact("wrapper")
    assert "torch.float32" not in wrapper, wrapper


def test_max_pooling_between_convolutions_stays_channels_last():
    # a ResNet stem: conv -> batch norm -> relu -> max pool -> conv; the pooled values
    # are written once, channels-last, and the pooling indices nobody reads are not computed
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(3, 2, 1), nn.Conv2d(16, 8, 1, bias=False), nn.ReLU(),
    )  # fmt: skip
    model = model.eval().to(DEVICE, torch.bfloat16)
    x = torch.randn(2, 3, 32, 32, device=DEVICE, dtype=torch.bfloat16)
    compiled = compiled_module(model, x)
    wrapper = compiled.artifact("wrapper")
    between = wrapper.split("torch_convolution(")[1]
    assert between.count(".launch(") == 1, between  # one kernel from conv to conv
    assert "torch.int64" not in compiled.artifact("lower")
    # channels-last buffers are allocated as the NCHW views the convolutions take
    assert "as_strided" not in wrapper, wrapper


# ---------------------------------------------------------------- saved activations


def _conv_bn_relu_block(x, w1, w2, g, b):
    y = torch.nn.functional.conv2d(x, w1, padding=1)
    y = torch.relu(torch.nn.functional.batch_norm(y, None, None, g, b, training=True))
    z = torch.nn.functional.conv2d(y, w2, padding=1, groups=4)
    return torch.relu(z + y).float().mean((2, 3))


def test_bf16_saved_activations_stay_channels_last_into_the_backward():
    from aot_autograd import aot_function
    from prim_decomp import inductor_default

    torch.manual_seed(0)
    x = torch.randn(2, 8, 6, 6, device=DEVICE, dtype=torch.bfloat16)
    params = [
        torch.randn(8, 8, 3, 3, device=DEVICE, dtype=torch.bfloat16),
        torch.randn(8, 2, 3, 3, device=DEVICE, dtype=torch.bfloat16),
        torch.rand(8, device=DEVICE, dtype=torch.bfloat16) + 0.5,
        torch.randn(8, device=DEVICE, dtype=torch.bfloat16),
    ]
    params = [p.requires_grad_(True) for p in params]
    compiled = []

    def compiler(gm, example_inputs):
        compiled.append(compile_graph(gm, example_inputs, options={"device_codegen": "triton"}))
        return compiled[-1]

    fn = aot_function(
        _conv_bn_relu_block, fw_compiler=compiler, bw_compiler=compiler,
        decompositions=inductor_default,
    )  # fmt: skip
    out = fn(x, *params)
    grads = torch.autograd.grad(out.square().sum(), params)
    params64 = [p.detach().double().requires_grad_(True) for p in params]
    out64 = _conv_bn_relu_block(x.double(), *params64)
    expected = torch.autograd.grad(out64.square().sum(), params64)
    eager = torch.autograd.grad(_conv_bn_relu_block(x, *params).square().sum(), params)
    assert relative(out.detach(), out64.detach()) <= 1e-2
    for a, e, b in zip(grads, expected, eager):
        assert relative(a, e) <= 2 * relative(b, e) + 1e-2
        assert a.stride() == b.stride() or a.shape[1] == 1
    forward, backward = compiled
    nhwc = (288, 1, 48, 8)
    assert nhwc in forward.output_strides  # saved convolution outputs, as computed
    # the backward reads them as they are: no NCHW buffer of an activation's shape
    assert "(2, 8, 6, 6), (288, 36, 6, 1)" not in backward.artifact("wrapper")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fused attention kernels need a GPU")
def test_a_decode_steps_extended_cache_is_computed_once_for_attention_and_output(tmp_path):
    """The new key/value caches feed the fused attention call and are returned: each is
    one kernel writing one buffer (it was computed twice, once per reader)."""
    import torch.nn.functional as F

    def step(q, k_cache, v_cache, k_new, v_new):
        k = torch.cat([k_cache, k_new], dim=2)
        v = torch.cat([v_cache, v_new], dim=2)
        return F.scaled_dot_product_attention(q, k, v), k, v

    def make(n):
        shape = (1, 4, n, 64)
        return [torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in
                [(1, 4, 1, 64), shape, shape, (1, 4, 1, 64), (1, 4, 1, 64)]]  # fmt: skip

    args = make(17)
    compiled = compile_graph(
        trace(step, *args), args, options={"device_codegen": "triton", "cache_dir": str(tmp_path)}
    )
    got, expected = compiled(*args), step(*args)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-2)
    wrapper = compiled.artifact("wrapper")
    assert wrapper.count("empty_strided((1, 4, 18, 64)") == 2, wrapper  # k and v, once each
    assert wrapper.count(".launch(") <= 2
