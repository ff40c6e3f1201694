"""OpInfo forward samples (float32) through make_fx graphs + the Triton generator vs eager.

Without a GPU the kernels run under the Triton interpreter. By default a small
representative set of ops runs; EMBER_TRITON_OPINFO=default runs the CPU
suite's default op set (test_opinfo.DEFAULT_OPS), EMBER_TRITON_OPINFO=full
every op in op_db with float32 samples. All samples of one op are compiled as
one graph; an op passes when every sample matches eager.
"""

from __future__ import annotations

import os

import pytest
import torch
from opinfo_samples import compile_and_check
from torch.testing._internal.common_methods_invocations import op_db

pytest.importorskip("triton")
pytestmark = pytest.mark.triton_interpret

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SWEEP = os.environ.get("EMBER_TRITON_OPINFO", "")
SAMPLES_PER_OP = 4
SMALL_OPS = {
    "add", "mul", "div", "where", "clamp", "exp", "tanh", "sigmoid", "remainder", "pow",
    "sum", "amax", "argmax", "var_mean", "softmax", "log_softmax", "logsumexp",
    "nn.functional.layer_norm", "nn.functional.gelu", "nn.functional.pad", "cat",
    "permute", "expand", "slice", "roll", "tril", "masked_fill", "abs", "floor",
}  # fmt: skip
RANDOM = ("rand", "bernoulli", "normal", "dropout", "multinomial", "uniform", "empty", "rrelu")


def _wanted(name: str) -> bool:
    if SWEEP == "full":
        return True
    if SWEEP == "default":
        from test_opinfo import DEFAULT_OPS

        return name in DEFAULT_OPS
    return name in SMALL_OPS


def _cases():
    for info in op_db:
        if not _wanted(info.name) or torch.float32 not in info.supported_dtypes(DEVICE):
            continue
        name = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        marks = (
            [pytest.mark.skip(reason="random output")]
            if any(w in info.name for w in RANDOM)
            else []
        )
        yield pytest.param(info, id=name, marks=marks)


@pytest.mark.parametrize("info", list(_cases()))
def test_opinfo_forward_triton(info):
    compiled = compile_and_check(info, DEVICE, SAMPLES_PER_OP, {"device_codegen": "triton"})
    if "<whole graph>" in compiled.fallbacks:
        pytest.skip("the traced graph mutates tensors; it ran through ATen, not compiled")
