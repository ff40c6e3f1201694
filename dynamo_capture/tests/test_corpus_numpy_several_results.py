"""NumPy functions returning several arrays, or arrays whose shape depends on the data,
on arrays from tensors: ember's graph and op counts equal torch.compile's, its results
eager's (ndarrays where eager returns ndarrays, NumPy's lists and tuples).

    np.meshgrid (xy / ij, sparse, mixed dtypes), np.split / np.array_split (sections,
        indices, negative and out-of-range boundaries, a write through a part): one node
        whose arrays are read by getitem nodes
    np.unique (return_counts / return_inverse), np.nonzero, np.where(cond), np.argwhere:
        a break at the call itself, the arguments computed in the graph before it;
        an input array returned unchanged by the part after is the same object
    an ndarray indexed by integer arrays (`a[r, c]`): in the graph
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same


def _grid():
    return (torch.tensor([[1.0, 0, 2, 2], [0, 3, 1, 0], [2, 2, 0, 1]]),)


def meshgrid_xy(x):
    a = x.numpy()
    xx, yy = np.meshgrid(a[0], a[1])
    return xx + yy


def meshgrid_ij_to_tensor(x):
    a = x.numpy()
    xx, yy = np.meshgrid(a[0], a[1], indexing="ij")
    return torch.from_numpy(xx * yy)


def meshgrid_three_inputs(x):
    a = x.numpy()
    return np.meshgrid(a[0], a[1, :2], a[2, :3])


def meshgrid_sparse_two_dimensional_input(x):
    a = x.numpy()
    return np.meshgrid(a, a[0], sparse=True)


def meshgrid_mixed_dtypes(x):
    a = x.numpy()
    return np.meshgrid(a[0].astype(np.int64), a[1], indexing="ij")


def split_in_sections(x):
    return np.split(x.numpy(), 2, axis=1)


def split_at_indices(x):
    return np.split(x.numpy(), [1, 3], axis=1)


def split_at_negative_and_far_indices(x):
    return np.split(x.numpy(), [-3, 10], axis=1)


def array_split_unequal(x):
    return np.array_split(x.numpy(), 2)


def array_split_parts_reduced(x):
    a = x.numpy()
    return [part.sum() for part in np.split(a, 3)]


def array_split_part_written(x):
    a = x.numpy()
    parts = np.array_split(a, 3, axis=-1)
    parts[0][0] = 7.0
    return a, parts


def unique_with_counts(x):
    a = x.numpy()
    values, counts = np.unique(a, return_counts=True)
    return values, counts


def unique_inverse_and_counts(x):
    a = x.numpy()
    return np.unique(a, return_inverse=True, return_counts=True)


def unique_of_a_call(x):
    return np.unique(x.numpy())


def where_with_one_argument(x):
    return np.where(x.numpy() > 0)


def nonzero_of_a_call(x):
    return np.nonzero(x.numpy())


def argwhere_of_a_call(x):
    return np.argwhere(x.numpy())


def nonzero_method(x):
    a = x.numpy()
    return (a > 0).nonzero()


def nonzero_then_integer_indexing(x):
    a = x.numpy()
    rows, cols = np.nonzero(a)
    return a[rows, cols] * 2


def integer_array_indexing(x):
    a = x.numpy()
    rows = np.argmax(a, axis=1)
    return a[np.arange(3), rows]


def integer_array_indexing_mixed_with_slices(x):
    a = x.numpy()
    index = np.array([2, 0])
    return a[index], a[:, index], a[index, 1:]


def boolean_mask_indexing(x):
    a = x.numpy()
    mask = a > 0
    return a[mask]


PROGRAMS = [
    meshgrid_xy,
    meshgrid_ij_to_tensor,
    meshgrid_three_inputs,
    meshgrid_sparse_two_dimensional_input,
    meshgrid_mixed_dtypes,
    split_in_sections,
    split_at_indices,
    array_split_unequal,
    array_split_parts_reduced,
    array_split_part_written,
    unique_with_counts,
    unique_inverse_and_counts,
    unique_of_a_call,
    where_with_one_argument,
    nonzero_of_a_call,
    argwhere_of_a_call,
    nonzero_method,
    nonzero_then_integer_indexing,
    integer_array_indexing,
    integer_array_indexing_mixed_with_slices,
    boolean_mask_indexing,
]


def _torch_counts(fn):
    """torch.compile's graph and op counts, its results not compared: on some of these
    programs it returns a tuple where eager returns NumPy's list, or an ndarray for a
    NumPy scalar."""
    import torch._dynamo
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(fn, backend=counter)
    for _ in range(2):
        compiled(*_grid())
    torch._dynamo.reset()
    return counter.frame_count, counter.op_count


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_numpy_several_results_like_torch(fn):
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=counter)
    for _ in range(2):
        assert_same(compiled(*_grid()), fn(*_grid()))
    assert (counter.frame_count, counter.op_count) == _torch_counts(fn)


def test_split_at_negative_and_far_indices_like_eager():
    # torch.compile fails on this program (its split takes no such boundaries)
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(split_at_negative_and_far_indices, backend=counter)
    for _ in range(2):
        assert_same(compiled(*_grid()), split_at_negative_and_far_indices(*_grid()))
    assert counter.frame_count == 1


def test_split_in_unequal_sections_raises_like_eager():
    def fn(x):
        return np.split(x.numpy(), 3, axis=1)

    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    with pytest.raises(ValueError, match="equal division"):
        compiled(*_grid())


def test_input_array_returned_is_the_same_object():
    def fn(a, b):
        return np.unique(a + b), a

    a, b = np.arange(4.0), np.ones(4)
    result = dynamo_capture.optimize(fn, backend=CountingBackend())(a, b)
    assert result[1] is a
    np.testing.assert_array_equal(result[0], np.unique(a + b))
