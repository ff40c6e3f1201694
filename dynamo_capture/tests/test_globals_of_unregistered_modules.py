"""Globals read by an inlined function whose module is not `sys.modules[its __name__]`.

A global of another module was guarded and reread (by a resumed frame's entry, or as a
dynamic float's graph input) through `sys.modules[name].__dict__`: for a module made with
`types.ModuleType` or loaded from a file spec without being registered, that raised
KeyError; where another module held the name, guards and graph inputs read that module's
global, a stale result (found by the fuzzer's `guards` profile, tools/fuzz). Such globals
are now read through the inlined function's `__globals__`.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend


def _library(name: str, factor: float) -> types.ModuleType:
    module = types.ModuleType(name)
    source = (
        "FACTOR = 0.5\nENABLED = True\n\ndef scale(x):\n    return x * FACTOR if ENABLED else x\n"
    )
    exec(source, module.__dict__)
    module.FACTOR = factor
    return module


@pytest.fixture
def registered_namesake():
    """A different module registered under the library's name (FACTOR 2.0)."""
    namesake = _library("ember_test_unregistered_lib", 2.0)
    sys.modules[namesake.__name__] = namesake
    yield namesake
    del sys.modules[namesake.__name__]


def _compile_over_factors(library, break_first: bool):
    scale = library.scale

    def apply(x):
        if break_first:
            torch._dynamo.graph_break()  # the call in a resumed frame
        return scale(x)

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(apply, backend=backend)
    x = torch.ones(3)
    for factor in (0.5, 1.5, 2.5, 1.5, 0.5):
        library.FACTOR = factor
        torch.testing.assert_close(compiled(x), apply(x))
    library.ENABLED = False
    torch.testing.assert_close(compiled(x), apply(x))
    return backend


@pytest.mark.parametrize("break_first", [False, True])
def test_global_of_an_unregistered_module_read_through_the_function(break_first):
    library = _library("ember_test_unregistered_lib", 0.5)
    assert library.__name__ not in sys.modules
    backend = _compile_over_factors(library, break_first)
    assert backend.frame_count >= 1  # compiled, not run eagerly


@pytest.mark.parametrize("break_first", [False, True])
def test_global_of_a_module_whose_name_another_module_holds(registered_namesake, break_first):
    library = _library(registered_namesake.__name__, 0.5)
    _compile_over_factors(library, break_first)
    assert registered_namesake.FACTOR == 2.0


def test_a_function_of_an_unregistered_module_made_in_the_frame_runs_eagerly():
    """No source reaches a closure capture made: its globals cannot be read again."""
    library = _library("ember_test_unregistered_lib", 0.5)
    exec(
        "def make():\n    def inner(x):\n        return x * FACTOR\n    return inner\n",
        vars(library),
    )
    make = library.make

    def apply(x):
        return make()(x)

    compiled = dynamo_capture.optimize(apply, backend=CountingBackend())
    for factor in (0.5, 1.5):
        library.FACTOR = factor
        torch.testing.assert_close(compiled(torch.ones(2)), apply(torch.ones(2)))
