"""Mutated inputs whose new value is a scatter are written in place, not copied back.

aot_autograd copies each mutated input's new value back whole; the inductor backend
instead stores a scatter's elements into the input itself (a static key/value cache
writes one position per decode step) where nothing reads the input's old value, and
reports the input, whose copy back the run time then skips. Each test compares with
eager; the `copies` fixture counts the whole-tensor `copy_` calls of a compiled call.

Footguns, worst first:
  silent wrong result  an in-place write while the old value is still read (a value
                       read after the write, an input saved for the backward, an
                       input aliasing another, a self-overlapping input)
  slowdown             the whole cache copied back each step
"""

from __future__ import annotations

import pytest
import torch
from copy_counting import CopyShapes
from torch.testing import assert_close

import ember


def _run(fn, make_args, *, steps=2, grad=False, dynamic=None, backend="inductor", options=None):
    """Compiled and eager `fn` on equal inputs for `steps` calls; asserts outputs and
    inputs match; returns the shapes of the tensors `copy_` wrote in the last call."""
    compiled = ember.compile(fn, backend=backend, dynamic=dynamic, options=options)
    for step in range(steps):
        eager_args = make_args(step)
        compiled_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in eager_args]
        with torch.enable_grad() if grad else torch.no_grad():
            expected = fn(*eager_args)
            with CopyShapes() as counter:
                actual = compiled(*compiled_args)
        assert_close(actual, expected)
        for got, want in zip(compiled_args, eager_args):
            if isinstance(got, torch.Tensor):
                assert_close(got, want)
    return counter.shapes


def _index_copy_cache(cache, position, key):
    cache.index_copy_(2, position, key)
    return (cache * 2).sum(-1)


def _cache_args(step, batch=1):
    return [
        torch.zeros(batch, 2, 8, 4),
        torch.tensor([step]),
        torch.randn(batch, 2, 1, 4),
    ]


def test_static_cache_index_copy_writes_one_position_without_copy_back():
    assert _run(_index_copy_cache, _cache_args) == []


def test_static_cache_index_copy_wrapper_calls_the_in_place_op():
    compiled = ember.compile(_index_copy_cache, backend="inductor")
    with torch.no_grad():
        compiled(*_cache_args(0))
    wrapper = ember.last_artifacts(compiled).wrapper
    assert "aten_index_copy__default(" in wrapper


def test_static_cache_setitem_writes_in_place():
    def update(cache, position, value):
        cache[:, :, position] = value
        return cache.sum(-1)

    assert _run(update, _cache_args) == []


def test_slice_and_select_assignment_copy_only_the_written_elements():
    def slice_assign(x, v):
        x[:, 2:4] = v
        return x + 1

    def select_assign(x, v):
        x[1] = v
        return x + 1

    assert _run(slice_assign, lambda s: [torch.zeros(3, 8), torch.randn(3, 2)]) == [(3, 2)]
    assert _run(select_assign, lambda s: [torch.zeros(3, 8), torch.randn(8)]) == [(8,)]


def test_indexed_accumulate_reads_old_values_before_writing_in_place():
    def accumulate(x, index, v):
        x[index] += v
        return x.sum()

    def args(step):
        return [torch.randn(6), torch.tensor([1, 3, 1]), torch.randn(3)]

    assert _run(accumulate, args) == []


def test_old_value_read_before_the_write_is_stored_first_and_the_input_written_in_place():
    # `before` is read after the write: it is computed into a buffer of its own before it
    def reads_old(x, position, v):
        before = x * 2
        x.index_copy_(0, position, v)
        return before.sum(0) + x.sum(0)

    def args(step):
        return [torch.randn(5, 3), torch.tensor([2]), torch.randn(1, 3)]

    assert _run(reads_old, args) == []


def test_scatter_of_the_inputs_own_rows_matches_eager():
    def shifts(x, position):
        x.index_copy_(0, position, x[1:3].clone())
        return x.sum()

    _run(shifts, lambda s: [torch.randn(5, 3), torch.tensor([3, 0])])


