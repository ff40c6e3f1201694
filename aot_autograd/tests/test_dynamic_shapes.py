"""Symbolic sizes: one trace serves every size, forward and backward equal to eager.

`symbolic_graph` does what capture does for a backend declaring
`supports_dynamic_shapes`: the Torch-level graph's placeholders hold fakes whose
dynamic dims are SymInts over one guards.ShapeEnv, followed by one SymInt
placeholder per size symbol; the example inputs are real tensors and the
symbols' ints. `SymbolicCall` feeds a compiled graph the ints of new inputs.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import test_opinfo as opinfo
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from aot_checks import RecordingCompiler as CheckingCompiler
from test_mutation_corpus import CORPUS, _clone
from test_mutation_corpus import _aliasing as _aliasing_pattern
from test_mutation_corpus import _grads as _corpus_grads
from torch import fx, nn

import prim_decomp
from aot_autograd import (
    SUPPORTS_DYNAMIC_SHAPES,
    AotAutogradError,
    AotCallable,
    AotConfig,
    SymbolicShapeError,
    aot_graph,
    default_partition,
    min_cut_rematerialization_partition,
)
from aot_autograd.symbolic import ShapeSnapshot
from guards import FakeTensorMode, LocalSource, ShapeEnv

PARTITIONERS = {"default": default_partition, "min_cut": min_cut_rematerialization_partition}


@dataclass
class SymbolicGraph:
    """A graph as capture hands it over with dynamic shapes, and how to call it."""

    gm: fx.GraphModule
    example_inputs: list
    names: list[str]
    bindings: list  # guards.SymbolBinding per SymInt placeholder

    def arguments(self, inputs: Sequence[Any]) -> list:
        """The tensors, then each symbol's int read from `inputs` where capture reads it."""
        by_name = dict(zip(self.names, inputs))
        ints = []
        for binding in self.bindings:
            source = binding.sources[0]
            tensor = by_name[source.source.local_name]
            read = tensor.size if source.prop == "size" else tensor.stride
            ints.append(int(read()[source.index]))
        return [*inputs, *ints]


def symbolic_graph(
    fn: Callable | nn.Module, inputs: Sequence[torch.Tensor], dynamic: Sequence[Sequence[int]]
) -> SymbolicGraph:
    """`fn` traced to a Torch-level graph whose `dynamic` dims (per input) are symbolic."""
    gm = fx.symbolic_trace(fn)
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    names = [node.name for node in placeholders]
    for node, x, dims in zip(placeholders, inputs, dynamic, strict=True):
        node.meta["val"] = mode.from_real(x, LocalSource(node.name), dynamic_dims=list(dims))
    bindings = []
    last = placeholders[-1]
    for binding, symint in env.graph_inputs():
        with gm.graph.inserting_after(last):
            last = gm.graph.placeholder(binding.name)
        last.meta["val"] = symint
        bindings.append(binding)
    gm.recompile()
    graph = SymbolicGraph(gm, [], names, bindings)
    graph.example_inputs = graph.arguments(inputs)
    return graph


class RecordingCompiler:
    """A graph compiler that runs the ATen graph eagerly and keeps every graph it got."""

    def __init__(self) -> None:
        self.graphs: list[fx.GraphModule] = []
        self.example_inputs: list[list] = []

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> Callable:
        self.graphs.append(gm)
        self.example_inputs.append(example_inputs)
        return gm


def _symint_placeholders(gm: fx.GraphModule) -> list[fx.Node]:
    return [
        n for n in gm.graph.find_nodes(op="placeholder") if isinstance(n.meta["val"], torch.SymInt)
    ]


