"""Compiles run with the process's older objects frozen (guards.garbage_collection)."""

from __future__ import annotations

import gc

import torch

import ember


def test_capture_and_codegen_run_with_older_objects_frozen_and_match_eager(
    monkeypatch, unfrozen_heap
):
    import inductor_codegen

    seen = []
    compile_graph = inductor_codegen.compile_graph

    def recording_compile_graph(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        return compile_graph(*args, **kwargs)

    monkeypatch.setattr(inductor_codegen, "compile_graph", recording_compile_graph)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8, requires_grad=True)
    compiled = ember.compile(model)
    got = compiled(x)
    got.sum().backward()
    grad, x.grad = x.grad, None
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(grad, x.grad)
    assert seen and all(count > 0 for count in seen)  # forward and backward, frozen
    assert gc.get_freeze_count() == 0  # and unfrozen after
