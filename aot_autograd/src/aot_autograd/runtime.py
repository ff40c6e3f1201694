"""Running compiled graphs: the autograd.Function, input mutations, aliased outputs.

`training_function` wraps a compiled forward and backward in an
autograd.Function that saves the forward's saved values for the backward.
`assemble_outputs` does what the functional graphs cannot: copies new values
into mutated inputs and rebuilds outputs that alias an input or each other as
views, so callers see eager PyTorch's aliasing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx

from aot_autograd.errors import DoubleBackwardError, UnsupportedMutationError, ValueChangedError
from aot_autograd.program import TracedProgram
from aot_autograd.symbolic import resolve_sizes

__all__ = ["assemble_outputs", "check_mutated_inputs_unaliased", "training_function"]


class _NoDoubleBackward(torch.autograd.Function):
    """Identity whose backward raises: marks grads made by a compiled backward."""

    @staticmethod
    def forward(ctx: Any, *grads: torch.Tensor) -> tuple:
        return tuple(g.view_as(g) for g in grads)

    @staticmethod
    def backward(ctx: Any, *unused: Any) -> tuple:
        raise DoubleBackwardError(
            "double backward (a grad of a grad) through an aot_autograd-compiled function is "
            "not supported; compute higher-order grads eagerly, or compile the grad function "
            "itself"
        )


def _mark_no_double_backward(grads: list) -> list:
    tensors = [i for i, g in enumerate(grads) if isinstance(g, torch.Tensor)]
    if not tensors:
        return grads
    marked = _NoDoubleBackward.apply(*(grads[i] for i in tensors))
    result = list(grads)
    for i, g in zip(tensors, marked):
        result[i] = g
    return result


def _boxed(fn: Callable) -> Callable[[list], Any]:
    """`fn` called with one list of arguments that it may empty as it goes.

    A GraphModule gets code that takes the list and clears it before computing, so each
    saved activation is freed after its last use in the backward, as in eager autograd.
    """
    codegen = getattr(fx.graph, "_BoxedCodeGen", None)
    if isinstance(fn, fx.GraphModule) and codegen is not None:
        graph = fx.Graph()
        graph.output(graph.graph_copy(fn.graph, {}))
        graph.set_codegen(codegen())
        return fx.GraphModule(fn, graph).forward
    if getattr(fn, "_boxed_call", False):
        return fn

    def call(args: list) -> Any:
        return fn(*args)

    return call


def tangent_dependencies(backward: fx.GraphModule) -> list[frozenset[int]]:
    """For each output of the backward graph, the tangent placeholders it reads.

    Tangents are the backward graph's placeholders named `tangents_*` (the last ones),
    numbered from 0 in placeholder order.
    """
    placeholders = [n for n in backward.graph.nodes if n.op == "placeholder"]
    tangent_index = {
        node: i for i, node in enumerate(n for n in placeholders if "tangent" in n.name)
    }
    reads: dict[fx.Node, frozenset[int]] = {}
    for node in backward.graph.nodes:
        if node.op == "placeholder":
            reads[node] = frozenset([tangent_index[node]]) if node in tangent_index else frozenset()
        else:
            reads[node] = frozenset().union(*(reads[i] for i in node.all_input_nodes))
    output = next(n for n in backward.graph.nodes if n.op == "output")
    results = output.args[0] if isinstance(output.args[0], list | tuple) else [output.args[0]]
    return [reads[r] if isinstance(r, fx.Node) else frozenset() for r in results]


def training_function(
    program: TracedProgram,
    forward: Callable,
    backward: Callable,
    dependencies: list[frozenset[int]] | None = None,
) -> Callable[..., tuple]:
    """A function running `forward` under autograd, with `backward` as its derivative.

    Outputs the caller never used get no gradient (None, not zeros) from autograd;
    a grad that reads only such outputs' tangents comes back None, as in eager, so
    optimizers skip those parameters as they would eagerly. `dependencies` (see
    `tangent_dependencies`) says which tangents each grad reads.
    """
    n_out = program.num_forward_outputs
    differentiable = program.differentiable
    boxed_backward = _boxed(backward)
    if isinstance(forward, fx.GraphModule):
        forward = forward.forward  # NOTE: skips nn.Module call machinery (hooks) per call

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> tuple:
            ctx.set_materialize_grads(False)
            results = forward(*args)
            outputs, saved = tuple(results[:n_out]), list(results[n_out:])
            ctx.output_specs = [
                (o.shape, o.dtype, o.device) if isinstance(o, torch.Tensor) else None
                for o, d in zip(outputs, differentiable)
                if d
            ]
            is_tensor = [isinstance(s, torch.Tensor) for s in saved]
            ctx.save_for_backward(*(s for s, t in zip(saved, is_tensor) if t))
            ctx.saved_others = [None if t else s for s, t in zip(saved, is_tensor)]
            ctx.mark_non_differentiable(
                *(
                    o
                    for o, d in zip(outputs, differentiable)
                    if not d and isinstance(o, torch.Tensor)
                )
            )
            return outputs

        @staticmethod
        def backward(ctx: Any, *grad_outputs: Any) -> tuple:
            tensors = iter(ctx.saved_tensors)
            args = [next(tensors) if s is None else s for s in ctx.saved_others]
            del tensors
            if hasattr(ctx, "maybe_clear_saved_tensors"):
                ctx.maybe_clear_saved_tensors()  # the list now holds the only references
            tangents = [g for g, d in zip(grad_outputs, differentiable) if d]
            unused = {i for i, g in enumerate(tangents) if g is None}
            args += [
                g.contiguous()
                if g is not None
                else torch.zeros(spec[0], dtype=spec[1], device=spec[2])
                for g, spec in zip(tangents, ctx.output_specs)
            ]
            grads = list(boxed_backward(args))
            if unused and dependencies is not None:
                grads = [
                    None if reads and reads <= unused else grad
                    for grad, reads in zip(grads, dependencies)
                ]
            if torch.is_grad_enabled():
                grads = _mark_no_double_backward(grads)
            result: list[Any] = [None] * program.num_inputs
            for index, grad in zip(program.grad_inputs, grads):
                result[index] = grad
            return tuple(result)

    return CompiledFunction.apply


def _view(base: torch.Tensor, geometry: tuple) -> torch.Tensor:
    """The view of `base` with `geometry`, differentiable where autograd allows."""
    size, stride, offset_bytes, dtype = geometry
    start = base.storage_offset() * base.element_size() + offset_bytes
    if dtype != base.dtype:
        try:
            base = base.view(dtype)  # view_as_complex, view(dtype): keeps the autograd link
        except RuntimeError:
            alias = torch.empty(0, dtype=dtype, device=base.device)
            return alias.set_(base.untyped_storage(), start // alias.element_size(), size, stride)
    return base.as_strided(size, stride, start // base.element_size())


def _geometry(program: TracedProgram, spec: Any, args: Sequence[Any]) -> tuple:
    """The view's (size, stride, offset, dtype), symbolic sizes evaluated for this call."""
    if not program.symbol_sources:
        return spec.geometry
    return resolve_sizes(spec.geometry, program.symbol_sources, args)


