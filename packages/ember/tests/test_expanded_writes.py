"""In-place writes into tensors whose elements share memory (`expand`) never write wrong values.

Eager refuses most in-place ops on such a tensor ("unsupported operation: more than one
element of the written-to tensor refers to a single memory location"); a functional
graph sees separate elements and would write each. Compiled code must raise a
RuntimeError then, and leave the caller's tensor as eager leaves it.

Footguns, worst first:
| a write through an expanded input or view lands  | add_, mul_, copy_, sub_ into an
| in the wrong elements (silent wrong result)       | expanded input or in-frame expand
| eager's refusal lost                              | -> RuntimeError, input untouched
| a write eager allows (fill_, zero_) refused       | RuntimeError with a clear message
"""

from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ["aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield
    ember.reset()


INPUT_WRITES = {
    "add_": lambda x: x.add_(1),
    "mul_then_use": lambda x: x.mul_(2) + 1,
    "copy_": lambda x: x.copy_(torch.ones(3, 4)),
    "sub_tensor": lambda x: x.sub_(torch.arange(4.0)),
    "clamp_": lambda x: x.clamp_(0, 0.1),
    "row_add_": lambda x: x[0].add_(1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(INPUT_WRITES))
def test_in_place_write_into_expanded_input_raises_like_eager(backend, case):
    fn = INPUT_WRITES[case]
    with pytest.raises(RuntimeError, match="single memory location"):
        fn(torch.randn(3, 1).expand(3, 4))
    base = torch.randn(3, 1)
    before = base.clone()
    with pytest.raises(RuntimeError, match="share memory|single memory location"):
        ember.compile(fn, backend=backend)(base.expand(3, 4))
    torch.testing.assert_close(base, before)  # nothing written


FRAME_WRITES = {
    "mul_": lambda a: a.expand(3, 4).mul_(2),
    "add_then_return_base": lambda a: (a.expand(3, 4).add_(1), a),
    "intermediate": lambda a: (a * 1).expand(3, 4).add_(1),
    "unsqueeze_expand": lambda a: a.unsqueeze(0).expand(2, 3, 1).mul_(2),
    "broadcast_to": lambda a: torch.broadcast_to(a, (3, 4)).sub_(1),
    "copy_": lambda a: a.expand(3, 4).copy_(torch.ones(3, 4)),
    "as_strided": lambda a: a.as_strided((3, 4), (1, 0)).add_(1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(FRAME_WRITES))
def test_in_place_write_into_expand_in_the_frame_raises_like_eager(backend, case):
    fn = FRAME_WRITES[case]
    with pytest.raises(RuntimeError, match="single memory location"):
        fn(torch.randn(3, 1))
    a = torch.randn(3, 1)
    before = a.clone()
    with pytest.raises(RuntimeError, match="share memory|single memory location"):
        ember.compile(fn, backend=backend)(a)
    torch.testing.assert_close(a, before)


ALLOWED_WRITES = {
    "fill_": lambda x: x.fill_(2.0),
    "zero_": lambda x: x.zero_(),
    "column_add_": lambda x: (x[:, 0].add_(1), x[:, 1] * 1)[1],
    "masked_fill_": lambda x: x.masked_fill_(torch.ones(3, 4, dtype=torch.bool), 1.0),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(ALLOWED_WRITES))
def test_write_eager_allows_into_expanded_input_matches_eager_or_raises(backend, case):
    """Writes eager performs on an expanded tensor (one value per memory location):
    compiled code gives eager's values or refuses with a RuntimeError, never others."""
    fn = ALLOWED_WRITES[case]
    base = torch.randn(3, 1)
    compiled_base = base.clone()
    expected = fn(base.expand(3, 4))
    try:
        out = ember.compile(fn, backend=backend)(compiled_base.expand(3, 4))
    except RuntimeError:
        return
    torch.testing.assert_close(compiled_base, base)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_of_no_elements_into_expanded_input_runs_like_eager(backend):
    """An empty slice of an expanded input written in place: eager writes nothing."""

    def fn(x):
        x.narrow(1, 0, 0).add_(1)
        y = x.clamp(min=-1, max=2)
        y.div_(y)
        return y, x

    base = torch.randn(1, 1)
    expected = fn(base.expand(4, 1))
    compiled_base = base.clone()
    actual = ember.compile(fn, backend=backend)(compiled_base.expand(4, 1))
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(compiled_base, base)
