"""Run a stateful program under ember's capture and under torch.compile, each on a fresh copy.

A program is a factory returning a dict: `fn` (what is compiled), `args` (a function
making the arguments of a call), and optionally `calls` (how many, default 2),
`between(i, fn)` (run before call i on that copy's objects: adding a hook, `.eval()`)
and `state(fn)` (read after the calls: a counter, a buffer). Each side (eager, ember,
torch.compile) gets its own copy of the program, so the modules and counters a program
changes are its own. `check_program_like_torch` asserts ember's results (and exceptions)
and state equal eager's, and its graph and op counts equal torch.compile's;
`check_program_like_eager` is its first half alone (where torch.compile's own values or
counts differ from eager's). `program_table()` gives a corpus its table of programs and
the decorator registering a factory in it by name.
torch.compile is only the reference here; capture never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torchcheck import REFERENCE_TORCH

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same

Program = Callable[[], dict[str, Any]]


def program_table() -> tuple[dict[str, Program], Callable[[Program], Program]]:
    """A corpus's table of programs, by name, and the decorator registering a factory in it."""
    programs: dict[str, Program] = {}

    def program(factory: Program) -> Program:
        programs[factory.__name__] = factory
        return factory

    return programs, program


def run_program(program: Program, compile_fn: Callable[[Any], Any]) -> tuple[list[Any], Any]:
    """A fresh copy of `program` compiled by `compile_fn` (`lambda fn: fn` for eager) and
    called: each call's ("value", result) or ("error", exception type), and its state."""
    spec = program()
    fn, between, state = spec["fn"], spec.get("between"), spec.get("state")
    compiled = compile_fn(fn)
    results: list[Any] = []
    for index in range(spec.get("calls", 2)):
        if between is not None:
            between(index, fn)
        torch.manual_seed(0)
        arguments = spec["args"]()
        try:
            results.append(("value", compiled(*arguments)))
        except Exception as error:  # noqa: BLE001 - compared with eager's
            results.append(("error", type(error)))
    return results, state(fn) if state is not None else None


def assert_same_results(got: list[Any], expected: list[Any]) -> None:
    """Two `run_program` results agree call by call: the same values or exception types."""
    assert len(got) == len(expected)
    for (got_kind, got_value), (kind, value) in zip(got, expected, strict=True):
        assert got_kind == kind, f"{got_kind}: {got_value!r}; eager {kind}: {value!r}"
        if kind == "error":
            assert got_value is value
        else:
            assert_same(got_value, value)


def torch_program_counts(program: Program, **settings: Any) -> tuple[int, int]:
    import torch._dynamo
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    try:
        run_program(program, lambda fn: torch.compile(fn, backend=counter, **settings))
    finally:
        torch._dynamo.reset()
    return counter.frame_count, counter.op_count


def check_program_like_torch(
    program: Program, compile_fn: Callable[..., Any] | None = None, **settings: Any
) -> CountingBackend:
    """Ember's results and state equal eager's; its graph and op counts equal
    torch.compile's. `compile_fn(fn, backend=..., **settings)` compiles with ember
    (dynamo_capture.optimize unless given)."""
    counter = check_program_like_eager(program, compile_fn, **settings)
    frames, op_count = torch_program_counts(program, **settings)
    same = (counter.frame_count, counter.op_count) == (frames, op_count)
    if not same and torch.__version__ < REFERENCE_TORCH:
        pytest.skip(f"torch.compile {torch.__version__} counts differently from {REFERENCE_TORCH}")
    assert counter.frame_count == frames, f"graphs: ember {counter.frame_count}, torch {frames}"
    assert counter.op_count == op_count, f"ops: ember {counter.op_count}, torch {op_count}"
    return counter


def check_program_like_eager(
    program: Program, compile_fn: Callable[..., Any] | None = None, **settings: Any
) -> CountingBackend:
    """Ember's results (and exceptions) and state equal eager's, with no torch.compile
    counts to compare; the CountingBackend of ember's graphs is returned.
    `compile_fn(fn, backend=..., **settings)` compiles with ember
    (dynamo_capture.optimize unless given)."""
    compile_fn = compile_fn or dynamo_capture.optimize
    expected, expected_state = run_program(program, lambda fn: fn)
    counter = CountingBackend()
    got, got_state = run_program(program, lambda fn: compile_fn(fn, backend=counter, **settings))
    assert_same_results(got, expected)
    assert_same(got_state, expected_state)
    return counter
