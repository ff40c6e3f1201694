"""OpInfo forward samples through the whole compiler: ember.compile(backend="inductor").

Each op's first float32 CPU sample is called through a compiled function with
fullgraph=True (so a capture gap is counted as one, not hidden by running eagerly)
and compared with eager. By default a representative subset runs; set
EMBER_FULL_OPINFO=1 for every op in torch's op_db (the full sweep prints a tally).
"""

from __future__ import annotations

import os

import pytest
import torch

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
