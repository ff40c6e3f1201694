"""Invariant checks on the graphs the stage hands to compilers, behind one flag.

Turned on by `EMBER_AOT_CHECKS=1` (read at import) or `with checks_enabled():`;
the package's tests turn them on. Each pass's output is verified by the driver.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
from torch import fx

from aot_autograd.errors import AotAutogradError
from aot_autograd.mutations import mutated_arguments

__all__ = ["checks_enabled", "checks_on", "verify_functional_graph"]

_state = {"on": os.environ.get("EMBER_AOT_CHECKS", "") == "1"}


def checks_on() -> bool:
    """Whether invariant checks run."""
    return _state["on"]


@contextlib.contextmanager
def checks_enabled(on: bool = True) -> Iterator[None]:
    """Run the invariant checks (or not) inside the block."""
    previous = _state["on"]
    _state["on"] = on
    try:
        yield
    finally:
        _state["on"] = previous


def verify_functional_graph(gm: fx.GraphModule, stage: str) -> None:
    """No node of `gm` writes to a tensor, and every value node carries meta["val"]."""
    gm.graph.lint()
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "call_function", "get_attr") and "val" not in node.meta:
            raise AotAutogradError(f"{stage}: node {node.format_node()} has no meta['val']")
        target = node.target
        if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
            if mutated_arguments(target):
                raise AotAutogradError(f"{stage}: mutating op {target} left in the graph")
            if target is torch.ops.aten.native_batch_norm.default:
                if node.args[5] and node.args[3] is not None:
                    raise AotAutogradError(f"{stage}: batch norm updating statistics in place")
