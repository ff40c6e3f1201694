"""The Triton wrapper's launches: one launcher per kernel for static sizes, eager's results.

Runs under TRITON_INTERPRET=1 on the CPU (or on CUDA where there is a GPU).
"""

from __future__ import annotations

import pytest
import torch
from graph_helpers import trace
from test_dynamic_codegen import (
    _check_sizes,
    _triton_graph,
    compile_symbolic_triton_graph,
)

from inductor_codegen import compile_graph

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.triton_interpret


def _kernels(compiled) -> list:
    from inductor_codegen.codegen.triton.runtime import TritonKernel

    return [v for v in compiled._call.__globals__.values() if isinstance(v, TritonKernel)]


def test_static_kernels_keep_one_launcher_across_calls(tmp_path):
    pytest.importorskip("triton")
    w = torch.randn(16, 8, device=DEVICE)

    def fn(x):
        return (torch.softmax(x, -1) * 2).sum(0), (x @ w).relu() + 1

    x = torch.randn(6, 16, device=DEVICE)
    options = {"device_codegen": "triton", "cache_dir": str(tmp_path)}
    compiled = compile_graph(trace(fn, x), [x], options=options)
    kernels = _kernels(compiled)
    assert kernels and all(k.static_launcher is None for k in kernels)
    for _ in range(3):
        x = torch.randn(6, 16, device=DEVICE)
        torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)
    launchers = [k.static_launcher for k in kernels]
    assert all(launcher is not None for launcher in launchers)
    compiled(torch.randn(6, 16, device=DEVICE))
    assert [k.static_launcher for k in kernels] == launchers


def test_symbolic_kernels_pick_a_launcher_per_size(tmp_path):
    compiled, make = compile_symbolic_triton_graph(tmp_path)
    _check_sizes(compiled, _triton_graph, make, [6, 2, 9, 6], rtol=1e-4, atol=1e-4)
    kernels = [k for k in _kernels(compiled) if k.xnumel_code is not None]
    assert kernels and all(k.static_launcher is None for k in kernels)
    if DEVICE == "cuda":  # the binary of the sizes' specialization, launched directly
        assert all(k.launch == k._sized_launch for k in kernels)
        assert any(len(k.sized_direct) >= 2 for k in kernels)
    else:  # the interpreter: Triton's entry, a launcher per size seen
        assert any(len(k.launchers) >= 3 for k in kernels)


def test_kernels_with_size_arguments_launch_the_binary_of_each_sizes_specialization(tmp_path):
    """Sizes 1 and multiples of 16 (what Triton could specialize on) beside others, each size
    met again after others: every call matches eager, with the direct launch of its sizes
    (a new grid for each) after the first call of their specialization."""
    compiled, make = compile_symbolic_triton_graph(tmp_path)
    sizes = [6, 1, 16, 9, 32, 1, 6, 70, 16, 3, 9, 129]
    _check_sizes(compiled, _triton_graph, make, sizes, rtol=1e-4, atol=1e-4)
    sized = [k for k in _kernels(compiled) if k.size_positions]
    assert sized
    if DEVICE != "cuda":
        return  # the interpreter takes Triton's own entry for every launch
    for kernel in sized:
        assert kernel.launch == kernel._sized_launch
        assert len(kernel.sized_binaries) <= 3  # (== 1, % 16 == 0): three kinds of size here
        assert len(kernel.sized_direct) >= 5


def test_the_specialization_of_an_integer_names_its_type():
    pytest.importorskip("triton")
    from inductor_codegen.codegen.triton.runtime import _specialization

    assert _specialization(7) != _specialization(2**31 + 7)  # i32 against i64
    assert _specialization(-(2**31) + 7) == _specialization(7)
    assert _specialization(1) != _specialization(7) != _specialization(32)


def test_specialization_key_matches_each_arguments_specialization():
    pytest.importorskip("triton")
    from inductor_codegen.codegen.triton.runtime import _specialization, specialization_key

    base = torch.randn(64)
    args = [base, base[1:], torch.nn.Parameter(torch.randn(4)), 1, 16, 7, 32, True, 2.5, None]
    assert specialization_key(args) == tuple(_specialization(a) for a in args)
    assert specialization_key(args)[:2] == (True, False)  # the view is 4 bytes off alignment


def _fallback_graph():
    w = torch.randn(16, 8, device=DEVICE)
    index = torch.zeros(6, 2, dtype=torch.long, device=DEVICE)

    def fn(x, b):
        softmax = (torch.softmax(x, -1) * 2).sum(0) + b
        return softmax, (x @ w).relu() + 1, torch.scatter_add(x, 1, index, x[:, :2]).sin()

    return fn


def _compiled_fallback_graph(tmp_path):
    """(compiled, fn, x, b): the graph with an ATen fallback compiled for Triton at x [6, 16], b [16]."""
    pytest.importorskip("triton")
    fn = _fallback_graph()
    x, b = torch.randn(6, 16, device=DEVICE), torch.randn(16, device=DEVICE)
    options = {"device_codegen": "triton", "cache_dir": str(tmp_path)}
    return compile_graph(trace(fn, x, b), [x, b], options=options), fn, x, b


