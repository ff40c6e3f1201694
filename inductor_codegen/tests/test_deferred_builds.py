"""deferred_builds(): the kernels of several graphs built together, in one batch."""

from __future__ import annotations

import pytest
import torch
from graph_helpers import trace

from inductor_codegen import CppCompileError, compile_graph, deferred_builds
from inductor_codegen.codegen.cpp.build import DeferredKernel, KernelLibrary


def _first(x):
    return (x * 3).tanh().sum(1)


def _second(x):
    return torch.sigmoid(x - 1.5).cos() * x


def _counting_compiles(monkeypatch) -> list:
    calls = []
    original = KernelLibrary._compile

    def counted(self, keys, by_key, workers):
        calls.append(len(keys))
        return original(self, keys, by_key, workers)

    monkeypatch.setattr(KernelLibrary, "_compile", counted)
    return calls


def test_deferred_builds_compile_the_kernels_of_several_graphs_at_once(tmp_path, monkeypatch):
    calls = _counting_compiles(monkeypatch)
    x = torch.randn(5, 9)
    options = {"cache_dir": tmp_path}
    with deferred_builds():
        first = compile_graph(trace(_first, x), [x], options=options)
        second = compile_graph(trace(_second, x), [x], options=options)
        assert calls == []
    assert len(calls) == 1 and calls[0] >= 2
    torch.testing.assert_close(first(x), _first(x))
    torch.testing.assert_close(second(x), _second(x))
    # the wrappers call the built functions, not the stand-ins
    namespace = first._call.__globals__
    assert not any(isinstance(value, DeferredKernel) for value in namespace.values())


def test_deferred_kernel_called_inside_the_block_builds_the_batch(tmp_path, monkeypatch):
    calls = _counting_compiles(monkeypatch)
    x = torch.randn(4, 7)
    with deferred_builds():
        first = compile_graph(trace(_first, x), [x], options={"cache_dir": tmp_path})
        torch.testing.assert_close(first(x), _first(x))
        assert len(calls) == 1
    assert len(calls) == 1
    torch.testing.assert_close(first(x * 2), _first(x * 2))


def test_nested_deferred_builds_build_at_the_outermost_end(tmp_path, monkeypatch):
    calls = _counting_compiles(monkeypatch)
    x = torch.randn(3, 6)
    with deferred_builds():
        with deferred_builds():
            first = compile_graph(trace(_first, x), [x], options={"cache_dir": tmp_path})
        assert calls == []
        second = compile_graph(trace(_second, x), [x], options={"cache_dir": tmp_path})
    assert len(calls) == 1
    torch.testing.assert_close(first(x), _first(x))
    torch.testing.assert_close(second(x), _second(x))


def test_deferred_build_that_fails_raises_again_at_a_later_call(tmp_path):
    x = torch.randn(3, 5)
    options = {"cache_dir": tmp_path, "cxx": "g++", "cxx_flags": ("-shared", "-fno-such-option")}
    with pytest.raises(CppCompileError):
        with deferred_builds():
            compiled = compile_graph(trace(_first, x), [x], options=options)
    with pytest.raises(CppCompileError):
        compiled(x)


def test_context_copied_inside_a_block_builds_at_once_after_it(tmp_path, monkeypatch):
    # a backward compiled after the block, under the context its forward compiled in
    # (aot_autograd's compiler_in_this_context), builds its own kernels: not into the
    # block's batch, built already
    import contextvars

    calls = _counting_compiles(monkeypatch)
    x = torch.randn(6, 11)  # (sizes no other test here builds: not in the loaded kernels)
    with deferred_builds():
        copied = contextvars.copy_context()
    second = copied.run(compile_graph, trace(_second, x), [x], options={"cache_dir": tmp_path})
    assert len(calls) == 1
    namespace = second._call.__globals__
    assert not any(isinstance(value, DeferredKernel) for value in namespace.values())
    torch.testing.assert_close(second(x), _second(x))
