"""Column sums computed in the row kernel that reads the same rows (column_partials).

A norm's backward reads dy and x once: the row kernel writes dx and, per block of rows,
partial sums of the weight and bias gradients; a small kernel sums the partials. Without
a GPU the kernels run under the Triton interpreter; the policy is scaled down so small
tensors take the path large ones take on a GPU.
"""

from __future__ import annotations

import re
import threading

import pytest
import torch
from graph_helpers import trace

from inductor_codegen import compile_graph
from inductor_codegen.column_partials import ColumnPartialPolicy, column_partial_policy
from inductor_codegen.lowering.split import SplitPolicy, split_reductions

pytest.importorskip("triton")
pytest.importorskip("aot_autograd")  # (packages of the pipeline: tests run alone without)
pytest.importorskip("prim_decomp")
from aot_autograd import aot_graph  # noqa: E402
from prim_decomp import inductor_default  # noqa: E402

pytestmark = pytest.mark.triton_interpret

aten = torch.ops.aten
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPTIONS = {"device_codegen": "triton"}
SMALL = ColumnPartialPolicy(programs=8, min_rows=2)
SMALL_SPLITS = SplitPolicy(
    min_reduction_numel=64,
    min_total_numel=256,
    min_column_total_numel=256,
    max_programs=64,
    target_programs=64,
    target_column_programs=64,
    column_block=16,
    min_chunk=16,
    min_column_chunk=8,
    max_splits=64,
)


def tolerance(dtype):
    return dict(rtol=2e-2, atol=3e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)


def layer_norm_backward_inputs(rows, columns, dtype):
    x = torch.randn(rows, columns, device=DEVICE).to(dtype)
    w = torch.randn(columns, device=DEVICE).to(dtype)
    b = torch.randn(columns, device=DEVICE).to(dtype)
    _, mean, rstd = aten.native_layer_norm(x, [columns], w, b, 1e-5)
    dy = torch.randn(rows, columns, device=DEVICE).to(dtype)
    return [dy, x, mean, rstd, w, b]


def layer_norm_backward(dy, x, mean, rstd, w, b):
    return aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean, rstd, w, b, [True] * 3)


def reference(fn, args, dtype):
    """Eager in float32 from the same inputs, cast back: eager's own bfloat16 kernel
    rounds its intermediate products and is the less accurate of the two."""
    wide = [a.float() if a.is_floating_point() else a for a in args]
    return [r.to(dtype) for r in fn(*wide)]


def compile_backward(args, policy=SMALL, splits=None):
    gm = trace(layer_norm_backward, *args)
    with column_partial_policy(policy), split_reductions(splits):
        return compile_graph(gm, args, options=OPTIONS)


def row_kernel(compiled) -> str:
    source = compiled.artifact("codegen")
    kernels = source.split("@triton.jit")
    return next(k for k in kernels if "colacc0" in k)


def row_loads(kernel_source: str, columns: int) -> list[str]:
    """The kernel's loads of [rows, columns] elements (dy, x: not the per-row or per-column
    vectors)."""
    return re.findall(rf"tl\.load\((\w+) \+ \({columns} \* xindex \+ r0index\)", kernel_source)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, columns", [(64, 300), (67, 129), (40, 16)])
def test_layer_norm_backward_reads_dy_and_x_once(rows, columns, dtype):
    args = layer_norm_backward_inputs(rows, columns, dtype)
    compiled = compile_backward(args)
    for got, want in zip(compiled(*args), reference(layer_norm_backward, args, dtype)):
        torch.testing.assert_close(got, want, **tolerance(dtype))
    assert compiled.kernel_count == 2
    assert "column partials" in compiled.artifact("column_partials")
    loads = row_loads(row_kernel(compiled), columns)
    assert len(loads) == len(set(loads)) == 2  # dy and x, each once


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_column_sums_rechunked_into_the_row_kernel(dtype):
    args = layer_norm_backward_inputs(203, 96, dtype)
    compiled = compile_backward(args, splits=SMALL_SPLITS)
    schedule = compiled.artifact("schedule")
    assert len(re.findall(r"kernel triton_", schedule)) == 3  # row, split partials, final
    for got, want in zip(compiled(*args), reference(layer_norm_backward, args, dtype)):
        torch.testing.assert_close(got, want, **tolerance(dtype))
    assert compiled.kernel_count == 2


def test_rows_longer_than_a_block_keep_the_column_kernel():
    args = layer_norm_backward_inputs(9, 5000, torch.float32)
    compiled = compile_backward(args)
    for got, want in zip(compiled(*args), layer_norm_backward(*args)):
        torch.testing.assert_close(got, want, **tolerance(torch.float32))
    assert "column partials" not in compiled.artifact("column_partials")


def test_disabled_policy_keeps_column_kernel():
    args = layer_norm_backward_inputs(64, 48, torch.float32)
    compiled = compile_backward(args, policy=ColumnPartialPolicy(enabled=False))
    for got, want in zip(compiled(*args), layer_norm_backward(*args)):
        torch.testing.assert_close(got, want, **tolerance(torch.float32))
    assert "column partials" not in compiled.artifact("column_partials")


def test_too_few_rows_a_program_keep_the_column_kernel():
    args = layer_norm_backward_inputs(64, 48, torch.float32)
    compiled = compile_backward(args, policy=ColumnPartialPolicy(programs=64, min_rows=2))
    assert "column partials" not in compiled.artifact("column_partials")


