"""Graph breaks: the frame is split at the unsupported statement; the code before it is
one graph, the statement runs eagerly, and a resume function (captured and cached on its
first call) continues after it. Results, side effects, graph and break counts vs eager."""

from __future__ import annotations

import dis
import inspect
import types

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture import Unsupported
from dynamo_capture.resume import END, UNBOUND, is_end, plan_split, segment_function
from dynamo_capture.testing import CountingBackend

LOG: list = []


def log_value(value):
    LOG.append(float(value))


def prints_between(x, y):
    a = x.sin() + y
    print("a:", a.shape)
    return a.cos() * 2


def item_in_python(x):
    a = x.relu() + 1
    scale = a.sum().item()
    b = a * scale
    return b - 1


def tolist_in_python(x):
    a = x.abs() + 1
    values = a.tolist()
    return a * len(values) + values[0]


def data_dependent_if(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    else:
        y = y - 1
    return y.exp()


def data_dependent_return(x):
    y = x + 1
    if y.mean() > 1:
        return y
    return -y


def data_dependent_fallthrough(x):
    return data_dependent_return(x)


def calls_untraceable(x):
    h = x.tanh()
    log_value(h.sum())
    return h * 3


def two_breaks(x):
    a = x + 1
    print("first")
    b = a * 2
    c = len(b.tolist())
    d = b + c
    return d.sigmoid()


def break_uses_locals_after(x, n):
    total = x * n
    marker = id(total) > 0
    out = total + 1
    return out, marker and id(out) > 0


def kwargs_and_defaults(x, scale=2.0, *, shift=1.0):
    y = x * scale
    print("scaled")
    return y + shift


def varargs(*tensors):
    first = tensors[0] + tensors[1]
    print(len(tensors))
    return first * tensors[-1]


def side_effect_then_break(x, out):
    out.append(x + 1)
    print("appended")
    out.append(x + 2)
    return len(out)


def break_in_callee_helper(x):
    return x.sum().item()


def break_in_inlined_call(x):
    y = x.exp()
    s = break_in_callee_helper(y)
    return y / s


def returns_in_middle(x):
    y = x + 1
    print("returning")
    return y


PROGRAMS = {
    prints_between: ((torch.randn(3), torch.randn(3)), 2, 1),
    item_in_python: ((torch.randn(4),), 2, 1),
    tolist_in_python: ((torch.randn(3),), 2, 1),
    data_dependent_if: ((torch.randn(5),), 2, 1),
    data_dependent_return: ((torch.full((5,), 3.0),), 1, 1),
    # a break in a callee: the caller breaks at the call, the callee is its own frame
    data_dependent_fallthrough: ((torch.zeros(5),), 2, 2),
    calls_untraceable: ((torch.randn(3),), 2, 2),
    two_breaks: ((torch.randn(3),), 3, 2),
    break_uses_locals_after: ((torch.randn(3), 3), 2, 2),
    kwargs_and_defaults: ((torch.randn(3),), 2, 1),
    varargs: ((torch.randn(2), torch.randn(2), torch.randn(2)), 2, 1),
    # the callee's own frame breaks after `x.sum()`: its graph holds the sum (3, as torch)
    break_in_inlined_call: ((torch.randn(3),), 3, 2),
    returns_in_middle: ((torch.randn(3),), 1, 1),
}


def _clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


@pytest.mark.parametrize("fn", list(PROGRAMS), ids=[fn.__name__ for fn in PROGRAMS])
def test_break_matches_eager_and_counts(fn, capsys):
    args, graphs, breaks = PROGRAMS[fn]
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend)
    LOG.clear()
    expected = fn(*_clone(args))
    eager_log = list(LOG)
    eager_out = capsys.readouterr().out
    LOG.clear()
    got = compiled(*_clone(args))
    torch.testing.assert_close(got, expected)
    assert LOG == eager_log and capsys.readouterr().out == eager_out
    assert len(backend.graphs) == graphs
    assert len(compiled.graph_breaks) == breaks
    compiled(*_clone(args))  # the second call reuses every compiled part
    assert len(backend.graphs) == graphs
    assert len(compiled.graph_breaks) == breaks


def test_kwargs_binding_through_a_split():
    compiled = dynamo_capture.optimize(kwargs_and_defaults, backend=CountingBackend())
    x = torch.randn(3)
    torch.testing.assert_close(
        compiled(x, 3.0, shift=-1.0), kwargs_and_defaults(x, 3.0, shift=-1.0)
    )
    torch.testing.assert_close(compiled(x), kwargs_and_defaults(x))