def _has_symbolic_shape(gm: fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and any(
            isinstance(d, torch.SymInt) for d in value.shape
        ):
            return True
    return False


def _grads(outputs: Any, inputs: Sequence[torch.Tensor]) -> tuple:
    flat = [o for o in torch.utils._pytree.tree_leaves(outputs) if isinstance(o, torch.Tensor)]
    loss = sum((o.float() * torch.linspace(0.5, 1.5, o.numel()).view(o.shape)).sum() for o in flat)
    wanted = [x for x in inputs if x.requires_grad]
    return torch.autograd.grad(loss, wanted, allow_unused=True)


def _make_inputs(shapes: Sequence[tuple], requires_grad: Sequence[bool]) -> list[torch.Tensor]:
    return [
        torch.randn(s).requires_grad_(bool(g)) for s, g in zip(shapes, requires_grad, strict=True)
    ]


# -- programs: (function, shapes as functions of (batch, seq), dynamic dims, requires_grad) --------


def _pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2 + y).sin() - y.cos() * x.sigmoid()


def _reduction(x: torch.Tensor, y: torch.Tensor) -> tuple:
    return x.sum(1), (x * y).amax(0), x.mean(), x.var(1)


def _matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.gelu(x @ w) @ w.t()


def _softmax(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.softmax(-1) * y.log_softmax(1)


def _layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b).relu()


