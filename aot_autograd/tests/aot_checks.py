"""Shared helpers: a checking compiler and eager-vs-aot comparison."""

from __future__ import annotations

import torch
from torch import fx

from aot_autograd.mutations import mutated_arguments


def assert_functional(gm: fx.GraphModule) -> None:
    """No node of `gm` mutates anything, and every node carries meta["val"]."""
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "call_function", "get_attr"):
            assert "val" in node.meta, f"{node.format_node()} has no meta['val']"
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            assert not mutated_arguments(node.target), f"mutating op {node.target} in the graph"
            if node.target is torch.ops.aten.native_batch_norm.default:
                training, running_mean = node.args[5], node.args[3]
                assert not training or running_mean is None, "batch norm updating statistics"


class RecordingCompiler:
    """A compiler that checks each graph is functional and runs it as is."""

    def __init__(self) -> None:
        self.graphs: list[fx.GraphModule] = []

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> fx.GraphModule:
        assert_functional(gm)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        assert len(example_inputs) == len(placeholders)
        self.graphs.append(gm)
        return gm
