"""The backward graph compiled against the layouts its compiled forward saves.

The partitioner traces the backward with each saved value in the strides eager gave
it. A compiler may store a saved value in a layout of its own (inductor_codegen keeps
convolution outputs channels-last): only the forward and its backward read it. The
forward's compiled graph then reports its outputs' strides (`output_strides`, one
tuple of ints or None per output); `with_saved_strides` gives the backward graph with
those strides on its saved-value placeholders and every other node's meta["val"]
propagated again from them (fake tensors), so the backward's compiler lays out its
own kernels for them instead of the run time copying each saved value back to
eager's strides at every call (`runtime._SavedLayout.restrided`).

    forward  = compiler(forward_graph, ...)       # saves conv outputs NHWC
    strides  = reported_saved_strides(forward, num_forward_outputs, backward_graph)
    backward = with_saved_strides(backward_graph, strides) or backward_graph

What the user sees keeps eager's strides: the backward's outputs (the gradients)
keep their traced meta["val"], so a compiler returns them in eager's layout; one that
does not (a graph run by eager kernels, whose strides follow their operands') gets
them copied to those strides (`outputs_in_traced_strides`).
A graph whose propagation fails (a `view` that the new strides do not allow) is
left as traced: the saved values are then copied to eager's strides, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx

import guards
from aot_autograd.runtime import _boxed, _in_strides, _strides_agree

__all__ = [
    "SAVED_OUTPUTS",
    "OutputsInStrides",
    "changed_saved_strides",
    "mark_saved_outputs",
    "outputs_in_traced_strides",
    "reported_saved_strides",
    "with_saved_strides",
]

# The output node's meta key listing a forward graph's saved values' output positions
# (read by compilers: a value only the backward reads may take a layout of their own).
SAVED_OUTPUTS = "saved_output_idxs"

_log = guards.artifact_logger("perf_hints")


def mark_saved_outputs(forward: fx.GraphModule, num_forward_outputs: int) -> None:
    """Record on `forward`'s output node which outputs are saved for the backward."""
    output = next(n for n in forward.graph.nodes if n.op == "output")
    flat, _ = pytree.tree_flatten(output.args[0])
    output.meta[SAVED_OUTPUTS] = tuple(range(num_forward_outputs, len(flat)))


def _saved_placeholders(backward: fx.GraphModule) -> list[fx.Node]:
    return [
        n
        for n in backward.graph.nodes
        if n.op == "placeholder" and not n.name.startswith("tangents")
    ]


def reported_saved_strides(
    compiled_forward: Any, num_forward_outputs: int, backward: fx.GraphModule
) -> dict[int, tuple[int, ...]]:
    """Saved value position -> the strides the compiled forward returns it in, for each
    saved tensor whose reported strides differ from the traced ones (see
    `changed_saved_strides`). Empty where the compiler reports nothing."""
    reported = getattr(compiled_forward, "output_strides", None)
    if not reported:
        return {}
    return changed_saved_strides(backward, tuple(reported[num_forward_outputs:]))


def changed_saved_strides(
    backward: fx.GraphModule, saved_strides: Sequence[tuple | None]
) -> dict[int, tuple[int, ...]]:
    """Saved value position -> its strides in `saved_strides`, for each saved tensor of
    static size whose strides there differ from the traced ones (dims of size 1 aside)
    and address each element once."""
    changed: dict[int, tuple[int, ...]] = {}
    for i, node in enumerate(_saved_placeholders(backward)):
        value = node.meta.get("val")
        stride = saved_strides[i] if i < len(saved_strides) else None
        if not isinstance(value, torch.Tensor) or stride is None:
            continue
        if not all(type(s) is int for s in (*value.shape, *value.stride(), *stride)):
            continue  # symbolic sizes: left as traced
        if len(stride) != value.dim() or _same_strides(value.shape, value.stride(), stride):
            continue
        if _dense(value.shape, stride):
            changed[i] = tuple(stride)
    return changed


