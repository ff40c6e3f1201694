"""OpInfo samples through each named table, compared with eager.

By default a representative subset of OpInfos runs (the ops of common models);
EMBER_FULL_OPINFO=1 sweeps every OpInfo of torch's op_db. An OpInfo whose
samples never reach an op the table decomposes is skipped as not covered.
"""

from __future__ import annotations

import os

import pytest
import torch
from prim_decomp_opinfo import Outcome, check_opinfo, check_opinfo_grad, leaf_ops, opinfos

from prim_decomp import PRIMS_KEPT, core_aten, inductor_default, is_prim, prims

FULL = os.environ.get("EMBER_FULL_OPINFO") == "1"

# OpInfo names whose decompositions must be exercised by `core_aten`.
CORE_ATEN_SUBSET = [
    "nn.functional.silu", "nn.functional.softplus", "nn.functional.hardswish",
    "nn.functional.hardsigmoid", "nn.functional.mish", "nn.functional.relu6",
    "nn.functional.glu", "softmax", "log_softmax", "logsumexp",
    "nn.functional.layer_norm", "nn.functional.rms_norm", "nn.functional.batch_norm",
    "nn.functional.group_norm", "nn.functional.cross_entropy", "nn.functional.nll_loss",
    "nn.functional.mse_loss", "nn.functional.l1_loss", "nn.functional.smooth_l1_loss",
    "nn.functional.binary_cross_entropy_with_logits", "nn.functional.linear", "matmul",
    "addmv", "mv", "dot", "outer", "std", "var_mean", "std_mean",
    "stack", "split", "chunk", "narrow", "transpose", "t", "flatten", "unflatten",
    "squeeze", "reshape", "contiguous", "roll", "unbind", "zeros", "ones", "zeros_like",
    "ones_like", "new_zeros", "new_full", "addcmul", "addcdiv", "lerp",
    "masked_fill", "clamp_min", "floor_divide", "xlogy", "tril", "triu",
    "nn.functional.scaled_dot_product_attention", "nn.functional.interpolate.nearest",
    "nn.functional.interpolate.bilinear", "nn.functional.dropout",
]  # fmt: skip

# Extra OpInfo names for the compound core ops `inductor_default` also breaks up.
INDUCTOR_SUBSET = CORE_ATEN_SUBSET + [
    "nn.functional.gelu", "nn.functional.leaky_relu", "nn.functional.elu",
    "nn.functional.hardtanh", "mean", "var", "nn.functional.embedding", "nn.functional.softmin",
]  # fmt: skip


# OpInfos whose programs `core_aten | prims` must reduce to prims (and PRIMS_KEPT).
PRIMS_SUBSET = [
    "nn.functional.gelu", "nn.functional.silu", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.group_norm", "nn.functional.cross_entropy",
    "nn.functional.mse_loss", "mean", "var", "sum", "amax", "argmax", "logsumexp", "cat",
    "stack", "split", "chunk", "narrow", "transpose", "permute", "expand", "flatten", "unflatten",
    "squeeze", "unsqueeze", "view", "reshape", "clone", "contiguous", "gather", "scatter",
    "scatter_add", "index_select", "where", "clamp", "maximum", "minimum", "pow", "add", "sub",
    "mul", "div.no_rounding_mode", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin",
    "cos", "abs", "neg", "full", "zeros", "ones", "nn.functional.embedding", "tril",
]  # fmt: skip

TABLES = {
    "core_aten": (core_aten, CORE_ATEN_SUBSET + ["baddbmm"]),
    "inductor_default": (inductor_default, INDUCTOR_SUBSET),
    "core_aten|prims": (core_aten | prims, PRIMS_SUBSET),
}


def _cases():
    for table_name, (table, subset) in TABLES.items():
        for op in opinfos(None if FULL else subset):
            yield pytest.param(table, op, id=f"{table_name}-{op.name}.{op.variant_test_name}")


def test_subsets_name_real_opinfos():
    for _, subset in TABLES.values():
        found = {f"{op.name}.{op.variant_test_name}".rstrip(".") for op in opinfos(subset)}
        missing = set(subset) - found
        assert not missing, f"not in op_db: {sorted(missing)}"


@pytest.mark.parametrize(("table", "op"), list(_cases()))
def test_opinfo_matches_eager(table, op):
    result = check_opinfo(op, table, samples_per_dtype=6 if FULL else 3)
    if result.outcome is Outcome.NOT_COVERED:
        if FULL:
            pytest.skip("no sample reaches an op the table decomposes")
        pytest.fail(f"{result.name}: the subset lists it, but no sample reached the table")
    assert result.outcome is Outcome.PASS, f"{result.name}: {result.message}"


@pytest.mark.parametrize("op", opinfos(PRIMS_SUBSET), ids=lambda op: op.name)
def test_prims_table_leaves_only_prims(op):
    ran = leaf_ops(op, core_aten | prims, samples=3)
    left = {o for o in ran if not is_prim(o) and o not in PRIMS_KEPT}
    assert not left, f"{op.name} still runs {sorted(map(str, left))}"


# OpInfos whose backward ops (gelu_backward, native_layer_norm_backward, ...) must be
# exercised by `inductor_default` when their gradients are taken.
GRAD_SUBSET = [
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.layer_norm",
    "nn.functional.batch_norm", "nn.functional.group_norm", "nn.functional.embedding",
    "nn.functional.cross_entropy", "nn.functional.nll_loss", "nn.functional.mse_loss",
    "softmax", "log_softmax", "nn.functional.hardswish", "nn.functional.elu",
    "nn.functional.leaky_relu", "nn.functional.mish", "nn.functional.softplus",
    "nn.functional.hardsigmoid", "nn.functional.relu", "tanh", "sigmoid",
    "nn.functional.dropout", "nn.functional.hardtanh",
]  # fmt: skip


def _grad_cases():
    for op in opinfos(None if FULL else GRAD_SUBSET):
        if op.supports_autograd:
            yield pytest.param(op, id=f"{op.name}.{op.variant_test_name}")


@pytest.mark.parametrize("op", list(_grad_cases()))
def test_opinfo_gradients_match_eager(op):
    result = check_opinfo_grad(op, inductor_default, samples_per_dtype=3 if FULL else 2)
    if result.outcome is Outcome.NOT_COVERED:
        if FULL:
            pytest.skip("no sample reaches an op the table decomposes")
        pytest.fail(f"{result.name}: the subset lists it, but no sample reached the table")
    assert result.outcome is Outcome.PASS, f"{result.name}: {result.message}"


def _in_place(op) -> bool:
    return op._schema.name.endswith("_") or op.overloadpacket.__name__.endswith("_")


@pytest.mark.parametrize("op", opinfos(CORE_ATEN_SUBSET), ids=lambda op: op.name)
def test_core_aten_table_leaves_only_core_ops(op):
    """Functional ops outside the core set must all be decomposed (in-place ones, which
    eager composite kernels use, never reach a functional graph)."""
    ran = leaf_ops(op, core_aten, samples=3)
    left = {o for o in ran if torch.Tag.core not in o.tags and not _in_place(o)}
    assert not left, f"{op.name} still runs {sorted(map(str, left))}"
