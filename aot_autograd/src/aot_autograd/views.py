"""View steps and their inverses: how a write to a view reaches its base.

A traced tensor that is a view remembers the chain of view ops from its base
(`ViewStep`s). Reading a stale view replays the chain on the base's current
value; writing a view scatters the new value back through the chain with the
inverse of each step, taken from `VIEW_INVERSES` (one rule per view op).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import Node

from aot_autograd.errors import UnsupportedMutationError

__all__ = ["ViewStep", "VIEW_INVERSES", "normalized_args", "merge_aliases", "Emit"]

aten = torch.ops.aten

# emit(op, args, kwargs=None) -> the node computing op(*args, **kwargs) in the traced graph.
Emit = Callable[..., Node]


@dataclass(frozen=True, slots=True)
class ViewStep:
    """One view op applied to a parent: `op(parent, *args)`, then `[index]` for multi-output views."""

    op: torch._ops.OpOverload
    args: tuple
    index: int | None
    parent_shape: tuple


def normalized_args(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple:
    """`op`'s positional (not keyword-only) arguments, defaults filled in from its schema."""
    values = list(args)
    for argument in op._schema.arguments[len(args) :]:
        if argument.kwarg_only:
            break
        if argument.name in kwargs:
            values.append(kwargs[argument.name])
        elif argument.has_default_value():
            values.append(argument.default_value)
        else:
            values.append(None)
    return tuple(values)


def replay(step: ViewStep, parent: Node, emit: Emit) -> Node:
    """The node of `step` applied to `parent`."""
    node = emit(step.op, (parent, *step.args))
    if step.index is not None:
        node = emit("getitem", (node, step.index))
    return node


