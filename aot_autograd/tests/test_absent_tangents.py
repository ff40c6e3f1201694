"""A compiled backward runs only the paths of outputs whose gradient is defined, as eager.

Eager autograd skips the backward of an output the loss does not use; zeros in
its place would give `0 * inf = NaN` on paths such as the grad of `x / x` at 0.
"""

from __future__ import annotations

import pytest
import torch

from aot_autograd import aot_function

nan, inf = float("nan"), float("inf")


def _counting_compiler():
    calls = []

    def compiler(gm, example_inputs):
        calls.append(gm)
        return gm

    return compiler, calls


PROGRAMS = {
    "unused_division": lambda x: (x.masked_fill(x > 0, 0), x / x),
    "unused_log": lambda x: (x * 2, x.log()),
    "shared_input_merges": lambda x: (x.sin() + 1, (x / x).sum(0)),
    "chain_through_intermediate": lambda x: ((x.exp() * 3), (x.exp() / x)),
    "three_outputs": lambda x: (x.sqrt(), x * 3, 1 / x),
}


def _grad(fn, x, used):
    x = x.clone().requires_grad_()
    outputs = fn(x)
    loss = sum((outputs[i] * (i + 1)).sum() for i in used)
    (grad,) = torch.autograd.grad(loss, x)
    return grad


@pytest.mark.parametrize("fn", PROGRAMS.values(), ids=PROGRAMS.keys())
def test_backward_skips_paths_of_outputs_without_gradient(fn):
    x = torch.tensor([[0.0, 2.0, -1.0], [inf, 0.5, 0.0]])
    compiled = aot_function(fn, lambda gm, _: gm)
    n = len(fn(x))
    for used in ([0], [n - 1], list(range(n)), [0]):
        expected = _grad(fn, x, used)
        torch.testing.assert_close(_grad(compiled, x, used), expected, equal_nan=True)


def test_backward_without_tangents_is_compiled_once_per_set_of_unused_outputs():
    compiler, calls = _counting_compiler()
    fn = PROGRAMS["three_outputs"]
    compiled = aot_function(fn, fw_compiler=compiler)
    x = torch.tensor([1.0, 4.0])
    _grad(compiled, x, [0, 1, 2])
    compiled_for_all = len(calls)
    _grad(compiled, x, [0, 1, 2])
    assert len(calls) == compiled_for_all  # all tangents: the full backward, nothing new
    _grad(compiled, x, [0])
    _grad(compiled, x, [0])
    assert len(calls) == compiled_for_all + 1
    _grad(compiled, x, [1])
    assert len(calls) == compiled_for_all + 2


def test_backward_with_one_of_two_outputs_of_a_multi_output_op_used():
    def fn(x):
        values, indices = x.max(1)
        return values * 2, x.unbind(0)[0] / x.unbind(0)[0]

    x = torch.tensor([[0.0, 2.0, -1.0], [3.0, 0.5, 0.0]])
    compiled = aot_function(fn, lambda gm, _: gm)
    for used in ([0], [1], [0, 1]):
        torch.testing.assert_close(_grad(compiled, x, used), _grad(fn, x, used), equal_nan=True)


def test_cached_graphs_also_skip_paths_of_outputs_without_gradient():
    from test_portable_program import DictCache

    from aot_autograd import aot_graph

    def fn(x):
        return x.masked_fill(x > 0, 0), x / x

    gm = torch.fx.symbolic_trace(fn)
    x = torch.tensor([[0.0, 2.0, -1.0], [inf, 0.5, 0.0]])
    cache = DictCache()
    first = aot_graph(gm, [x], fw_compiler=lambda g, _: g, cache=cache)
    _grad(first, x, [0, 1])
    assert cache.parts
    compiler, calls = _counting_compiler()
    cached = aot_graph(gm, [x], fw_compiler=compiler, cache=cache)
    _grad(cached, x, [0, 1])
    assert not calls  # the cached graphs run
    for used in ([0], [1], [0]):
        torch.testing.assert_close(_grad(cached, x, used), _grad(fn, x, used), equal_nan=True)
    assert len(calls) == 2  # one backward per set of None tangents


def test_full_backward_is_compiled_only_when_a_call_runs_it():
    compiler, calls = _counting_compiler()
    fn = PROGRAMS["three_outputs"]
    compiled = aot_function(fn, fw_compiler=compiler)
    x = torch.tensor([1.0, 4.0])
    for _ in range(2):  # every call leaves a tangent None: only that backward compiles
        torch.testing.assert_close(_grad(compiled, x, [0, 1]), _grad(fn, x, [0, 1]))
    assert len(calls) == 2  # the forward and the backward without tangent 2
    torch.testing.assert_close(_grad(compiled, x, [0, 1, 2]), _grad(fn, x, [0, 1, 2]))
    assert len(calls) == 3  # the full backward, at its first use
    torch.testing.assert_close(_grad(compiled, x, [0, 1, 2]), _grad(fn, x, [0, 1, 2]))
    assert len(calls) == 3
