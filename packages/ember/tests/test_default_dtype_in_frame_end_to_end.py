"""torch.set_default_dtype inside a compiled frame, through backends that trace the graph:
its factories keep the dtype in force where they were called, the frame leaves eager's."""

from __future__ import annotations

import contextlib

import pytest
import torch

import ember


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


def factories_under_float64(x):
    with default_dtype(torch.float64):
        ones = torch.ones(3)
        made = torch.tensor([0.5, 1.5, 2.5]) + torch.arange(0.0, 3.0) * torch.full((3,), 2.0)
    return x * ones.sum(), ones, made


def leaves_float64(x):
    torch.set_default_dtype(torch.float64)
    return x + torch.ones(3), torch.linspace(0, 1, 3)


def sets_twice_around_break(x):
    torch.set_default_dtype(torch.float64)
    before = torch.ones(3)
    print("a graph break")
    after = torch.ones(2)  # the second part is entered under float64
    torch.set_default_dtype(torch.float32)
    return x + 1, before, after, torch.ones(1)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize(
    "fn",
    [factories_under_float64, leaves_float64, sets_twice_around_break],
    ids=lambda f: f.__name__,
)
def test_default_dtype_set_in_frame_keeps_factory_dtypes(fn, backend):
    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):
        expected = fn(torch.ones(3))
        expected_default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float32)
        got = compiled(torch.ones(3))
        assert torch.get_default_dtype() == expected_default
        torch.set_default_dtype(torch.float32)
        torch.testing.assert_close(got, expected)
