"""allow_in_graph, substitute_in_graph, disable; Unsupported with fullgraph; eager fallback; explain."""

from __future__ import annotations

import operator

import pytest
import torch

import dynamo_capture
from dynamo_capture import Unsupported


def compiled(fn, backend, fullgraph=True):
    return dynamo_capture.optimize(fn, backend=backend, fullgraph=fullgraph)


def opaque(x):
    match x:  # a class pattern
        case torch.Tensor():
            return x * 2
    return x


dynamo_capture.allow_in_graph(opaque)


def test_allow_in_graph_is_one_node(backend):
    fn = compiled(lambda x: opaque(x + 1) - 1, backend)
    x = torch.randn(4)
    torch.testing.assert_close(fn(x), opaque(x + 1) - 1)
    targets = [node.target for node in backend.graphs[0].graph.nodes]
    assert opaque in targets


def index_of_stand_in(a, b, /):
    for i, item in enumerate(a):
        if item is b or item == b:
            return i
    raise ValueError("sequence.index(x): x not in sequence")


index_of = dynamo_capture.substitute_in_graph(operator.indexOf)(index_of_stand_in)


def test_substitute_in_graph_is_traced(backend):
    def fn(x):
        return x * operator.indexOf([3, 4, 5], 5)

    torch.testing.assert_close(compiled(fn, backend)(torch.ones(2)), torch.full((2,), 2.0))


def test_substitute_signature_checked():
    def wrong(a, b, c):
        return 0

    with pytest.raises(TypeError, match="does not match"):
        dynamo_capture.substitute_in_graph(operator.countOf)(wrong)


def test_substitute_constant_fold(backend):
    import math

    @dynamo_capture.substitute_in_graph(
        math.gcd, can_constant_fold_through=True, skip_signature_check=True
    )
    def gcd(*integers):
        raise AssertionError("folded, never traced")

    fn = compiled(lambda x: x * math.gcd(12, 18), backend)
    torch.testing.assert_close(fn(torch.ones(1)), torch.full((1,), 6.0))


@dynamo_capture.disable
def disabled_helper(x):
    return x + 100


def uses_disabled(x):
    return disabled_helper(x) * 2


def test_disable_inside_fullgraph_raises(backend):
    with pytest.raises(Unsupported, match="must run eagerly"):
        compiled(uses_disabled, backend)(torch.ones(2))


def test_disable_inside_runs_the_call_eagerly_and_compiles_after_it(backend, capsys):
    from guards import artifact_logger

    artifact_logger("graph_breaks").setLevel("INFO")
    try:
        fn = compiled(uses_disabled, backend, fullgraph=False)
        torch.testing.assert_close(fn(torch.ones(2)), torch.full((2,), 202.0))
        torch.testing.assert_close(fn(torch.ones(2)), torch.full((2,), 202.0))
    finally:
        artifact_logger("graph_breaks").setLevel("WARNING")
    # the call runs eagerly; its result goes to the graph after it (`* 2`), as in torch
    assert len(backend.graphs) == 1
    assert [n.target for n in backend.graphs[0].graph.nodes if n.op == "call_function"] == [
        operator.mul
    ]
    assert len(fn.entries) == 1  # the split entry is cached: no second capture
    err = capsys.readouterr().err
    assert "graph break in uses_disabled" in err and "must run eagerly" in err


def data_dependent(x):
    y = x + 1
    if y.sum() > 0:
        return y
    return -y


def prints(x):
    print("hello")
    return x


def item_in_python(x):
    return x * x.sum().item()


def mutates_global_list(x):
    SEEN.append(x)
    return x


def _make_counter():
    count = 0

    def bumps_closure(x):
        nonlocal count
        count += 1
        return x * (count > 0)

    return bumps_closure


bumps_closure = _make_counter()


