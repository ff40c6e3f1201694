"""Extern (ATen) calls: a value they read is stored once, however many calls or arguments
read it; their results are checked against the traced sizes where the graph reads them."""

from __future__ import annotations

import re

import pytest
import torch
from graph_helpers import check, decompositions, trace
from torch.fx.experimental.proxy_tensor import make_fx

from inductor_codegen import compile_graph
from inductor_codegen.errors import InductorError
from inductor_codegen.runtime import ensure_layout

aten = torch.ops.aten


def _three_projections(x, wq, wk, wv):
    h = x * 2 + 1  # cheap: inline until an extern call needs it in memory
    return h @ wq, h @ wk, h @ wv


def _same_value_three_times(x):
    h = x * 3
    return torch.addmm(h, h, h)


def _extern_buffer_args(wrapper: str) -> list[list[str]]:
    """The buffer arguments of each extern (ATen) call in a generated wrapper."""
    calls = re.findall(r"= (?:aten|torch)\w*\(([^)]*)\)", wrapper)
    return [
        [arg.strip() for arg in call.split(",") if arg.strip().startswith("buf")] for call in calls
    ]


def test_one_buffer_serves_every_extern_call_reading_a_value():
    x = torch.randn(8, 16)
    weights = [torch.randn(16, 16) for _ in range(3)]
    compiled = check(_three_projections, x, *weights)
    wrapper = open(compiled.wrapper_path).read()
    stored = {arg for args in _extern_buffer_args(wrapper) for arg in args}
    assert len(stored) == 1, wrapper  # all three matmuls read the one buffer


def test_one_buffer_serves_an_extern_call_taking_a_value_thrice():
    compiled = check(_same_value_three_times, torch.randn(6, 6))
    wrapper = open(compiled.wrapper_path).read()
    (args,) = [args for args in _extern_buffer_args(wrapper) if args]
    assert len(args) == 3 and len(set(args)) == 1, wrapper


def _bag_sums(weight, indices, offsets):
    return torch.ops.aten._embedding_bag_forward_only(weight, indices, offsets)[0] * 2


def test_tuple_results_nobody_reads_take_the_size_aten_gives():
    """An ATen call may return another size than meta["val"] for an output the graph
    never reads (CPU `_embedding_bag_forward_only`'s offset2bag): no check, no copy."""
    args = (torch.randn(10, 3), torch.tensor([1, 2, 4, 5, 4]), torch.tensor([0, 3]))
    gm = trace(_bag_sums, *args)
    bag = next(n for n in gm.graph.nodes if n.target == aten._embedding_bag_forward_only.default)
    val = list(bag.meta["val"])
    val[1] = torch.empty(17, dtype=torch.long)  # a size the kernel will not return
    bag.meta["val"] = tuple(val)
    compiled = compile_graph(gm, list(args))
    torch.testing.assert_close(compiled(*args), _bag_sums(*args))


def test_an_aten_result_of_another_size_than_traced_is_an_error():
    with pytest.raises(InductorError, match="returned size"):
        ensure_layout(torch.ones(1), (5,), (1,))  # a copy would broadcast: never silent


def _attention_of_a_computed_query(x, k, v):
    q = x.transpose(1, 2) * 2  # traced (batch, seq, heads, dim) transposed, as a RoPE'd query
    out = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True, scale=0.125)
    return out[0].transpose(1, 2).reshape(2, 64, 128) + 1


def test_flash_attention_query_is_stored_as_its_output_is_traced():
    """CPU flash attention lays its output out like the query: a computed query stored in
    the traced output's order gives the traced layout back, with no copy after the call."""
    args = [torch.randn(2, 64, 4, 32), torch.randn(2, 4, 64, 32), torch.randn(2, 4, 64, 32)]
    gm = make_fx(
        _attention_of_a_computed_query, decomposition_table=decompositions(), tracing_mode="fake"
    )(*args)
    compiled = compile_graph(gm, list(args))
    torch.testing.assert_close(compiled(*args), _attention_of_a_computed_query(*args))
    with torch.profiler.profile() as profile:
        compiled(*args)
    assert "aten::copy_" not in {event.key for event in profile.key_averages()}


def _attention_returning_its_query(x, k, v):
    q = (x.transpose(1, 2) * 2).sin()  # read twice: by the attention and as an output
    out = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True, scale=0.125)
    return out[0].transpose(1, 2).reshape(2, 64, 128) + 1, q


def test_a_returned_value_read_twice_is_stored_once_in_its_returned_layout():
    """A query saved for the backward pass is stored once, as it is returned: the
    attention reads that buffer and gives its output in the traced layout (no copy)."""
    args = [torch.randn(2, 64, 4, 32), torch.randn(2, 4, 64, 32), torch.randn(2, 4, 64, 32)]
    gm = make_fx(
        _attention_returning_its_query, decomposition_table=decompositions(), tracing_mode="fake"
    )(*args)
    compiled = compile_graph(gm, list(args))
    out, q = compiled(*args)
    torch.testing.assert_close((out, q), _attention_returning_its_query(*args))
    assert q.stride() == (8192, 32, 128, 1)
    with torch.profiler.profile() as profile:
        compiled(*args)
    assert "aten::copy_" not in {event.key for event in profile.key_averages()}
    wrapper = open(compiled.wrapper_path).read()
    assert (
        wrapper.count("empty_strided((2, 64, 4, 32)")
        + wrapper.count("empty_strided((2, 4, 64, 32)")
        <= 1
    ), wrapper


def _gradient_read_as_is_and_transposed(g, a, w):
    h = g * a + 1  # cheap: no reason to store it but the two products
    return h @ w, h.t() @ a


def test_a_value_two_matrix_products_read_is_stored_once():
    """A gradient the backward pass multiplies as is and transposed is one buffer that
    both products read (the transposed one through a view), not two copies."""
    g, a, w = torch.randn(128, 96), torch.randn(128, 96), torch.randn(96, 64)
    compiled = check(_gradient_read_as_is_and_transposed, g, a, w)
    wrapper = open(compiled.wrapper_path).read()
    products = re.findall(r"= torch_mm\((.*)\)", wrapper)
    assert len(products) == 2, wrapper
    assert len({name for call in products for name in re.findall(r"buf\d+", call)}) == 1, wrapper
