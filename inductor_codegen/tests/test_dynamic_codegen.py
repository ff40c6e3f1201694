"""Graphs with symbolic sizes: compiled once, run at several sizes, equal to eager.

Graphs come from `dynamic_graphs.trace_symbolic` (guards fakes over a ShapeEnv,
ATen calls recorded and decomposed with prim_decomp's `inductor_default`), the
shape of what capture + aot_autograd hand a backend with dynamic shapes.

Footguns, worst first, and the test that holds each:

    silent wrong  two sizes equal in value but not in form (5*s0 vs s0*s1) taken for
                  a broadcast               -> test_capture_with_dynamic_shapes_...
    silent wrong  a lowering reads a size's example value (int(SymInt) adds a guard)
                                            -> test_a_lowering_that_reads_an_example_size_...
    silent wrong  a kernel built for one size reused at another
                                            -> every test: one compile, four or more sizes
    error         a symbol no input gives   -> test_a_symbol_no_input_gives_...
    slowdown      a reshape between sizes that do not line up runs through ATen
                                            -> test_a_reshape_that_needs_static_sizes_...
"""

from __future__ import annotations

import inspect
import operator
import re

import pytest
import torch
import torch.nn.functional as F
from dynamic_graphs import trace_symbolic
from models import TransformerBlock

from inductor_codegen import (
    SUPPORTS_DYNAMIC_SHAPES,
    DynamicShapeError,
    compile_graph,
)


def _compile(fn, *args, dynamic, options=None, symint_inputs=False):
    gm, examples = trace_symbolic(fn, *args, dynamic=dynamic, symint_inputs=symint_inputs)
    return compile_graph(gm, examples, options=options)


def _check_sizes(compiled, fn, make_args, sizes, *, extra=lambda args: [], **tolerance):
    for size in sizes:
        args = make_args(size)
        expected = fn(*args)
        got = compiled(*args, *extra(args))
        expected = expected if isinstance(expected, tuple) else (expected,)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, **tolerance)


def test_the_backend_declares_symbolic_support():
    assert SUPPORTS_DYNAMIC_SHAPES is True
    assert compile_graph.supports_dynamic_shapes is True


def test_pointwise_and_broadcasting_over_a_dynamic_dim(tmp_path):
    def fn(x, bias, column):
        return (x * 2 + bias).sin() - column.cos(), torch.sigmoid(x) * x.shape[0]

    def make(n):
        return torch.randn(n, 16), torch.randn(16), torch.randn(n, 1)

    compiled = _compile(fn, *make(6), dynamic={0: [0], 2: [0]}, options={"cache_dir": tmp_path})
    assert compiled.kernel_count >= 1 and not compiled.fallbacks
    wrapper = compiled.artifact("wrapper")
    assert "s0 = arg0.size(0)" in wrapper
    assert "int64_t s0" in compiled.artifact("codegen")
    _check_sizes(compiled, fn, make, [2, 3, 6, 17, 64])


def test_two_dynamic_dims_broadcast_against_each_other(tmp_path):
    def fn(x, row, column):
        return torch.tanh(x + row) * column

    def make(size):
        rows, cols = size
        return torch.randn(rows, cols), torch.randn(cols), torch.randn(rows, 1)

    compiled = _compile(
        fn, *make((5, 7)), dynamic={0: [0, 1], 1: [0], 2: [0]}, options={"cache_dir": tmp_path}
    )
    _check_sizes(compiled, fn, make, [(5, 7), (2, 3), (9, 4), (33, 65)])


def _reductions(x):
    return (
        x.sum(0),
        x.sum(1),
        x.mean(0),
        x.mean(1, keepdim=True),
        x.var(0),
        x.var(1, correction=0),
        torch.softmax(x, dim=0),
        torch.softmax(x, dim=1),
        x.amax(0),
        x.argmax(1),
    )


@pytest.mark.parametrize("dynamic_dims", [[0], [1], [0, 1]], ids=["rows", "cols", "both"])
def test_reductions_over_dynamic_and_static_dims(dynamic_dims, tmp_path):
    def make(n):
        rows = n if 0 in dynamic_dims else 8
        cols = n + 3 if 1 in dynamic_dims else 12
        return (torch.randn(rows, cols),)

    compiled = _compile(
        _reductions, *make(5), dynamic={0: dynamic_dims}, options={"cache_dir": tmp_path}
    )
    assert not compiled.fallbacks
    _check_sizes(compiled, _reductions, make, [5, 2, 9, 40, 130], rtol=1e-4, atol=1e-5)


