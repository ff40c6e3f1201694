"""Float16/bfloat16 values read in the C++ kernel that computes them.

A half buffer holds its values rounded; a read of it in the same kernel (a reduction's
result kept in a local, a value just stored) must see the rounded value a load would
give. `x == amax(x)` (the backward of a half amax) compared a rounded x with an
unrounded max and matched no element.
"""

from __future__ import annotations

import pytest
import torch
from graph_helpers import trace

from inductor_codegen import compile_graph


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_reduction_read_in_its_kernel_is_rounded_as_stored(dtype):
    x = torch.tensor([[1.0, 0.75], [3.0, 2.25], [0.3, 0.7]], dtype=dtype)
    s = torch.tensor(1.1, dtype=dtype)

    def f(x, s):
        y = x * s
        return y == y.amax(-1, keepdim=True), y.amax(-1) * 2, y.sum(-1) == y.sum(-1)

    compiled = compile_graph(trace(f, x, s), [x, s])
    for got, want in zip(compiled(x, s), f(x, s), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_value_stored_then_compared_in_its_kernel_is_rounded(dtype):
    x = torch.linspace(-3, 3, 40, dtype=dtype).reshape(4, 10)

    def f(x):
        y = x * 1.1 + 0.3
        return y, y == y.amax(-1, keepdim=True)

    compiled = compile_graph(trace(f, x), [x])
    (y, at_max), (y_eager, at_max_eager) = compiled(x), f(x)
    torch.testing.assert_close(y, y_eager, rtol=2e-2, atol=2e-2)  # one rounding, not two
    assert torch.equal(at_max, y == y.amax(-1, keepdim=True))  # its own stored values
    assert at_max.sum() == at_max_eager.sum() == 4
