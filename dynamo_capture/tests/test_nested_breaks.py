"""Graph breaks inside functions the compiled frame calls, one and two calls deep: the
callee runs as a compiled frame of its own and the caller resumes after the call, with
every frame's locals live across the break (graph counts as torch.compile's)."""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch, torch_counts

import dynamo_capture
from dynamo_capture.testing import CountingBackend


def _one():
    return (torch.randn(4, requires_grad=True),)


def _inner(t):
    u = t + 1
    torch._dynamo.graph_break()
    return u * 2


def _middle(t):
    v = t * 3
    w = _inner(v)
    return v + w


def _loop_then_break(t):
    for step in range(2):
        t = t + step
    torch._dynamo.graph_break()
    return t


class _Breaking(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, t):
        h = self.linear(t)
        torch._dynamo.graph_break()
        return h.relu()


torch.manual_seed(0)
_MODULE = _Breaking()


def one_call_deep(x):
    a = x.sin()
    b = _inner(a)
    return a + b


def two_calls_deep(x):
    a = x.cos()
    b = _middle(a)
    return a * b


def callee_result_used_in_the_return(x):
    return _loop_then_break(x) * 2


def module_forward_breaks(x):
    return _MODULE(x) + 1


def callee_result_in_an_expression(x):
    y = x.exp()
    return _inner(y) * 2 + y


def callee_in_no_grad(x):
    with torch.no_grad():
        y = _inner(x)
    return y + x


