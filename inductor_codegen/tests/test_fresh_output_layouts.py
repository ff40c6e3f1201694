"""An ATen call's new tensor is laid out densely even where its meta rule says it repeats.

torch 2.11's meta rule of `slice_scatter` on an expanded input gives the result the
input's stride 0, where the kernel returns a dense tensor; laying the real result out
as the meta said kept one element of each repeated run (a write into an expanded
input was lost). A new tensor (an output that is not a view) never repeats elements.
"""

from __future__ import annotations

import torch
from graph_helpers import trace

from inductor_codegen import compile_graph


def _with_repeating_meta(gm: torch.fx.GraphModule, target) -> int:
    changed = 0
    for node in gm.graph.nodes:
        if node.target is target:
            val = node.meta["val"]
            node.meta["val"] = val.as_strided(val.shape, (0,) * val.ndim)
            changed += 1
    return changed


def test_new_tensor_with_a_repeating_meta_layout_keeps_every_element():
    def f(x, src):
        out = torch.ops.aten.slice_scatter.default(x, src, 0, 1, 2**62, 1)
        return out * 2 + 1

    x = torch.tensor([-3], dtype=torch.int32).expand(2)
    src = torch.tensor([3], dtype=torch.int32)
    gm = trace(f, x, src)
    assert _with_repeating_meta(gm, torch.ops.aten.slice_scatter.default) == 1
    compiled = compile_graph(gm, [x, src])
    torch.testing.assert_close(compiled(x, src), f(x, src))
