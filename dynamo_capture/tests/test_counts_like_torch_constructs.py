"""Constructs capture counts like torch.compile (graphs, operations), values as eager:
tensor metadata attributes, requires_grad_, min/max picks in further arithmetic."""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import eager_backend


def _vector():
    return (torch.randn(3),)


def _scalars():
    return (torch.randn(()), torch.randn(()))


# ----- metadata attributes ------------------------------------------------------
@pytest.mark.parametrize("name", ["nbytes", "itemsize", "is_leaf", "is_cpu", "is_meta"])
def test_tensor_metadata_attribute_is_one_graph(name):
    def fn(x):
        y = x + 1
        return y * int(getattr(y, name)) + int(getattr(x, name))

    check_like_torch(fn, _vector)


def test_nbytes_of_a_half_tensor_is_folded():
    def fn(x):
        return x.sum() / x.nbytes

    check_like_torch(fn, lambda: (torch.randn(4, 2, dtype=torch.float16),))


# ----- requires_grad_ -----------------------------------------------------------
def test_requires_grad_on_a_frame_tensor_cuts_at_the_call():
    def fn(x):
        y = x * 2
        y.requires_grad_()
        return y + 1, y.requires_grad

    check_like_torch(fn, _vector)


def test_requires_grad_keyword_on_a_detached_tensor_cuts():
    def fn(x):
        y = (x.detach() * 2).sin()
        y.requires_grad_(requires_grad=True)
        return y.cos()

    check_like_torch(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_requires_grad_that_changes_nothing_is_no_node():
    def fn(x):
        y = x * 2
        z = y.requires_grad_()
        return z.sin() + y

    check_like_torch(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_requires_grad_of_a_detached_copy_then_more_ops():
    def fn(x):
        y = x.detach().clone().mul(3)
        y.requires_grad_(True)
        return (y * y).sum()

    check_like_torch(fn, _vector)


# ----- min/max picks ------------------------------------------------------------
def test_negated_max_of_tensor_and_number_in_arithmetic():
    def fn(x):
        return -max(x.sum(), 0.5) * x

    check_like_torch(fn, _vector)
    check_like_torch(fn, lambda: (torch.full((3,), -1.0),))  # the number picked


def test_min_with_numbers_then_arithmetic_with_a_tensor():
    def fn(x):
        return (min(x.sum(), 2) - 1) * x + (3 * max(x.mean(), -0.25)) / 2 * x

    check_like_torch(fn, _vector)
    check_like_torch(fn, lambda: (torch.full((3,), 4.0),))


def test_sum_of_a_list_holding_a_max_pick_and_tensors():
    def fn(x):
        return sum([max(x.sum(), 0.5), x])

    check_like_torch(fn, _vector)
    check_like_torch(fn, lambda: (torch.full((3,), -1.0),))


def test_torch_function_of_max_of_input_scalars():
    def fn(a, b):
        return torch.relu(max(a, b)) * b

    check_like_torch(fn, _scalars)


def test_torch_function_of_max_of_computed_scalars():
    def fn(x):
        return torch.relu(max(x.sum(), x.mean()))

    check_like_torch(fn, _vector)


def test_view_of_max_of_input_scalars_stays_eager():
    def fn(a, b):
        return torch.squeeze(max(a, b))

    a, b = torch.tensor(1.0), torch.tensor(2.0)
    out = dynamo_capture.optimize(fn, backend=eager_backend)(a, b)
    assert out.data_ptr() == b.data_ptr()  # eagerly a view of the very tensor picked


def test_max_pick_with_a_number_the_dtype_rounds_stays_exact():
    def fn(x):
        return (max(x.sum(), 0.1) + 0.2) * x

    x = torch.full((3,), -1.0, dtype=torch.float64)
    got = dynamo_capture.optimize(fn, backend=eager_backend)(x.clone())
    assert torch.equal(got, fn(x.clone()))


# ----- user modules made in the frame --------------------------------------------
class _Shift(torch.nn.Module):
    def __init__(self, k, scale=2.0):
        super().__init__()
        self.k = k
        self.scale = self.k * scale

    def forward(self, x):
        return x * self.scale + self.k


class _Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


_made = []


class _Recording(torch.nn.Module):
    def __init__(self):
        super().__init__()
        _made.append(self)  # an effect beyond the new module: not made while capturing

    def forward(self, x):
        return x + 1


def test_user_module_made_in_the_frame_is_traced():
    def fn(x):
        return _Shift(3)(x) + _Shift(1, scale=0.5)(x)

    check_like_torch(fn, _vector)


def test_user_module_made_in_the_frame_keeps_its_state_per_call():
    def fn(x):
        counting = _Counting()
        return counting(x) + counting(x), counting.calls

    check_like_torch(fn, _vector)


def test_user_module_with_effects_in_init_is_made_eagerly():
    def fn(x):
        return _Recording()(x)

    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    _made.clear()
    for _ in range(3):
        torch.testing.assert_close(compiled(torch.ones(3)), torch.full((3,), 2.0))
    assert len(_made) == 3


def test_plainly_made_module_rules():
    from dynamo_capture.made_modules import plainly_made_module

    class Reads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = len(_made)  # a global read

    class Keywords(torch.nn.Module):
        def __init__(self, **kwargs):
            super().__init__()

    assert plainly_made_module(_Shift) and plainly_made_module(_Counting)
    assert not plainly_made_module(_Recording)
    assert not plainly_made_module(Reads) and not plainly_made_module(Keywords)


# ----- buffers assigned in forward ----------------------------------------------
class _Accumulating(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x):
        self.total = self.total + x.detach()
        y = self.linear(x * self.total)
        self.total = self.total * 0.5
        return y + self.total


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _Accumulating()

    def forward(self, x):
        self.inner.total = self.inner.total - 1
        return self.inner(x)


class _ReadsBuffersAfter(_Accumulating):
    def forward(self, x):
        self.total = self.total + 1
        return x * sum(b.sum() for b in self.buffers())


def _buffer_counts(cls, calls=3):
    import copy

    import torch._dynamo
    import torch._dynamo.testing

    from dynamo_capture.testing import CountingBackend

    torch.manual_seed(0)
    ours = cls()
    eager, theirs = copy.deepcopy(ours), copy.deepcopy(ours)
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(ours, backend=backend)
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    reference = torch.compile(theirs, backend=counter)
    for _ in range(calls):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), eager(x))
        reference(x)
        torch.testing.assert_close(dict(ours.named_buffers()), dict(eager.named_buffers()))
    torch._dynamo.reset()
    return (backend.frame_count, backend.op_count), (counter.frame_count, counter.op_count)