def test_kernels_take_the_stream_and_aligned_inputs(tmp_path):
    compiled, fn, x, b = _compiled_fallback_graph(tmp_path)
    text = compiled.wrapper_path.read_text()
    assert "stream0 = get_raw_stream()" in text
    assert "aligned_copies(x_1, b_1)" in text
    launches = [line.strip() for line in text.splitlines() if ".launch(stream0" in line]
    assert len(launches) == 4 and all("x_1," not in line for line in launches)
    # The scatter is an ATen fallback (on this generator): its result may sit at any
    # offset, so it is checked before the kernel that reads it, which still launches directly.
    (scatter,) = [
        line.split(" = ")[0].strip() for line in text.splitlines() if "aten_scatter_add" in line
    ]
    assert f"aligned_copies({scatter},)" in text
    assert any(f"(stream0, {scatter}_a," in line for line in launches)
    for _ in range(3):
        torch.testing.assert_close(compiled(x, b), fn(x, b))
    direct = [k for k in _kernels(compiled) if k.launch.__name__ == "launch"]
    if DEVICE == "cuda":  # the compiled binary's launcher, called with nothing in between
        assert len(direct) == 4
    else:  # the interpreter has no binaries
        assert not direct


def test_a_misaligned_fallback_result_is_copied_before_a_kernel_reads_it(tmp_path):
    compiled, fn, x, b = _compiled_fallback_graph(tmp_path)
    namespace = compiled._call.__globals__
    scatter = namespace["aten_scatter_add_default"]

    def misaligned_scatter(*args, **kwargs):
        result = scatter(*args, **kwargs)
        storage = torch.empty(result.numel() + 1, dtype=result.dtype, device=result.device)
        view = storage[1:].view(result.shape).copy_(result)
        assert view.data_ptr() % 16
        return view

    namespace["aten_scatter_add_default"] = misaligned_scatter
    try:
        for _ in range(2):
            torch.testing.assert_close(compiled(x, b), fn(x, b))
    finally:
        namespace["aten_scatter_add_default"] = scatter


def test_misaligned_inputs_are_copied_and_match_eager(tmp_path):
    compiled, fn, x, b = _compiled_fallback_graph(tmp_path)
    compiled(x, b)
    for _ in range(2):
        x_off = torch.randn(6 * 16 + 1, device=DEVICE)[1:].view(6, 16)
        b_off = torch.randn(17, device=DEVICE)[1:]
        assert x_off.data_ptr() % 16 and b_off.data_ptr() % 16
        torch.testing.assert_close(compiled(x_off, b_off), fn(x_off, b_off))
        torch.testing.assert_close(compiled(x, b_off), fn(x, b_off))


def test_aligned_copies_keep_strides_and_values():
    from inductor_codegen.codegen.triton.wrapper import aligned_copies

    base = torch.randn(3 * 8 + 1)
    view = base[1:].view(8, 3).t()  # 4 bytes off, transposed
    aligned = torch.randn(4)
    copy, same = aligned_copies(view, aligned)
    assert same is aligned and copy.data_ptr() % 16 == 0
    assert copy.stride() == view.stride() and torch.equal(copy, view)


def test_a_cast_naming_its_own_device_is_a_kernel_not_an_aten_copy(tmp_path):
    """Autocast's casts name the device they stay on; only a move between devices is ATen's."""
    pytest.importorskip("triton")

    def fn(x):
        return torch.ops.aten._to_copy.default(x, dtype=torch.bfloat16, device=x.device) * 2

    x = torch.randn(8, 32, device=DEVICE)
    options = {"device_codegen": "triton", "cache_dir": str(tmp_path)}
    compiled = compile_graph(trace(fn, x), [x], options=options)
    assert "aten__to_copy" not in compiled.wrapper_path.read_text()
    torch.testing.assert_close(compiled(x), fn(x))


def test_only_a_move_between_devices_falls_back():
    from torch import fx

    import guards
    from inductor_codegen.lowering.pointwise import _moves

    def node_on(device: str) -> fx.Node:
        graph = fx.Graph()
        x = graph.placeholder("x")
        meta = torch.empty(2, device="meta")
        x.meta["val"] = guards.FakeTensor(guards.FakeTensorMode(), meta, torch.device(device))
        return graph.call_function(torch.ops.aten._to_copy.default, (x,))

    assert not _moves(node_on("cuda:0"), torch.device("cuda"))
    assert not _moves(node_on("cuda:0"), torch.device("cuda:0"))
    assert not _moves(node_on("cpu"), torch.device("cpu"))
    assert _moves(node_on("cuda:0"), torch.device("cpu"))
    assert _moves(node_on("cpu"), torch.device("cuda:0"))
    assert _moves(node_on("cuda:0"), torch.device("cuda:1"))


