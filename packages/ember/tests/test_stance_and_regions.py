"""set_stance, disable, allow_in_graph, substitute_in_graph, is_compiling as users call them."""

import operator

import pytest
import torch

import ember
from dynamo_capture import current_stance, is_allowed_in_graph, substitute_for
from dynamo_capture.testing import CountingBackend


def add_one(x):
    return x + 1


def test_set_stance_as_a_function():
    ember.set_stance("force_eager")
    assert current_stance().name == "force_eager"
    ember.set_stance("default")
    assert current_stance().name == "default"


def test_set_stance_as_a_context_manager_restores():
    with ember.set_stance("fail_on_recompile"):
        assert current_stance().name == "fail_on_recompile"
        with ember.set_stance("force_eager"):
            assert current_stance().name == "force_eager"
        assert current_stance().name == "fail_on_recompile"
    assert current_stance().name == "default"


def test_set_stance_as_a_decorator_applies_only_inside():
    compiled = ember.compile(add_one)

    @ember.set_stance("force_eager")
    def evaluate(x):
        assert current_stance().name == "force_eager"
        return compiled(x)

    assert current_stance().name == "default"
    torch.testing.assert_close(evaluate(torch.zeros(1)), torch.ones(1))
    assert current_stance().name == "default"


def test_unknown_stance_lists_the_stances():
    with pytest.raises(ember.StanceError) as info:
        ember.set_stance("lazy")
    for name in ("default", "force_eager", "eager_on_recompile", "fail_on_recompile"):
        assert name in str(info.value)
    assert current_stance().name == "default"


def test_force_backend_only_with_default():
    with pytest.raises(ember.StanceError, match="force_backend is only accepted"):
        ember.set_stance("force_eager", force_backend="eager")
    with ember.set_stance("default", force_backend="eager"):
        assert current_stance().force_backend == "eager"


def test_eager_then_compile_runs_the_first_call_eagerly():
    backend = CountingBackend()
    compiled = ember.compile(add_one, backend=backend)
    with ember.set_stance("eager_then_compile"):
        torch.testing.assert_close(compiled(torch.zeros(1)), torch.ones(1))
        assert backend.graphs == []
        torch.testing.assert_close(compiled(torch.zeros(1)), torch.ones(1))
    assert len(backend.graphs) == 1


def test_force_eager_never_calls_the_backend():
    backend = CountingBackend()
    compiled = ember.compile(add_one, backend=backend)
    with ember.set_stance("force_eager"):
        compiled(torch.zeros(1))
    assert backend.graphs == []


def test_fail_on_recompile_raises_on_a_new_input_type():
    compiled = ember.compile(add_one, backend="eager")
    compiled(torch.zeros(1))
    with ember.set_stance("fail_on_recompile"):
        compiled(torch.zeros(1))
        with pytest.raises(ember.RecompileError):
            compiled(torch.zeros(1, dtype=torch.int64))


def test_disable_runs_eagerly_and_marks_the_function():
    @ember.disable
    def helper(x):
        return x * 2

    @ember.disable(reason="calls into a C library")
    def other(x):
        return x * 3

    torch.testing.assert_close(helper(torch.ones(1)), torch.full((1,), 2.0))
    assert helper.__name__ == "helper"
    assert helper.__ember_disabled__ == "disabled with ember.disable"
    assert other.__ember_disabled__ == "calls into a C library"


def test_recursive_disable_makes_compiled_callees_run_eagerly():
    backend = CountingBackend()
    compiled = ember.compile(add_one, backend=backend)

    @ember.disable
    def outer(x):
        return compiled(x)

    torch.testing.assert_close(outer(torch.zeros(1)), torch.ones(1))
    assert backend.graphs == []
    compiled(torch.zeros(1))
    assert len(backend.graphs) == 1


def test_non_recursive_disable_leaves_compiled_callees_compiled():
    backend = CountingBackend()
    compiled = ember.compile(add_one, backend=backend)
    outer = ember.disable(lambda x: compiled(x), recursive=False)
    torch.testing.assert_close(outer(torch.zeros(1)), torch.ones(1))
    assert len(backend.graphs) == 1


def test_disable_of_a_module_calls_it():
    relu = torch.nn.ReLU()
    disabled = ember.disable(relu)
    torch.testing.assert_close(disabled(torch.tensor([-1.0, 1.0])), torch.tensor([0.0, 1.0]))


def test_allow_in_graph_registers_and_returns_the_function():
    def fused(x):
        return x.sin() * 2

    assert ember.allow_in_graph(fused) is fused
    assert is_allowed_in_graph(fused)
    assert not is_allowed_in_graph(add_one)
    pair = ember.allow_in_graph([torch.sin, torch.cos])
    assert pair == [torch.sin, torch.cos]
    with pytest.raises(TypeError, match="expects a callable"):
        ember.allow_in_graph(3)


def test_substitute_in_graph_registers_a_stand_in_that_calls_the_original_eagerly():
    def original(a, b, /):
        return a.index(b)

    @ember.substitute_in_graph(original)
    def stand_in(a, b, /):
        for i, item in enumerate(a):
            if item == b:
                return i
        raise ValueError("not found")

    assert stand_in([1, 2, 3], 3) == 2
    assert substitute_for(original).traceable.__name__ == "stand_in"
    assert substitute_for(stand_in).original is original


def test_substitute_in_graph_checks_the_signature():
    def original(a, b):
        return a

    with pytest.raises(TypeError, match="does not match"):

        @ember.substitute_in_graph(original)
        def wrong(a):
            return a

    @ember.substitute_in_graph(original, skip_signature_check=True)
    def allowed(*args):
        return args[0]


def test_substitute_in_graph_rejects_a_second_stand_in_and_non_functions():
    @ember.substitute_in_graph(operator.countOf)
    def count_of(a, b, /):
        return sum(1 for item in a if item is b or item == b)

    with pytest.raises(ValueError, match="already has a stand-in"):
        ember.substitute_in_graph(operator.countOf)
    with pytest.raises(TypeError, match="expects a function"):
        ember.substitute_in_graph(int)
    with pytest.raises(TypeError, match="must be a Python function"):
        ember.substitute_in_graph(operator.concat)(len)


def test_is_compiling_is_false_eagerly():
    assert ember.is_compiling() is False
    assert ember.is_dynamo_compiling() is False
    assert ember.is_exporting() is False


def test_explain_reports_graphs_breaks_and_guards():
    def program(x):
        y = torch.sin(x) + 1
        return y * 2

    report = ember.explain(program)(torch.ones(3))
    torch.testing.assert_close(report.result, (torch.sin(torch.ones(3)) + 1) * 2)
    assert report.graph_count == 1
    assert report.graph_break_count == 0
    assert torch.sin in report.ops_per_graph[0]
    assert any("L['x']" in guard for guard in report.guards)
    with pytest.raises(TypeError):
        ember.explain(3)


def test_last_artifacts_before_and_after_a_compile():
    compiled = ember.compile(add_one, backend="eager")
    with pytest.raises(ember.EmberError, match="has not been compiled yet"):
        ember.last_artifacts(compiled)
    compiled(torch.zeros(1))
    artifacts = ember.last_artifacts(compiled)
    assert "add" in artifacts.graph_code
    assert "def " in artifacts.guard_code
    with pytest.raises(ember.InvalidArgumentError, match="was not returned by ember.compile"):
        ember.last_artifacts(add_one)