def _storage_key(t: torch.Tensor) -> Any:
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:  # tensors without data (fakes): not checked
        return None


def check_mutated_inputs_unaliased(program: TracedProgram, args: Sequence[Any]) -> None:
    """A mutated input must not share memory with another input (the graph assumed not)."""
    if not program.mutated_inputs:
        return
    keys: dict[Any, int] = {}
    for a in args:
        if isinstance(a, torch.Tensor):
            key = _storage_key(a)
            if key is not None and key != 0:
                keys.setdefault(key, 0)
                keys[key] += 1
    for index in program.mutated_inputs:
        if keys.get(_storage_key(args[index]), 0) > 1:
            raise UnsupportedMutationError(
                f"input {index} is written in place and shares memory with another input; "
                "the compiled graph treats inputs as separate tensors. Pass a .clone() of one "
                "of them"
            )


def assemble_outputs(program: TracedProgram, args: Sequence[Any], graph_outputs: Sequence) -> Any:
    """Copy back mutated inputs and build the user's outputs from the graph's."""
    first_mutation = program.num_forward_outputs - len(program.mutated_inputs)
    for check in graph_outputs[first_mutation - program.num_value_checks : first_mutation]:
        if not bool(check.all()):
            raise ValueChangedError(
                "a tensor value that the traced code read into Python (.item(), bool(t), "
                "int(t)) differs from its value when traced, so the compiled graph took a "
                "branch this call would not; compile again for these inputs, or keep the "
                "value a tensor (torch.where instead of `if`)"
            )
    if program.mutated_inputs:
        with torch.no_grad():
            for index, value in zip(program.mutated_inputs, graph_outputs[first_mutation:]):
                args[index].copy_(value)
    flat = []
    for spec in program.outputs:
        if spec.kind == "graph":
            flat.append(graph_outputs[spec.index])
        elif spec.kind == "input":
            flat.append(args[spec.index])
        elif spec.kind == "input_alias":
            flat.append(_view(args[spec.index], _geometry(program, spec, args)))
        elif spec.kind == "base_alias":
            flat.append(_view(graph_outputs[spec.index], _geometry(program, spec, args)))
        else:
            flat.append(spec.value)
    return pytree.tree_unflatten(flat, program.out_spec)
