"""Dynamic shapes: symbolic sizes (dynamic=True), automatic dynamic (None), static (False)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pytest
import torch

import dynamo_capture
from guards import mark_dynamic


def _pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2 + y).sin() - y.cos()


def _branchy(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > 4:
        return x.relu() * 3
    return x.tanh()


def _sweep(compiled: Callable[..., Any], fn: Callable[..., Any], sizes: Any) -> None:
    for size in sizes:
        x, y = torch.randn(size, 5), torch.randn(size, 5)
        torch.testing.assert_close(compiled(x, y), fn(x, y))


def _symint_inputs(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [
        node
        for node in gm.graph.find_nodes(op="placeholder")
        if isinstance(node.meta.get("val"), torch.SymInt)
    ]


def test_automatic_dynamic_recompiles_at_most_once_over_20_batch_sizes(backend):
    compiled = dynamo_capture.optimize(_pointwise, backend=backend)
    _sweep(compiled, _pointwise, range(2, 22))
    assert len(backend.graphs) <= 2
    assert _symint_inputs(backend.graphs[-1])


def test_dynamic_true_compiles_once_with_symint_inputs(backend):
    compiled = dynamo_capture.optimize(_pointwise, backend=backend, dynamic=True)
    _sweep(compiled, _pointwise, [7, 3, 12, 40, 2, 9])
    assert len(backend.graphs) == 1
    assert _symint_inputs(backend.graphs[0])


def test_dynamic_false_recompiles_per_size(backend):
    compiled = dynamo_capture.optimize(
        _pointwise, backend=backend, dynamic=False, recompile_limit=20
    )
    _sweep(compiled, _pointwise, [3, 4, 5, 6])
    assert len(backend.graphs) == 4
    assert not any(_symint_inputs(gm) for gm in backend.graphs)


def test_sizes_zero_and_one_stay_static(backend):
    compiled = dynamo_capture.optimize(_pointwise, backend=backend, dynamic=True)
    _sweep(compiled, _pointwise, [0, 1, 8, 6, 1, 0])
    assert len(backend.graphs) == 3


def test_mark_dynamic_makes_the_first_compile_symbolic(backend):
    compiled = dynamo_capture.optimize(_pointwise, backend=backend, dynamic=None)
    for size in [4, 9, 13]:
        x, y = torch.randn(size, 5), torch.randn(size, 5)
        mark_dynamic(x, 0)
        mark_dynamic(y, 0)
        torch.testing.assert_close(compiled(x, y), _pointwise(x, y))
    assert len(backend.graphs) == 1
    assert _symint_inputs(backend.graphs[0])


def test_guard_fails_on_a_violated_relation(backend):
    compiled = dynamo_capture.optimize(_branchy, backend=backend, dynamic=True)
    for size in [6, 8, 30]:
        x = torch.randn(size, 2)
        torch.testing.assert_close(compiled(x), _branchy(x))
    assert len(backend.graphs) == 1
    small = torch.randn(3, 2)
    reason = compiled.why_failed({"x": small}, compiled.frame.globals)
    assert reason != "guards pass"
    torch.testing.assert_close(compiled(small), _branchy(small))
    assert len(backend.graphs) == 2


def _view_by_size(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return x.reshape(n * 5) + y.flatten() + torch.arange(n * 5) // (n // 2)


@pytest.mark.parametrize("dynamic", [True, None])
def test_size_arithmetic_becomes_graph_nodes(dynamic, backend):
    compiled = dynamo_capture.optimize(
        _view_by_size, backend=backend, dynamic=dynamic, recompile_limit=20
    )
    _sweep(compiled, _view_by_size, [3, 4, 6, 7, 9, 12])
    assert len(backend.graphs) == (1 if dynamic else 2)
    targets = {node.target for node in backend.graphs[-1].graph.nodes}
    assert {operator.mul, operator.floordiv} <= targets


def _specializing_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A backend that bakes the example sizes into what it returns (like a static tracer)."""
    sizes = [tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)]

    def run(*args: Any) -> Any:
        got = [tuple(t.shape) for t in args if isinstance(t, torch.Tensor)]
        assert got == sizes, f"compiled for {sizes}, called with {got}"
        return gm.forward(*args)

    return run


_specializing_backend.supports_dynamic_shapes = False  # opts out: static graphs only


