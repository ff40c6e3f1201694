"""Traceable tensor subclasses (`__torch_dispatch__` with `__tensor_flatten__`) through
every stage: captured in one graph, traced through their dispatch into plain ATen
graphs (aot_eager, inductor), their outputs and gradients eager's, with the types eager
gives (a plain leaf's gradient is a subclass where eager's is)."""

from __future__ import annotations

import contextlib
import copy
import logging

import pytest
import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.testing._internal.two_tensor import TwoTensor

import ember
from guards.tensor_subclasses import flatten, is_traceable_subclass

BACKENDS = ["aot_eager", "inductor"]


class ScaledTensor(torch.Tensor):
    """One inner tensor; each floating result of an op is multiplied by `scale` (a
    constant of its flatten context), so its gradients are its own dispatch's."""

    @staticmethod
    def __new__(cls, elem, scale, outer_size=None, outer_stride=None):
        return torch.Tensor._make_wrapper_subclass(
            cls,
            outer_size if outer_size is not None else elem.size(),
            strides=outer_stride if outer_stride is not None else elem.stride(),
            dtype=elem.dtype,
            device=elem.device,
            requires_grad=elem.requires_grad,
        )

    def __init__(self, elem, scale, outer_size=None, outer_stride=None):
        self.elem, self.scale = elem, scale

    def __tensor_flatten__(self):
        return ["elem"], {"scale": self.scale}

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return ScaledTensor(inner["elem"], ctx["scale"], outer_size, outer_stride)

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs):
        from torch.utils._python_dispatch import return_and_correct_aliasing

        kwargs = kwargs or {}
        scale = next(a.scale for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, cls))
        inner_args, inner_kwargs = pytree.tree_map_only(cls, lambda t: t.elem, (args, kwargs))
        out = func(*inner_args, **inner_kwargs)
        is_view = any(r.alias_info is not None for r in func._schema.returns)

        def wrap(t):
            if not isinstance(t, torch.Tensor):
                return t
            return cls(t * scale if t.is_floating_point() and not is_view else t, scale)

        return return_and_correct_aliasing(func, args, kwargs, pytree.tree_map(wrap, out))


@contextlib.contextmanager
def aot_messages():
    """The aot_graphs log's messages while the block runs."""
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("ember.aot_graphs")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def two(*shape):
    return TwoTensor(torch.randn(*shape), torch.randn(*shape))


def scaled(*shape):
    return ScaledTensor(torch.randn(*shape), 1.5)


def leaf(t):
    with torch.no_grad():
        copied = (
            t.clone() if not isinstance(t, ScaledTensor) else ScaledTensor(t.elem.clone(), t.scale)
        )
    return copied.requires_grad_()


