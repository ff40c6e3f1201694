"""A graph writing in place into an input that requires grad, as eager allows for a
non-leaf (a residual `out += identity` at the start of a graph after a cut).

The write is traced functionally: the input's new value is a differentiable output of
the compiled autograd Function, and the run time copies it into the caller's tensor
with autograd recording the copy. The caller's tensor then has a `grad_fn`, a bumped
version, eager's value, and a backward through it (or through the outputs) gives
eager's gradients. A leaf requiring grad raises eager's error at every call.

| rank | footgun                                                      | before      | test |
|------|--------------------------------------------------------------|-------------|------|
| 1    | new value copied in unrecorded: gradient through it lost     | ran eagerly | test_write_into_a_non_leaf_input_matches_eager |
| 1    | the old value, saved for the backward, overwritten first     | ran eagerly | test_write_whose_backward_reads_the_old_value |
| 1    | a write under no_grad made differentiable                    | ran eagerly | test_write_under_no_grad_is_not_differentiated |
| 2    | a leaf passed after a compile for a non-leaf, written quietly | ran eagerly | test_leaf_argument_raises_eager_error_at_every_call |
| 3    | every such graph run eagerly                                 | slowdown    | test_write_into_a_non_leaf_input_is_compiled |
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import pytest
import torch
from aot_checks import RecordingCompiler
from test_dynamic_shapes import SIZES, symbolic_graph
from torch.testing import assert_close

from aot_autograd import (
    EagerCallWarning,
    aot_function,
    aot_graph,
    default_partition,
    min_cut_rematerialization_partition,
)

PARTITIONERS = {"default": default_partition, "min_cut": min_cut_rematerialization_partition}


def _add(x, y):
    x.add_(y)
    return x * 2


def _mul(x, y):
    x.mul_(y)
    return x.sin()


def _relu(x, y):
    x.relu_()
    return x * y


def _copy(x, y):
    x.copy_(y * 3)
    return x + 1


def _index_put(x, y):
    x.index_put_((torch.tensor([0, 2]),), y[:2] * y[1:3])
    return x.exp()


def _slice(x, y):
    x[1:3].mul_(y[:2])
    return x.sum(0)


def _transpose(x, y):
    x.t().add_(y.t())
    return x.cos()


def _returned(x, y):
    x.mul_(y)
    return x, x[1:]


def _read_after(x, y):
    before = x * 1
    x.add_(y.exp())
    return before * x, y * x


def _two_inputs(x, y):
    x.add_(y)
    y.mul_(x)
    return x + y


def _residual(out, identity, w):
    out += identity
    return torch.relu(out) * w


CASES = {
    "add_": (_add, [(4, 3), (4, 3)]),
    "mul_": (_mul, [(4, 3), (4, 3)]),
    "relu_": (_relu, [(4, 3), (4, 3)]),
    "copy_": (_copy, [(4, 3), (4, 3)]),
    "index_put_": (_index_put, [(4, 3), (4, 3)]),
    "slice": (_slice, [(4, 3), (2, 3)]),
    "transpose": (_transpose, [(4, 3), (4, 3)]),
    "returned": (_returned, [(4, 3), (4, 3)]),
    "read_after": (_read_after, [(4, 3), (4, 3)]),
    "two_inputs": (_two_inputs, [(4, 3), (4, 3)]),
    "residual": (_residual, [(4, 3), (4, 3), (3,)]),
}


def _leaves(shapes: Sequence[tuple], seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=generator).requires_grad_() for s in shapes]


def _run(fn: Callable, run: Callable, shapes: Sequence[tuple], seed: int = 0) -> tuple:
    """`run` on non-leaf inputs made from fresh leaves: (outputs, the inputs after the
    call, their versions before and after, their grad_fns, the leaves' grads of a loss
    over the outputs and the inputs as they are after the call)."""
    leaves = _leaves(shapes, seed)
    inputs = [leaf * 1.5 for leaf in leaves]
    versions = [x._version for x in inputs]
    outputs = run(*inputs)
    flat = [o for o in torch.utils._pytree.tree_leaves(outputs) if isinstance(o, torch.Tensor)]
    loss = sum((o * torch.linspace(0.5, 1.5, o.numel()).view(o.shape)).sum() for o in flat)
    loss = loss + sum((x * x).sum() for x in inputs)
    grads = torch.autograd.grad(loss, leaves)
    return (
        outputs,
        [x.detach() for x in inputs],
        versions,
        [x._version for x in inputs],
        [x.grad_fn for x in inputs],
        grads,
    )


def _check(fn: Callable, shapes: Sequence[tuple], compiled: Callable) -> None:
    for seed in (0, 1):  # a second call runs the compiled graphs again
        expected = _run(fn, fn, shapes, seed)
        with warnings.catch_warnings():
            warnings.simplefilter("error", EagerCallWarning)
            got = _run(fn, compiled, shapes, seed)
        assert_close(got[0], expected[0])
        assert_close(got[1], expected[1])
        assert_close(got[5], expected[5])
        for before, after, eager_after, grad_fn, eager_grad_fn in zip(
            got[2], got[3], expected[3], got[4], expected[4]
        ):
            assert (after > before) == (eager_after > before)
            assert (grad_fn is None) == (eager_grad_fn is None)


@pytest.mark.parametrize("partitioner", PARTITIONERS)
@pytest.mark.parametrize("case", CASES)
def test_write_into_a_non_leaf_input_matches_eager(case, partitioner):
    fn, shapes = CASES[case]
    compiler = RecordingCompiler()
    _check(fn, shapes, aot_function(fn, compiler, partition_fn=PARTITIONERS[partitioner]))
    assert compiler.graphs, "the graph was compiled"


def test_write_into_a_non_leaf_input_is_compiled():
    compiler = RecordingCompiler()
    compiled = aot_function(_residual, compiler)
    _check(_residual, CASES["residual"][1], compiled)
    forward = compiler.graphs[0]
    assert "add" in str(forward.code)  # the write, functional in the forward graph
    w = torch.randn(3, requires_grad=True)
    for _ in range(2):  # the call compiling for these flags, then one running the graphs
        out = torch.randn(4, 3, requires_grad=True) * 1
        version = out._version
        compiled(out, torch.randn(4, 3), w)
        assert out._version == version + 1  # (tracing writes no version into the caller's)
        assert type(out.grad_fn).__name__ == "CopyBackwards"


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_write_whose_backward_reads_the_old_value(partitioner):
    # `x.mul_(y)`'s gradient for y reads x's old value; the run time then overwrites x
    def fn(x, y):
        x.mul_(y)
        x.mul_(y)
        return x.sum(1)

    compiled = aot_function(fn, RecordingCompiler(), partition_fn=PARTITIONERS[partitioner])
    _check(fn, [(4, 3), (4, 3)], compiled)


def test_write_under_no_grad_is_not_differentiated():
    def fn(x, y):
        z = x + y  # (saving x, eager's backward would refuse the write)
        with torch.no_grad():
            x.mul_(2)
        return z + y

    compiled = aot_function(fn, RecordingCompiler())
    expected = _run(fn, fn, [(4, 3), (4, 3)])
    got = _run(fn, compiled, [(4, 3), (4, 3)])
    assert_close(got[0], expected[0])
    assert_close(got[1], expected[1])
    assert_close(got[5], expected[5])
    # the caller's tensor keeps its node: eager's write under no_grad is not recorded
    assert type(got[4][0]) is type(expected[4][0])


def test_write_after_a_differentiable_use_raises_eager_error_in_backward():
    def fn(x, y):
        z = x * y  # saves x, then written: eager's backward refuses
        x.add_(1)
        return z

    leaf, y = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    expected = fn(leaf * 1, y)
    got = aot_function(fn, RecordingCompiler())(leaf * 1, y)
    assert_close(got, expected)
    for result in (expected, got):
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            torch.autograd.grad(result.sum(), leaf)


def test_leaf_argument_raises_eager_error_at_every_call():
    compiled = aot_function(_add, RecordingCompiler())
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        compiled(torch.randn(3, requires_grad=True), torch.randn(3))
    base = torch.randn(3, requires_grad=True)
    assert_close(compiled(base * 1, torch.ones(3)), _add(base * 1, torch.ones(3)))
    leaf = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        compiled(leaf, torch.randn(3))
    assert leaf._version == 0
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        compiled(leaf[1:], torch.randn(2))
    twin = leaf.detach().clone()
    with torch.no_grad():  # eager writes a leaf under no_grad
        compiled(leaf, torch.ones(3))
    assert_close(leaf.detach(), twin + 1)


def test_leaf_written_under_no_grad_in_the_graph_is_allowed():
    def fn(w, g):
        with torch.no_grad():
            w.sub_(g * 0.1)
        return w * 2

    w = torch.randn(3, requires_grad=True)
    twin = w.detach().clone().requires_grad_()
    g = torch.randn(3)
    got = aot_function(fn, RecordingCompiler())(w, g)
    expected = fn(twin, g)
    assert_close(got, expected)
    assert_close(w, twin)
    assert w.is_leaf and w.grad_fn is None


def _residual_method(out, identity, w):
    out.add_(identity)  # (fx.symbolic_trace records `out += identity` as `out + identity`)
    out[:, 1:].mul_(w[1:])
    return torch.relu(out) * w


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_writes_with_symbolic_sizes(partitioner):
    shapes = [(3, 6), (3, 6), (6,)]
    leaves = _leaves(shapes, 0)
    graph = symbolic_graph(_residual_method, [leaf * 1 for leaf in leaves], [[0, 1], [0, 1], [0]])
    compiled = aot_graph(
        graph.gm,
        graph.example_inputs,
        fw_compiler=RecordingCompiler(),
        partition_fn=PARTITIONERS[partitioner],
    )
    for batch, seq in SIZES:
        sizes = [(batch, seq), (batch, seq), (seq,)]

        def run(*inputs):
            return compiled(*graph.arguments(list(inputs)))

        expected = _run(_residual_method, _residual_method, sizes)
        got = _run(_residual_method, run, sizes)
        assert_close(got[0], expected[0])
        assert_close(got[1], expected[1])
        assert_close(got[5], expected[5])
        assert got[4][0] is not None and got[3][0] > got[2][0]
    assert compiled.aot.static_compiles == 0


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_write_into_a_strided_view_input_matches_eager(partitioner):
    # the caller's tensor is a view with gaps of a larger non-leaf: traced in its strides
    # and offset, written through autograd's view handling into the base, as eager does
    def fn(x, y):
        x.mul_(y)
        return x.cos()

    compiled = aot_function(fn, RecordingCompiler(), partition_fn=PARTITIONERS[partitioner])
    results = []
    for run in (fn, compiled, compiled):
        leaf, y = _leaves([(4, 6), (4, 3)], 0)
        base = leaf * 1.5
        view = base[:, 1::2]
        out = run(view, y)
        grads = torch.autograd.grad((out * 2).sum() + (base * base).sum(), (leaf, y))
        assert type(base.grad_fn).__name__ == "CopySlices"
        results.append((out.detach(), base.detach(), grads))
    assert_close(results[1], results[0])
    assert_close(results[2], results[0])


@pytest.mark.parametrize("restride", ["t_", "unsqueeze_"])
def test_write_and_restride_of_a_non_leaf_input_runs_eagerly(restride):
    # the new value comes back in the input's old geometry, its gradient in the new one:
    # not expressed; the call's ops run eagerly, with eager's results
    def fn(x, y):
        x.add_(y)
        getattr(x, restride)(*(() if restride == "t_" else (0,)))
        return x * 2

    compiled = aot_function(fn, RecordingCompiler())
    results = []
    for run in (fn, compiled):
        leaf, y = _leaves([(3, 4), (3, 4)], 0)
        x = leaf * 1
        if run is compiled:
            with pytest.warns(EagerCallWarning, match="changes its shape or strides"):
                out = run(x, y)
        else:
            out = run(x, y)
        grads = torch.autograd.grad(out.sum() + (x * x).sum(), (leaf, y))
        results.append((out.detach(), x.detach(), grads))
    assert_close(results[1], results[0])


def test_plain_input_written_with_a_value_requiring_grad_matches_eager():
    # eager: `x` requires grad after `x.mul_(w)`, and its gradient flows into `w`
    def scale(x, w):
        x.mul_(w)
        return x * 2

    results = []
    for run in (scale, aot_function(scale, RecordingCompiler())):
        x = torch.arange(3.0)
        w = torch.full((3,), 2.0, requires_grad=True)
        out = run(x, w)
        assert x.requires_grad and x.grad_fn is not None
        (out.sum() + x.sum()).backward()
        results.append((out.detach(), x.detach(), w.grad))
    assert_close(results[1], results[0])
