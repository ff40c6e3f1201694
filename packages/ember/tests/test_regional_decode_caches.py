"""Repeated layers compiled once in a decode step with a KV cache (ember.regions).

A decode step hands every layer the cache (transformers' DynamicCache or StaticCache);
each layer reads and writes its own cache tensors. The cache must not make each
layer's graph a piece of its own: the layers are one region, compiled once, and the
step (logits and the cache it writes) matches eager.
"""

from __future__ import annotations

import copy

import pytest
import torch

import ember
from ember.regions import plan_pieces

transformers = pytest.importorskip("transformers")

LAYERS = 4


def _gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(
        n_layer=LAYERS, n_embd=64, n_head=4, vocab_size=128, n_positions=64,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config).eval()


def _llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(
        num_hidden_layers=LAYERS, hidden_size=64, intermediate_size=128,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
        max_position_embeddings=64,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


MODELS = {"gpt2": (_gpt2, "GPT2Block"), "llama": (_llama, "LlamaDecoderLayer")}


def _prefilled(model: torch.nn.Module, kind: str) -> tuple:
    """A cache after a 6-token prompt, the next token and its position."""
    prompt = torch.randint(0, 128, (1, 6))
    if kind == "static":
        cache = transformers.StaticCache(config=model.config, max_cache_len=16)
        model(prompt, past_key_values=cache, use_cache=True, cache_position=torch.arange(6))
    else:
        cache = model(prompt, use_cache=True).past_key_values
        assert isinstance(cache, transformers.DynamicCache)
    return cache, torch.randint(0, 128, (1, 1)), torch.tensor([6])


def _decode_step(model: torch.nn.Module):
    def step(ids, cache, position):
        out = model(ids, past_key_values=cache, use_cache=True, cache_position=position)
        return out.logits

    return step


def _cache_tensors(cache) -> list[torch.Tensor]:
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("kind", ["dynamic", "static"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_decode_step_with_kv_cache_compiles_repeated_layers_once(name, kind):
    make, block = MODELS[name]
    torch.manual_seed(0)
    model = make()
    graphs = []

    def record(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    with torch.no_grad():
        cache, token, position = _prefilled(model, kind)
        ember.compile(_decode_step(model), backend=record)(token, copy.deepcopy(cache), position)
    ((gm, examples),) = graphs
    pieces = plan_pieces(gm, examples)
    assert pieces is not None, "the decode step was compiled whole"
    regions = [piece.region for piece in pieces if piece.region]
    assert [region.split(" ")[-1] for region in regions] == [f"({block})"] * LAYERS
    # before the layers, the layer (once for all of them), after them
    assert len({piece.signature for piece in pieces}) == 3


@pytest.mark.parametrize("kind", ["dynamic", "static"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_decode_step_with_kv_cache_matches_eager(name, kind):
    make, _ = MODELS[name]
    torch.manual_seed(0)
    model = make()
    with torch.no_grad():
        cache, token, position = _prefilled(model, kind)
        expected_cache = copy.deepcopy(cache)
        expected = _decode_step(model)(token, expected_cache, position)
        compiled = ember.compile(_decode_step(model), backend="aot_eager")
        got = compiled(token, cache, position)
    torch.testing.assert_close(got, expected)
    for written, reference in zip(
        _cache_tensors(cache), _cache_tensors(expected_cache), strict=True
    ):
        torch.testing.assert_close(written, reference)


class IndexedCacheLayer(torch.nn.Module):
    """A layer writing its keys and values into one cache tensor shared by all layers,
    at its own index (`cache[self.index, ...] = k`)."""

    def __init__(self, index: int, width: int = 16) -> None:
        super().__init__()
        self.index = index
        self.norm = torch.nn.LayerNorm(width)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(width, width) for _ in range(4))

    def forward(self, x, cache, position):
        h = self.norm(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        cache[self.index, 0, :, position] = k
        cache[self.index, 1, :, position] = v
        keys = cache[self.index, 0, :, : position + 1]
        values = cache[self.index, 1, :, : position + 1]
        weights = torch.softmax(q @ keys.transpose(-1, -2) / 4.0, dim=-1)
        return x + self.o(weights @ values)


class IndexedCacheStack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(IndexedCacheLayer(i) for i in range(LAYERS))

    def forward(self, x, cache, position):
        for layer in self.layers:
            x = layer(x, cache, position)
        return x


def _planned(model: torch.nn.Module, *inputs, dynamic=None) -> list:
    graphs = []

    def record(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    with torch.no_grad():
        ember.compile(model, backend=record, dynamic=dynamic)(*inputs)
    ((gm, examples),) = graphs
    return plan_pieces(gm, examples)


def test_decode_step_with_one_indexed_cache_tensor_compiles_layers_once():
    torch.manual_seed(0)
    model = IndexedCacheStack()
    x, cache = torch.randn(1, 1, 16), torch.zeros(LAYERS, 2, 1, 8, 16)
    pieces = _planned(model, x, cache, 3)
    assert pieces is not None, "the decode step was compiled whole"
    regions = [piece for piece in pieces if piece.region]
    assert len(regions) == LAYERS
    assert len({piece.signature for piece in regions}) == 1
    # the layer's index, used at four places of its code, is one input of the region
    assert [piece.lifted_values() for piece in regions] == [(i,) for i in range(LAYERS)]


class SharedCache:
    """A cache object holding one tensor for all layers (as StaticCache-like caches do)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.key_cache = tensor


class SlicedCacheLayer(IndexedCacheLayer):
    """Reads and writes `cache.key_cache[layer_idx]` through slices `[i : i + 1]` and select."""

    def forward(self, x, cache, position):
        h = self.norm(x)
        q, k = self.q(h), self.k(h)
        own = cache.key_cache[self.index : self.index + 1]
        own[0, :, position] = k[:, 0]
        keys = cache.key_cache.select(0, self.index)[:, : position + 1]
        weights = torch.softmax(q @ keys.transpose(-1, -2) / 4.0, dim=-1)
        return x + self.o(weights @ self.v(keys))


class SlicedCacheStack(IndexedCacheStack):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(SlicedCacheLayer(i) for i in range(LAYERS))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("stack", [IndexedCacheStack, SlicedCacheStack])
def test_layers_sharing_one_compile_write_their_own_cache_slots(stack, backend):
    """Every layer runs the one compiled region with its own index: a cache of distinct
    values shows any layer reading or writing another's slot."""
    torch.manual_seed(0)
    model = stack()
    shape = (LAYERS, 2, 1, 8, 16) if stack is IndexedCacheStack else (LAYERS, 1, 8, 16)

    def wrap(tensor):
        return tensor if stack is IndexedCacheStack else SharedCache(tensor)

    compiled = ember.compile(model, backend=backend)
    with torch.no_grad():
        for position in (3, 3, 5):
            x, cache = torch.randn(1, 1, 16), torch.randn(shape)
            expected_cache = cache.clone()
            expected = model(x, wrap(expected_cache), position)
            got = compiled(x, wrap(cache), position)
            torch.testing.assert_close(got, expected)
            torch.testing.assert_close(cache, expected_cache)
    pieces = _planned(model, torch.randn(1, 1, 16), wrap(torch.randn(shape)), 3)
    assert len({piece.signature for piece in pieces if piece.region}) == 1


def test_regional_decode_step_writes_the_shared_cache_in_place(monkeypatch):
    """With inductor, each layer's region stores its two writes into the cache itself
    (the nested scatters of `cache[i, 0, :, p] = k` re-inplaced), so nothing is copied
    back after a region runs; the cache and the output match eager."""
    import aot_autograd.runtime as runtime

    copied = []
    copy_back = runtime._copy_back
    monkeypatch.setattr(
        runtime,
        "_copy_back",
        lambda inputs, values: (copied.append(len(inputs)), copy_back(inputs, values)),
    )
    torch.manual_seed(0)
    model = IndexedCacheStack()
    compiled = ember.compile(model, backend="inductor")
    with torch.no_grad():
        for _ in range(2):
            x, cache = torch.randn(1, 1, 16), torch.randn(LAYERS, 2, 1, 8, 16)
            expected_cache = cache.clone()
            expected = model(x, expected_cache, 5)
            got = compiled(x, cache, 5)
            torch.testing.assert_close(got, expected)
            torch.testing.assert_close(cache, expected_cache)
    assert copied == []


@pytest.mark.parametrize("regional", [None, True])
def test_aot_eager_compiles_a_step_writing_its_cache_whole_unless_asked(monkeypatch, regional):
    """aot_eager's graphs do not write their inputs themselves: cut into regions, each
    region would copy the whole cache back, so by default the step is one graph (one
    copy); `regional: True` still cuts it. Either way the step matches eager."""
    import aot_autograd.runtime as runtime

    copied = []
    copy_back = runtime._copy_back
    monkeypatch.setattr(
        runtime, "_copy_back", lambda inputs, values: (copied.append(1), copy_back(inputs, values))
    )
    torch.manual_seed(0)
    model = IndexedCacheStack()
    options = {} if regional is None else {"regional": regional}
    compiled = ember.compile(model, backend="aot_eager", options=options)
    with torch.no_grad():
        x, cache = torch.randn(1, 1, 16), torch.randn(LAYERS, 2, 1, 8, 16)
        expected_cache = cache.clone()
        expected = model(x, expected_cache, 5)
        torch.testing.assert_close(compiled(x, cache, 5), expected)
        torch.testing.assert_close(cache, expected_cache)
    assert len(copied) == (1 if regional is None else LAYERS)


class ShiftedLayer(torch.nn.Module):
    """Layers alike but for ints that shape what they compute: a roll and a dim size."""

    def __init__(self, shift: int, width: int = 16) -> None:
        super().__init__()
        self.shift = shift
        self.norm = torch.nn.LayerNorm(width)
        self.up, self.down = torch.nn.Linear(width, width), torch.nn.Linear(width, width)

    def forward(self, x):
        h = torch.roll(self.up(self.norm(x)), shifts=self.shift, dims=-1)
        h = h * self.shift + torch.nn.functional.gelu(h)
        return x + self.down(h)[..., : 16 - self.shift].sum(-1, keepdim=True)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_layers_alike_but_for_ints_they_compute_with_match_eager_in_training(backend):
    torch.manual_seed(0)
    # float64: the layers multiply by their shift, and inductor's reordered reductions
    # differ from eager in float32 by more than the default tolerance (whole or cut)
    model = torch.nn.Sequential(*(ShiftedLayer(shift) for shift in (1, 2, 3, 5))).double()
    x = torch.randn(4, 16, dtype=torch.float64)
    compiled = ember.compile(model, backend=backend)
    out = compiled(x)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    for got, parameter in zip(grads, model.parameters(), strict=True):
        torch.testing.assert_close(got, parameter.grad)


class TableLayer(torch.nn.Module):
    """Each layer reads its own row of a parameter shared by all layers (gradients flow
    to that row only)."""

    def __init__(self, table: torch.nn.Parameter, index: int) -> None:
        super().__init__()
        self.table, self.index = table, index
        self.norm = torch.nn.LayerNorm(16)
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        h = self.norm(x) * self.table[self.index]
        h = self.down(torch.nn.functional.gelu(self.up(h)))
        return x + torch.tanh(h) * torch.sigmoid(h) + h


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_layers_indexing_one_shared_parameter_train_like_eager(backend):
    torch.manual_seed(0)
    table = torch.nn.Parameter(torch.randn(LAYERS, 16))
    layers = (TableLayer(table, i) for i in range(LAYERS))
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), *layers)
    x = torch.randn(4, 16)
    compiled = ember.compile(model, backend=backend)
    out = compiled(x)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected)
    for got, parameter in zip(grads, model.parameters(), strict=True):
        torch.testing.assert_close(got, parameter.grad)
    pieces = _planned(model, x)
    assert len({piece.signature for piece in pieces if piece.region}) == 1


class FromTheEndLayer(IndexedCacheLayer):
    def forward(self, x, cache, position):
        cache[-1 - self.index, 0, :, position] = self.k(self.norm(x))
        return x + self.o(cache[-1 - self.index, 0, :, : position + 1].sum(-2, keepdim=True))


def test_layers_indexing_from_the_end_keep_their_constants_and_match_eager():
    torch.manual_seed(0)
    model = torch.nn.ModuleList(FromTheEndLayer(i) for i in range(LAYERS))

    def step(x, cache, position):
        for layer in model:
            x = layer(x, cache, position)
        return x

    x, cache = torch.randn(1, 1, 16), torch.randn(LAYERS, 2, 1, 8, 16)
    expected_cache = cache.clone()
    with torch.no_grad():
        expected = step(x, expected_cache, 2)
        got = ember.compile(step, backend="inductor")(x, cache, 2)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(cache, expected_cache)


def test_decode_step_with_one_indexed_cache_tensor_matches_eager():
    torch.manual_seed(0)
    model = IndexedCacheStack()
    x, cache = torch.randn(1, 1, 16), torch.zeros(LAYERS, 2, 1, 8, 16)
    with torch.no_grad():
        expected_cache = cache.clone()
        expected = model(x, expected_cache, 3)
        got = ember.compile(model, backend="aot_eager")(x, cache, 3)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(cache, expected_cache)


def test_layers_sharing_one_compile_hit_warm_start_with_their_own_indices(warm):
    """The region taking the layer index as an input is one warm-start entry; loaded after
    a reset, it still runs each layer at its own index."""
    from ember import warm_cache

    torch.manual_seed(0)
    model = IndexedCacheStack()
    outputs = []
    for _ in range(2):
        ember.reset()
        x, cache = torch.randn(1, 1, 16), torch.randn(LAYERS, 2, 1, 8, 16)
        expected_cache = cache.clone()
        with torch.no_grad():
            expected = model(x, expected_cache, 3)
            got = ember.compile(model, backend="inductor")(x, cache, 3)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(cache, expected_cache)
        outputs.append(dict(warm_cache.STATS))
    assert outputs[0].get("stored") == 1 and not outputs[0].get("hits")
    assert outputs[1].get("hits") == 1 and outputs[1].get("stored") == 1


class IndexCopyLayer(IndexedCacheLayer):
    """Writes as static caches do: `k_out = cache.key_cache[layer_idx]` then
    `k_out.index_copy_(2, cache_position, k)`, and attends over the whole slice."""

    def forward(self, x, cache, cache_position):
        h = self.norm(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        k_out, v_out = cache.key_cache[self.index], cache.value_cache[self.index]
        k_out.index_copy_(1, cache_position, k)
        v_out.index_copy_(1, cache_position, v)
        weights = torch.softmax(q @ k_out.transpose(-1, -2) / 4.0, dim=-1)
        return x + self.o(weights @ v_out)


class TwoTensorCache:
    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.key_cache, self.value_cache = keys, values


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_layers_writing_a_static_cache_with_index_copy_share_one_compile(backend):
    torch.manual_seed(0)
    model = torch.nn.ModuleList(IndexCopyLayer(i) for i in range(LAYERS))

    def step(x, cache, cache_position):
        for layer in model:
            x = layer(x, cache, cache_position)
        return x

    compiled = ember.compile(step, backend=backend)
    with torch.no_grad():
        for position in (2, 5):
            keys, values = torch.randn(LAYERS, 1, 8, 16), torch.randn(LAYERS, 1, 8, 16)
            expected_keys, expected_values = keys.clone(), values.clone()
            x, where = torch.randn(1, 1, 16), torch.tensor([position])
            expected = step(x, TwoTensorCache(expected_keys, expected_values), where)
            got = compiled(x, TwoTensorCache(keys, values), where)
            torch.testing.assert_close(got, expected)
            torch.testing.assert_close(keys, expected_keys)
            torch.testing.assert_close(values, expected_values)
    cache = TwoTensorCache(torch.randn(LAYERS, 1, 8, 16), torch.randn(LAYERS, 1, 8, 16))
    pieces = _planned(step, torch.randn(1, 1, 16), cache, torch.tensor([2]))
    assert pieces is not None, "the decode step was compiled whole"
    assert len({piece.signature for piece in pieces if piece.region}) == 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_decode_loop_over_positions_compiles_once_more_for_every_later_position(backend):
    """The position a step writes the cache at becomes symbolic at its second value: one
    more compile serves every later position (the write is not fixed to its example)."""
    torch.manual_seed(0)
    model = IndexedCacheStack()
    compiles = []

    def counting(gm, example_inputs):
        compiles.append(gm)
        return ember.backends.lookup_backend(backend)(gm, example_inputs)

    compiled = ember.compile(model, backend=counting)
    cache = torch.randn(LAYERS, 2, 1, 8, 16)
    expected_cache = cache.clone()
    with torch.no_grad():
        for position in range(2, 8):
            x = torch.randn(1, 1, 16)
            expected = model(x, expected_cache, position)
            torch.testing.assert_close(compiled(x, cache, position), expected)
            torch.testing.assert_close(cache, expected_cache)
    assert len(compiles) == 2


def test_layers_indexing_one_cache_are_one_region_under_dynamic_shapes():
    # with symbolic sizes (the cache's length, the position) the layer's index is still
    # lifted: the piece takes the graph's sizes as symbols of its own ShapeEnv
    torch.manual_seed(0)
    model = IndexedCacheStack()
    x, cache = torch.randn(1, 1, 16), torch.zeros(LAYERS, 2, 1, 8, 16)
    pieces = _planned(model, x, cache, 3, dynamic=True)
    assert pieces is not None, "the decode step was compiled whole"
    regions = [piece for piece in pieces if piece.region]
    assert len(regions) == LAYERS and len({piece.signature for piece in regions}) == 1
    assert [piece.lifted_values() for piece in regions] == [(i,) for i in range(LAYERS)]
    values = [used.meta.get("val") for used in regions[0].inputs]
    assert any(isinstance(v, torch.Tensor) and _symbolic(v.shape) for v in values)


def _symbolic(sizes) -> bool:
    return any(isinstance(n, torch.SymInt) for n in sizes)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_dynamic_decode_step_with_lifted_layer_index_matches_eager(backend, monkeypatch):
    """One compile serves every cache length and position, the layers one region taking
    their index; each layer writes and reads its own slots of the shared cache
    (distinct values show any mix-up)."""
    from ember import regions
    from ember.api import compiled_callable_of

    chained = []  # (lifted, compiled) of each attempt to compile the pieces

    def record(gm, example_inputs, pieces, compile_graph):
        chained.append((any(piece.lifted for piece in pieces), False))
        result = compile_chained(gm, example_inputs, pieces, compile_graph)
        chained[-1] = (chained[-1][0], True)
        return result

    compile_chained = regions._compile_chained
    monkeypatch.setattr(regions, "_compile_chained", record)
    torch.manual_seed(0)
    model = IndexedCacheStack()
    # (aot_eager compiles a graph writing an input whole unless told: see ember.backends)
    options = {"regional": True}
    compiled = ember.compile(model, backend=backend, dynamic=True, options=options)
    with torch.no_grad():
        for length, position in ((8, 3), (10, 5), (12, 6)):
            x, cache = torch.randn(1, 1, 16), torch.randn(LAYERS, 2, 1, length, 16)
            expected_cache = cache.clone()
            expected = model(x, expected_cache, position)
            torch.testing.assert_close(compiled(x, cache, position), expected)
            torch.testing.assert_close(cache, expected_cache)
    assert len(compiled_callable_of(compiled).entries) == 1
    assert chained == [(True, True)]


def _generate(model: torch.nn.Module, prompt: torch.Tensor) -> torch.Tensor:
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_symbolic_decode_step_is_cut_into_layer_regions(name):
    """The decode steps with a symbolic length read each layer's cache tensors, whose
    lengths are symbols of their own (`s0`, `s2`, ...): the layers read them alike, so
    they are one region, compiled over symbols of its own."""
    make, block = MODELS[name]
    torch.manual_seed(0)
    model = make()
    graphs = []

    def record(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    model.forward = ember.compile(model.forward, backend=record)
    _generate(model, torch.randint(1, 128, (1, 6)))
    gm, examples = graphs[-1]  # the decode steps of symbolic length
    values = [node.meta.get("val") for node in gm.graph.find_nodes(op="placeholder")]
    assert any(isinstance(v, torch.Tensor) and _symbolic(v.shape) for v in values)
    pieces = plan_pieces(gm, examples)
    assert pieces is not None, "the symbolic decode step was compiled whole"
    regions = [piece for piece in pieces if piece.region]
    assert [region.region.split(" ")[-1] for region in regions] == [f"({block})"] * LAYERS
    assert len({piece.signature for piece in regions}) == 1
    if len({piece.symbols for piece in regions}) > 1:
        assert all(piece.own_symbols for piece in regions)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_generate_with_symbolic_layer_regions_matches_eager_tokens(name):
    from ember.api import compiled_callable_of

    make, _ = MODELS[name]
    torch.manual_seed(0)
    model = make()
    prompt = torch.randint(1, 128, (2, 6))
    expected = _generate(model, prompt)
    model.forward = ember.compile(model.forward, backend="inductor")
    entries = []
    for _ in range(2):
        torch.testing.assert_close(_generate(model, prompt), expected, rtol=0, atol=0)
        entries.append(len(compiled_callable_of(model.forward).entries))
    # prefill, first decode step (static: run as captured, then dropped uncompiled once
    # the symbolic steps' entry covers it, option deferred_recompiles), symbolic steps
    assert entries == [3, 2]
