"""Re-inplacing: a mutated input's new value stored into the input itself.

aot_autograd hands over functional graphs: an input the program writes in place (a
static key/value cache's `k_cache.index_copy_(2, pos, k)`, `x[:, i] = v`) gets its new
value as a graph output, which the run time copies back into the input whole. The
output node's meta INPUT_MUTATIONS pairs each such output with its input.

Where that new value is a scatter over the input (`INPLACE_SCATTERS`: only some
elements change) and nothing else reads the input's old value, the wrapper calls the
op's in-place form on the input itself, so only the written elements move:

    buf0 = aten_index_copy__default(primals_1, 2, primals_3, primals_4)  # fallback

A write through views (`cache[i, 0, :, p] = k`) traces as scatters nested in views
of the input, each level building a new tensor from the view below; only the outermost
scatter is over the input, and storing it there copies one slice, not the whole input.
Several writes to one input in a row (`cache[i, 0] = k; cache[i, 1] = v`) are a chain
of scatters, each over the one before: all are stored into the input where nothing but
the next scatter's operands reads a value before the last (`_scatter_chain`).

Where it is a pointwise value nothing else in the graph reads (BatchNorm's running
statistics, `running_mean * 0.9 + mean * 0.1`), the kernel computing it stores it into
the input (`ComputedBuffer.stored_into`), provided each element reads the input only at
the element it writes and no other buffer reads the input (GraphLowering checks both).

Either way the compiled graph names the input in `inputs_written_in_place`, which tells
the run time not to copy it back. The rule is conservative; the copy stays where

- the input is a graph output (an input saved for the backward is a forward graph's
  output), or another node reads its old value other than on the way into the
  scatter's operands (see `_read_before`), or an operand is a view of its memory;
- the new value is returned more than once; for a value that is not a scatter's, a
  later node reads it (the value is inlined there, reading the input again);
- the input's memory may overlap itself (an expanded tensor), or its dtype or sizes
  differ from the new value's.

Inputs sharing memory with another input never get here: the run time refuses a
mutated input aliasing another input before the graph runs.
"""

from __future__ import annotations

import operator

import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree

from inductor_codegen.indexing import as_index
from inductor_codegen.runtime import select_scatter_into, slice_scatter_into

__all__ = ["INPLACE_SCATTERS", "INPUT_MUTATIONS", "inplace_writes"]

aten = torch.ops.aten

# The output node's meta key aot_autograd sets: (output index, placeholder index) for
# each output that is the new value of a mutated input.
INPUT_MUTATIONS = "input_mutation_idxs"

# Functional scatter over argument 0 -> the call writing the same elements into
# argument 0 itself (same arguments), returning it.
INPLACE_SCATTERS = {
    aten.index_copy.default: aten.index_copy_.default,
    aten.index_put.default: aten.index_put_.default,
    aten.index_add.default: aten.index_add_.default,
    aten.scatter.src: aten.scatter_.src,
    aten.scatter.value: aten.scatter_.value,
    aten.scatter_add.default: aten.scatter_add_.default,
    aten.slice_scatter.default: slice_scatter_into,
    aten.select_scatter.default: select_scatter_into,
}


