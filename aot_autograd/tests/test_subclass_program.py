"""Graphs over traceable tensor subclasses (`__torch_dispatch__` with `__tensor_flatten__`):
traced through the subclass's dispatch on its inner tensors, so the compilers get plain
ATen graphs; outputs and gradients come back as eager's subclasses, with eager's values.

Footguns, worst first:
| what                                                   | if wrong           |
| gradients of the subclass's own dispatch (ScaledTensor) | silent wrong grads |
| a plain input's gradient that eager gives as a subclass | wrong type         |
| an input written in place, a view returned              | wrong aliasing     |
| a gradient of another kind than the output             | clear error        |
"""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree
from torch import fx
from torch.testing._internal.two_tensor import TwoTensor

from aot_autograd import DoubleBackwardError, aot_graph
from aot_autograd.subclass_program import SubclassProgramError
from guards.tensor_subclasses import flatten, is_traceable_subclass


class ScaledTensor(torch.Tensor):
    """One inner tensor; each floating result of an op is multiplied by `scale`, a
    constant of its flatten context (so its backward differs from its inner tensor's)."""

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


class Recorder:
    """A compiler keeping the graphs it gets and running them as they are."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm


def compiled(fn, example_inputs):
    recorder = Recorder()
    gm = fx.symbolic_trace(fn)
    return aot_graph(gm, example_inputs, fw_compiler=recorder), recorder


def two(*shape):
    return TwoTensor(torch.randn(*shape), torch.randn(*shape))


def scaled(*shape, scale=1.5):
    return ScaledTensor(torch.randn(*shape), scale)


def leaf(t):
    with torch.no_grad():
        copy = t.clone()
    return copy.requires_grad_()


def assert_same(got, expected):
    assert type(got) is type(expected)
    if is_traceable_subclass(expected):
        assert got.__tensor_flatten__()[1] == expected.__tensor_flatten__()[1]
        for a, b in zip(flatten(got), flatten(expected), strict=True):
            torch.testing.assert_close(a, b)
    else:
        torch.testing.assert_close(got, expected)


def add_sin(x, y):
    return (x * 2 + y).sin()


def matmul_sum(x, w):
    return torch.relu(x @ w).sum(0), x.mean()


CASES = [
    (add_sin, lambda: (two(3), torch.randn(3))),
    (add_sin, lambda: (scaled(3), torch.randn(3))),
    (matmul_sum, lambda: (two(4, 3), torch.randn(3, 5))),
    (matmul_sum, lambda: (scaled(4, 3), torch.randn(3, 5))),
]


@pytest.mark.parametrize(("fn", "make"), CASES)
def test_inference_graph_is_plain_aten(fn, make):
    args = make()
    run, recorder = compiled(fn, args)
    with torch.no_grad():
        got = run(*args)
    pytree.tree_map(assert_same, got, fn(*args))
    (gm,) = recorder.graphs
    for node in gm.graph.nodes:
        assert not is_traceable_subclass(node.meta.get("val")), node
        if node.op == "call_function":
            assert isinstance(node.target, torch._ops.OpOverload), node.target


@pytest.mark.parametrize(("fn", "make"), CASES)
def test_gradients_are_eagers(fn, make):
    args = make()
    run, recorder = compiled(fn, args)
    eager_args = [leaf(a) for a in args]
    compiled_args = [leaf(a) for a in args]
    expected, got = fn(*eager_args), run(*compiled_args)
    pytree.tree_map(assert_same, got, expected)
    for out in (expected, got):
        sum(t.sum() for t in pytree.tree_leaves(out)).backward()
    for a, b in zip(compiled_args, eager_args, strict=True):
        assert_same(a.grad, b.grad)  # a plain input's gradient is a subclass, as eager's
    assert len(recorder.graphs) == 2  # forward and backward, plain graphs
    for gm in recorder.graphs:
        assert not any(is_traceable_subclass(n.meta.get("val")) for n in gm.graph.nodes)


def test_gradient_of_another_kind_raises():
    args = (two(3), torch.randn(3))
    run, _ = compiled(add_sin, args)
    out = run(leaf(args[0]), args[1])
    with pytest.raises(SubclassProgramError, match="gradient of output 0 is a Tensor"):
        out.backward(torch.ones(3))


def test_expanded_gradient_is_taken_in_traced_strides():
    args = (two(3), torch.randn(3))
    run, _ = compiled(add_sin, args)
    x = leaf(args[0])
    run(x, args[1]).sum().backward()  # sum's backward expands the gradient
    y = leaf(args[0])
    add_sin(y, args[1]).sum().backward()
    assert_same(x.grad, y.grad)


def write_in_place(x):
    x.add_(1)
    return x * 2


def test_in_place_write_runs_eagerly():
    args = (two(3),)
    run, _ = compiled(write_in_place, args)
    x, y = two(3), None
    y = TwoTensor(x.a.clone(), x.b.clone())
    assert_same(run(x), write_in_place(y))
    assert_same(x, y)


def test_call_of_another_layout_runs_eagerly():
    run, recorder = compiled(add_sin, (two(3), torch.randn(3)))
    with torch.no_grad():
        run(two(3), torch.randn(3))
        other = TwoTensor(torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64))
        y = torch.randn(3, dtype=torch.float64)
        assert_same(run(other, y), add_sin(other, y))
    assert len(recorder.graphs) == 1


def indices(x):
    return x.argmax(0)


def test_outputs_without_gradient_under_grad_mode():
    args = (two(4, 3),)
    run, recorder = compiled(indices, args)
    x = leaf(args[0])
    got = run(x)
    assert_same(got, indices(x))
    assert not got.requires_grad
    assert len(recorder.graphs) == 1  # the inference graph: nothing to differentiate


def test_second_backward_and_double_backward():
    args = (two(3), torch.randn(3))
    run, _ = compiled(add_sin, args)
    x, y = leaf(args[0]), leaf(args[0])
    out = run(x, args[1]).sum()
    out.backward(retain_graph=True)
    out.backward()  # the saved values are kept while the graph is
    expected = add_sin(y, args[1]).sum()
    expected.backward(retain_graph=True)
    expected.backward()
    assert_same(x.grad, y.grad)
    z = leaf(args[0])
    with pytest.raises(DoubleBackwardError, match="create_graph=True"):
        torch.autograd.grad(run(z, args[1]).sum(), [z], create_graph=True)


def made_leaf_graph(x: torch.Tensor) -> fx.GraphModule:
    """`TwoTensor(x * 2, x * 3, requires_grad=True)` as a captured graph gives it (the
    class called by one node, whose value is the subclass)."""
    graph = fx.Graph()
    node = graph.placeholder("x")
    a = graph.call_function(torch.mul, (node, 2))
    b = graph.call_function(torch.mul, (node, 3))
    made = graph.call_function(TwoTensor, (a, b), {"requires_grad": True})
    made.meta["val"] = TwoTensor(x.detach() * 2, x.detach() * 3)
    graph.output((made,))
    return fx.GraphModule({}, graph)


@pytest.mark.parametrize("grad_input", [False, True])
def test_output_made_as_a_leaf_requiring_grad_runs_eagerly(grad_input):
    x = torch.randn(3, requires_grad=grad_input)
    gm = made_leaf_graph(x)
    run = aot_graph(gm, [x], fw_compiler=Recorder())
    (got,), (expected,) = run(x), gm(x)
    assert_same(got, expected)
    assert got.requires_grad and got.is_leaf == expected.is_leaf


def shared_base(x):
    y = x * 2
    return y, y.t()


def test_outputs_viewing_one_intermediate_share_its_memory():
    args = (two(4, 3),)
    run, recorder = compiled(shared_base, args)
    with torch.no_grad():
        got, expected = run(*args), shared_base(*args)
    pytree.tree_map(assert_same, got, expected)
    got[0].a[0, 1] = 100.0  # a write through one shows in the other, as in eager
    assert got[1].a[1, 0] == 100.0
    (gm,) = recorder.graphs
    assert any(n.target is torch.ops.aten.t.default for n in gm.graph.nodes)
