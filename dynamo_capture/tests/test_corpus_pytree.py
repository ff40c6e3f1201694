"""torch.utils._pytree in captured code: its Python functions and classes (TreeSpec)
are traced like user code, as torch.compile traces them: one graph, torch's counts.
Reading it needs a namedtuple's fields that hold functions (its NodeDef), annotations
evaluated when a function is made (`Callable[[T], Any]`), and the type of a map
object."""

from __future__ import annotations

import collections
import typing

import pytest
import torch
from torch.utils import _pytree as pytree
from torchcheck import check_like_torch

Pair = collections.namedtuple("Pair", "first second")
T = typing.TypeVar("T")


def _one():
    return (torch.randn(3),)


def tree_map_then_flatten(x):
    mapped = pytree.tree_map(lambda t: t + 1, {"a": x, "b": [x, x * 2]})
    leaves, spec = pytree.tree_flatten(mapped)
    return sum(leaves), len(leaves), spec.num_leaves


def flatten_change_unflatten(x):
    leaves, spec = pytree.tree_flatten((x, {"k": [x * 2, 3]}))
    changed = [leaf * 2 if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    return pytree.tree_unflatten(changed, spec)


def leaves_of_nested_namedtuples(x):
    return [t.sum() for t in pytree.tree_leaves({"a": (x, x + 1), "b": Pair(x, x)})]


def map_only_tensors(x):
    return pytree.tree_map_only(torch.Tensor, lambda t: t.cos(), {"a": x, "n": 3})


def any_and_all(x):
    tree = [x, (x, 2)]
    return (
        x
        + pytree.tree_any(lambda v: isinstance(v, int), tree)
        + pytree.tree_all(lambda v: v is not None, tree)
    )


def map_over_namedtuple(x):
    return pytree.tree_map(lambda t: t * 3, Pair(x, [x]))


def namedtuple_field_holding_a_function(x):
    ops = Pair(torch.sin, lambda t: t * 2)
    return ops.second(ops.first(x))


def annotations_made_in_the_frame(x):
    def apply(fn: typing.Callable[[T], typing.Any], value: T) -> list[int] | None:
        return fn(value)

    return apply(torch.relu, x)


def type_of_a_map_object(x):
    mapped = map(torch.exp, [x])
    kind = isinstance(mapped, (list, tuple)) + isinstance(mapped, map)
    return list(mapped)[0] + kind


PROGRAMS = [
    tree_map_then_flatten,
    flatten_change_unflatten,
    leaves_of_nested_namedtuples,
    map_only_tensors,
    any_and_all,
    map_over_namedtuple,
    namedtuple_field_holding_a_function,
    annotations_made_in_the_frame,
    type_of_a_map_object,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_pytree_program_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


def _tree_map_on_input(tree):
    return pytree.tree_map(lambda t: t * 2, tree)


def test_tree_map_over_an_input_dict_like_torch():
    check_like_torch(
        _tree_map_on_input,
        lambda: ({"w": torch.randn(3), "b": [torch.randn(3), torch.randn(3)]},),
    )
