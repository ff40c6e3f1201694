"""The generated wrapper's per-call path: fewest Python operations, eager's results.

Views are `as_strided` calls (offsets from the base's own when nonzero), a pooled
buffer of the same layout is reused as it is, ATen results are checked inline and
copied only when ATen chose other strides, hot ATen ops go through their torch
functions and other OpOverloads through their C++ callables.
"""

from __future__ import annotations

import re

import torch
from graph_helpers import check, compile_fn


def _wrapper(compiled) -> str:
    return compiled.artifact("wrapper")


def test_views_of_inputs_at_offset_zero_and_elsewhere():
    w = torch.randn(8, 6)

    def fn(x):
        return x.t() @ w[:, 1:], x[1:, :] @ w[3:, :3]

    compiled = check(fn, torch.randn(8, 5), rtol=1e-4, atol=1e-4)
    text = _wrapper(compiled)
    assert "as_strided(x_1, (5, 8), (1, 5))" in text
    assert "reinterpret(x_1, (7, 5), (5, 1), 5)" in text  # x[1:] starts 5 elements in
    x = torch.randn(10, 5)[2:]  # an input with its own storage offset
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)


def test_pooled_buffer_of_the_same_layout_is_reused_as_it_is():
    w = torch.randn(16, 16)

    def chain(x):
        a = (x.exp() + 1) @ w
        b = (a.sin() + 1) @ w
        return (b.cos() + 1) @ w

    compiled = check(chain, torch.randn(16, 16), rtol=1e-4, atol=1e-4)
    renames = re.findall(r"^    (buf\d+) = (buf\d+)  # reuses \2$", _wrapper(compiled), re.M)
    assert renames, _wrapper(compiled)
    for _ in range(3):  # reused memory holds each call's own values
        x = torch.randn(16, 16)
        torch.testing.assert_close(compiled(x), chain(x), rtol=1e-4, atol=1e-4)


def test_pooled_buffer_of_another_shape_is_viewed():
    w = torch.randn(8, 8)

    def fn(x):
        a = (x.exp() + 1) @ w  # (8, 8)
        b = (a.sin() + 1).reshape(4, 16).t().contiguous()  # (16, 4): same elements
        return b.cos() * 2

    compiled = check(fn, torch.randn(8, 8), rtol=1e-4, atol=1e-4)
    x = torch.randn(8, 8)
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)


def test_aten_results_in_other_strides_are_copied_to_the_traced_layout():
    def fn(x):
        return torch.cumsum(x, 1).relu() + 1

    x = torch.randn(6, 5)
    compiled, _ = compile_fn(fn, x)
    text = _wrapper(compiled)
    call = re.search(r"^    (buf\d+) = (torch_cumsum)\(", text, re.M)
    assert call, text
    name = call.group(1)
    assert f"if {name}.stride() != (5, 1): {name} = ensure_layout(" in text
    namespace = compiled._call.__globals__
    original = namespace["torch_cumsum"]

    def column_major_cumsum(a, dim):  # same values, Fortran order: the kernels must not see it
        return original(a.t(), 1 - dim).t()

    namespace["torch_cumsum"] = column_major_cumsum
    try:
        assert column_major_cumsum(x, 1).stride() == (1, 6)
        torch.testing.assert_close(compiled(x), fn(x))
    finally:
        namespace["torch_cumsum"] = original


def test_products_are_not_checked_for_strides():
    # ATen's mm, addmm, bmm and baddbmm always return a new row-major tensor
    compiled, _ = compile_fn(lambda x, w: (x @ w).relu() + 1, torch.randn(6, 4), torch.randn(4, 5))
    assert "ensure_layout" not in _wrapper(compiled)


def test_op_overloads_are_called_without_the_python_frame():
    compiled = check(lambda x: torch.cummax(x, 0)[0] + 1, torch.randn(3, 4))
    text = _wrapper(compiled)
    assert "aten_cummax_default(" in text and "aten.cummax.default(" not in text
    assert compiled._call.__globals__["aten_cummax_default"] is torch.ops.aten.cummax.default._op