def assert_same(got, expected):
    assert type(got) is type(expected), (type(got), type(expected))
    if is_traceable_subclass(expected):
        assert got.__tensor_flatten__()[1] == expected.__tensor_flatten__()[1]
        for a, b in zip(flatten(got), flatten(expected), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    else:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def add_sin(x, y):
    return (x * 2 + y).sin()


def matmul_relu(x, w):
    return torch.relu(x @ w).sum(0), x.mean()


def made_in_frame(x, y):
    return TwoTensor(y, y * 2) * x


CASES = {
    "two_add_sin": (add_sin, lambda: (two(3), torch.randn(3))),
    "scaled_add_sin": (add_sin, lambda: (scaled(3), torch.randn(3))),
    "two_matmul": (matmul_relu, lambda: (two(4, 3), torch.randn(3, 5))),
    "scaled_matmul": (matmul_relu, lambda: (scaled(4, 3), torch.randn(3, 5))),
    "made_in_frame": (made_in_frame, lambda: (two(3), torch.randn(3))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_gradients_like_eager(backend, name):
    fn, make = CASES[name]
    args = make()
    eager_args = [leaf(a) for a in args]
    compiled_args = [leaf(a) for a in args]
    compiled = ember.compile(fn, backend=backend)
    with aot_messages() as messages:
        expected, got = fn(*eager_args), compiled(*compiled_args)
        pytree.tree_map(assert_same, got, expected)
        for out in (expected, got):
            sum(t.sum() for t in pytree.tree_leaves(out)).backward()
    text = "\n".join(messages)
    assert "joint graph (tensor subclasses taken apart)" in text
    assert "eagerly" not in text
    for a, b in zip(compiled_args, eager_args, strict=True):
        assert_same(a.grad, b.grad)
    with torch.no_grad():  # the inference graph too
        pytree.tree_map(assert_same, compiled(*args), fn(*args))
    assert ember.explain(fn)(*args).graph_count == 1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.weight = nn.Parameter(TwoTensor(torch.randn(4, 4), torch.randn(4, 4)))

    def forward(self, x):
        return torch.relu(self.lin(x)) + x


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_with_subclass_parameters_trains_like_eager(backend):
    torch.manual_seed(0)
    net = nn.Sequential(Block(), Block(), Block())
    x = torch.randn(2, 4)
    reference, model = copy.deepcopy(net), copy.deepcopy(net)
    compiled = ember.compile(model, backend=backend)
    with aot_messages() as messages:
        for _ in range(2):
            expected, got = reference(x), compiled(x)
            assert_same(got, expected)
            expected.sum().backward()
            got.sum().backward()
    assert not any("eagerly" in m for m in messages)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert_same(p.grad, q.grad)


def transposed(x):
    return (x + 1).t(), (x * 2).view(-1)


def input_viewed(x):
    return x.t() * 2, x.view(-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_of_intermediates_are_compiled(backend):
    x = two(4, 3)
    eager_x, compiled_x = leaf(x), leaf(x)
    compiled = ember.compile(transposed, backend=backend)
    with aot_messages() as messages:
        got, expected = compiled(compiled_x), transposed(eager_x)
        pytree.tree_map(assert_same, got, expected)
        for out in (got, expected):
            sum(t.sum() for t in out).backward()
    assert_same(compiled_x.grad, eager_x.grad)
    assert not any("eagerly" in m for m in messages)


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_of_inputs_run_the_graphs_operations(backend):
    x = two(4, 3)
    with aot_messages() as messages:
        got = ember.compile(input_viewed, backend=backend)(x)
    pytree.tree_map(assert_same, got, input_viewed(x))
    assert any("running the graph's operations eagerly" in m for m in messages)
    got[1].a[0] = 100.0  # the view shares the input's memory, as eager's does
    assert x.a[0, 0] == 100.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_sizes_run_the_graphs_operations(backend):
    def scaled_by_sum(x, y):
        return (x * y.sum() + 1).sin()

    compiled = ember.compile(scaled_by_sum, backend=backend, dynamic=True)
    with aot_messages() as messages:
        for n in (3, 5, 7):  # one graph for every size of y: traced on none of them
            x, y = two(4), torch.randn(n)
            assert_same(compiled(x, y), scaled_by_sum(x, y))
    assert any("symbolic sizes" in m for m in messages)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_region_like_eager(backend):
    def mixed(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            with torch.autocast("cpu", enabled=False):
                z = y.float().sin()
        return y, z

    x, w = two(4, 3), torch.randn(3, 5)
    got = ember.compile(mixed, backend=backend)(x, w)
    pytree.tree_map(assert_same, got, mixed(x, w))


@pytest.mark.parametrize("backend", BACKENDS)
def test_convolution_with_subclass_weight_trains_like_eager(backend):
    # (inductor lays convolution outputs out channels-last: the saved values the
    # backward reads come in the compiled forward's strides)
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3)
    conv.weight = nn.Parameter(TwoTensor(torch.randn(4, 3, 3, 3), torch.randn(4, 3, 3, 3)))
    net = nn.Sequential(conv, nn.ReLU(), nn.Conv2d(4, 2, 1))
    x = torch.randn(2, 3, 8, 8)
    reference, model = copy.deepcopy(net), copy.deepcopy(net)
    compiled = ember.compile(model, backend=backend)
    with aot_messages() as messages:
        expected, got = reference(x), compiled(x)
        assert_same(got, expected)
        expected.square().sum().backward()
        got.square().sum().backward()
    assert not any("eagerly" in m for m in messages)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert_same(p.grad, q.grad)
