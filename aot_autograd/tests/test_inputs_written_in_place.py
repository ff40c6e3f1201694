"""The in-place contract: a compiler that stores a mutated input's new value itself says
so (`inputs_written_in_place`), and the run time skips exactly those copies back.

A compiler that says nothing keeps every copy back; one naming an input the graph does
not mutate is an error (a silent skip would lose the update).
"""

from __future__ import annotations

import pytest
import torch
from torch import fx
from torch.testing import assert_close

from aot_autograd import INPUT_MUTATIONS, INPUTS_WRITTEN_IN_PLACE, AotAutogradError, aot_function


def _update_two(cache, stats, position, value):
    cache.index_copy_(0, position, value)
    stats.mul_(0.9)
    return cache.sum() + stats.sum()


class _WritesFirstMutation:
    """A compiler stand-in: runs the graph, stores one mutated input's new value into it
    (as a code generator writing in place would) and reports that input."""

    def __init__(self, report: frozenset[int] | None = None) -> None:
        self.report = report
        self.pairs: tuple = ()

    def __call__(self, gm: fx.GraphModule, example_inputs: list):
        output = next(n for n in gm.graph.nodes if n.op == "output")
        self.pairs = output.meta[INPUT_MUTATIONS]
        first_output, first_input = self.pairs[0]

        def run(*args):
            results = gm(*args)
            with torch.no_grad():
                args[first_input].copy_(results[first_output])
            return results

        setattr(run, INPUTS_WRITTEN_IN_PLACE, self.report or frozenset({first_input}))
        return run


class _CountCopies(torch.overrides.TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.copy_:
            self.count += 1
        elif func is torch._foreach_copy_:  # copy-backs grouped in one call
            self.count += len(args[0])
        return func(*args, **(kwargs or {}))


def _args():
    return [torch.zeros(4, 3), torch.ones(2), torch.tensor([1]), torch.randn(1, 3)]


def test_graph_output_meta_pairs_new_values_with_inputs():
    compiler = _WritesFirstMutation()
    compiled = aot_function(_update_two, fw_compiler=compiler)
    with torch.no_grad():
        compiled(*_args())
    assert compiler.pairs == ((1, 0), (2, 1))


def test_mutated_input_taking_a_gradient_is_not_offered_to_the_compiler():
    """`cache.index_copy_(0, position, value)` with `value` requiring grad makes the cache
    require grad: the forward (an autograd.Function) keeps it, and its copy back."""
    compiler = _WritesFirstMutation()
    compiled = aot_function(_update_two, fw_compiler=compiler, bw_compiler=lambda g, e: g)
    args = _args()
    args[3].requires_grad_()
    compiled(*args).backward()
    assert compiler.pairs == ((2, 1),)


def test_reported_inputs_are_not_copied_back_and_others_are():
    compiled = aot_function(_update_two, fw_compiler=_WritesFirstMutation())
    eager_args, compiled_args = _args(), _args()
    compiled_args[3] = eager_args[3].clone()
    with torch.no_grad():
        expected = _update_two(*eager_args)
        with _CountCopies() as counter:
            actual = compiled(*compiled_args)
    assert_close(actual, expected)
    for got, want in zip(compiled_args, eager_args):
        assert_close(got, want)
    assert counter.count == 2  # the compiler's own write, and `stats` copied back


def test_compiler_that_reports_nothing_keeps_every_copy_back():
    def plain(gm, example_inputs):
        return gm

    compiled = aot_function(_update_two, fw_compiler=plain)
    with torch.no_grad(), _CountCopies() as counter:
        compiled(*_args())
    assert counter.count == 2


def test_reporting_an_input_that_is_not_mutated_is_an_error():
    compiled = aot_function(_update_two, fw_compiler=_WritesFirstMutation(frozenset({2})))
    with torch.no_grad(), pytest.raises(AotAutogradError, match="wrote inputs"):
        compiled(*_args())


def _update_detached(cache, stats, position, value):
    cache.index_copy_(0, position, value.detach())
    stats.mul_(0.9)
    return (cache.sum() + stats.sum()) * value.sum()


def test_training_forward_graph_carries_the_pairs_and_skips_reported_copy():
    compiler = _WritesFirstMutation()
    compiled = aot_function(_update_detached, fw_compiler=compiler, bw_compiler=lambda g, e: g)
    eager_args, compiled_args = _args(), _args()
    eager_args[3].requires_grad_()
    compiled_args[3] = eager_args[3].detach().clone().requires_grad_()
    _update_detached(*eager_args).backward()
    with _CountCopies() as counter:
        compiled(*compiled_args).backward()
    assert compiler.pairs == ((1, 0), (2, 1))
    assert counter.count == 2
    for got, want in zip(compiled_args[:2], eager_args[:2]):
        assert_close(got, want)
    assert_close(compiled_args[3].grad, eager_args[3].grad)


def test_input_written_by_the_compiler_has_its_version_bumped():
    # a kernel storing through the data pointer bumps no version; eager's in-place op
    # does, so an earlier backward reading the old value must refuse to run
    def kernel_like(gm: fx.GraphModule, example_inputs: list):
        output = next(n for n in gm.graph.nodes if n.op == "output")
        first_output, first_input = output.meta[INPUT_MUTATIONS][0]

        def run(*args):
            results = gm(*args)
            args[first_input].data.copy_(results[first_output])
            return results

        setattr(run, INPUTS_WRITTEN_IN_PLACE, frozenset({first_input}))
        return run

    def scale(x):
        x.mul_(3)
        return x.sum()

    f = aot_function(scale, kernel_like)
    w = torch.ones(3, requires_grad=True)
    x = torch.arange(3.0)
    earlier = (w * x).sum()  # saves x
    version = x._version
    assert_close(f(x), torch.tensor(9.0))
    assert_close(x, torch.arange(3.0) * 3)
    assert x._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        earlier.backward()
