"""Context managers of every kind torch.compile meets, with and without a graph break
inside their block, in a callee, kept across a break, made outside the frame: ember's
graph and op counts equal torch.compile's, its results and the grad mode left after the
call eager's (torchcheck.check_like_torch).

    autocast objects from outside the frame (a global, an argument, a decorator's)
        entered by their settings, guarded by identity; torch.cpu.amp.autocast too
    a block whose graph holds only autocast enter/exit is still a graph
    set_grad_enabled / nullcontext made before a break and entered after it
    a user context manager's __enter__ / __exit__ compiled as frames of their own
        where the frame holding the `with` runs eagerly
    sdpa_kernel's block resumed after a break; DisableTorchFunction blocks
    contextlib.closing / redirect_stdout and torch.device: not traced, as there
"""

from __future__ import annotations

import contextlib
import io
import sys
import types

import pytest
import torch
import torch._dynamo
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, clone_inputs


def r(*shape, grad=False):
    return torch.randn(*shape, requires_grad=grad)


# ----- autocast ---------------------------------------------------------------------
BF16_AUTOCAST = torch.autocast("cpu", dtype=torch.bfloat16)


def _autocast_global_object(x):
    with BF16_AUTOCAST:
        y = torch.mm(x, x)
    return y, torch.mm(x, x)


def _autocast_argument_object(x, autocast):
    with autocast:
        y = torch.mm(x, x)
    return y


def _cpu_amp_autocast(x):
    with torch.cpu.amp.autocast(dtype=torch.bfloat16):
        y = torch.mm(x, x)
    return y, torch.is_autocast_enabled("cpu")


@torch.autocast("cpu", dtype=torch.bfloat16)
def _mm_in_autocast(a, b):
    return torch.mm(a, b)


def _autocast_decorated_callee(x):
    return _mm_in_autocast(x, x), torch.mm(x, x)


