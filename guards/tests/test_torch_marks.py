"""torch's own dimension marks (torch._dynamo.mark_dynamic & co) read as ember's marks.

Tests may import torch._dynamo as the reference that sets the marks; the package
only reads the attributes torch leaves on the tensor.
"""

import torch
import torch._dynamo

from guards import (
    DynamicRange,
    FakeTensorMode,
    LocalSource,
    ShapeEnv,
    mark_dynamic,
    mark_static,
    marks_of,
)


def test_torch_mark_dynamic_is_an_ember_dynamic_mark_with_its_range():
    x = torch.randn(4, 5, 6)
    torch._dynamo.mark_dynamic(x, 0, min=2, max=64)
    torch._dynamo.mark_dynamic(x, -1)
    marks = marks_of(x)
    assert marks.dynamic == {0: DynamicRange(2, 64), 2: DynamicRange(None, None)}


def test_torch_maybe_mark_dynamic_and_mark_static_are_read():
    x = torch.randn(4, 5, 6)
    torch._dynamo.maybe_mark_dynamic(x, 1)
    torch._dynamo.mark_static(x, 2)
    marks = marks_of(x)
    assert marks.maybe_dynamic == {1}
    assert marks.static == {2}
    assert marks.dynamic == {}


def test_torch_mark_dynamic_wins_over_torch_mark_static_and_ember_static_wins_over_both():
    x = torch.randn(4, 5)
    torch._dynamo.mark_static(x, 0)
    torch._dynamo.mark_dynamic(x, 0)
    assert set(marks_of(x).dynamic) == {0} and marks_of(x).static == frozenset()
    mark_static(x, 0)
    assert marks_of(x).dynamic == {} and marks_of(x).static == {0}


def test_ember_and_torch_marks_combine():
    x = torch.randn(4, 5)
    mark_dynamic(x, 0, min=2, max=8)
    torch._dynamo.mark_dynamic(x, 1)
    marks = marks_of(x)
    assert marks.dynamic == {0: DynamicRange(2, 8), 1: DynamicRange()}


def test_torch_marked_dims_get_symbolic_sizes_in_a_fake():
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = torch.randn(8, 6, 5)
    torch._dynamo.mark_dynamic(x, 0, min=2, max=64)
    torch._dynamo.mark_static(x, 2)
    fake = mode.from_real(x, LocalSource("x"), dynamic_dims=[2])
    assert [isinstance(d, torch.SymInt) for d in fake.shape] == [True, False, False]


def test_unmarked_tensor_has_no_marks():
    marks = marks_of(torch.randn(3))
    assert marks.dynamic == {} and marks.static == frozenset()
