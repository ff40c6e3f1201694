"""OpInfo forward samples (float32, CPU) through make_fx core-ATen graphs + compile_graph vs eager.

By default a representative subset of ops runs (pointwise, reductions, views,
normalizations, indexing, matmul). EMBER_FULL_OPINFO=1 runs every op in op_db
that has float32 CPU samples. All samples of one op are compiled as one graph
(one compile per op); an op passes when every sample matches eager.
"""

from __future__ import annotations

import os

import pytest
import torch
from opinfo_samples import compile_and_check, sample_fns
from torch.testing._internal.common_methods_invocations import op_db

FULL = os.environ.get("EMBER_FULL_OPINFO") == "1"
SAMPLES_PER_OP = 8 if FULL else 4

DEFAULT_OPS = {
    "abs",
    "acos",
    "add",
    "addcmul",
    "addmm",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "atan2",
    "bmm",
    "cat",
    "ceil",
    "clamp",
    "clone",
    "cos",
    "cosh",
    "div",
    "eq",
    "erf",
    "exp",
    "expand",
    "flatten",
    "floor",
    "fmod",
    "gather",
    "ge",
    "index_select",
    "isnan",
    "le",
    "lerp",
    "log",
    "log1p",
    "log_softmax",
    "logical_and",
    "logsumexp",
    "masked_fill",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mm",
    "mul",
    "mv",
    "ne",
    "neg",
    "nn.functional.gelu",
    "nn.functional.layer_norm",
    "nn.functional.pad",
    "nn.functional.relu",
    "nn.functional.silu",
    "nn.functional.softplus",
    "permute",
    "pow",
    "prod",
    "reciprocal",
    "remainder",
    "repeat",
    "reshape",
    "round",
    "rsqrt",
    "sigmoid",
    "sign",
    "sin",
    "slice",
    "softmax",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "sub",
    "sum",
    "t",
    "tanh",
    "transpose",
    "tril",
    "trunc",
    "unsqueeze",
    "var",
    "var_mean",
    "view",
    "where",
    "xlogy",
    "roll",
    "flip",
}
# Ops whose outputs are random or uninitialized: not comparable with eager by value.
NOT_COMPARABLE = (
    "rand",
    "bernoulli",
    "normal",
    "dropout",
    "multinomial",
    "uniform",
    "exponential",
    "geometric",
    "cauchy",
    "log_normal",
    "empty",
    "new_empty",
    "randint",
    "randn",
    "fractional_max_pool",
    "rrelu",
    "pca_lowrank",
    "svd_lowrank",
)


def _cases():
    for info in op_db:
        name = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        if not FULL and info.name not in DEFAULT_OPS:
            continue
        if torch.float32 not in info.supported_dtypes("cpu"):
            continue
        marks = []
        if any(word in info.name for word in NOT_COMPARABLE):
            marks.append(pytest.mark.skip(reason="random or uninitialized output"))
        yield pytest.param(info, id=name, marks=marks)


def _sample_fns(info):
    return sample_fns(info, "cpu", SAMPLES_PER_OP)


@pytest.mark.parametrize("info", list(_cases()))
def test_opinfo_forward(info):
    compiled = compile_and_check(info, "cpu", SAMPLES_PER_OP)
    _report(info, compiled)
    if "<whole graph>" in compiled.fallbacks:
        pytest.skip("the traced graph mutates tensors; it ran through ATen, not compiled")


def _report(info, compiled) -> None:
    """With EMBER_OPINFO_REPORT=path, append one line per op: name and ATen fallbacks."""
    path = os.environ.get("EMBER_OPINFO_REPORT")
    if path:
        with open(path, "a") as report:
            report.write(f"{info.name}\t{info.variant_test_name}\t{dict(compiled.fallbacks)}\n")