def _autocast_nested_with_breaks(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch._dynamo.graph_break()
        with torch.autocast("cpu", enabled=False):
            torch._dynamo.graph_break()
            a = torch.mm(x, x)
        b = torch.mm(x, x)
    return a, b, torch.mm(x, x)


def _mm_after_break(a):
    torch._dynamo.graph_break()
    return torch.mm(a, a)


def _autocast_block_calls_breaking_callee(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = _mm_after_break(x)
        b = torch.mm(x, x)
    return a, b


def _autocast_made_before_break(x):
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    x = x + 1
    torch._dynamo.graph_break()
    with autocast:
        y = torch.mm(x, x)
    return y


# ----- grad-mode contexts kept across a break -----------------------------------------
def _set_grad_enabled_made_before_break(x):
    x = x + 1
    switch = torch.set_grad_enabled(True)
    torch._dynamo.graph_break()
    with switch:
        x = x * 2
    return x, x.requires_grad


def _set_grad_disabled_made_before_break(x):
    x = x + 1
    switch = torch.set_grad_enabled(False)
    torch._dynamo.graph_break()
    with switch:
        y = x * 2
    return y, y.requires_grad, torch.is_grad_enabled()


def _passes_through(context):
    torch._dynamo.graph_break()
    return context


def _set_grad_enabled_returned_by_breaking_callee(x):
    x = x + 1
    switch = _passes_through(torch.set_grad_enabled(True))
    with switch:
        x = x + 1
    return x


def _nullcontext_made_before_break(x):
    x = x + 1
    context = contextlib.nullcontext()
    torch._dynamo.graph_break()
    with context:
        x = x + 1
    return x


def _nullcontext_argument(x, context):
    with context:
        return x.sin()


# ----- user context managers in a frame run eagerly ------------------------------------
class GradSwitch:
    def __init__(self, mode):
        self.prev = torch.is_grad_enabled()
        self.mode = mode

    def __enter__(self):
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.prev)


class BreakingGradSwitch(GradSwitch):
    def __enter__(self):
        torch._dynamo.graph_break()
        super().__enter__()


def _user_switch_with_break(x):
    with GradSwitch(True):
        x = x + 1
        if torch.is_grad_enabled():
            x = x * 2
        torch._dynamo.graph_break()
        x = torch.relu(x)
    return x - 1


def _nested_user_switches_with_break(x):
    with GradSwitch(True):
        x = x + 1
        with GradSwitch(False):
            if torch.is_grad_enabled():
                x = x - 3
            torch._dynamo.graph_break()
            x = x * 1.5
        x = torch.relu(x)
    return x - 1


def _user_switch_whose_enter_breaks(x):
    with BreakingGradSwitch(False):
        if torch.is_grad_enabled():
            z = x + 1000
        else:
            z = (x * 2).sin() + 3
    return z


class Swallowing:
    def __init__(self):
        self.seen = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        self.seen = exc_type
        return exc_type is ValueError


class Recording:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return 3

    def __exit__(self, *exc):
        self.log.append("exit")


def _swallowing_context_in_eager_frame(x):
    swallowing = Swallowing()
    with swallowing:
        y = x + 1
        print("break")
        raise ValueError(y.shape)
    return x * 2, swallowing.seen is ValueError


def _context_not_swallowing_in_eager_frame(x):
    with Swallowing():
        print("break")
        raise KeyError("kept")
    return x


def _user_context_in_loop_with_break(x):
    log = []
    for step in range(2):
        with Recording(log) as k:
            x = x * k
            print(step)
    return x, log


def _empty_user_switch_block(x):
    switch = GradSwitch(False)
    with switch:
        pass
    return switch.mode, x + 1


# ----- torch's other contexts --------------------------------------------------------
def _sdpa_kernel_with_break(x):
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
        x = x + 1
        torch._dynamo.graph_break()
        x = x + 1
    return x


def _attention_after_break(q):
    torch._dynamo.graph_break()
    return torch.nn.functional.scaled_dot_product_attention(q, q, q)


def _sdpa_kernel_block_calls_breaking_callee(q):
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        b = _attention_after_break(q)
        c = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    return a + b + c


def _mkldnn_flags_block(x):
    with torch.backends.mkldnn.flags(enabled=False):
        y = x * 2
    return y


def _disable_torch_function_block(x):
    y = x.sin()
    with torch._C.DisableTorchFunctionSubclass():
        y = y * 2
    with torch._C.DisableTorchFunction():
        y = y + 1
    return y.cos()


def _device_block_after_ops(x):
    y = x.sin().cos()
    with torch.device("cpu"):
        w = torch.ones(3)
    return y.sum() + w


def _device_block_first(x):
    with torch.device("cpu"):
        w = torch.ones(3)
    return x.sin().sum() + w


class Closable:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


def _closing_block(x):
    y = x.sin().cos()
    resource = Closable()
    with contextlib.closing(resource):
        w = y + 1
    return w.tan(), resource.closed


def _closing_in_callee(resource, x):
    with contextlib.closing(resource):
        return x + 1


def _closing_block_in_callee(x):
    return _closing_in_callee(Closable(), x) * 2


def _redirect_stdout_block(x):
    y = x.sin()
    with contextlib.redirect_stdout(sys.stderr):
        y = y + x.cos()
    return y.tan()


def _redirect_stdout_after_ops(x):
    y = x.sin().cos()
    with contextlib.redirect_stdout(io.StringIO()):
        print("hidden")
        w = y + 1
    return w.tan()


PROGRAMS = {
    "autocast_global_object": (_autocast_global_object, (r(4, 4),)),
    "cpu_amp_autocast": (_cpu_amp_autocast, (r(4, 4),)),
    "autocast_decorated_callee": (_autocast_decorated_callee, (r(4, 4),)),
    "autocast_nested_with_breaks": (_autocast_nested_with_breaks, (r(4, 4),)),
    "autocast_block_calls_breaking_callee": (_autocast_block_calls_breaking_callee, (r(4, 4),)),
    "autocast_made_before_break": (_autocast_made_before_break, (r(4, 4),)),
    "set_grad_enabled_made_before_break": (_set_grad_enabled_made_before_break, (r(3),)),
    "set_grad_disabled_made_before_break": (
        _set_grad_disabled_made_before_break,
        (r(3, grad=True),),
    ),
    "set_grad_enabled_returned_by_breaking_callee": (
        _set_grad_enabled_returned_by_breaking_callee,
        (r(3),),
    ),
    "nullcontext_made_before_break": (_nullcontext_made_before_break, (r(3),)),
    "user_switch_with_break": (_user_switch_with_break, (r(2, 3),)),
    "nested_user_switches_with_break": (_nested_user_switches_with_break, (r(2, 3),)),
    "user_switch_whose_enter_breaks": (_user_switch_whose_enter_breaks, (r(2, 3, grad=True),)),
    "empty_user_switch_block": (_empty_user_switch_block, (r(3),)),
    "swallowing_context_in_eager_frame": (_swallowing_context_in_eager_frame, (r(3),)),
    "context_not_swallowing_in_eager_frame": (_context_not_swallowing_in_eager_frame, (r(3),)),
    "user_context_in_loop_with_break": (_user_context_in_loop_with_break, (r(3),)),
    "sdpa_kernel_with_break": (_sdpa_kernel_with_break, (r(2, 2),)),
    "sdpa_kernel_block_calls_breaking_callee": (
        _sdpa_kernel_block_calls_breaking_callee,
        (r(2, 2, 2, 2),),
    ),
    "mkldnn_flags_block": (_mkldnn_flags_block, (r(3),)),
    "disable_torch_function_block": (_disable_torch_function_block, (r(3),)),
    "device_block_after_ops": (_device_block_after_ops, (r(3),)),
    "device_block_first": (_device_block_first, (r(3),)),
    "closing_block": (_closing_block, (r(3),)),
    "closing_block_in_callee": (_closing_block_in_callee, (r(3),)),
    "redirect_stdout_block": (_redirect_stdout_block, (r(3),)),
    "redirect_stdout_after_ops": (_redirect_stdout_after_ops, (r(3),)),
}

# programs whose arguments are made afresh for each call (a new object each time)
FRESH_ARGUMENTS = {
    "autocast_argument_object": (
        _autocast_argument_object,
        lambda: (r(4, 4), torch.autocast("cpu", dtype=torch.bfloat16)),
    ),
    "nullcontext_argument": (_nullcontext_argument, lambda: (r(3), contextlib.nullcontext())),
}


@pytest.mark.parametrize("outer", [torch.enable_grad, torch.no_grad], ids=["grad", "no_grad"])
@pytest.mark.parametrize("name", [*PROGRAMS, *FRESH_ARGUMENTS])
def test_context_programs_count_like_torch(name, outer):
    if name in PROGRAMS:
        fn, args = PROGRAMS[name]
        make_args = lambda: clone_inputs(args)  # noqa: E731
    else:
        fn, make_args = FRESH_ARGUMENTS[name]
    with outer():
        check_like_torch(fn, make_args, calls=2)


# ----- behaviours, against eager --------------------------------------------------------
def test_autocast_object_from_outside_is_guarded_by_identity():
    compiled = dynamo_capture.optimize(_autocast_argument_object, backend=CountingBackend())
    x = r(4, 4)
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
    off = torch.autocast("cpu", dtype=torch.bfloat16, enabled=False)
    assert compiled(x, bf16).dtype == torch.bfloat16
    got = compiled(x, off)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.mm(x, x))
    assert not torch.is_autocast_enabled("cpu")