def test_mutated_input_returned_is_the_callers_tensor():
    def returns_it(x, position, v):
        x.index_copy_(0, position, v)
        return x

    compiled = ember.compile(returns_it, backend="inductor")
    x, position, v = torch.zeros(5, 3), torch.tensor([2]), torch.randn(1, 3)
    with torch.no_grad():
        out = compiled(x, position, v)
    assert out is x
    assert_close(x[2], v[0])


def test_input_view_with_storage_offset_is_written_in_place():
    def args(step):
        base = torch.zeros(3, 1, 2, 8, 4)
        return [base[1], torch.tensor([step]), torch.randn(1, 2, 1, 4)]

    assert _run(_index_copy_cache, args) == []
    base = torch.zeros(3, 1, 2, 8, 4)
    key = torch.randn(1, 2, 1, 4)
    with torch.no_grad():
        ember.compile(_index_copy_cache, backend="inductor")(base[1], torch.tensor([5]), key)
    assert_close(base[1, :, :, 5:6], key)
    assert base[0].abs().sum() == 0 and base[2].abs().sum() == 0


def test_non_contiguous_input_is_written_in_place():
    def args(step):
        cache = torch.zeros(1, 8, 2, 4).transpose(1, 2)
        return [cache, torch.tensor([step]), torch.randn(1, 2, 1, 4)]

    assert _run(_index_copy_cache, args) == []


def test_mutated_input_aliasing_another_input_runs_like_eager():
    # the graph assumed separate inputs; a call passing two views of one tensor runs the
    # graph's ops eagerly and gives eager's values
    def two_views(a, b, position, v):
        a.index_copy_(0, position, v)
        return b.sum()

    compiled = ember.compile(two_views, backend="inductor")
    position, v = torch.tensor([1]), torch.randn(1, 3)
    base, expected_base = torch.zeros(6, 3), torch.zeros(6, 3)
    with torch.no_grad():
        got = compiled(base[:3], base[3:], position, v)
        expected = two_views(expected_base[:3], expected_base[3:], position, v)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(base, expected_base)


def test_dynamic_batch_cache_writes_in_place():
    shapes = _run(_index_copy_cache, lambda s: _cache_args(s, batch=1 + s), steps=3, dynamic=True)
    assert shapes == []


