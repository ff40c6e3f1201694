"""Random draws and torch's global state in frames compiled by backends that trace the
graph (aot_eager, inductor): each call, under its own seed, gives eager's values and
gradients, and leaves the random stream where eager leaves it (the next eager draw after
the call, and after its backward pass, is eager's)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember


@pytest.fixture(autouse=True)
def _deterministic_off():
    yield
    torch.use_deterministic_algorithms(False)


def _flat(value):
    if isinstance(value, list | tuple):
        return [item for element in value for item in _flat(element)]
    return [value]


def _run(fn, x, seed):
    torch.manual_seed(seed)
    x = x.detach().clone().requires_grad_(x.requires_grad)
    result = _flat(fn(x))
    after_call = torch.rand(3)
    grads = []
    needing = [t for t in result if isinstance(t, torch.Tensor) and t.requires_grad]
    if needing:
        torch.manual_seed(seed + 100)
        sum(t.float().sum() for t in needing).backward()
        grads = [x.grad, torch.rand(3)]
    state = (torch.are_deterministic_algorithms_enabled(),)
    torch.use_deterministic_algorithms(False)
    return result, after_call, grads, state


def _assert_like_eager(fn, x, backend):
    compiled = ember.compile(fn, backend=backend)
    for seed in (0, 1, 2):
        expected = _run(fn, x, seed)
        got = _run(compiled, x, seed)
        torch.testing.assert_close(got, expected, equal_nan=True)


def rng_state_returned(x):
    state = torch.get_rng_state()
    return x + torch.rand(4, 4), state


def rng_state_restored(x):
    state = torch.get_rng_state()
    a = torch.rand(4, 4)
    torch.set_rng_state(state)
    return x + a - torch.rand(4, 4)


def initial_seed_added(x):
    return x + torch.initial_seed()


def native_dropout_and_mask(x):
    y, mask = torch.native_dropout(x, 0.5, True)
    return y, mask


def dropout_twice(x):
    return F.dropout(F.dropout(x, 0.5).sin(), 0.3)


def noise_scaled(x):
    return (x * torch.rand(4, 4)).exp() + torch.randn_like(x)


def seed_set_in_frame(x):
    torch.manual_seed(7)
    return F.dropout(x, 0.5) + torch.rand(4, 4)


def random_from_to(x):
    return x.detach().clone().random_(0, 5) + x


def deterministic_around_index_add(x):
    torch.use_deterministic_algorithms(True)
    y = torch.zeros(4, 4).index_add_(0, torch.tensor([0, 0, 1, 1]), x)
    torch.use_deterministic_algorithms(False)
    return y


def deterministic_left_on(x):
    torch.use_deterministic_algorithms(True)
    return x * 2


PROGRAMS = [
    rng_state_returned, rng_state_restored, initial_seed_added, native_dropout_and_mask,
    dropout_twice, noise_scaled, seed_set_in_frame, random_from_to,
    deterministic_around_index_add, deterministic_left_on,
]  # fmt: skip


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_random_stream_and_state_like_eager(fn, backend):
    _assert_like_eager(fn, torch.randn(4, 4, requires_grad=True), backend)
    _assert_like_eager(fn, torch.randn(4, 4), backend)


def test_rng_state_read_in_frame_follows_the_seed():
    compiled = ember.compile(rng_state_returned, backend="aot_eager")
    for seed in (0, 1):
        torch.manual_seed(seed)
        expected = torch.get_rng_state()
        torch.manual_seed(seed)
        torch.testing.assert_close(compiled(torch.zeros(4, 4))[1], expected)


def test_out_call_returns_its_out_tensor():
    def fn(a, c):
        return torch.add(a, 1, out=c) is c, c * 2

    for backend in ("aot_eager", "inductor"):
        got = ember.compile(fn, backend=backend)(torch.ones(4), torch.empty(4))
        assert got[0] is True
        torch.testing.assert_close(got[1], torch.full((4,), 4.0))
