"""Context managers capture knows: contextlib.contextmanager generators, nullcontext,
profiler ranges (ignored), set_grad_enabled called as a function; the mode after the
call is the eager one."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture

LOG: list = []


def _one():
    return (torch.randn(4, requires_grad=True),)


@contextlib.contextmanager
def scaled(factor=2):
    yield factor


@contextlib.contextmanager
def without_grad():
    with torch.no_grad():
        yield


@contextlib.contextmanager
def logged(t):
    shifted = t + 1
    try:
        yield shifted
    finally:
        LOG.append("left")


def generator_context_value(x):
    with scaled(3) as k:
        y = x * k
    return y


def generator_context_grad_mode(x):
    with without_grad():
        y = x * 2
    return y, torch.is_grad_enabled()


def generator_context_setup_and_finally(x):
    with logged(x) as t:
        y = t * 3
    return y


def generator_contexts_nested(x):
    with scaled() as a, without_grad():
        y = x * a
    return y


def nullcontext_value(x):
    with contextlib.nullcontext(4) as k:
        return x * k


def nullcontext_across_break(x):
    with contextlib.nullcontext():
        y = x + 1
        print("inside")
    return y * 2


def record_function_ignored(x):
    with torch.profiler.record_function("region"):
        y = x * 2
    return y + 1


def record_function_across_break(x):
    with torch.profiler.record_function("region"):
        y = x * 2
        print("inside")
        z = y + 1
    return z


def set_grad_enabled_as_function(x):
    torch.set_grad_enabled(False)
    y = x * 2
    torch.set_grad_enabled(True)
    return y


PROGRAMS = [
    generator_context_value,
    generator_context_grad_mode,
    generator_context_setup_and_finally,
    generator_contexts_nested,
    nullcontext_value,
    nullcontext_across_break,
    record_function_ignored,
    record_function_across_break,
    set_grad_enabled_as_function,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_context_manager_matches_eager_and_torch_counts(fn):
    LOG.clear()
    check_like_torch(fn, _one)
    assert torch.is_grad_enabled()


def test_generator_context_runs_its_exit_after_the_body():
    LOG.clear()
    compiled = dynamo_capture.optimize(
        generator_context_setup_and_finally, backend=lambda gm, ex: gm.forward, fullgraph=True
    )
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), (x + 1) * 3)
    assert LOG == ["left"]


def test_generator_context_keeps_no_grad_over_the_body():
    compiled = dynamo_capture.optimize(
        generator_context_grad_mode, backend=lambda gm, ex: gm.forward, fullgraph=True
    )
    y, enabled = compiled(torch.randn(3, requires_grad=True))
    assert not y.requires_grad and enabled and torch.is_grad_enabled()


def test_set_grad_enabled_as_function_keeps_requires_grad_off():
    compiled = dynamo_capture.optimize(
        set_grad_enabled_as_function, backend=lambda gm, ex: gm.forward, fullgraph=True
    )
    assert not compiled(torch.randn(3, requires_grad=True)).requires_grad
    assert torch.is_grad_enabled()


def test_generator_context_that_yields_twice_is_a_clear_break():
    @contextlib.contextmanager
    def twice():
        yield 1
        yield 2

    def use(x):
        with twice() as k:
            return x * k

    compiled = dynamo_capture.optimize(use, backend=lambda gm, ex: gm.forward, fullgraph=True)
    with pytest.raises(dynamo_capture.Unsupported, match="yielded twice"):
        compiled(torch.randn(2))


def nested_grad_modes(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
        z = x * 3
    return y, z


def nested_grad_modes_across_break(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
            print("inside")
            z = y * 3
    return z


@pytest.mark.parametrize("fn", [nested_grad_modes, nested_grad_modes_across_break])
def test_grad_mode_switches_that_change_nothing_are_dropped_like_torch(fn):
    check_like_torch(fn, _one)


@without_grad()
def _doubled_without_grad(t):
    return t * 2


@scaled()
def _tripled(t):
    return t * 3


def generator_context_as_decorator(x):
    return _doubled_without_grad(x) + _tripled(x), torch.is_grad_enabled()


def test_generator_context_as_decorator_like_torch():
    check_like_torch(generator_context_as_decorator, _one)


def test_generator_context_as_decorator_runs_body_inside():
    compiled = dynamo_capture.optimize(
        _doubled_without_grad, backend=lambda gm, ex: gm.forward, fullgraph=True
    )
    assert not compiled(torch.randn(3, requires_grad=True)).requires_grad
    assert torch.is_grad_enabled()


def graph_break_inside_set_grad_enabled(x):
    with torch.set_grad_enabled(False):
        y = x * 2
        torch._dynamo.graph_break()
        y = y * 2
    return y + x, torch.is_grad_enabled()


def graph_break_inside_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.mm(x.view(2, 2), x.view(2, 2))
        torch._dynamo.graph_break()
        z = torch.mm(y, y)
    return z, torch.is_autocast_enabled("cpu")


def graph_break_inside_nested_grad_modes(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
            torch._dynamo.graph_break()
            y = y + 1
        z = y * 2
    return z


@pytest.mark.parametrize(
    "fn",
    [
        graph_break_inside_set_grad_enabled,
        graph_break_inside_autocast,
        graph_break_inside_nested_grad_modes,
    ],
)
def test_torch_graph_break_call_breaks_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 2


@torch.enable_grad()
def _doubled_with_grad(t):
    return t * 2


def enable_grad_decorator_inside_no_grad(x):
    with torch.no_grad():
        y = _doubled_with_grad(x)
    return y


def set_grad_enabled_private_switch(x):
    torch._C._set_grad_enabled(False)
    y = x * 2
    torch._C._set_grad_enabled(True)
    return y


@pytest.mark.parametrize(
    "fn", [enable_grad_decorator_inside_no_grad, set_grad_enabled_private_switch]
)
def test_grad_mode_switched_by_inlined_enter_is_in_the_graph(fn):
    check_like_torch(fn, _one)
    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)
    x = torch.randn(4, requires_grad=True)
    assert compiled(x).requires_grad == fn(x).requires_grad


class Counted:
    def __init__(self):
        self.entered = 0
        self.exited = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        self.exited += 1
        return False


def user_context_state_after_the_block(x):
    counted = Counted()
    with counted:
        y = x * 2
    return y, counted.entered, counted.exited


def graph_break_inside_user_context(x):
    counted = Counted()
    with counted:
        y = x * 2
        torch._dynamo.graph_break()
        y = y + 1
    return y * 3, counted.exited


def graph_break_inside_generator_context(x):
    with scaled(2) as k:
        y = x * k
        torch._dynamo.graph_break()
        y = y + 1
    return y


def graph_break_inside_no_grad_inside_try(x):
    y = x * 2
    try:
        with torch.no_grad():
            y = y + 1
            torch._dynamo.graph_break()
            y = y * 2
    finally:
        LOG.append("finally")
    return y


@pytest.mark.parametrize(
    "fn",
    [
        user_context_state_after_the_block,
        graph_break_inside_user_context,
        graph_break_inside_generator_context,
        graph_break_inside_no_grad_inside_try,
    ],
)
def test_break_in_a_block_capture_cannot_reenter_runs_the_frame_eagerly_like_torch(fn):
    check_like_torch(fn, _one)


def inference_mode_block(x):
    with torch.inference_mode():
        y = x * 2
    return y + 1


def inference_mode_off_block(x):
    with torch.inference_mode(False):
        y = x * 2
    return y + 1


def graph_break_inside_inference_mode(x):
    with torch.inference_mode():
        y = x * 2
        torch._dynamo.graph_break()
        y = y + 1
    return y


def no_grad_inside_inference_mode(x):
    with torch.inference_mode():
        with torch.no_grad():
            y = x * 2
    return y + 1, torch.is_grad_enabled()


@torch.inference_mode()
def _doubled_in_inference(t):
    return t * 2


def inference_mode_decorator(x):
    return _doubled_in_inference(x) + 1


def decorators_applied_in_the_frame(x):
    @torch.inference_mode()
    def doubled(t):
        return t * 2

    @torch.no_grad()
    def tripled(t):
        return t * 3

    return doubled(x) + 1, tripled(x)


def generator_context_made_in_the_frame(x):
    @contextlib.contextmanager
    def swallowing():
        try:
            yield 3
        except ValueError:
            pass

    with swallowing() as k:
        x = x * k
        raise ValueError("swallowed")
    return x * 2


def inference_mode_queried_inside(x):
    with torch.inference_mode():
        y = x * 2
        inside = torch.is_inference_mode_enabled()
    return y, inside, torch.is_inference_mode_enabled()


INFERENCE = [
    inference_mode_queried_inside,
    inference_mode_block,
    inference_mode_off_block,
    graph_break_inside_inference_mode,
    no_grad_inside_inference_mode,
    inference_mode_decorator,
    decorators_applied_in_the_frame,
    generator_context_made_in_the_frame,
]


@pytest.mark.parametrize("fn", INFERENCE, ids=[fn.__name__ for fn in INFERENCE])
def test_inference_mode_and_decorators_like_torch(fn):
    check_like_torch(fn, _one)
    assert not torch.is_inference_mode_enabled()


def sdpa_kernel_block(x):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = x.view(1, 1, 2, 2)
    with sdpa_kernel(SDPBackend.MATH):
        y = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    return y


def saved_tensors_hooks_disabled_block(x):
    with torch.autograd.graph.disable_saved_tensors_hooks("disabled here"):
        y = x * 2
    return y


def profiler_session_across_a_break(x):
    y = x**2
    with torch.profiler.profile():
        y = y + 2
        with torch.autograd.profiler.record_function("region"):
            z = y**3
            torch._dynamo.graph_break()
            z = z + 1
    return z


class SwitchesGrad:
    """A user context that sets the grad mode itself, through torch's private switch."""

    def __init__(self, mode):
        self.previous = torch.is_grad_enabled()
        self.mode = mode

    def __enter__(self):
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.previous)


def user_context_switching_grad_mode(x):
    x = x + 1
    with SwitchesGrad(False):
        y = x * 2
    return y + 1, y.requires_grad


TORCH_STATE = [
    sdpa_kernel_block,
    saved_tensors_hooks_disabled_block,
    profiler_session_across_a_break,
    user_context_switching_grad_mode,
]


@pytest.mark.parametrize("fn", TORCH_STATE, ids=[fn.__name__ for fn in TORCH_STATE])
def test_torch_state_contexts_recorded_in_the_graph_like_torch(fn):
    check_like_torch(fn, _one)


def test_sdpa_kernel_state_is_set_in_the_graph_not_while_capturing():
    from torch.nn.attention import _cur_sdpa_kernel_backends

    before = _cur_sdpa_kernel_backends()
    graphs = []
    compiled = dynamo_capture.optimize(
        sdpa_kernel_block, backend=lambda gm, ex: graphs.append(gm) or gm.forward
    )
    compiled(torch.randn(4))
    assert _cur_sdpa_kernel_backends() == before
    code = graphs[0].code
    assert code.count("_sdpa_kernel(") == 2
