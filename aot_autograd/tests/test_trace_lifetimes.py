"""A traced program keeps none of the caller's tensors alive, and dies with its users.

Tracing real example inputs converts them to fakes in a FakeTensorMode made for the
trace; that mode's converter held each (real, fake) pair while each fake held the mode,
so the caller's tensors and the whole trace outlived the compiled function (a process
compiling many functions grew without bound).
"""

from __future__ import annotations

import gc
import weakref

import torch

from aot_autograd.program import trace_program


def _program(x, y):
    z = (x * y).exp()
    return z.tanh().sum(), z[1:]


def test_tracing_real_inputs_keeps_none_of_them_alive():
    x = torch.randn(5, 4, requires_grad=True)
    y = torch.randn(5, 4)
    program = trace_program(_program, [x, y])
    assert program.graph_module.graph.find_nodes(op="placeholder")
    inputs = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert [r() is None for r in inputs] == [True, True]
    del program


def test_a_dropped_trace_is_collected_with_its_fake_mode():
    graphs, modes = [], []
    for n in range(4):
        x = torch.randn(3 + n, 4, requires_grad=True)
        program = trace_program(_program, [x, torch.randn(3 + n, 4)])
        graphs.append(weakref.ref(program.graph_module))
        fakes = [
            node.meta["val"] for node in program.graph_module.graph.nodes
            if isinstance(node.meta.get("val"), torch.Tensor) and hasattr(node.meta["val"], "fake_mode")
        ]  # fmt: skip
        assert fakes, "the trace ran on fakes"
        modes.append(weakref.ref(fakes[0].fake_mode))
        del program, fakes, x
    gc.collect()
    assert [g() is None for g in graphs] == [True] * 4
    assert [m() is None for m in modes] == [True] * 4
