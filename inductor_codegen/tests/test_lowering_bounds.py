"""Bounds checks of indirect loads: an index outside its table raises like eager.

Each gather (embedding, index_select, gather) is compiled for valid indices,
then called with an index one past the end and with a negative one: eager
raises (IndexError for embedding and index_select, RuntimeError for gather)
and the compiled graph must raise the same type, then still give eager's
result for valid indices (the failure is not sticky).
"""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from dynamic_graphs import trace_symbolic
from graph_helpers import check, compile_fn, trace

from inductor_codegen import compile_graph
from inductor_codegen.runtime import IndexOutOfRangeError


def _embedding(w, i):
    return F.embedding(i, w) * 2


def _embedding_sum(w, i):
    return (F.embedding(i, w) + 1).sum(-1)


def _index_select0(x, i):
    return torch.index_select(x.sin(), 0, i) + 1


def _index_select1(x, i):
    return torch.index_select(x, 1, i) * 3


def _gather0(x, i):
    return torch.gather(x, 0, i) + 1


def _gather1(x, i):
    return torch.gather(x.cos(), 1, i)


# (fn, table, valid index, the position of the gathered dim's size in table.shape)
CASES = {
    "embedding": (_embedding, (7, 4), lambda: torch.randint(0, 7, (2, 3)), 0),
    "embedding_reduced": (_embedding_sum, (7, 4), lambda: torch.randint(0, 7, (5,)), 0),
    "index_select_dim0": (_index_select0, (6, 5), lambda: torch.tensor([3, 0, 5]), 0),
    "index_select_dim1": (_index_select1, (6, 5), lambda: torch.tensor([4, 1]), 1),
    "gather_dim0": (_gather0, (6, 5), lambda: torch.randint(0, 6, (3, 5)), 0),
    "gather_dim1": (_gather1, (6, 5), lambda: torch.randint(0, 5, (6, 2)), 1),
}


def _with_bad(index: torch.Tensor, bad: int) -> torch.Tensor:
    out = index.clone()
    out.view(-1)[-1] = bad
    return out


def _eager_error(fn, table, index) -> type[BaseException]:
    with pytest.raises((IndexError, RuntimeError)) as info:
        fn(table, index)
    return info.type


@pytest.mark.parametrize("name", sorted(CASES))
def test_out_of_range_raises_like_eager(name):
    fn, shape, make_index, dim = CASES[name]
    table, index = torch.randn(shape), make_index()
    compiled = check(fn, table, index)
    assert not compiled.fallbacks
    for bad in (shape[dim], shape[dim] + 100, -1, -shape[dim]):
        bad_index = _with_bad(index, bad)
        error = _eager_error(fn, table, bad_index)
        with pytest.raises(error, match=f"index {bad} is out of range"):
            compiled(table, bad_index)
    # The status is cleared: valid indices work again.
    torch.testing.assert_close(compiled(table, index), fn(table, index))


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_error_names_the_op_and_the_valid_range(index_dtype):
    x = torch.randn(6, 5)
    index = torch.tensor([1, 2], dtype=index_dtype)
    compiled, _ = compile_fn(lambda x, i: torch.index_select(x, 1, i), x, index)
    bad = torch.tensor([1, 9], dtype=index_dtype)
    with pytest.raises(IndexOutOfRangeError) as info:
        compiled(x, bad)
    message = str(info.value)
    assert "index_select" in message and "index 9" in message
    assert "dimension 1 of size 5" in message and "0 to 4" in message


def test_gather_error_names_gather():
    x, index = torch.randn(4, 3), torch.randint(0, 3, (4, 3))
    compiled, _ = compile_fn(lambda x, i: torch.gather(x, 1, i), x, index)
    with pytest.raises(RuntimeError, match="gather: index -2 .* dimension 1 of size 3"):
        compiled(x, _with_bad(index, -2))


def test_out_of_range_in_a_parallel_kernel():
    # Enough work for the OpenMP-parallel loop: every thread may see bad indices.
    w = torch.randn(300, 128)
    index = torch.randint(0, 300, (8, 64))
    compiled = check(_embedding, w, index)
    bad = index.clone()
    bad[::2, ::3] = 300
    bad[1, 5] = -7
    with pytest.raises(IndexError, match="out of range for dimension 0 of size 300"):
        compiled(w, bad)
    torch.testing.assert_close(compiled(w, index), _embedding(w, index))


def test_two_gathers_in_one_kernel_report_the_failing_one():
    def fn(wte, wpe, tokens, positions):
        return F.embedding(tokens, wte) + F.embedding(positions, wpe)

    wte, wpe = torch.randn(50, 8), torch.randn(10, 8)
    tokens, positions = torch.randint(0, 50, (2, 7)), torch.arange(7).expand(2, 7)
    compiled = check(fn, wte, wpe, tokens, positions)
    assert compiled.kernel_count == 1
    with pytest.raises(IndexError, match="size 10"):
        compiled(wte, wpe, tokens, positions + 5)
    with pytest.raises(IndexError, match="index 50 .* size 50"):
        compiled(wte, wpe, _with_bad(tokens, 50), positions)