def test_direct_launch_passes_the_grid_stream_handles_and_constexprs_in_order():
    from inductor_codegen.codegen.triton.runtime import direct_launch

    calls = []

    class Compiled:  # the attributes of Triton's CompiledKernel that a launch reads
        function, packed_metadata = "function", "metadata"

        def run(self, *args):
            calls.append(args)

    direct_launch(Compiled(), (4, 2, 1), (128, 64))(7, "a", "b")
    direct_launch(Compiled(), (1, 1, 1), ())(0, "x")
    hooks = (None, None, None)  # launch metadata and the enter / exit hooks
    assert calls == [
        (4, 2, 1, 7, "function", "metadata", *hooks, "a", "b", 128, 64),
        (1, 1, 1, 0, "function", "metadata", *hooks, "x"),
    ]


def test_kernels_with_the_same_text_share_one_function(tmp_path):
    """Each layer's copy of a fused kernel is one Triton function, compiled once."""
    pytest.importorskip("triton")

    w = torch.randn(32, 32, device=DEVICE) / 8

    def fn(x):
        for _ in range(3):  # three identical layers, a matmul between them
            x = torch.nn.functional.layer_norm(x, x.shape[-1:]).relu() @ w
        return x

    x = torch.randn(8, 32, device=DEVICE)
    options = {"device_codegen": "triton", "cache_dir": str(tmp_path)}
    compiled = compile_graph(trace(fn, x), [x], options=options)
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)
    kernels = _kernels(compiled)
    functions = {id(k.fn) for k in kernels}
    assert len(kernels) >= 3 and len(functions) < len(kernels)
    modules = list((tmp_path / "triton" / "kernels").glob("*.py"))
    assert len(modules) == len(functions)


class PassThroughLauncher:
    """A launcher shaped as Triton 3.6's CudaLauncher (its `__call__` is read as source)."""

    def __init__(self, calls, global_scratch_size=0):
        self.calls = calls
        self.global_scratch_size = global_scratch_size
        self.profile_scratch_size = 0
        self.launch_cooperative_grid, self.launch_pdl = False, True

    def launch(self, *args):
        self.calls.append(("entry", args))

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        global_scratch = profile_scratch = None
        self.calls.append(("python", args))
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid,
                    self.launch_pdl, global_scratch, profile_scratch, *args)  # fmt: skip


def test_direct_launch_calls_a_pass_through_launchers_entry_itself():
    from inductor_codegen.codegen.triton.runtime import binary_entry, direct_launch

    calls = []

    class Compiled:
        function, packed_metadata = "function", "metadata"
        run = PassThroughLauncher(calls)

    direct_launch(Compiled(), (4, 2, 1), (128,))(7, "a", "b")
    hooks = (None, None, None)
    assert calls == [("entry", (4, 2, 1, 7, "function", False, True, None, None, "metadata",
                                *hooks, "a", "b", 128))]  # fmt: skip
    # a kernel with scratch memory, or a launcher of another form, goes through `run`
    assert binary_entry(PassThroughLauncher([], global_scratch_size=64)) is None
    assert binary_entry(lambda *args: None) is None


def test_checked_launch_calls_the_binary_of_each_calls_specialization():
    """A kernel whose arguments the wrapper cannot vouch for (a fallback's result it writes)
    reads their specialization per call and launches the binary compiled for it directly;
    a specialization never compiled, or scalar arguments, take the checking entry."""
    from types import SimpleNamespace

    from inductor_codegen.codegen.triton.runtime import Launcher, TritonKernel

    calls = []

    def compiled(tag):
        return SimpleNamespace(
            function=tag, packed_metadata="metadata", run=lambda *a: calls.append(a)
        )

    kernel = TritonKernel.__new__(TritonKernel)
    kernel.source = SimpleNamespace(args=[SimpleNamespace(kind="in"), SimpleNamespace(kind="out")])
    kernel.checked_direct = {}
    launcher = Launcher.__new__(Launcher)
    launcher.fast, launcher.grid, launcher.constexpr_values = True, (3, 1, 1), (64,)
    aligned = torch.empty(8)
    misaligned = torch.empty(9)[1:]
    launcher.binaries = {(True, True): compiled("aligned"), (False, True): compiled("misaligned")}
    kernel.static_launcher = launcher
    entry = []
    checking_entry = TritonKernel.__call__  # looked up on the class
    try:
        TritonKernel.__call__ = lambda self, *args: entry.append(args)
        kernel.checked_launch(5, aligned, aligned)
        kernel.checked_launch(5, misaligned, aligned)
        kernel.checked_launch(5, aligned, misaligned)  # never compiled: the checking entry
    finally:
        TritonKernel.__call__ = checking_entry
    assert [c[4] for c in calls] == ["aligned", "misaligned"]
    assert calls[0][:4] == (3, 1, 1, 5) and calls[0][-3:] == (aligned, aligned, 64)
    assert len(entry) == 1 and entry[0][1] is misaligned
