"""Values read from tensors (`.item()`, `.tolist()`): the graph breaks at the read and resumes.

The graph before the break computes the tensor the value is read from (`x.sum()` in
`x.sum().item()`), as torch.compile's does; only the read runs eagerly.
"""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture


def _one():
    return (torch.randn(4),)


def item_of_sum(x):
    v = x.sum().item()
    return x + v


def item_in_condition(x):
    if x.sum().item() > 0:
        return x + 1
    return x - 1


def item_returned_with_tensor(x):
    y = x * 2
    v = y.max().item()
    return y + v, v


def item_inside_expression(x):
    y = x.cos()
    return y * 2 + y.mean().item()


def tolist_then_python(x):
    y = x.abs()
    values = y.tolist()
    return y * len(values) + values[0]


PROGRAMS = [
    item_of_sum,
    item_in_condition,
    item_returned_with_tensor,
    item_inside_expression,
    tolist_then_python,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_value_read_breaks_and_resumes_like_torch(fn):
    # three calls: the second value read recompiles the resume part once, with the
    # value symbolic from then on (automatic dynamic), as in torch; the same three
    # inputs for capture and for torch.compile
    inputs = [(torch.randn(4),) for _ in range(3)]
    pending = inputs + inputs
    check_like_torch(fn, lambda: pending.pop(0), calls=3)


def test_item_graph_before_break_computes_the_read_tensor():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = dynamo_capture.optimize(item_of_sum, backend=backend)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), item_of_sum(x))
    assert len(graphs) == 2
    first = [node.target for node in graphs[0].graph.nodes if node.op == "call_method"]
    assert first == ["sum"]


def test_item_under_fullgraph_names_the_read():
    compiled = dynamo_capture.optimize(
        item_of_sum, backend=lambda gm, ex: gm.forward, fullgraph=True
    )
    with pytest.raises(dynamo_capture.Unsupported, match="item"):
        compiled(torch.randn(4))
