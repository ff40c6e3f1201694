"""Traceable tensor subclasses: taken apart and rebuilt, their fakes (the subclass over
inner fakes, whose operations run its own `__torch_dispatch__`), and the guard on their
class, flatten context and inner tensors."""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree
from guardcheck import check_both
from torch.testing._internal.two_tensor import TwoTensor

from guards import FakeTensorError, FakeTensorMode, GuardSet, LocalSource, SubclassLayoutGuard
from guards.fake_tensor import FakeTensor
from guards.tensor_subclasses import (
    SubclassLayout,
    flatten,
    has_own_torch_dispatch,
    is_traceable_subclass,
    unflatten,
)


class Tagged(torch.Tensor):
    """One inner tensor and a constant tag in its flatten context."""

    @staticmethod
    def __new__(cls, elem, tag, outer_size=None, outer_stride=None):
        return torch.Tensor._make_wrapper_subclass(
            cls,
            outer_size if outer_size is not None else elem.size(),
            strides=outer_stride if outer_stride is not None else elem.stride(),
            dtype=elem.dtype,
            device=elem.device,
        )

    def __init__(self, elem, tag, outer_size=None, outer_stride=None):
        self.elem, self.tag = elem, tag

    def __tensor_flatten__(self):
        return ["elem"], {"tag": self.tag}

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return Tagged(inner["elem"], ctx["tag"], outer_size, outer_stride)

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs):
        tag = next(a.tag for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, cls))
        args, kwargs = pytree.tree_map_only(cls, lambda t: t.elem, (args, kwargs or {}))
        out = func(*args, **kwargs)
        return pytree.tree_map_only(torch.Tensor, lambda t: cls(t, tag), out)


class Opaque(torch.Tensor):
    """Its own `__torch_dispatch__`, no flatten protocol."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.size(), dtype=elem.dtype)

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs):
        raise NotImplementedError


def test_traceable_is_told_by_the_protocol():
    assert is_traceable_subclass(TwoTensor(torch.randn(2), torch.randn(2)))
    assert is_traceable_subclass(Tagged(torch.randn(2), "t"))
    assert not is_traceable_subclass(Opaque(torch.randn(2)))
    assert has_own_torch_dispatch(Opaque)
    assert not is_traceable_subclass(torch.randn(2))
    assert not has_own_torch_dispatch(torch.nn.Parameter)


def test_flatten_and_unflatten_nested():
    inner = TwoTensor(torch.randn(3), torch.randn(3))
    outer = Tagged(inner, "outer")
    layout = SubclassLayout.of(outer)
    assert layout.num_tensors == 2 and layout.ctx == {"tag": "outer"}
    parts = flatten(outer)
    assert parts[0] is inner.a and parts[1] is inner.b
    rebuilt = unflatten(layout, [p * 2 for p in parts])
    assert type(rebuilt) is Tagged and type(rebuilt.elem) is TwoTensor
    assert torch.equal(rebuilt.elem.b, inner.b * 2)
    with pytest.raises(ValueError, match="too many tensors"):
        unflatten(layout, [*parts, parts[0]])


def test_layout_equality_reads_context_and_inner_metadata():
    a = SubclassLayout.of(Tagged(torch.randn(3), "x"))
    assert a == SubclassLayout.of(Tagged(torch.randn(3), "x"))
    assert hash(a) == hash(SubclassLayout.of(Tagged(torch.randn(3), "x")))
    assert a != SubclassLayout.of(Tagged(torch.randn(3), "y"))
    assert a != SubclassLayout.of(Tagged(torch.randn(3, dtype=torch.float64), "x"))
    assert a != SubclassLayout.of(Tagged(torch.randn(6)[::2], "x"))


def test_fake_is_the_subclass_over_inner_fakes():
    mode = FakeTensorMode()
    real = TwoTensor(torch.randn(4, 3), torch.randn(4, 3)).requires_grad_()
    fake = mode.from_real(real)
    assert type(fake) is TwoTensor and fake.requires_grad
    assert type(fake.a) is FakeTensor and type(fake.b) is FakeTensor
    assert mode.from_real(real) is fake  # memoized
    with mode:
        out = (fake.detach() * 2).sum(0) + torch.ones(3)
    assert type(out) is TwoTensor and out.shape == (3,)
    assert type(out.a) is FakeTensor and type(out.b) is FakeTensor


def test_fake_runs_the_subclass_dispatch_with_plain_fakes():
    mode = FakeTensorMode()
    w = mode.from_real(Tagged(torch.randn(4, 4), "w"))
    x = mode.from_real(torch.randn(2, 4))
    b = mode.from_real(torch.randn(4))
    with mode:
        out = torch.nn.functional.linear(x, w, b)
    assert type(out) is Tagged and out.tag == "w" and out.shape == (2, 4)
    assert type(out.elem) is FakeTensor


def test_fakes_refuse_opaque_and_symbolic_subclasses():
    mode = FakeTensorMode()
    with pytest.raises(FakeTensorError, match="defines its own __torch_dispatch__"):
        mode.from_real(Opaque(torch.randn(2)))
    with pytest.raises(FakeTensorError, match="symbolic sizes of tensor subclass"):
        mode.from_real(TwoTensor(torch.randn(2), torch.randn(2)), dynamic_dims=[0])


@pytest.mark.parametrize(
    ("other", "words"),
    [
        (Tagged(torch.randn(3), "x"), None),
        (Tagged(torch.randn(3), "y"), "subclass layout mismatch"),
        (Tagged(torch.randn(3, dtype=torch.float64), "x"), "subclass layout mismatch"),
        (TwoTensor(torch.randn(3), torch.randn(3)), "subclass layout mismatch"),
        (torch.randn(3), "no longer a Tagged"),
    ],
)
def test_layout_guard(other, words):
    guards = GuardSet()
    guards.add(
        SubclassLayoutGuard(LocalSource("x"), SubclassLayout.of(Tagged(torch.randn(3), "x")))
    )
    ok, why = check_both(guards, {"x": other})
    if words is None:
        assert ok and why is None
    else:
        assert not ok and words in why
