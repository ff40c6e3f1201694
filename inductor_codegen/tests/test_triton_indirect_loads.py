"""Gathers (gather, index_select, embedding) as indirect loads in Triton kernels.

A load whose index holds a value loaded from another tensor: `tl.load(ptr + offset)`
with the offset checked against the table's size. A table not in memory (a pointwise
value) is computed at the gathered positions only, never stored. Results against
eager; without a GPU the kernels run under the Triton interpreter.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import check, compile_fn

pytest.importorskip("triton")

pytestmark = pytest.mark.triton_interpret

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPTIONS = {"device_codegen": "triton"}


def triton_check(fn, *args, **tolerances):
    compiled = check(fn, *args, options=OPTIONS, **tolerances)
    assert not compiled.fallbacks, compiled.fallbacks
    assert "tl.device_assert" in compiled.artifact("codegen")
    return compiled


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_gather_reads_through_a_loaded_index(dim):
    x = torch.randn(4, 5, 6, device=DEVICE)
    index = torch.randint(0, x.shape[dim], (3, 4, 5), device=DEVICE)
    compiled = triton_check(lambda x, i: torch.gather(x, dim, i) + 1, x, index)
    assert compiled.kernel_count == 1


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_index_select_reads_through_a_loaded_index(dim, index_dtype):
    x = torch.randn(6, 5, 7, device=DEVICE)
    index = torch.tensor([3, 0, 3, 1], dtype=index_dtype, device=DEVICE)
    triton_check(lambda x, i: torch.index_select(x, dim, i) * 2, x, index)


def test_index_select_with_a_scalar_index_of_a_transposed_table():
    x = torch.randn(5, 7, device=DEVICE).t()
    triton_check(lambda x, i: torch.index_select(x, 0, i), x, torch.tensor(4, device=DEVICE))


def test_embedding_sum_and_layer_norm_is_one_kernel_per_row():
    def fn(wte, wpe, tokens, positions):
        h = F.embedding(tokens, wte) + F.embedding(positions, wpe)
        return F.layer_norm(h, (h.shape[-1],))

    tokens = torch.randint(0, 50, (2, 7), device=DEVICE)
    positions = torch.arange(7, device=DEVICE).expand(2, 7)
    wte, wpe = torch.randn(50, 16, device=DEVICE), torch.randn(10, 16, device=DEVICE)
    compiled = triton_check(fn, wte, wpe, tokens, positions, rtol=1e-4, atol=1e-4)
    assert compiled.kernel_count == 1


def test_gather_of_low_precision_and_integer_tables():
    index = torch.randint(0, 6, (4, 3), device=DEVICE)
    table = torch.randn(4, 6, device=DEVICE).bfloat16()
    triton_check(lambda x, i: torch.gather(x, 1, i), table, index)
    triton_check(lambda x, i: torch.gather(x, 1, i), torch.randint(-9, 9, (4, 6)).to(DEVICE), index)


def test_gather_along_a_reduction_row():
    # the offset varies along the reduced dim: lanes past the row's end are masked
    x = torch.randn(5, 37, device=DEVICE)
    index = torch.randint(0, 37, (5, 29), device=DEVICE)
    triton_check(lambda x, i: torch.gather(x.exp(), 1, i).sum(1), x, index, rtol=1e-5, atol=1e-5)


def test_gathered_pointwise_table_is_not_stored():
    # log_softmax's value at the target only: the [rows, classes] value is never written
    def fn(x, target):
        picked = torch.gather(x.float() - x.float().amax(1, keepdim=True), 1, target[:, None])
        return picked.squeeze(1) * 2

    x = torch.randn(6, 301, device=DEVICE).bfloat16()
    target = torch.randint(0, 301, (6,), device=DEVICE)
    compiled = triton_check(fn, x, target)
    stores = re.findall(r"tl\.store\(\w+ \+ \(301 \* xindex", compiled.artifact("codegen"))
    assert not stores
    assert compiled.kernel_count == 1


def test_table_gathered_more_often_than_it_has_elements_is_stored_once():
    def fn(x, i):
        return torch.index_select(x.sin(), 0, i)

    x = torch.randn(3, 4, device=DEVICE)
    index = torch.randint(0, 3, (40,), device=DEVICE)
    compiled = triton_check(fn, x, index)
    assert compiled.kernel_count == 2  # sin stored, then gathered


@pytest.mark.parametrize("bad", [7, -1])
def test_index_out_of_range_is_never_read_and_gives_nan(bad):
    # On a GPU the kernel's device assertion stops it (debug-mode kernels); the
    # interpreter, which has no device assertions, shows the fault as NaN.
    if DEVICE == "cuda":
        pytest.skip("a failed device assertion ends the CUDA context")
    x = torch.randn(4, 7)
    index = torch.randint(0, 7, (4, 2))
    compiled, _ = compile_fn(lambda x, i: torch.gather(x, 1, i) * 2, x, index, options=OPTIONS)
    index[2, 1] = bad
    got = compiled(x, index)
    assert got[2, 1].isnan()
    expected = torch.gather(x, 1, index.clamp(0, 6)) * 2
    torch.testing.assert_close(got[index != bad], expected[index != bad])


def test_kernels_with_indirect_loads_compile_for_cuda_in_debug_mode():
    from cuda_target import compile_for_cuda

    index = torch.randint(0, 6, (4, 3))
    table = torch.randint(-9, 9, (4, 6))  # int64 like the index: one pointer type
    compiled, _ = compile_fn(lambda x, i: torch.gather(x * 3, 1, i), table, index, options=OPTIONS)
    source = compiled.artifact("codegen")
    assert "@triton.jit(debug=True)" in source
    compile_for_cuda(source, "*i64")


def test_cpp_gather_of_a_pointwise_table_checks_its_index():
    from inductor_codegen.runtime import IndexOutOfRangeError

    def fn(x, i):
        return torch.gather(x.exp() - 1, 1, i)

    x = torch.randn(4, 7)
    index = torch.randint(0, 7, (4, 3))
    compiled = check(fn, x, index)
    assert not compiled.fallbacks
    index[1, 2] = 7
    with pytest.raises(IndexOutOfRangeError):
        compiled(x, index)


def unchecked_check(fn, *args):
    compiled = check(fn, *args, options=OPTIONS)
    assert not compiled.fallbacks, compiled.fallbacks
    source = compiled.artifact("codegen")
    assert "tl.device_assert" not in source and "debug=True" not in source
    return compiled


def test_embedding_of_clamped_tokens_skips_the_bounds_check():
    # clamp(i, 0, 49) is in [0, 50) whatever i holds: no check, no debug-mode kernel
    wte = torch.randn(50, 16, device=DEVICE)
    tokens = torch.randint(-20, 80, (2, 7), device=DEVICE)
    unchecked_check(lambda w, i: F.embedding(i.clamp(0, 49), w) * 2, wte, tokens)


def test_gather_of_where_between_in_range_values_skips_the_bounds_check():
    x = torch.randn(4, 9, device=DEVICE)
    index = torch.randint(-3, 12, (4, 5), device=DEVICE)
    fn = lambda x, i: torch.gather(x, 1, torch.where(i < 0, 0, i % 9))  # noqa: E731
    unchecked_check(fn, x, index)


def test_index_select_at_an_arange_skips_the_bounds_check():
    x = torch.randn(6, 5, device=DEVICE)
    unchecked_check(lambda x: torch.index_select(x, 0, torch.arange(6, device=x.device)) + 1, x)


@pytest.mark.parametrize(
    "make",
    [
        lambda i: i.clamp(0, 50),  # one past the end: 50 is out of range
        lambda i: i.clamp(max=49),  # no lower bound
        lambda i: torch.where(i < 0, i + 50, i),  # a loaded value in one arm
        lambda i: i.clamp(0, 49) + 1,  # shifted past the end
    ],
    ids=["clamp_to_size", "clamp_max_only", "where_loaded", "shifted"],
)
def test_offset_not_provably_in_range_keeps_the_bounds_check(make):
    wte = torch.randn(50, 16, device=DEVICE)
    tokens = torch.randint(0, 49, (2, 7), device=DEVICE)
    triton_check(lambda w, i: F.embedding(make(i), w), wte, tokens)


def test_an_index_read_through_another_gather_is_checked_against_the_table():
    # the offset of the outer load is itself a gathered value (a token-type id read
    # through a position): its range is its dtype's, so the bounds check stays
    def fn(table, ids, positions):
        return F.embedding(torch.index_select(ids, 0, positions), table) * 2

    table = torch.randn(6, 4, device=DEVICE)
    ids = torch.tensor([5, 0, 3, 1, 2], device=DEVICE)
    positions = torch.tensor([4, 4, 0, 2], device=DEVICE)
    triton_check(fn, table, ids, positions)