def test_cpu_amp_autocast_block_computes_in_bfloat16():
    x = r(4, 4)
    expected, _ = _cpu_amp_autocast(x)
    backend = CountingBackend()
    got, enabled = dynamo_capture.optimize(_cpu_amp_autocast, backend=backend)(x)
    torch.testing.assert_close(got, expected)
    assert got.dtype == torch.bfloat16 and enabled is False
    assert len(backend.graphs) == 1 and not torch.is_autocast_enabled("cpu")


def test_set_grad_enabled_kept_across_a_break_restores_the_mode_before_it():
    x = r(3, grad=True)
    with torch.enable_grad():
        expected = _set_grad_disabled_made_before_break(x)
        compiled = dynamo_capture.optimize(
            _set_grad_disabled_made_before_break, backend=CountingBackend()
        )
        got = compiled(x)
        assert torch.is_grad_enabled()
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:] == (False, True)


def test_empty_user_grad_switch_block_leaves_no_graph_of_switches():
    backend = CountingBackend()
    with torch.enable_grad():
        _, out = dynamo_capture.optimize(_empty_user_switch_block, backend=backend)(r(3))
    (graph,) = backend.graphs
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert torch._C._set_grad_enabled not in targets
    assert out.requires_grad is False


def test_user_context_enter_and_exit_compiled_where_the_frame_runs_eagerly():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(_user_switch_with_break, backend=backend)
    x = r(2, 3)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), _user_switch_with_break(x))
        assert not torch.is_grad_enabled()
    assert len(backend.graphs) == 2  # GradSwitch.__enter__ and __exit__, one switch each
    assert isinstance(GradSwitch.__dict__["__enter__"], types.FunctionType)  # shadow removed


