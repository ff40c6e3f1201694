"""The per-call path: what runtime precomputes per compiled program still gives eager's results.

Each case exercises one precomputed decision (index tuples for grads and tangents,
which saved values are tensors, the output structure, the zeros for a missing
tangent) on several calls, so a value learned from the first call and reused
later is checked against eager on the later calls too.
"""

from __future__ import annotations

import pytest
import torch
from test_dynamic_shapes import symbolic_graph
from torch import fx

from aot_autograd import DoubleBackwardError, aot_function, aot_graph
from aot_autograd.runtime import output_assembler

CALLS = 3


def identity_compiler(gm, example_inputs):
    return gm


def _grads(fn, inputs, weights=None):
    """Outputs and grads of a weighted loss over `fn`'s tensor outputs."""
    outputs = fn(*inputs)
    flat = [o for o in torch.utils._pytree.tree_leaves(outputs) if isinstance(o, torch.Tensor)]
    weights = weights or [1.0] * len(flat)
    loss = sum(w * o.float().sum() for w, o in zip(weights, flat) if w and o.requires_grad)
    wanted = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    return outputs, torch.autograd.grad(loss, wanted, allow_unused=True)


def _check_against_eager(fn, make_inputs, weights=None):
    compiled = aot_function(fn, identity_compiler)
    for seed in range(CALLS):
        torch.manual_seed(seed)
        inputs = make_inputs()
        expected, expected_grads = _grads(fn, inputs, weights)
        got, got_grads = _grads(compiled, [_copy(x) for x in inputs], weights)
        torch.testing.assert_close(got, expected)
        assert len(got_grads) == len(expected_grads)
        for g, e in zip(got_grads, expected_grads):
            assert (g is None) == (e is None)
            if e is not None:
                torch.testing.assert_close(g, e)


def _copy(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    return x


def test_grads_of_inputs_interleaved_with_inputs_without_grad():
    def fn(a, b, c, d, e):
        return (a * b).sin() + (c * d).cos() * e

    def make():
        flags = [True, False, True, False, True]
        return [torch.randn(4, requires_grad=f) for f in flags]

    _check_against_eager(fn, make)


def test_grads_of_one_run_of_inputs_after_inputs_without_grad():
    def fn(x, scale, w1, b1, w2, b2):
        return torch.tanh(torch.tanh(x @ w1 + b1) @ w2 + b2) * scale

    def make():
        ws = [torch.randn(4, 4), torch.randn(4), torch.randn(4, 4), torch.randn(4)]
        return [torch.randn(2, 4), 2.0, *(w.requires_grad_() for w in ws)]

    _check_against_eager(fn, make)


def test_unused_output_gets_zeros_and_grads_reading_only_it_are_none():
    def fn(x, y):
        return x * 2, (y * 3).exp(), x.argmax()

    def make():
        return [torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)]

    _check_against_eager(fn, make, weights=[1.0, 0.0, 0.0])
    _check_against_eager(fn, make, weights=[0.0, 1.0, 0.0])


def test_non_differentiable_outputs_stay_marked_on_every_call():
    def fn(x):
        return x.sin(), x > 0, x.argmax(), x.detach() * 2

    compiled = aot_function(fn, identity_compiler)
    for _ in range(CALLS):
        x = torch.randn(6, requires_grad=True)
        values, mask, index, detached = compiled(x)
        assert values.requires_grad and values.grad_fn is not None
        assert not mask.requires_grad and not index.requires_grad
        assert not detached.requires_grad
        (grad,) = torch.autograd.grad(values.sum(), x)
        torch.testing.assert_close(grad, x.detach().cos())


@pytest.mark.parametrize(
    "structure",
    ["leaf", "tuple", "list", "dict", "nested", "one_tuple", "constant"],
)
def test_output_structures(structure):
    def fn(x, y):
        a, b = x * y, x + y
        return {
            "leaf": a,
            "tuple": (a, b),
            "list": [a, b, a.sum()],
            "dict": {"a": a, "b": b},
            "nested": (a, [b, (a.sum(), {"c": b * 2})]),
            "one_tuple": (a,),
            "constant": (a, 3, None, 2.5),
        }[structure]

    def make():
        return [torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)]

    _check_against_eager(fn, make)
    compiled = aot_function(fn, identity_compiler)
    got, expected = compiled(*make()), fn(*make())
    assert type(got) is type(expected)
    assert torch.utils._pytree.tree_structure(got) == torch.utils._pytree.tree_structure(expected)