def _view_back(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    contiguous = emit(aten.clone.default, (child,), {"memory_format": torch.contiguous_format})
    return emit(aten.view.default, (contiguous, list(step.parent_shape)))


def _identity(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    return child


def _transpose(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    if step.op is aten.t.default:
        return emit(aten.t.default, (child,))
    return emit(aten.transpose.int, (child, step.args[0], step.args[1]))


def _permute(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    dims = [d % len(step.parent_shape) for d in step.args[0]]
    inverse = [dims.index(i) for i in range(len(dims))]
    return emit(aten.permute.default, (child, inverse))


def _slice(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    dim, start, end, stride = step.args
    return emit(aten.slice_scatter.default, (parent, child, dim, start, end, stride))


def _select(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    dim, index = step.args
    return emit(aten.select_scatter.default, (parent, child, dim, index))


def _diagonal(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    offset, dim1, dim2 = step.args
    return emit(aten.diagonal_scatter.default, (parent, child, offset, dim1, dim2))


def _as_strided(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    size, stride, offset = step.args
    return emit(aten.as_strided_scatter.default, (parent, child, size, stride, offset))


def _split(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    split_size, dim = step.args
    length = step.parent_shape[dim]
    start = step.index * split_size
    end = torch.sym_min(start + split_size, length)  # no guard when the sizes are symbolic
    return emit(aten.slice_scatter.default, (parent, child, dim, start, end, 1))


def _split_with_sizes(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    sizes, dim = step.args
    start = sum(sizes[: step.index])
    end = start + sizes[step.index]
    return emit(aten.slice_scatter.default, (parent, child, dim, start, end, 1))


def _unbind(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    (dim,) = step.args
    return emit(aten.select_scatter.default, (parent, child, dim, step.index))


def _view_as_real(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    # view_as_complex needs a last dim of stride 1 and even strides elsewhere
    contiguous = emit(aten.clone.default, (child,), {"memory_format": torch.contiguous_format})
    return emit(aten.view_as_complex.default, (contiguous,))


def _view_as_complex(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    return emit(aten.view_as_real.default, (child,))


def _aliased_dims(compact_shape: tuple, shape: tuple) -> list[int]:
    """Dims of `shape` whose elements share memory: size 1 in `compact_shape` (same rank)."""
    return [d for d, (c, n) in enumerate(zip(compact_shape, shape)) if c == 1 and n != 1]


def merge_aliases(emit: Emit, compact: Node, child: Node) -> Node:
    """The new value of `compact`'s memory after its expansion was overwritten with `child`.

    `child` has the expanded shape, `compact` the same rank with size 1 on the dims the
    expansion repeats. Each memory location takes the value of an element of `child`
    that differs from the location's old value (eager's writes into an expanded tensor
    write one value to all the aliases they touch: `fill_`, `masked_fill_`, a slice
    holding one alias of each location), else keeps its old value.
    """
    shape = tuple(child.meta["val"].shape)
    compact_shape = tuple(compact.meta["val"].shape)
    if any(isinstance(s, torch.SymInt) for s in (*shape, *compact_shape)):
        raise UnsupportedMutationError(
            "an in-place op writes through an expanded tensor of symbolic size, whose "
            "elements share memory; functionalization merges such writes for static sizes "
            "only: call .clone() on the expanded tensor before writing to it"
        )
    dims = _aliased_dims(compact_shape, shape)
    if not dims:
        return child
    old = emit(aten.expand.default, (compact, list(shape)))
    same = emit(aten.eq.Tensor, (child, old))
    if child.meta["val"].is_floating_point():
        # NaN equals NaN here, and -0.0 differs from 0.0: a written -0.0 is kept
        signs = emit(aten.eq.Tensor, (emit(aten.signbit.default, (child,)),
                                      emit(aten.signbit.default, (old,))))  # fmt: skip
        same = emit(aten.logical_and.default, (same, signs))
        nans = emit(aten.logical_and.default, (emit(aten.isnan.default, (child,)),
                                               emit(aten.isnan.default, (old,))))  # fmt: skip
        same = emit(aten.logical_or.default, (same, nans))
    changed = emit(aten.logical_not.default, (same,))
    keep = [d for d in range(len(shape)) if d not in dims]
    order = keep + dims
    flat = [shape[d] for d in keep] + [_numel_of(shape[d] for d in dims)]

    def flattened(node: Node, sizes: list) -> Node:
        moved = emit(aten.permute.default, (node, order))
        moved = emit(aten.clone.default, (moved,), {"memory_format": torch.contiguous_format})
        return emit(aten.view.default, (moved, sizes))

    changed = flattened(changed, flat)
    which = emit(aten._to_copy.default, (changed,), {"dtype": torch.int32})
    first = emit(aten.argmax.default, (which, -1, True))
    picked = emit(aten.gather.default, (flattened(child, flat), -1, first))
    written = emit(aten.any.dim, (changed, -1, True))
    before = flattened(compact, [*flat[:-1], 1])
    merged = emit(aten.where.self, (written, picked, before))
    merged = emit(aten.view.default, (merged, [shape[d] for d in keep] + [1] * len(dims)))
    inverse = [order.index(d) for d in range(len(shape))]
    merged = emit(aten.permute.default, (merged, inverse))
    return emit(aten.clone.default, (merged,), {"memory_format": torch.contiguous_format})


def _numel_of(sizes: Any) -> int:
    count = 1
    for size in sizes:
        count *= size
    return count


def _expand(emit: Emit, parent: Node, child: Node, step: ViewStep) -> Node:
    parent_shape = tuple(step.parent_shape)
    shape = tuple(child.meta["val"].shape)
    lead = len(shape) - len(parent_shape)
    compact = parent
    if lead:  # dims expand adds in front: size 1 in the compact form
        compact = emit(aten.view.default, (parent, [1] * lead + list(parent_shape)))
    merged = merge_aliases(emit, compact, child)
    if lead:
        merged = emit(aten.view.default, (merged, list(parent_shape)))
    return merged


# view op -> inverse(emit, parent_value, new_child_value, step) -> new parent value.
VIEW_INVERSES: dict[Any, Callable[[Emit, Node, Node, ViewStep], Node]] = {
    aten.view.default: _view_back,
    aten._unsafe_view.default: _view_back,
    aten._reshape_alias.default: _view_back,
    aten.squeeze.default: _view_back,
    aten.squeeze.dim: _view_back,
    aten.squeeze.dims: _view_back,
    aten.unsqueeze.default: _view_back,
    aten.view_as.default: _view_back,
    aten.alias.default: _identity,
    aten.detach.default: _identity,
    aten.t.default: _transpose,
    aten.transpose.int: _transpose,
    aten.permute.default: _permute,
    aten.slice.Tensor: _slice,
    aten.select.int: _select,
    aten.diagonal.default: _diagonal,
    aten.as_strided.default: _as_strided,
    aten.split.Tensor: _split,
    aten.split_with_sizes.default: _split_with_sizes,
    aten.unbind.int: _unbind,
    aten.expand.default: _expand,
    aten.view_as_real.default: _view_as_real,
    aten.view_as_complex.default: _view_as_complex,
}


def scatter_into_parent(step: ViewStep, parent: Node, child: Node, emit: Emit) -> Node:
    """The parent's new value after its view `step` was overwritten with `child`."""
    rule = VIEW_INVERSES.get(step.op)
    if rule is None:
        raise UnsupportedMutationError(
            f"an in-place op writes through a view made by {step.op}, which has no inverse rule; "
            "clone the view before mutating it, or add a rule to aot_autograd.views.VIEW_INVERSES"
        )
    return rule(emit, parent, child, step)
