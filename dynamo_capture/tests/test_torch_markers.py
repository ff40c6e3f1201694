"""torch's own compiler markers honoured as their ember equivalents during capture.

torch.compiler.disable / torch._dynamo.disable -> a graph break at the call (runs eagerly),
torch.compiler.allow_in_graph -> not read (a private registry), assume_constant_result -> a constant,
torch.compiler.is_compiling() & co -> True while capturing, a torch.compile'd function -> inlined.
Tests use torch's decorators as the reference that sets the markers.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import dynamo_capture
from dynamo_capture import Unsupported


def compiled(fn, backend, fullgraph=False):
    return dynamo_capture.optimize(fn, backend=backend, fullgraph=fullgraph)


def _call_targets(backend):
    return [n.target for gm in backend.graphs for n in gm.graph.nodes if n.op == "call_function"]


def _eager_record(x, seen):
    seen.append(dynamo_capture.is_compiling())
    return x * 2


@pytest.mark.parametrize(
    "decorate",
    [
        torch.compiler.disable,
        torch._dynamo.disable,
        lambda fn: torch._dynamo.disable(fn, recursive=False),
        lambda fn: torch.compiler.disable(fn, reason="not traceable"),
    ],
    ids=["compiler", "dynamo", "non_recursive", "with_reason"],
)
def test_torch_disable_breaks_the_graph_and_runs_eagerly(backend, decorate):
    seen = []
    helper = decorate(_eager_record)

    def fn(x):
        return helper(x.sin(), seen) + 1

    x = torch.randn(4)
    torch.testing.assert_close(compiled(fn, backend)(x), x.sin() * 2 + 1)
    assert seen == [False]  # ran eagerly, not traced
    assert torch.mul not in _call_targets(backend) and "mul" not in str(backend.graphs)
    with pytest.raises(Unsupported, match="must run eagerly"):
        compiled(fn, backend, fullgraph=True)(x)


def test_torch_disable_reason_is_the_break_reason(backend):
    helper = torch.compiler.disable(_eager_record, reason="calls a C extension")

    def fn(x):
        return helper(x, [])

    explained = dynamo_capture.explain(fn)(torch.randn(2))
    assert "calls a C extension" in explained.break_reasons[0].reason


def test_torch_disabled_module_breaks_the_graph(backend):
    linear = torch.nn.Linear(3, 3)
    disabled = torch.compiler.disable(linear)

    def fn(x):
        return disabled(x.cos()).relu()

    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(fn, backend)(x), linear(x.cos()).relu())
    assert torch.nn.functional.linear not in _call_targets(backend)
    with pytest.raises(Unsupported, match="must run eagerly"):
        compiled(fn, backend, fullgraph=True)(x)


def _opaque(x):
    match x:  # a class pattern
        case torch.Tensor():
            return x * 3
    return x


torch.compiler.allow_in_graph(_opaque)


def test_torch_allow_in_graph_is_not_read_from_torchs_private_registry(backend):
    # torch.compiler.allow_in_graph leaves no attribute, only an entry in a private
    # registry of torch's: capture treats the function as any other (here: inlined,
    # no call of it in the graph), and its results stay eager's.
    assert not dynamo_capture.is_allowed_in_graph(_opaque)
    fn = compiled(lambda x: _opaque(x + 1) - 1, backend)
    x = torch.randn(4)
    torch.testing.assert_close(fn(x), _opaque(x + 1) - 1)
    assert _opaque not in _call_targets(backend)
    assert not dynamo_capture.is_allowed_in_graph(_eager_record)


_CALLS = []


@torch.compiler.assume_constant_result
def _torch_constant(k):
    _CALLS.append(k)
    return k * 10


@dynamo_capture.assume_constant_result
def _ember_constant():
    _CALLS.append("ember")
    return (2, torch.float64)


@pytest.mark.parametrize("marker", ["torch", "ember"])
def test_assume_constant_result_is_called_once_and_folded(backend, marker):
    _CALLS.clear()
    if marker == "torch":

        def fn(x):
            return x * _torch_constant(3)

        expected = 30.0
    else:

        def fn(x):
            scale, dtype = _ember_constant()
            return (x * scale).to(dtype)

        expected = 2.0
    runner = compiled(fn, backend, fullgraph=True)
    x = torch.ones(3)
    for _ in range(3):
        torch.testing.assert_close(runner(x), torch.full((3,), expected, dtype=runner(x).dtype))
    assert len(_CALLS) == 1 and len(backend.graphs) == 1
    assert dynamo_capture.is_constant_result(_ember_constant)
    assert dynamo_capture.is_constant_result(_torch_constant)


@torch.compiler.assume_constant_result
def _returns_tensor():
    return torch.ones(2)


def test_assume_constant_result_needs_constant_arguments_and_result(backend):
    with pytest.raises(Unsupported, match="not a Python constant"):
        compiled(lambda x: x + _returns_tensor(), backend, fullgraph=True)(torch.ones(2))
    with pytest.raises(Unsupported, match="known only when it runs"):
        compiled(lambda x: x + _torch_constant(x), backend, fullgraph=True)(torch.ones(2))
    runner = compiled(lambda x: x + _returns_tensor(), backend)
    torch.testing.assert_close(runner(torch.ones(2)), torch.full((2,), 2.0))


@pytest.mark.parametrize(
    "query",
    [
        torch.compiler.is_compiling,
        torch._dynamo.is_compiling,
        torch.compiler.is_dynamo_compiling,
        dynamo_capture.is_compiling,
    ],
    ids=["compiler", "dynamo", "dynamo_compiling", "ember"],
)
def test_torch_is_compiling_is_true_inside_capture(backend, query):
    def fn(x):
        if query():
            return x + 1
        return x - 1

    x = torch.zeros(2)
    torch.testing.assert_close(compiled(fn, backend, fullgraph=True)(x), x + 1)
    torch.testing.assert_close(fn(x), x - 1)


def test_torch_compiled_function_called_in_capture_is_inlined(backend):
    torch_backend_calls = []

    def torch_backend(gm, example_inputs):
        torch_backend_calls.append(gm)
        return gm.forward

    @torch.compile(backend=torch_backend)
    def inner(x):
        return x.sin() * 2

    def fn(x):
        return inner(x) + 1

    x = torch.randn(3)
    torch.testing.assert_close(compiled(fn, backend, fullgraph=True)(x), x.sin() * 2 + 1)
    assert torch.sin in _call_targets(backend) or "sin" in str(backend.graphs[0].code)
    assert torch_backend_calls == []


def test_ember_disable_accepts_torch_keywords():
    def f(x):
        """Doubles."""
        return x * 2

    wrapped = dynamo_capture.disable(f, recursive=True, wrapping=False, reason="why")
    assert dynamo_capture.disabled_reason(wrapped) == "why"
    assert wrapped.__name__ != "f" and not hasattr(wrapped, "__wrapped__")
    kept = dynamo_capture.disable(recursive=False, wrapping=True)(f)
    assert kept.__name__ == "f" and kept.__doc__ == "Doubles."
    with pytest.raises(TypeError, match="recursive must be True or False"):
        dynamo_capture.disable(f, recursive="yes")
    with pytest.raises(TypeError, match="wrapping must be True or False"):
        dynamo_capture.disable(f, wrapping="no")
    with pytest.raises(TypeError, match="reason must be None or a str"):
        dynamo_capture.disable(f, reason=3)


def _sigmoid_then_rest(x):
    y = torch.sigmoid(x)
    return y * 2 + torch.sin(x)


def _helper_cos(x):
    return x.cos() + 1


def _calls_helper(x):
    y = _helper_cos(x * 2)
    return y - 1


@pytest.mark.parametrize(
    ("fn", "target", "absent"),
    [(_sigmoid_then_rest, torch.sigmoid, torch.sigmoid), (_calls_helper, _helper_cos, "cos")],
)
def test_disallow_in_graph_breaks_at_the_call(backend, fn, target, absent):
    from dynamo_capture import registry

    dynamo_capture.disallow_in_graph(target)
    try:
        compiled = dynamo_capture.optimize(fn, backend=backend)
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), fn(x))
        targets = [node.target for gm in backend.graphs for node in gm.graph.nodes]
        assert absent not in targets and compiled.graph_breaks
        assert "disallow_in_graph" in str(compiled.graph_breaks[0])
    finally:
        registry._disallowed_in_graph.pop(id(target), None)


def graph_break():  # a user function that only shares the marker's name
    return None


def test_torch_graph_break_marker_is_recognised_and_a_namesake_is_not():
    from dynamo_capture.testing import CountingBackend
    from dynamo_capture.torch_markers import is_torch_graph_break

    assert is_torch_graph_break(torch._dynamo.graph_break)
    assert not is_torch_graph_break(graph_break)

    def with_marker(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    def with_namesake(x):
        x = x + 1
        graph_break()
        return x * 2

    for fn, frames in ((with_marker, 2), (with_namesake, 1)):
        backend = CountingBackend()
        x = torch.randn(3)
        torch.testing.assert_close(dynamo_capture.optimize(fn, backend=backend)(x), fn(x))
        assert backend.frame_count == frames


def test_torch_disable_decorators_are_recognised_without_their_module():
    import torch._dynamo  # the reference: tests may import torch's compiler stack

    from dynamo_capture.torch_markers import is_torch_disable_factory

    assert is_torch_disable_factory(torch.compiler.disable)
    assert is_torch_disable_factory(torch._dynamo.disable)

    def disable(fn, recursive=True, reason=None):  # a user's function of that name
        return fn

    assert not is_torch_disable_factory(disable)
    assert not is_torch_disable_factory(torch.compiler.reset)
