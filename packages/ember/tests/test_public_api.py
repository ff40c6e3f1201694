"""The umbrella's public surface: every name exported, documented, with torch.compile's shape."""

import inspect

import pytest

import ember

ISSUE_SURFACE = [
    "compile",
    "list_backends",
    "register_backend",
    "set_stance",
    "allow_in_graph",
    "substitute_in_graph",
    "disable",
    "reset",
    "is_compiling",
    "is_dynamo_compiling",
    "is_exporting",
    "explain",
    "set_logs",
    "mark_dynamic",
    "mark_static",
    "maybe_mark_dynamic",
    "skip_guard_on_inbuilt_nn_modules_unsafe",
    "skip_guard_on_all_nn_modules_unsafe",
    "keep_tensor_guards_unsafe",
    "skip_guard_on_globals_unsafe",
    "skip_all_guards_unsafe",
    "keep_portable_guards_unsafe",
]


@pytest.mark.parametrize("name", ISSUE_SURFACE)
def test_name_is_exported_and_documented(name):
    assert name in ember.__all__
    obj = getattr(ember, name)
    assert callable(obj)
    assert inspect.getdoc(obj), f"ember.{name} has no docstring"


def test_all_names_exist():
    for name in ember.__all__:
        assert hasattr(ember, name), name


def test_compile_signature_matches_torch_compile_keywords():
    parameters = inspect.signature(ember.compile).parameters
    assert list(parameters) == [
        "model",
        "fullgraph",
        "dynamic",
        "backend",
        "mode",
        "options",
        "disable",
        "inplace",  # ember's own, after torch.compile's keywords
    ]
    defaults = {name: p.default for name, p in parameters.items()}
    assert defaults == {
        "model": None,
        "fullgraph": False,
        "dynamic": None,
        "backend": "inductor",
        "mode": None,
        "options": None,
        "disable": False,
        "inplace": False,
    }
    for name in list(parameters)[1:]:
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY


def test_set_stance_signature_matches_torch():
    parameters = inspect.signature(ember.set_stance).parameters
    assert list(parameters) == ["stance", "skip_guard_eval_unsafe", "force_backend"]


def test_keep_tensor_guards_takes_keep_parameters():
    assert "keep_parameters" in inspect.signature(ember.keep_tensor_guards_unsafe).parameters


def test_version():
    assert ember.__version__ == "0.1.0"
