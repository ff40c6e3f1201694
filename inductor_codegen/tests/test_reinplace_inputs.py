"""Re-inplacing: a scatter over a mutated input is stored into the input itself.

Graphs here are made with make_fx and carry the output meta aot_autograd sets
(`input_mutation_idxs`: output index, input index). Each runs on the C++ path and on
the Triton path (TRITON_INTERPRET=1 on the CPU) and is compared with eager.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing import assert_close

from inductor_codegen import compile_graph
from inductor_codegen.lowering.reinplace import INPUT_MUTATIONS

PATHS = ["cpp", pytest.param("triton", marks=pytest.mark.triton_interpret)]


@pytest.fixture(autouse=True)
def _tensors_on_the_paths_device(request):
    """The Triton path's tensors on the GPU where there is one (the interpreter runs
    CPU tensors); the tests make them with factory functions, which follow this."""
    callspec = getattr(request.node, "callspec", None)
    path = callspec.params.get("path") if callspec is not None else None
    if path == "triton" and torch.cuda.is_available():
        with torch.device("cuda"):
            yield
    else:
        yield


def _compile(fn, inputs, pairs, path, tmp_path):
    gm = make_fx(fn)(*inputs)
    if pairs is not None:
        output = next(n for n in gm.graph.nodes if n.op == "output")
        output.meta[INPUT_MUTATIONS] = pairs
    options = {"cache_dir": str(tmp_path)}
    if path == "triton":
        pytest.importorskip("triton")
        options["device_codegen"] = "triton"
    return compile_graph(gm, list(inputs), options=options)


def _cache_step(cache, position, key):
    new = cache.index_copy(2, position, key)
    return (new * 2).sum(-1), new


def _cache_inputs():
    return torch.zeros(1, 2, 8, 4), torch.tensor([3]), torch.randn(1, 2, 1, 4)


@pytest.mark.parametrize("path", PATHS)
def test_cache_update_writes_only_into_the_input(path, tmp_path):
    cache, position, key = _cache_inputs()
    compiled = _compile(_cache_step, (cache, position, key), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset({0})
    assert "aten_index_copy__default(" in compiled.artifact("wrapper")
    expected = _cache_step(cache.clone(), position, key)
    actual = compiled(cache, position, key)
    assert_close(actual[0], expected[0])
    assert_close(cache, expected[1])  # the input itself holds the new value


@pytest.mark.parametrize("path", PATHS)
def test_graph_without_mutation_meta_leaves_its_inputs_alone(path, tmp_path):
    cache, position, key = _cache_inputs()
    compiled = _compile(_cache_step, (cache, position, key), None, path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset()
    expected = _cache_step(cache, position, key)
    assert_close(compiled(cache, position, key), expected)
    assert cache.abs().sum() == 0


@pytest.mark.parametrize("path", PATHS)
def test_input_read_elsewhere_is_not_written(path, tmp_path):
    def reads_old(cache, position, key):
        new = cache.index_copy(2, position, key)
        return (new + cache).sum(-1), new

    cache, position, key = _cache_inputs()
    cache.normal_()
    compiled = _compile(reads_old, (cache, position, key), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset()
    before = cache.clone()
    assert_close(compiled(cache, position, key), reads_old(before, position, key))
    assert_close(cache, before)


@pytest.mark.parametrize("path", PATHS)
def test_slice_scatter_writes_the_slice_into_the_input(path, tmp_path):
    def assign(x, v):
        new = x.slice_scatter(v, 1, 2, 4)
        return new.sum(0), new

    x, v = torch.randn(3, 8), torch.randn(3, 2)
    compiled = _compile(assign, (x, v), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset({0})
    expected = assign(x.clone(), v)
    assert_close(compiled(x, v)[0], expected[0])
    assert_close(x, expected[1])


@pytest.mark.parametrize("path", PATHS)
def test_input_returned_twice_is_not_written(path, tmp_path):
    def twice(cache, position, key):
        new = cache.index_copy(2, position, key)
        return new, new

    cache, position, key = _cache_inputs()
    compiled = _compile(twice, (cache, position, key), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset()


def test_self_overlapping_input_is_not_written(tmp_path):
    def put(x, index, v):
        new = torch.ops.aten.index_put(x, [index], v)
        return new.sum(), new

    x, index, v = torch.zeros(1, 3).expand(4, 3), torch.tensor([1]), torch.randn(1, 3)
    compiled = _compile(put, (x, index, v), ((1, 0),), "cpp", tmp_path)
    assert compiled.inputs_written_in_place == frozenset()


def _running_mean(running, batch):
    new = running * 0.9 + batch.mean(0) * 0.1
    return batch * 2, new


@pytest.mark.parametrize("path", PATHS)
def test_pointwise_update_is_computed_into_the_input(path, tmp_path):
    running, batch = torch.randn(6), torch.randn(5, 6)
    compiled = _compile(_running_mean, (running, batch), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset({0})
    assert " = running_1\n" in compiled.artifact("wrapper")  # no allocation
    expected = _running_mean(running.clone(), batch)
    actual = compiled(running, batch)
    assert_close(actual[0], expected[0])
    assert_close(running, expected[1])


def test_pointwise_update_kernel_pointers_to_the_input_are_not_restrict(tmp_path):
    running, batch = torch.randn(6), torch.randn(5, 6)
    compiled = _compile(_running_mean, (running, batch), ((1, 0),), "cpp", tmp_path)
    kernels = compiled.artifact("codegen")
    assert "const float* in_ptr" in kernels and "float* out_ptr" in kernels


@pytest.mark.parametrize("path", PATHS)
def test_pointwise_update_reading_other_elements_is_not_in_place(path, tmp_path):
    def shifted(running, batch):
        new = running * 0.5 + running.roll(1, 0)
        return batch * 2, new

    running, batch = torch.randn(6), torch.randn(5, 6)
    compiled = _compile(shifted, (running, batch), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset()
    before = running.clone()
    assert_close(compiled(running, batch), shifted(before, batch))
    assert_close(running, before)


@pytest.mark.parametrize("path", PATHS)
def test_pointwise_update_whose_input_another_kernel_reads_is_not_in_place(path, tmp_path):
    def also_summed(running, batch):
        new = running * 0.9 + batch.mean(0)
        return batch * running.sum(), new

    running, batch = torch.randn(6), torch.randn(5, 6)
    compiled = _compile(also_summed, (running, batch), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset()
    before = running.clone()
    assert_close(compiled(running, batch), also_summed(before, batch))
    assert_close(running, before)


def test_pointwise_update_read_by_a_later_node_is_not_in_place(tmp_path):
    def read_after(running, batch):
        new = running * 0.9 + batch.mean(0)
        return batch * new, new

    running, batch = torch.randn(6), torch.randn(5, 6)
    compiled = _compile(read_after, (running, batch), ((1, 0),), "cpp", tmp_path)
    assert compiled.inputs_written_in_place == frozenset()
    before = running.clone()
    assert_close(compiled(running, batch), read_after(before, batch))


def test_ensure_layout_fills_an_expanded_layout_without_a_refused_copy():
    """An ATen result whose traced layout repeats elements (stride 0, as a view of a
    materialized expand has): its elements agree, and one of each fills the layout."""
    from inductor_codegen.runtime import ensure_layout

    compact = torch.randn(3, 1)
    value = compact.expand(2, 3, 4).contiguous().diagonal(0, 1, 2)  # strides (12, 5)
    out = ensure_layout(value, (2, 3), (0, 1))
    assert out.stride() == (0, 1)
    assert_close(out, value)


def _nested_write(cache, k, index):
    """`cache[index, :, 5] = k` as functionalization traces it: a scatter into a view,
    scattered back into the tensor the view was taken from."""
    layer = cache.select(0, index)
    return cache.select_scatter(layer.select_scatter(k, 1, 5), 0, index)


def _two_cache_writes(cache, k, v):
    first = _nested_write(cache, k, 1)
    second = _nested_write(first, v, 2)
    return (second.select(0, 1) * 2).sum(), second


@pytest.mark.parametrize("path", PATHS)
def test_chained_nested_scatters_write_into_the_input(path, tmp_path):
    cache, k, v = torch.randn(4, 3, 8, 2), torch.randn(3, 2), torch.randn(3, 2)
    compiled = _compile(_two_cache_writes, (cache, k, v), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset({0})
    expected = _two_cache_writes(cache.clone(), k, v)
    assert_close(compiled(cache, k, v)[0], expected[0])
    assert_close(cache, expected[1])  # the input itself holds both writes


@pytest.mark.parametrize("path", PATHS)
def test_chained_scatters_whose_first_value_is_read_later_copy_back(path, tmp_path):
    def reads_between(cache, k, v):
        first = _nested_write(cache, k, 1)
        second = _nested_write(first, v, 1)
        return first.sum(-1) + second.sum(-1), second

    cache, k, v = torch.randn(4, 3, 8, 2), torch.randn(3, 2), torch.randn(3, 2)
    compiled = _compile(reads_between, (cache, k, v), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset()
    expected = reads_between(cache.clone(), k, v)
    actual = compiled(cache, k, v)
    assert_close(actual[0], expected[0])
    assert_close(actual[1], expected[1])


@pytest.mark.parametrize("path", PATHS)
def test_nested_scatter_whose_old_slice_is_read_after_the_write_copies_that_slice(path, tmp_path):
    # the layer's old values, read after the write, are copied out of the cache before it
    # (the slice alone); the cache itself is written in place
    def reads_old_layer(cache, k):
        layer = cache.select(0, 1)
        new = cache.select_scatter(layer.select_scatter(k, 1, 5), 0, 1)
        return layer.sum(-1), new

    cache, k = torch.randn(4, 3, 8, 2), torch.randn(3, 2)
    compiled = _compile(reads_old_layer, (cache, k), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset({0})
    expected = reads_old_layer(cache.clone(), k)
    actual = compiled(cache, k)
    assert_close(actual[0], expected[0])
    assert_close(cache, expected[1])


# Order-aware writes: a read of the old value before the write in graph order is stored
# before the write; one after it keeps the copy back.


@pytest.mark.parametrize("path", PATHS)
def test_old_value_read_before_the_write_and_used_after_it_is_stored_first(path, tmp_path):
    def reads_old_first(cache, position, key):
        before = cache * 2  # read before the write; summed after it
        new = cache.index_copy(2, position, key)
        return before.sum(-1) + new.sum(-1), new

    cache, position, key = _cache_inputs()
    cache.normal_()
    compiled = _compile(reads_old_first, (cache, position, key), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset({0})
    assert "aten_index_copy__default(" in compiled.artifact("wrapper")
    expected = reads_old_first(cache.clone(), position, key)
    assert_close(compiled(cache, position, key)[0], expected[0])
    assert_close(cache, expected[1])


@pytest.mark.parametrize("path", PATHS)
def test_old_value_read_after_the_write_keeps_the_copy_back(path, tmp_path):
    def reads_old_last(cache, position, key):
        new = cache.index_copy(2, position, key)
        after = cache * 2  # the old value, read after the write in graph order
        return after.sum(-1) + new.sum(-1), new

    cache, position, key = _cache_inputs()
    cache.normal_()
    compiled = _compile(reads_old_last, (cache, position, key), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset()
    before = cache.clone()
    assert_close(compiled(cache, position, key), reads_old_last(before, position, key))
    assert_close(cache, before)


def _layer_stack_step(cache, k, v):
    """Two layers sharing one cache, as a decode step: each writes its slice, then reads
    it (the value the next layer's write overwrites elsewhere in the cache)."""
    first = _nested_write(cache, k, 1)
    read = (first.select(0, 1) * 2).sum(-1)
    second = _nested_write(first, v, 2)
    return read + second.select(0, 2).sum(-1), second


@pytest.mark.parametrize("path", PATHS)
def test_layers_reading_the_cache_between_writes_write_it_in_place(path, tmp_path):
    cache, k, v = torch.randn(4, 3, 8, 2), torch.randn(3, 2), torch.randn(3, 2)
    compiled = _compile(_layer_stack_step, (cache, k, v), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset({0})
    # each write moves the key's elements alone: no kernel copies a layer of the cache
    assert "fused_scatter" not in compiled.artifact("wrapper")
    expected = _layer_stack_step(cache.clone(), k, v)
    assert_close(compiled(cache, k, v)[0], expected[0])
    assert_close(cache, expected[1])


@pytest.mark.parametrize("path", PATHS)
def test_view_read_between_nested_writes_is_not_written_through(path, tmp_path):
    # the layer's old values are read after the inner scatter but before the outer one:
    # the inner scatter stays a copy of the layer, the outer one writes it back
    def reads_between(cache, k):
        layer = cache.select(0, 1)
        inner = layer.select_scatter(k, 1, 5)
        total = layer.sum(-1)
        return total, cache.select_scatter(inner, 0, 1)

    cache, k = torch.randn(4, 3, 8, 2), torch.randn(3, 2)
    compiled = _compile(reads_between, (cache, k), ((1, 0),), path, tmp_path)
    assert "aten_select_scatter_default(" in compiled.artifact("wrapper")  # a copy of the layer
    expected = reads_between(cache.clone(), k)
    assert_close(compiled(cache, k)[0], expected[0])
    assert_close(cache, expected[1])


@pytest.mark.parametrize("path", PATHS)
def test_view_of_the_old_value_returned_keeps_the_copy_back(path, tmp_path):
    def returns_old_view(cache, position, key):
        old = cache.select(0, 0)
        new = cache.index_copy(2, position, key)
        return old, new

    cache, position, key = _cache_inputs()
    cache.normal_()
    compiled = _compile(returns_old_view, (cache, position, key), ((1, 0),), path, tmp_path)
    assert compiled.inputs_written_in_place == frozenset()
    before = cache.clone()
    assert_close(compiled(cache, position, key), returns_old_view(before, position, key))
