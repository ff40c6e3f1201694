"""Values eager's kernels check (an index or class in range) are checked by compiled graphs.

A compiled graph traces on fake tensors, which have no values, and some functions take
another path there (`F.one_hot` compares with `arange(k)`, giving a row of zeros for a
class out of range). Every backend must raise eager's error class instead.

Footguns, worst first:
| a class or index out of range gives garbage   | one_hot, embedding, index_select, scatter,
|                                               | gather, take, x[idx], index_put -> raise
| the check dropped with an unused result       | one_hot whose result is not used -> raise
| the check lost on a warm start                | one_hot reloaded from disk -> raise
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember

BACKENDS = ["aot_eager", "inductor"]


pytestmark = pytest.mark.usefixtures("fresh_ember")


def _one_hot(t):
    return F.one_hot(t, num_classes=3) * 2


def _eager_error(fn, args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return info.value


def _assert_raises_like_eager(fn, args, backend):
    error = _eager_error(fn, args)
    compiled = ember.compile(fn, backend=backend)
    with pytest.raises(type(error)):
        compiled(*args)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("classes", [[0, 3, 1], [0, -1, 1], [7]])
def test_one_hot_class_out_of_range_raises_like_eager(backend, classes):
    t = torch.tensor(classes)
    error = _eager_error(_one_hot, [t])
    compiled = ember.compile(_one_hot, backend=backend)
    with pytest.raises(RuntimeError, match=str(error).split(".")[0]):
        compiled(t)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_hot_in_range_matches_eager_then_out_of_range_raises(backend):
    compiled = ember.compile(_one_hot, backend=backend)
    good = torch.tensor([[0, 2], [1, 1]])
    torch.testing.assert_close(compiled(good), _one_hot(good))
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        compiled(torch.tensor([[0, 2], [3, 1]]))
    empty = torch.zeros(0, dtype=torch.int64)
    torch.testing.assert_close(ember.compile(_one_hot, backend=backend)(empty), _one_hot(empty))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_hot_with_unused_result_still_checks_classes(backend):
    def fn(t, x):
        F.one_hot(t, 4)
        return x + 1

    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="Class values must be smaller"):
        ember.compile(fn, backend=backend)(torch.tensor([4]), x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_hot_in_a_training_graph_checks_classes(backend):
    def fn(t, w):
        return (F.one_hot(t, 3).float() @ w).sum()

    w = torch.randn(3, 2, requires_grad=True)
    compiled = ember.compile(fn, backend=backend)
    compiled(torch.tensor([0, 2]), w).backward()
    expected = torch.autograd.grad(fn(torch.tensor([0, 2]), w), w)[0]
    torch.testing.assert_close(w.grad, expected)
    with pytest.raises(RuntimeError, match="Class values must be non-negative"):
        compiled(torch.tensor([0, -2]), w)


def test_one_hot_check_survives_a_warm_start(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_WARM_START", "1")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBER_REMOTE_CACHE", raising=False)
    from ember import warm_cache

    warm_cache.STATS.clear()
    good = torch.tensor([0, 1, 2])
    ember.compile(_one_hot, backend="inductor")(good)
    ember.reset()
    compiled = ember.compile(_one_hot, backend="inductor")
    torch.testing.assert_close(compiled(good), _one_hot(good))
    assert warm_cache.STATS["hits"] == 1
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        compiled(torch.tensor([0, 5, 1]))


_TABLE, _VALUES = torch.randn(4, 3), torch.ones(1, 3)
INDEX_CASES = {
    "embedding": (lambda t, w: F.embedding(t, w) + 1, [torch.tensor([0, 4]), _TABLE]),
    "embedding_negative": (lambda t, w: F.embedding(t, w) + 1, [torch.tensor([-1]), _TABLE]),
    "index_select": (lambda w, t: w.index_select(0, t) * 2, [_TABLE, torch.tensor([0, 4])]),
    "scatter": (lambda w, t: w.scatter(0, t, _VALUES) + 1, [_TABLE, torch.tensor([[0, 4, 1]])]),
    "scatter_add": (
        lambda w, t: w.scatter_add(0, t, _VALUES) + 1,
        [_TABLE, torch.tensor([[0, 1, -1]])],
    ),
    "gather": (lambda w, t: w.gather(1, t) + 1, [_TABLE, torch.tensor([[0], [3], [1], [1]])]),
    "take": (lambda w, t: w.take(t) + 1, [_TABLE, torch.tensor([0, 12])]),
    "take_negative": (lambda w, t: w.take(t) + 1, [_TABLE, torch.tensor([-13])]),
    "getitem": (lambda w, t: w[t] + 1, [_TABLE, torch.tensor([0, 4])]),
    "index_put": (lambda w, t: w.index_put((t,), _VALUES[0]) + 1, [_TABLE, torch.tensor([4])]),
    "one_hot": (lambda t: F.one_hot(t, 2) + 1, [torch.tensor([2])]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(INDEX_CASES))
def test_index_out_of_range_raises_like_eager(backend, case):
    fn, args = INDEX_CASES[case]
    _assert_raises_like_eager(fn, args, backend)
