"""torch.utils.checkpoint.checkpoint inside compiled code: with use_reentrant=False its
function is traced in place and its nodes tagged as one region (CHECKPOINT_REGION);
values and gradients are eager's; a selective checkpoint's policy (context_fn=
partial(create_selective_checkpoint_contexts, policy)) is kept on the nodes
(CHECKPOINT_POLICY). Options that change values (preserve_rng_state=False, another
context_fn, debug) break the graph: the call runs eagerly, as checkpoint itself runs
it. use_reentrant=True or left out is traced alike where fn touches nothing outside
itself and its outputs require grad as the reentrant Function's do; else it runs eagerly.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import dynamo_capture
from dynamo_capture.function_transforms import CHECKPOINT_POLICY, CHECKPOINT_REGION
from dynamo_capture.testing import CountingBackend


def _block(a):
    return torch.relu(a @ a.t()).exp()


def _run_with_gradients(fn, *params):
    """fn's results and the gradients of their sum, eager and compiled; the backend."""
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=counter)
    results = []
    for run in (fn, compiled):
        x = torch.linspace(-1, 1, 16).reshape(4, 4).requires_grad_()
        torch.manual_seed(0)
        out = run(x)
        outs = out if isinstance(out, tuple) else (out,)
        grads = torch.autograd.grad(sum(o.sum() for o in outs), [x, *params])
        results.append((outs, grads))
    torch.testing.assert_close(results[1], results[0])
    return counter


def _regions(counter):
    return [
        node.meta.get(CHECKPOINT_REGION)
        for gm in counter.graphs
        for node in gm.graph.nodes
        if node.op.startswith("call")
    ]


def test_checkpoint_region_is_tagged_and_gradients_match_eager():
    def fn(x):
        y = x + 1
        return checkpoint(_block, y, use_reentrant=False) * 3

    counter = _run_with_gradients(fn)
    regions = _regions(counter)
    assert counter.frame_count == 1
    assert regions[0] is None and regions[-1] is None  # the add and the mul
    inside = regions[1:-1]
    assert inside and len(set(inside)) == 1 and inside[0] is not None


def test_two_checkpoint_calls_are_two_regions():
    def fn(x):
        y = checkpoint(_block, x, use_reentrant=False)
        return checkpoint(_block, y * 0.1, use_reentrant=False)

    counter = _run_with_gradients(fn)
    tagged = {region for region in _regions(counter) if region is not None}
    assert len(tagged) == 2


def test_checkpoint_of_a_module_gives_its_parameter_gradients():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4))

    def fn(x):
        return checkpoint(model, x, use_reentrant=False).relu()

    counter = _run_with_gradients(fn, *model.parameters())
    assert counter.frame_count == 1


@pytest.mark.parametrize(
    "options",
    [{"determinism_check": "none"}, {"early_stop": False}, {"preserve_rng_state": True}],
    ids=["determinism_check_none", "early_stop_false", "preserve_rng_state"],
)
def test_checkpoint_options_that_keep_values_are_traced(options):
    def fn(x):
        return checkpoint(_block, x, use_reentrant=False, **options)

    counter = _run_with_gradients(fn)
    assert counter.frame_count == 1 and counter.op_count == 4


def _dropout(a):
    return torch.nn.functional.dropout(a, 0.5) * 2


@pytest.mark.parametrize(
    "options",
    [
        {"use_reentrant": False, "preserve_rng_state": False},
        {
            "use_reentrant": False,
            "context_fn": lambda: (contextlib.nullcontext(), contextlib.nullcontext()),
        },
        {"use_reentrant": False, "debug": True},
    ],
    ids=["no_rng_state", "context_fn", "debug"],
)
def test_checkpoint_options_that_change_values_run_eagerly(options):
    def fn(x):
        return checkpoint(_dropout, x.sin(), **options).cos()

    counter = _run_with_gradients(fn)
    assert all(region is None for region in _regions(counter))
    assert counter.frame_count >= 1  # the sin before the eager checkpoint call


