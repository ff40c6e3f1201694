"""Custom torch.autograd.Functions through ember.compile on every backend: values and
gradients equal eager's (the user's backward runs, not a derivative ember works out),
one graph where torch.compile has one."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import pathlib
import sys

import pytest
import torch

import dynamo_capture
import ember
from dynamo_capture.testing import assert_same, clone_inputs
from ember.backends import lookup_backend


def _programs():
    """dynamo_capture's program table, loaded by path (its tests folder stays off
    sys.path: its conftest would shadow this package's)."""
    path = pathlib.Path(__file__).parents[3] / "dynamo_capture" / "tests"
    spec = importlib.util.spec_from_file_location(
        "autograd_function_programs", path / "autograd_function_programs.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


programs = _programs()

BACKENDS = ["eager", "aot_eager", "inductor"]
_ALL = programs.CAPTURED + programs.INLINED + programs.BROKEN


def _first(value):
    return value[0] if isinstance(value, tuple) else value


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("fn", "make_args"), _ALL, ids=[fn.__name__ for fn, _ in _ALL])
def test_autograd_function_values_and_gradients_match_eager(backend, fn, make_args):
    programs.check_values_and_gradients(ember.compile(fn, backend=backend), fn, make_args)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_function_inference_matches_eager(backend):
    def fn(x):
        return programs.Square.apply(x.sin()) + programs.StraightThroughRound.apply(x)

    x = torch.randn(4, 3)
    torch.testing.assert_close(ember.compile(fn, backend=backend)(x), fn(x))


def _counting(name):
    inner = lookup_backend(name)
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return inner(gm, example_inputs)

    for attribute in ("takes_function_transforms", "takes_batching_nodes", "takes_float_inputs"):
        if hasattr(inner, attribute):
            setattr(counting, attribute, getattr(inner, attribute))
    return counting, graphs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("fn", "make_args"), programs.CAPTURED, ids=[fn.__name__ for fn, _ in programs.CAPTURED]
)
def test_autograd_function_is_one_graph_on_every_backend(backend, fn, make_args):
    counting, graphs = _counting(backend)
    with contextlib.redirect_stdout(io.StringIO()):
        dynamo_capture.optimize(fn, backend=counting)(*make_args())
    assert len(graphs) == 1
    names = [getattr(node.target, "__name__", "") for node in graphs[0].graph.nodes]
    assert any(name.startswith("autograd_function_apply_") for name in names)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("fn", "make_args"), _ALL, ids=[fn.__name__ for fn, _ in _ALL])
def test_autograd_function_without_gradients_matches_eager(backend, fn, make_args):
    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):
        args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in make_args())
        with contextlib.redirect_stdout(io.StringIO()):
            assert_same(compiled(*clone_inputs(args)), fn(*clone_inputs(args)))
