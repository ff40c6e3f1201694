"""Re-inplacing: a mutated input's new value stored into the input itself.

aot_autograd hands over functional graphs: an input the program writes in place (a
static key/value cache's `k_cache.index_copy_(2, pos, k)`, `x[:, i] = v`) gets its new
value as a graph output, which the run time copies back into the input whole. The
output node's meta INPUT_MUTATIONS pairs each such output with its input.

Where that new value is a scatter over the input (`INPLACE_SCATTERS`: only some
elements change) and no node after it reads the input's old value, the wrapper calls
the op's in-place form on the input itself, so only the written elements move:

    buf0 = aten_index_copy__default(primals_1, 2, primals_3, primals_4)  # fallback

A write through views (`cache[i, 0, :, p] = k`) traces as scatters nested in views
of the input, each level building a new tensor from the view below; the outermost
scatter is over the input, and the ones inside it are written through their views into
the input's memory, so only `k`'s elements move (`nested_writes`).
Several writes to one input in a row (`cache[i, 0] = k; cache[i, 1] = v`) are a chain
of scatters, each over the one before: all are stored into the input where every read
of a value before the last comes before the next write (`_scatter_chain`).

Where it is a pointwise value nothing else in the graph reads (BatchNorm's running
statistics, `running_mean * 0.9 + mean * 0.1`), the kernel computing it stores it into
the input (`ComputedBuffer.stored_into`), provided each element reads the input only at
the element it writes and no other buffer reads the input (GraphLowering checks both).

A scatter's write is ordered among the graph's reads (`old_value_readers`): nodes may
read the old value of the input (or of the scatter before, in a chain) where they come
before the scatter in graph order, as a decode step's layer reads its slice of a shared
cache before the next layer writes it. When the scatter is lowered, each value computed
from the old memory that a node after the write still needs is stored in memory of its
own first (`store_old_values`): a pointwise value not yet in memory is computed into a
buffer, a view of the input is copied (only the viewed elements). The scheduler keeps
every buffer lowered before an extern call ahead of it, so those buffers read the old
elements. A node after the scatter reading the old value itself keeps the copy back.

Either way the compiled graph names the input in `inputs_written_in_place`, which tells
the run time not to copy it back. The rule is conservative; the copy stays where

- the input is a graph output (an input saved for the backward is a forward graph's
  output), or a node after the scatter in graph order reads its old value (for a
  pointwise new value, any node other than on the way into its operands: see
  `_read_before`), or an operand is a view of its memory, or a graph output computed
  before the write is a view of the old memory;
- the new value is returned more than once; for a value that is not a scatter's, a
  later node reads it (the value is inlined there, reading the input again);
- the input's memory may overlap itself (an expanded tensor), or its dtype or sizes
  differ from the new value's.

Inputs sharing memory with another input never get here: the run time refuses a
mutated input aliasing another input before the graph runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree

from inductor_codegen.indexing import as_index
from inductor_codegen.ir import TensorValue, expr_loads
from inductor_codegen.runtime import select_scatter_into, slice_scatter_into

__all__ = [
    "INPLACE_SCATTERS",
    "INPUT_MUTATIONS",
    "NestedWrite",
    "inplace_writes",
    "nested_writes",
    "old_value_readers",
    "store_old_values",
]

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
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
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
        if _writes_into(node, source, returned, order):
            writes[node] = index
            continue
        for link in _scatter_chain(node, source, returned, order):
            writes[link] = index
    for outer, index in list(writes.items()):
        for inner in nested_writes(gm, {outer: index}):
            writes[inner] = index
    return writes


@dataclass(frozen=True, slots=True)
class NestedWrite:
    """A scatter nested in a slice or select scatter stored in place (see nested_writes):
    `base`, the value the outermost scatter writes over; `chain`, the scatters and views
    between them, whose reads of `base`'s memory are the write itself."""

    base: torch.fx.Node
    chain: frozenset[torch.fx.Node]


