"""Backends: any torch.compile-style backend callable works behind capture (the contract)."""

from __future__ import annotations

import torch
import torch.nn as nn

import dynamo_capture


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)


def scaled_sine(x, scale):
    return torch.sin(x) * scale + 1


def test_torch_inductor_as_backend():
    from torch._inductor.compile_fx import compile_fx

    compiled = dynamo_capture.optimize(scaled_sine, backend=compile_fx, fullgraph=True)
    x = torch.randn(4, 8)
    torch.testing.assert_close(compiled(x, 2.0), scaled_sine(x, 2.0))
    torch.testing.assert_close(compiled(x + 1, 2.0), scaled_sine(x + 1, 2.0))
    assert len(compiled.entries) == 1


def test_backend_receives_graph_and_real_example_inputs():
    seen = {}

    def backend(gm, example_inputs):
        seen["inputs"] = example_inputs
        seen["vals"] = [node.meta.get("val") for node in gm.graph.nodes if node.op == "placeholder"]
        return gm

    model = Small()
    x = torch.randn(2, 8)
    dynamo_capture.optimize(model, backend=backend)(x)
    assert any(inp is x for inp in seen["inputs"])
    assert any(inp is model.fc1.weight for inp in seen["inputs"])
    assert all(
        val is not None and val.shape == inp.shape
        for val, inp in zip(seen["vals"], seen["inputs"], strict=True)
    )


def test_every_node_has_meta_val():
    graphs = []
    model = Small()
    dynamo_capture.optimize(model, backend=lambda gm, ex: graphs.append(gm) or gm)(
        torch.randn(2, 8)
    )
    from guards import is_fake

    for node in graphs[0].graph.nodes:
        if node.op in ("placeholder", "call_function", "call_method"):
            assert "val" in node.meta, node.format_node()
            assert is_fake(node.meta["val"]) and node.meta["val"].device.type == "cpu"
