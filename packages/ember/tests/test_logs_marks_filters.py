"""EMBER_LOGS / set_logs, mark_dynamic & co, and the guard-filter helpers."""

import logging
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

import ember
from guards import GuardFilterEntry, GuardFilterError, apply_guard_filter, marks_of
from guards.logs import ARTIFACTS, artifact_enabled, artifact_logger, parse_log_spec


def test_issue_artifacts_exist():
    for name in (
        "graph_breaks",
        "recompiles",
        "guards",
        "graph",
        "aot_graphs",
        "output_code",
        "schedule",
    ):
        assert name in ARTIFACTS


def test_parse_log_spec_levels_and_all():
    assert parse_log_spec("guards,+graph") == {"guards": logging.INFO, "graph": logging.DEBUG}
    assert set(parse_log_spec("all")) == set(ARTIFACTS)
    assert parse_log_spec(" recompiles , ") == {"recompiles": logging.INFO}


def test_parse_log_spec_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown artifact 'graphs'.*known: all, graph_breaks"):
        parse_log_spec("graphs")


def test_set_logs_turns_artifacts_on_and_off(capsys):
    ember.set_logs(guards=True, recompiles=logging.DEBUG)
    assert artifact_enabled("guards")
    assert not artifact_enabled("guards", logging.DEBUG)
    assert artifact_enabled("recompiles", logging.DEBUG)
    assert not artifact_enabled("graph")
    artifact_logger("guards").info("def guard(L, G): ...")
    artifact_logger("graph").info("hidden")
    err = capsys.readouterr().err
    assert "[ember.guards] def guard(L, G): ..." in err
    assert "hidden" not in err
    ember.set_logs()
    assert not artifact_enabled("guards")


def test_set_logs_rejects_unknown_artifacts_and_values():
    with pytest.raises(ValueError, match="unknown artifact"):
        ember.set_logs(graphs=True)
    with pytest.raises(TypeError, match="bool or a logging level"):
        ember.set_logs(guards="on")


def test_ember_logs_environment_variable_is_read_at_import():
    code = (
        "import logging, ember; from guards.logs import artifact_enabled as on;"
        "print(on('graph_breaks'), on('guards', logging.DEBUG), on('graph'))"
    )
    env = dict(os.environ, EMBER_LOGS="graph_breaks,+guards")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["True", "True", "False"], out.stderr


def test_mark_dynamic_records_ranges_and_normalizes_dims():
    x = torch.randn(4, 5, 6)
    ember.mark_dynamic(x, 0, min=2, max=64)
    ember.mark_dynamic(x, [-1])
    marks = marks_of(x)
    assert marks.dynamic[0].min == 2 and marks.dynamic[0].max == 64
    assert 2 in marks.dynamic and marks.dynamic[2].max is None


def test_maybe_mark_dynamic_and_mark_static():
    x = torch.randn(4, 5)
    ember.maybe_mark_dynamic(x, 1)
    assert marks_of(x).maybe_dynamic == {1}
    ember.mark_static(x, 1)
    assert marks_of(x).static == {1} and marks_of(x).maybe_dynamic == frozenset()
    with pytest.raises(ValueError, match="already marked static"):
        ember.mark_dynamic(x, 1)
    ember.mark_static(x)
    assert marks_of(x).static == {0, 1}


def test_marks_reject_bad_arguments():
    x = torch.randn(4, 5)
    with pytest.raises(IndexError, match="out of range"):
        ember.mark_dynamic(x, 2)
    with pytest.raises(TypeError, match="expects a torch.Tensor"):
        ember.mark_dynamic([1, 2], 0)
    with pytest.raises(ValueError, match="greater than max"):
        ember.mark_dynamic(x, 0, min=10, max=2)
    assert marks_of(torch.ones(1)).dynamic == {}


@dataclass(frozen=True)
class _Source:
    nn_module: bool = False
    builtin_nn_module: bool = False

    def is_nn_module(self):
        return self.nn_module

    def is_builtin_nn_module(self):
        return self.builtin_nn_module


@dataclass(frozen=True)
class _Guard:
    source: _Source


def _entry(name, guard_type, value=None, is_global=False, source=_Source()):
    return GuardFilterEntry(
        name, value is not None, value, guard_type, (), is_global, _Guard(source)
    )


ENTRIES = [
    _entry("L['x']", "TENSOR_MATCH", torch.ones(1)),
    _entry(
        "L['self'].weight",
        "TENSOR_MATCH",
        torch.nn.Parameter(torch.ones(1)),
        source=_Source(nn_module=True, builtin_nn_module=True),
    ),
    _entry("L['self'].block", "NN_MODULE", source=_Source(nn_module=True)),
    _entry("G['scale']", "EQUALS_MATCH", 2.0, is_global=True),
    _entry("G['W']", "TENSOR_MATCH", torch.ones(1), is_global=True),
    _entry("", "GLOBAL_STATE"),
    _entry("", "SHAPE_ENV"),
]


def test_filter_helpers_follow_torch_semantics():
    assert ember.skip_all_guards_unsafe(ENTRIES) == [False] * 7
    assert ember.skip_guard_on_globals_unsafe(ENTRIES) == [
        True,
        True,
        True,
        False,
        False,
        True,
        True,
    ]
    assert ember.keep_tensor_guards_unsafe(ENTRIES) == [
        True,
        False,
        False,
        False,
        True,
        False,
        False,
    ]
    assert ember.keep_tensor_guards_unsafe(ENTRIES, keep_parameters=True)[:2] == [True, True]
    assert ember.keep_portable_guards_unsafe(ENTRIES) == [
        True,
        True,
        False,
        False,
        False,
        True,
        True,
    ]
    assert ember.skip_guard_on_all_nn_modules_unsafe(ENTRIES) == [
        True,
        False,
        False,
        True,
        True,
        True,
        True,
    ]
    assert ember.skip_guard_on_inbuilt_nn_modules_unsafe(ENTRIES) == [
        True,
        False,
        True,
        True,
        True,
        True,
        True,
    ]


def test_apply_guard_filter_checks_the_answer():
    assert apply_guard_filter(ember.skip_all_guards_unsafe, ENTRIES) == [False] * 7
    with pytest.raises(GuardFilterError, match="returned 1 values for 7 guard entries"):
        apply_guard_filter(lambda entries: [True], ENTRIES)
    with pytest.raises(GuardFilterError, match="returned 1 \\(int\\) at index 0"):
        apply_guard_filter(lambda entries: [1] * len(entries), ENTRIES)
    with pytest.raises(GuardFilterError, match="returned NoneType"):
        apply_guard_filter(lambda entries: None, ENTRIES)


def test_guard_filter_fn_is_accepted_as_an_option():
    compiled = ember.compile(lambda x: x, options={"guard_filter_fn": ember.skip_all_guards_unsafe})
    assert ember.api.compiled_callable_of(compiled).guard_filter_fn is ember.skip_all_guards_unsafe
    with pytest.raises(ember.InvalidArgumentError, match="guard_filter_fn"):
        ember.compile(lambda x: x, options={"guard_filter_fn": "skip"})
