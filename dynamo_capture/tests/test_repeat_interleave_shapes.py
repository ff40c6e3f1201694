"""repeat_interleave's result shape: static with a number of repeats (GPT-J's rotary
embedding reads it), from data only with tensor repeats."""

from __future__ import annotations

import pytest
import torch

import dynamo_capture
from dynamo_capture import Unsupported


def rotary_like(x, sin):
    # GPT-J: sin[:, :, None, :] repeated along its last dim, then its shape read
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    return (x * sin).reshape(x.shape[0], -1) + sin.shape[-1]


def method_form(x):
    y = x.repeat_interleave(3, dim=0)
    return y.view(y.shape[0] // 3, -1).sum(1)


def tensor_repeats(x, repeats):
    y = torch.repeat_interleave(x, repeats)
    return y.new_zeros(y.shape[0])


@pytest.mark.parametrize(
    "fn, args",
    [
        (rotary_like, (torch.randn(2, 4, 3, 8), torch.randn(2, 4, 4))),
        (method_form, (torch.randn(4, 5),)),
    ],
    ids=["function", "method"],
)
def test_number_of_repeats_gives_a_static_shape(fn, args, backend):
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(*args), fn(*args))
    assert len(backend.graphs) == 1


def test_tensor_repeats_still_depend_on_data(backend):
    compiled = dynamo_capture.optimize(tensor_repeats, backend=backend, fullgraph=True)
    with pytest.raises(Unsupported, match="depends on (tensor )?data"):
        compiled(torch.randn(3), torch.tensor([1, 2, 3]))
