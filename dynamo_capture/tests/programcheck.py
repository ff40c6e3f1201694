"""Run a stateful program under ember's capture and under torch.compile, each on a fresh copy.

A program is a factory returning a dict: `fn` (what is compiled), `args` (a function
making the arguments of a call), and optionally `calls` (how many, default 2),
`between(i, fn)` (run before call i on that copy's objects: adding a hook, `.eval()`)
and `state(fn)` (read after the calls: a counter, a buffer). Each side (eager, ember,
torch.compile) gets its own copy of the program, so the modules and counters a program
changes are its own. `check_program_like_torch` asserts ember's results (and exceptions)
and state equal eager's, and its graph and op counts equal torch.compile's.
torch.compile is only the reference here; capture never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same

Program = Callable[[], dict[str, Any]]


def _run(program: Program, compile_fn: Callable[[Any], Any]) -> tuple[list[Any], Any]:
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


def _assert_same_results(got: list[Any], expected: list[Any]) -> None:
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
        _run(program, lambda fn: torch.compile(fn, backend=counter, **settings))
    finally:
        torch._dynamo.reset()
    return counter.frame_count, counter.op_count


def check_program_like_torch(
    program: Program, compile_fn: Callable[..., Any] | None = None, **settings: Any
) -> CountingBackend:
    """Ember's results and state equal eager's; its graph and op counts equal
    torch.compile's. `compile_fn(fn, backend=..., **settings)` compiles with ember
    (dynamo_capture.optimize unless given)."""
    compile_fn = compile_fn or dynamo_capture.optimize
    expected, expected_state = _run(program, lambda fn: fn)
    counter = CountingBackend()
    got, got_state = _run(program, lambda fn: compile_fn(fn, backend=counter, **settings))
    _assert_same_results(got, expected)
    assert_same(got_state, expected_state)
    frames, op_count = torch_program_counts(program, **settings)
    if (counter.frame_count, counter.op_count) != (frames, op_count) and torch.__version__ < "2.13":
        pytest.skip(f"torch.compile {torch.__version__} counts differently from 2.13")
    assert counter.frame_count == frames, f"graphs: ember {counter.frame_count}, torch {frames}"
    assert counter.op_count == op_count, f"ops: ember {counter.op_count}, torch {op_count}"
    return counter
