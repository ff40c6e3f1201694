"""Dynamic shapes: floats computed from sizes stay symbolic; loops over sizes specialize.

Each program runs at several sizes with dynamic=True: one graph, results equal
eager's, and the float arithmetic is graph nodes whose meta["val"] is a
torch.SymFloat (not a constant baked from the first size).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

import dynamo_capture
from guards import set_logs

SIZES = [3, 5, 8, 11]


def _scaled_scores(q: torch.Tensor) -> torch.Tensor:
    return (q @ q.transpose(-1, -2)) / (q.size(-1) ** 0.5)


def _sqrt_scale(x: torch.Tensor) -> torch.Tensor:
    return x * math.sqrt(x.shape[-1])


def _full_of_half(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return torch.full((n,), n / 2) + x.sum(1)


def _float_of_size(x: torch.Tensor) -> torch.Tensor:
    return x / float(x.shape[0]) + x.mean() * (x.shape[1] / x.shape[0])


def _floor_of_float(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return x.sum(0) * math.floor(n / 2) + x.mean(0) * int(n / 3) - round(n / 4)


def _ratio_squared(x: torch.Tensor) -> torch.Tensor:
    n, m = x.shape
    return x * (n / m) - (n * 0.25) ** 2


def _number_over_tensor(x: torch.Tensor) -> torch.Tensor:
    return (x.shape[1] * 1.5) / (x.abs() + 1)


def _negative_power(x: torch.Tensor) -> torch.Tensor:
    d = x.size(-1)
    return x * -(d**-0.5) + abs(-d / 3)


def _arange_times_reciprocal(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return torch.arange(n) * (1.0 / n) + x[:, 0]


def _cos_of_size(x: torch.Tensor) -> torch.Tensor:
    return x * math.cos(x.shape[0] / 10)


PROGRAMS: list[Callable[[torch.Tensor], torch.Tensor]] = [
    _scaled_scores,
    _sqrt_scale,
    _full_of_half,
    _float_of_size,
    _floor_of_float,
    _ratio_squared,
    _number_over_tensor,
    _negative_power,
    _arange_times_reciprocal,
    _cos_of_size,
]


def _symfloat_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [
        node
        for node in gm.graph.nodes
        if node.op == "call_function" and isinstance(node.meta.get("val"), torch.SymFloat)
    ]


def _run_sizes(compiled: Callable[..., Any], fn: Callable[..., Any], sizes: list[int]) -> None:
    for size in sizes:
        x = torch.randn(size, size + 1)
        torch.testing.assert_close(compiled(x), fn(x))


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda fn: fn.__name__.strip("_"))
def test_float_arithmetic_on_sizes_stays_symbolic(fn, backend):
    compiled = dynamo_capture.optimize(fn, backend=backend, dynamic=True, fullgraph=True)
    _run_sizes(compiled, fn, SIZES)
    assert len(backend.graphs) == 1, "one symbolic graph serves every size"
    assert _symfloat_nodes(backend.graphs[0]), "the float arithmetic is graph nodes"


def test_symbolic_float_nodes_use_sym_functions(backend):
    compiled = dynamo_capture.optimize(_sqrt_scale, backend=backend, dynamic=True)
    _run_sizes(compiled, _sqrt_scale, SIZES[:2])
    targets = {node.target for node in _symfloat_nodes(backend.graphs[0])}
    assert targets == {torch._sym_sqrt}


def test_automatic_dynamic_makes_floats_symbolic_on_recompile(backend):
    compiled = dynamo_capture.optimize(_full_of_half, backend=backend)
    _run_sizes(compiled, _full_of_half, SIZES)
    assert len(backend.graphs) == 2
    assert not _symfloat_nodes(backend.graphs[0])
    assert _symfloat_nodes(backend.graphs[1])


class _NoSymbolicFloats:
    """A backend that takes symbolic sizes but fails on a graph with a SymFloat node."""

    supports_dynamic_shapes = True

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        if _symfloat_nodes(gm):
            raise NotImplementedError("symbolic floats")
        self.graphs.append(gm)
        return gm.forward


def test_backend_without_symbolic_floats_gets_them_specialized_sizes_symbolic():
    backend = _NoSymbolicFloats()
    compiled = dynamo_capture.optimize(_scaled_scores, backend=backend, dynamic=True)
    for length in SIZES:  # the float comes from the last dim (fixed); the length varies
        q = torch.randn(2, length, 8)
        torch.testing.assert_close(compiled(q), _scaled_scores(q))
    assert len(backend.graphs) == 1
    placeholders = backend.graphs[0].graph.find_nodes(op="placeholder")
    assert any(isinstance(node.meta.get("val"), torch.SymInt) for node in placeholders)
    guard_code = compiled.last_artifacts.guard_code
    assert "== 8" in guard_code, "the float's size is guarded"


def test_backend_without_symbolic_floats_recompiles_when_the_float_changes():
    backend = _NoSymbolicFloats()
    compiled = dynamo_capture.optimize(_sqrt_scale, backend=backend, dynamic=True)
    _run_sizes(compiled, _sqrt_scale, SIZES)
    assert len(backend.graphs) == len(SIZES), "sqrt(size) specialized: one graph per size"


def _tensor_of_a_float(x: torch.Tensor) -> torch.Tensor:
    n, m = x.shape
    return torch.tensor(n / 3.0) * x + torch.as_tensor([m / 2, 1.0]).sum()


def test_tensor_built_from_a_float_specializes_on_sizes_not_float_equality(backend):
    compiled = dynamo_capture.optimize(_tensor_of_a_float, backend=backend, dynamic=True)
    for size in [3, 3, 5, 5, 7, 3]:
        x = torch.randn(size, 4)
        torch.testing.assert_close(compiled(x), _tensor_of_a_float(x))
    assert len(backend.graphs) == 3, "one graph per size, each reused"


def _branch_on_a_float(x: torch.Tensor) -> torch.Tensor:
    ratio = x.shape[0] / 4
    if ratio:
        x = x + 1
    if ratio > 1.5:
        return x * ratio
    return x - ratio


def test_branches_on_floats_guard_conditions_on_sizes(backend):
    compiled = dynamo_capture.optimize(_branch_on_a_float, backend=backend, dynamic=True)
    _run_sizes(compiled, _branch_on_a_float, [3, 5, 8, 11, 2])
    assert len(backend.graphs) == 2, "one graph per side of ratio > 1.5"
    assert all(_symfloat_nodes(gm) for gm in backend.graphs)


# ----- Python loops over symbolic sizes ---------------------------------------------------
def _loop_over_rows(x: torch.Tensor) -> torch.Tensor:
    total = x[0]
    for i in range(x.size(0)):
        total = total + x[i] * i
    return total * x.shape[1]


def _loop_over_pairs(x: torch.Tensor) -> torch.Tensor:
    out = x.sum(0)
    for i in range(1, x.shape[0] - 1, 2):
        out = out - x[i] * x[i + 1]
    return out


def _loop_over_tensor(x: torch.Tensor) -> torch.Tensor:
    out = x[0] * 0
    for row in x:
        out = out * 0.5 + row
    return out


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (_loop_over_rows, "range() of a symbolic size"),
        (_loop_over_pairs, "range() of a symbolic size"),
        (_loop_over_tensor, "iterating a tensor"),
    ],
)
def test_loop_with_a_symbolic_bound_specializes_and_recompiles(fn, reason, backend, capsys):
    compiled = dynamo_capture.optimize(fn, backend=backend, dynamic=True, recompile_limit=20)
    set_logs(dynamic=True)
    try:
        _run_sizes(compiled, fn, [3, 5, 3, 7, 5])
    finally:
        set_logs()
    assert len(backend.graphs) == 3, "one graph per distinct loop length"
    assert reason in capsys.readouterr().err
    # the loop's dim is static in each graph; the other dim stays symbolic
    symint_inputs = [
        node
        for node in backend.graphs[-1].graph.find_nodes(op="placeholder")
        if isinstance(node.meta.get("val"), torch.SymInt)
    ]
    assert len(symint_inputs) == 1
    reason = compiled.why_failed({"x": torch.randn(9, 10)}, compiled.frame.globals)
    assert reason != "guards pass"


# ----- text made from symbolic sizes ----------------------------------------------------
@pytest.mark.parametrize(
    "text_of",
    [
        lambda x: repr(x.shape),
        lambda x: "{}-{}".format(*x.shape),
        lambda x: "{n}".format(n=x.shape[0]),  # noqa: UP032 - the call under test
        lambda x: "%d/%s" % (x.shape[0], x.shape),  # noqa: UP031 - the operator under test
        lambda x: "{}".format(tuple(x.shape)),  # noqa: UP032 - the call under test
        lambda x: x.shape.__repr__(),
        lambda x: ascii(x.size()),
    ],
    ids=["repr", "format", "format_keyword", "percent", "format_tuple", "method", "ascii"],
)
def test_text_of_symbolic_sizes_names_their_values(text_of, backend):
    """Text folded from a shape holding symbolic sizes is made from their values
    (guarded), never naming the symbols ("torch.Size([s0, 4])")."""
    compiled = dynamo_capture.optimize(lambda x: (x + 1, text_of(x)), backend=backend, dynamic=True)
    for rows in (3, 5, 3):
        x = torch.randn(rows, 4)
        got = compiled(x)
        torch.testing.assert_close(got[0], x + 1)
        assert got[1] == text_of(x)