def nested_writes(gm: torch.fx.GraphModule, writes: dict) -> dict[torch.fx.Node, NestedWrite]:
    """The scatters nested in `writes`' slice and select scatters, each stored into the
    input through the view it scatters over.

    `cache[i, 0, :, p] = k` traces as `select_scatter(c, select_scatter(select(c, 0, i),
    select_scatter(select(select(c, 0, i), 0, 0), k, 1, p), 0, 0), 0, i)`: each level
    copies the view below, writes it, and the level above writes the copy back. Stored
    in place, the innermost scatter writes `k` into the cache through the view
    `c[i, 0]`, and each level above only passes the written memory on
    (`runtime.written_through`), so a write moves the elements of `k` alone.

    Every scatter between must be read by the one above alone, over a view of the same
    elements the one above writes, and every other reader of the views and of the
    outermost scatter's base must come before the innermost scatter in graph order (a
    later one would see the written elements).
    """
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    found = {}
    for outer in writes:
        levels, views = [], []
        current = outer
        while current.target in _SCATTER_VIEWS and len(current.args) > 1:
            inner = current.args[1]
            if not (
                isinstance(inner, torch.fx.Node)
                and inner.op == "call_function"
                and inner.target in INPLACE_SCATTERS
                and inner.args
                and set(inner.users) == {current}
                and _views_written_place(inner.args[0], current)
            ):
                break
            levels.append(inner)
            views.append(inner.args[0])
            current = inner
        if not levels:
            continue
        base, innermost = outer.args[0], levels[-1]
        paths = _view_paths(views, base)
        chain = frozenset((outer, *levels, *paths))
        readers = [user for n in (base, *paths) for user in n.users if user not in chain]
        if any(order[user] >= order[innermost] for user in readers):
            continue
        for inner in levels:
            found[inner] = NestedWrite(base, chain)
    return found


# Functional scatters over a view of argument 0 -> that view.
_SCATTER_VIEWS = {
    aten.select_scatter.default: aten.select.int,
    aten.slice_scatter.default: aten.slice.Tensor,
}
_VIEW_DEFAULTS = {aten.select.int: (), aten.slice.Tensor: (0, None, None, 1)}


def _views_written_place(view, scatter: torch.fx.Node) -> bool:
    """Whether `view` is the view `scatter` writes its source into: the same view op and
    arguments, over `scatter`'s base (or an equal view of it)."""
    if not isinstance(view, torch.fx.Node) or view.target is not _SCATTER_VIEWS[scatter.target]:
        return False
    defaults = _VIEW_DEFAULTS[view.target]

    def place(args):
        return (*args, *defaults[len(args) :])

    if view.kwargs or scatter.kwargs:
        return False
    return place(view.args[1:]) == place(scatter.args[2:]) and _same_view(
        view.args[0], scatter.args[0]
    )


def _same_view(a, b) -> bool:
    """Whether nodes `a` and `b` are one value: the same node, or the same view op with
    the same arguments over the same value."""
    if a is b:
        return True
    if not (isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node)):
        return False
    if a.target is not b.target or a.target not in _VIEW_DEFAULTS or a.kwargs or b.kwargs:
        return False
    return a.args[1:] == b.args[1:] and _same_view(a.args[0], b.args[0])


def _view_paths(views: list, base: torch.fx.Node) -> set[torch.fx.Node]:
    """The view nodes from each of `views` down to `base`."""
    found = set()
    for view in views:
        while (
            isinstance(view, torch.fx.Node)
            and view.op == "call_function"
            and view is not base
            and view not in found
        ):
            found.add(view)
            view = view.args[0]
    return found


