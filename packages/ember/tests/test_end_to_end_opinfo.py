"""OpInfo forward samples through the whole compiler: ember.compile(backend="inductor").

Each op's first float32 CPU sample is called through a compiled function with
fullgraph=True (so a capture gap is counted as one, not hidden by running eagerly)
and compared with eager (values, shapes, dtypes, requires_grad); a second test runs
it with inputs requiring grad through aot_eager and inductor and compares the grads
too. By default a representative subset runs; set
EMBER_FULL_OPINFO=1 for every op in torch's op_db (the full sweep prints a tally).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.utils._pytree as pytree

import ember
from dynamo_capture.errors import Unsupported

common_methods_invocations = pytest.importorskip(
    "torch.testing._internal.common_methods_invocations",
    reason="OpInfo needs expecttest (the test extra installs it)",
)

FULL = os.environ.get("EMBER_FULL_OPINFO") == "1"

# Ops whose results are random or depend on state eager and compiled runs do not share.
RANDOM = (
    "rand",
    "dropout",
    "normal",
    "bernoulli",
    "multinomial",
    "uniform",
    "exponential",
    "geometric",
    "cauchy",
    "log_normal",
    "poisson",
    "lowrank",
    "empty",
    "new_empty",
)

# A representative subset for CI: pointwise, reductions, views, norms, matmul, indexing, losses.
SUBSET = {
    "add",
    "mul",
    "div",
    "sub",
    "pow",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "sin",
    "abs",
    "clamp",
    "where",
    "maximum",
    "nn.functional.relu",
    "nn.functional.gelu",
    "nn.functional.silu",
    "nn.functional.softplus",
    "nn.functional.leaky_relu",
    "sum",
    "mean",
    "var",
    "amax",
    "argmax",
    "logsumexp",
    "softmax",
    "log_softmax",
    "nn.functional.layer_norm",
    "nn.functional.linear",
    "matmul",
    "bmm",
    "addmm",
    "cat",
    "stack",
    "permute",
    "transpose",
    "reshape",
    "flatten",
    "expand",
    "narrow",
    "select",
    "index_select",
    "gather",
    "cumsum",
    "nn.functional.cross_entropy",
    "nn.functional.mse_loss",
    "nn.functional.embedding",
    "nn.functional.conv2d",
    "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d",
}


def _ops():
    chosen = []
    for op in common_methods_invocations.op_db:
        if any(word in op.name for word in RANDOM):
            continue
        if not FULL and op.name not in SUBSET:
            continue
        if torch.float32 not in op.supported_dtypes("cpu"):
            continue
        chosen.append(pytest.param(op, id=f"{op.name}.{op.variant_test_name}".rstrip(".")))
    return chosen


def _first_sample(op):
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=False):
        return sample
    return None


@pytest.mark.parametrize("op", _ops())
def test_forward_through_ember_inductor(op):
    sample = _first_sample(op)
    if sample is None:
        pytest.skip("no float32 CPU sample")
    function = op.op

    def program(*args, **kwargs):
        return function(*args, **kwargs)

    args = (sample.input, *sample.args)
    try:
        expected = program(*args, **sample.kwargs)
    except Exception as error:  # eager itself rejects this sample
        pytest.skip(f"eager raises {type(error).__name__}")
    compiled = ember.compile(program, backend="inductor", fullgraph=True)
    try:
        actual = compiled(*args, **sample.kwargs)
    except Unsupported as unsupported:
        if not FULL:
            raise  # the subset's ops must capture whole
        pytest.xfail(f"capture: {str(unsupported).splitlines()[0]}")
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
    _assert_same_requires_grad(actual, expected)


def _assert_same_requires_grad(actual, expected) -> None:
    leaves = zip(pytree.tree_leaves(actual), pytree.tree_leaves(expected), strict=True)
    for i, (a, e) in enumerate(leaves):
        if isinstance(e, torch.Tensor):
            assert a.requires_grad == e.requires_grad, f"output {i}: requires_grad differs"


def _copies(structure):
    def copy(leaf):
        if not isinstance(leaf, torch.Tensor):
            return leaf
        return leaf.detach().clone().requires_grad_(leaf.requires_grad)

    return pytree.tree_map(copy, structure)


def _weighted_sum(outputs):
    total = 0
    for o in pytree.tree_leaves(outputs):
        if isinstance(o, torch.Tensor) and o.requires_grad:
            o = torch.view_as_real(o.resolve_conj()) if o.is_complex() else o
            total = total + (o * (torch.arange(o.numel()).view(o.shape) % 3 + 1)).sum()
    return total


def _requiring_grad(structure):
    return [
        t for t in pytree.tree_leaves(structure) if isinstance(t, torch.Tensor) and t.requires_grad
    ]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("op", _ops())
def test_forward_and_grads_through_ember(op, backend):
    """The first sample with inputs requiring grad: outputs (value, shape, dtype,
    requires_grad) and the grads of a weighted sum of them match eager."""
    if not op.supports_autograd:
        pytest.skip("no autograd")
    sample = next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=True)), None)
    if sample is None:
        pytest.skip("no float32 CPU sample")
    function = op.op

    def program(*args, **kwargs):
        return function(*args, **kwargs)

    structure = ((sample.input, *sample.args), sample.kwargs)
    (eager_args, eager_kwargs), (args, kwargs) = _copies(structure), _copies(structure)
    try:
        expected = program(*eager_args, **eager_kwargs)
    except Exception as error:  # eager itself rejects this sample
        pytest.skip(f"eager raises {type(error).__name__}")
    try:
        actual = ember.compile(program, backend=backend, fullgraph=True)(*args, **kwargs)
    except Unsupported as unsupported:
        if not FULL:
            raise
        pytest.xfail(f"capture: {str(unsupported).splitlines()[0]}")
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
    _assert_same_requires_grad(actual, expected)
    loss = _weighted_sum(expected)
    wanted_e, wanted_a = _requiring_grad(eager_args), _requiring_grad(args)
    if not isinstance(loss, torch.Tensor) or not wanted_e:
        return
    grads_e = torch.autograd.grad(loss, wanted_e, allow_unused=True)
    grads_a = torch.autograd.grad(_weighted_sum(actual), wanted_a, allow_unused=True)
    torch.testing.assert_close(grads_a, grads_e, rtol=1e-4, atol=1e-4, equal_nan=True)