def _failing_on_symints(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    if any(not isinstance(t, torch.Tensor) for t in example_inputs):
        raise RuntimeError("this backend takes tensors only")
    return gm.forward


@pytest.mark.parametrize("backend", [_specializing_backend, _failing_on_symints])
def test_backends_without_symbolic_support_get_static_graphs(backend):
    compiled = dynamo_capture.optimize(
        _pointwise, backend=backend, dynamic=True, recompile_limit=20
    )
    _sweep(compiled, _pointwise, [3, 4, 5, 6])
    assert len(compiled.entries) == 4


def test_a_backend_declaring_symbolic_support_gets_the_symbolic_graph():
    graphs: list[torch.fx.GraphModule] = []

    def wrapping(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append(gm)
        return lambda *args: gm.forward(*args)

    wrapping.supports_dynamic_shapes = True
    compiled = dynamo_capture.optimize(_pointwise, backend=wrapping, dynamic=True)
    _sweep(compiled, _pointwise, [3, 4, 5, 6])
    assert len(graphs) == 1
    assert _symint_inputs(graphs[0])


def test_gpt2_over_20_sequence_lengths_recompiles_at_most_once(backend):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2Model(config).eval()
    compiled = dynamo_capture.optimize(model, backend=backend)
    with torch.no_grad():
        for length in range(3, 23):
            ids = torch.randint(0, 100, (2, length))
            got = compiled(ids).last_hidden_state
            torch.testing.assert_close(got, model(ids).last_hidden_state)
    assert len(backend.graphs) <= 2
    assert not any(entry.eager for entry in compiled.entries)
    assert _symint_inputs(backend.graphs[-1])


# ----- int inputs --------------------------------------------------------------------
def _scaled_view(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.reshape(n, -1) * n + 1


def _int_branch(x: torch.Tensor, n: int) -> torch.Tensor:
    if n > 3:
        return x * n
    return x - n


def test_changing_int_argument_becomes_symint_on_recompile(backend):
    compiled = dynamo_capture.optimize(_scaled_view, backend=backend)
    for n in (2, 3, 4, 6, 2, 3):
        x = torch.randn(12)
        torch.testing.assert_close(compiled(x, n), _scaled_view(x, n))
    assert len(backend.graphs) == 2, "one static compile, one with n symbolic"
    assert not _symint_inputs(backend.graphs[0])
    assert len(_symint_inputs(backend.graphs[1])) == 1


def test_int_argument_seen_once_stays_static(backend):
    compiled = dynamo_capture.optimize(_scaled_view, backend=backend)
    for _ in range(3):
        x = torch.randn(12)
        torch.testing.assert_close(compiled(x, 4), _scaled_view(x, 4))
    assert len(backend.graphs) == 1 and not _symint_inputs(backend.graphs[0])


def test_dynamic_true_makes_int_arguments_symbolic_from_the_start(backend):
    compiled = dynamo_capture.optimize(_scaled_view, backend=backend, dynamic=True)
    for n in (2, 3, 4, 6):
        x = torch.randn(12)
        torch.testing.assert_close(compiled(x, n), _scaled_view(x, n))
    assert len(backend.graphs) == 1
    assert "L['n']" in compiled.last_artifacts.guard_code


@pytest.mark.parametrize("first", [0, 1])
def test_int_arguments_zero_and_one_are_symbolic_too(backend, first):
    # as torch.compile(dynamic=True): an int argument is never specialized on 0 or 1
    # (only sizes are), nor does it share a size's symbol
    compiled = dynamo_capture.optimize(_int_branch, backend=backend, dynamic=True)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x, first), _int_branch(x, first))
    assert len(_symint_inputs(backend.graphs[0])) == 2  # x's size and n
    torch.testing.assert_close(compiled(x, 2), _int_branch(x, 2))
    assert len(backend.graphs) == 1, "n <= 3 holds: the same graph"
    torch.testing.assert_close(compiled(x, 5), _int_branch(x, 5))
    assert len(backend.graphs) == 2, "the other branch needs its own compile"


def test_guards_check_symbolic_int_relations(backend):
    compiled = dynamo_capture.optimize(_int_branch, backend=backend, dynamic=True)
    x = torch.randn(4)
    for n in (5, 7, 9):
        torch.testing.assert_close(compiled(x, n), _int_branch(x, n))
    assert len(backend.graphs) == 1, "n > 3 holds for every call"
    for n in (2, 3):  # the branch's condition fails: the guard must reject the entry
        torch.testing.assert_close(compiled(x, n), _int_branch(x, n))
    assert len(backend.graphs) == 2


def test_int_returned_from_the_frame_falls_back_to_static(backend):
    def passthrough(x: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        return x + n, n * 2

    compiled = dynamo_capture.optimize(passthrough, backend=backend, dynamic=True)
    for n in (3, 5):
        x = torch.randn(2)
        got, expected = compiled(x, n), passthrough(x, n)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]


class _PositionTable(torch.nn.Module):
    """A model holding a position-id buffer longer than any input (as BERT does)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("position_ids", torch.arange(64).unsqueeze(0))
        self.embed = torch.nn.Embedding(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = self.position_ids[:, : x.shape[1]]
        return x.unsqueeze(-1) + self.embed(positions)


def test_module_buffers_stay_static_with_dynamic_true(backend):
    model = _PositionTable()
    compiled = dynamo_capture.optimize(model, backend=backend, dynamic=True)
    for length in (5, 9, 17):
        x = torch.randn(2, length)
        torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 1
    assert len(_symint_inputs(backend.graphs[0])) == 2, "the input's two sizes only"


def _last_dim_sum(x):
    return x.sum(-1) * 2


def test_rank_change_makes_every_dim_dynamic_like_torch():
    from torchcheck import check_like_torch

    shapes = iter([(2,), (2, 3), (2, 3, 4), (5, 3)] * 2)
    check_like_torch(_last_dim_sum, lambda: (torch.randn(*next(shapes)),), calls=4)
