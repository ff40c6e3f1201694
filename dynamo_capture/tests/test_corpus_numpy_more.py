"""More NumPy programs on arrays from tensors and ndarray inputs, in the style of
torch.compile's NumPy tests (test/dynamo/test_unspec.py, test_misc.py, test/torch_np):
NumPy functions, ndarray methods and attributes, Python and NumPy scalars, NumPy's
float64 / int64 promotion, results handed to torch and back.

`check_like_torch`: ember's graphs and op counts equal torch.compile's, its values eager's.
`check_like_eager`: where torch.compile's values differ from eager's (it gives 0-d arrays
for NumPy scalars, float32 for NumPy's float64 of `int / int` or `np.where(c, 1.0, -1.0)`,
torch's generator for np.random, torch's float32 accumulation for float16 sums) or it
runs the frame eagerly (a dtype returned or compared): ember's values are eager's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchcheck import check_like_eager, check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same


# ----- arguments -------------------------------------------------------------------------
def mat():
    return torch.randn(3, 4)


def pos():
    return torch.rand(3, 4) + 0.5


def ints():
    return torch.randint(-5, 5, (3, 4))


def i32():
    return torch.randint(-5, 5, (3, 4), dtype=torch.int32)


def f64():
    return torch.randn(3, 4, dtype=torch.float64)


def arr():
    return np.random.default_rng().standard_normal((3, 4)).astype(np.float32)


def arr64():
    return np.arange(12, dtype=np.float64).reshape(3, 4) / 7


def iarr():
    return np.arange(12).reshape(3, 4) - 5


def f32s():
    return np.float32(1.5)


def f64s():
    return np.float64(0.25)


# ----- programs ---------------------------------------------------------------------------
def asarray_of_tensor(x):
    return np.asarray(x) * 2


def array_of_tensor_numpy(x):
    return np.array(x.numpy()) + 1


def mean_plus_python_float(x):
    a = x.numpy()
    return np.mean(a, axis=1) + 0.5


def sum_of_ints_axis(x):
    return np.sum(x.numpy() * 2, axis=0)


def where_with_python_scalars(x):
    return np.where(x.numpy() > 0, 1.0, -1.0)


def where_with_int_scalars(x):
    return np.where(x.numpy() > 0, 1, 0)


def concatenate_axis0(x, y):
    return np.concatenate([x.numpy(), y.numpy()])


def einsum_matmul(x, y):
    return np.einsum("ij,kj->ik", x.numpy(), y.numpy())


def linalg_norm_keepdims(x):
    a = x.numpy()
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def transpose_shape_and_dtype(x):
    a = x.numpy()
    return a.T.reshape(a.shape[1], -1), a.dtype == np.float32, a.dtype.itemsize


def int64_true_divide(x):
    return x.numpy() / 2


def int64_plus_float(x):
    return x.numpy() + 1.5


def int32_plus_int64_array(x):
    return x.numpy() + np.arange(4)


def int64_mean(x):
    return np.mean(x.numpy(), axis=0)


def int_sqrt(x):
    return np.sqrt(np.abs(x.numpy()))


def float32_scalar_times_array(x):
    return np.float32(2.5) * x.numpy()


def float64_scalar_times_array(x):
    return x.numpy() * np.float64(2.5)


def from_numpy_of_result(x):
    return torch.from_numpy(np.sin(x.numpy()) * 2) + x


def as_tensor_of_result(x):
    return torch.as_tensor(np.exp(x.numpy())).sum()


def return_ndarray_and_tensor(x):
    a = x.numpy()
    return a * 2, x + 1


def astype_int_and_back(x):
    a = (x.numpy() * 10).astype(np.int64)
    return a.astype(np.float32) / 10


def astype_bool(x):
    return x.numpy().astype(bool)


def astype_python_int(x):
    return x.numpy().astype(int) + 1


def astype_python_float(x):
    return x.numpy().astype(float)


def dtype_argument_zeros(x):
    return np.zeros((3, 4), dtype=np.float32) + x.numpy()


def zeros_default_float64(x):
    return np.zeros(4) + x.numpy()


def ones_like_dtype_int(x):
    return np.ones_like(x.numpy(), dtype=np.int64)


def full_like_fill(x):
    return np.full_like(x.numpy(), 3.0)


def arange_float_step(x):
    return np.arange(0.0, 2.0, 0.5) + x.numpy()


def arange_dtype(x):
    return x.numpy() * np.arange(4, dtype=np.float32)


def power_int_exponent(x):
    return x.numpy() ** 2


def floor_divide_and_mod(x):
    a = x.numpy()
    return a // 0.3, a % 0.3


def argmax_axis_and_take(x):
    a = x.numpy()
    return a.argmax(axis=1), np.argmin(a)


def std_ddof(x):
    return np.std(x.numpy(), axis=0, ddof=1), x.numpy().var(axis=1)


def min_max_methods(x):
    a = x.numpy()
    return a.max(axis=0), a.min(axis=1, keepdims=True)


def expand_dims_squeeze(x):
    a = x.numpy()
    return np.expand_dims(a, 0).shape, np.squeeze(a[None]).sum(axis=0)


def dot_and_matmul_operator(x):
    a = x.numpy()
    return a @ a.T, np.dot(a, a.T)


def ndarray_size_ndim_len(x):
    a = x.numpy()
    return x + a.size + a.ndim + len(a)


def numpy_float_item(x):
    return x + float(np.sum(x.numpy()))


def item_method(x):
    return x + np.sum(x.numpy()).item()


def ndarray_iteration(x):
    total = 0
    for row in x.numpy():
        total = total + row.sum()
    return total


def numpy_indexing_mask(x):
    a = x.numpy()
    return a[a > 0]


def numpy_indexing_slices(x):
    a = x.numpy()
    return a[1:, ::2], a[..., 0], a[None, 0]


def numpy_stack_axis1(x):
    a = x.numpy()
    return np.stack([a, a * 2], axis=1)


def cumsum_cumprod(x):
    a = x.numpy()
    return np.cumsum(a, axis=0), a.cumprod(axis=1)


def comparisons_to_python(x):
    a = x.numpy()
    return (a > 0.5).sum(), (a == a).all(), np.any(a < -3)


def mandelbrot_like(x):
    c = x.numpy()
    z = np.zeros_like(c)
    for _ in range(3):
        z = z * z + c
    return np.abs(z) < 2


def numpy_transpose_axes(x):
    a = x.numpy().reshape(2, 3, 2)
    return np.transpose(a, (2, 0, 1)), a.transpose(1, 0, 2)


def numpy_float32_result_dtype(x):
    a = x.numpy()
    return (a * 2.0).dtype, (a + np.float64(1)).dtype


def numpy_clip_methods(x):
    a = x.numpy()
    return a.clip(-0.5, 0.5), np.clip(a, 0, None)


def numpy_sum_dtype_of_bool(x):
    return np.sum(x.numpy() > 0, axis=1)


def numpy_random_randn_seeded(x):
    np.random.seed(0)
    return x.numpy() * np.random.randn(4)


def numpy_linalg_det_inv(x):
    a = x.numpy()[:, :3] + 3 * np.eye(3)
    return np.linalg.det(a), np.linalg.inv(a)


def numpy_fft(x):
    return np.fft.fft(x.numpy()).real


def numpy_tolist(x):
    return x.numpy().tolist()


def numpy_ndarray_flags(x):
    return x + x.numpy().flags["C_CONTIGUOUS"]


def np_isclose_allclose(x):
    a = x.numpy()
    return np.isclose(a, a + 1e-9), np.allclose(a, a)


def np_log_exp_chain_int(x):
    return np.log1p(np.exp(x.numpy())) - np.logaddexp(x.numpy(), 0)


def np_sign_abs_neg(x):
    a = x.numpy()
    return np.sign(a) * np.abs(a) - np.negative(a)


def numpy_scalar_int_constant(x):
    return x + np.int64(3) * 2


def numpy_pi_e(x):
    return x.numpy() * np.pi + np.e


def numpy_subdtype(x):
    a = x.numpy()
    if np.issubdtype(a.dtype, np.floating):
        return a + 1
    return a - 1


def numpy_dtype_call(x):
    return x.numpy().astype(np.dtype("float64")) + 1


def numpy_ndarray_input_shape(x):
    a = x.numpy()
    b = a.reshape(-1)
    return b[: a.shape[0]] * a.shape[1]


def numpy_gt_scalar_sum(x):
    return (x.numpy() > 0).astype(np.float32).mean(axis=0)


def numpy_square_hypot(x):
    a = x.numpy()
    return np.square(a) + np.hypot(a, 1.0)


def np_prod_keepdims(x):
    return np.prod(x.numpy(), axis=1, keepdims=True)


def np_mean_of_list_of_arrays(x):
    a = x.numpy()
    return np.mean([a[0], a[1]], axis=0)


def np_max_of_python_and_array(x):
    return max(x.numpy().max(), 0.0) + x


def np_array_of_python_list(x):
    return np.array([1.0, 2.0, 3.0, 4.0]) * x.numpy()


def np_array_int_list(x):
    return x.numpy() + np.array([1, 2, 3, 4])


def np_float_literal_division(x):
    return 1 / (1 + np.exp(-x.numpy()))


def np_sum_of_float16(x):
    return x.numpy().astype(np.float16).sum(axis=0)


def float64_tensor_numpy(x):
    return np.sin(x.numpy()) * np.float32(2)


def ndarray_input_sin(a):
    return np.sin(a) * 2


def ndarray_input_float64_mean(a):
    return a.mean(axis=0) + a.T.sum(axis=1)


def ndarray_input_int64_divide(a):
    return a / 3 + a // 2


def ndarray_inputs_concatenate_einsum(a, b):
    return np.concatenate((a, b), axis=1), np.einsum("ij,ij->", a, b)


def ndarray_input_to_tensor_and_back(a):
    t = torch.from_numpy(a)
    return (t * 2).numpy() + 1


def ndarray_input_linalg_norm(a):
    return np.linalg.norm(a, axis=0)


def numpy_float32_scalar_argument(x, s):
    return x.numpy() * s


def numpy_float64_scalar_argument(x, s):
    return x.numpy() + s


def numpy_float64_scalar_times_tensor(x, s):
    return x * s


def logaddexp_family(x):
    a = x.numpy()
    return np.logaddexp(a, a * 2), np.logaddexp2(a, 0.5)


def angles_and_signs(x):
    a = x.numpy()
    return np.deg2rad(a), np.degrees(a), np.copysign(1.0, a), np.signbit(a)


def int_fabs_float_power(x):
    a = x.numpy()
    return np.fabs(a), np.float_power(a, 2)


def fmax_fmin_nan(x):
    a = x.numpy()
    b = np.where(a > 0, a, np.nan)
    return np.fmax(b, 0.1), np.fmin(b, a)


def inverse_hyperbolic(x):
    a = x.numpy()
    return np.arcsinh(a), np.arccosh(a + 1), np.arctanh(a / 4)


def isclose_arrays(x):
    a = x.numpy()
    return np.isclose(a, a * (1 + 1e-7)), np.isclose(a, a + 1, atol=2.0)


def full_like_int_fill(x):
    return np.full_like(x.numpy(), 2)


def ufunc_out_new_array(x):
    a = x.numpy()
    out = np.empty((3, 4), dtype=np.float32)
    np.multiply(a, a, out=out)
    return out + 1


def take_along_axis_argsort_free(x):
    a = x.numpy()
    idx = np.argmax(a, axis=0)[None]
    return np.take_along_axis(a, idx, axis=0)


def numpy_then_torch_then_numpy(x):
    a = np.cos(x.numpy())
    t = torch.from_numpy(a).relu()
    return t.numpy().sum(axis=1)


def int_array_comparisons_and_where(x):
    a = x.numpy()
    return np.where(a > 0, a, -a) * 2, (a % 3 == 0).astype(np.int32)


def int32_with_python_int_stays_int32(x):
    a = x.numpy()
    return a * 3 + 1, (a * 3).dtype


def float32_with_float64_array(x):
    a = x.numpy()
    return a + np.ones(4), a * np.linspace(0, 1, 4)


def reshape_and_ravel_methods(x):
    a = x.numpy()
    return a.reshape(2, 6).ravel(), a.reshape((4, 3)).T, a.flatten()


def var_std_keepdims(x):
    a = x.numpy()
    return a.var(axis=0, keepdims=True), a.std(axis=1, ddof=1, keepdims=True)


def sum_with_dtype_float64_then_astype(x):
    a = x.numpy()
    return a.sum(axis=0, dtype=np.float64).astype(np.float32)


def numpy_float16_elementwise(x):
    h = x.numpy().astype(np.float16)
    return h * 2 + 1, np.sqrt(np.abs(h))


def numpy_float16_sum_runs_eagerly_values(x):
    h = x.numpy().astype(np.float16)
    return np.cumsum(h, axis=1)


def numpy_cast_bool_sum(x):
    a = x.numpy()
    return (a > 0).sum(axis=0), np.count_nonzero(a > 0, axis=1)


def numpy_random_normal_seeded_in_the_frame(x):
    np.random.seed(1)
    noise = np.random.normal(size=4)
    return np.sin(x.numpy()) + noise


def numpy_random_uniform_then_tensor(x):
    np.random.seed(2)
    return x + torch.from_numpy(np.random.uniform(-1, 1, (3, 4)).astype(np.float32))


def argsort_rows(x):
    return np.argsort(x.numpy(), axis=1)


def repeat_and_roll(x):
    a = x.numpy()
    return np.repeat(a, 2, axis=0), np.roll(a, 1, axis=1)


def trace_and_diag(x):
    a = x.numpy()
    return np.trace(a), np.diag(a[:, :3]).copy()


def nansum_nanmean(x):
    a = np.where(x.numpy() > 1, np.nan, x.numpy())
    return np.nansum(a, axis=0), np.nanmean(a, axis=1)


def ptp_and_average(x):
    a = x.numpy()
    return np.ptp(a, axis=0), np.average(a, axis=1)


def median_rows(x):
    return np.median(x.numpy(), axis=1)


def broadcast_to_and_atleast(x):
    a = x.numpy()
    return np.broadcast_to(a[0], (2, 4)) + 1, np.atleast_2d(a[0]).shape


def column_stack_dstack(x):
    a = x.numpy()
    return np.column_stack([a[0], a[1]]), np.dstack([a, a]).shape


def pad_constant(x):
    return np.pad(x.numpy(), 1)


def cross_and_kron(x):
    a = x.numpy()
    return np.cross(a[:, :3], a[:, 1:]), np.kron(a[:2, :2], a[:2, :2])


def searchsorted_sorted(x):
    a = np.sort(x.numpy()[0])
    return np.searchsorted(a, x.numpy()[1])


def array_equal_check(x):
    a = x.numpy()
    return x + np.array_equal(a, a)


def cov_and_corrcoef(x):
    a = x.numpy()
    return np.cov(a), np.corrcoef(a)


def flip_copy(x):
    return np.flip(x.numpy(), 1).copy(), np.fliplr(x.numpy()).copy()


def sum_python_list_of_arrays(x):
    a = x.numpy()
    return sum([a, a * 2, a * 3])


def empty_like_then_fill(x):
    a = x.numpy()
    b = np.empty_like(a)
    b[:] = 3.0
    return b + a


def percentile_rows(x):
    return np.percentile(x.numpy(), 50, axis=1)


def mean_of_int32_is_float64(x):
    return x.numpy().astype(np.int32).mean(axis=0)


def numpy_abs_min_scalar_to_python(x):
    return x * float(np.abs(x.numpy()).min())


def numpy_exp_of_python_float_constant(x):
    return x.numpy() * np.exp(1.0) + np.sqrt(2)


def numpy_scalar_float32_arithmetic(x):
    s = np.float32(0.1) + np.float32(0.2)
    return x.numpy() * s


def numpy_dtype_attribute_branch(x):
    a = x.numpy()
    if a.dtype == np.float32:
        return a * 2
    return a


def numpy_shape_unpack(x):
    a = x.numpy()
    rows, cols = a.shape
    return a.reshape(cols, rows) + np.zeros((cols, rows))


def numpy_size_loop(x):
    a = x.numpy()
    out = np.zeros(a.shape[1])
    for i in range(a.shape[0]):
        out = out + a[i]
    return out


def argsort_stable(x):
    a = x.numpy()
    return np.argsort(a, axis=1, kind="stable"), (a > 0).argsort(kind="stable")


def ptp_only(x):
    return np.ptp(x.numpy(), axis=0), np.average(x.numpy())


def atleast_views(x):
    a = x.numpy()[0]
    return np.atleast_2d(a) * 2, np.atleast_3d(a).shape


def int_trace_repeat(x):
    a = x.numpy()
    return np.trace(a), a.repeat(2), np.repeat(a, 3, axis=1)


def atleast_2d_of_a_matrix_is_itself(x):
    a = x.numpy()
    return np.atleast_2d(a) is a


def _one_array_twice():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    return a, a


def _two_arrays():
    return np.ones((3, 4), np.float32), np.ones((3, 4), np.float32)


def same_array_passed_twice(a, b):
    a += 1
    return b * 2, a is b


def float16_cross_average_trace(x):
    h = (x.numpy() * 30).astype(np.float16)
    return np.cross(h[:, :3], h[:, 1:]), np.average(h, axis=0), np.trace(h)


def _args(*makers):
    return lambda: tuple(make() for make in makers)


LIKE_TORCH = [
    (asarray_of_tensor, (mat,), 1),
    (array_of_tensor_numpy, (mat,), 1),
    (mean_plus_python_float, (mat,), 1),
    (sum_of_ints_axis, (mat,), 1),
    (where_with_int_scalars, (mat,), 1),
    (
        concatenate_axis0,
        (
            mat,
            mat,
        ),
        1,
    ),
    (
        einsum_matmul,
        (
            mat,
            mat,
        ),
        1,
    ),
    (linalg_norm_keepdims, (mat,), 1),
    (int64_plus_float, (ints,), 1),
    (int32_plus_int64_array, (i32,), 1),
    (int64_mean, (ints,), 1),
    (int_sqrt, (ints,), 1),
    (float32_scalar_times_array, (mat,), 1),
    (float64_scalar_times_array, (mat,), 1),
    (from_numpy_of_result, (mat,), 1),
    (as_tensor_of_result, (mat,), 1),
    (return_ndarray_and_tensor, (mat,), 1),
    (astype_int_and_back, (mat,), 1),
    (astype_bool, (mat,), 1),
    (astype_python_int, (mat,), 1),
    (astype_python_float, (mat,), 1),
    (dtype_argument_zeros, (mat,), 1),
    (zeros_default_float64, (mat,), 1),
    (ones_like_dtype_int, (mat,), 1),
    (full_like_fill, (mat,), 1),
    (arange_float_step, (mat,), 1),
    (arange_dtype, (mat,), 1),
    (power_int_exponent, (mat,), 1),
    (floor_divide_and_mod, (mat,), 1),
    (std_ddof, (mat,), 1),
    (min_max_methods, (mat,), 1),
    (expand_dims_squeeze, (mat,), 1),
    (dot_and_matmul_operator, (mat,), 1),
    (ndarray_size_ndim_len, (mat,), 1),
    (numpy_indexing_slices, (mat,), 1),
    (numpy_stack_axis1, (mat,), 1),
    (cumsum_cumprod, (mat,), 1),
    (mandelbrot_like, (mat,), 1),
    (numpy_transpose_axes, (mat,), 1),
    (numpy_clip_methods, (mat,), 1),
    (numpy_sum_dtype_of_bool, (mat,), 1),
    (numpy_tolist, (mat,), 1),
    (numpy_ndarray_flags, (mat,), 0),
    (np_isclose_allclose, (mat,), 1),
    (np_log_exp_chain_int, (mat,), 1),
    (np_sign_abs_neg, (mat,), 1),
    (numpy_scalar_int_constant, (mat,), 1),
    (numpy_pi_e, (mat,), 1),
    (numpy_dtype_call, (mat,), 1),
    (numpy_ndarray_input_shape, (mat,), 1),
    (numpy_gt_scalar_sum, (mat,), 1),
    (numpy_square_hypot, (mat,), 1),
    (np_prod_keepdims, (mat,), 1),
    (np_mean_of_list_of_arrays, (mat,), 1),
    (np_array_of_python_list, (mat,), 1),
    (np_array_int_list, (mat,), 1),
    (np_float_literal_division, (mat,), 1),
    (float64_tensor_numpy, (f64,), 1),
    (ndarray_input_sin, (arr,), 1),
    (ndarray_input_float64_mean, (arr64,), 1),
    (ndarray_input_int64_divide, (iarr,), 1),
    (ndarray_input_to_tensor_and_back, (arr,), 1),
    (ndarray_input_linalg_norm, (arr,), 1),
    (
        numpy_float32_scalar_argument,
        (
            mat,
            f32s,
        ),
        1,
    ),
    (
        numpy_float64_scalar_argument,
        (
            mat,
            f64s,
        ),
        1,
    ),
    (
        numpy_float64_scalar_times_tensor,
        (
            mat,
            f64s,
        ),
        1,
    ),
    (logaddexp_family, (mat,), 1),
    (angles_and_signs, (mat,), 1),
    (fmax_fmin_nan, (mat,), 1),
    (inverse_hyperbolic, (pos,), 1),
    (isclose_arrays, (mat,), 1),
    (full_like_int_fill, (mat,), 1),
    (ufunc_out_new_array, (mat,), 1),
    (take_along_axis_argsort_free, (mat,), 1),
    (numpy_then_torch_then_numpy, (mat,), 1),
    (int_array_comparisons_and_where, (ints,), 1),
    (float32_with_float64_array, (mat,), 1),
    (reshape_and_ravel_methods, (mat,), 1),
    (var_std_keepdims, (mat,), 1),
    (sum_with_dtype_float64_then_astype, (mat,), 1),
    (numpy_float16_elementwise, (mat,), 1),
    (numpy_cast_bool_sum, (mat,), 1),
    (repeat_and_roll, (mat,), 1),
    (nansum_nanmean, (mat,), 1),
    (ptp_and_average, (mat,), 1),
    (column_stack_dstack, (mat,), 1),
    (pad_constant, (mat,), 1),
    (cross_and_kron, (mat,), 1),
    (array_equal_check, (mat,), 2),
    (cov_and_corrcoef, (mat,), 1),
    (sum_python_list_of_arrays, (mat,), 1),
    (empty_like_then_fill, (mat,), 1),
    (mean_of_int32_is_float64, (mat,), 1),
    (numpy_exp_of_python_float_constant, (mat,), 1),
    (numpy_scalar_float32_arithmetic, (mat,), 1),
    (numpy_shape_unpack, (mat,), 1),
    (numpy_size_loop, (mat,), 1),
    (argsort_stable, (mat,), 1),
    (atleast_views, (mat,), 1),
]


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize(
    ("fn", "makers", "graphs"), LIKE_TORCH, ids=[fn.__name__ for fn, *_ in LIKE_TORCH]
)
def test_numpy_program_like_torch(fn, makers, graphs):
    counter = check_like_torch(fn, _args(*makers))
    assert counter.frame_count == graphs


LIKE_EAGER = [
    (where_with_python_scalars, (mat,), 1),
    (transpose_shape_and_dtype, (mat,), 1),
    (int64_true_divide, (ints,), 1),
    (argmax_axis_and_take, (mat,), 1),
    (ndarray_iteration, (mat,), 1),
    (comparisons_to_python, (mat,), 1),
    (numpy_float32_result_dtype, (mat,), 1),
    (numpy_random_randn_seeded, (mat,), 2),
    (numpy_linalg_det_inv, (mat,), 1),
    (numpy_fft, (mat,), 2),
    (numpy_subdtype, (mat,), 1),
    (np_sum_of_float16, (mat,), 1),
    (
        ndarray_inputs_concatenate_einsum,
        (
            arr,
            arr,
        ),
        1,
    ),
    (int_fabs_float_power, (ints,), 1),
    (int32_with_python_int_stays_int32, (i32,), 1),
    (numpy_float16_sum_runs_eagerly_values, (mat,), 1),
    (numpy_random_normal_seeded_in_the_frame, (mat,), 1),
    (numpy_random_uniform_then_tensor, (mat,), 1),
    # a float of the data handed on at a break: torch.compile takes it unspecialized from
    # the first call (2 graphs); ember specializes it, then recompiles when it changes
    (float16_cross_average_trace, (mat,), 1),
    (numpy_float_item, (mat,), 3),
    (item_method, (mat,), 3),
    (numpy_abs_min_scalar_to_python, (mat,), 3),
    (numpy_indexing_mask, (mat,), 1),
    (argsort_rows, (mat,), 1),
    (median_rows, (mat,), 1),
    (broadcast_to_and_atleast, (mat,), 1),
    (searchsorted_sorted, (mat,), 1),
    (flip_copy, (mat,), 1),
    (percentile_rows, (mat,), 1),
    (numpy_dtype_attribute_branch, (mat,), 1),
    (trace_and_diag, (mat,), 1),
    (ptp_only, (mat,), 1),
    (int_trace_repeat, (ints,), 1),
    (atleast_2d_of_a_matrix_is_itself, (mat,), 1),
    (np_max_of_python_and_array, (mat,), 0),
]


@pytest.mark.parametrize(
    ("fn", "makers", "graphs"), LIKE_EAGER, ids=[fn.__name__ for fn, *_ in LIKE_EAGER]
)
def test_numpy_program_like_eager(fn, makers, graphs):
    assert check_like_eager(fn, _args(*makers)).backend.frame_count == graphs


# ----- one ndarray at two places is one object ---------------------------------------------
def test_one_array_passed_twice_is_one_input_like_torch():
    counter = check_like_torch(same_array_passed_twice, _one_array_twice)
    assert counter.frame_count == 1


def test_one_array_twice_and_two_arrays_compile_apart():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(same_array_passed_twice, backend=counter)
    for make in (_two_arrays, _one_array_twice, _two_arrays, _one_array_twice):
        assert_same(compiled(*make()), same_array_passed_twice(*make()))
    assert counter.frame_count == 2


# ----- read-only arrays: a tensor cannot refuse a write ------------------------------------
def write_into_the_argument(a):
    a += 1
    return a * 2


def _read_only():
    a = np.ones((3, 4), np.float32)
    a.flags.writeable = False
    return (a,)


@pytest.mark.filterwarnings("ignore::dynamo_capture.EagerFallbackWarning")
def test_write_into_a_read_only_array_raises_like_eager():
    compiled = dynamo_capture.optimize(write_into_the_argument, backend=CountingBackend())
    (array,) = _read_only()
    with pytest.raises(ValueError, match="read-only"):
        write_into_the_argument(array)
    with pytest.raises(ValueError, match="read-only"):
        compiled(array)
    assert (array == 1).all()
    writable = np.ones((3, 4), np.float32)
    assert_same(compiled(writable), write_into_the_argument(np.ones((3, 4), np.float32)))
    with pytest.raises(ValueError, match="read-only"):
        compiled(array)  # the entry for a writable array does not take a read-only one