def test_layer_norm_and_log_softmax_over_a_dynamic_batch(tmp_path):
    weight, bias = torch.randn(24), torch.randn(24)

    def fn(x):
        return F.layer_norm(x, (24,), weight, bias), F.log_softmax(x, dim=-1), x.std(1)

    def make(n):
        return (torch.randn(n, 3, 24),)

    compiled = _compile(fn, *make(4), dynamic={0: [0]}, options={"cache_dir": tmp_path})
    _check_sizes(compiled, fn, make, [4, 2, 7, 31], rtol=1e-4, atol=1e-5)


def _views(x, y):
    n, m = x.shape
    flat = x.reshape(n * m)
    return (
        flat.view(m, n).t() * 2,
        x.permute(1, 0).contiguous() + 1,
        torch.cat([x, y], dim=0).sin(),
        torch.cat([x, x * 2], dim=1),
        x[:, 1:] - x[:, :-1],
        x[1] + x[-1],
        x.unsqueeze(1).expand(n, 3, m) * y[0],
        F.pad(x, (1, 2)),
        x.flip(0) if False else x.narrow(0, 0, 2) * 3,
    )


def test_views_reshape_permute_cat_with_symbolic_sizes(tmp_path):
    def make(size):
        n, m = size
        return torch.randn(n, m), torch.randn(n + 0, m)

    compiled = _compile(_views, *make((5, 6)), dynamic={0: [0, 1], 1: [0, 1]},
                        options={"cache_dir": tmp_path})  # fmt: skip
    _check_sizes(compiled, _views, make, [(5, 6), (3, 4), (9, 2), (16, 33)])


def test_transposed_input_slices_by_a_symbol_and_cat_of_two_dynamic_pieces(tmp_path):
    def fn(x, table, y):
        n = y.shape[0]
        mask = torch.ones(n, n, dtype=torch.bool).tril()
        square = (y[:, None] * y[None, :]).masked_fill(~mask, 0.0)
        return (
            x * 2 + x.sum(1, keepdim=True),
            table[:n] * 2,
            table[n:] + 1,
            torch.cat([y, x[:, 0]], 0).relu(),
            square.softmax(-1),
        )

    def make(n):
        return torch.randn(7, n + 1).t(), torch.randn(40, 3), torch.randn(n)

    compiled = _compile(fn, *make(5), dynamic={0: [0], 2: [0]}, options={"cache_dir": tmp_path})
    assert not compiled.fallbacks
    assert "stride(" in compiled.artifact("wrapper") or "size(" in compiled.artifact("wrapper")
    _check_sizes(compiled, fn, make, [5, 2, 9, 33])


def test_convolution_over_dynamic_spatial_sizes_and_embedding_of_dynamic_ids(tmp_path):
    conv = torch.nn.Conv2d(3, 4, 3)
    weight, bias = conv.weight.detach(), conv.bias.detach()
    table = torch.randn(50, 8)

    def fn(x, ids):
        features = F.conv2d(x, weight, bias).relu()
        return features.amax((2, 3)), features.mean((2, 3)), F.embedding(ids, table).sum(-1)

    def make(n):
        return torch.randn(2, 3, n, n + 1), torch.randint(0, 50, (2, n))

    compiled = _compile(fn, *make(6), dynamic={0: [2, 3], 1: [1]}, options={"cache_dir": tmp_path})
    assert set(compiled.fallbacks) <= {"aten.index_select.default"}  # none in static graphs either
    _check_sizes(compiled, fn, make, [6, 3, 9, 17], rtol=1e-4, atol=1e-5)


def test_matmul_externs_with_a_dynamic_batch(tmp_path):
    w, b = torch.randn(16, 8), torch.randn(8)
    k = torch.randn(4, 8, 5)

    def fn(x, batched):
        return F.linear(x, w.t(), b).relu(), torch.bmm(batched, k) + 1, x @ w

    def make(n):
        return torch.randn(n, 16), torch.randn(4, n, 8)

    compiled = _compile(fn, *make(6), dynamic={0: [0], 1: [1]}, options={"cache_dir": tmp_path})
    assert not compiled.fallbacks
    _check_sizes(compiled, fn, make, [6, 2, 11, 50], rtol=1e-4, atol=1e-5)


