"""C++ kernels round as eager's kernels do: no multiply-add contraction."""

from __future__ import annotations

import pytest
import torch

from inductor_codegen.codegen.cpp.build import CompilerConfig

aot_autograd = pytest.importorskip("aot_autograd")
prim_decomp = pytest.importorskip("prim_decomp")


def _compiled(fn):
    from inductor_codegen import compile_graph

    return aot_autograd.aot_function(
        fn,
        fw_compiler=lambda gm, ex: compile_graph(gm, ex),
        decompositions=prim_decomp.inductor_default,
    )


def test_flags_forbid_fused_multiply_add_contraction():
    assert "-ffp-contract=off" in CompilerConfig().flags


@pytest.mark.parametrize(
    "fn",
    [lambda x: (x * 1.1).std(0, correction=0), lambda x: x.square().std(0, correction=0)],
    ids=["scaled", "squared"],
)
def test_std_of_equal_elements_has_eager_gradient(fn):
    x = torch.tensor([0.1, 0.1], dtype=torch.float64, requires_grad=True)
    fn(x).backward()
    expected, x.grad = x.grad, None
    _compiled(fn)(x).backward()
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=0)
