"""OpInfo samples run on fakes: outputs have eager's shape, dtype, device and strides.

By default a representative subset of ops that real models use runs (forward,
and backward through autograd on fakes). EMBER_OPINFO_FULL=1 sweeps every
OpInfo with float32 CPU samples and reports the pass rate.
"""

from __future__ import annotations

import itertools
import os
import warnings

import pytest
import torch

pytest.importorskip("expecttest", reason="torch's OpInfo database imports expecttest")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map

from guards import DataDependentError, FakeTensor, FakeTensorError, FakeTensorMode

FULL = os.environ.get("EMBER_OPINFO_FULL") == "1"
SAMPLES_PER_OP = 3 if FULL else 2

SUBSET = {
    "add", "mul", "sub", "div", "pow", "exp", "log", "rsqrt", "sqrt", "tanh", "sigmoid",
    "clamp", "where", "masked_fill", "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum",
    "nn.functional.linear", "nn.functional.conv2d", "nn.functional.conv1d",
    "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.group_norm",
    "nn.functional.embedding", "nn.functional.cross_entropy", "nn.functional.mse_loss",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.dropout",
    "nn.functional.pad", "nn.functional.interpolate", "nn.functional.scaled_dot_product_attention",
    "softmax", "log_softmax", "cat", "stack", "view", "reshape", "permute", "transpose",
    "expand", "index_select", "gather", "scatter", "mean", "sum", "amax", "var", "cumsum",
    "topk", "sort", "argmax", "chunk", "split", "repeat", "flatten", "unsqueeze", "squeeze",
    "tril", "triu", "zeros_like", "full_like", "new_zeros", "contiguous", "to", "index_put",
    "nonzero", "unique", "masked_select", "item", "linalg.lstsq", "histc",
}  # fmt: skip
# Known differences, each checked to stay what it is (a fixed entry fails loudly).
DATA_DEPENDENT = {
    "nonzero", "unique", "unique_consecutive", "masked_select", "item", "allclose",
    "combinations", "corrcoef", "cov", "equal", "narrow", "argwhere", "nn.functional.ctc_loss",
    "nn.functional.gaussian_nll_loss", "_segment_reduce", "linalg.lstsq",
}  # fmt: skip
# torch's meta kernels choose other strides than the CPU kernels for these.
META_STRIDES_DIFFER = {"svd_lowrank", "pca_lowrank", "fft.rfftn", "linalg.eig"}
NOT_STRIDED = {"sparse.sampled_addmm", "sparse.mm", "to_sparse"}
# Composite code reading tensor data in C++, above the dispatcher, where fakes cannot answer.
READS_DATA_IN_CPP = {"tensor_split"}
BACKWARD = {
    "nn.functional.linear", "nn.functional.conv2d", "nn.functional.layer_norm", "softmax",
    "matmul", "mul", "nn.functional.embedding", "nn.functional.cross_entropy", "sum", "mean",
    "permute", "nn.functional.gelu", "cat", "index_select", "nn.functional.scaled_dot_product_attention",
}  # fmt: skip


def _ops():
    selected = []
    for op in op_db:
        if torch.float32 not in op.supported_dtypes("cpu"):
            continue
        if FULL or op.name in SUBSET:
            selected.append(pytest.param(op, id=f"{op.name}.{op.variant_test_name}"))
    return selected


def _strides_agree(fake: torch.Tensor, real: torch.Tensor) -> bool:
    if real.numel() == 0:
        return True
    return all(
        size == 1 or a == b
        for size, a, b in zip(real.shape, fake.stride(), real.stride(), strict=True)
    )


def _check_outputs(got, expected, name):
    got_flat, expected_flat = tree_flatten(got)[0], tree_flatten(expected)[0]
    assert len(got_flat) == len(expected_flat)
    for fake, real in zip(got_flat, expected_flat, strict=True):
        if not isinstance(real, torch.Tensor):
            continue
        assert isinstance(fake, FakeTensor), name
        assert (fake.shape, fake.dtype, fake.device) == (real.shape, real.dtype, real.device)
        if name not in META_STRIDES_DIFFER:
            assert _strides_agree(fake, real), (name, fake.stride(), real.stride())


def _run(op, sample, mode):
    def fake(value):
        return mode.from_real(value) if isinstance(value, torch.Tensor) else value

    with mode:
        args = tree_map(fake, (sample.input, sample.args, sample.kwargs))
        return op(args[0], *args[1], **args[2]), args


@pytest.mark.parametrize("op", _ops())
def test_forward_metadata_matches_eager(op):
    name = op.name
    outcome = "pass"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = op.sample_inputs("cpu", torch.float32, requires_grad=False)
        for sample in itertools.islice(samples, SAMPLES_PER_OP):
            try:
                expected = op(sample.input, *sample.args, **sample.kwargs)
            except Exception:  # noqa: BLE001 - a sample eager rejects says nothing about fakes
                continue
            mode = FakeTensorMode()
            try:
                got, _ = _run(op, sample, mode)
                again, _ = _run(op, sample, mode)  # the second run may come from the cache
            except DataDependentError:
                outcome = "data_dependent"
                break
            except FakeTensorError:
                outcome = "not_strided"
                break
            except RuntimeError as error:
                if "data is not allocated" in str(error):
                    outcome = "reads_data_in_cpp"
                    break
                raise
            _check_outputs(got, expected, name)
            _check_outputs(again, expected, name)
    expect = (
        "data_dependent"
        if name in DATA_DEPENDENT
        else "not_strided"
        if name in NOT_STRIDED
        else "reads_data_in_cpp"
        if name in READS_DATA_IN_CPP
        else "pass"
    )
    assert outcome == expect, f"{name}: expected {expect}, got {outcome}"


@pytest.mark.parametrize("op", [p for p in _ops() if p.values[0].name in BACKWARD])
def test_backward_through_autograd_on_fakes(op):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = op.sample_inputs("cpu", torch.float32, requires_grad=True)
        for sample in itertools.islice(samples, SAMPLES_PER_OP - 1):
            expected = op(sample.input, *sample.args, **sample.kwargs)
            real_inputs = [
                t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]  # fmt: skip
            outputs = [t for t in tree_flatten(expected)[0] if isinstance(t, torch.Tensor)]
            if not outputs or not outputs[0].requires_grad:
                continue
            real_grads = torch.autograd.grad(outputs[0].sum(), real_inputs, allow_unused=True)
            mode = FakeTensorMode()
            got, fake_args = _run(op, sample, mode)
            fake_inputs = [
                t for t in tree_flatten(fake_args)[0] if isinstance(t, torch.Tensor) and t.requires_grad
            ]  # fmt: skip
            fake_out = tree_flatten(got)[0][0]
            with mode:
                fake_grads = torch.autograd.grad(fake_out.sum(), fake_inputs, allow_unused=True)
            for fake_grad, real_grad in zip(fake_grads, real_grads, strict=True):
                if real_grad is None:
                    assert fake_grad is None
                    continue
                _check_outputs(fake_grad, real_grad, op.name)
