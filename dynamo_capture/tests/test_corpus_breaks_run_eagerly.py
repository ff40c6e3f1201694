"""Graph breaks that ran a whole frame eagerly, or counted differently from torch.compile,
modelled on pytorch's test/dynamo test_modes.py, test_exceptions.py and
test_nested_graph_breaks.py: a break inside a torch function mode's `with` block
entered in the frame or a callee (the parts re-enter a fresh mode), a break inside a
user `__getitem__` (the item runs as a compiled frame of its own, the frame cut at the
subscript), an `assert` failing in a callee (the caller's graph up to the call is
compiled, the callee's code before the assert as a frame of its own).

PROGRAMS give eager's results (or its exception) and torch.compile's graph and op
counts (`torchcheck.check_like_torch`). MODE_PROGRAMS give eager's results and
torch.compile's counts, where torch.compile's own values differ from eager's.
DIFFERING_PROGRAMS give eager's values with counts unlike torch.compile's (said at each;
benchmarks/RESULTS.md).

PYTEST_DONT_REWRITE: the programs' assert statements are the user's, not pytest's."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
import torch._dynamo
from torchcheck import check_like_eager, check_like_torch, program_registry

import dynamo_capture
from dynamo_capture.testing import CountingBackend

PROGRAMS, program = program_registry()
MODE_PROGRAMS, mode_program = program_registry()
DIFFERING_PROGRAMS, differing_program = program_registry()


def _break():
    torch._dynamo.graph_break()


def r4():
    return torch.randn(4)


# ----- a break inside a torch function mode's block --------------------------------------
class _AddsOne(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.add:
            return func(*args, **kwargs) + 1
        return func(*args, **kwargs)


class _Scales(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.mul:
            return func(*args, **kwargs) * 2
        return func(*args, **kwargs)


@mode_program(r4)
def mode_block_break_in_frame(x):
    with _AddsOne():
        y = torch.add(x, 1)
        _break()
        z = torch.add(y, 2)
    return z * 2


@mode_program(r4)
def mode_block_print_in_frame(x):
    y = x.sin().cos()
    with _AddsOne():
        y = torch.add(y, 1)
        print("inside the mode")
        z = torch.add(y, 2)
    return z * 2


def _mode_in_callee(t):
    with _AddsOne():
        u = torch.add(t, 1)
        _break()
        return torch.add(u, 1)


@mode_program(r4)
def mode_block_break_in_callee(x):
    return _mode_in_callee(x) * 2


@mode_program(r4)
def mode_blocks_nested_break(x):
    with _AddsOne():
        with _Scales():
            y = torch.mul(torch.add(x, 1), 3)
            _break()
            y = torch.mul(y, 2)
        y = torch.add(y, 1)
    return y


@program(r4)
def mode_block_no_break(x):
    with _AddsOne():
        y = torch.add(x, 1)
    return y * 2


# ----- a break inside a user __getitem__ ---------------------------------------------------
class _ItemBreaks:
    def __init__(self, t):
        self.t = t

    def __getitem__(self, i):
        torch._dynamo.graph_break()
        return self.t * i


class _ItemComputesThenBreaks:
    def __init__(self, t):
        self.t = t

    def __getitem__(self, i):
        y = self.t * i
        torch._dynamo.graph_break()
        return y + 1


class _InheritsItem(_ItemComputesThenBreaks):
    pass


_OUTSIDE_ITEMS = _ItemComputesThenBreaks(torch.ones(4))


@program(r4)
def getitem_breaks_first(x):
    return _ItemBreaks(x)[3] - 1


@program(r4)
def getitem_computes_then_breaks(x):
    items = _ItemComputesThenBreaks(x.sin())
    return items[2] * 3


@program(r4)
def getitem_twice_in_a_statement(x):
    obj = _ItemBreaks(x.cos())
    return obj[2] + obj[3]


@program(r4)
def getitem_inherited(x):
    return _InheritsItem(x)[2].relu()


@program(r4)
def getitem_of_an_outside_object(x):
    return _OUTSIDE_ITEMS[2] + x


@program(r4)
def getitem_in_an_assignment(x):
    y = x * 2
    z = _ItemComputesThenBreaks(y)[1]
    return z.sum()


class _Operand:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        y = self.t * 2
        torch._dynamo.graph_break()
        return y + other

    def __call__(self, u):
        y = self.t * 3
        torch._dynamo.graph_break()
        return y - u


@program(r4)
def add_of_a_user_class_breaks(x):
    operand = _Operand(x.sin())
    z = operand + x
    return z.cos()


@program(r4)
def call_of_a_user_object_breaks(x):
    operand = _Operand(x.sin())
    z = operand(x)
    return z.cos()


class _Table:
    def __init__(self, t):
        self.t = t

    def __getitem__(self, i):
        return self.t * i

    def __len__(self):
        return 3


@program(r4)
def operators_of_a_user_class_in_a_frame_run_eagerly(x):
    table = _Table(x)
    total = x
    for i in range(len(table)):
        total = total + table[i]
        _break()
    return total


# ----- an assert failing in a callee --------------------------------------------------------
def _short(t):
    assert t.shape[0] > 10, "too short"
    return t


def _short_no_message(t):
    assert t.shape[0] > 10  # noqa: PT018
    return t


def _short_computed_message(t):
    assert t.shape[0] > 10, f"got {t.shape[0]}"
    return t


def _short_after_work(t):
    u = t.sin()
    return _short(u)


def _long_enough(t):
    assert t.shape[0] > 2, "too short"
    return t * 2


@program(r4)
def assert_in_callee_fails(x):
    y = x.cos() + 1
    z = _short(y)
    return z * 2


@program(r4)
def assert_in_callee_fails_in_an_expression(x):
    y = x.cos() + 1
    return _short(y) * 2


@program(r4)
def assert_in_callee_fails_after_one_op(x):
    y = x.cos()
    return _short(y)


@program(r4)
def assert_without_message_in_callee_fails(x):
    y = x.cos() + 1
    return _short_no_message(y)


@program(r4)
def assert_with_computed_message_in_callee_fails(x):
    y = x.cos() + 1
    return _short_computed_message(y)


@program(r4)
def assert_two_calls_deep_fails(x):
    y = x.cos() + 1
    return _short_after_work(y)


@program(r4)
def assert_in_callee_holds(x):
    return _long_enough(x.cos()) + 1


@program(r4)
def raise_in_callee_is_not_an_assert(x):
    def fails(t):
        raise AssertionError("raised")

    y = x.cos() + 1
    return fails(y)


# ----- bytearray and memoryview: each use runs eagerly on its own, cut at the instruction --
@program(r4)
def bytearray_made_and_read(x):
    data = bytearray()
    data.append(3)
    return x * len(data) + data[0]


@program(r4)
def bytearray_of_a_size_written(x):
    y = x.sin()
    data = bytearray(4)
    data[0] = 7
    return y * data[0] + len(data)


@program(r4)
def bytearray_length_before_and_after_extend(x):
    data = bytearray(b"abc")
    n = len(data)
    data.extend(b"de")
    return x * n + len(data), bytes(data)


@program(r4)
def bytearray_item_in_an_expression(x):
    y = x.cos()
    data = bytearray(3)
    data[1] = 5
    return y + data[1] * len(data)


@program(r4)
def memoryview_of_a_bytearray(x):
    data = bytearray(b"xy")
    view = memoryview(data)
    return x + view[0]


# ----- left different (benchmarks/RESULTS.md) ------------------------------------------------
# torch.compile re-enters the mode in a fresh frame of the callee and compiles the call's
# `torch.add` in the caller's resumed graph: 2 graphs, 4 ops; ember 2 graphs, 3 ops
@differing_program(r4)
def mode_block_break_in_a_callee_called_inside(x):
    with _AddsOne():
        y = torch.add(x, 1)
        y = _add_three_after_break(y)
    return y


def _add_three_after_break(t):
    _break()
    return torch.add(t, 3)


class _ItemCallsABreak:
    def __init__(self, t):
        self.t = t

    def __getitem__(self, i):
        _break()
        return self.t * i


# a user `__getitem__` whose first statement calls a function that breaks: ember compiles
# the item's code after the call (2 graphs), torch.compile runs the item eagerly (1)
@differing_program(r4)
def getitem_calls_a_function_that_breaks(x):
    return _ItemCallsABreak(x)[3] - 1


class _Counts(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


# a mode with state of its own: a fresh one cannot stand for it, the frame runs eagerly
@differing_program(r4)
def mode_with_state_break_in_block(x):
    mode = _Counts()
    with mode:
        y = torch.add(x, 1)
        _break()
        y = torch.mul(y, 2)
    return y, mode.calls


# `with Mode() as m:` lets the code see the mode object: the parts cannot enter a fresh
# one, so the frame runs eagerly (torch.compile: 2 graphs)
@differing_program(r4)
def mode_block_bound_by_as(x):
    with _AddsOne() as mode:
        y = torch.add(x, 1)
        _break()
        z = torch.add(y, 2)
    return z * 2, mode is not None


# ----- an exception made from a tensor: the tensor kept in it, read back through .args ------
@program(r4)
def exception_made_from_a_tensor(x):
    try:
        raise ValueError(x * 2)
    except ValueError as error:
        return error.args[0] + 1


@program(r4)
def exception_args_of_a_tensor_and_a_string(x):
    try:
        raise ValueError(x * 2, "t")
    except ValueError as error:
        return error.args[0] + 1, error.args[1], len(error.args)


@program(r4)
def exception_args_unpacked(x):
    try:
        raise ValueError(x * 2, x + 1)
    except ValueError as error:
        a, b = error.args
        return a + b


@program(r4)
def exception_arg_checked_as_a_tensor(x):
    try:
        raise RuntimeError(x.sin())
    except RuntimeError as error:
        return isinstance(error.args[0], torch.Tensor), error.args[0] * 2


class _PlainError(ValueError):
    pass


@program(r4)
def exception_subclass_holding_a_tensor(x):
    try:
        raise _PlainError(x * 2)
    except ValueError as error:
        return error.args[0] - 1, type(error).__name__


@program(r4)
def exception_holding_a_tensor_read_from_exc_info(x):
    try:
        raise ValueError(x * 2)
    except ValueError:
        return sys.exc_info()[1].args[0] + 3


@program(r4)
def exception_holding_a_tensor_as_a_cause(x):
    try:
        try:
            raise ValueError(x * 2)
        except ValueError as error:
            raise RuntimeError("wrapped") from error
    except RuntimeError as outer:
        return outer.__cause__.args[0] + 1


@program(r4)
def exception_holding_a_tensor_never_raised(x):
    error = ValueError(x * 2)
    return error.args[0] + 1


# read as a constant (str, a copy, ==, print, a note): the frame runs eagerly, as in torch
@program(r4)
def exception_holding_a_tensor_as_text(x):
    try:
        raise ValueError(x * 2)
    except ValueError as error:
        return str(error)


@program(r4)
def exception_holding_a_tensor_copied(x):
    try:
        raise ValueError(x * 2)
    except ValueError as error:
        return copy.copy(error).args[0] + 1


@program(r4)
def exception_holding_a_tensor_compared(x):
    try:
        raise ValueError(x * 2)
    except ValueError as error:
        return error.args == (x,), x


@program(r4)
def exception_holding_a_tensor_raised_out(x):
    raise ValueError(x * 2)


@program(r4)
def exception_holding_a_tensor_raised_again(x):
    try:
        raise ValueError(x * 2)
    except ValueError:
        if x.sum() > 100:
            return x
        raise


# ember captures what torch.compile runs eagerly: `error.args = (...)` then read (1 graph)
@differing_program(r4)
def exception_args_set_then_read(x):
    try:
        raise ValueError(x * 2)
    except ValueError as error:
        error.args = (x * 3,)
        return error.args[0]


# the exception leaves the frame or is read as text: ember runs the frame eagerly, torch
# keeps the tensor's graph (1 graph), or inlines a Python __init__ (1)
@differing_program(r4)
def exception_holding_a_tensor_returned(x):
    try:
        raise ValueError(x * 2)
    except ValueError as error:
        return error


@differing_program(r4)
def exception_holding_a_tensor_repr(x):
    try:
        raise ValueError(x * 2)
    except ValueError as error:
        return repr(error), x


class _ScalingError(ValueError):
    def __init__(self, t):
        super().__init__(t * 3)


@differing_program(r4)
def exception_with_an_own_init_from_a_tensor(x):
    try:
        raise _ScalingError(x)
    except ValueError as error:
        return error.args[0] - 1


# an exception made in the frame whose args are set, then folded as text: the frame runs
# eagerly (`str(e)` read the object before the write: the old args, a silent wrong result)
@differing_program(r4)
def exception_args_set_then_text(x):
    try:
        raise ValueError("a")
    except ValueError as error:
        error.args = ("b", 2)
        return str(error), x


# `map` calling a lambda that breaks: the lambda is made by the eager statement and
# called from C (torch.compile's frame hook compiles it and the function it calls)
@differing_program(r4)
def map_of_a_lambda_that_breaks(x):
    def doubles_after_break(t):
        _break()
        return t * 2

    return list(map(lambda t: doubles_after_break(t) + 1, [x, x.sin()]))


# `__closure__` of a function made in the frame: its cells, read while capturing (1 graph;
# it ran the frame eagerly, 0). torch.compile runs the frame eagerly and compiles each
# function it made as a frame of its own (2 graphs)
@differing_program(r4)
def closure_of_a_function_made_here(x):
    def make(k):
        def scale(t):
            return t * k

        return scale

    double = make(2)
    return double(x), make(3)(x), double.__closure__[0].cell_contents


@differing_program(r4)
def closure_cell_of_a_tensor_read(x):
    y = x * 2

    def shifted(t):
        return t + y

    cell = shifted.__closure__[0]
    return cell.cell_contents + shifted(x), type(cell).__name__


@differing_program(r4)
def closure_cell_read_before_it_is_filled(x):
    def outer():
        def inner():
            return late

        try:
            inner.__closure__[0].cell_contents  # noqa: B018 - the read raises
        except ValueError as error:
            text = str(error)
        late = 3
        return text, inner()

    return outer(), x + 1


@differing_program(r4)
def closure_read_twice_is_one_tuple(x):
    def make(k):
        def scale(t):
            return t * k

        return scale

    scaled = make(x + 1)
    return scaled.__closure__[0].cell_contents * 2, scaled.__closure__ is scaled.__closure__


# ----- tests ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_break_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


def _torch_counts(fn, make_args) -> tuple[int, int]:
    """torch.compile's graph and op counts over two calls, its values not compared."""
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(fn, backend=counter)
    try:
        for _ in range(2):
            compiled(*make_args())
    finally:
        torch._dynamo.reset()
    return counter.frame_count, counter.op_count


