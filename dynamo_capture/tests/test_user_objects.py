"""Instances of user classes made in the frame: iterators, __getattr__, descriptors,
__contains__, __ne__ from __eq__, identity as dict keys, one object however often it
leaves the frame."""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture


def _one():
    return (torch.randn(4),)


class CountTo:
    def __init__(self, n):
        self.n = n
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i


class Fallback:
    def __init__(self):
        self.table = {"a": 2}

    def __getattr__(self, name):
        return self.table[name]


class Three:
    def __get__(self, obj, owner):
        return 3


class WithDescriptor:
    value = Three()


class Holder:
    def __contains__(self, item):
        return item == 1


class Same:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return self.v == other.v


class Plain:
    pass


def user_iterator_in_for(x):
    return [x * i for i in CountTo(3)]


def user_iterator_next_with_default(x):
    it = CountTo(1)
    return x * next(it) + next(it, 5)


def getattr_fallback(x):
    return x * Fallback().a


def user_descriptor(x):
    return x * WithDescriptor().value


def user_contains(x):
    return x + (1 in Holder()) + (2 in Holder())


def not_equal_from_eq(x):
    return x + (Same(1) != Same(2)) + (Same(1) != Same(1))


def instance_as_dict_key(x):
    p = Plain()
    d = {p: x}
    return d[p] + (p in d)


PROGRAMS = [
    user_iterator_in_for,
    user_iterator_next_with_default,
    getattr_fallback,
    user_descriptor,
    user_contains,
    not_equal_from_eq,
    instance_as_dict_key,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_user_object_program_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


def test_object_leaving_frame_twice_is_one_object():
    def share(x):
        o = Plain()
        o.a = x + 1
        items = [o]
        return o, o, items, {"k": items}

    compiled = dynamo_capture.optimize(share, backend=lambda gm, ex: gm.forward, fullgraph=True)
    first, second, items, table = compiled(torch.randn(2))
    assert first is second and items[0] is first and table["k"] is items


def test_stop_iteration_inside_try_is_not_the_end_of_iteration():
    class Guarded:
        def __iter__(self):
            return self

        def __next__(self):
            try:
                raise StopIteration
            except StopIteration:
                return 1

    def use(x):
        it = iter(Guarded())
        return x + next(it)

    # the iterator is read one item at a time (next), so its endless __next__ is called once
    compiled = dynamo_capture.optimize(use, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), use(x))


def test_del_attribute_of_instance_made_in_frame():
    def drop(x):
        p = Plain()
        p.a = x
        del p.a
        return x + hasattr(p, "a")

    check_like_torch(drop, _one)


def test_del_attribute_of_outside_object_is_replayed_after_the_graph():
    """A write then a delete on an object from outside: one graph; the object ends
    without the attribute, as eagerly, and a read after the delete raises there too."""
    outside = Plain()

    def drop(x):
        outside.a = 1
        del outside.a
        return x + 1, getattr(outside, "a", 7)

    compiled = dynamo_capture.optimize(drop, backend=lambda gm, ex: gm.forward, fullgraph=True)
    assert compiled(torch.zeros(2))[1] == 7
    assert not hasattr(outside, "a")
    outside.a = 3  # there before the call this time: deleted by the replay
    torch.testing.assert_close(compiled(torch.zeros(2))[0], torch.ones(2))
    assert not hasattr(outside, "a")


class Shadowing:
    scale = 2  # a class attribute the instance's own hides


class Guarded:
    def __delattr__(self, name):
        raise PermissionError(name)


@pytest.mark.parametrize("kind", [Shadowing, Guarded])
def test_del_attribute_backed_by_class_or_hook_breaks_with_eager_result(kind):
    """`del` where the class holds the name (a read after falls back to it) or defines
    __delattr__ is not logged: the statement runs eagerly, with eager's effect or error."""
    eager_obj, compiled_obj = kind(), kind()
    for obj in (eager_obj, compiled_obj):
        object.__setattr__(obj, "scale", 5)

    def make(obj):
        def drop(x):
            y = x * obj.scale
            del obj.scale
            return y + getattr(obj, "scale", 0)

        return drop

    compiled = dynamo_capture.optimize(make(compiled_obj), backend=lambda gm, ex: gm.forward)
    x = torch.ones(2)
    try:
        expected = make(eager_obj)(x)
    except PermissionError:
        with pytest.raises(PermissionError):
            compiled(x)
    else:
        torch.testing.assert_close(compiled(x), expected)
    assert vars(compiled_obj) == vars(eager_obj)
    assert compiled.graph_breaks


class Named:
    def __repr__(self):
        return "Named()"


class Texted(Named):
    def __str__(self):
        return "text"


def repr_and_str_of_instances(x):
    return x + len(repr(Named())) + len(str(Named())) + len(str(Texted())), str(Texted())


def test_repr_and_str_call_user_methods_like_torch():
    check_like_torch(repr_and_str_of_instances, _one)


def _dict_after_delete(x, holder):
    del holder.a
    return x + 1, dict(vars(holder)), holder.__dict__.get("a", 9)


def _dict_after_write(x, holder):
    holder.a = 7
    return x + 1, dict(vars(holder))


def _dict_read_then_written(x, holder):
    instance_dict = vars(holder)
    holder.a = 7
    return x + 1, instance_dict["a"]


def _dict_read_then_deleted(x, holder):
    instance_dict = holder.__dict__
    del holder.a
    return x + 1, "a" in instance_dict


@pytest.mark.parametrize(
    "fn", [_dict_after_delete, _dict_after_write, _dict_read_then_written, _dict_read_then_deleted]
)
def test_instance_dict_sees_the_frames_attribute_writes(fn):
    """A live `__dict__` read and an attribute write or delete on the same outside object
    (replayed after the graph) break between them: the dict shows what eager's shows."""
    eager_holder, compiled_holder = Plain(), Plain()
    for holder in (eager_holder, compiled_holder):
        holder.a, holder.b = 1, 2
    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)
    got, expected = compiled(torch.ones(1), compiled_holder), fn(torch.ones(1), eager_holder)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:]
    assert vars(compiled_holder) == vars(eager_holder)
