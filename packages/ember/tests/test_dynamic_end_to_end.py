"""Dynamic shapes through the whole stack: capture -> aot_autograd -> inductor_codegen.

A symbolic graph compiles once and serves every size, forward and backward, for
the backends that take symbolic graphs (aot_eager, inductor); results and grads
equal eager's at each size.
"""

from __future__ import annotations

import math

import pytest
import torch

import ember
from ember.api import compiled_callable_of


class Block(torch.nn.Module):
    """A pre-norm attention block with a dynamic batch and sequence length."""

    def __init__(self, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (width // heads) ** -0.5
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) * self.scale
        attended = scores.softmax(-1) @ v
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm(x))


SIZES = [(2, 5), (3, 9), (2, 16), (4, 7)]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dynamic", [True, None])
def test_block_compiles_once_for_every_size(backend, dynamic):
    torch.manual_seed(0)
    block = Block()
    compiled = ember.compile(block, backend=backend, dynamic=dynamic)
    for batch, length in SIZES:
        x = torch.randn(batch, length, 32, requires_grad=True)
        got = compiled(x)
        expected = block(x)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        (grad_got,) = torch.autograd.grad(got.sin().sum(), x)
        (grad_expected,) = torch.autograd.grad(expected.sin().sum(), x)
        torch.testing.assert_close(grad_got, grad_expected, rtol=1e-4, atol=1e-4)
    runner = compiled_callable_of(compiled)
    # dynamic=True: one symbolic graph; dynamic=None: static first, then one symbolic graph
    assert len(runner.entries) == (1 if dynamic else 2)


def test_inductor_symbolic_graph_has_size_arguments():
    torch.manual_seed(0)
    compiled = ember.compile(Block(), dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(2, 5, 32))
        compiled(torch.randn(3, 11, 32))
    runner = compiled_callable_of(compiled)
    assert len(runner.entries) == 1
    graph = runner.entries[0].graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    assert any(isinstance(n.meta.get("val"), torch.SymInt) for n in placeholders)


def test_dynamic_false_recompiles_per_size():
    compiled = ember.compile(Block(), dynamic=False)
    with torch.no_grad():
        for batch, length in SIZES[:3]:
            compiled(torch.randn(batch, length, 32))
    assert len(compiled_callable_of(compiled).entries) == 3


def _scaled_softmax(x: torch.Tensor) -> torch.Tensor:
    return (x * x.size(-1) ** 0.5).softmax(-1) / math.sqrt(x.size(0))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_floats_of_sizes_stay_symbolic_forward_and_backward(backend):
    # x.size(-1) ** 0.5 and math.sqrt(n) are SymFloats: saved for the backward, passed as scalars
    compiled = ember.compile(_scaled_softmax, backend=backend, dynamic=True)
    for n in (3, 5, 9, 17):
        x = torch.randn(n + 1, n, requires_grad=True)
        got, expected = compiled(x), _scaled_softmax(x)
        torch.testing.assert_close(got, expected)
        (grad_got,) = torch.autograd.grad(got.sin().sum(), x)
        (grad_expected,) = torch.autograd.grad(expected.sin().sum(), x)
        torch.testing.assert_close(grad_got, grad_expected)
    assert len(compiled_callable_of(compiled).entries) == 1


def _refuses_symbolic_graphs(gm: torch.fx.GraphModule, example_inputs: list):
    if any(isinstance(n.meta.get("val"), torch.SymInt) for n in gm.graph.nodes):
        raise RuntimeError("this backend compiles static graphs only")
    return gm.forward


_refuses_symbolic_graphs.supports_dynamic_shapes = True


def test_mark_dynamic_with_a_backend_that_fails_on_symbolic_graphs_falls_back_to_static():
    compiled = ember.compile(lambda x: x.sin() + 1, backend=_refuses_symbolic_graphs)
    for rows in (3, 5):
        x = torch.randn(rows, 4)
        ember.mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x), x.sin() + 1)


