"""OpInfo through aot: outputs and grads match eager on float64 samples.

By default a representative subset runs (OPS_DEFAULT, a few samples each);
EMBER_FULL_OPINFO=1 runs every op of op_db with all of its samples.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.utils._pytree as pytree
from aot_checks import RecordingCompiler
from torch.testing._internal.common_methods_invocations import op_db

from aot_autograd import aot_function, min_cut_rematerialization_partition

FULL = os.environ.get("EMBER_FULL_OPINFO") == "1"

# One or two ops of each kind: pointwise, reductions, views, matmuls, indexing,
# normalization, losses, convolutions, shape ops, linear algebra.
OPS_DEFAULT = {
    "add",
    "mul",
    "div",
    "sin",
    "exp",
    "log",
    "sigmoid",
    "tanh",
    "pow",
    "where",
    "clamp",
    "abs",
    "sqrt",
    "rsqrt",
    "maximum",
    "lerp",
    "addcmul",
    "sum",
    "mean",
    "amax",
    "var",
    "std",
    "prod",
    "cumsum",
    "logsumexp",
    "norm",
    "softmax",
    "log_softmax",
    "nn.functional.layer_norm",
    "nn.functional.batch_norm",
    "nn.functional.group_norm",
    "view",
    "reshape",
    "transpose",
    "permute",
    "t",
    "expand",
    "squeeze",
    "unsqueeze",
    "flatten",
    "narrow",
    "select",
    "split",
    "chunk",
    "unbind",
    "diagonal",
    "as_strided",
    "cat",
    "stack",
    "flip",
    "roll",
    "repeat",
    "tril",
    "mm",
    "bmm",
    "matmul",
    "addmm",
    "einsum",
    "nn.functional.linear",
    "index_select",
    "gather",
    "scatter_add",
    "index_put",
    "masked_fill",
    "take_along_dim",
    "nn.functional.embedding",
    "nn.functional.conv2d",
    "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d",
    "nn.functional.gelu",
    "nn.functional.silu",
    "nn.functional.relu",
    "nn.functional.cross_entropy",
    "nn.functional.mse_loss",
    "nn.functional.pad",
    "nn.functional.interpolate",
    "nn.functional.scaled_dot_product_attention",
    "linalg.vector_norm",
    "topk",
    "sort",
    "max",
    "argmax",
    "nn.functional.softplus",
    "nn.functional.dropout",
}
SAMPLES_DEFAULT = 3

# Ops whose output is random, so eager and compiled runs cannot be compared value by value.
RANDOM = {
    "bernoulli",
    "normal",
    "rand_like",
    "randn_like",
    "randint_like",
    "multinomial",
    "nn.functional.dropout",
    "nn.functional.dropout2d",
    "nn.functional.dropout3d",
    "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout",
    "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d",
    "cauchy",
    "exponential",
    "geometric",
    "log_normal",
    "randint",
    "randn",
    "svd_lowrank",
    "pca_lowrank",
    "uniform",
    "empty",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "empty_strided",
    "empty_permuted",
    "torch.empty",
}


def _ops():
    chosen = [op for op in op_db if FULL or op.name in OPS_DEFAULT]
    return [op for op in chosen if op.name not in RANDOM]


def _dtype(op) -> torch.dtype | None:
    dtypes = op.supported_dtypes("cpu")
    for dtype in (torch.float64, torch.float32):
        if dtype in dtypes:
            return dtype
    return None


def _as_function(op, sample):
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def fn(*tensors):
        values = list(leaves)
        for position, tensor in zip(positions, tensors):
            values[position] = tensor
        inp, args, kwargs = pytree.tree_unflatten(values, spec)
        return op(inp, *args, **kwargs)

    return fn, [leaves[i] for i in positions]


def _clone(tensors):
    """Copies that keep each tensor's whole storage (some samples view beyond their elements)."""
    copies = []
    for t in tensors:
        copy = torch.empty(0, dtype=t.dtype)
        copy.set_(t.untyped_storage().clone(), t.storage_offset(), t.shape, t.stride())
        copies.append(copy.requires_grad_(t.requires_grad))
    return copies