def test_each_branch_of_a_data_dependent_if_runs_as_in_eager():
    compiled = dynamo_capture.optimize(data_dependent_if, backend=CountingBackend())
    for x in (torch.ones(4), -torch.ones(4), torch.randn(4)):
        torch.testing.assert_close(compiled(x), data_dependent_if(x))


def test_resume_function_compiled_once_and_reused():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(two_breaks, backend=backend)
    for _ in range(4):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), two_breaks(x))
    assert len(backend.graphs) == 3
    assert len(compiled.entries) == 1
    assert all(len(part.entries) == 1 for part in compiled.parts)


def test_resume_function_recompiles_on_new_shape():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(prints_between, backend=backend)
    for size in (3, 3, 5, 5):
        x, y = torch.randn(size), torch.randn(size)
        torch.testing.assert_close(compiled(x, y), prints_between(x, y))
    assert len(backend.graphs) == 4


def test_side_effects_before_and_after_a_break_in_order():
    x = torch.randn(2)
    eager_list, got_list = [], []
    expected = side_effect_then_break(x, eager_list)
    got = dynamo_capture.optimize(side_effect_then_break, backend=CountingBackend())(x, got_list)
    assert got == expected
    torch.testing.assert_close(got_list, eager_list)


def test_fullgraph_still_raises_at_the_first_break():
    compiled = dynamo_capture.optimize(prints_between, backend=CountingBackend(), fullgraph=True)
    with pytest.raises(Unsupported) as info:
        compiled(torch.randn(3), torch.randn(3))
    assert __file__ in str(info.value) and "print" in str(info.value)


def test_force_eager_stance_runs_every_part_eagerly():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(two_breaks, backend=backend)
    x = torch.randn(3)
    with dynamo_capture.set_stance("force_eager"):
        torch.testing.assert_close(compiled(x), two_breaks(x))
    assert not backend.graphs


def test_fail_on_recompile_applies_to_resume_functions():
    compiled = dynamo_capture.optimize(prints_between, backend=CountingBackend())
    compiled(torch.randn(3), torch.randn(3))
    with dynamo_capture.set_stance("fail_on_recompile"):
        compiled(torch.randn(3), torch.randn(3))
        with pytest.raises(dynamo_capture.RecompileError):
            compiled(torch.randn(6), torch.randn(6))


def test_explain_counts_graphs_and_breaks_with_lines():
    report = dynamo_capture.explain(two_breaks)(torch.randn(3))
    assert report.graph_count == 3 and report.graph_break_count == 2
    lines = [b.location.line for b in report.break_reasons]
    first = two_breaks.__code__.co_firstlineno
    assert lines == [first + 2, first + 4]


def loops(x):
    y = x * 2
    for _ in range(2):
        print("in loop")
        y = y + 1
    return y.sin()


def while_loop(x):
    y = x * 2
    n = 0
    while n < 2:
        print("w")
        n += 1
    return y.sin() + n


def in_try(x):
    y = x * 2
    try:
        print("in try")
    except ValueError:
        y = y - 1
    return y + 1


def in_no_grad(x):
    y = x * 2
    with torch.no_grad():
        z = y * 2
        print("no grad")
    return z + 1


@pytest.mark.parametrize("fn", [loops, while_loop, in_no_grad], ids=lambda f: f.__name__)
def test_loop_and_with_statements_holding_a_break_compile_around_it(fn):
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend, loop_breaks="split")
    x = torch.randn(3, requires_grad=True)
    got, expected = compiled(x), fn(x)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad == expected.requires_grad
    assert backend.graphs and compiled.graph_breaks
    graphs, breaks = len(backend.graphs), len(compiled.graph_breaks)
    compiled(x)
    assert (len(backend.graphs), len(compiled.graph_breaks)) == (graphs, breaks)


def test_break_in_a_try_block_runs_the_frame_eagerly_like_torch():
    check_like_torch(in_try, lambda: (torch.randn(3, requires_grad=True),))


def with_cell(x):
    scale = 2

    def inner(y):
        return y * scale

    print("cell")
    return inner(x)


def test_frames_with_cells_split_and_share_their_cells():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(with_cell, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), with_cell(x))
    torch.testing.assert_close(compiled(x), with_cell(x))
    assert len(backend.graphs) == 1 and len(compiled.graph_breaks) == 1
    prints = next(i.offset for i in dis.get_instructions(with_cell) if i.argval == "print")
    assert not isinstance(plan_split(with_cell.__code__, prints), str)


