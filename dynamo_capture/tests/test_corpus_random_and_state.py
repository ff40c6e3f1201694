"""Random draws, generator state, grad modes, `out=` calls and in-place writes to views
of inputs inside a compiled frame: ember's results equal eager's and its graph and op
counts equal torch.compile's (torchcheck.check_like_torch).

    random ops drawn in the graph, under a seed set before the call or in the frame
    torch.get_rng_state / torch.initial_seed run eagerly (a break at the call); a traced
        graph would keep what they read while compiling; torch.random.fork_rng is not
        traced (its `with` runs eagerly)
    Tensor.random_ and uniform_(from=...) run eagerly: their ATen overload is named
        `from`, which a graph's code cannot spell
    out= calls give back the very out tensor; one resizing its out tensor or writing a
        non-contiguous one runs eagerly
    torch.use_deterministic_algorithms in the frame is a graph node, its mode read later
        in the frame and left after it as eagerly
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchcheck import check_like_torch


def r(*shape, grad=False):
    return torch.randn(*shape, requires_grad=grad)


@pytest.fixture(autouse=True)
def _deterministic_off():
    yield
    torch.use_deterministic_algorithms(False)


# ----- random draws -------------------------------------------------------------------
def rand_added(x):
    return x + torch.rand(4, 4)


def randn_like_scaled(x):
    return x * torch.randn_like(x)


def randint_and_randperm(x):
    return x + torch.randint(0, 10, (4, 4)), x[torch.randperm(4)]


def bernoulli_of_probabilities(x):
    return torch.bernoulli(x.sigmoid())


def normal_and_uniform_in_place(x):
    return x.clone().normal_(), x.clone().uniform_(-1, 1)


def dropout_in_training(x):
    return F.dropout(x * 2, 0.3) * x


def seed_set_in_frame(x):
    torch.manual_seed(3)
    return x + torch.rand(4, 4)


def seed_set_between_draws(x):
    a = torch.rand(2)
    torch.manual_seed(5)
    return x + a.sum() + torch.rand(4, 4)


def draws_around_break(x):
    a = torch.rand(4, 4)
    print("", end="")
    return x + a + torch.rand(4, 4)


def rng_state_read(x):
    state = torch.get_rng_state()
    return x + torch.rand(4, 4), state


def rng_state_saved_and_restored(x):
    state = torch.get_rng_state()
    a = torch.rand(4, 4)
    torch.set_rng_state(state)
    return x + a - torch.rand(4, 4)


def fork_rng_block(x):
    with torch.random.fork_rng():
        a = torch.rand(4, 4)
    return x + a + torch.rand(4, 4)


def fork_rng_not_enabled(x):
    with torch.random.fork_rng(enabled=False):
        a = torch.rand(4)
    return a + 1, x * 2


def initial_seed_added(x):
    return x + torch.initial_seed()


def random_from_to(x):
    return x.clone().random_(0, 5) + 1


def random_to(x):
    return x.clone().random_(5) * x


def random_full_range_in_middle(x):
    a = x.sin()
    b = torch.empty(3).random_()
    return a + 1, b.sum() * 0


RANDOM = [
    rand_added, randn_like_scaled, randint_and_randperm, bernoulli_of_probabilities,
    normal_and_uniform_in_place, dropout_in_training, seed_set_in_frame,
    seed_set_between_draws, draws_around_break, rng_state_read, rng_state_saved_and_restored,
    fork_rng_block, fork_rng_not_enabled, initial_seed_added, random_from_to, random_to,
    random_full_range_in_middle,
]  # fmt: skip


@pytest.mark.parametrize("fn", RANDOM, ids=lambda f: f.__name__)
def test_random_draws_like_torch(fn):
    check_like_torch(fn, lambda: (r(4, 4),))


# ----- out= ---------------------------------------------------------------------------
def out_is_returned(a, b, c):
    result = torch.add(a, b, out=c)
    return result is c, c * 2


def out_tuple_is_returned(a, b, c):
    values, indices = torch.empty(4), torch.empty(4, dtype=torch.long)
    result = torch.max(a, 1, out=(values, indices))
    return result[0] is values, result.indices is indices, values + 1, indices


def out_made_and_resized(a, b, c):
    made = torch.empty(0)
    result = torch.mul(a, b, out=made)
    return made, result is made


def out_not_contiguous(a, b, c):
    torch.sin(a, out=c.t())
    return c + b


def out_resized_after_work(a, b, c):
    y = a * 2
    torch.exp(a, out=c[:2])
    return y + c


def out_written_in_place_after(a, b, c):
    result = torch.cos(a, out=c)
    result.add_(1)
    return c


OUTS = [
    out_is_returned, out_tuple_is_returned, out_made_and_resized, out_not_contiguous,
    out_resized_after_work, out_written_in_place_after,
]  # fmt: skip


@pytest.mark.parametrize("fn", OUTS, ids=lambda f: f.__name__)
def test_out_arguments_like_torch(fn):
    check_like_torch(fn, lambda: (r(4, 4), r(4, 4), torch.empty(4, 4)))


def resize_into_input(a, b, c):
    torch.add(a, b, out=c)
    return c + 1


def test_out_input_resized_runs_eagerly():
    check_like_torch(resize_into_input, lambda: (r(4), r(4), torch.empty(0)))


# ----- deterministic mode -------------------------------------------------------------
def deterministic_switched_around_op(x):
    torch.use_deterministic_algorithms(True)
    y = x + 1
    torch.use_deterministic_algorithms(False)
    return y


def deterministic_read_after_set(x):
    torch.use_deterministic_algorithms(True)
    on = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    return x + int(on), torch.are_deterministic_algorithms_enabled()


def deterministic_branch_after_set(x):
    torch.use_deterministic_algorithms(True)
    y = x + 1 if torch.are_deterministic_algorithms_enabled() else x - 1
    torch.use_deterministic_algorithms(False)
    return y


def deterministic_across_break(x):
    torch.use_deterministic_algorithms(True)
    y = x + 1
    print("", end="")
    z = y * int(torch.are_deterministic_algorithms_enabled())
    torch.use_deterministic_algorithms(False)
    return z


def deterministic_left_on(x):
    torch.use_deterministic_algorithms(True, warn_only=True)
    return x * 2, torch.is_deterministic_algorithms_warn_only_enabled()


DETERMINISTIC = [
    deterministic_switched_around_op, deterministic_read_after_set,
    deterministic_branch_after_set, deterministic_across_break, deterministic_left_on,
]  # fmt: skip


@pytest.mark.parametrize("fn", DETERMINISTIC, ids=lambda f: f.__name__)
def test_deterministic_mode_set_in_frame_like_torch(fn):
    check_like_torch(fn, lambda: (r(4, 4),))


def test_deterministic_mode_left_by_frame_is_eagers():
    import dynamo_capture
    from dynamo_capture.testing import CountingBackend

    compiled = dynamo_capture.optimize(deterministic_left_on, backend=CountingBackend())
    compiled(r(4, 4))
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()


# ----- grad modes and views of inputs written in place --------------------------------
def no_grad_block_result(x):
    with torch.no_grad():
        y = x * 2
    return x * y, y.requires_grad


def set_grad_enabled_switches(x):
    torch.set_grad_enabled(False)
    y = x * 2
    torch.set_grad_enabled(True)
    return y, x * 3


def inference_mode_block(x):
    with torch.inference_mode():
        y = x * 2
    return x + 1, y


def grad_mode_branch_in_no_grad(x):
    with torch.no_grad():
        y = x * 2 if torch.is_grad_enabled() else x * 3
    return y + x


def detach_and_data(x):
    return x.detach().detach() * x, x.data * 2, x.detach().requires_grad


GRAD_MODES = [
    no_grad_block_result, set_grad_enabled_switches, inference_mode_block,
    grad_mode_branch_in_no_grad, detach_and_data,
]  # fmt: skip


@pytest.mark.parametrize("fn", GRAD_MODES, ids=lambda f: f.__name__)
def test_grad_modes_in_frame_like_torch(fn):
    check_like_torch(fn, lambda: (r(4, 4, grad=True),))


def row_added_in_place(x):
    x[0].add_(1)
    return x * 2


def diagonal_zeroed(x):
    x.diagonal().zero_()
    return x.sum()


def transposed_row_scaled(x):
    x.t()[1].mul_(3)
    return x


def unbound_row_zeroed(x):
    a, b, c, d = x.unbind(0)
    b.mul_(0)
    return x


def two_views_written(x):
    a, b = x[0], x[:, 0]
    a.add_(1)
    b.add_(1)
    return x, a, b


def view_read_after_base_written(x):
    v = x[0]
    x.add_(1)
    return v * 1


VIEW_WRITES = [
    row_added_in_place, diagonal_zeroed, transposed_row_scaled, unbound_row_zeroed,
    two_views_written, view_read_after_base_written,
]  # fmt: skip


@pytest.mark.parametrize("fn", VIEW_WRITES, ids=lambda f: f.__name__)
def test_views_of_inputs_written_like_torch(fn):
    check_like_torch(fn, lambda: (r(4, 4),))
