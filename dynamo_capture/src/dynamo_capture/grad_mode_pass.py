"""A graph pass: grad-mode switches that change nothing are dropped.

Entering and leaving `no_grad` / `enable_grad` blocks records `_set_grad_enabled`
nodes; several in a row (a `with no_grad(), enable_grad():` opening, a block
closing right before another opens) act as their last one, and a run whose last
mode is the mode already in effect does nothing. torch.compile's graphs keep only
the switches that change the mode; so do ours (operation counts compare equal).
An `inference_mode(True)` block turns grad mode off until it closes.

A switch the code makes itself (`torch._C._set_grad_enabled(mode)`, as a user
context manager's `__enter__` does) is marked `KEEP` and stays, changing the mode
or not, as torch.compile keeps such calls; it ends a run of context switches.

Then, as torch.compile cleans its graphs, a switch away from the mode in effect where
the graph ends followed right away by a switch back (an empty `with` block of a user
context manager setting the mode) is erased, the two together (drop_undone_switches).
"""

from __future__ import annotations

from collections.abc import Collection

import torch
import torch.fx

__all__ = ["KEEP", "drop_redundant_grad_modes", "drop_undone_switches"]

KEEP = "ember_kept_grad_switch"  # node.meta key of a switch the code calls itself

_SET_GRAD = torch._C._set_grad_enabled
_ENTER_INFERENCE = torch.autograd.grad_mode._enter_inference_mode
_EXIT_INFERENCE = torch.autograd.grad_mode._exit_inference_mode


def _is_switch(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is _SET_GRAD and not node.users


def drop_redundant_grad_modes(
    graph: torch.fx.Graph, entry_mode: bool, steps_after: Collection[torch.fx.Node] = ()
) -> None:
    """Erase (in place) the `_set_grad_enabled` nodes that do not change the mode.

    A run of switches ends where the code ran an operation on symbolic numbers
    (`steps_after`, see drop_undone_switches): torch.compile traces it as a node."""
    mode = entry_mode
    run: list[torch.fx.Node] = []
    outer_modes: list[bool] = []  # the modes around the open inference_mode blocks

    def close_run() -> None:
        nonlocal mode
        last = run[-1].args[0]
        for switch in run if last == mode else run[:-1]:
            graph.erase_node(switch)
        mode = bool(last)
        run.clear()

    for node in list(graph.nodes):
        if _is_switch(node) and isinstance(node.args[0], bool) and not node.meta.get(KEEP):
            run.append(node)
            if node in steps_after:
                close_run()
            continue
        if run:
            close_run()
        if node.op != "call_function":
            continue
        if node.meta.get(KEEP) and isinstance(node.args[0], bool):
            mode = node.args[0]
        elif node.target is _ENTER_INFERENCE:
            outer_modes.append(mode)
            mode = mode and node.args[0] is not True
        elif node.target is _EXIT_INFERENCE and outer_modes:
            mode = outer_modes.pop()


def drop_undone_switches(
    graph: torch.fx.Graph, steps_after: Collection[torch.fx.Node] = ()
) -> None:
    """Erase (in place) each pair of adjacent `_set_grad_enabled` nodes that undo each
    other, the first switching away from the mode in effect where the graph ends (the
    mode torch.compile reads when it cleans its graph: the last switch's).

    `steps_after`: nodes right after which the code ran an operation on symbolic numbers
    (`i + 1`, `i == 2` on a dynamic int). torch.compile traces each as a node it drops
    only after this cleaning, so two switches around one are not adjacent."""
    switches = [node.args[0] for node in graph.nodes if _is_switch(node)]
    if not switches or not isinstance(switches[-1], bool):
        return
    mode = switches[-1]
    nodes = list(graph.nodes)
    erased: set[torch.fx.Node] = set()
    for first, second in zip(nodes, nodes[1:], strict=False):
        if first in erased or not (_is_switch(first) and first.args == (not mode,)):
            continue
        mode = first.args[0]
        if first in steps_after:
            continue
        if second not in erased and _is_switch(second) and second.args == (not mode,):
            mode = second.args[0]
            erased.update((first, second))
            graph.erase_node(first)
            graph.erase_node(second)