def test_sdpa_kernel_block_resumed_after_a_break_keeps_its_backends():
    seen = []
    original = set(torch.nn.attention._cur_sdpa_kernel_backends())

    def fn(x):
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
            x = x + 1
            torch._dynamo.graph_break()
            seen.append(list(torch.nn.attention._cur_sdpa_kernel_backends()))
            x = x * 2
        return x

    x = r(2, 2)
    got = dynamo_capture.optimize(fn, backend=CountingBackend())(x)
    torch.testing.assert_close(got, (x + 1) * 2)
    assert seen == [[torch.nn.attention.SDPBackend.MATH]]
    assert set(torch.nn.attention._cur_sdpa_kernel_backends()) == original


def test_backend_flags_block_does_not_leave_its_flags_set():
    seen = []

    def fn(x):
        with torch.backends.mkldnn.flags(enabled=False):
            y = x * 2
            seen.append(torch._C._get_mkldnn_enabled())
            y = y + 1
        return y

    before = torch._C._get_mkldnn_enabled()
    x = r(3)
    torch.testing.assert_close(dynamo_capture.optimize(fn, backend=CountingBackend())(x), x * 2 + 1)
    assert seen == [False]
    assert torch._C._get_mkldnn_enabled() == before


def test_closing_in_frame_closes_its_resource_like_eager():
    got, closed = dynamo_capture.optimize(_closing_block, backend=CountingBackend())(r(3))
    assert closed is True and got.shape == (3,)


# ----- contextlib.ExitStack over generator contexts -------------------------------------
@contextlib.contextmanager
def _logged_scale(log, factor):
    log.append(f"enter {factor}")
    yield factor
    log.append(f"exit {factor}")


@contextlib.contextmanager
def _without_grad():
    with torch.no_grad():
        yield


def exit_stack_enters_generator_contexts(x):
    log = []
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(_logged_scale(log, 2))
        b = stack.enter_context(_logged_scale(log, 3))
        stack.callback(log.append, "callback")
        x = x * a + b
    return x + 1, log


def exit_stack_enters_a_grad_mode_generator(x):
    with contextlib.ExitStack() as stack:
        stack.enter_context(_without_grad())
        y = x * 2
    return y + 1, y.requires_grad


def exit_stack_unwinds_on_an_exception(x):
    log = []
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_logged_scale(log, 4))
            stack.callback(log.append, "callback")
            raise ValueError("inside the stack")
    except ValueError:
        x = x + 1
    return x, log


def context_dunders_called_on_its_type(x):
    log = []
    cm = _logged_scale(log, 5)
    factor = type(cm).__enter__(cm)
    x = x * factor
    type(cm).__exit__(cm, None, None, None)
    return x, log


@pytest.mark.parametrize(
    "fn",
    [
        exit_stack_enters_generator_contexts,
        exit_stack_enters_a_grad_mode_generator,
        exit_stack_unwinds_on_an_exception,
        context_dunders_called_on_its_type,
    ],
)
def test_exit_stack_enters_generator_contexts_in_the_graph(fn):
    check_like_torch(fn, lambda: (torch.randn(4, requires_grad=True),))


# ----- a grad-mode class given the function itself: `torch.no_grad(f)` ---------------
# the class decorates `f` (as `torch.no_grad()(f)`); calling the result runs f under
# the mode (the class object was taken for a context before: the call returned torch's
# decorator function instead of f's result)
def _no_grad_given_function(x):
    def inner(t):
        return t.sin() * 2

    with torch.enable_grad():
        inner = torch.no_grad(inner)
    return inner(x), x.cos()


def _enable_grad_given_function_in_no_grad(x):
    def inner(t):
        return t * 3

    with torch.no_grad():
        tripled = torch.enable_grad(inner)(x)
        plain = inner(x)
    return tripled, plain


def _no_grad_given_none(x):
    with torch.no_grad(None):
        y = x * 2
    return y


GIVEN_FUNCTION = [_no_grad_given_function, _enable_grad_given_function_in_no_grad]


@pytest.mark.parametrize("fn", GIVEN_FUNCTION, ids=[fn.__name__ for fn in GIVEN_FUNCTION])
def test_grad_mode_class_given_a_function_decorates_it_like_torch(fn):
    check_like_torch(fn, lambda: (r(4, grad=True),))


def test_grad_mode_class_given_none_raises_like_eager():
    # eager's no_grad(None) raises TypeError (torch.compile's returns the block's value)
    compiled = dynamo_capture.optimize(_no_grad_given_none, backend=CountingBackend())
    with pytest.raises(TypeError) as eager_error:
        _no_grad_given_none(r(3))
    with pytest.raises(TypeError) as raised:
        compiled(r(3))
    assert str(raised.value) == str(eager_error.value)