def _random_sample(op, sample) -> bool:
    """Samples that draw random numbers (attention dropout), so values cannot be compared."""
    if sample.kwargs.get("dropout_p", 0.0) > 0.0:
        return True
    return "attention" in op.name and sample.kwargs.get("training") is True


def _loss(outputs):
    """A weighted sum of every output that requires grad (complex ones as real pairs)."""
    total = 0
    for o in pytree.tree_leaves(outputs):
        if not (isinstance(o, torch.Tensor) and o.requires_grad):
            continue
        if o.is_complex():
            o = torch.view_as_real(o.resolve_conj())
        if o.is_floating_point():
            total = total + (o * (torch.arange(o.numel()).view(o.shape) % 3 + 1)).sum()
    return total


def assert_same_outputs(actual, expected) -> None:
    """Values, shapes and dtypes (assert_close) and requires_grad of every output."""
    torch.testing.assert_close(actual, expected, equal_nan=True)
    leaves_a, leaves_e = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    for i, (a, e) in enumerate(zip(leaves_a, leaves_e, strict=True)):
        if isinstance(e, torch.Tensor):
            assert a.requires_grad == e.requires_grad, (
                f"output {i}: requires_grad {a.requires_grad}, eager {e.requires_grad}"
            )


def check_sample(op, sample, partition_fn=None, decompositions=None) -> None:
    fn, tensors = _as_function(op, sample)
    eager_inputs, aot_inputs = _clone(tensors), _clone(tensors)
    expected = fn(*eager_inputs)
    compiler = RecordingCompiler()
    compiled = aot_function(fn, compiler, partition_fn=partition_fn, decompositions=decompositions)
    actual = compiled(*aot_inputs)
    assert_same_outputs(actual, expected)
    wanted_e = [t for t in eager_inputs if t.requires_grad]
    loss_e = _loss(expected)
    if not wanted_e or not isinstance(loss_e, torch.Tensor):
        return
    wanted_a = [t for t in aot_inputs if t.requires_grad]
    grads_e = torch.autograd.grad(loss_e, wanted_e, allow_unused=True)
    grads_a = torch.autograd.grad(_loss(actual), wanted_a, allow_unused=True)
    torch.testing.assert_close(grads_a, grads_e, equal_nan=True)


def _cases():
    cases = []
    for op in _ops():
        dtype = _dtype(op)
        if dtype is not None:
            cases.append(pytest.param(op, dtype, id=f"{op.name}.{op.variant_test_name}"))
    return cases


@pytest.mark.parametrize("op,dtype", _cases())
def test_opinfo_grad(op, dtype):
    samples = op.sample_inputs("cpu", dtype, requires_grad=op.supports_autograd)
    for i, sample in enumerate(samples):
        if not FULL and i >= SAMPLES_DEFAULT:
            break
        if not _random_sample(op, sample):
            check_sample(op, sample)


@pytest.mark.parametrize("name", ["nn.functional.gelu", "nn.functional.layer_norm", "matmul"])
def test_opinfo_grad_min_cut(name):
    op = next(o for o in op_db if o.name == name)
    for i, sample in enumerate(op.sample_inputs("cpu", torch.float64, requires_grad=True)):
        if i >= SAMPLES_DEFAULT:
            break
        check_sample(op, sample, partition_fn=min_cut_rematerialization_partition)


def _tables():
    prim_decomp = pytest.importorskip("prim_decomp")
    return {
        "inductor_default": (prim_decomp.inductor_default, 1),
        "core_aten|prims": (prim_decomp.core_aten | prim_decomp.prims, 1),
    }


@pytest.mark.parametrize("table_name", ["inductor_default", "core_aten|prims"])
def test_opinfo_grad_with_decomposition_table_and_min_cut(table_name):
    """What the inductor backend runs: a prim_decomp table applied, min-cut partitioning."""
    table, samples = _tables()[table_name]
    cases = [case.values for case in _cases()]
    if table_name != "inductor_default" and not FULL:
        cases = cases[::3]  # every third op: the prims table is also swept by prim_decomp
    for op, dtype in cases:
        for i, sample in enumerate(
            op.sample_inputs("cpu", dtype, requires_grad=op.supports_autograd)
        ):
            if i >= samples:
                break
            if not _random_sample(op, sample):
                check_sample(op, sample, min_cut_rematerialization_partition, table)
