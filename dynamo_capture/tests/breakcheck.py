"""The check every program with a graph break goes through (shared by the break test files).

`check_break_program` runs the program eagerly and compiled (twice), and compares:
the result (values, types, requires_grad) or the exception raised, what it printed,
the LOG it appended to, the grad-mode and autocast state after it, the number of
graphs the backend got and of breaks recorded; and that the second call compiles
nothing new (every part, resume functions included, compiled once and reused).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same, clone_inputs

LOG: list = []


@dataclass(frozen=True)
class Program:
    """A program with breaks and what compiling it must give."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    graphs: int | None
    breaks: int
    grad: bool = True  # the grad mode it is called under

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", type(self.fn).__name__)


def _state() -> tuple[Any, ...]:
    return (
        torch.is_grad_enabled(),
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
    )


def _run(fn: Callable[..., Any], args: tuple[Any, ...], grad: bool) -> tuple[Any, ...]:
    LOG.clear()
    out = io.StringIO()
    result: Any = None
    error: BaseException | None = None
    with contextlib.redirect_stdout(out), torch.set_grad_enabled(grad):
        try:
            result = fn(*args)
        except Exception as raised:  # noqa: BLE001 - compared with eager's
            error = raised
        state = _state()
    return result, error, out.getvalue(), list(LOG), state


def check_break_program(program: Program, **settings: Any) -> dynamo_capture.CompiledCallable:
    """Compile `program.fn` (with `settings` for optimize), run it twice against eager,
    check counts and reuse."""
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(program.fn, backend=backend, **settings)
    before = _state()
    for call in range(2):
        eager_args, got_args = clone_inputs(program.args), clone_inputs(program.args)
        expected, eager_error, eager_text, eager_log, eager_state = _run(
            program.fn, eager_args, program.grad
        )
        got, error, text, log, state = _run(compiled, got_args, program.grad)
        if eager_error is not None:
            assert type(error) is type(eager_error) and str(error) == str(eager_error)
        else:
            assert error is None, f"compiled raised {error!r}"
            assert_same(got, expected)
        assert_same(got_args, eager_args)
        assert (text, log) == (eager_text, eager_log)
        assert state == eager_state, "grad/autocast state inside the call's block differs"
        assert _state() == before, "the compiled call left the global state changed"
        if call == 0:
            graphs, breaks = len(backend.graphs), len(compiled.graph_breaks)
            entries = [len(part.entries) for part in compiled.parts]
    assert compiled.graph_breaks, "every program here has a break"
    if program.graphs is not None:
        assert graphs == program.graphs, f"{graphs} graphs, expected {program.graphs}"
    assert breaks == program.breaks, f"{breaks} breaks, expected {program.breaks}"
    assert (len(backend.graphs), len(compiled.graph_breaks)) == (graphs, breaks), "recompiled"
    again = [len(part.entries) for part in compiled.parts]
    assert again == entries, "a part compiled again on the second call"
    assert len(compiled.entries) == 1
    return compiled