@pytest.mark.parametrize("cls", [_Accumulating, _Outer])
def test_buffer_assigned_in_forward_stays_in_the_graph(cls):
    ours, theirs = _buffer_counts(cls)
    assert ours == theirs


def test_module_buffers_read_after_an_assignment_see_the_new_tensor():
    _buffer_counts(_ReadsBuffersAfter)  # values and buffers as eager's


# ----- a closure made in the frame, broken inside -------------------------------
def _closure_breaking(x, k):
    scale = k * 2

    def g(t):
        a = t * scale
        torch._dynamo.graph_break()
        return a + scale

    y = x.cos()
    return g(y) * 2


def test_closure_with_a_break_runs_as_a_compiled_frame_of_its_own():
    check_like_torch(_closure_breaking, lambda: (torch.randn(3), 1.5))


def test_closure_frame_reads_each_calls_cells():
    compiled = dynamo_capture.optimize(_closure_breaking, backend=eager_backend)
    for k in (1.0, 2.0, 3.0, 2.0):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, k), _closure_breaking(x, k))


def test_closure_whose_cell_another_closure_writes_runs_eagerly():
    def fn(x):
        total = 1.0

        def bump():
            nonlocal total
            total += 1.0

        def g(t):
            bump()
            torch._dynamo.graph_break()
            bump()
            return t * total

        return g(x) + total

    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), fn(x))


def test_closure_returned_after_a_broken_call_keeps_its_own_cells():
    def fn(x, k):
        def g(t):
            a = t * k
            torch._dynamo.graph_break()
            return a + k

        return g(x), g

    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    _, first = compiled(torch.ones(3), 2.0)
    _, second = compiled(torch.ones(3), 5.0)
    torch.testing.assert_close(first(torch.ones(3)), torch.full((3,), 4.0))
    torch.testing.assert_close(second(torch.ones(3)), torch.full((3,), 10.0))


def test_no_grad_decorated_closure_with_a_break_runs_compiled_under_no_grad():
    def fn(x):
        k = 2

        @torch.no_grad()
        def g(t):
            a = t * k
            torch._dynamo.graph_break()
            return a + 1

        return g(x.sin()), x.cos()

    check_like_torch(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_in_place_add_to_a_max_pick_writes_the_picked_tensor_as_eager():
    def fn(x):
        s = x.sum()
        pick = max(s, 0.5)
        pick += 1
        return pick * x, s

    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    for x in (torch.ones(3), torch.full((3,), -1.0)):
        got, expected = compiled(x.clone()), fn(x.clone())
        torch.testing.assert_close(got, expected)


def test_generator_closure_with_a_break_reads_its_cells_after_the_call():
    def fn(x, k):
        def g(t):
            yield t * k
            torch._dynamo.graph_break()
            yield t + k

        return list(g(x))

    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    for k in (1.0, 2.0):
        x = torch.randn(3)
        got, expected = compiled(x, k), fn(x, k)
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a, b)