def test_symint_inputs_bind_the_symbols(tmp_path):
    def fn(x):
        n = x.shape[0]
        return x.reshape(n * 4) + torch.arange(n * 4) // (n // 2)

    def make(n):
        return (torch.randn(n, 4),)

    compiled = _compile(
        fn, *make(6), dynamic={0: [0]}, symint_inputs=True, options={"cache_dir": tmp_path}
    )
    _check_sizes(compiled, fn, make, [6, 2, 7, 23], extra=lambda args: [args[0].shape[0]])


def test_real_example_inputs_with_symbolic_meta(tmp_path):
    def fn(x):
        return x.softmax(-1) * x.shape[1]

    x = torch.randn(3, 10)
    gm, _ = trace_symbolic(fn, x, dynamic={0: [1]})
    compiled = compile_graph(gm, [x], options={"cache_dir": tmp_path})
    _check_sizes(compiled, fn, lambda n: (torch.randn(3, n),), [10, 2, 5, 77])


def test_a_reshape_that_needs_static_sizes_runs_through_aten(tmp_path):
    def fn(x):
        n, m = x.shape
        return x.t().reshape(n, m) + 1

    def make(size):
        return (torch.randn(*size),)

    compiled = _compile(fn, *make((3, 5)), dynamic={0: [0, 1]}, options={"cache_dir": tmp_path})
    assert sum(compiled.fallbacks.values()) >= 1
    _check_sizes(compiled, fn, make, [(3, 5), (4, 4), (2, 9), (7, 3)])


def test_floats_computed_from_sizes_are_computed_per_call(tmp_path):
    def fn(x):
        n = x.shape[0]
        return x * (n / 3), x.sum(0) * (n / (n - 1)) + 1 / n

    def make(n):
        return (torch.randn(n, 2),)

    compiled = _compile(fn, *make(6), dynamic={0: [0]}, options={"cache_dir": tmp_path})
    assert "sym_float0 = " in compiled.artifact("wrapper")
    _check_sizes(compiled, fn, make, [6, 2, 7, 25])


def _triton_graph(x, w):
    n = x.shape[0]
    return (
        torch.softmax(x, -1) * 2 + x.mean(0, keepdim=True),
        x.sum(0),
        (x @ w).relu().reshape(n * 8),
        x.t().contiguous() - torch.arange(n, device=x.device)[None, :],
    )


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def compile_symbolic_triton_graph(tmp_path):
    """`_triton_graph` compiled once for every row count (Triton), and its input maker."""
    pytest.importorskip("triton")
    w = torch.randn(16, 8, device=DEVICE)

    def make(n):
        return torch.randn(n, 16, device=DEVICE), w

    options = {"cache_dir": tmp_path, "device_codegen": "triton"}
    return _compile(_triton_graph, *make(6), dynamic={0: [0]}, options=options), make


@pytest.mark.triton_interpret
def test_triton_kernels_take_size_arguments_and_grids_follow_them(tmp_path):
    compiled, make = compile_symbolic_triton_graph(tmp_path)
    kernels = compiled.artifact("codegen")
    assert "xnumel = ks0" in kernels and "range(0, ks0, R0BLOCK)" in kernels
    _check_sizes(compiled, _triton_graph, make, [6, 2, 9, 70], rtol=1e-4, atol=1e-4)


def _library_files(cache_dir):
    return sorted(p.name for p in (cache_dir / "cpp" / "lib").glob("*.so"))


def test_transformer_block_with_dynamic_sequence_length_compiles_once(tmp_path):
    torch.manual_seed(0)
    model = TransformerBlock(32, heads=4).eval()
    names = [name for name, _ in model.named_parameters()]
    params = [p.detach() for _, p in model.named_parameters()]

    def fn(x, *weights):
        return torch.func.functional_call(model, dict(zip(names, weights)), (x,))

    def make(t):
        return (torch.randn(2, t, 32), *params)

    options = {"cache_dir": tmp_path}
    compiled = _compile(fn, *make(9), dynamic={0: [1]}, options=options)
    builds = _library_files(tmp_path)
    assert builds and compiled.kernel_count >= 3
    _check_sizes(compiled, fn, make, [9, 2, 5, 16, 37], rtol=1e-4, atol=1e-4)
    assert _library_files(tmp_path) == builds, "a call compiled C++"
    # Traced at another sequence length, the kernels are the same source: no new build.
    again = _compile(fn, *make(23), dynamic={0: [1]}, options=options)
    assert again.artifact("codegen") == compiled.artifact("codegen")
    assert _library_files(tmp_path) == builds
    assert re.search(r"'compiled': 0\b", again.artifact("build"))