class _CachedLinear(torch.nn.Module):
    """A layer keeping a cache buffer of its last outputs (not differentiated)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("cache", torch.zeros(8, 4))

    def forward(self, x, position):
        y = self.linear(x)
        self.cache.index_copy_(0, position, y.detach())
        return y.relu().sum() + self.cache.sum()


def test_training_step_writes_buffer_in_place_and_matches_grads():
    torch.manual_seed(0)
    eager = _CachedLinear()
    compiled_module = _CachedLinear()
    compiled_module.load_state_dict(eager.state_dict())
    compiled = ember.compile(compiled_module, backend="inductor")
    for step in range(3):
        x = torch.randn(1, 4)
        position = torch.tensor([step])
        expected = eager(x, position)
        expected.backward()
        with CopyShapes() as counter:
            actual = compiled(x, position)
        actual.backward()
        assert_close(actual, expected)
        assert_close(compiled_module.cache, eager.cache)
        for p, q in zip(compiled_module.parameters(), eager.parameters()):
            assert_close(p.grad, q.grad)
    assert (8, 4) not in counter.shapes


def test_input_requiring_grad_keeps_the_copy_back():
    def scatter_into(x, position, v):
        y = x * 1
        y.index_copy_(0, position, v)
        return y.sum()

    def args(step):
        return [torch.randn(5, 3, requires_grad=True), torch.tensor([1]), torch.randn(1, 3)]

    compiled = ember.compile(scatter_into, backend="inductor")
    x, position, v = args(0)
    compiled(x, position, v).backward()
    x2 = x.detach().clone().requires_grad_()
    scatter_into(x2, position, v).backward()
    assert_close(x.grad, x2.grad)


def _conv_bn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))


def test_batch_norm_running_statistics_update_in_place_in_training():
    torch.manual_seed(0)
    eager, compiled_module = _conv_bn(), _conv_bn()
    compiled_module.load_state_dict(eager.state_dict())
    compiled = ember.compile(compiled_module, backend="inductor")
    for _ in range(3):
        x = torch.randn(2, 3, 6, 6)
        eager(x).sum().backward()
        with CopyShapes() as counter:
            loss = compiled(x).sum()
        loss.backward()
        for name, buffer in eager.named_buffers():
            assert_close(dict(compiled_module.named_buffers())[name], buffer)
        for p, q in zip(compiled_module.parameters(), eager.parameters()):
            assert_close(p.grad, q.grad)
    assert counter.shapes == []  # running mean, running var and the batch count


def test_batch_norm_in_eval_mode_leaves_running_statistics_alone():
    torch.manual_seed(0)
    eager, compiled_module = _conv_bn().eval(), _conv_bn().eval()
    compiled_module.load_state_dict(eager.state_dict())
    compiled = ember.compile(compiled_module, backend="inductor")
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        assert_close(compiled(x), eager(x))
    for name, buffer in eager.named_buffers():
        assert_close(dict(compiled_module.named_buffers())[name], buffer)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_other_backends_still_update_the_cache(backend):
    _run(_index_copy_cache, _cache_args, backend=backend)


def test_reinplace_option_off_copies_the_whole_cache_back():
    shapes = _run(_index_copy_cache, _cache_args, options={"reinplace": False})
    assert shapes == [(1, 2, 8, 4)]


def test_graph_loaded_by_warm_start_still_writes_in_place(tmp_path, monkeypatch):
    from ember import warm_cache

    monkeypatch.setenv("EMBER_WARM_START", "1")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBER_REMOTE_CACHE", raising=False)
    warm_cache.STATS.clear()
    try:
        for _ in range(2):
            ember.reset()
            assert _run(_index_copy_cache, _cache_args, steps=1) == []
        assert warm_cache.STATS["hits"] == 1 and warm_cache.STATS["stored"] == 1
    finally:
        ember.reset()


def test_copy_counter_sees_the_copy_back_of_a_graph_not_writing_in_place():
    # the counter the tests above rely on: without re-inplacing, the cache is copied back
    compiled = ember.compile(_index_copy_cache, backend="inductor", options={"reinplace": False})
    cache, position, key = _cache_args(0)
    compiled(cache.clone(), position, key)
    with CopyShapes() as counter:
        compiled(cache, position, key)
    assert (1, 2, 8, 4) in counter.shapes


class _SharedCacheLayer(torch.nn.Module):
    """A decode layer writing its key and value into its slice of one cache tensor all
    layers share (`cache[i, 0, :, p] = k`), then attending over the slice it wrote."""

    def __init__(self, index: int, width: int = 8) -> None:
        super().__init__()
        self.index = index
        self.qkv = torch.nn.Linear(width, 3 * width)

    def forward(self, x, cache, position):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        cache[self.index, 0, :, position] = k[:, 0]
        cache[self.index, 1, :, position] = v[:, 0]
        keys = cache[self.index, 0, :, : position + 1]
        values = cache[self.index, 1, :, : position + 1]
        return x + torch.softmax(q @ keys.transpose(-1, -2), dim=-1) @ values


class _SharedCacheStack(torch.nn.Module):
    def __init__(self, depth: int = 3) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(_SharedCacheLayer(i) for i in range(depth))

    def forward(self, x, cache, position):
        for layer in self.layers:
            x = layer(x, cache, position)
        return x


@pytest.mark.parametrize("regional", [False, True])
def test_layers_sharing_one_cache_write_only_their_keys_and_values(regional):
    # each layer reads the cache between the writes of the layers before and after it:
    # the writes are ordered after those reads, so the cache is written in place and
    # only the written keys and values move (no copy of the cache or of a layer's slice)
    torch.manual_seed(0)
    model = _SharedCacheStack().eval()

    def args(step):
        return [torch.randn(2, 1, 8), torch.randn(3, 2, 2, 6, 8), 2 + step]

    shapes = _run(model, args, options={"regional": regional})
    assert shapes and all(shape == (2, 8) for shape in shapes)  # the writes themselves