def test_outputs_that_alias_inputs_and_each_other():
    def fn(x, y):
        z = y * 2
        return x, x[1:], x.t(), z.view(-1), z[0], y.sum()

    compiled = aot_function(fn, identity_compiler)
    for _ in range(CALLS):
        x, y = torch.randn(3, 4, requires_grad=True), torch.randn(2, 6, requires_grad=True)
        got, expected = compiled(x, y), fn(x, y)
        torch.testing.assert_close(got, expected)
        assert got[0] is x
        assert got[1].data_ptr() == x[1:].data_ptr() and got[2].stride() == x.t().stride()
        assert got[3]._base is got[4]._base and got[3]._base is not None
        got_grads = torch.autograd.grad(sum(o.sum() for o in got[1:]), [x, y])
        expected_grads = torch.autograd.grad(sum(o.sum() for o in expected[1:]), [x, y])
        torch.testing.assert_close(got_grads, expected_grads)


def test_input_mutations_copied_back_with_and_without_grad():
    def fn(x, running, w):
        running.mul_(0.5).add_(x.mean(0))
        return (x @ w).relu()

    compiled = aot_function(fn, identity_compiler)
    running_eager, running_compiled = torch.zeros(4), torch.zeros(4)
    for grad in (True, False, True):
        x, w = torch.randn(3, 4), torch.randn(4, 4, requires_grad=True)
        with torch.set_grad_enabled(grad):
            expected = fn(x, running_eager, w)
            got = compiled(x, running_compiled, w)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(running_compiled, running_eager)
        assert got.requires_grad == expected.requires_grad


def test_double_backward_still_raises():
    compiled = aot_function(lambda x: (x * x).sum(), identity_compiler)
    x = torch.randn(3, requires_grad=True)
    (grad,) = torch.autograd.grad(compiled(x), x, create_graph=True)
    with pytest.raises(DoubleBackwardError):
        grad.sum().backward()


def test_saved_sizes_and_missing_tangents_follow_each_calls_sizes():
    def fn(x, w):
        h = x @ w
        return h.relu(), h.sum(0), h.shape[0] * 2

    graph = symbolic_graph(fn, [torch.randn(4, 3), torch.randn(3, 5)], [[0], []])
    compiled = aot_graph(graph.gm, graph.example_inputs, fw_compiler=identity_compiler)
    for rows in (4, 7, 2):
        x = torch.randn(rows, 3, requires_grad=True)
        w = torch.randn(3, 5, requires_grad=True)
        relu, total, size = compiled(*graph.arguments([x, w]))
        expected = fn(x, w)
        assert size == expected[2]
        torch.testing.assert_close((relu, total), expected[:2])
        # Only the first output feeds the loss: the second's tangent is zeros of this call's size.
        got_grads = torch.autograd.grad(relu.sum(), [x, w])
        expected_grads = torch.autograd.grad(expected[0].sum(), [x, w])
        torch.testing.assert_close(got_grads, expected_grads)


def test_under_vmap_the_full_autograd_function_apply_runs():
    compiled = aot_function(lambda x, w: (x * w).sin(), identity_compiler)
    w = torch.randn(4, requires_grad=True)
    x = torch.randn(3, 4)
    compiled(x[0], w)  # compiled outside the transform
    try:
        got = torch.vmap(lambda row: compiled(row, w))(x)
    except RuntimeError as error:  # what torch's own apply says of a Function without vmap
        assert "vmap" in str(error) or "setup_context" in str(error)
    else:
        torch.testing.assert_close(got, (x * w).sin())


def test_output_assembler_matches_a_program_per_call():
    def fn(x):
        return x.t(), (x * 2,)

    gm = fx.symbolic_trace(fn)
    compiled = aot_function(gm, identity_compiler)
    x = torch.randn(2, 3)
    compiled(x)
    program = next(iter(compiled.last._cache.values())).program
    assemble = output_assembler(program)
    y = torch.randn(2, 3)
    graph_outputs = compiled.last.graphs["inference"](y)
    got = assemble([y], graph_outputs)
    torch.testing.assert_close(got, fn(y))
    assert got[0].data_ptr() == y.data_ptr()


class _BoxedGraph:
    """A compiled graph with a boxed entry, as inductor_codegen's CompiledGraph has."""

    def __init__(self, gm):
        self.gm = gm
        self.boxed_calls = 0

    def __call__(self, *args):
        raise AssertionError("the run time should call call_boxed")

    def call_boxed(self, args):
        assert isinstance(args, list)
        values = list(args)
        args.clear()  # what a compiled graph does to free inputs at their last use
        self.boxed_calls += 1
        return self.gm(*values)


