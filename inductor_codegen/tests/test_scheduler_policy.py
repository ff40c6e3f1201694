"""The scheduler's fusion policy: each horizontal rule, and why it exists.

Legality (what may fuse) is `scheduler.plan_kernel`; a `FusionPolicy` picks among
legal horizontal fusions. These tests schedule with and without a rule to show
what it changes. The GPU-only rules have their tests in test_triton_codegen.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from graph_helpers import check, trace

from inductor_codegen.lowering import LOWERINGS
from inductor_codegen.pipeline import PassRecorder, lower_and_schedule
from inductor_codegen.scheduler import (
    CPU_FUSION_POLICY,
    FusedKernel,
    FusionPolicy,
    memoized_bodies,
)


def _kernel_count(fn, *args, policy: FusionPolicy) -> int:
    gm = trace(fn, *args)
    with memoized_bodies():
        _graph, plan = lower_and_schedule(gm, list(args), LOWERINGS, PassRecorder(), policy)
    return sum(isinstance(step, FusedKernel) for step in plan.steps)


def test_a_transposed_copy_stays_out_of_a_contiguous_kernel():
    # b.t() + 1 reads across the vector loop; a * 2 along it: apart, a * 2 still vectorizes
    def fn(a, b):
        return a * 2, b.t() + 1

    a, b = torch.randn(64, 64), torch.randn(64, 64)
    assert check(fn, a, b).kernel_count == 2
    without = dataclasses.replace(CPU_FUSION_POLICY, horizontal_rules=("index_divisions",))
    assert _kernel_count(fn, a, b, policy=without) == 1


def test_independent_contiguous_loops_share_a_kernel():
    def fn(a, b):
        return a * 2, b + 1

    assert check(fn, torch.randn(64, 64), torch.randn(64, 64)).kernel_count == 1


def test_a_fusion_policy_names_only_known_rules():
    with pytest.raises(ValueError, match="unknown horizontal fusion rules"):
        FusionPolicy(horizontal_rules=("index_divisions", "no_such_rule"))


def test_gpu_policy_joins_small_reductions_over_the_same_loops_only():
    # the GPU policy keeps unrelated work out of reduction kernels, except reductions
    # small enough that the launch, not memory, is the cost
    from inductor_codegen.codegen.triton.compile import GPU_FUSION_POLICY

    def fn(x, y):
        return x.sum(0), y.sum(0)

    args = torch.randn(32, 768), torch.randn(32, 768)
    assert _kernel_count(fn, *args, policy=GPU_FUSION_POLICY) == 1
    smaller = dataclasses.replace(GPU_FUSION_POLICY, small_reduction_elements=1000)
    assert _kernel_count(fn, *args, policy=smaller) == 2


def test_gpu_policy_keeps_a_cast_out_of_an_unrelated_reduction_kernel():
    from inductor_codegen.codegen.triton.compile import GPU_FUSION_POLICY

    def fn(x, w):
        return x.sum(-1), w.to(torch.bfloat16)

    args = torch.randn(64, 768), torch.randn(64, 300)
    assert _kernel_count(fn, *args, policy=GPU_FUSION_POLICY) == 2
    # a CPU kernel's threads split the outer loop whatever runs inside: one kernel there
    assert _kernel_count(fn, *args, policy=CPU_FUSION_POLICY) == 1


def test_a_column_sum_stays_out_of_a_row_kernel_of_equal_size():
    # as many rows as columns (a layer norm's backward over 128 tokens of width 128):
    # the weight gradient, a sum over rows, keeps a tiled kernel of its own
    def fn(x, g, w):
        row = (x * w).sum(-1, keepdim=True)
        return x * w * 128 - row, (g * x).sum(0)

    x, g, w = torch.randn(128, 128), torch.randn(128, 128), torch.randn(128)
    compiled = check(fn, x, g, w)
    assert compiled.kernel_count == 2
    kernels = "\n".join(a.text for a in compiled.artifacts if a.name == "codegen")
    assert "x0_tile" in kernels, kernels
    without = dataclasses.replace(
        CPU_FUSION_POLICY,
        horizontal_rules=tuple(
            r for r in CPU_FUSION_POLICY.horizontal_rules if r != "column_reductions_tiled"
        ),
    )
    assert _kernel_count(fn, x, g, w, policy=without) == 1


@pytest.mark.parametrize("layout", ["cpu", "gpu"])
def test_the_normalize_of_a_one_row_norm_joins_its_reduction_kernel(layout):
    """A layer norm over one row (a decode step of batch one) is one kernel, as over many
    rows: its pointwise loop is as long as the row it reduces. A pointwise loop of another
    length, or over a row longer than ONE_ROW_LIMIT, keeps a kernel of its own."""
    from inductor_codegen.codegen.triton.compile import GPU_FUSION_POLICY
    from inductor_codegen.scheduler import ONE_ROW_LIMIT

    policy = CPU_FUSION_POLICY if layout == "cpu" else GPU_FUSION_POLICY

    def norm(x, w):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], w) * 2

    def centred_and_other(x, w):
        return x - x.mean(), w.repeat(3) + 1

    for shape in [(1, 768), (1, 1, 64), (768,)]:
        x, w = torch.randn(shape), torch.randn(shape[-1])
        assert _kernel_count(norm, x, w, policy=policy) == 1
        assert check(norm, x, w).kernel_count == 1
    x, w = torch.randn(1, ONE_ROW_LIMIT * 2), torch.randn(ONE_ROW_LIMIT * 2)
    assert _kernel_count(norm, x, w, policy=policy) == 2
    assert check(norm, x, w).kernel_count == 2
    x, w = torch.randn(64), torch.randn(64)
    assert _kernel_count(centred_and_other, x, w, policy=policy) >= 2  # w.repeat: 192 long
    check(centred_and_other, x, w)