@pytest.mark.parametrize("name", list(MODE_PROGRAMS))
def test_mode_program_values_like_eager_counts_like_torch(name):
    fn, make_args = MODE_PROGRAMS[name]
    counter = check_like_eager(fn, make_args).backend
    assert (counter.frame_count, counter.op_count) == _torch_counts(fn, make_args)


@pytest.mark.parametrize("name", list(DIFFERING_PROGRAMS))
def test_program_equals_eager_where_counts_differ(name):
    check_like_eager(*DIFFERING_PROGRAMS[name])


def test_modes_left_after_a_split_frame():
    """The parts enter and leave their modes: none is left on after a call."""
    compiled = dynamo_capture.optimize(mode_block_break_in_frame, backend=CountingBackend())
    compiled(torch.randn(4))
    assert not torch._C._is_torch_function_mode_enabled()


def test_getitem_shadow_is_removed_after_the_statement():
    compiled = dynamo_capture.optimize(getitem_computes_then_breaks, backend=CountingBackend())
    compiled(torch.randn(4))
    assert "__getitem__" in vars(_ItemComputesThenBreaks)
    assert vars(_ItemComputesThenBreaks)["__getitem__"].__name__ == "__getitem__"
    assert "__getitem__" not in vars(_InheritsItem)


@pytest.mark.parametrize(
    ("fn", "named"),
    [
        (mode_block_break_in_frame, "graph_break"),
        (getitem_computes_then_breaks, "graph_break"),
        (bytearray_made_and_read, "instance of bytearray"),
        (memoryview_of_a_bytearray, "instance of bytearray"),
    ],
    ids=lambda value: getattr(value, "__name__", None),
)
def test_fullgraph_names_the_break(fn, named):
    compiled = dynamo_capture.optimize(fn, backend="eager", fullgraph=True)
    with pytest.raises(dynamo_capture.Unsupported, match=named):
        compiled(torch.randn(4))


def test_fullgraph_raises_a_failing_assert_in_a_callee():
    compiled = dynamo_capture.optimize(assert_in_callee_fails, backend="eager", fullgraph=True)
    with pytest.raises((AssertionError, dynamo_capture.Unsupported), match="too short"):
        compiled(torch.randn(4))
