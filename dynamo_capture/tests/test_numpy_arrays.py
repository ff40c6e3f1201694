"""NumPy on arrays from tensors: each NumPy call one graph node, NumPy's dtype rules.

Each program runs under capture and under torch.compile with counting backends
(`torchcheck`): the graph and op counts are torch.compile's and the results are
eager's (type and dtype included: an ndarray where eager gives an ndarray, a NumPy
scalar where eager gives one).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import assert_same, clone_inputs


def sin_of_numpy(x):
    a = x.numpy()
    return torch.from_numpy(np.sin(a) + 1)


def ndarray_argument(a):
    return np.sum(a**2, axis=0) + a.max()


def transpose_matmul(x):
    a = x.numpy()
    return torch.from_numpy(a.T @ a).sum()


def concatenate_times_float32(a, b):
    return np.concatenate([a, b]) * np.float32(2)


def astype_reshape(x):
    a = x.numpy()
    return torch.from_numpy(a.astype(np.float64).reshape(-1))


def factories_default_float64(a):
    return np.zeros_like(a) + np.ones(a.shape) + np.arange(a.shape[-1])


def shape_of_numpy(x):
    return x.numpy().shape[0] * x


def mean_axis_keepdims(x):
    a = x.numpy()
    return torch.from_numpy(np.mean(a, axis=0) + a.sum(axis=1, keepdims=True))


def index_then_exp(x):
    a = x.numpy()
    return torch.from_numpy(np.exp(a[0]) - a[1:].max(axis=0))


def maximum_matmul(a, b):
    return np.maximum(a, b) @ b.T


def int_array_sqrt_is_float64(a):
    return np.sqrt(np.abs(a)) + np.arange(4)


def numpy_result_of_tensor(x):
    return x.numpy() * 2


def stack_reshape_transpose(a):
    return np.stack([a, a * 2], axis=0).reshape(2, -1).T


def numpy_scalar_types(a):
    return np.int64(3) * a + np.float32(0.5)


def array_literal_times(a):
    return np.array([1.0, 2.0, 3.0]) * a + np.asarray([1, 2, 3])


def _r(*shape):
    return torch.randn(*shape)


PROGRAMS = {
    "sin_of_numpy": (sin_of_numpy, lambda: (_r(3),)),
    "ndarray_argument": (ndarray_argument, lambda: (np.random.randn(3, 4).astype(np.float32),)),
    "transpose_matmul": (transpose_matmul, lambda: (_r(3, 2),)),
    "concatenate_times_float32": (
        concatenate_times_float32,
        lambda: (np.ones(3, np.float32), np.ones(2, np.float32)),
    ),
    "astype_reshape": (astype_reshape, lambda: (_r(2, 3),)),
    "factories_default_float64": (factories_default_float64, lambda: (np.random.randn(2, 3),)),
    "shape_of_numpy": (shape_of_numpy, lambda: (_r(3),)),
    "mean_axis_keepdims": (mean_axis_keepdims, lambda: (_r(3, 4),)),
    "index_then_exp": (index_then_exp, lambda: (_r(3, 4),)),
    "maximum_matmul": (maximum_matmul, lambda: (np.random.randn(3, 3), np.random.randn(3, 3))),
    "int_array_sqrt_is_float64": (int_array_sqrt_is_float64, lambda: (np.arange(4),)),
    "numpy_result_of_tensor": (numpy_result_of_tensor, lambda: (_r(3),)),
    "stack_reshape_transpose": (
        stack_reshape_transpose,
        lambda: (np.random.randn(3).astype(np.float32),),
    ),
    "numpy_scalar_types": (numpy_scalar_types, lambda: (np.arange(3, dtype=np.int32),)),
    "array_literal_times": (array_literal_times, lambda: (np.ones(3, np.float32),)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_numpy_program_counts_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


def _eager_and_compiled(fn, *args):
    compiled = dynamo_capture.optimize(fn, backend=lambda gm, example_inputs: gm.forward)
    assert_same(compiled(*clone_inputs(args)), fn(*clone_inputs(args)))
    return compiled


def test_full_reduction_returns_numpy_scalar_like_eager():
    def mean_of_array(a):
        return np.mean(a * 2), a.std(), (a > 0).any()

    _eager_and_compiled(mean_of_array, np.random.randn(5).astype(np.float32))


def test_numpy_scalar_argument_is_a_graph_input_not_a_constant():
    # as in torch, a NumPy scalar argument is not specialized: one graph for all values
    def halve(x, y):
        return x + 1, y / 2, x * y

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = dynamo_capture.optimize(halve, backend=backend)
    x = torch.ones(2, dtype=torch.float64)
    for value in (np.int64(1), np.int64(2), np.int64(7)):
        assert_same(compiled(x, value), halve(x, value))
    assert len(graphs) == 1


def test_tensor_with_numpy_scalar_takes_it_as_python_number():
    def mixed(x, s):
        return x.int() * s, x > s, x + s

    _eager_and_compiled(mixed, torch.ones(3), np.float64(0.5))


def test_linalg_norm_returns_numpy_scalar_like_eager():
    def norms(a):
        return np.linalg.norm(a), np.linalg.norm(a, axis=1, keepdims=True)

    _eager_and_compiled(norms, np.random.randn(3, 4))


def test_python_scalars_follow_numpy_promotion():
    # NEP 50: an int array with a Python float is float64; a float32 array stays float32
    def promote(a, b):
        return a * 0.5, b * 2.0, np.where(a > 1, a, 0.5), a // 2, -a, abs(a)

    _eager_and_compiled(promote, np.arange(4), np.ones(3, np.float32))


def test_numpy_write_of_an_input_array_is_in_the_graph():
    def write(a):
        a[0] = 5.0
        a += 1
        return a * 2

    compiled = _eager_and_compiled(write, np.ones(3))
    assert not compiled.graph_breaks
    written = np.ones(3)
    compiled(written)
    np.testing.assert_array_equal(written, [6.0, 2.0, 2.0])


def test_numpy_function_not_in_table_breaks():
    def random(a):
        return np.random.rand(3) * 0 + a

    compiled = _eager_and_compiled(random, np.ones(3))
    assert compiled.graph_breaks


def test_numpy_of_tensor_requiring_grad_raises_like_eager():
    def to_numpy(x):
        return x.numpy() + 1

    compiled = dynamo_capture.optimize(to_numpy, backend=lambda gm, example_inputs: gm.forward)
    with pytest.raises(RuntimeError, match="requires grad"):
        compiled(torch.ones(2, requires_grad=True))


def test_ndarray_argument_of_other_shape_recompiles():
    counts = []

    def backend(gm, example_inputs):
        counts.append(gm)
        return gm.forward

    compiled = dynamo_capture.optimize(ndarray_argument, backend=backend)
    for shape in ((3, 4), (3, 4), (2, 5)):
        a = np.random.randn(*shape)
        assert_same(compiled(a), ndarray_argument(a))
    assert len(counts) == 2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_numpy_programs_under_ember_backends(backend):
    import ember

    for name in ("sin_of_numpy", "factories_default_float64", "int_array_sqrt_is_float64"):
        fn, make_args = PROGRAMS[name]
        args = make_args()
        assert_same(ember.compile(fn, backend=backend)(*args), fn(*args))


def _scaled_sum(a):
    return np.sin(a) * 2 + a.sum()


def _rows_matmul(a, b):
    return (a @ b).sum(0)


def _tensor_plus_array(t, a):
    return t + torch.from_numpy(a)


_CALLS = iter(range(2, 100))


def _growing_vector():
    return (np.random.randn(next(_CALLS)),)


def _growing_rows():
    rows = next(_CALLS)
    return np.random.randn(rows, 3), np.random.randn(3, 2)


def _growing_pair():
    n = next(_CALLS)
    return torch.randn(n), np.random.randn(n).astype(np.float32)


@pytest.mark.parametrize(
    "fn, make_args",
    [
        (_scaled_sum, _growing_vector),
        (_rows_matmul, _growing_rows),
        (_tensor_plus_array, _growing_pair),
    ],
    ids=["vector", "rows", "with_tensor"],
)
def test_ndarray_sizes_become_dynamic_after_a_change_like_torch(fn, make_args):
    check_like_torch(fn, make_args, calls=4)


def test_dynamic_ndarray_guards_rank_dtype_and_layout():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(a):
        return (a * 2).sum(0) + a[0]

    compiled = dynamo_capture.optimize(fn, backend=backend)
    arrays = [
        np.arange(3.0),
        np.arange(4.0),
        np.arange(8.0)[::2],  # strided: another entry
        np.arange(5, dtype=np.float32),  # another dtype
        np.arange(6.0).reshape(3, 2),  # another rank
        np.arange(12.0).reshape(3, 4).T,  # transposed
        np.arange(7.0),
    ]
    for array in arrays:
        assert_same(compiled(array), fn(array))
    assert len(graphs) <= len(arrays) - 1  # the 1-d float64 entry served 3.0, 4.0 and 7.0


# ----- NumPy scalars made from constants ---------------------------------------------
# float() of a NumPy floating scalar computed from constants is that constant (the graph
# holds the scalar's nodes, as torch.compile's does); int() of an integer one breaks
# the graph, as there; one read from tensor data breaks it too.
def float_of_numpy_float64(x):
    return x * float(np.float64(2.5))


def float_of_float32_arithmetic(x):
    return x * float(np.float32(2.5) * 2)


def float_of_int_scalar_divided(x):
    return x * float(np.int64(3) / 2)


def float_of_int_scalar_plus_python_float(x):
    return x * float(np.int64(3) + 1.5)


def float_of_numpy_sqrt_returned(x):
    s = float(np.sqrt(np.float64(4.0)))
    return x * s, s


def int_of_numpy_int64(x):
    return x * int(np.int64(3) + 1)


def float_of_scalar_from_tensor_data(x):
    return x * float(np.float64(x.sum().item()))


def numpy_scalar_kept_and_converted(x):
    v = np.float64(2.0) * 3
    return x * v, float(v)


CONSTANT_SCALARS = [
    float_of_numpy_float64,
    float_of_float32_arithmetic,
    float_of_int_scalar_divided,
    float_of_int_scalar_plus_python_float,
    float_of_numpy_sqrt_returned,
    int_of_numpy_int64,
    float_of_scalar_from_tensor_data,
    numpy_scalar_kept_and_converted,
]


@pytest.mark.parametrize("fn", CONSTANT_SCALARS, ids=[fn.__name__ for fn in CONSTANT_SCALARS])
def test_float_of_numpy_scalar_from_constants_is_a_constant_like_torch(fn):
    check_like_torch(fn, lambda: (torch.randn(4),))
