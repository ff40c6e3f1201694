"""Activation checkpointing: the regions capture tags, carried to the ATen graph.

Capture tags each node that `torch.utils.checkpoint.checkpoint(fn, ...)` traced with
`node.meta[CHECKPOINT_REGION]` (a number per checkpoint call). Tracing runs such a graph
through `RegionInterpreter`, which makes the tag of the node it runs the current region;
the tracer tags each ATen node it records meanwhile with it. The joint graph's forward
nodes then say which region made them (the backward's nodes are made by autograd, under
no region).

A selective checkpoint (`context_fn=functools.partial(create_selective_checkpoint_contexts,
policy)`) also tags its nodes with the policy (`CHECKPOINT_POLICY`): the tracer asks it
about each ATen op, as eager's checkpoint asks in its forward, and marks the nodes of an
op it says to save (`MUST_SAVE`, `PREFER_SAVE`, True) with `CHECKPOINT_SAVE`. A policy
only chooses what is kept for the backward, never a value: one that fails on the
tracer's fake tensors saves that op.

The partitioners treat a tagged node (not marked to save) as `must_recompute` (torch's
`CheckpointPolicy.MUST_RECOMPUTE`): the backward computes it again from the region's
inputs rather than have the forward save it. Random ops (`torch.Tag.nondeterministic_seeded`)
are never recomputed: their results (a dropout's mask) are saved, so the backward reads
the numbers the forward drew. A node that is a forward output is not recomputed either:
it is alive anyway.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

__all__ = [
    "CHECKPOINT_POLICY",
    "CHECKPOINT_REGION",
    "CHECKPOINT_SAVE",
    "RegionInterpreter",
    "RegionTag",
    "current_region",
    "must_recompute",
]

# node.meta keys capture writes: a checkpoint region, a selective checkpoint's policy
# (the keys are the contract between the stages, which do not import each other)
CHECKPOINT_REGION = "ember_checkpoint_region"
CHECKPOINT_POLICY = "ember_checkpoint_policy"
# node.meta key of an ATen node a selective checkpoint's policy said to save
CHECKPOINT_SAVE = "ember_checkpoint_save"


@dataclasses.dataclass(frozen=True, slots=True)
class RegionTag:
    """The checkpoint region of the node being run: its policy (a Torch-level node of a
    selective checkpoint) or the policy's answer (`save`, an ATen node traced again)."""

    region: Any
    policy: Callable | None = None
    save: bool = False

    def saves(self, func: Any, args: tuple, kwargs: dict) -> bool:
        """Whether the results of ATen op `func` are saved rather than recomputed."""
        if self.policy is None:
            return self.save
        context = torch.utils.checkpoint.SelectiveCheckpointContext(is_recompute=False)
        try:
            decision = self.policy(context, func, *args, **kwargs)
        except Exception:  # noqa: BLE001 - a policy chooses memory, never values
            return True
        if isinstance(decision, bool):
            return decision
        policy = torch.utils.checkpoint.CheckpointPolicy
        return decision in (policy.MUST_SAVE, policy.PREFER_SAVE)


_current: contextvars.ContextVar[RegionTag | None] = contextvars.ContextVar(
    "checkpoint_region", default=None
)


def current_region() -> RegionTag | None:
    """The checkpoint region of the graph node being run, or None."""
    return _current.get()


class RegionInterpreter(fx.Interpreter):
    """Runs a graph, each node with its `CHECKPOINT_REGION` as the current region."""

    def run_node(self, n: fx.Node) -> Any:
        region = n.meta.get(CHECKPOINT_REGION)
        tag = None
        if region is not None:
            policy = n.meta.get(CHECKPOINT_POLICY)
            tag = RegionTag(region, policy, bool(n.meta.get(CHECKPOINT_SAVE)))
        token = _current.set(tag)
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


def tag_nodes_after(last: fx.Node, region: Any, save: bool) -> None:
    """Tag the nodes after `last` in its graph with `region`, and `save` (the policy's
    answer for their op)."""
    node = last.next
    while node.op != "root":
        if CHECKPOINT_REGION not in node.meta:
            node.meta[CHECKPOINT_REGION] = region
            if save:
                node.meta[CHECKPOINT_SAVE] = True
        node = node.next


def must_recompute(node: fx.Node) -> bool:
    """Whether a partitioner recomputes `node` in the backward rather than save it: a
    checkpointed op that draws no random numbers, and which no policy said to save."""
    if node.op != "call_function" or node.meta.get(CHECKPOINT_REGION) is None:
        return False
    if node.meta.get(CHECKPOINT_SAVE):
        return False
    return torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ())


def saved_by_policy(node: fx.Node) -> bool:
    """Whether a selective checkpoint's policy said to save `node`."""
    return bool(node.meta.get(CHECKPOINT_SAVE))
