"""Graphs split at DDP's gradient buckets, so that all-reduce overlaps the backward.

DDP all-reduces a bucket of gradients (about `bucket_bytes_cap` bytes) as soon as
every gradient in it is ready. A compiled forward that is one autograd node makes
all its gradients ready at once, at the end of its backward: nothing overlaps.
`DDPBucketBackend` wraps the backend: it cuts the captured graph into consecutive
pieces holding about one bucket of parameters each (in reverse order, as DDP fills
buckets from the last parameters), compiles each piece with the wrapped backend, and
chains them. Each piece is an autograd node of its own, so the gradients of the last
piece are ready (and all-reduced) while the backward of the earlier pieces runs.

    piece 0: placeholders ... -> values later pieces use
    piece 1: ...
    top graph: piece_0(...) -> getitem ... -> piece_1(...) -> ... -> output

A parameter is a graph input whose example requires grad. A graph with one bucket
of parameters or fewer is not cut. torch.compile's DDPOptimizer does the same; it
also gives each piece fake inputs of its own, which capture's node metadata gives here.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from guards import artifact_logger

__all__ = ["DDPBucketBackend", "bucket_cuts", "ddp_first_bucket_cap", "split_graph"]


def _bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return 0


def bucket_cuts(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    cap: int,
    first_cap: int | None = None,
) -> list[int]:
    """Node indices where a new piece starts, so each piece holds about `cap` bytes of
    parameters (the graph's inputs that require grad), filled from the end. The first
    bucket DDP fills (the last parameters) holds `first_cap` bytes where given: DDP starts
    a small all-reduce early (1 MiB by default)."""
    first_cap = cap if first_cap is None else min(first_cap, cap)
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    parameters = {
        node
        for node, example in zip(placeholders, example_inputs, strict=False)
        if isinstance(example, torch.Tensor) and example.requires_grad
    }
    cuts: list[int] = []
    seen: set[torch.fx.Node] = set()
    filled = 0
    first_compute = len(placeholders)
    for index in range(len(nodes) - 1, first_compute - 1, -1):
        node = nodes[index]
        for used in node.all_input_nodes:
            if used in parameters and used not in seen:
                seen.add(used)
                filled += _bytes(used.meta.get("val"))
        if filled >= (first_cap if not cuts else cap) and index > first_compute:
            cuts.append(index)
            filled = 0
    return sorted(cuts)


def ddp_first_bucket_cap(ddp: Any) -> int:
    """The size of the first bucket `ddp` all-reduces: DDP's own where it records it, else
    torch.distributed's default first bucket (1 MiB) when `bucket_cap_mb` was left at its
    default, else `bucket_bytes_cap` (a user-set cap applies to every bucket)."""
    config = getattr(ddp, "_bucket_config", None)
    recorded = getattr(config, "first_bucket_bytes_cap", None)
    if isinstance(recorded, int):
        return recorded
    default = getattr(torch.distributed, "_DEFAULT_FIRST_BUCKET_BYTES", None)
    if getattr(ddp, "bucket_bytes_cap_default", False) and isinstance(default, int):
        return min(default, ddp.bucket_bytes_cap)
    return ddp.bucket_bytes_cap


def split_graph(gm: torch.fx.GraphModule, cuts: list[int]) -> torch.fx.GraphModule:
    """`gm` as a chain of submodules `piece_0`, `piece_1`, ... cut before `cuts`."""
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    output = nodes[-1]
    bounds = [len(placeholders), *cuts, len(nodes) - 1]
    pieces = [nodes[start:stop] for start, stop in zip(bounds, bounds[1:], strict=False)]
    piece_of = {node: i for i, piece in enumerate(pieces) for node in piece}
    top = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in placeholders:
        env[node] = top.node_copy(node)
    root = torch.nn.Module()
    for i, piece in enumerate(pieces):
        inputs = []
        for node in piece:
            for used in node.all_input_nodes:
                if piece_of.get(used) != i and used not in inputs:
                    inputs.append(used)
        outputs = [
            node
            for node in piece
            if any(piece_of.get(user, -1) != i for user in node.users)  # later pieces, output
        ]
        graph = torch.fx.Graph()
        local: dict[torch.fx.Node, torch.fx.Node] = {}
        for used in inputs:
            local[used] = graph.placeholder(used.name)
            local[used].meta = dict(used.meta)
        for node in piece:
            local[node] = graph.node_copy(node, local.__getitem__)
        graph.output(tuple(local[node] for node in outputs))
        name = f"piece_{i}"
        setattr(root, name, torch.fx.GraphModule(gm, graph, class_name=f"{name}_graph"))
        call = top.call_module(name, tuple(env[used] for used in inputs))
        for index, node in enumerate(outputs):
            env[node] = top.call_function(operator.getitem, (call, index))
            env[node].meta = dict(node.meta)
    top.node_copy(output, env.__getitem__)
    return torch.fx.GraphModule(root, top, class_name=f"{type(gm).__name__}_ddp_split")


class DDPBucketBackend:
    """A backend that cuts the graph at DDP buckets and compiles each piece with `backend`."""

    def __init__(
        self,
        backend: Callable[..., Any],
        bucket_bytes_cap: int,
        first_bucket_cap: int | None = None,
    ) -> None:
        self.backend = backend
        self.bucket_bytes_cap = bucket_bytes_cap
        self.first_bucket_cap = first_bucket_cap
        self.supports_dynamic_shapes = getattr(backend, "supports_dynamic_shapes", True)
        self.__name__ = f"ddp_buckets({getattr(backend, '__name__', type(backend).__name__)})"
        self.pieces: list[torch.fx.GraphModule] = []  # every piece compiled, for inspection

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        cuts = bucket_cuts(gm, example_inputs, self.bucket_bytes_cap, self.first_bucket_cap)
        if not cuts:
            return self.backend(gm, example_inputs)
        split = split_graph(gm, cuts)
        artifact_logger("graph_breaks").info(
            "%s: cut at DDP's buckets (%d bytes) into %d pieces",
            type(gm).__name__, self.bucket_bytes_cap, len(cuts) + 1,
        )  # fmt: skip
        for node in split.graph.find_nodes(op="call_module"):
            piece = getattr(split, node.target)
            examples = [n.meta.get("val") for n in piece.graph.find_nodes(op="placeholder")]
            compiled = self.backend(piece, examples)
            self.pieces.append(piece)
            setattr(split, node.target, _Compiled(compiled))
        return split.forward


class _Compiled(torch.nn.Module):
    """A compiled piece as a submodule of the chaining graph."""

    def __init__(self, compiled: Callable[..., Any]) -> None:
        super().__init__()
        self.compiled = compiled

    def forward(self, *args: Any) -> Any:
        return self.compiled(*args)
