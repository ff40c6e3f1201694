"""Activation checkpointing: the regions capture tags, carried to the ATen graph.

Capture tags each node that `torch.utils.checkpoint.checkpoint(fn, ...)` traced with
`node.meta[CHECKPOINT_REGION]` (a number per checkpoint call). Tracing runs such a graph
through `RegionInterpreter`, which makes the tag of the node it runs the current region;
the tracer tags each ATen node it records meanwhile with it. The joint graph's forward
nodes then say which region made them (the backward's nodes are made by autograd, under
no region).

The partitioners treat a tagged node as `must_recompute` (torch's
`CheckpointPolicy.MUST_RECOMPUTE`): the backward computes it again from the region's
inputs rather than have the forward save it. Random ops (`torch.Tag.nondeterministic_seeded`)
are never recomputed: their results (a dropout's mask) are saved, so the backward reads
the numbers the forward drew. A node that is a forward output is not recomputed either:
it is alive anyway.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

__all__ = ["CHECKPOINT_REGION", "RegionInterpreter", "current_region", "must_recompute"]

# node.meta key of a checkpoint region; the same key capture writes (the key is the
# contract between the stages, which do not import each other)
CHECKPOINT_REGION = "ember_checkpoint_region"

_current: contextvars.ContextVar[Any] = contextvars.ContextVar("checkpoint_region", default=None)


def current_region() -> Any:
    """The checkpoint region of the graph node being run, or None."""
    return _current.get()


class RegionInterpreter(fx.Interpreter):
    """Runs a graph, each node with its `CHECKPOINT_REGION` as the current region."""

    def run_node(self, n: fx.Node) -> Any:
        token = _current.set(n.meta.get(CHECKPOINT_REGION))
        try:
            return super().run_node(n)
        finally:
            _current.reset(token)


def has_regions(graph: fx.Graph) -> bool:
    return any(n.meta.get(CHECKPOINT_REGION) is not None for n in graph.nodes)


def running_regions(module: fx.GraphModule, graph: fx.Graph | None = None) -> Callable:
    """A function running `graph` (default: the module's) on `module`'s attributes,
    carrying its checkpoint regions to what it calls."""

    def run(*args: Any) -> Any:
        return RegionInterpreter(module, graph=graph).run(*args)

    return run


def tag_nodes_after(last: fx.Node, region: Any) -> None:
    """Tag the nodes after `last` in its graph with `region` (a nested tag is kept)."""
    node = last.next
    while node.op != "root":
        node.meta.setdefault(CHECKPOINT_REGION, region)
        node = node.next


def must_recompute(node: fx.Node) -> bool:
    """Whether a partitioner recomputes `node` in the backward rather than save it: a
    checkpointed op that draws no random numbers."""
    if node.op != "call_function" or node.meta.get(CHECKPOINT_REGION) is None:
        return False
    return torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ())
