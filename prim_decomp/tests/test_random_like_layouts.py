"""`rand_like` of a strided tensor: eager's numbers at eager's elements.

Eager's `rand_like(x)` is `empty_like(x).uniform_()`: it keeps a dense `x`'s layout and
fills it in memory order. The decomposition drew `rand(x.shape)`, contiguous, so a
transposed or channels-last `x` got the same numbers at other elements (found beside
the fuzzer's `guards` profile, tools/fuzz, under inductor). `randn_like` is left
drawing contiguous: eager's CPU normal_ computes other numbers for a strided tensor.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from prim_decomp import decompose, inductor_default

LAYOUTS = {
    "contiguous": lambda: torch.ones(4, 6),
    "transposed": lambda: torch.ones(4, 6).t(),
    "channels_last": lambda: torch.ones(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
    "permuted_3d": lambda: torch.ones(3, 4, 5).permute(2, 0, 1),
    "sliced": lambda: torch.ones(4, 12)[:, ::2],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_rand_like_draws_in_eagers_order(layout):
    def f(x):
        return torch.rand_like(x)

    x = LAYOUTS[layout]()
    gm = decompose(make_fx(f, tracing_mode="fake")(x), inductor_default)
    assert torch.ops.aten.rand_like.default not in {n.target for n in gm.graph.nodes}
    torch.manual_seed(0)
    want = f(x)
    torch.manual_seed(0)
    got = gm(x)
    assert torch.equal(want, got)
    assert want.stride() == got.stride()