def _scatter_chain(node, source: torch.fx.Node, returned: dict, order: dict) -> list[torch.fx.Node]:
    """The scatters `node` is the last of, each over the one before and the first over
    `source` (two writes to one cache, `cache[i, 0] = k; cache[i, 1] = v`), where every
    one may be stored into `source` in turn; else none.

    Each scatter's base (the input, or the scatter before) may be read only by nodes
    before that scatter in graph order (`_read_in_order`), so no later node sees the
    value the next write overwrites; the scatters before the last are no graph outputs.
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
        if not _read_in_order(base, link, order):
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


def _writes_into(node, source: torch.fx.Node, returned: dict, order: dict) -> bool:
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
        return _read_in_order(source, node, order) and _fits_input(node, source)
    if any(user.op != "output" for user in node.users):
        return False  # a later node reads the new value (a pointwise value is inlined there)
    # (the lowering checks where the stored value reads the input; the value is stored
    # after every other buffer, so no other node may read the old value at all)
    if any(user is not node and not _read_before(user, node) for user in source.users):
        return False
    return _fits_input(node, source)


def _read_in_order(base: torch.fx.Node, node: torch.fx.Node, order: dict) -> bool:
    """Whether every node reading `base` other than the scatter `node` comes before it in
    graph order (then it reads the old value before the write; see store_old_values)."""
    return all(user is node or order[user] < order[node] for user in base.users)


def old_value_readers(
    node: torch.fx.Node, base: torch.fx.Node, chain: frozenset = frozenset()
) -> list[torch.fx.Node]:
    """The nodes before the scatter `node` computed from `base`'s old value (not through
    `node`) that a node after `node` reads, or the graph returns, in graph order: their
    values must be in memory of their own before `node` writes `base`'s memory. The
    nodes of `chain` (a nested write's views and scatters: see nested_writes) carry the
    memory on to the write; they are walked through, never stored.

    Nodes after `node` are not walked: the graph is in topological order, so whatever
    they compute comes after it too (`_read_in_order` has refused those reading `base`).
    """
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    position = order[node]
    found, seen = [], set()
    stack = [user for user in base.users if user is not node]
    while stack:
        current = stack.pop()
        if current in seen or current.op == "output" or order[current] > position:
            continue
        seen.add(current)
        if current not in chain and any(
            user.op == "output" or order[user] > position for user in current.users
        ):
            found.append(current)
        stack.extend(user for user in current.users if user is not node)
    return sorted(found, key=order.__getitem__)


def store_old_values(
    graph, node: torch.fx.Node, base: torch.fx.Node, memory: set[str], chain=frozenset()
) -> bool:
    """Before the scatter `node` writes into `memory` (the input's buffer names: the input
    and the in-place results that are it), store each value of `old_value_readers` that
    still reads that memory: a pointwise value into a buffer of its own, a view of it as
    a copy of its elements. `graph` is the GraphLowering whose `env` holds the values.

    Returns False, storing nothing, where a graph output would be such a view (the
    caller may see it alias the input): the scatter is then not written in place.
    """
    from inductor_codegen.lowering.graph import meta_layout  # (graph imports this module)

    readers = old_value_readers(node, base, chain)
    for reader in readers:
        returned = any(user.op == "output" for user in reader.users)
        for leaf in pytree.tree_leaves(graph.env.get(reader)):
            if returned and isinstance(leaf, TensorValue) and _views(leaf, memory):
                return False
    for reader in readers:
        returned = any(user.op == "output" for user in reader.users)
        hint = meta_layout(reader) if returned else None

        def stored(leaf, hint=hint):
            if _views(leaf, memory):
                copy = TensorValue(leaf.dtype, leaf.size, leaf.loader)
                return graph.realize(copy, layout_hint=hint)
            if leaf.view is None and _loads_from(leaf, memory):
                return graph.realize(leaf, layout_hint=hint)
            return leaf

        graph.env[reader] = pytree.tree_map_only(TensorValue, stored, graph.env.get(reader))
    return True


def _views(value: TensorValue, memory: set[str]) -> bool:
    return value.view is not None and value.view.buffer in memory


def _loads_from(value: TensorValue, memory: set[str]) -> bool:
    """Whether computing `value` loads an element of `memory`."""
    index = tuple(
        sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(len(value.size))
    )
    return any(load.buffer in memory for load in expr_loads(value.loader(index)))


def _read_before(user: torch.fx.Node, node: torch.fx.Node) -> bool:
    """Whether everything computed from `user` (a reader of `node`'s input) goes only into
    `node`'s value, which reads those values where it computes its own elements."""
    seen: set[torch.fx.Node] = set()
    stack = [user]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.op != "call_function" or not current.users:
            return False  # a graph output, or a value no one reads
        stack.extend(u for u in current.users if u is not node)
    return True


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
