"""Where the Triton generator stores what a matmul reads, and which independent loops
share a kernel (compiled with the Triton generator; run under the interpreter on the CPU)."""

from __future__ import annotations

import re

import pytest
import torch
from graph_helpers import trace

from inductor_codegen import compile_graph

pytest.importorskip("triton")
pytestmark = pytest.mark.triton_interpret

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPTIONS = {"device_codegen": "triton"}


def compiled(fn, *args):
    return compile_graph(trace(fn, *args), list(args), options=OPTIONS)


def stores_and_loads(codegen: str) -> tuple[list[str], list[str]]:
    stores = re.findall(r"tl\.store\(out_ptr\d+ \+ \((.*?)\),", codegen)
    loads = re.findall(r"tl\.load\(in_ptr\d+ \+ \((.*?)\),", codegen)
    return stores, loads


def test_operand_used_transposed_is_stored_in_its_source_order():
    # autocast's cast of a weight that a matmul reads transposed: the copy runs along
    # the weight's rows, and the product reads it as a view
    x, w = torch.randn(6, 24, device=DEVICE), torch.randn(40, 24, device=DEVICE)
    fn = lambda x, w: x @ (w * 2).t()  # noqa: E731
    graph = compiled(fn, x, w)
    stores, loads = stores_and_loads(graph.artifact("codegen"))
    assert stores == loads, (stores, loads)  # no transposed write
    torch.testing.assert_close(graph(x, w), fn(x, w))


def test_weight_gradient_operand_is_not_transposed():
    # a layer's weight gradient, dy.t() @ x with dy computed: dy stays row-major
    dy, x, s = (torch.randn(32, 16, device=DEVICE) for _ in range(3))
    fn = lambda dy, x, s: (dy * s).t() @ x  # noqa: E731
    graph = compiled(fn, dy, x, s)
    stores, loads = stores_and_loads(graph.artifact("codegen"))
    assert set(stores) <= set(loads), (stores, loads)
    torch.testing.assert_close(graph(dy, x, s), fn(dy, x, s))


def test_batched_operand_keeps_batch_outermost():
    a, b = torch.randn(3, 8, 5, device=DEVICE), torch.randn(3, 8, 7, device=DEVICE)
    fn = lambda a, b: torch.bmm((a + 1).transpose(1, 2), b)  # noqa: E731
    graph = compiled(fn, a, b)
    torch.testing.assert_close(graph(a, b), fn(a, b))


def test_padded_head_operand_keeps_the_weight_order():
    # GPT2's head: [4096, 768] x [50257, 768].t() in bf16, N padded to 50264 (compiled, not run)
    x = torch.empty(4096, 768, dtype=torch.bfloat16)
    w = torch.empty(50257, 768)
    graph = compiled(lambda x, w: x @ w.to(torch.bfloat16).t(), x, w)
    padding = graph.artifact("codegen").split("@triton.jit")[1]
    stores, loads = stores_and_loads(padding)
    assert stores == ["xindex"], padding  # written along memory, as the weight is read
    assert "for " not in padding
    assert "torch_linear(x_1, buf0)" in graph.artifact("wrapper")  # read transposed


def test_independent_casts_are_not_looped_inside_one_kernel():
    # casts of a bias and two weights sharing their first size: on a GPU each is a flat
    # kernel, not rows of one kernel whose programs loop over the columns
    a, b, c = (torch.randn(16, *rest, device=DEVICE) for rest in ((), (64,), (256,)))
    fn = lambda a, b, c: (a.to(torch.bfloat16), b.to(torch.bfloat16), c.to(torch.bfloat16))  # noqa: E731
    graph = compiled(fn, a, b, c)
    codegen = graph.artifact("codegen")
    assert "R0BLOCK" not in codegen and "for " not in codegen, codegen
    for got, want in zip(graph(a, b, c), fn(a, b, c)):
        torch.testing.assert_close(got, want)


def test_long_rows_that_do_not_merge_run_as_row_tiles():
    # the window of a padded product copied out (rows 608 apart read, 600 apart written)
    x = torch.randn(6, 608, device=DEVICE)
    fn = lambda x: x[:, :600] * 2  # noqa: E731
    graph = compiled(fn, x)
    codegen = graph.artifact("codegen")
    assert "YBLOCK" in codegen and "//" not in codegen and "%" not in codegen, codegen
    torch.testing.assert_close(graph(x), fn(x))
    short = compiled(lambda x: x[:, :30] * 2, torch.randn(6, 40, device=DEVICE))  # short rows
    assert "YBLOCK" not in short.artifact("codegen")


def test_an_unrelated_copy_does_not_join_a_reduction_kernel():
    # T5's backward: the position bias gradient (a sum over the batch) next to a permuted
    # copy of another tensor with as many elements; the copy would take the reduction's
    # tiles and read across them
    g = torch.randn(4, 8, 16, 8, 16, device=DEVICE)
    q = torch.randn(8, 8, 16, 16, device=DEVICE)
    fn = lambda g, q: (g.sum(0), q.permute(0, 2, 1, 3).contiguous() * 2)  # noqa: E731
    graph = compiled(fn, g, q)
    kernels = graph.artifact("codegen").split("@triton.jit")[1:]
    assert len(kernels) == 2 and sum("R0BLOCK" in k for k in kernels) == 1, kernels
    for got, want in zip(graph(g, q), fn(g, q)):
        torch.testing.assert_close(got, want)