class _CaptureBackend:
    """A backend taking symbolic graphs: ATen graph of the captured graph, then compile_graph."""

    supports_dynamic_shapes = True

    def __init__(self, cache_dir):
        self.cache_dir = cache_dir
        self.compiled: list = []

    def __call__(self, gm, example_inputs):
        from dynamic_graphs import trace_graph_module

        compiled = compile_graph(
            trace_graph_module(gm), example_inputs, options={"cache_dir": self.cache_dir}
        )
        self.compiled.append(compiled)
        return compiled


def test_capture_with_dynamic_shapes_feeds_one_symbolic_graph(tmp_path):
    dynamo_capture = pytest.importorskip("dynamo_capture")

    def fn(x, y):
        n = x.shape[0]
        return (x * 2 + y).softmax(-1).reshape(n * 5) + torch.arange(n * 5) // (n // 2)

    backend = _CaptureBackend(tmp_path)
    compiled = dynamo_capture.optimize(fn, backend=backend, dynamic=True)
    for n in [4, 6, 9, 2, 31]:
        x, y = torch.randn(n, 5), torch.randn(n, 5)
        torch.testing.assert_close(compiled(x, y), fn(x, y))
    assert len(backend.compiled) == 1
    assert backend.compiled[0].kernel_count >= 1 and not backend.compiled[0].fallbacks


def test_training_through_capture_and_aot_autograd_compiles_forward_and_backward_once(tmp_path):
    dynamo_capture = pytest.importorskip("dynamo_capture")
    aot_autograd = pytest.importorskip("aot_autograd")
    from guards import mark_dynamic
    from prim_decomp import inductor_default

    compiled_graphs = []

    def compile_part(gm, example_inputs):
        compiled_graphs.append(compile_graph(gm, example_inputs, options={"cache_dir": tmp_path}))
        return compiled_graphs[-1]

    def backend(gm, example_inputs):
        return aot_autograd.aot_graph(
            gm, example_inputs, fw_compiler=compile_part, decompositions=inductor_default
        )

    backend.supports_dynamic_shapes = compile_graph.supports_dynamic_shapes
    torch.manual_seed(0)
    model = TransformerBlock(32, heads=4)
    compiled = dynamo_capture.optimize(model, backend=backend)
    for t in [5, 9, 13, 20]:
        x = torch.randn(2, t, 32, requires_grad=True)
        mark_dynamic(x, 1)
        out = compiled(x)
        (grad,) = torch.autograd.grad(out.square().sum(), x)
        expected = model(x)
        (expected_grad,) = torch.autograd.grad(expected.square().sum(), x)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(grad, expected_grad, rtol=1e-4, atol=1e-4)
    assert len(compiled_graphs) == 2, "forward and backward, once each"
    assert all(not g.fallbacks for g in compiled_graphs)
    # the symbol numbered as torch.compile numbers it (from `L['x'].size()[1]`)
    assert all(re.search(r"\bs\d+ = ", g.artifact("wrapper")) for g in compiled_graphs)