def test_checkpoint_with_dropout_keeps_the_forward_mask_in_the_backward():
    def fn(x):
        return checkpoint(_dropout, x, use_reentrant=False)

    counter = _run_with_gradients(fn)
    assert counter.frame_count == 1


def _compare_with_parameters(fn, module):
    """fn's values, input grad and module parameter grads, eager and compiled (backward()
    as reentrant checkpoint needs); the backend."""
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=counter)
    results = []
    for run in (fn, compiled):
        x = torch.linspace(-1, 1, 16).reshape(4, 4).requires_grad_()
        torch.manual_seed(0)
        out = run(x)
        if out.requires_grad:
            out.sum().backward()
        grads = [x.grad, *(p.grad for p in module.parameters())]
        module.zero_grad(set_to_none=True)
        results.append((out.detach(), out.requires_grad, grads))
    torch.testing.assert_close(results[1], results[0])
    return counter


_LINEAR = nn.Linear(4, 4)


@pytest.mark.parametrize("reentrant", [{"use_reentrant": True}, {}], ids=["true", "left_out"])
def test_reentrant_checkpoint_of_a_pure_function_is_traced_as_one_region(reentrant):
    def fn(x):
        y = checkpoint(_block, x.sin(), **reentrant).cos()
        return checkpoint(_LINEAR, y, **reentrant)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counter = _compare_with_parameters(fn, _LINEAR)
    assert counter.frame_count == 1 and len(counter.graphs) == 1
    tagged = {region for region in _regions(counter) if region is not None}
    assert len(tagged) == 2


def test_checkpoint_with_use_reentrant_left_out_warns_as_eager():
    def fn(x):
        return checkpoint(_block, x)

    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    with pytest.warns(UserWarning, match="use_reentrant"):
        compiled(torch.ones(4, 4, requires_grad=True))


_BATCH_NORM = nn.BatchNorm1d(4)


@pytest.mark.parametrize(
    "block",
    [
        lambda a: a.mul(1).mul_(2),
        lambda a: torch.nn.functional.relu(a * 2, inplace=True),
        _BATCH_NORM,
    ],
    ids=["in_place_method", "inplace_argument", "batch_norm_statistics"],
)
def test_reentrant_checkpoint_writing_state_runs_eagerly(block):
    def fn(x):
        return checkpoint(block, x.sin(), use_reentrant=True).cos()

    before = _BATCH_NORM.running_mean.clone()
    counter = _compare_with_parameters(fn, _LINEAR)
    assert all(region is None for region in _regions(counter))
    if block is _BATCH_NORM:  # eager's forward and its recomputation: updated twice each run
        assert not torch.equal(_BATCH_NORM.running_mean, before)


def test_reentrant_checkpoint_of_inputs_without_grad_runs_eagerly():
    """Eager's outputs do not require grad (no argument does), though fn reads parameters."""

    def fn(x):
        return checkpoint(_LINEAR, x.detach(), use_reentrant=True).cos()

    counter = _compare_with_parameters(fn, _LINEAR)
    assert all(region is None for region in _regions(counter))


def _save_matmuls(ctx, op, *args, **kwargs):
    return op is torch.ops.aten.mm.default


_SELECTIVE = functools.partial(
    torch.utils.checkpoint.create_selective_checkpoint_contexts, _save_matmuls
)


def test_selective_checkpoint_is_traced_with_its_policy():
    def fn(x):
        return checkpoint(_block, x.sin(), use_reentrant=False, context_fn=_SELECTIVE).cos()

    counter = _run_with_gradients(fn)
    assert counter.frame_count == 1
    policies = [
        node.meta.get(CHECKPOINT_POLICY)
        for gm in counter.graphs
        for node in gm.graph.nodes
        if node.meta.get(CHECKPOINT_REGION) is not None
    ]
    assert policies and all(policy is _save_matmuls for policy in policies)