def test_frames_with_cells_made_in_the_body_are_not_split():
    def fn(x):
        fs = [lambda: x * i for i in range(2)]  # noqa: B023  (`i`: a cell of the comprehension)
        return fs

    code = fn.__code__
    insts = list(dis.get_instructions(code))
    resume = next(index for index, inst in enumerate(insts) if inst.opname == "RESUME")
    made_in_body = any(inst.opname == "MAKE_CELL" for inst in insts[resume:])
    if made_in_body:  # 3.12 inlines the comprehension, and its cell with it
        assert isinstance(plan_split(code, 0), str)


def test_segments_run_the_frame_piece_by_piece():
    def fn(x, y):
        a = x + y
        b = a * 2
        return b - x

    code = fn.__code__
    offsets = [i.offset for i in __import__("dis").get_instructions(fn) if i.opname == "STORE_FAST"]
    plan = plan_split(code, offsets[0])
    assert not isinstance(plan, str)
    first = segment_function(fn, plan.body_start, plan.stop, plan.body_start, "a")
    rest = segment_function(fn, plan.stop, None, plan.body_start, "b")
    assert isinstance(first, types.FunctionType)
    x, y = torch.randn(2), torch.randn(2)
    middle = first(x, y)  # the first part takes the frame's parameters; `b` starts unbound
    assert is_end(middle) and middle[0] is END
    assert middle[4] is UNBOUND
    torch.testing.assert_close(rest(*middle[1:]), fn(x, y))


class BreakingBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.second = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.first(x).relu()
        LOG.append(h.shape[0])
        scale = len(h.tolist())
        return self.second(h) / (1 + scale)


def test_break_in_module_forward_splits_the_forward():
    torch.manual_seed(0)
    module = BreakingBlock()
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(module, backend=backend)
    for _ in range(2):
        x = torch.randn(2, 4)
        LOG.clear()
        expected = module(x)
        eager_log = list(LOG)
        LOG.clear()
        torch.testing.assert_close(compiled(x), expected)
        assert LOG == eager_log
    assert len(backend.graphs) == 2 and len(compiled.graph_breaks) == 1


def test_module_with_hooks_runs_hooks_eagerly_and_forward_compiled_on_a_break():
    module = BreakingBlock()
    calls = []
    module.register_forward_hook(lambda mod, args, out: calls.append(1))
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(module, backend=backend)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), module(x))
    assert len(calls) == 2  # the hook ran once per call
    # the forward is split at its break: compiled before and after it, the part after
    # named as torch.compile names its resume function
    line = inspect.getsourcelines(BreakingBlock.forward)[1] + 3  # the tolist() call
    assert [graph.meta["frame"] for graph in backend.graphs] == [
        "BreakingBlock.forward",
        f"BreakingBlock.torch_dynamo_resume_in_forward_at_{line}",
    ]


def callee_with_tail(x):
    a = x + 1
    print("mid")
    return a * 3


def other_callee(x):
    print("other")
    return x - 5


def caller(x):
    y = x.sin()
    z = callee_with_tail(y)
    return z.cos()


def test_callee_with_a_break_is_compiled_as_its_own_frame(capsys):
    global callee_with_tail
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(caller, backend=backend)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), caller(x))
    # caller before the call, callee before and after its print, caller after the call
    assert len(backend.graphs) == 4
    assert capsys.readouterr().out == "mid\n" * 4
    original = callee_with_tail
    try:
        callee_with_tail = other_callee  # the global is rebound: the new callee is called
        torch.testing.assert_close(compiled(x), caller(x))
    finally:
        callee_with_tail = original
    assert capsys.readouterr().out == "other\n" * 2


def test_eager_on_recompile_runs_new_inputs_eagerly_in_every_part():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(prints_between, backend=backend)
    compiled(torch.randn(3), torch.randn(3))
    graphs = len(backend.graphs)
    with dynamo_capture.set_stance("eager_on_recompile"):
        x, y = torch.randn(6), torch.randn(6)
        torch.testing.assert_close(compiled(x, y), prints_between(x, y))
    assert len(backend.graphs) == graphs


def test_split_artifacts_show_the_generated_bytecode():
    compiled = dynamo_capture.optimize(two_breaks, backend=CountingBackend())
    compiled(torch.randn(3))
    split = next(a for a in compiled.artifacts if a.graph_break_reason)
    assert "two_breaks" in split.entry_code and "RETURN_VALUE" in split.entry_code
