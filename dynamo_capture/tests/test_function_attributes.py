"""Attributes of functions made in the frame, functools.wraps and lru_cache wrappers."""

from __future__ import annotations

import functools

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture


def _one():
    return (torch.randn(4),)


def helper(t):
    "Adds one."
    return t + 1


@functools.lru_cache(maxsize=8)
def cached(n):
    return n * 3


def closure_names(x):
    def inner(t):
        return t * 2

    return inner(x) + len(inner.__name__) + len(inner.__qualname__)


def lambda_module_and_doc(x):
    g = lambda t: t  # noqa: E731
    return x + len(g.__module__) + (g.__doc__ is None)


def documented_closure(x):
    def inner(t):
        "Three."
        return t

    return inner(x) + len(inner.__doc__) + len(helper.__doc__)


def wraps_in_frame(x):
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            return fn(*args) * 2

        return wrapper

    h = decorate(helper)
    return h(x) + len(h.__name__) + (h.__wrapped__ is helper) + len(h.__doc__)


def lru_cache_wrapper(x):
    return x + cached(2) + cached.__wrapped__(1)


def closure_defaults(x):
    def inner(t, k=2, *, m=3):
        return t * k * m

    return inner(x) + len(inner.__defaults__) + len(inner.__kwdefaults__)


PROGRAMS = [
    closure_names,
    lambda_module_and_doc,
    documented_closure,
    wraps_in_frame,
    lru_cache_wrapper,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_function_attribute_program_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


def test_wrapper_returned_from_frame_keeps_copied_attributes():
    def make(x):
        @functools.wraps(helper)
        def wrapper(t):
            return helper(t)

        return wrapper, x + 1

    compiled = dynamo_capture.optimize(make, backend=lambda gm, ex: gm.forward, fullgraph=True)
    wrapper, _ = compiled(torch.randn(2))
    assert wrapper.__name__ == "helper" and wrapper.__wrapped__ is helper
    assert wrapper.__doc__ == "Adds one."
    torch.testing.assert_close(wrapper(torch.ones(2)), torch.full((2,), 2.0))


def test_closure_defaults_read_in_frame():
    # torch.compile fails inside on __defaults__ of a closure; compared with eager only
    compiled = dynamo_capture.optimize(
        closure_defaults, backend=lambda gm, ex: gm.forward, fullgraph=True
    )
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), closure_defaults(x))
