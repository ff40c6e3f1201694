"""Deferred compiles (`defer_recompiles=True`): a static entry made after a frame's
first runs its graph as captured on its first call and is compiled by the backend at
its second; where another entry's guards pass by then, that entry runs and the
deferred one is dropped uncompiled. Results equal eager's throughout; every guard is
still checked (a call no entry accepts still compiles)."""

from __future__ import annotations

import pytest
import torch

import dynamo_capture
from dynamo_capture.deferred_compile import DeferredCompile
from dynamo_capture.errors import BackendCompilerFailed
from dynamo_capture.testing import CountingBackend


def step(x, flag):
    y = torch.sin(x) * 2
    return y + 1 if flag else y - 1


def _compiled(backend, **settings):
    return dynamo_capture.optimize(step, backend=backend, defer_recompiles=True, **settings)


def test_recompiled_static_entry_compiles_at_its_second_call():
    backend = CountingBackend()
    compiled = _compiled(backend, dynamic=False)
    x, y = torch.randn(4), torch.randn(5)
    torch.testing.assert_close(compiled(x, True), step(x, True))
    assert backend.frame_count == 1  # a frame's first entry compiles at once
    torch.testing.assert_close(compiled(y, True), step(y, True))
    assert backend.frame_count == 1  # ran as captured
    assert isinstance(compiled.entries[1].compiled, DeferredCompile)
    torch.testing.assert_close(compiled(y, True), step(y, True))
    assert backend.frame_count == 2  # compiled at its second call
    entry = compiled.entries[1]
    assert not isinstance(entry.compiled, DeferredCompile)
    assert entry.artifacts.compiled is entry.compiled
    for _ in range(2):
        torch.testing.assert_close(compiled(y, True), step(y, True))
    assert backend.frame_count == 2 and len(compiled.entries) == 2


def test_deferred_entry_that_another_entry_covers_is_dropped():
    """As HF generate()'s first decode step: a static entry, then a symbolic one (sizes
    changed) whose guards accept the static entry's inputs too."""
    backend = CountingBackend()
    compiled = _compiled(backend)  # automatic dynamic
    a, b = torch.randn(4), torch.randn(5)
    calls = [(a, True), (a, False), (b, False), (a, True), (a, False), (b, False)]
    counts = []
    for x, flag in calls:
        torch.testing.assert_close(compiled(x, flag), step(x, flag))
        counts.append((backend.frame_count, len(compiled.entries)))
        if len(counts) == 2:
            deferred = compiled.entries[1].compiled
    # (a, False): deferred; (b, False): symbolic, compiled; (a, False) again: the symbolic
    # entry covers it, the deferred one is dropped without a compile
    assert counts == [(1, 1), (1, 2), (2, 3), (2, 3), (2, 2), (2, 2)]
    assert not any(isinstance(e.compiled, DeferredCompile) for e in compiled.entries)
    # a call racing the drop (its entry's guards passed first) runs the graph as captured
    assert deferred.pending
    (out,) = deferred(a)  # the graph's one input: x (the flag is a guarded constant)
    torch.testing.assert_close(out, step(a, False))
    assert backend.frame_count == 2


def test_symbolic_and_first_entries_are_not_deferred():
    backend = CountingBackend()
    compiled = _compiled(backend)
    for n in (4, 5, 6):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x, True), step(x, True))
    assert backend.frame_count == 2  # static, then symbolic at once
    assert not any(isinstance(e.compiled, DeferredCompile) for e in compiled.entries)


def test_off_by_default():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(step, backend=backend, dynamic=False)
    x = torch.randn(4)
    compiled(x, True)
    compiled(x, False)
    assert backend.frame_count == 2


def test_guards_still_checked_on_deferred_entries():
    backend = CountingBackend()
    compiled = _compiled(backend, dynamic=False)
    x = torch.randn(4)
    compiled(x, True)
    compiled(x, False)  # deferred
    torch.testing.assert_close(compiled(x, True), step(x, True))  # the first entry's
    torch.testing.assert_close(compiled(x.double(), False), step(x.double(), False))
    assert len(compiled.entries) == 3  # another dtype: a new entry, deferred too
    assert backend.frame_count == 1


def test_backend_failure_raises_at_the_second_call():
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        if len(seen) > 1:
            raise RuntimeError("no second graph")
        return gm.forward

    compiled = _compiled(backend, dynamic=False)
    x = torch.randn(4)
    compiled(x, True)
    torch.testing.assert_close(compiled(x, False), step(x, False))
    with pytest.raises(BackendCompilerFailed, match="no second graph"):
        compiled(x, False)


def test_in_place_write_through_a_deferred_entry():
    def write(x, buffer, flag):
        buffer.add_(x)
        return buffer * 2 if flag else buffer * 3

    compiled = dynamo_capture.optimize(
        write, backend=CountingBackend(), dynamic=False, defer_recompiles=True
    )
    x = torch.randn(3)
    mine, eager = torch.zeros(3), torch.zeros(3)
    for flag in (True, False, False, True, False):
        torch.testing.assert_close(compiled(x, mine, flag), write(x, eager, flag))
        torch.testing.assert_close(mine, eager)
