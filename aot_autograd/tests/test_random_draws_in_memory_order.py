"""A random in-place op on a non-contiguous tensor draws in that tensor's memory order.

`t.bernoulli_(p)` fills `t` in its memory order; its functional form `bernoulli(t, p)`
allocates a contiguous tensor and fills that, so a transposed or channels-last `t`
(`F.dropout`'s `empty_like(x)` mask) got the same numbers at other elements than eager,
a wrong mask from the same random state (found by the fuzzer's `guards` profile,
tools/fuzz). The tracer draws on `t` permuted to its memory order and permutes back.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from aot_autograd import aot_function
from aot_autograd.mutations import memory_order


def _identity_compiler(gm, example_inputs):
    return gm


LAYOUTS = {
    "transposed": lambda: torch.ones(4, 6).t(),
    "channels_last": lambda: torch.ones(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
    "permuted_3d": lambda: torch.ones(3, 4, 5).permute(2, 0, 1),
    "contiguous": lambda: torch.ones(4, 6),
    "sliced": lambda: torch.ones(4, 12)[:, ::2],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_dropout_mask_of_a_strided_input_is_eagers(layout, requires_grad):
    def f(x):
        return F.dropout(x * 1.5, 0.5, training=True)

    x = LAYOUTS[layout]().requires_grad_(requires_grad)
    compiled = aot_function(f, fw_compiler=_identity_compiler, bw_compiler=_identity_compiler)
    torch.manual_seed(0)
    want = f(x)
    torch.manual_seed(0)
    got = compiled(x)
    assert torch.equal(want, got)
    assert want.stride() == got.stride()
    if requires_grad:
        (want_grad,) = torch.autograd.grad(want.sum(), x)
        (got_grad,) = torch.autograd.grad(got.sum(), x)
        assert torch.equal(want_grad, got_grad)


def test_bernoulli_in_place_on_a_transposed_tensor_is_eagers():
    def f(x):
        noise = torch.empty_like(x.t())
        noise.bernoulli_(0.3)
        return x.t() * noise

    x = torch.randn(5, 7)
    compiled = aot_function(f, fw_compiler=_identity_compiler)
    torch.manual_seed(3)
    want = f(x)
    torch.manual_seed(3)
    assert torch.equal(want, compiled(x))


def test_memory_order_of_dense_and_other_layouts():
    assert memory_order(torch.ones(4, 6)) == [0, 1]
    assert memory_order(torch.ones(4, 6).t()) == [1, 0]
    assert memory_order(torch.ones(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)) == [
        0, 2, 3, 1,
    ]  # fmt: skip
    assert memory_order(torch.ones(4, 12)[:, ::2]) is None  # not dense
    assert memory_order(torch.ones(1, 6).expand(4, 6)) is None  # overlapping
