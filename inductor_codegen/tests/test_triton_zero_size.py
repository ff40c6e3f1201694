"""Zero-size tensors through Triton kernels: launched kernels never divide by zero.

A kernel running several pieces side by side (segments) finds its piece by dividing
the program id by the blocks per piece; with zero elements that count must stay one,
as the launch grid counts it, or the division is by zero (garbage on a GPU). Run under
TRITON_INTERPRET=1 on the CPU, which reports integer division by zero as a warning.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from inductor_codegen import compile_graph

pytest.importorskip("triton")
pytestmark = pytest.mark.triton_interpret

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _pieces(x, y):
    # Pointwise groups over different inputs of one size: one segmented kernel.
    return torch.cos(x).relu(), torch.sin(y) * 2, (y == y) & (y.abs() != float("inf"))


@pytest.mark.parametrize("n", [0, 5])
def test_zero_size_segments_do_not_divide_by_zero(n, tmp_path):
    x = torch.randn(n, device=DEVICE)
    y = torch.randn(n, device=DEVICE)
    gm = make_fx(_pieces)(x, y)
    options = {"device_codegen": "triton", "cache_dir": str(tmp_path)}
    compiled = compile_graph(gm, [x, y], options=options)
    assert "xsegment" in compiled.artifact("codegen")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        actual = compiled(x, y)
    for a, e in zip(actual, _pieces(x, y), strict=True):
        torch.testing.assert_close(a, e)