def test_a_closure_writing_its_own_cell_compiles_as_one_graph():
    counter = _make_counter()
    compiled = dynamo_capture.optimize(counter, backend=lambda gm, _: gm.forward, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x)
    torch.testing.assert_close(compiled(x), x)
    assert counter.__closure__[0].cell_contents == 2  # written after each graph


SEEN = []


def sets_attribute(x, obj):
    obj.cache = x
    return x


class Holder:
    pass


def boolean_mask(x):
    return x[x > 0].sum()


def nonzero_count(x):
    return torch.nonzero(x > 0).float().mean()


UNSUPPORTED = [
    (boolean_mask, (torch.randn(8),), "depends on tensor data"),
    (nonzero_count, (torch.randn(8),), "depends on tensor data"),
    (data_dependent, (torch.randn(3),), "data-dependent control flow"),
    (prints, (torch.randn(3),), "print"),
    (item_in_python, (torch.randn(3),), "item"),
]


@pytest.mark.parametrize("fn, args, words", UNSUPPORTED, ids=[u[0].__name__ for u in UNSUPPORTED])
def test_fullgraph_error_names_construct_file_and_line(fn, args, words, backend):
    with pytest.raises(Unsupported) as info:
        compiled(fn, backend)(*args)
    message = str(info.value)
    assert words in message
    assert __file__ in message
    line = fn.__code__.co_firstlineno
    assert any(loc.line > line for loc in info.value.where)


@pytest.mark.parametrize("fn, args, words", UNSUPPORTED, ids=[u[0].__name__ for u in UNSUPPORTED])
def test_without_fullgraph_result_is_eager(fn, args, words, backend):
    SEEN.clear()
    expected = fn(*args)
    SEEN.clear()
    got = compiled(fn, backend, fullgraph=False)(*args)
    torch.testing.assert_close(got, expected)


def test_append_to_global_list_is_replayed(backend):
    SEEN.clear()
    x = torch.randn(3)
    got = compiled(mutates_global_list, backend)(x)
    assert got is x
    assert len(SEEN) == 1 and SEEN[0] is x


def test_error_in_inlined_function_lists_call_chain(backend):
    def outer(x):
        return data_dependent(x) + 1

    with pytest.raises(Unsupported) as info:
        compiled(outer, backend)(torch.randn(3))
    names = [loc.function for loc in info.value.where]
    assert names[-2:] == ["outer", "data_dependent"]


def test_explain_reports_graphs_and_guards():
    def fn(x, y):
        return (x @ y).relu().sum(-1)

    report = dynamo_capture.explain(fn)(torch.randn(2, 3), torch.randn(3, 4))
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert any("L['x']" in guard for guard in report.guards)
    assert len(report.ops_per_graph[0]) == 3
    assert "Graph count: 1" in str(report)


def test_explain_reports_break_reason_with_line():
    report = dynamo_capture.explain(data_dependent)(torch.randn(3))
    assert report.graph_count == 1 and report.graph_break_count == 1  # y = x + 1, then the break
    location = report.break_reasons[0].location
    assert location.filename == __file__
    assert location.text == "if y.sum() > 0:"


def test_attribute_write_on_outside_object_is_replayed(backend):
    holder = Holder()
    fn = compiled(lambda x, obj: sets_attribute(x * 2, obj) + 1, backend)
    x = torch.randn(3)
    fn(x, holder)
    torch.testing.assert_close(holder.cache, x * 2)
    holder.cache = None
    fn(x + 1, holder)
    torch.testing.assert_close(holder.cache, (x + 1) * 2)
    assert "setattr(L['obj'], 'cache'" in fn.last_artifacts.entry_code


def test_compiled_callable_called_from_captured_code_is_inlined(backend):
    inner = compiled(lambda x: x.sin() * 2, backend)

    def outer(x):
        return inner(x) + 1

    outer_compiled = compiled(outer, backend)
    x = torch.randn(3)
    torch.testing.assert_close(outer_compiled(x), x.sin() * 2 + 1)
    assert len(backend.graphs) == 1 and not inner.entries