def _same_strides(shape: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    return all(n == 1 or x == y for n, x, y in zip(shape, a, b))


def _dense(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether `stride` lays out `shape` with no overlap and no holes."""
    expected = 1
    for step, size in sorted((s, n) for n, s in zip(shape, stride) if n != 1):
        if step != expected:
            return False
        expected *= size
    return True


def with_saved_strides(
    backward: fx.GraphModule, strides: dict[int, tuple[int, ...]]
) -> fx.GraphModule | None:
    """A copy of `backward` whose saved-value placeholders `strides` names have those
    strides, every node's meta["val"] propagated again (outputs keep theirs); None
    where the propagation fails."""
    if not strides:
        return None
    graph = fx.Graph()
    graph.output(graph.graph_copy(backward.graph, {}))
    copy = fx.GraphModule(backward, graph)
    mode = guards.fake_mode_of(
        [n.meta.get("val") for n in copy.graph.nodes if n.op == "placeholder"]
    )
    if mode is None:
        return None
    saved = _saved_placeholders(copy)
    output = next(n for n in copy.graph.nodes if n.op == "output")
    returned = set(pytree.tree_leaves(output.args[0]))
    try:
        with mode:
            new_vals = _propagate(copy, {saved[i]: s for i, s in strides.items()})
    except Exception as error:  # noqa: BLE001  # (any failure: the traced graph is kept)
        _log.info("saved values stay in eager's strides: the backward does not take "
                  "the forward's layouts (%s: %s)", type(error).__name__, error)  # fmt: skip
        return None
    for node, val in new_vals.items():
        if node not in returned:
            node.meta["val"] = val
    return copy


def _propagate(gm: fx.GraphModule, strides: dict[fx.Node, tuple[int, ...]]) -> dict:
    """Each node's fake value with the placeholders in `strides` restrided (under the
    fake mode of the graph's values)."""
    env: dict[fx.Node, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if node in strides:
                val = torch.empty_strided(
                    val.shape, strides[node], dtype=val.dtype, device=val.device
                )
            env[node] = val
        elif node.op == "call_function":
            args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: env[n])
            env[node] = node.target(*args, **kwargs)
        elif node.op == "output":
            continue
        else:
            raise NotImplementedError(f"node {node.name}: op {node.op}")
    return env


class OutputsInStrides:
    """A compiled graph (`compiled`) whose tensor outputs are returned in `strides`
    (output position, strides), copied where they come otherwise; a boxed call.

    The compiled graph is kept as the compiler made it, so that a cache can store it and
    wrap the graph it loads again (`ember.warm_cache`).
    """

    __slots__ = ("compiled", "strides", "_run")
    _boxed_call = True

    def __init__(self, compiled: Any, strides: Sequence[tuple[int, tuple[int, ...]]]) -> None:
        self.compiled = compiled
        self.strides = tuple((int(i), tuple(int(s) for s in stride)) for i, stride in strides)
        self._run = _boxed(compiled)

    def __call__(self, args: list) -> list:
        results = list(self._run(args))
        for i, stride in self.strides:
            value = results[i]
            if isinstance(value, torch.Tensor) and not _strides_agree(value, stride):
                results[i] = _in_strides(value, stride)
        return results


def outputs_in_traced_strides(compiler: Callable) -> Callable:
    """`compiler`, its compiled graphs returning each tensor output of static strides in
    the strides of the graph's output meta["val"] (copied where they come otherwise)."""

    def compile(gm: fx.GraphModule, example_inputs: list) -> OutputsInStrides:
        output = next(n for n in gm.graph.nodes if n.op == "output")
        items = pytree.tree_leaves(output.args[0])
        strides = []
        for i, item in enumerate(items):
            val = item.meta.get("val") if isinstance(item, fx.Node) else None
            static = isinstance(val, torch.Tensor) and all(
                type(s) is int for s in (*val.shape, *val.stride())
            )
            if static:
                strides.append((i, tuple(val.stride())))
        return OutputsInStrides(compiler(gm, example_inputs), strides)

    return compile