def test_size_list_nodes_become_size_expressions(tmp_path):
    from dynamic_graphs import symbolic_fakes

    _, (fake,), _ = symbolic_fakes([torch.randn(5, 3)], {0: [0]})
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = fake
    sizes = graph.call_function(torch.ops.aten.size.default, (x,))  # what torch 2.11 records
    sizes.meta["val"] = tuple(fake.shape)
    rows = graph.call_function(operator.getitem, (sizes, 0))
    rows.meta["val"] = fake.shape[0]
    out = graph.call_function(torch.ops.aten.mul.Tensor, (x, rows))
    out.meta["val"] = fake * fake.shape[0]
    graph.output((out,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    compiled = compile_graph(gm, [fake], options={"cache_dir": tmp_path})
    assert not compiled.fallbacks
    _check_sizes(compiled, lambda t: t * t.shape[0], lambda n: (torch.randn(n, 3),), [5, 2, 8, 13])


def test_a_lowering_that_reads_an_example_size_is_a_compile_time_error():
    from inductor_codegen import LOWERINGS

    aten = torch.ops.aten

    def specializing_sin(ctx, node, x):
        rows = int(node.meta["val"].shape[0])  # decides s0 by its example value
        return LOWERINGS[aten.sin.default](ctx, node, x) if rows else None

    table = {**LOWERINGS, aten.sin.default: specializing_sin}
    with pytest.raises(DynamicShapeError, match="example value"):
        _compile(
            lambda x: x.sin(), torch.randn(6, 2), dynamic={0: [0]}, options={"lowerings": table}
        )


def test_a_symbol_no_input_gives_is_a_compile_time_error():
    from dynamic_graphs import symbolic_fakes

    mode, (square,), _ = symbolic_fakes([torch.randn(4, 4)], {0: [0, 1]})
    with mode:
        flat = square.reshape(-1)  # size s0**2: s0 cannot be read back from it
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = flat
    out = graph.call_function(torch.ops.aten.mul.Tensor, (x, 2))
    with mode:
        out.meta["val"] = flat * 2
    graph.output((out,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(DynamicShapeError, match="no input size"):
        compile_graph(gm, [flat])


def test_a_static_graph_compiled_for_its_own_traced_values_is_static():
    # aot_autograd compiles a backward for its placeholders' values: the examples are the
    # traced values themselves, and with static sizes the graph is static
    from graph_helpers import trace

    from inductor_codegen.lowering import GraphLowering
    from inductor_codegen.lowering.registry import LOWERINGS

    gm = trace(lambda x, y: (x * y).sum(0), torch.randn(4, 6), torch.randn(4, 6))
    values = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    graph = GraphLowering(gm, values, LOWERINGS).run()
    assert not graph.symbolic
    fn = lambda x, y: (x * y).sum(0)  # noqa: E731
    symbolic, examples = trace_symbolic(fn, torch.randn(4, 6), torch.randn(4, 6), dynamic={0: [0]})
    assert GraphLowering(symbolic, examples, LOWERINGS).run().symbolic


class _WarmupRecorder:
    """Stands in for a kernel's Triton function: records what each warmup compiled for."""

    def __init__(self, calls):
        self.calls = calls

    def warmup(self, *args, **kwargs):
        self.calls.append(args)
        return object()


def test_symbolic_kernels_compile_ahead_at_their_example_sizes(tmp_path, monkeypatch):
    from inductor_codegen.codegen.triton import compile as triton_compile
    from inductor_codegen.codegen.triton import runtime

    pytest.importorskip("triton.runtime._async_compile")
    seen = {}
    launchers = triton_compile._launchers

    def recording_launchers(*args, **kwargs):
        result = launchers(*args, **kwargs)
        seen["launchers"], seen["hints"] = result[0], args[6]
        return result

    monkeypatch.setattr(triton_compile, "_launchers", recording_launchers)
    compile_symbolic_triton_graph(tmp_path)  # rows: the symbol s0, 6 in the example
    hints = seen["hints"]
    assert hints == {"s0": 6}
    kernels = [k for k in seen["launchers"].values() if isinstance(k, runtime.TritonKernel)]
    sized = [k for k in kernels if any(a.kind == "size" for a in k.source.args)]
    assert sized, "the graph has kernels over its symbolic size"
    calls = []
    for kernel in kernels:
        kernel.fn = _WarmupRecorder(calls)
    monkeypatch.setattr(runtime, "interpreting", lambda: False)

    # Without example sizes, kernels over symbolic sizes wait for their first launch.
    runtime.precompile(kernels, 2, None)
    assert len(calls) == len(kernels) - len(sized)

    # With them, every kernel compiles ahead, size arguments at their example values.
    calls.clear()
    runtime.precompile(kernels, 2, None, hints)
    assert len(calls) == len(kernels)
    for kernel in sized:
        args = kernel.warmup_arguments(hints)
        assert tuple(args) in calls
        for arg, value in zip(kernel.source.args, args):
            assert value == 6 if arg.kind == "size" else isinstance(value, torch.dtype)


class _BackgroundCompile:
    """Stands in for a kernel's Triton function: its warmup submits a compile that runs
    until `release` is set (or fails with `error`) to the active async compile mode."""

    def __init__(self, release, error=None):
        self.release, self.error, self.finalized = release, error, []

    def warmup(self, *args, **kwargs):
        from triton.runtime._async_compile import active_mode

        def compile_fn():
            assert self.release.wait(10)
            if self.error is not None:
                raise self.error
            return "binary"

        mode = active_mode.get()
        # Older Triton versions take no cleanup function.
        takes_cleanup = len(inspect.signature(mode.submit).parameters) > 3
        cleanup = (lambda future_kernel: None,) if takes_cleanup else ()
        return mode.submit(id(self), compile_fn, self.finalized.append, *cleanup)


def test_precompile_returns_before_the_kernels_finish_compiling(tmp_path, monkeypatch):
    import threading

    from inductor_codegen.codegen.triton import compile as triton_compile
    from inductor_codegen.codegen.triton import runtime

    pytest.importorskip("triton.runtime._async_compile")
    seen = {}
    launchers = triton_compile._launchers

    def recording_launchers(*args, **kwargs):
        result = launchers(*args, **kwargs)
        seen["launchers"] = result[0]
        return result

    monkeypatch.setattr(triton_compile, "_launchers", recording_launchers)
    compile_symbolic_triton_graph(tmp_path)
    kernels = [k for k in seen["launchers"].values() if isinstance(k, runtime.TritonKernel)]
    release = threading.Event()
    compiles = [_BackgroundCompile(release) for _ in kernels]
    compiles[0].error = RuntimeError("the compiler failed")
    for kernel, compile_ in zip(kernels, compiles):
        kernel.fn = compile_
    monkeypatch.setattr(runtime, "interpreting", lambda: False)

    runtime.precompile(kernels, 2, None, {"s0": 6})
    assert all(k.precompiled is not None and not k.precompiled.done() for k in kernels)
    release.set()
    for kernel in kernels:
        kernel._wait_for_precompile()  # what the first launch does first; a failure is left to it
        assert kernel.precompiled is None
    assert [c.finalized for c in compiles] == [[]] + [["binary"]] * (len(compiles) - 1)


def test_waiting_for_background_compiles_covers_every_kernel(tmp_path, monkeypatch):
    import threading

    from inductor_codegen.codegen.triton import compile as triton_compile
    from inductor_codegen.codegen.triton import runtime

    pytest.importorskip("triton.runtime._async_compile")
    seen = {}
    launchers = triton_compile._launchers

    def recording_launchers(*args, **kwargs):
        result = launchers(*args, **kwargs)
        seen["launchers"] = result[0]
        return result

    monkeypatch.setattr(triton_compile, "_launchers", recording_launchers)
    compile_symbolic_triton_graph(tmp_path)
    kernels = [k for k in seen["launchers"].values() if isinstance(k, runtime.TritonKernel)]
    release = threading.Event()
    for kernel in kernels:
        kernel.fn = _BackgroundCompile(release)
    monkeypatch.setattr(runtime, "interpreting", lambda: False)
    runtime.precompile(kernels, 2, None, {"s0": 6})
    threading.Timer(0.2, release.set).start()
    runtime.wait_for_background_compiles()  # what a CUDA graph capture does first
    assert all(k.precompiled.done() for k in kernels)


def _float_input_graph(hint: float):
    """out = x * (2 * s + 1) + s, with s a float input: a 0-d float64 tensor read with
    `aten._local_scalar_dense` (its SymFloat a symbol), as aot_autograd traces one."""
    from guards import FakeTensorMode, LocalSource, ShapeEnv
    from guards.sym_node import SymNode

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    symbol = env.create_float_symbol(hint, LocalSource("s"))
    number = torch.SymFloat(SymNode(symbol, env, float, hint))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = mode.from_real(torch.randn(8))
    s = graph.placeholder("s")
    s.meta["val"] = mode.from_real(torch.tensor(hint, dtype=torch.float64))
    read = graph.call_function(torch.ops.aten._local_scalar_dense.default, (s,))
    read.meta["val"] = number
    twice = graph.call_function(operator.mul, (2.0, read))
    twice.meta["val"] = 2.0 * number
    factor = graph.call_function(operator.add, (twice, 1.0))
    factor.meta["val"] = 2.0 * number + 1.0
    scaled = graph.call_function(torch.ops.aten.mul.Tensor, (x, factor))
    scaled.meta["val"] = x.meta["val"] * 2.0
    out = graph.call_function(torch.ops.aten.add.Tensor, (scaled, read))
    out.meta["val"] = scaled.meta["val"]
    graph.output((out,))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_float_input_is_read_in_the_wrapper_and_passed_to_kernels(tmp_path):
    gm = _float_input_graph(0.5)
    example = [torch.randn(8), torch.tensor(0.5, dtype=torch.float64)]
    compiled = compile_graph(gm, example, options={"cache_dir": tmp_path})
    wrapper = compiled.artifact("wrapper")
    assert re.search(r"f\d+ = s\.item\(\)", wrapper), wrapper
    for s in (0.5, 1.5, -2.25, 3.0):
        x = torch.randn(8)
        (got,) = compiled(x, torch.tensor(s, dtype=torch.float64))
        torch.testing.assert_close(got, x * (2 * s + 1) + s)
