"""torch.set_default_dtype inside the captured frame: one graph as torch.compile's, its
factories given the dtype in force as an argument, the dtype the frame leaves eager's."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same


@pytest.fixture(autouse=True)
def _float32_default():
    torch.set_default_dtype(torch.float32)
    yield
    torch.set_default_dtype(torch.float32)


@contextlib.contextmanager
def default_dtype(dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def factories_in_block(x):
    with default_dtype(torch.float64):
        ones = torch.ones(3)
        data = torch.tensor([1.5, 2.0, 0.25])
        mixed = torch.arange(0.0, 3.0) + torch.full((3,), 2.0) + torch.linspace(0, 1, 3)
    return x + ones.sum(), ones, data * 2, mixed - torch.zeros(3)


def random_factories_in_block(x):
    with default_dtype(torch.float64):
        noise = torch.randn(3) + torch.rand(3) + torch.empty(3).fill_(1.0)
    return x * 2, noise


def half_default_in_try_finally(x):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    try:
        made = torch.ones(3, 3) * 3 + x.to(torch.get_default_dtype())
    finally:
        torch.set_default_dtype(previous)
    return made, torch.ones(2)


def reads_default_in_block(x):
    with default_dtype(torch.float64):
        kind = torch.get_default_dtype()
        eye = torch.eye(3)
    return x.to(kind) @ eye, kind


@pytest.mark.parametrize(
    "fn",
    [factories_in_block, random_factories_in_block, half_default_in_try_finally,
     reads_default_in_block],
    ids=lambda fn: fn.__name__,
)  # fmt: skip
def test_default_dtype_block_counts_like_torch(fn):
    check_like_torch(fn, lambda: (torch.randn(3, 3),))


def _leaves_float64(x):
    torch.set_default_dtype(torch.float64)
    return x + 1, torch.ones(3), torch.tensor(0.5)


def test_default_dtype_set_in_frame_is_left_after_it():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(_leaves_float64, backend=backend)
    for _ in range(2):
        expected = _leaves_float64(torch.ones(3))
        assert torch.get_default_dtype() == torch.float64
        torch.set_default_dtype(torch.float32)
        got = compiled(torch.ones(3))
        assert torch.get_default_dtype() == torch.float64
        torch.set_default_dtype(torch.float32)
        assert_same(got, expected)
    assert len(backend.graphs) == 1


def test_default_dtype_factories_get_explicit_dtype_in_graph():
    backend = CountingBackend()
    dynamo_capture.optimize(factories_in_block, backend=backend)(torch.ones(3))
    (graph,) = backend.graphs
    factories = [node for node in graph.graph.nodes if node.target in (torch.ones, torch.tensor)]
    assert [node.kwargs.get("dtype") for node in factories] == [torch.float64, torch.float64]
    assert torch.get_default_dtype() == torch.float32


def test_default_dtype_at_entry_is_guarded():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(lambda x: x + torch.ones(3), backend=backend)
    assert compiled(torch.ones(3)).dtype == torch.float32
    with default_dtype(torch.float64):
        got = compiled(torch.ones(3, dtype=torch.float64))
    assert got.dtype == torch.float64
    assert len(backend.graphs) == 2


def _integer_division_in_block(x):
    with default_dtype(torch.float64):
        halves = torch.tensor([1, 2, 3]) / 2
    return x + 1, halves


def test_default_dtype_dependent_operation_runs_eagerly():
    # an integer tensor divided takes the default dtype and takes no dtype argument
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(_integer_division_in_block, backend=backend)
    with pytest.warns(Warning, match="default dtype"):
        got = compiled(torch.ones(3))
    assert_same(got, _integer_division_in_block(torch.ones(3)))
    assert torch.get_default_dtype() == torch.float32
