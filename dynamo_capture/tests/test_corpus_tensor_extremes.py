"""Builtin min/max with one-element tensors among the items, and sum() of a mix:
one graph operation (torch.clamp, torch.maximum/minimum) where the picked item is used
alike whichever it is; the frame runs eagerly where it is not.

Each program gives eager's results and torch.compile's graph and op counts
(`check_like_torch`); where torch.compile's own values differ from eager's (it returns
a tensor where eagerly a number was picked), capture is checked against eager alone.
"""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same


def max_of_sum_and_float_times_tensor(x):
    return max(x.sum(), 0.5) * x


def min_of_sum_and_int_plus_tensor(x):
    return min(x.sum(), 3) + x


def max_with_the_number_first(x):
    return max(0.5, x.sum()) + x


def max_of_list_of_tensors(x):
    return max([x.sum(), x.mean(), x[0]])


def min_of_list_of_tensors(x):
    return min([x[0], x[1], x[2]])


def max_of_several_tensor_arguments(x):
    return max(x[0], x[1], x[2])


def max_of_two_tensors(x):
    return max(x.sum(), x.mean())


def max_of_generator_of_tensors(x):
    return max(item.sum() for item in (x, x + 1))


def sum_of_tensors_and_numbers(x):
    return sum([x, 1, 2.5, x * 2])


def sum_of_mix_with_start(x):
    return sum([x.sum(), 1, 2.5], 10)


def max_of_sizes(x):
    return x * max(x.shape[0], 3) + min(x.size(0), 2)


def max_of_int_tensor_and_ints(x):
    ints = (x * 10).long()
    return max(ints.sum(), 3) * ints + min(ints[0], -2) * ints


def tensor_compared_with_max(x):
    return x < max(x.sum(), 0.5)


def inexact_float_in_the_tensors_dtype(x):
    return max(x.sum(), 0.1) * x + (x > min(x[0], 0.3))


def max_added_in_place(x):
    y = x.clone()
    y += max(x.sum(), 0.5)
    return y


def _one():
    return (torch.randn(4),)


def _grad():
    return (torch.randn(4, requires_grad=True),)


PROGRAMS = {
    fn.__name__: (fn, _one)
    for fn in (
        max_of_sum_and_float_times_tensor,
        min_of_sum_and_int_plus_tensor,
        max_with_the_number_first,
        max_of_list_of_tensors,
        min_of_list_of_tensors,
        max_of_several_tensor_arguments,
        max_of_two_tensors,
        max_of_generator_of_tensors,
        sum_of_tensors_and_numbers,
        sum_of_mix_with_start,
        max_of_sizes,
        max_of_int_tensor_and_ints,
        tensor_compared_with_max,
        inexact_float_in_the_tensors_dtype,
        max_added_in_place,
    )
}
PROGRAMS["max_of_tensor_requiring_grad_times_its_input"] = (
    max_of_sum_and_float_times_tensor,
    _grad,
)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_tensor_extreme_programs_count_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


@pytest.mark.parametrize("name", ["max_of_sizes", "max_of_sum_and_float_times_tensor"])
def test_tensor_extreme_programs_count_like_torch_dynamic(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args, dynamic=True)


def max_returned_as_is(x):
    picked = max(x.sum(), 0.5)
    return picked


def max_times_a_number(x):
    return max(x.sum(), 0.5) * 2


def max_live_at_a_break(x):
    picked = max(x.sum(), 0.5)
    torch._dynamo.graph_break()
    return x * picked


def max_of_int_tensor_and_float(x):
    ints = (x * 10).long()
    return max(ints.sum(), 0.5) * ints


def max_in_float64_arithmetic(x):
    return max(x.sum(), 0.1) * x.double()


def max_of_grad_tensor_times_another(x, y):
    return max(x.sum(), 0.5) * y


def max_with_number_first_requiring_grad(x):
    return max(0.5, x.sum()) * x


def max_then_tensor_mutated(x):
    total = x.sum()
    picked = max(total, x.mean())
    total.add_(100)
    return picked * x


@pytest.mark.parametrize(
    "fn, make_args",
    [
        (max_returned_as_is, _one),
        (max_times_a_number, _one),
        (max_live_at_a_break, _one),
        (max_of_int_tensor_and_float, _one),
        (max_in_float64_arithmetic, _one),
        (
            max_of_grad_tensor_times_another,
            lambda: (torch.randn(4, requires_grad=True), torch.randn(4)),
        ),
        (max_with_number_first_requiring_grad, _grad),
        (max_then_tensor_mutated, _one),
    ],
)
@pytest.mark.parametrize("shift", [-10.0, 10.0])
def test_tensor_extreme_gives_eager_values_whichever_item_is_picked(fn, make_args, shift):
    # NOTE: torch.compile returns a tensor here where eagerly the number is picked (or
    # rounds the number to the tensor's dtype); the shift makes each item win in turn
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    for _ in range(2):
        args = make_args()
        args = (args[0].detach().add(shift).requires_grad_(args[0].requires_grad), *args[1:])
        assert_same(compiled(*args), fn(*args))
