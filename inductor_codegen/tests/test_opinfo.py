"""OpInfo forward samples through make_fx core-ATen graphs + compile_graph, against eager.

One harness, parametrized over the code generator's device, the dtype and static or
symbolic sizes (test ids read `cpp-static-float32-add`). All samples of one op are
compiled as one graph (one compile per op); an op passes when every sample matches.

    cpp, static      a representative subset of ops (DEFAULT_OPS: pointwise,
                     reductions, views, normalizations, indexing, matmul);
                     EMBER_FULL_OPINFO=1 every op in op_db with CPU samples
    cpp, symbolic    every dim of size >= 2 a size symbol (equal sizes share one, as
                     duck sizing does), traced on guards fakes and compiled once:
                     a few ops (SYMBOLIC_OPS); EMBER_FULL_OPINFO=1 the default subset
    triton, static   the Triton generator (on the GPU, or under the Triton interpreter
                     on the CPU): a small set (TRITON_OPS); EMBER_TRITON_OPINFO=default
                     the default subset, EMBER_TRITON_OPINFO=full every op in op_db

Samples are float32; EMBER_OPINFO_DTYPES=float32,bfloat16 adds dtypes (torch's
tolerances for the dtype apply to other than float32).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import pytest
import torch
import torch.utils._pytree as pytree
from dynamic_graphs import trace_symbolic
from opinfo_samples import compile_and_check, one_graph, sample_fns, tolerance

# torch's OpInfo database imports expecttest, which not every torch install has
pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

from inductor_codegen import DynamicShapeError, compile_graph

FULL = os.environ.get("EMBER_FULL_OPINFO") == "1"
TRITON_SWEEP = os.environ.get("EMBER_TRITON_OPINFO", "")
DTYPES = tuple(
    getattr(torch, name) for name in os.environ.get("EMBER_OPINFO_DTYPES", "float32").split(",")
)
CPU_SAMPLES_PER_OP = 8 if FULL else 4
TRITON_SAMPLES_PER_OP = 4
TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HAS_TRITON = importlib.util.find_spec("triton") is not None

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
SYMBOLIC_OPS = {"sum", "softmax", "nn.functional.layer_norm", "cat", "split", "var_mean"}
TRITON_OPS = {
    "add", "mul", "div", "where", "clamp", "exp", "tanh", "sigmoid", "remainder", "pow",
    "sum", "amax", "argmax", "var_mean", "softmax", "log_softmax", "logsumexp",
    "nn.functional.layer_norm", "nn.functional.gelu", "nn.functional.pad", "cat",
    "permute", "expand", "slice", "roll", "tril", "masked_fill", "abs", "floor",
}  # fmt: skip
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


@dataclass(frozen=True, slots=True)
class Variant:
    """One column of the harness: which generator, which sizes, which dtype."""

    device: str  # "cpp" or "triton"
    sizes: str  # "static" or "symbolic"
    dtype: torch.dtype

    @property
    def sample_device(self) -> str:
        return TRITON_DEVICE if self.device == "triton" else "cpu"

    def wants(self, name: str) -> bool:
        if self.device == "triton":
            if TRITON_SWEEP == "full":
                return True
            return name in (DEFAULT_OPS if TRITON_SWEEP == "default" else TRITON_OPS)
        if self.sizes == "symbolic":
            return name in (DEFAULT_OPS if FULL else SYMBOLIC_OPS)
        return FULL or name in DEFAULT_OPS

    def marks(self) -> list:
        if self.device != "triton":
            return []
        return [
            pytest.mark.triton_interpret,
            pytest.mark.skipif(not HAS_TRITON, reason="could not import 'triton'"),
        ]


VARIANTS = [
    *(Variant("cpp", "static", dtype) for dtype in DTYPES),
    *(Variant("cpp", "symbolic", dtype) for dtype in DTYPES),
    *(Variant("triton", "static", dtype) for dtype in DTYPES),
]


def _cases():
    for variant in VARIANTS:
        dtype_name = str(variant.dtype).removeprefix("torch.")
        for info in op_db:
            if not variant.wants(info.name):
                continue
            if variant.dtype not in info.supported_dtypes(variant.sample_device):
                continue
            name = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
            marks = variant.marks()
            if any(word in info.name for word in NOT_COMPARABLE):
                marks.append(pytest.mark.skip(reason="random or uninitialized output"))
            case_id = f"{variant.device}-{variant.sizes}-{dtype_name}-{name}"
            yield pytest.param(variant, info, id=case_id, marks=marks)


@pytest.mark.parametrize("variant, info", list(_cases()))
def test_opinfo_forward(variant: Variant, info):
    if variant.sizes == "symbolic":
        _check_symbolic(info, variant.dtype)
        return
    if variant.device == "triton":
        options, limit = {"device_codegen": "triton"}, TRITON_SAMPLES_PER_OP
    else:
        options, limit = None, CPU_SAMPLES_PER_OP
    compiled = compile_and_check(info, variant.sample_device, limit, options, variant.dtype)
    if variant.device == "cpp":
        _report(info, compiled)
    if "<whole graph>" in compiled.fallbacks:
        pytest.skip("the traced graph mutates tensors; it ran through ATen, not compiled")


def _check_symbolic(info, dtype: torch.dtype) -> None:
    """All samples in one graph over symbolic sizes, compiled once, compared with eager."""
    cases = []
    for fn, tensors in sample_fns(info, "cpu", CPU_SAMPLES_PER_OP, dtype):
        try:
            cases.append((fn, tensors, fn(*tensors)))
        except Exception:  # noqa: BLE001 - a sample eager itself rejects
            continue
    if not cases:
        pytest.skip("no sample runs eagerly")
    all_samples, flat = one_graph(cases)
    dynamic = {i: [d for d, s in enumerate(t.shape) if s >= 2] for i, t in enumerate(flat)}
    try:
        gm, examples = trace_symbolic(all_samples, *flat, dynamic=dynamic)
    except Exception as error:  # noqa: BLE001 - the test tracer's limits, not the codegen's
        pytest.skip(f"cannot be traced on symbolic fakes: {type(error).__name__}")
    try:
        compiled = compile_graph(gm, examples)
    except DynamicShapeError as error:
        pytest.skip(f"needs static sizes: {error}")
    expected = [e if isinstance(e, torch.Tensor) else tuple(e) for _, _, e in cases]
    got = compiled(*flat)
    for a, b in zip(_leaves([got]), _leaves([tuple(expected)])):
        torch.testing.assert_close(a, b, **tolerance(dtype))


def _leaves(values):
    return [torch.as_tensor(v) for v in pytree.tree_leaves([tuple(v) for v in values])]


def _report(info, compiled) -> None:
    """With EMBER_OPINFO_REPORT=path, append one line per op: name and ATen fallbacks."""
    path = os.environ.get("EMBER_OPINFO_REPORT")
    if path:
        with open(path, "a") as report:
            report.write(f"{info.name}\t{info.variant_test_name}\t{dict(compiled.fallbacks)}\n")