PROGRAMS = [
    one_call_deep,
    two_calls_deep,
    callee_result_used_in_the_return,
    module_forward_breaks,
    callee_result_in_an_expression,
    callee_in_no_grad,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_break_inside_a_callee_resumes_like_torch(fn):
    check_like_torch(fn, _one)


def _breaks_in_no_grad(t):
    with torch.no_grad():
        t = t + 1
        torch._dynamo.graph_break()
        return t + 2


def _returns_from_enable_grad(t):
    with torch.enable_grad():
        t = t + 4
        return _breaks_in_no_grad(t) + 8


def return_inside_a_with_block_after_a_breaking_call(x):
    with torch.no_grad():
        x = x + 16
        return _returns_from_enable_grad(x) + 32


def test_return_inside_a_with_block_around_a_breaking_call_resumes_without_the_context():
    # the `return` after the block closed is no place to re-enter it (the returned value
    # lay where the context's exit had been)
    compiled = dynamo_capture.optimize(
        return_inside_a_with_block_after_a_breaking_call, backend=lambda gm, ex: gm.forward
    )
    for _ in range(2):
        x = torch.zeros(3, requires_grad=True)
        expected = return_inside_a_with_block_after_a_breaking_call(x)
        got = compiled(x)
        torch.testing.assert_close(got, expected)
        assert got.requires_grad == expected.requires_grad
        assert torch.is_grad_enabled()


def _adds_then_breaks(t):
    t = t + 1
    torch._dynamo.graph_break()
    return t + 2


def _calls_with_computed_argument(t):
    return _adds_then_breaks(t + 4) + 8


def _breaks_then_calls(t):
    t = t + 4
    torch._dynamo.graph_break()
    return _adds_then_breaks(t + 8) + 16


def _two_arguments_then_breaks(a, b):
    s = a + b
    torch._dynamo.graph_break()
    return s + 1


def computed_argument_two_calls_deep(x):
    return _calls_with_computed_argument(x + 16) + 32


def computed_argument_after_a_break_in_the_middle(x):
    return _breaks_then_calls(x + 32) + 64


def two_computed_arguments(x):
    return _two_arguments_then_breaks(x + 1, x * 2) + 3


def callee_called_twice_with_computed_arguments(x):
    first = _adds_then_breaks(x + 4)
    second = _adds_then_breaks(x * 8) * 4
    return first + second


COMPUTED_ARGUMENTS = [
    computed_argument_two_calls_deep,
    computed_argument_after_a_break_in_the_middle,
    two_computed_arguments,
    callee_called_twice_with_computed_arguments,
]


@pytest.mark.parametrize("fn", COMPUTED_ARGUMENTS, ids=[fn.__name__ for fn in COMPUTED_ARGUMENTS])
def test_arguments_of_a_breaking_call_are_computed_in_the_graph_before_like_torch(fn):
    # the cut lies at the call instruction: `x + 16` is in the graph before the break
    check_like_torch(fn, _one)


class _Scaler:
    def __init__(self):
        self.scale = 3

    def adds_then_breaks(self, t):
        t = t + self.scale
        torch._dynamo.graph_break()
        return t * 2


_SCALER = _Scaler()


def _scaled(t, scale=1, shift=0):
    t = t * scale
    torch._dynamo.graph_break()
    return t + shift


def method_call_with_computed_argument(x):
    return _SCALER.adds_then_breaks(x + 1) + 2


def method_call_on_a_local_object(x):
    scaler = _SCALER
    y = x.cos()
    return scaler.adds_then_breaks(y * 4) - y


def keyword_arguments_with_computed_argument(x):
    return _scaled(x + 1, scale=2, shift=5) * 3


def keyword_argument_computed(x):
    return _scaled(x, scale=x.sum(), shift=1) + x


def function_made_in_the_frame(x):
    def g(t):
        t = t + 1
        torch._dynamo.graph_break()
        return t * 2

    return g(x * 2) + x * 2


def function_made_in_the_frame_called_twice(x):
    def g(t):
        t = t.sin()
        torch._dynamo.graph_break()
        return t - 1

    a = g(x + 1)
    return g(a * 3) + a


CALL_FORMS = [
    method_call_with_computed_argument,
    method_call_on_a_local_object,
    keyword_arguments_with_computed_argument,
    keyword_argument_computed,
    function_made_in_the_frame,
    function_made_in_the_frame_called_twice,
]


@pytest.mark.parametrize("fn", CALL_FORMS, ids=[fn.__name__ for fn in CALL_FORMS])
def test_method_keyword_and_local_calls_cut_at_the_call_like_torch(fn):
    # `obj.f(x + 1)`, `f(x + 1, scale=2)` and `g(x * 2)` of a `def` in the frame: the
    # arguments are in the graph before the break, the callee is a compiled frame
    check_like_torch(fn, _one, calls=3)


class _Property:
    calls = 0

    @property
    def adds_then_breaks(self):
        _Property.calls += 1
        return _SCALER.adds_then_breaks


_PROPERTY = _Property()


def method_through_a_property(x):
    return _PROPERTY.adds_then_breaks(x + 1) + 2


def test_callable_read_through_a_property_is_read_once_like_eager():
    compiled = dynamo_capture.optimize(method_through_a_property, backend=lambda gm, ex: gm.forward)
    for _ in range(2):
        x = torch.randn(4)
        before = _Property.calls
        expected = method_through_a_property(x)
        assert _Property.calls == before + 1
        got = compiled(x)
        torch.testing.assert_close(got, expected)
        assert _Property.calls == before + 2


def _sigmoid_then_sine(x):
    return torch.sigmoid(x) * 2 + torch.sin(x)


def test_disallowed_call_starting_an_expression_cuts_at_the_call_like_torch():
    # torch.compile compiles `* 2 + torch.sin(x)` after the eager sigmoid (one graph)
    import torch._dynamo

    from dynamo_capture import registry

    dynamo_capture.disallow_in_graph(torch.sigmoid)
    try:
        counter = CountingBackend()
        compiled = dynamo_capture.optimize(_sigmoid_then_sine, backend=counter)
        for _ in range(2):
            x = torch.randn(4)
            torch.testing.assert_close(compiled(x), _sigmoid_then_sine(x))
    finally:
        registry._disallowed_in_graph.pop(id(torch.sigmoid), None)
    torch._dynamo.disallow_in_graph(torch.sigmoid)
    try:
        frames, ops = torch_counts(_sigmoid_then_sine, lambda: (torch.randn(4),))
    finally:
        torch._dynamo.allow_in_graph(torch.sigmoid)
    assert (counter.frame_count, counter.op_count) == (frames, ops)


def lambda_breaking_first(x):
    g = lambda t: torch._dynamo.graph_break() or t + 1  # noqa: E731
    return g(x * 2) + x


def test_break_at_the_start_of_a_lambda_compiles_the_rest_like_torch():
    check_like_torch(lambda_breaking_first, _one, calls=3)


def _fixed():
    return (torch.tensor([0.5, 1.5, 2.5, 3.25], requires_grad=True),)


def sum_of_values_read_in_a_call(x):
    return x * sum(x.tolist())


def int_of_an_item(x):
    v = int(x.sum().item())
    return x + v


def int_of_an_item_of_a_computed_tensor(x):
    y = x * 2
    v = int(y.sum().item())
    return y + v


def item_inside_two_calls(x):
    return x + max(float(x.max().item()), 0.5)


def _adds_one_then_breaks(t):
    t = t + 1
    torch._dynamo.graph_break()
    return t


def breaking_call_inside_torch_call(x):
    return torch.cat([x, _adds_one_then_breaks(x * 3)]) * 2


def breaking_call_inside_a_builtin_call(x):
    return x - abs(_adds_one_then_breaks(x.sin()))


INSIDE_CALLS = [
    sum_of_values_read_in_a_call,
    int_of_an_item,
    int_of_an_item_of_a_computed_tensor,
    item_inside_two_calls,
    breaking_call_inside_torch_call,
    breaking_call_inside_a_builtin_call,
]


@pytest.mark.parametrize("fn", INSIDE_CALLS, ids=[fn.__name__ for fn in INSIDE_CALLS])
def test_break_inside_another_calls_arguments_cuts_at_the_call_like_torch(fn):
    # the enclosing call's NULL and callable wait below the cut; the graph before holds
    # what the statement computed up to the breaking call, the graph after the rest
    check_like_torch(fn, _fixed, calls=3)


def computed_argument_in_no_grad(x):
    with torch.no_grad():
        y = _adds_then_breaks(x + 1)
    return y + x


def method_call_in_enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = _SCALER.adds_then_breaks(x + a) * 3
        c = b + a
    return c - x


def _returns_call_in_no_grad(t):
    with torch.no_grad():
        return _adds_then_breaks(t * 2) + 1


def computed_argument_in_a_callers_with_block(x):
    with torch.enable_grad():
        y = _returns_call_in_no_grad(x + 1)
    return y * x


def keyword_call_in_set_grad_enabled(x):
    with torch.set_grad_enabled(False):
        y = x.cos() + _scaled(x + 2, scale=3)
    return y + x


IN_WITH_BLOCKS = [
    computed_argument_in_no_grad,
    method_call_in_enable_grad_inside_no_grad,
    computed_argument_in_a_callers_with_block,
    keyword_call_in_set_grad_enabled,
]


@pytest.mark.parametrize("fn", IN_WITH_BLOCKS, ids=[fn.__name__ for fn in IN_WITH_BLOCKS])
def test_call_cut_inside_grad_mode_blocks_like_torch(fn):
    # each part re-enters the open grad-mode blocks; the mode after the call is eager's
    check_like_torch(fn, _one, calls=3)
    assert torch.is_grad_enabled()


def computed_argument_in_a_try_block(x):
    try:
        y = _adds_then_breaks(x + 1)
    except ValueError:
        y = x
    return y + 1


def two_breaking_calls_in_a_try_block(x):
    try:
        a = _adds_then_breaks(x * 2)
        b = _adds_then_breaks(a - 1)
    finally:
        x = x + 0
    return a + b


IN_TRY_BLOCKS = [computed_argument_in_a_try_block, two_breaking_calls_in_a_try_block]


@pytest.mark.parametrize("fn", IN_TRY_BLOCKS, ids=[fn.__name__ for fn in IN_TRY_BLOCKS])
def test_break_in_a_callee_inside_a_try_block_compiles_the_callee_like_torch(fn):
    # the frame runs eagerly (its try block cannot be resumed), the global function
    # it calls runs as a compiled frame of its own
    check_like_torch(fn, _one, calls=3)
    assert globals()["_adds_then_breaks"].__code__.co_name == "_adds_then_breaks"


def _replaced(t):
    return t - 100


def rebinds_the_called_global(x):
    global _rebound_callee
    try:
        y = _rebound_callee(x + 1)
        _rebound_callee = _replaced
    except ValueError:
        y = x
    return y


_rebound_callee = _adds_then_breaks


def test_global_rebound_by_an_eager_frame_keeps_its_new_value():
    global _rebound_callee
    compiled = dynamo_capture.optimize(rebinds_the_called_global, backend=lambda gm, ex: gm.forward)
    x = torch.randn(4)
    try:
        torch.testing.assert_close(compiled(x), _adds_then_breaks(x + 1))
        assert _rebound_callee is _replaced
        torch.testing.assert_close(compiled(x), x + 1 - 100)
    finally:
        _rebound_callee = _adds_then_breaks


def _enable_grad_around_a_breaking_call(t):
    with torch.enable_grad():
        t = t + 4
        u = _breaks_in_no_grad(t) + 8
    return u * 2


def grad_blocks_three_frames_deep(x):
    with torch.no_grad():
        x = x + 16
        y = _enable_grad_around_a_breaking_call(x) + 32
    return y


def _no_grad_around_a_breaking_call(t):
    with torch.no_grad():
        a = t + 1
        b = _adds_then_breaks(a * 2)
    return a + b


def no_grad_callee_inside_enable_grad(x):
    with torch.enable_grad():
        y = x.sin()
        z = _no_grad_around_a_breaking_call(y) * 3
    return z + y


def _returns_in_enable_grad(t):
    with torch.enable_grad():
        return _adds_then_breaks(t * 5) - 1


def enable_grad_callee_returning_inside_no_grad(x):
    with torch.no_grad():
        y = x.cos()
        w = _returns_in_enable_grad(y)
        w = w * y
    return w


NESTED_GRAD_BLOCKS = [
    return_inside_a_with_block_after_a_breaking_call,
    grad_blocks_three_frames_deep,
    no_grad_callee_inside_enable_grad,
    enable_grad_callee_returning_inside_no_grad,
]


@pytest.mark.parametrize("fn", NESTED_GRAD_BLOCKS, ids=[fn.__name__ for fn in NESTED_GRAD_BLOCKS])
def test_grad_blocks_open_in_callers_are_re_entered_in_each_part_like_torch(fn):
    check_like_torch(fn, _one, calls=3)
    assert torch.is_grad_enabled()


def function_passed_as_an_argument(x, fn=_adds_then_breaks):
    return fn(x * 2) + 1


def global_function_held_by_a_local(x):
    fn = _adds_then_breaks
    return fn(x * 2) + 1


def function_made_in_the_frame_with_defaults(x):
    def g(t, shift=2, *, scale=3.0):
        t = t + shift
        torch._dynamo.graph_break()
        return t * scale

    return g(x * 2) + g(x - 1, shift=2, scale=3.0)


class _Counts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.calls = 0

    def helper(self, t, scale=1):
        self.calls += 1
        t = self.linear(t)
        torch._dynamo.graph_break()
        return t * scale

    def forward(self, x):
        return self.helper(x + 1, scale=3) - x


torch.manual_seed(0)
_COUNTS = _Counts()


def module_method_with_keyword_argument(x):
    return _COUNTS(x)


LOCAL_CALLABLES = [
    function_passed_as_an_argument,
    global_function_held_by_a_local,
    function_made_in_the_frame_with_defaults,
    module_method_with_keyword_argument,
]


@pytest.mark.parametrize("fn", LOCAL_CALLABLES, ids=[fn.__name__ for fn in LOCAL_CALLABLES])
def test_callable_held_by_a_local_runs_as_a_compiled_frame_like_torch(fn):
    before = _COUNTS.calls
    check_like_torch(fn, _one, calls=3)
    if fn is module_method_with_keyword_argument:
        assert _COUNTS.calls - before == 12  # ember, eager, torch.compile, eager


def breaking_call_inside_a_breaking_call(x):
    return _adds_then_breaks(_adds_then_breaks(x + 1) * 2)


def breaking_calls_nested_with_keywords(x):
    return _scaled(_adds_then_breaks(x * 3) - 1, scale=2, shift=1) + x


NESTED_BREAKING_CALLS = [breaking_call_inside_a_breaking_call, breaking_calls_nested_with_keywords]


@pytest.mark.parametrize(
    "fn", NESTED_BREAKING_CALLS, ids=[fn.__name__ for fn in NESTED_BREAKING_CALLS]
)
def test_breaking_call_whose_callable_was_handed_on_is_cut_at_its_call_like_torch(fn):
    # the outer callable waits below the inner cut; the part resuming after it cuts at
    # the outer call instruction and routes the callable to its compiled frame
    check_like_torch(fn, _one, calls=3)


class _Holder:
    def __init__(self):
        self.scaler = _SCALER
        self.reads = 0

    @property
    def counted_scaler(self):
        self.reads += 1
        return _SCALER


_HOLDER = _Holder()


def method_of_an_attribute(x):
    return _HOLDER.scaler.adds_then_breaks(x + 1) * 2


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def breaks_after(self, t, scale=1.0):
        t = self.linear(t)
        torch._dynamo.graph_break()
        return t * scale


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _Block()

    def forward(self, x):
        return self.block.breaks_after(x.sin(), scale=2.0) + x


torch.manual_seed(0)
_NET = _Net()


def method_of_a_submodule(x):
    return _NET(x)


ATTRIBUTE_CHAINS = [method_of_an_attribute, method_of_a_submodule]


@pytest.mark.parametrize("fn", ATTRIBUTE_CHAINS, ids=[fn.__name__ for fn in ATTRIBUTE_CHAINS])
def test_method_of_an_attribute_cuts_at_the_call_like_torch(fn):
    check_like_torch(fn, _one, calls=3)


def method_through_a_counted_property(x):
    return _HOLDER.counted_scaler.adds_then_breaks(x + 1) * 2


def test_receiver_read_through_a_property_is_read_once_like_eager():
    compiled = dynamo_capture.optimize(
        method_through_a_counted_property, backend=lambda gm, ex: gm.forward
    )
    for _ in range(2):
        x = torch.randn(4)
        before = _HOLDER.reads
        expected = method_through_a_counted_property(x)
        got = compiled(x)
        torch.testing.assert_close(got, expected)
        assert _HOLDER.reads == before + 2


def breaking_call_with_star_arguments(x):
    args = (x + 1,)
    return _adds_then_breaks(*args) * 2


def breaking_call_with_star_keywords(x):
    kwargs = {"scale": 2, "shift": 1}
    y = x.cos()
    return x - _scaled(y, **kwargs)


STAR_CALLS = [breaking_call_with_star_arguments, breaking_call_with_star_keywords]


@pytest.mark.parametrize("fn", STAR_CALLS, ids=[fn.__name__ for fn in STAR_CALLS])
def test_breaking_call_with_star_arguments_resumes_after_the_call_like_torch(fn):
    check_like_torch(fn, _one, calls=3)