def inplace_writes(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, int]:
    """New values of mutated inputs that may be stored into their input -> its index: the
    scatters, and the pointwise candidates GraphLowering checks further (`stored_into`)."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    pairs = output.meta.get(INPUT_MUTATIONS)
    if not pairs:
        return {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    flat = pytree.tree_leaves(output.args[0])
    returned: dict[torch.fx.Node, int] = {}
    for item in flat:
        if isinstance(item, torch.fx.Node):
            returned[item] = returned.get(item, 0) + 1
    writes = {}
    for position, index in pairs:
        if not (0 <= position < len(flat) and 0 <= index < len(placeholders)):
            continue
        node, source = flat[position], placeholders[index]
        if _writes_into(node, source, returned):
            writes[node] = index
            continue
        for link in _scatter_chain(node, source, returned):
            writes[link] = index
    return writes


def _scatter_chain(node, source: torch.fx.Node, returned: dict) -> list[torch.fx.Node]:
    """The scatters `node` is the last of, each over the one before and the first over
    `source` (two writes to one cache, `cache[i, 0] = k; cache[i, 1] = v`), where every
    one may be stored into `source` in turn; else none.

    Each scatter's base (the input, or the scatter before) may be read only on the way
    into that scatter's operands (`_read_before`), so no later node sees the value the
    next write overwrites; the scatters before the last are no graph outputs.
    """
    links = []
    current = node
    while (
        isinstance(current, torch.fx.Node)
        and current.op == "call_function"
        and current.target in INPLACE_SCATTERS
        and current.args
        and current is not source
    ):
        links.append(current)
        current = current.args[0]
    if current is not source or len(links) < 2 or returned.get(node, 0) != 1:
        return []
    for link in links:
        base = link.args[0]
        if link is not node and returned.get(link, 0):
            return []  # an earlier write's value is returned as such, not as the input
        if any(a is base or a is source for a in pytree.tree_leaves((link.args[1:], link.kwargs))):
            return []
        if any(user is not link and not _read_before(user, link) for user in base.users):
            return []
    first = links[-1]
    if not _fits_input(first, source):
        return []
    return links


def _fits_input(node: torch.fx.Node, source: torch.fx.Node) -> bool:
    """`node`'s value has the input's dtype, device and sizes, and the input's memory no
    element twice: it may be stored there."""
    old, new = source.meta.get("val"), node.meta.get("val")
    if not isinstance(old, torch.Tensor) or not isinstance(new, torch.Tensor):
        return False
    if old.dtype != new.dtype or old.device != new.device:
        return False
    # (Sizes compared as expressions: comparing SymInts would add a guard.)
    old_size = tuple(as_index(s) for s in old.shape)
    if old_size != tuple(as_index(s) for s in new.shape):
        return False
    return _without_overlap(old_size, tuple(as_index(s) for s in old.stride()))


def _writes_into(node, source: torch.fx.Node, returned: dict) -> bool:
    """Whether `node`, the new value of input `source`, may be stored into `source`."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if returned.get(node, 0) != 1 or source.op != "placeholder":
        return False
    if node.target in INPLACE_SCATTERS:
        if not node.args or node.args[0] is not source:
            return False
        if any(a is source for a in pytree.tree_leaves((node.args[1:], node.kwargs))):
            return False
        views_ok = False
    elif any(user.op != "output" for user in node.users):
        return False  # a later node reads the new value (a pointwise value is inlined there)
    else:
        views_ok = True  # the lowering checks where the stored value reads the input
    if any(user is not node and not _read_before(user, node, views_ok) for user in source.users):
        return False
    return _fits_input(node, source)


def _read_before(user: torch.fx.Node, node: torch.fx.Node, views_ok: bool = False) -> bool:
    """Whether everything computed from `user` (a reader of `node`'s input) goes only into
    `node`'s other operands, which are stored before the in-place call runs.

    `x[idx] += v` traces as `index_put(x, [idx], add(index(x, [idx]), v))`: the old
    values are read into the operand first, as eager reads them. A view on the way may
    only give `aten.copy` its shape (`x[:, 2:4] = v` traces as
    `slice_scatter(x, copy(slice(x), v), ...)`), so no operand is the input's memory.
    """
    seen: set[torch.fx.Node] = set()
    stack = [user]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.op != "call_function" or not current.users:
            return False  # a graph output, or a value no one reads
        if not views_ok and _returns_a_view(current) and not _shape_only(current):
            return False
        stack.extend(u for u in current.users if u is not node)
    return True


def _returns_a_view(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return node.target is not operator.getitem
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _shape_only(view: torch.fx.Node) -> bool:
    """Whether every reader of `view` copies it: `aten.copy` taking it as `self` alone
    (whose result is the source's values in `self`'s shape), a functional scatter over it
    (`x[i, 0, :, p] = k` traces as `select_scatter(x, select_scatter(select(x, 0, i),
    select_scatter(select(select(x, 0, i), 0, 0), k, 1, p), 0, 0), 0, i)`: each level
    builds a new tensor from the view), or a further view read only so."""
    for reader in view.users:
        if reader.op != "call_function" or reader.args[0] is not view:
            return False
        if any(a is view for a in pytree.tree_leaves((reader.args[1:], reader.kwargs))):
            return False
        if reader.target is aten.copy.default or reader.target in _COPYING_SCATTERS:
            continue
        if not (_VIEW_OPS.get(reader.target) and _shape_only(reader)):
            return False
    return True


# Functional scatters: their result is a new tensor (never `self`'s memory).
_COPYING_SCATTERS = frozenset((aten.select_scatter.default, aten.slice_scatter.default))
# Views whose readers `_shape_only` follows.
_VIEW_OPS = {aten.select.int: True, aten.slice.Tensor: True}


def _without_overlap(size: tuple, stride: tuple) -> bool:
    """No two elements of a tensor of `size` and `stride` share memory: checked from the
    strides where all are numbers; symbolic ones must be the row-major strides."""
    if not all(isinstance(e, sympy.Integer) for e in (*size, *stride)):
        expected = sympy.Integer(1)
        for n, st in reversed(tuple(zip(size, stride))):
            if n != 1 and sympy.expand(st - expected) != 0:
                return False
            expected = expected * n
        return True
    dims = sorted((int(st), int(n)) for n, st in zip(size, stride) if n != 1)
    extent = 0  # the elements the dims of smaller strides span, less one
    for st, n in dims:
        if st <= extent:
            return False
        extent += st * (n - 1)
    return True
