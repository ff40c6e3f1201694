"""Outputs of operations on a tensor subclass keeping torch's default
`__torch_function__` are of the subclass, whatever the backend's compiled code gives."""

from __future__ import annotations

import pytest
import torch

import ember


class Tagged(torch.Tensor):
    def halved(self):
        return self / 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_subclass_results_keep_their_type_through_backends(backend):
    def f(x, y):
        return x + y, x.halved().sin(), y * 2

    compiled = ember.compile(f, backend=backend)
    x, y = torch.randn(4).as_subclass(Tagged), torch.randn(4)
    for got, expected in zip(compiled(x, y), f(x, y), strict=True):
        assert type(got) is type(expected)
        torch.testing.assert_close(
            got.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor)
        )
