"""The disk cache (hits, corrupt entries), the wrapper file, logging and the calling conventions."""

from __future__ import annotations

import logging

import pytest
import torch
from graph_helpers import trace

from guards import set_logs
from guards.cache_root import CacheWarning
from inductor_codegen import InductorError, compile_graph
from inductor_codegen.codegen.cpp.build import KernelLibrary


def _fn(x):
    return (x * 3).tanh().sum(1)


def test_second_compile_hits_the_cache(tmp_path):
    x = torch.randn(5, 9)
    gm = trace(_fn, x)
    compile_graph(gm, [x], options={"cache_dir": tmp_path})
    KernelLibrary._loaded.clear()
    compiled = compile_graph(gm, [x], options={"cache_dir": tmp_path})
    assert "'compiled': 0" in compiled.artifact("build")
    torch.testing.assert_close(compiled(x), _fn(x))


def test_corrupt_cache_entry_is_recompiled(tmp_path):
    x = torch.randn(4, 6)
    gm = trace(_fn, x)
    compile_graph(gm, [x], options={"cache_dir": tmp_path})
    for index in (tmp_path / "cpp" / "index").iterdir():
        index.write_text(str(tmp_path / "missing.so"))
    KernelLibrary._loaded.clear()
    with pytest.warns(CacheWarning, match="cpp/index/.* was faulty"):
        compiled = compile_graph(gm, [x], options={"cache_dir": tmp_path})
    assert "'compiled': 1" in compiled.artifact("build")
    torch.testing.assert_close(compiled(x), _fn(x))


def test_wrapper_is_a_real_file_and_boxed_call_clears_inputs(tmp_path):
    x = torch.randn(3, 3)
    compiled = compile_graph(trace(_fn, x), [x], options={"cache_dir": tmp_path})
    text = compiled.wrapper_path.read_text()
    assert "def call(args)" in text and "cpp_fused" in text
    args = [x]
    torch.testing.assert_close(compiled.call_boxed(args), _fn(x))
    assert args == []


def test_output_code_and_schedule_logs(tmp_path, caplog):
    x = torch.randn(2, 8)
    set_logs(output_code=True, schedule=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember"):
            logger = logging.getLogger("ember")
            logger.propagate, old = True, logger.propagate
            compile_graph(trace(_fn, x), [x], options={"cache_dir": tmp_path})
            logger.propagate = old
    finally:
        set_logs()
    text = caplog.text
    assert "def call(args)" in text and "schedule:" in text and 'extern "C"' in text


def test_unknown_option_lists_the_choices():
    x = torch.randn(2)
    with pytest.raises(InductorError, match="cache_dir"):
        compile_graph(trace(_fn, x.view(1, 2)), [x.view(1, 2)], options={"cahce_dir": "/tmp"})


def test_symbolic_graph_from_torch_tracer_compiles_for_all_sizes():
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(4, 3)
    gm = make_fx(lambda a: a.cos() * 2, tracing_mode="symbolic")(x)
    example = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    compiled = compile_graph(gm, example)
    assert compiled.kernel_count == 1 and not compiled.fallbacks
    for rows, cols in [(4, 3), (7, 5), (2, 9)]:
        y = torch.randn(rows, cols)
        torch.testing.assert_close(compiled(y), y.cos() * 2)


def test_as_boxed_follows_torch_convention(tmp_path):
    x = torch.randn(3, 4)
    boxed = compile_graph(trace(_fn, x), [x], options={"cache_dir": tmp_path}).as_boxed()
    assert boxed._boxed_call
    args = [x]
    torch.testing.assert_close(boxed(args), _fn(x))
    assert args == []
