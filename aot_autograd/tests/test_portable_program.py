"""aot_graph's cache hook (aot_autograd.portable): a stored program is wrapped in the run
time without tracing; its description survives JSON, symbolic sizes and what tracing
assumed of them included."""

from __future__ import annotations

import json

import torch

from aot_autograd import aot_graph
from aot_autograd.portable import (
    CompiledParts,
    assumptions_from_record,
    assumptions_record,
    program_from_record,
    program_record,
)


class DictCache:
    """Keeps compiled parts by variant, the program through its JSON description."""

    def __init__(self) -> None:
        self.parts: dict = {}
        self.lookups = 0

    def lookup(self, variant):
        self.lookups += 1
        return self.parts.get(variant)

    def store(self, variant, parts):
        record = json.loads(json.dumps(program_record(parts.program)))
        assumptions = json.loads(json.dumps(assumptions_record(parts.assumptions)))
        self.parts[variant] = CompiledParts(
            program_from_record(record),
            parts.forward,
            parts.backward,
            parts.dependencies,
            parts.saved_strides,
            assumptions_from_record(assumptions),
        )


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count.add_(1)  # a mutated buffer: copied back by the run time
        y = self.linear(x)
        return y.relu(), x.view(-1)  # an output aliasing an input


def _compile(net, x, cache, compiled_graphs):
    gm = torch.fx.symbolic_trace(net)

    def compiler(graph, inputs):
        compiled_graphs.append(graph)
        return graph

    return aot_graph(gm, [x], fw_compiler=compiler, cache=cache)


def test_cached_program_runs_without_tracing_and_matches():
    torch.manual_seed(0)
    net, x = Net(), torch.randn(3, 4)
    cache, compiled = DictCache(), []
    first = _compile(net, x, cache, compiled)
    out, view = first(x)
    out.sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    assert len(compiled) == 2 and len(cache.parts) == 1
    net.zero_grad()
    second = _compile(net, x, cache, compiled)
    out2, view2 = second(x)
    out2.sum().backward()
    assert len(compiled) == 2  # nothing traced or compiled again
    assert torch.equal(out, out2)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, net.parameters()))
    assert view2.data_ptr() == x.data_ptr() and view2.shape == (12,)
    assert net.count.item() == 2


def test_cached_program_variants_are_apart():
    torch.manual_seed(0)
    net, x = Net(), torch.randn(3, 4)
    cache, compiled = DictCache(), []
    run = _compile(net, x, cache, compiled)
    run(x)
    with torch.no_grad():
        out, _ = run(x)
    assert len(cache.parts) == 2  # training and inference
    torch.testing.assert_close(out, net.linear(x).relu())


def _prefix(x, y):
    return x[: y.shape[0]] * y.sum(), x.view(-1)  # an output aliasing an input: symbolic view


def test_cached_symbolic_program_checks_what_tracing_assumed_at_every_call():
    from test_dynamic_shapes import symbolic_graph

    cache, compiled = DictCache(), []

    def compiler(graph, inputs):
        compiled.append(graph)
        return graph

    def compile_symbolic():
        graph = symbolic_graph(_prefix, [torch.randn(8, 3), torch.randn(5)], [[0], [0]])
        run = aot_graph(graph.gm, graph.example_inputs, fw_compiler=compiler, cache=cache)
        return graph, run

    compile_symbolic()
    assert len(compiled) == 1 and len(cache.parts) == 1
    (parts,) = cache.parts.values()
    assert parts.program.symbol_sources and parts.assumptions.conditions
    graph, run = compile_symbolic()
    assert len(compiled) == 1  # a hit: nothing traced
    for rows, n in [(9, 4), (6, 6), (4, 7), (3, 9)]:
        x, y = torch.randn(rows, 3), torch.randn(n)
        out, view = run(*graph.arguments([x, y]))
        torch.testing.assert_close(out, _prefix(x, y)[0])
        assert view.shape == (rows * 3,) and view.data_ptr() == x.data_ptr()
    assert run.aot.static_compiles == 2  # n > rows breaks the stored assumption: static


def test_program_description_keeps_every_field_of_programs_and_outputs():
    import dataclasses

    from aot_autograd.program import OutputSpec, TracedProgram

    def fn(x):  # an output without a derivative, a detached view and a conjugate view
        return x // 3, (x * 2).detach()[1:], torch.view_as_complex(x.view(-1, 2)).conj()

    x = torch.randn(4, 2, requires_grad=True)
    captured = []

    def compiler(gm, example_inputs):
        return gm

    gm = torch.fx.symbolic_trace(fn)
    cache = DictCache()
    run = aot_graph(gm, [x], fw_compiler=compiler, bw_compiler=compiler, cache=cache)
    expected = fn(x)
    actual = run(x)
    for got, want in zip(actual, expected):
        assert got.requires_grad == want.requires_grad and got.is_conj() == want.is_conj()
    for parts in cache.parts.values():
        program = parts.program
        captured.append(program)
        assert program.missing_derivatives  # floor_divide's eager error kept
        assert any(spec.conj for spec in program.outputs)
    assert captured
    loaded = aot_graph(gm, [x], fw_compiler=compiler, bw_compiler=compiler, cache=cache)(x)
    for got, want in zip(loaded, expected):  # the run time built from the stored description
        assert got.requires_grad == want.requires_grad and got.is_conj() == want.is_conj()
        torch.testing.assert_close(got, want)
    names = {f.name for f in dataclasses.fields(TracedProgram)}
    assert "missing_derivatives" in names and "conj" in {
        f.name for f in dataclasses.fields(OutputSpec)
    }


def test_cached_program_keeps_value_assertions_of_one_hot():
    import pytest

    def fn(t):
        return torch.nn.functional.one_hot(t, num_classes=3) * 2

    gm = torch.fx.symbolic_trace(fn)
    cache, compiled = DictCache(), []

    def compiler(graph, inputs):
        compiled.append(graph)
        return graph

    t = torch.tensor([0, 2, 1])
    aot_graph(gm, [t], fw_compiler=compiler, cache=cache)(t)
    (parts,) = cache.parts.values()
    assert [a.message for a in parts.program.value_assertions.values()] == [
        "Class values must be non-negative.",
        "Class values must be smaller than num_classes.",
    ]
    loaded = aot_graph(gm, [t], fw_compiler=compiler, cache=cache)
    assert len(compiled) == 1  # the program came from its stored description
    torch.testing.assert_close(loaded(t), fn(t))
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        loaded(torch.tensor([0, 3, 1]))
