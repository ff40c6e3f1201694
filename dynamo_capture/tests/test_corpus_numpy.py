"""NumPy programs on arrays from tensors, in the style of torch.compile's NumPy tests:
NumPy functions, ndarray methods, attributes and operators as graph nodes, compared with
torch.compile's graph and op counts and eager's results (`check_like_torch`).

Programs where torch.compile itself gives another type than eager (an ndarray for a
NumPy scalar) are checked against eager alone (`check_like_eager`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchcheck import check_like_eager, check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, clone_inputs


def _matrix():
    return (torch.randn(3, 4),)


def _positive():
    return (torch.rand(3, 4) + 0.5,)


def _integers():
    return (torch.randint(-8, 8, (3, 4), dtype=torch.int32),)


def _two():
    return (torch.randn(3, 4), torch.randn(3, 4))


# ----- functions, methods and attributes -------------------------------------------------
def reductions_along_axes(x):
    a = x.numpy()
    return np.sum(a, axis=0), a.mean(1), np.sum(a, axis=1, keepdims=True), a.cumsum(axis=1)


def attributes_and_casts(x):
    a = x.numpy()
    return a.T * a.shape[0] + a.ndim, a.astype(np.float64) / 3, a.astype("float16")


def math_functions(x):
    a = x.numpy()
    return np.exp(a) + np.log(a) + np.sin(a), np.sqrt(np.abs(a)), np.tanh(a) + np.floor(a)


def where_clip_and_concatenate(x, y):
    a, b = x.numpy(), y.numpy()
    return np.where(a > 0, a, 0.0), np.clip(a, -0.5, 0.5), np.concatenate((a, b), axis=1)


def arange_linspace_and_norm(x):
    a = x.numpy()
    return a + np.arange(4), np.linspace(0, 1, 4) * a, np.linalg.norm(a, axis=1)


def maximum_minimum_with_numbers(x):
    a = x.numpy()
    return np.maximum(a, 0), np.maximum(0.1, a), np.minimum(a, a * 2), np.fmod(a, 0.3)


def integer_maximum_with_a_float_is_float64(x):
    a = x.numpy()
    return np.maximum(a, 2.5), np.fmod(a, 3), np.minimum(7, a)


def number_first_ufuncs(x):
    a = x.numpy()
    return np.add(1, a), np.subtract(2, a), np.less(0, a), np.greater_equal(0.5, a)


def logical_functions(x):
    a = x.numpy()
    return np.logical_and(a > 0, a < 1), np.logical_not(a > 0), np.logical_xor(a > 0, 1)


def boolean_operators(x):
    a = x.numpy()
    return (a > 0) & (a < 0.5), (a < -1) | (a > 1), ~(a > 0), -a, +a


def integer_bitwise_operators(x):
    a = x.numpy()
    return a & 3, a | 8, a ^ a, ~a, a << 1, a >> 1


def dtype_of_a_reduction(x):
    a = x.numpy()
    return np.mean(a, axis=0, dtype=np.float64), np.sum(a, axis=1, dtype="float64")


def rounding_and_sorting(x):
    a = x.numpy()
    return np.round(a, 2), a.round(1), np.around(a), np.sort(a, axis=1), np.sort(a, axis=None)


def rearranging_functions(x):
    a = x.numpy()
    return np.tril(a), np.triu(a, 1), np.swapaxes(a, 0, 1), np.tile(a, (2, 1))


def stacking_and_outer(x):
    a = x.numpy()
    return np.vstack([a, a]), np.hstack([a, a]), np.outer(a[0], a[1])


def nan_and_infinity_tests(x):
    a = x.numpy()
    return np.isnan(a), np.isfinite(a / 0.0), np.isinf(a / 0.0), np.trunc(a), np.rint(a)


def float64_maximum_keeps_the_number_exact(x):
    a = x.numpy().astype(np.float64)
    return np.maximum(a, 0.1) - 0.1


PROGRAMS = [
    (reductions_along_axes, _matrix),
    (attributes_and_casts, _matrix),
    (math_functions, _positive),
    (where_clip_and_concatenate, _two),
    (arange_linspace_and_norm, _matrix),
    (maximum_minimum_with_numbers, _matrix),
    (integer_maximum_with_a_float_is_float64, _integers),
    (number_first_ufuncs, _matrix),
    (logical_functions, _matrix),
    (boolean_operators, _matrix),
    (integer_bitwise_operators, _integers),
    (dtype_of_a_reduction, _matrix),
    (rounding_and_sorting, _matrix),
    (rearranging_functions, _matrix),
    (stacking_and_outer, _matrix),
    (nan_and_infinity_tests, _matrix),
    (float64_maximum_keeps_the_number_exact, _matrix),
]


@pytest.mark.filterwarnings("ignore:divide by zero")
@pytest.mark.parametrize(("fn", "make_args"), PROGRAMS, ids=[fn.__name__ for fn, _ in PROGRAMS])
def test_numpy_program_is_one_graph_like_torch(fn, make_args):
    counter = check_like_torch(fn, make_args)
    assert counter.frame_count == 1


# ----- NumPy scalars: eager's types, where torch.compile gives 0-d arrays ----------------
def full_reductions_give_numpy_scalars(x):
    a = x.numpy()
    return np.mean(a), a.max(), np.std(a), np.linalg.norm(a), np.sum(a, dtype=np.float64)


def test_full_reductions_give_numpy_scalars_like_eager():
    assert check_like_eager(full_reductions_give_numpy_scalars, _matrix).backend.frame_count == 1


# ----- what capture does not put in a graph breaks there ---------------------------------
def method_not_in_the_table(x):
    a = x.numpy()
    return x + len(a.tolist())


def test_ndarray_method_not_in_the_table_breaks_at_its_call_like_torch():
    counter = check_like_torch(method_not_in_the_table, _matrix)
    assert counter.frame_count == 2


# ----- writes: in-place operators, out= and item assignment ------------------------------
def in_place_operators_write_the_input(x):
    a = x.numpy()
    a += 1
    a *= 2
    return x * 2


def in_place_operators_of_other_dtypes(x):
    a = x.numpy() * 1
    a += np.arange(4)
    m = a > 0
    m &= a < 1
    n = 1
    n += a
    return a, m, n


def out_argument_writes_and_gives_the_array(x):
    a = x.numpy()
    np.multiply(a, 2, out=a)
    np.sin(a, out=a)
    out = np.empty_like(a)
    np.add(a, 1, out=out)
    return x, out


def item_assignments(x):
    a = x.numpy()
    a[0] = 5
    a[1:, ::2] = -1.5
    b = x.numpy() * 1
    b[b < 0] = 0
    b[:, 1] = b[:, 2]
    b[0] = np.arange(4)
    return x + 1, b


def float_stored_into_an_integer_array(x):
    a = x.numpy()
    a[0] = 2.7
    a[1] = -2.7
    return a


def float_added_in_place_to_an_integer_array(x):
    a = x.numpy() * 1
    a += 1.5
    return a


def result_of_another_shape_written_into_out(x):
    out = np.zeros(3, dtype=np.float32)
    np.add(x.numpy(), 1, out=out)
    return out


@pytest.mark.parametrize(
    ("fn", "make_args"),
    [
        (in_place_operators_write_the_input, _matrix),
        (in_place_operators_of_other_dtypes, _matrix),
        (out_argument_writes_and_gives_the_array, _matrix),
        (item_assignments, _matrix),
        (float_stored_into_an_integer_array, _integers),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_numpy_write_is_in_the_graph_like_torch(fn, make_args):
    counter = check_like_torch(fn, make_args)
    assert counter.frame_count == 1


@pytest.mark.parametrize(
    "fn", [float_added_in_place_to_an_integer_array, result_of_another_shape_written_into_out]
)
def test_numpy_write_that_numpy_refuses_raises_like_eager(fn):
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    make_args = _integers if fn is float_added_in_place_to_an_integer_array else _matrix
    args = make_args()
    with pytest.raises(Exception) as expected:  # noqa: PT011 - NumPy's own error types
        fn(*clone_inputs(args))
    with pytest.raises(type(expected.value)):
        compiled(*clone_inputs(args))


def nan_stored_into_an_integer_array(x):
    a = x.numpy()
    a[0] = float("nan")
    return a


def test_nan_stored_into_an_integer_array_runs_eagerly_and_raises():
    compiled = dynamo_capture.optimize(nan_stored_into_an_integer_array, backend=CountingBackend())
    with pytest.raises(ValueError, match="NaN"):
        compiled(_integers()[0])


# ----- more functions and attributes ---------------------------------------------------------
def linear_algebra_and_einsum(x):
    a = x.numpy()
    square = a[:, :3] + np.eye(3, dtype=np.float32) * 3
    return np.linalg.inv(square), np.einsum("ij,ij->i", a, a), np.linalg.solve(square, a[:, 0])


def differences_and_gathers(x):
    a = x.numpy()
    return np.diff(a, axis=1), np.take_along_axis(a, np.argmax(a, axis=1)[:, None], axis=1)


def real_imag_strides_and_metadata_functions(x):
    a = x.numpy()
    return a.real + 1, a * a.itemsize, a.strides, np.ndim(a), np.size(a)


def number_arguments_of_a_ufunc(x):
    return x + int(np.floor(2.7)) + float(np.sqrt(4.0))


@pytest.mark.parametrize(
    "fn",
    [
        linear_algebra_and_einsum,
        differences_and_gathers,
        real_imag_strides_and_metadata_functions,
        number_arguments_of_a_ufunc,
    ],
)
def test_more_numpy_functions_in_one_graph_like_torch(fn):
    counter = check_like_torch(fn, _matrix)
    assert counter.frame_count == 1


# ----- aliasing: a view where NumPy gives a view, a copy where it copies -----------------
def asarray_is_the_array_itself(x):
    a = x.numpy() * 1
    b = np.asarray(a)
    b[0] = 5
    c = np.asarray(a, dtype=np.float32)
    c[1] = 7
    d = a.astype(np.float32, copy=False)
    d[2] = 9
    return a, b is a, d is a


def flatten_copies_and_ravel_of_a_strided_array_copies(x):
    a = x.numpy() * 1
    flat = a.flatten()
    flat[0] = 5
    row = a[0]
    strided = row[::2].ravel()
    strided[0] = 7
    contiguous = row.ravel()
    contiguous[1] = 9
    return a, flat, strided, contiguous


def views_written_write_their_base(x):
    a = x.numpy() * 1
    a.T[0] = 5
    row = a[1]
    row += 1
    a.reshape(4, 3)[0] = 1
    copied = a.T.reshape(-1)
    copied[0] = 100
    return a, copied


def flip_then_write(x):
    a = x.numpy() * 1
    flipped = np.flip(a, 0)
    a[0] = 5
    return flipped


def imag_of_a_real_array(x):
    return x.numpy().imag


def sum_over_no_axis(x):
    return np.sum(x.numpy(), axis=())


@pytest.mark.parametrize(
    ("fn", "graphs"),
    [
        (asarray_is_the_array_itself, 1),
        (flatten_copies_and_ravel_of_a_strided_array_copies, 1),
        (views_written_write_their_base, 1),
        # NumPy's flip is a view (torch's a copy), a real array's imag read-only, and
        # axis=() reduces nothing (torch's dim=() everything): these run eagerly
        (flip_then_write, 1),
        (imag_of_a_real_array, 0),
        (sum_over_no_axis, 0),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_numpy_results_alias_as_numpy_s_do(fn, graphs):
    assert check_like_eager(fn, _matrix).backend.frame_count == graphs
