"""torch's meta kernels on fakes with symbolic sizes: OpInfo samples, every dim of size >= 2
dynamic. The symbolic output shape evaluated at the hints equals eager's shape, and the
guards recorded on the way hold on the sample itself.

EMBER_DYNAMIC_OPINFO_FULL=1 sweeps every OpInfo with float32 CPU samples and prints the
pass rate (not part of the default run).
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch

pytest.importorskip("expecttest", reason="torch's OpInfo database imports expecttest")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from guards import (  # noqa: E402
    DataDependentError,
    FakeTensorMode,
    GuardSet,
    LocalSource,
    ShapeEnv,
    UnsupportedOpError,
)

FULL = os.environ.get("EMBER_DYNAMIC_OPINFO_FULL") == "1"
SAMPLES_PER_OP = 3 if FULL else 2

SUBSET = [
    "add", "mul", "sub", "div", "exp", "tanh", "sigmoid", "clamp", "where", "masked_fill",
    "matmul", "mm", "bmm", "addmm", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.layer_norm", "nn.functional.embedding", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.pad",
    "nn.functional.scaled_dot_product_attention", "nn.functional.cross_entropy",
    "softmax", "log_softmax", "cat", "stack", "view", "reshape", "permute", "transpose",
    "expand", "index_select", "gather", "mean", "sum", "amax", "var", "cumsum", "argmax",
    "chunk", "split", "repeat", "flatten", "unsqueeze", "squeeze", "tril", "zeros_like",
    "new_zeros", "contiguous", "arange", "t", "narrow_copy",
]  # fmt: skip


def _ops():
    names = set(SUBSET)
    return [op for op in op_db if FULL or op.name in names]


def _fake(mode: FakeTensorMode, value, counter: list[int]):
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return value
    counter[0] += 1
    dims = [d for d, size in enumerate(value.shape) if size >= 2]
    return mode.from_real(value, LocalSource(f"a{counter[0]}"), dynamic_dims=dims)


def _hinted_shape(env: ShapeEnv, tensor: torch.Tensor) -> tuple[int, ...]:
    return tuple(
        env.hint_of(d.node.expr) if isinstance(d, torch.SymInt) else int(d) for d in tensor.shape
    )


def _check_sample(op, sample) -> str:
    """'pass', 'skip: why' or raises AssertionError."""
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    counter = [0]
    real = [sample.input, *sample.args]
    fakes = [_fake(mode, value, counter) for value in real]
    kwargs = {k: _fake(mode, v, counter) for k, v in sample.kwargs.items()}
    try:
        expected = op.op(*real, **sample.kwargs)
    except Exception as error:  # noqa: BLE001 - eager refuses the sample
        return f"skip: eager raised {type(error).__name__}"
    try:
        with mode:
            out = op.op(*fakes, **kwargs)
    except (DataDependentError, UnsupportedOpError) as error:
        return f"skip: {type(error).__name__}"
    want = [t for t in tree_flatten(expected)[0] if isinstance(t, torch.Tensor)]
    got = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    assert len(got) == len(want), f"{op.name}: {len(got)} outputs, eager gives {len(want)}"
    for fake, eager in zip(got, want, strict=True):
        assert _hinted_shape(env, fake) == tuple(eager.shape), (
            f"{op.name}: symbolic shape {tuple(fake.shape)} is "
            f"{_hinted_shape(env, fake)} at the hints, eager gives {tuple(eager.shape)}"
        )
        assert fake.dtype == eager.dtype
    guards = GuardSet()
    guards.add_shape_env(env)
    frame = {f"a{i + 1}": value for i, value in enumerate(_tensors(real, sample.kwargs))}
    assert guards.why_failed(frame, {}) is None, f"{op.name}: guards fail on their own sample"
    assert guards.compile()(frame, {})
    return "pass"


def _tensors(real: list, kwargs: dict) -> list[torch.Tensor]:
    values = [*real, *kwargs.values()]
    return [v for v in values if isinstance(v, torch.Tensor) and v.layout == torch.strided]


def _samples(op):
    try:
        samples = op.sample_inputs("cpu", torch.float32, requires_grad=False)
    except Exception:  # noqa: BLE001 - no float32 samples
        return []
    return list(samples)[:SAMPLES_PER_OP]


@pytest.mark.parametrize("op", _ops(), ids=lambda op: f"{op.name}.{op.variant_test_name}")
def test_symbolic_shapes_match_eager(op):
    samples = _samples(op)
    if not samples:
        pytest.skip("no float32 CPU samples")
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for sample in samples:
            if FULL:
                try:
                    results.append(_check_sample(op, sample))
                except Exception as error:  # noqa: BLE001 - the sweep reports, never stops
                    results.append(f"fail: {type(error).__name__}: {str(error)[:120]}")
            else:
                results.append(_check_sample(op, sample))
    if FULL:
        failed = [r for r in results if r.startswith("fail")]
        if failed:
            pytest.fail(failed[0])
    if all(r.startswith("skip") for r in results):
        pytest.skip(results[0])