def _views(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    batch, seq = x.shape[0], x.shape[1]
    flat = x.reshape(batch * seq, -1) + y.view(-1, y.shape[-1])
    return flat.view(batch, seq, -1).transpose(0, 1).contiguous().flatten(1)[:, 1:] * 3


def _cat(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    both = torch.cat([x, y * 2], dim=1)
    first, second = both.split(x.shape[1], dim=1)
    return torch.stack([first.tanh(), second], dim=0).sum(-1)


def _attention(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    q, k, v = (x @ w).chunk(3, dim=-1)
    scores = q @ k.transpose(-2, -1) / 4.0
    mask = torch.ones_like(scores[0]).tril().bool()
    return scores.masked_fill(~mask, -1e9).softmax(-1) @ v


def _halves(x: torch.Tensor) -> torch.Tensor:
    pairs = x.reshape(x.shape[0] // 2, 2, -1)  # sizes known to divide exactly: s0 // 2, 2
    return (pairs * 3).sum(1).exp() + pairs[:, 0]


PROGRAMS = {
    "pointwise": (_pointwise, lambda b, s: [(b, s, 4), (b, s, 4)], [[0, 1], [0, 1]], [1, 1]),
    "reduction": (_reduction, lambda b, s: [(b, s), (b, s)], [[0, 1], [0, 1]], [1, 0]),
    "matmul": (_matmul, lambda b, s: [(b, s, 8), (8, 8)], [[0, 1], []], [1, 1]),
    "softmax": (_softmax, lambda b, s: [(b, s), (b, s)], [[0, 1], [0, 1]], [1, 1]),
    "layernorm": (_layernorm, lambda b, s: [(b, s, 8), (8,), (8,)], [[0, 1], [], []], [1, 1, 1]),
    "views": (_views, lambda b, s: [(b, s, 4), (b, s, 4)], [[0, 1], [0, 1]], [1, 1]),
    "cat": (_cat, lambda b, s: [(b, s), (b, s)], [[0, 1], [0, 1]], [1, 1]),
    "attention": (_attention, lambda b, s: [(b, s, 8), (8, 24)], [[0, 1], []], [1, 1]),
    "halves": (_halves, lambda b, s: [(2 * b, s)], [[0, 1]], [1]),
}
SIZES = [(3, 5), (2, 9), (6, 4)]


def _check_program(name: str, partition_fn: Callable, decompositions: Any = None) -> None:
    fn, shapes, dynamic, requires_grad = PROGRAMS[name]
    torch.manual_seed(0)
    first = _make_inputs(shapes(*SIZES[0]), requires_grad)
    graph = symbolic_graph(fn, first, dynamic)
    compiler = RecordingCompiler()
    compiled = aot_graph(
        graph.gm,
        graph.example_inputs,
        fw_compiler=compiler,
        partition_fn=partition_fn,
        decompositions=decompositions,
    )
    assert len(compiler.graphs) == 1, "the forward compiles before the first call"
    for batch, seq in SIZES:
        inputs = _make_inputs(shapes(batch, seq), requires_grad)
        got = compiled(*graph.arguments(inputs))
        expected = fn(*inputs)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(_grads(got, inputs), _grads(expected, inputs))
    assert len(compiler.graphs) == 2, "one trace serves every size"
    assert compiled.aot.static_compiles == 0
    forward, backward = compiler.graphs
    assert _symint_placeholders(forward) and _has_symbolic_shape(forward)
    assert _has_symbolic_shape(backward)
    assert any(isinstance(v, torch.SymInt) for v in compiler.example_inputs[0])


@pytest.mark.parametrize("partition", sorted(PARTITIONERS))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_traced_once_matches_eager_at_every_size(name, partition):
    _check_program(name, PARTITIONERS[partition])


@pytest.mark.parametrize("name", ["layernorm", "views", "attention"])
def test_decomposition_tables_run_on_symbolic_sizes(name):
    _check_program(name, min_cut_rematerialization_partition, prim_decomp.inductor_default)


def test_backward_gets_a_symint_input_for_each_symbol_its_shapes_use():
    fn, shapes, dynamic, requires_grad = PROGRAMS["softmax"]
    graph = symbolic_graph(fn, _make_inputs(shapes(3, 5), requires_grad), dynamic)
    compiler = RecordingCompiler()
    compiled = aot_graph(graph.gm, graph.example_inputs, fw_compiler=compiler)
    inputs = _make_inputs(shapes(3, 5), requires_grad)
    _grads(compiled(*graph.arguments(inputs)), inputs)  # the backward compiles at first use
    backward = compiler.graphs[1]
    provided = {n.meta["val"].node.expr for n in _symint_placeholders(backward)}
    used = set()
    for node in backward.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            for d in value.shape:
                if isinstance(d, torch.SymInt):
                    used |= d.node.expr.free_symbols
    assert used and used <= provided


def test_inference_graph_is_symbolic_too():
    fn, shapes, dynamic, _ = PROGRAMS["views"]
    graph = symbolic_graph(fn, _make_inputs(shapes(3, 5), [0, 0]), dynamic)
    compiler = RecordingCompiler()
    compiled = aot_graph(graph.gm, graph.example_inputs, fw_compiler=compiler)
    for batch, seq in SIZES:
        inputs = _make_inputs(shapes(batch, seq), [0, 0])
        torch.testing.assert_close(compiled(*graph.arguments(inputs)), fn(*inputs))
    assert len(compiler.graphs) == 1 and _symint_placeholders(compiler.graphs[0])


# -- mutations, aliasing, size outputs -------------------------------------------------------------


def _mutating(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    half = x.shape[1] // 2
    x[:, :half].mul_(2)
    y.add_(1)
    return x.sum(1) + y.mean()


def test_input_mutations_through_views_with_symbolic_sizes():
    graph = symbolic_graph(_mutating, [torch.randn(3, 6), torch.randn(3)], [[0, 1], [0]])
    compiled = aot_graph(graph.gm, graph.example_inputs, fw_compiler=RecordingCompiler())
    for batch, seq in SIZES:
        x, y = torch.randn(batch, seq), torch.randn(batch)
        x_eager, y_eager = x.clone(), y.clone()
        expected = _mutating(x_eager, y_eager)
        torch.testing.assert_close(compiled(*graph.arguments([x, y])), expected)
        torch.testing.assert_close((x, y), (x_eager, y_eager))
    assert compiled.aot.static_compiles == 0


def _aliasing(x: torch.Tensor) -> tuple:
    y = x * 2
    return x.view(-1), x.t(), y[:, 1:], y.transpose(0, 1), x.shape[0] * x.shape[1]


def test_aliased_outputs_and_size_outputs_follow_the_call_sizes():
    graph = symbolic_graph(_aliasing, [torch.randn(4, 6)], [[0, 1]])
    compiled = aot_graph(graph.gm, graph.example_inputs, fw_compiler=RecordingCompiler())
    for batch, seq in SIZES:
        x = torch.randn(batch, seq)
        got = compiled(*graph.arguments([x]))
        expected = _aliasing(x)
        torch.testing.assert_close(got, expected)
        assert got[0].data_ptr() == x.data_ptr() and got[1].stride() == expected[1].stride()
        assert got[2]._base is got[3]._base and got[2]._base is not None
        assert isinstance(got[4], int)


def _sizes_beside_a_decomposed_write(x):
    y = x.square()
    y.transpose(0, -1).copy_(y.transpose(0, -1).flip(0))
    return y, x.shape[0], x.shape[0] * x.shape[1]


def test_size_outputs_are_the_calls_after_decomposing_the_graph():
    # A graph holding ops of the decomposition table is traced again with it: a size it
    # returns (`x.shape[0]` handed to the frame's side effects) stayed the trace's SymInt
    # in the output, returned as `s0` at every call.
    graph = symbolic_graph(_sizes_beside_a_decomposed_write, [torch.randn(4, 6, 1)], [[0, 1]])
    compiled = aot_graph(
        graph.gm,
        graph.example_inputs,
        fw_compiler=RecordingCompiler(),
        decompositions=prim_decomp.inductor_default,
    )
    for batch, seq in SIZES:
        x = torch.randn(batch, seq, 1)
        got = compiled(*graph.arguments([x]))
        expected = _sizes_beside_a_decomposed_write(x)
        torch.testing.assert_close(got[0], expected[0])
        assert [type(v) for v in got[1:]] == [int, int] and tuple(got[1:]) == expected[1:]


class _BatchNormNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 8)
        self.norm = nn.BatchNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x)).relu()


@pytest.mark.parametrize("partition", sorted(PARTITIONERS))
def test_batchnorm_statistics_update_with_a_dynamic_batch(partition):
    torch.manual_seed(0)
    model = _BatchNormNet().train()
    reference = copy.deepcopy(model)
    graph = symbolic_graph(model, [torch.randn(5, 6)], [[0]])
    compiled = aot_graph(
        graph.gm,
        graph.example_inputs,
        fw_compiler=RecordingCompiler(),
        partition_fn=PARTITIONERS[partition],
    )
    for batch in (5, 3, 11, 7):
        x = torch.randn(batch, 6)
        got = compiled(*graph.arguments([x]))
        expected = reference(x)
        torch.testing.assert_close(got, expected)
        got.sum().backward()
        expected.sum().backward()
    torch.testing.assert_close(model.norm.running_mean, reference.norm.running_mean)
    torch.testing.assert_close(model.norm.running_var, reference.norm.running_var)
    assert int(model.norm.num_batches_tracked) == 4
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad)
    assert compiled.aot.static_compiles == 0


def _grown(t: Any, dims: list[int]) -> Any:
    """A new input like `t` with each of `dims` one larger (positive floats, 0/1 integers)."""
    if not isinstance(t, torch.Tensor) or not dims:
        return t
    shape = [size + 1 if d in dims else size for d, size in enumerate(t.shape)]
    if t.is_floating_point() or t.is_complex():
        return (torch.rand(shape, dtype=t.dtype) + 0.5).requires_grad_(t.requires_grad)
    return torch.randint(0, 2, shape, dtype=t.dtype)


def _corpus_call(compiled: Callable, fn: Callable, inputs: Any, grad: bool) -> None:
    eager_inputs, aot_inputs = _clone(inputs), _clone(inputs)
    expected = fn(*eager_inputs)
    actual = compiled(*pytree.tree_leaves(aot_inputs))
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(aot_inputs, eager_inputs)
    assert _aliasing_pattern(aot_inputs, actual) == _aliasing_pattern(eager_inputs, expected)
    if grad:
        torch.testing.assert_close(
            _corpus_grads(actual, aot_inputs), _corpus_grads(expected, eager_inputs)
        )


# out= tensors of a fixed size, resized by eager at other sizes: static compiles refuse them too
_RESIZING = {"out= into fresh tensors, two outs"}


@pytest.mark.parametrize("name,fn,make_inputs,grad", CORPUS, ids=[c[0] for c in CORPUS])
def test_mutation_corpus_traced_with_every_dim_symbolic(name, fn, make_inputs, grad):
    torch.manual_seed(0)
    inputs = make_inputs()
    flat, spec = pytree.tree_flatten(inputs)
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    dims = [
        [d for d, size in enumerate(t.shape) if size >= 2] if isinstance(t, torch.Tensor) else []
        for t in flat
    ]
    fakes = [
        mode.from_real(t, LocalSource(f"input{i}"), dynamic_dims=d)
        if isinstance(t, torch.Tensor)
        else t
        for i, (t, d) in enumerate(zip(flat, dims, strict=True))
    ]

    def flat_fn(*values: Any) -> Any:
        return fn(*pytree.tree_unflatten(list(values), spec))

    compiler = CheckingCompiler()
    compiled = AotCallable(
        flat_fn, fakes, AotConfig(compiler), shape_snapshot=ShapeSnapshot.of(env)
    )
    compiled.compile_symbolic(fakes)
    _corpus_call(compiled, fn, inputs, grad)
    assert compiled.static_compiles == 0
    grown = pytree.tree_unflatten([_grown(t, d) for t, d in zip(flat, dims)], spec)
    try:
        fn(*_clone(grown))
    except (RuntimeError, ValueError):
        return  # the program needs its sizes (a fixed view shape, unpacking): eager refuses
    if name not in _RESIZING:
        _corpus_call(compiled, fn, grown, grad)


# -- OpInfo samples with every dim of size 2 or more symbolic ------------------------------------


def _symbolic_opinfo_outcome(op: Any, sample: Any) -> str:
    """ "symbolic" (compiled once, equal to eager), "error" (SymbolicShapeError), or "skip"."""
    fn, tensors = opinfo._as_function(op, sample)
    try:
        eager_inputs, aot_inputs = opinfo._clone(tensors), opinfo._clone(tensors)
        expected = fn(*eager_inputs)
    except (RuntimeError, NotImplementedError):
        return "skip"  # sparse layouts, samples eager refuses
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    fakes = [
        mode.from_real(
            t, LocalSource(f"t{i}"), dynamic_dims=[d for d, n in enumerate(t.shape) if n >= 2]
        )
        for i, t in enumerate(tensors)
    ]
    compiled = AotCallable(
        fn, fakes, AotConfig(CheckingCompiler()), shape_snapshot=ShapeSnapshot.of(env)
    )
    try:
        compiled.compile_symbolic(fakes)
    except SymbolicShapeError:
        return "error"
    actual = compiled(*aot_inputs)
    torch.testing.assert_close(actual, expected, equal_nan=True)
    wanted_e = [t for t in eager_inputs if t.requires_grad]
    loss_e = opinfo._loss(expected)
    if wanted_e and isinstance(loss_e, torch.Tensor):
        wanted_a = [t for t in aot_inputs if t.requires_grad]
        grads_e = torch.autograd.grad(loss_e, wanted_e, allow_unused=True)
        grads_a = torch.autograd.grad(opinfo._loss(actual), wanted_a, allow_unused=True)
        torch.testing.assert_close(grads_a, grads_e, equal_nan=True)
    assert compiled.static_compiles == 0
    return "symbolic"


def test_opinfo_samples_traced_with_symbolic_sizes():
    """Every op either compiles symbolically and matches eager, or raises SymbolicShapeError.

    By default every third op of test_opinfo's subset, one sample each; with
    EMBER_FULL_OPINFO=1 every op of op_db, three samples each.
    """
    cases = [case.values for case in opinfo._cases()]
    cases = cases if opinfo.FULL else cases[::3]
    samples = 3 if opinfo.FULL else 1
    outcomes: dict[str, int] = {"symbolic": 0, "error": 0, "skip": 0}
    for op, dtype in cases:
        for i, sample in enumerate(
            op.sample_inputs("cpu", dtype, requires_grad=op.supports_autograd)
        ):
            if i >= samples:
                break
            if not opinfo._random_sample(op, sample):
                outcomes[_symbolic_opinfo_outcome(op, sample)] += 1
    compiled = outcomes["symbolic"] + outcomes["error"]
    assert outcomes["symbolic"] >= 0.9 * compiled, outcomes


# -- what tracing assumes is checked; failures are errors to fall back on --------------------------


def _prefix(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x[: y.shape[0]] * y.sum()


def test_a_call_breaking_a_traced_assumption_runs_a_static_graph():
    graph = symbolic_graph(_prefix, [torch.randn(8, 3), torch.randn(5)], [[0], [0]])
    compiler = RecordingCompiler()
    compiled = aot_graph(graph.gm, graph.example_inputs, fw_compiler=compiler)
    assumptions = compiled.aot._cache[(False, ())].assumptions
    assert assumptions.conditions, "slicing x[:n] assumed n <= len(x)"
    for rows, n in [(9, 4), (6, 6), (4, 7), (3, 9)]:
        x, y = torch.randn(rows, 3), torch.randn(n)
        torch.testing.assert_close(compiled(*graph.arguments([x, y])), _prefix(x, y))
    assert compiled.aot.static_compiles == 2  # n > rows: eager clamps the slice


def _float_size(x: torch.Tensor) -> torch.Tensor:
    return x * (x.shape[0] / 3) + x.shape[1] / (x.shape[0] - 1)


def test_float_numbers_computed_from_sizes_stay_symbolic():
    graph = symbolic_graph(_float_size, [torch.randn(4, 3)], [[0, 1]])
    compiled = aot_graph(graph.gm, graph.example_inputs, fw_compiler=RecordingCompiler())
    for batch, seq in SIZES:
        x = torch.randn(batch, seq)
        torch.testing.assert_close(compiled(*graph.arguments([x])), _float_size(x))
    assert compiled.aot.static_compiles == 0


def _irrational_size(x: torch.Tensor) -> torch.Tensor:
    return x * x.shape[0] ** 0.5


def test_float_power_of_a_size_stays_symbolic():
    graph = symbolic_graph(_irrational_size, [torch.randn(4, 2)], [[0]])
    compiled = aot_graph(graph.gm, graph.example_inputs, fw_compiler=RecordingCompiler())
    for rows in (3, 4, 9):
        x = torch.randn(rows, 2)
        torch.testing.assert_close(compiled(x, rows), _irrational_size(x))


def _condition_as_value(x: torch.Tensor) -> torch.Tensor:
    return torch.full((2,), x.shape[0] > 2)  # a SymBool as an operator argument


def test_symbolic_failure_raises_an_error_to_fall_back_on():
    graph = symbolic_graph(_condition_as_value, [torch.randn(4, 2)], [[0]])
    with pytest.raises(SymbolicShapeError, match="static sizes") as info:
        aot_graph(graph.gm, graph.example_inputs, fw_compiler=RecordingCompiler())
    assert isinstance(info.value, AotAutogradError)
    # The same graph with static example values compiles (what a caller falls back to).
    for node in graph.gm.graph.find_nodes(op="placeholder"):
        node.meta.pop("val")
    compiled = aot_graph(graph.gm, graph.example_inputs, fw_compiler=RecordingCompiler())
    x = graph.example_inputs[0]
    torch.testing.assert_close(compiled(*graph.example_inputs), _condition_as_value(x))


def static_only(gm: fx.GraphModule, example_inputs: list) -> Callable:
    """A graph compiler that cannot compile symbolic graphs."""
    if _symint_placeholders(gm):
        raise RuntimeError("this compiler takes static graphs only")
    return gm


def test_a_compiler_failing_on_symbolic_sizes_raises_the_same_error():
    fn, shapes, dynamic, requires_grad = PROGRAMS["pointwise"]
    graph = symbolic_graph(fn, _make_inputs(shapes(3, 5), requires_grad), dynamic)
    with pytest.raises(SymbolicShapeError, match="static graphs only"):
        aot_graph(graph.gm, graph.example_inputs, fw_compiler=static_only)


def test_a_later_grad_mode_compiles_symbolically_on_first_use():
    fn, shapes, dynamic, requires_grad = PROGRAMS["matmul"]
    graph = symbolic_graph(fn, _make_inputs(shapes(3, 5), requires_grad), dynamic)
    compiler = RecordingCompiler()
    compiled = aot_graph(graph.gm, graph.example_inputs, fw_compiler=compiler)
    with torch.no_grad():
        for batch, seq in SIZES:
            inputs = _make_inputs(shapes(batch, seq), requires_grad)
            torch.testing.assert_close(compiled(*graph.arguments(inputs)), fn(*inputs))
    # the training forward (its backward compiles at first use), then the inference graph
    assert len(compiler.graphs) == 2 and _symint_placeholders(compiler.graphs[1])
    assert compiled.aot.static_compiles == 0


# -- through capture, as the umbrella's aot_eager backend would run ---------------------------------

# dynamo_capture is not a dependency of aot_autograd: these run where the whole repository is
# installed (the all-packages test run), and skip where aot_autograd is installed alone.
_CAPTURE_MISSING = "dynamo_capture is not installed (not a dependency of aot_autograd)"


class AotEagerBackend:
    """aot_graph with graphs run by torch's eager kernels, declaring symbolic support."""

    supports_dynamic_shapes = SUPPORTS_DYNAMIC_SHAPES

    def __init__(self, static_only: bool = False, **options: Any) -> None:
        self.static_only = static_only
        self.options = options
        self.compiled: list[Callable] = []
        self.compiler = RecordingCompiler()

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> Callable:
        def compile_graph(graph: fx.GraphModule, inputs: list) -> Callable:
            if self.static_only:
                static_only(graph, inputs)
            return self.compiler(graph, inputs)

        compiled = aot_graph(gm, example_inputs, fw_compiler=compile_graph, **self.options)
        self.compiled.append(compiled)
        return compiled


def _gpt2_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids).logits
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


@pytest.mark.parametrize("partition", ["min_cut"])
def test_gpt2_training_over_sequence_lengths_traces_once(partition):
    transformers = pytest.importorskip("transformers")
    dynamo_capture = pytest.importorskip("dynamo_capture", reason=_CAPTURE_MISSING)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=64,
        bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).train()
    reference = copy.deepcopy(model)
    backend = AotEagerBackend(partition_fn=PARTITIONERS[partition])
    compiled = dynamo_capture.optimize(
        lambda ids: _gpt2_loss(model, ids), backend=backend, dynamic=True
    )
    for length in (5, 9, 16):
        ids = torch.randint(0, 64, (2, length))
        model.zero_grad()
        reference.zero_grad()
        loss = compiled(ids)
        loss.backward()
        expected = _gpt2_loss(reference, ids)
        expected.backward()
        torch.testing.assert_close(loss, expected)
        for (name, ours), theirs in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(ours.grad, theirs.grad, msg=name)
    assert len(backend.compiled) == 1
    assert backend.compiled[0].aot.static_compiles == 0
    assert len(backend.compiler.graphs) == 2
    assert all(_symint_placeholders(gm) for gm in backend.compiler.graphs)