def test_hot_extern_ops_are_called_through_their_torch_functions():
    compiled = check(lambda x, w: x @ w, torch.randn(3, 4), torch.randn(4, 2))
    text = _wrapper(compiled)
    assert "torch_mm(" in text and "aten_mm_default" not in text
    assert compiled._call.__globals__["torch_mm"] is torch.mm


def test_each_direct_binding_is_its_aten_op():
    """Every DIRECT_BINDINGS name resolves to a public function computing what the
    OpOverload computes (the CPU-runnable ones run on samples)."""
    from inductor_codegen.codegen.wrapper import DIRECT_BINDINGS, direct_binding

    aten = torch.ops.aten
    x, w, b = torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(4)
    m, n = torch.randn(3, 4), torch.randn(4, 5)
    batch = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    index = torch.tensor([2, 0])
    samples = {
        "convolution": (x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
        "addmm": (torch.randn(5), m, n),
        "mm": (m, n),
        "bmm": batch,
        "baddbmm": (torch.randn(2, 3, 5), *batch),
        "linear": (m, n.t(), torch.randn(5)),
        "index_select": (m, 0, index),
        "embedding": (m, index),
        "cumsum": (m, 1),
    }
    for name in DIRECT_BINDINGS:
        op = getattr(aten, name).default
        function = direct_binding(op, {})
        assert function is not None and function.__name__ == name, name
        if name in samples:
            torch.testing.assert_close(function(*samples[name]), op(*samples[name]))
    # a schema argument passed by keyword keeps the OpOverload (`self` is `input` there)
    assert direct_binding(aten.cumsum.default, {"dim": 1}) is None
    assert direct_binding(aten.cumsum.default, {"dtype": torch.float64}) is torch.cumsum
    assert direct_binding(aten.sum.dim_IntList, {}) is None  # only default overloads


def test_outputs_that_view_a_buffer():
    def fn(x):
        y = (x * 2).exp()
        return y.view(-1), y[1:], y.t()

    compiled = check(fn, torch.randn(4, 6))
    got = compiled(torch.randn(4, 6))
    assert got[0].data_ptr() == got[2].data_ptr()
    assert got[1].storage_offset() == 6


def test_a_buffer_several_kernels_take_has_its_pointer_read_once():
    w = torch.randn(6, 6)

    def fn(x):
        y = x.sin() @ w
        return x.cos() + y, (x * y).sum(0)

    compiled = check(fn, torch.randn(6, 6), rtol=1e-4, atol=1e-4)
    text = _wrapper(compiled)
    assert text.count("x_1_ptr = x_1.data_ptr()") == 1, text
    assert "x_1.data_ptr()" not in text.replace("x_1_ptr = x_1.data_ptr()", "")
    for _ in range(2):
        x = torch.randn(6, 6)
        torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)


def test_matmuls_of_a_transposed_weight_call_linear():
    def fn(x, w1, b1, w2, bias2d):
        h = torch.nn.functional.linear(x, w1, b1).relu()  # addmm(b1, x, w1.t())
        out = torch.nn.functional.linear(h, w2)  # mm(h, w2.t())
        other = torch.addmm(bias2d, x, w1.t())  # a 2-D bias: stays addmm
        return out, other, x @ w1[:8].t()  # a transpose of part of w1: stays mm

    def make():
        return (
            torch.randn(3, 8),
            torch.randn(16, 8),
            torch.randn(16),
            torch.randn(4, 16),
            torch.randn(3, 16),
        )

    compiled = check(fn, *make(), rtol=1e-5, atol=1e-5)
    text = _wrapper(compiled)
    assert text.count("torch_linear(") == 2, text
    assert text.count("torch_addmm(") == 1 and text.count("torch_mm(") == 1, text
    for _ in range(2):
        args = make()
        torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-5, atol=1e-5)