def test_symbolic_table_size_is_checked_per_call():
    def fn(w, i):
        return torch.index_select(w, 0, i) * 2

    w, index = torch.randn(6, 4), torch.tensor([0, 5, 2])
    gm, examples = trace_symbolic(fn, w, index, dynamic={0: [0], 1: [0]})
    compiled = compile_graph(gm, examples)
    for rows in (3, 9):
        table = torch.randn(rows, 4)
        good = torch.tensor([rows - 1, 0])
        torch.testing.assert_close(compiled(table, good)[0], fn(table, good))
        bad = torch.tensor([0, rows])
        with pytest.raises(IndexError, match=f"size {rows}"):
            compiled(table, bad)


@pytest.mark.parametrize("name", ["embedding", "index_select_dim1", "gather_dim0"])
def test_out_of_range_through_ember_compile(name):
    ember = pytest.importorskip("ember")
    fn, shape, make_index, dim = CASES[name]
    table, index = torch.randn(shape), make_index()
    compiled = ember.compile(fn, backend="inductor")
    torch.testing.assert_close(compiled(table, index), fn(table, index))
    for bad in (shape[dim], -1):
        bad_index = _with_bad(index, bad)
        with pytest.raises(_eager_error(fn, table, bad_index)) as info:
            compiled(table, bad_index)
        assert isinstance(info.value, IndexOutOfRangeError)  # raised by the compiled kernel


def test_gather_under_a_mask_is_checked_where_it_is_read():
    # cat and constant padding read the gather only inside their mask (an inline load).
    def fn(x, i, y):
        return torch.cat([F.pad(torch.index_select(x, 0, i), (1, 2)), y]) * 2

    x, index, y = torch.randn(6, 5), torch.tensor([5, 0, 2]), torch.randn(2, 8)
    compiled = check(fn, x, index, y)
    assert not compiled.fallbacks
    for bad in (6, -3):
        with pytest.raises(IndexError, match=f"index {bad} "):
            compiled(x, torch.tensor([0, bad, 1]), y)
    torch.testing.assert_close(compiled(x, index, y), fn(x, index, y))


def test_row_index_is_loaded_and_checked_once_per_row():
    w, index = torch.randn(40, 32), torch.randint(0, 40, (3, 5))
    compiled = check(_embedding, w, index)
    source = compiled.artifact("codegen")
    assert source.count("ember_checked_index(") == 1
    # The check comes before the loop over the row's elements, not inside it.
    assert source.index("ember_checked_index(") < source.rindex("for (int64_t")


def test_concurrent_calls_report_only_their_own_failure():
    w = torch.randn(300, 64)
    good = torch.randint(0, 300, (16, 32))
    bad = _with_bad(good, 300)
    compiled = check(_embedding, w, good)
    expected = _embedding(w, good)
    outcomes = {"good": [], "bad": []}

    def run(name, index):
        for _ in range(50):
            try:
                outcomes[name].append(torch.equal(compiled(w, index), expected))
            except IndexError:
                outcomes[name].append("raised")

    threads = [threading.Thread(target=run, args=a) for a in (("good", good), ("bad", bad))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes["good"] == [True] * 50
    assert outcomes["bad"] == ["raised"] * 50


def test_hoisted_index_is_shared_by_later_loops_of_the_kernel():
    # One gathered row read by a reduction loop and then by a pointwise loop.
    def fn(w, i):
        e = F.embedding(i, w)
        return e.sum(-1), e * 2, (e.amax(-1, keepdim=True) - e).exp()

    w, index = torch.randn(7, 32), torch.randint(0, 7, (4, 5))
    compiled = check(fn, w, index)
    with pytest.raises(IndexError, match="index 7 "):
        compiled(w, _with_bad(index, 7))


def test_index_computed_in_the_same_kernel():
    def fn(w, i):
        j = i * 2 - 1  # i = 0 gives -1, i = 4 gives 7: out of range for 7 rows
        return j, F.embedding(j, w) * 2

    w = torch.randn(7, 32)
    compiled = check(fn, w, torch.tensor([[1, 2, 3], [3, 1, 2]]))
    for bad in (torch.tensor([[1, 0, 2], [1, 1, 1]]), torch.tensor([[4, 1, 2], [1, 1, 1]])):
        with pytest.raises(IndexError, match="out of range"):
            compiled(w, bad)


def test_readers_counts_users_that_rejoin_as_one():
    from inductor_codegen.lowering.graph import readers

    def hardswish(x):
        y = x.float()
        return (y * torch.clamp(y + 3, 0, 6) / 6).to(torch.bfloat16)

    def softmax(x):
        return torch.exp(x - x.amax(dim=-1, keepdim=True))

    def transposed(x):
        y = x * 2
        return y + y.t()

    for fn, want in ((hardswish, 1), (softmax, 2), (transposed, 2)):
        gm = trace(fn, torch.randn(4, 4, dtype=torch.bfloat16 if fn is hardswish else None))
        shared = [n for n in gm.graph.nodes if n.op != "placeholder" and len(n.users) > 1]
        shared = shared or [n for n in gm.graph.nodes if n.op == "placeholder"]
        assert readers(shared[0]) == want, (fn.__name__, shared[0].format_node())
