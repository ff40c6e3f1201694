"""A compiled graph as plain data (inductor_codegen.portable): loaded back, it runs the same
code (bit for bit), with its constants, bounds checks and output nesting; what has no recipe
is not dumped."""

from __future__ import annotations

import json

import pytest
import torch
from graph_helpers import trace

from inductor_codegen import compile_graph
from inductor_codegen.codegen.cpp.build import KernelLibrary
from inductor_codegen.portable import (
    dump_compiled_graph,
    install_kernel_library,
    kernel_keys,
    kernel_libraries,
    load_compiled_graph,
)
from inductor_codegen.runtime import IndexOutOfRangeError


def _round_trip(compiled, cache_dir):
    record, tensors = dump_compiled_graph(compiled)
    record = json.loads(json.dumps(record))  # it is JSON-able
    KernelLibrary._loaded.clear()
    return load_compiled_graph(record, [t.clone() for t in tensors], cache_dir=cache_dir)


def test_portable_graph_loaded_runs_bit_for_bit(tmp_path):
    def fn(x, w):
        return (x @ w).tanh() + x.sum(1, keepdim=True), (x * 2).relu()

    x, w = torch.randn(6, 8), torch.randn(8, 8)
    compiled = compile_graph(trace(fn, x, w), [x, w], options={"cache_dir": tmp_path})
    loaded = _round_trip(compiled, tmp_path)
    for a, b in zip(compiled(x, w), loaded(x, w)):
        assert torch.equal(a, b)
    assert loaded.artifact("load")


def test_portable_graph_keeps_bounds_checks(tmp_path):
    def fn(table, index):
        return torch.nn.functional.embedding(index, table) * 2

    table, index = torch.randn(10, 4), torch.tensor([1, 2, 3])
    compiled = compile_graph(
        trace(fn, table, index), [table, index], options={"cache_dir": tmp_path}
    )
    loaded = _round_trip(compiled, tmp_path)
    torch.testing.assert_close(loaded(table, index), fn(table, index))
    with pytest.raises(IndexOutOfRangeError):
        loaded(table, torch.tensor([1, 12, 3]))


def test_portable_graph_kernels_move_between_caches(tmp_path):
    def fn(x):
        return (x * 3).sin().sum(0)

    x = torch.randn(5, 7)
    compiled = compile_graph(trace(fn, x), [x], options={"cache_dir": tmp_path / "a"})
    record, tensors = dump_compiled_graph(compiled)
    found = kernel_libraries(record, tmp_path / "a")
    assert set(found) == set(kernel_keys(record, tmp_path / "a"))
    for key, path in found.items():
        install_kernel_library(key, path.name, path.read_bytes(), tmp_path / "b")
    KernelLibrary._loaded.clear()
    loaded = load_compiled_graph(record, tensors, cache_dir=tmp_path / "b")
    assert torch.equal(loaded(x), compiled(x))
    assert not list((tmp_path / "b" / "cpp" / "lib").glob("*.cpp"))  # nothing compiled
    with pytest.raises(ValueError, match="checksum"):
        install_kernel_library("k", "0" * 64 + ".so", b"garbage", tmp_path / "b")


def test_portable_graph_without_a_recipe_is_not_dumped(tmp_path):
    x = torch.randn(4)
    compiled = compile_graph(trace(lambda x: x + 1, x), [x], options={"cache_dir": tmp_path})
    compiled.portable.namespace["odd"] = object()
    assert dump_compiled_graph(compiled) is None
    assert dump_compiled_graph(lambda x: x) is None


@pytest.mark.triton_interpret
def test_portable_triton_graph_loaded_in_another_cache_runs_bit_for_bit(tmp_path):
    pytest.importorskip("triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def fn(x, w):
        return (x @ w).tanh() + x.softmax(1), (x * 2).relu().sum(0)

    x, w = torch.randn(6, 8, device=device), torch.randn(8, 8, device=device)
    options = {"cache_dir": tmp_path / "a", "device_codegen": "triton"}
    compiled = compile_graph(trace(fn, x, w), [x, w], options=options)
    # loaded where the kernel module cache is empty: the modules are written from the record
    loaded = _round_trip(compiled, tmp_path / "b")
    assert loaded.kernel_count == compiled.kernel_count
    for a, b in zip(compiled(x, w), loaded(x, w)):
        assert torch.equal(a, b)
    record, _ = dump_compiled_graph(compiled)
    assert record["language"] == "Triton" and not kernel_keys(record)
