"""Graph nodes carry the nn.Module calls they were made in (node.meta[MODULE_CALLS])."""

from __future__ import annotations

import torch
import torch.nn as nn

import dynamo_capture
from dynamo_capture.calls import MODULE_CALLS


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu()


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Inner() for _ in range(2))

    def forward(self, x):
        x = x * 2
        for block in self.blocks:
            x = block(x)
        return x - 1


def _graph(module, *inputs):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    out = dynamo_capture.optimize(module, backend=backend, fullgraph=True)(*inputs)
    torch.testing.assert_close(out, module(*inputs))
    return graphs[0]


def test_nodes_carry_the_module_calls_they_were_made_in_outermost_first():
    gm = _graph(Outer(), torch.randn(2, 4))
    stacks = {}
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method"):
            tags = node.meta.get(MODULE_CALLS, ())
            # the compiled module's own call, where capture starts at its __call__
            stacks[node.name] = [(name, cls.__name__) for _, name, cls in tags if name != "self"]
    assert stacks["x"] == [] and stacks["sub"] == []  # `x = x * 2` names its node x
    calls = [stack for stack in stacks.values() if stack]
    assert [s[0][0] for s in calls] == ["self.blocks.0"] * 2 + ["self.blocks.1"] * 2
    assert calls[0] == [("self.blocks.0", "Inner"), ("self.blocks.0.linear", "Linear")]
    numbers = {
        number
        for node in gm.graph.nodes
        for number, name, _ in node.meta.get(MODULE_CALLS, ())
        if name in ("self.blocks.0", "self.blocks.1")
    }
    assert len(numbers) == 2  # each block call its own number
