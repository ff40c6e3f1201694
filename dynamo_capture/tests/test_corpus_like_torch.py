"""Programs in the style of torch.compile's behaviour tests (grad-mode blocks under
either outer mode, breaks inside torch's and user context managers, automatic dynamic
over a sequence of calls): ember's graph and op counts equal torch.compile's and its
results eager's (torchcheck.check_like_torch)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torchcheck import check_like_torch


def _pair():
    return torch.randn(3, 4), torch.randn(3, 4)


def _one():
    return (torch.rand(2, 3),)


# ----- grad-mode blocks whose switch may change nothing under the outer mode --------
def no_grad_block(a, b):
    x = a * 2
    with torch.no_grad():
        x = x - b
    return x.exp()


def set_grad_false_block(a, b):
    x = a.sin()
    with torch.set_grad_enabled(False):
        x = x * b
    return x + 3


def enable_grad_block(a, b):
    x = a + 2
    with torch.enable_grad():
        x = x / (b.abs() + 1)
    return x - 1


def set_grad_true_block_reads_mode(a, b):
    x = a - 1
    with torch.set_grad_enabled(True):
        if torch.is_grad_enabled():
            x = x * b
    return x.cos()


GRAD_BLOCKS = [
    no_grad_block,
    set_grad_false_block,
    enable_grad_block,
    set_grad_true_block_reads_mode,
]


@pytest.mark.parametrize("outer", [torch.no_grad, torch.enable_grad], ids=["no_grad", "grad"])
@pytest.mark.parametrize("fn", GRAD_BLOCKS, ids=[fn.__name__ for fn in GRAD_BLOCKS])
def test_grad_mode_block_under_outer_mode_like_torch(fn, outer):
    with outer():
        check_like_torch(fn, _pair)


# ----- breaks around grad-mode state -----------------------------------------------
def grad_mode_set_by_call_around_break(a, b):
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    a = a * 3
    a.tolist()
    out = a - b
    torch.set_grad_enabled(before)
    return out


def nested_grad_blocks_with_breaks(x):
    with torch.set_grad_enabled(False):
        torch._dynamo.graph_break()
        with torch.set_grad_enabled(True):
            x = torch.mul(x, 3)
            torch._dynamo.graph_break()
            x = torch.sqrt(x.abs())
    return x


def profiler_blocks_around_break(x):
    y = x**2
    with torch.profiler.profile():
        y = y + 2
        with torch.profiler.record_function("region"):
            z = y**3
            z.tolist()
            z = z + 1
    return z


def autocast_block_with_break(x):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        x = torch.mm(x, x)
        torch._dynamo.graph_break()
        x = torch.relu(x)
    return x


def _no_grad_helper_breaks(z):
    with torch.no_grad():
        torch._dynamo.graph_break()
        return torch.sin(z)


def break_in_no_grad_callee(x, y, z):
    a = torch.mm(x, y)
    _no_grad_helper_breaks(z)
    return a


BREAK_PROGRAMS = {
    "grad_mode_set_by_call_around_break": (grad_mode_set_by_call_around_break, _pair),
    "nested_grad_blocks_with_breaks": (nested_grad_blocks_with_breaks, lambda: (torch.rand(3, 4),)),
    "profiler_blocks_around_break": (
        profiler_blocks_around_break,
        lambda: (torch.randn(2, 2, requires_grad=True),),
    ),
    "autocast_block_with_break": (autocast_block_with_break, lambda: (torch.rand(4, 4),)),
    "break_in_no_grad_callee": (
        break_in_no_grad_callee,
        lambda: (torch.randn(4, 4, requires_grad=True), torch.randn(4, 4), torch.randn(4)),
    ),
}


@pytest.mark.parametrize("name", list(BREAK_PROGRAMS))
def test_break_around_grad_state_like_torch(name):
    fn, make_args = BREAK_PROGRAMS[name]
    check_like_torch(fn, make_args, calls=3)


# ----- user context managers -------------------------------------------------------
class GradSwitch:
    def __init__(self, mode):
        self.prev = torch.is_grad_enabled()
        self.mode = mode

    def __enter__(self):
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.prev)


@contextlib.contextmanager
def grad_switch(mode):
    prev = torch.is_grad_enabled()
    try:
        yield torch._C._set_grad_enabled(mode)
    finally:
        torch._C._set_grad_enabled(prev)


def user_switch_block(x):
    with GradSwitch(True):
        x = x + 1
        if torch.is_grad_enabled():
            x = x * 2
        x = torch.relu(x)
    return x - 1


def generator_switch_block(x):
    with grad_switch(True):
        x = x * 3
        if torch.is_grad_enabled():
            x = x + 2
        x = x.tanh()
    return x + 1


def nested_user_switches(x):
    with GradSwitch(True):
        x = x + 1
        with GradSwitch(False):
            if torch.is_grad_enabled():
                x = x - 3
            x = x * 1.5
        x = torch.relu(x)
    return x - 1


def generator_switch_with_break(x):
    with grad_switch(True):
        x = x + 1
        torch._dynamo.graph_break()
        x = torch.relu(x)
    return x - 1


USER_CONTEXTS = [user_switch_block, generator_switch_block, nested_user_switches]


@pytest.mark.parametrize("outer", [torch.no_grad, torch.enable_grad], ids=["no_grad", "grad"])
@pytest.mark.parametrize("fn", USER_CONTEXTS, ids=[fn.__name__ for fn in USER_CONTEXTS])
def test_user_context_manager_like_torch(fn, outer):
    with outer():
        check_like_torch(fn, _one)


def test_generator_context_with_break_runs_eagerly_like_torch():
    check_like_torch(generator_switch_with_break, _one)


# ----- automatic dynamic over a sequence of calls ----------------------------------
def _product(x, y):
    return x * y


def _branch_on_flag(flag, y):
    if flag:
        return y * 2
    return y * y


def test_sizes_become_dynamic_after_one_change_like_torch():
    sizes = iter([2, 3, 4, 4, 5, 5, 6] * 2)

    def make():
        n = next(sizes)
        return torch.randn(n), torch.randn(n)

    counter = check_like_torch(_product, make, calls=7)
    assert counter.frame_count == 2


def test_flag_and_size_changes_like_torch():
    calls = iter([(True, 2), (False, 2), (True, 3), (True, 4), (True, 5)] * 2)

    def make():
        flag, n = next(calls)
        return flag, torch.randn(n)

    check_like_torch(_branch_on_flag, make, calls=5)


def _scale(x, n):
    return x * n + n


def test_int_argument_becomes_dynamic_like_torch():
    values = iter(list(range(2, 7)) * 2)
    check_like_torch(_scale, lambda: (torch.ones(3), next(values)), calls=5)


def _addcdiv_with_value(x, y):
    return torch.addcdiv(x, x, y.abs() + 1, value=0.5), torch.addcdiv(x, x, y, value=2)


def test_addcdiv_with_value_records_torchs_ops():
    check_like_torch(_addcdiv_with_value, _pair)


def test_addcdiv_of_integer_tensors_raises_eagers_error():
    # torch.compile divides integer tensors here; eager (and ember) raise
    import dynamo_capture
    from dynamo_capture.testing import eager_backend

    # the first addcdiv is a graph before the second, which runs eagerly and raises
    compiled = dynamo_capture.optimize(_addcdiv_with_value, backend=eager_backend)
    with pytest.raises(RuntimeError, match="Integer division with addcdiv"):
        compiled(torch.arange(4), torch.arange(4) + 1)


def _unwrap_optional(x):
    return torch.jit._unwrap_optional(x) + 1


def test_unwrap_optional_is_inlined_like_torch():
    check_like_torch(_unwrap_optional, _one)


def _tensor_in_list_by_identity(x):
    y = x + 1
    if x in [x, y]:
        return y * 2
    return y


def test_a_tensor_in_a_list_holding_it_compares_by_identity():
    # torch.compile compares the items with ==, which eager does not do: eager alone
    import dynamo_capture
    from dynamo_capture.testing import CountingBackend

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(_tensor_in_list_by_identity, backend=backend)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), _tensor_in_list_by_identity(x))
    assert backend.frame_count == 1 and backend.op_count == 2