def test_compiled_graphs_with_a_boxed_entry_are_called_through_it():
    graphs = []

    def compiler(gm, example_inputs):
        graphs.append(_BoxedGraph(gm))
        return graphs[-1]

    def fn(x, w):
        return (x @ w).tanh().sum(0)

    compiled = aot_function(fn, compiler)
    for _ in range(CALLS):
        x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
        got = compiled(x, w)
        torch.testing.assert_close(got, fn(x, w))
        torch.testing.assert_close(
            torch.autograd.grad(got.sum(), w), torch.autograd.grad(fn(x, w).sum(), w)
        )
    forward, backward = graphs
    assert forward.boxed_calls == CALLS and backward.boxed_calls == CALLS
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), fn(x, w))
    assert graphs[2].boxed_calls == 1  # the inference graph


def test_requires_grad_flags_of_tensor_and_other_arguments():
    from aot_autograd.runtime import requires_grad_flags

    class HasFlag:
        requires_grad = True  # not a tensor: never counts

    weight = torch.nn.Parameter(torch.randn(2))
    frozen = torch.randn(2)
    assert requires_grad_flags([weight, frozen]) == (True, False)
    assert requires_grad_flags([weight, 3, HasFlag(), frozen]) == (True, False, False, False)
    assert requires_grad_flags([]) == ()


def test_grad_mode_key_follows_requires_grad_flips_between_calls():
    def fn(x, w):
        return (x * w).sin()

    compiled = aot_function(fn, identity_compiler)
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    for flag in (True, False, True):
        w.requires_grad_(flag)
        out = compiled(x, w)
        assert out.requires_grad is flag
        torch.testing.assert_close(out, fn(x, w))
        if flag:
            (grad,) = torch.autograd.grad(out.sum(), [w])
            torch.testing.assert_close(grad, x * (x * w).detach().cos())


class _Tracked(torch.Tensor):
    """A tensor subclass that counts the torch functions called on it."""

    calls: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("grad", [True, False])
def test_several_mutated_inputs_of_mixed_dtypes_copied_back_together(grad):
    def fn(x, mean, var, count, scale):
        mean.mul_(0.9).add_(x.mean(0), alpha=0.1)
        var.mul_(0.9).add_(x.pow(2).mean(0), alpha=0.1)
        count.add_(1)
        scale.copy_(x.amax())  # a 0-dim value into a 1-element input of another dtype
        return x * mean

    compiled = aot_function(fn, identity_compiler)
    states = [
        (torch.zeros(4), torch.ones(4), torch.tensor(0), torch.zeros(1, dtype=torch.float64))
        for _ in range(2)
    ]
    for _ in range(CALLS):
        x = torch.randn(3, 4, requires_grad=grad)
        expected = fn(x, *states[0])
        versions = [t._version for t in states[1]]
        got = compiled(x, *states[1])
        torch.testing.assert_close(got, expected)
        for mine, eager in zip(states[1], states[0]):
            torch.testing.assert_close(mine, eager)
        assert all(t._version > v for t, v in zip(states[1], versions))


def test_mutated_tensor_subclass_inputs_get_their_own_copy():
    def fn(x, a, b):
        a.add_(x)
        b.mul_(2)
        return x.sin()

    compiled = aot_function(fn, identity_compiler)
    a = torch.zeros(3).as_subclass(_Tracked)
    b = torch.ones(3).as_subclass(_Tracked)
    x = torch.randn(3)
    compiled(x, a, b)
    _Tracked.calls.clear()
    compiled(x, a, b)
    torch.testing.assert_close(a.as_subclass(torch.Tensor), 2 * x)
    torch.testing.assert_close(b.as_subclass(torch.Tensor), torch.full((3,), 4.0))
    assert torch.Tensor.copy_ in _Tracked.calls


class _BoxedGraph:
    """A compiled graph with its own boxed entry (as inductor_codegen's CompiledGraph)."""

    def __init__(self, gm):
        self.gm = gm
        self.boxed_calls = 0

    def __call__(self, *args):
        return self.gm(*args)

    def call_boxed(self, args):
        self.boxed_calls += 1
        values = list(args)
        args.clear()
        return self.gm(*values)


def test_graphs_with_a_boxed_entry_give_eager_results_in_every_grad_mode():
    graphs = []

    def boxed_compiler(gm, example_inputs):
        graphs.append(_BoxedGraph(gm))
        return graphs[-1]

    def fn(x, w):
        return (x @ w).relu() * 2, x.sin()

    compiled = aot_function(fn, boxed_compiler)
    torch.manual_seed(0)
    for _ in range(CALLS):
        x, w = torch.randn(4, 8), torch.randn(8, 3, requires_grad=True)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x, w), fn(x, w))
        outputs, grads = _grads(compiled, (x, w))
        expected, expected_grads = _grads(fn, (x, w))
        torch.testing.assert_close(outputs, expected)
        torch.testing.assert_close(grads, expected_grads)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.testing.assert_close(compiled(x, w), fn(x, w))
    assert sum(g.boxed_calls for g in graphs) > 0