def test_cpp_layer_norm_backward_unchanged():
    args = layer_norm_backward_inputs(67, 129, torch.float32)
    if DEVICE != "cpu":
        pytest.skip("the C++ generator runs CPU tensors")
    gm = trace(layer_norm_backward, *args)
    with column_partial_policy(SMALL):
        compiled = compile_graph(gm, args, options={"device_codegen": "cpp"})
    for got, want in zip(compiled(*args), layer_norm_backward(*args)):
        torch.testing.assert_close(got, want, **tolerance(torch.float32))


# ---------------------------------------------------------------- training through aot_autograd


class RMSNorm(torch.nn.Module):
    """RMS norm as Hugging Face models write it by hand."""

    def __init__(self, columns: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(columns))
        self.eps = 1e-6

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def train_step(model, x, dy, backward=lambda out, dy: out.backward(dy)):
    compiled = []

    def part(g, inputs):
        made = compile_graph(g, inputs, options=OPTIONS)
        compiled.append(made)
        return made

    fn = aot_graph_function(model, x, part)
    with column_partial_policy(SMALL):
        out = fn(x)
        backward(out, dy)
    got = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    model(x).backward(dy)
    want = [x.grad] + [p.grad for p in model.parameters()]
    return got, want, compiled


def aot_graph_function(model, x, part):
    from torch.fx.experimental.proxy_tensor import make_fx  # the reference front end

    params = list(model.parameters())

    def fn(x, *params):
        return torch.func.functional_call(
            model, dict(zip(dict(model.named_parameters()), params)), (x,)
        )

    gm = make_fx(fn)(x, *params)
    compiled = aot_graph(
        gm,
        [x, *params],
        fw_compiler=part,
        bw_compiler=part,
        inference_compiler=part,
        decompositions=inductor_default,
    )
    return lambda x: compiled(x, *params)


def on_a_thread_of_its_own(out, dy):
    """The backward run as autograd's engine runs that of CUDA tensors: on a thread of
    its own (one per device), which starts with no context variables set."""
    errors = []

    def run():
        try:
            out.backward(dy)
        except BaseException as error:  # noqa: BLE001 - raised again on the caller's thread
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("thread", ["caller", "its_own"])
@pytest.mark.parametrize("module", ["layer_norm", "rms_norm"])
def test_norm_training_backward_takes_column_partials(module, thread):
    # the backward compiles at its first use, on autograd's thread: under a GPU that is a
    # thread of its own, where the policy of the block around the step must still hold
    torch.manual_seed(0)
    columns = 96
    model = torch.nn.LayerNorm(columns) if module == "layer_norm" else RMSNorm(columns)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    model = model.to(DEVICE)
    x = torch.randn(2, 33, columns, device=DEVICE, requires_grad=True)
    dy = torch.randn(2, 33, columns, device=DEVICE)
    backward = on_a_thread_of_its_own if thread == "its_own" else (lambda out, dy: out.backward(dy))
    got, want, compiled = train_step(model, x, dy, backward)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    backward = compiled[-1]
    assert "column partials" in backward.artifact("column_partials")
    assert backward.kernel_count == 2


def _gpu_form_on_cpu(fn, args: list):
    """`fn`'s graph as decomposed for a device other than the CPU (traced on meta tensors),
    its factories then moved to the CPU, where these tests run it."""
    from graph_helpers import decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn, decomposition_table=decompositions())(*[a.to("meta") for a in args])
    for node in gm.graph.nodes:
        if node.kwargs.get("device") == torch.device("meta"):
            node.kwargs = {**node.kwargs, "device": torch.device("cpu")}
    gm.recompile()
    return make_fx(gm)(*args)  # traced again on the CPU inputs: CPU values on every node


def test_layer_norm_backward_in_its_gpu_form_takes_column_partials():
    # prim_decomp decomposes the backward per device (the sums of g and g * x_hat off the
    # CPU); traced on meta tensors it takes that form, then compiles for these inputs
    args = layer_norm_backward_inputs(67, 129, torch.float32)
    gm = _gpu_form_on_cpu(layer_norm_backward, args)
    with column_partial_policy(SMALL):
        compiled = compile_graph(gm, args, options=OPTIONS)
    for got, want in zip(compiled(*args), layer_norm_backward(*args)):
        torch.testing.assert_close(got, want, **tolerance(torch.float32))
    assert compiled.kernel_count == 2
    assert len(row_loads(row_kernel(compiled), 129)) == 2


@pytest.mark.parametrize("rows, columns", [(8192, 768), (8192, 4096), (4096, 1024)])
def test_default_policy_takes_column_partials_at_gpu_sizes(rows, columns):
    # the driver's own policy (no scope around the compile) at a transformer's sizes in
    # bfloat16, the backward in its GPU form: compiled only (the interpreter would take
    # minutes to run it; the tests above check the values of the same kernels)

    bf16 = torch.bfloat16
    args = [
        torch.empty(rows, columns, dtype=bf16),
        torch.empty(rows, columns, dtype=bf16),
        torch.empty(rows, 1),
        torch.empty(rows, 1),
        torch.empty(columns, dtype=bf16),
        torch.empty(columns, dtype=bf16),
    ]
    gm = _gpu_form_on_cpu(layer_norm_backward, args)
    compiled = compile_graph(gm, args, options=OPTIONS)
    assert "column partials" in compiled.artifact("column_partials")
    assert compiled.kernel_count == 2
    assert len(row_loads(row_kernel(compiled), columns)) == 2