def test_tensorinv_with_a_size_solved_as_a_quotient_compiles_dynamic():
    """`tensorinv` needs a square matrix: the guard `s1*s1*s2 == s3` makes `s2` the size
    `s3/s1**2`, which the generated wrapper computes; outputs and grads match eager."""

    def fn(x):
        return torch.linalg.tensorinv(x, ind=3)

    x = torch.randn(2, 2, 3, 12, 1) + 4 * torch.eye(12).reshape(2, 2, 3, 12, 1)
    x_e, x_c = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled = ember.compile(fn, backend="inductor", fullgraph=True, dynamic=True)
    expected, actual = fn(x_e), compiled(x_c)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    grad = torch.randn_like(expected)
    torch.testing.assert_close(
        torch.autograd.grad(actual, x_c, grad),
        torch.autograd.grad(expected, x_e, grad),
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_slice_scatter_with_int_bounds_backward_serves_every_step(backend):
    # the backward's slice sizes divide by `step`, an int input: its guard `step >= 1`
    # (and `end >= start`) let the compiled code divide by it
    def fn(x, src, start, end, step):
        return torch.slice_scatter(x, src, 0, start, end, step).sin()

    compiled = ember.compile(fn, backend=backend, dynamic=True)
    for n, start, end, step in [(20, 0, 20, 1), (12, 2, 10, 2), (9, 1, 9, 3), (10, 4, 4, 1)]:
        rows = len(range(n)[start:end:step])
        x, src, upstream = torch.randn(n, 3), torch.randn(rows, 3), torch.randn(n, 3)
        grads = []
        for f in (fn, compiled):
            leaves = [x.clone().requires_grad_(), src.clone().requires_grad_()]
            f(*leaves, start, end, step).backward(upstream)
            grads.append([leaf.grad for leaf in leaves])
        torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("dtype, dynamic", [(torch.float32, True), (torch.bfloat16, False)])
def test_embedding_bag_grads_run_where_the_cpu_kernel_leaves_offset2bag_empty(dtype, dynamic):
    def fn(weight, indices, offsets, per_sample_weights):
        return torch.nn.functional.embedding_bag(
            indices, weight, offsets, mode="sum", per_sample_weights=per_sample_weights
        )

    compiled = ember.compile(fn, backend="inductor", dynamic=dynamic)
    for count in (5, 7):
        weight, weights = torch.randn(10, 4, dtype=dtype), torch.randn(count, dtype=dtype)
        indices, offsets = torch.randint(0, 10, (count,)), torch.tensor([0, 3])
        grads = []
        for f in (fn, compiled):
            leaves = [weight.clone().requires_grad_(), weights.clone().requires_grad_()]
            f(leaves[0], indices, offsets, leaves[1]).sum().backward()
            grads.append([leaf.grad for leaf in leaves])
        torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_stride_through_a_size_known_to_divide_is_an_int(backend):
    # 9 * c elements (c = ceil(n / 3), specialized at 198) viewed as [1, c, 3, 3]: the
    # conv output's sizes and strides divide by c exactly; the stride of the copy that
    # the no_grad write leaves was emitted as a float (`66/c` inside a Max), and ATen's
    # empty_strided refused it
    def fn(x):
        v = x.chunk(3, 0)[0]
        w = torch.linspace(-1, 1, 9 * v.shape[0], dtype=x.dtype).reshape(1, v.shape[0], 3, 3)
        out = torch.nn.functional.conv2d(v, w, padding=1)
        with torch.no_grad():
            out.sub_(out)
        return out

    compiled = ember.compile(fn, backend=backend, dynamic=True)
    x = torch.randn(64, 33, 17, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    expected = fn(x)
    got = compiled(y)
    torch.testing.assert_close(got, expected)
    expected.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(y.grad, x.grad)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_pointwise_of_a_permuted_slice_keeps_eager_s_strides_at_symbolic_sizes(requires_grad):
    # fuzz seed 1101: eager strides the permuted result 65 * max(1, n // 2); the symbolic
    # graph's layout check took that for no dense layout and returned it row-major
    def f(x):
        return torch.expm1(-x.narrow(1, 0, x.shape[1] // 2))

    compiled = ember.compile(f, backend="inductor", dynamic=True)
    for n in (2, 33, 20, 1):
        x = torch.randn(31, n, 65).permute(2, 1, 0).requires_grad_(requires_grad)
        expected, actual = f(x), compiled(x)
        torch.testing.assert_close(actual, expected)
        if expected.numel() == 0:
            continue  # (n = 1: an empty result, whose strides mean nothing)
        sized = [d for d in range(3) if expected.shape[d] > 1]
        assert [actual.stride(d) for d in sized] == [expected.stride(d) for d in sized]