def test_capture_falls_back_to_static_graphs_on_a_symbolic_failure():
    dynamo_capture = pytest.importorskip("dynamo_capture", reason=_CAPTURE_MISSING)
    backend = AotEagerBackend(static_only=True)
    compiled = dynamo_capture.optimize(_pointwise, backend=backend, dynamic=True)
    for rows in (4, 6):
        x, y = torch.randn(rows, 2), torch.randn(rows, 2)
        torch.testing.assert_close(compiled(x, y), _pointwise(x, y))
    graphs = backend.compiler.graphs
    assert len(graphs) == 2 and not any(_symint_placeholders(gm) for gm in graphs)


def test_size_arithmetic_nodes_from_capture_stay_symbolic():
    dynamo_capture = pytest.importorskip("dynamo_capture", reason=_CAPTURE_MISSING)

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        return x.reshape(n * 5) + y.flatten() + torch.arange(n * 5) // (n // 2)

    backend = AotEagerBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend, dynamic=True)
    for rows in (3, 4, 7, 12):
        x, y = torch.randn(rows, 5), torch.randn(rows, 5)
        torch.testing.assert_close(compiled(x, y), fn(x, y))
    assert len(backend.compiled) == 1
    targets = {node.target for node in backend.compiler.graphs[0].graph.nodes}
    assert operator.floordiv in targets
