"""Writes to outside lists and dicts are replayed after the graph, as eager leaves them;
id(), copy.deepcopy and Sequence iteration on capture-time objects; backend failures."""

from __future__ import annotations

import collections.abc
import copy
import enum

import pytest
import torch

import dynamo_capture
from dynamo_capture import BackendCompilerFailed
from dynamo_capture.testing import CountingBackend, eager_backend


def _compiled(fn):
    return dynamo_capture.optimize(fn, backend=eager_backend, fullgraph=True)


def append_and_write(x, out, d):
    out.append(x + 1)
    d["a"] = x * 2
    d["b"] = d.get("b", 0) + 1
    out.extend([x.sin()])
    return len(out), d["a"].sum(), "b" in d


def pop_and_insert(x, out, d):
    first = out.pop(0)
    out.insert(0, first * x)
    d.pop("drop")
    d.setdefault("new", x.cos())
    return out[0] + d["new"]


def update_then_iterate(x, out, d):
    d.update({"k": x + 3})
    total = x
    for key in d:
        total = total + d[key]
    out[0] = total
    out.reverse()
    return total


def returns_the_written_list(x, out, d):
    out.append(x)
    d["x"] = x
    return out, d


PROGRAMS = [append_and_write, pop_and_insert, update_then_iterate, returns_the_written_list]


def _inputs(x):
    return [x.clone(), x.exp()], {"drop": x.clone(), "b": 5}


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_outside_containers_end_as_in_eager(fn):
    compiled = _compiled(fn)
    for _ in range(2):
        x = torch.randn(3)
        out_eager, d_eager = _inputs(x)
        out_got, d_got = _inputs(x)
        expected = fn(x, out_eager, d_eager)
        got = compiled(x, out_got, d_got)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(out_got, out_eager)
        torch.testing.assert_close(d_got, d_eager)
        assert list(d_got) == list(d_eager)


def test_returned_containers_are_the_callers_objects():
    x = torch.randn(3)
    out, d = _inputs(x)
    got_out, got_d = _compiled(returns_the_written_list)(x, out, d)
    assert got_out is out and got_d is d
    assert out[-1] is x and d["x"] is x


class _Config:
    def __init__(self, layers):
        self.layers = layers


def test_id_and_deepcopy_of_capture_time_objects_fold():
    config = (3, ("relu", 0.5))

    def fn(x, cfg):
        seen = {id(cfg): cfg}
        clone = copy.deepcopy(cfg)
        return x * clone[0] + len(seen) + clone[1][1]

    compiled = _compiled(fn)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x, config), fn(x, config))
    other = (5, ("relu", 1.5))
    torch.testing.assert_close(compiled(x, other), fn(x, other))


@pytest.mark.parametrize("make", [lambda: _Config(3), lambda: {"layers": [1, 2]}])
def test_deepcopy_of_outside_mutable_object_sees_its_changes(make):
    """deepcopy of a mutable object from outside the frame is folded in one graph, the
    copy's contents guarded: once the object changes between calls (same identity), the
    frame is captured again with its new contents."""
    config = make()

    def fn(x):
        clone = copy.deepcopy(config)
        return x * len(vars(clone) if isinstance(clone, _Config) else clone["layers"])

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.frame_count == 1
    if isinstance(config, _Config):
        config.extra = 1
    else:
        config["layers"].append(3)
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.frame_count == 2


class _Settings:
    def __init__(self):
        self.scale = 2.0
        self.sizes = [1, 2, 3]
        self.extras = {"bias": 0.5, "names": ("a", "b")}
        self.inner = _Config(4)


def _settings_readout(clone):
    """Everything in a _Settings copy, as numbers (absent parts count as 0)."""
    extras = clone.extras
    inner = getattr(clone, "inner", None)
    return (
        clone.scale
        + sum(clone.sizes) * 10
        + extras.get("bias", 0) * 100
        + len(extras) * 1000
        + (getattr(inner, "layers", 0) if inner is not None else 0) * 10000
        + len(vars(clone)) * 100000
    )


def _replace_inner(s):
    s.inner = _Config(7)


def _replace_inner_by_equal(s):
    s.inner = _Config(s.inner.layers)


CHANGES = {
    "nested_value": lambda s: setattr(s.inner, "layers", 5),
    "float_value": lambda s: setattr(s, "scale", 2.5),
    "list_item": lambda s: s.sizes.__setitem__(1, 9),
    "list_append": lambda s: s.sizes.append(4),
    "dict_key_added": lambda s: s.extras.__setitem__("gain", 3),
    "dict_key_removed": lambda s: s.extras.pop("bias"),
    "dict_value": lambda s: s.extras.__setitem__("bias", 0.25),
    "new_attribute": lambda s: setattr(s, "dropout", 0.1),
    "deleted_attribute": lambda s: delattr(s, "inner"),
    "replaced_nested_object": _replace_inner,
    "int_to_float": lambda s: setattr(s.inner, "layers", 4.0),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_deepcopy_of_outside_object_recompiles_on_each_kind_of_change(change):
    settings = _Settings()

    def fn(x):
        clone = copy.deepcopy(settings)
        return x * _settings_readout(clone)

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), fn(x))
    assert backend.frame_count == 1
    CHANGES[change](settings)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), fn(x))
    assert backend.frame_count == 2


def test_deepcopy_of_an_equal_object_keeps_the_entry():
    """Contents, not identity: a nested object replaced by an equal one, or another
    object with the same contents, runs the same entry."""
    settings = _Settings()

    def fn(x, s):
        return x * _settings_readout(copy.deepcopy(s))

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, settings), fn(x, settings))
    _replace_inner_by_equal(settings)
    torch.testing.assert_close(compiled(x, settings), fn(x, settings))
    other = _Settings()
    torch.testing.assert_close(compiled(x, other), fn(x, other))
    assert backend.frame_count == 1


def test_deepcopy_keeps_sharing_and_sees_it_change():
    """Two attributes holding one list are one list in the copy; once they hold two
    equal lists, a write through one no longer shows through the other."""
    shared = [1, 2]
    config = _Config(shared)
    config.other = shared

    def fn(x):
        clone = copy.deepcopy(config)
        clone.layers.append(3)
        return x * len(clone.other)

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), fn(x))
    config.other = [1, 2]
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.frame_count == 2


class _Mode(enum.Enum):
    FAST = 1
    EXACT = 2


def test_deepcopy_keeps_functions_classes_and_enum_members_and_copies_what_holds_lists():
    config = _Config([1, 2])
    config.act = torch.relu
    config.kind = _Config
    config.mode = _Mode.FAST
    config.pairs = ((1, [2, 3]), ("a", 4.5))

    def fn(x):
        clone = copy.deepcopy(config)
        clone.pairs[0][1].append(7)
        scale = 2 if clone.mode is _Mode.FAST else 3
        return clone.act(x) * scale * len(clone.pairs[0][1]), isinstance(clone, clone.kind)

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), fn(x))
    assert config.pairs[0][1] == [2, 3] and backend.frame_count == 1
    config.mode = _Mode.EXACT
    torch.testing.assert_close(compiled(x), fn(x))
    config.act = torch.tanh
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.frame_count == 3


def test_a_deepcopy_leaving_the_frame_is_a_new_object_each_call():
    config = {"layers": [1, 2], "inner": _Config(3)}

    def fn(x):
        clone = copy.deepcopy(config)
        clone["inner"].layers += 1  # a write to the copy: never seen by the next call
        return x + 1, clone

    compiled = _compiled(fn)
    x = torch.randn(2)
    _, first = compiled(x)
    _, second = compiled(x)
    assert first is not second and first["layers"] is not second["layers"]
    assert first["layers"] is not config["layers"]
    assert first["inner"].layers == second["inner"].layers == 4
    assert config["inner"].layers == 3
    first["layers"].append(9)
    _, third = compiled(x)
    assert third["layers"] == [1, 2]


def _write_nested_list(settings, x):
    settings.sizes.append(4)


def _write_nested_dict(settings, x):
    settings.extras["bias"] = 1.5


def _write_attribute(settings, x):
    settings.scale = 3.0


def _write_nested_attribute(settings, x):
    settings.inner.layers = 8


@pytest.mark.parametrize(
    "write",
    [_write_nested_list, _write_nested_dict, _write_attribute, _write_nested_attribute],
)
def test_deepcopy_after_the_frame_wrote_into_the_object_copies_the_write(write):
    """A write of the frame reaches the real object only after the graph: a copy made
    while capturing would miss it. The graph breaks at the copy, which sees it."""

    def fn(x, settings):
        write(settings, x)
        return x * _settings_readout(copy.deepcopy(settings))

    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    x = torch.randn(3)
    expected, got = _Settings(), _Settings()
    torch.testing.assert_close(compiled(x, got), fn(x, expected))
    torch.testing.assert_close(compiled(x, got), fn(x, expected))
    assert _settings_readout(got) == _settings_readout(expected)
    with pytest.raises(dynamo_capture.Unsupported, match="copy.deepcopy"):
        _compiled(fn)(x, _Settings())


class _OwnCopy:
    def __init__(self):
        self.n = 2

    def __deepcopy__(self, memo):
        return _OwnCopy()


@pytest.mark.parametrize(
    "make",
    [
        lambda: {"weight": torch.ones(2)},
        lambda: _OwnCopy(),
        lambda: {"d": collections.OrderedDict(a=1)},
    ],
    ids=["tensor", "own_deepcopy", "dict_subclass"],
)
def test_deepcopy_of_contents_no_guard_stands_for_breaks(make):
    """Contents a snapshot cannot stand for break the graph at the call (fullgraph
    raises, naming it); without fullgraph the call runs eagerly and stays correct."""
    config = make()

    def fn(x):
        clone = copy.deepcopy(config)
        return x * len(vars(clone) if isinstance(clone, _OwnCopy) else clone)

    with pytest.raises(dynamo_capture.Unsupported, match="copy.deepcopy"):
        _compiled(fn)(torch.randn(2))
    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), fn(x))
    if isinstance(config, dict):
        config["more"] = 1
    else:
        config.n = 3
    torch.testing.assert_close(compiled(x), fn(x))


class _Layers(collections.abc.Sequence):
    def __init__(self, sizes):
        self.sizes = sizes

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, index):
        return self.sizes[index]


def test_iterating_a_sequence_subclass_stops_at_its_length():
    def fn(x, layers):
        for size in layers:
            x = x * size
        return x, list(layers)

    layers = _Layers([2, 3])
    x = torch.randn(3)
    torch.testing.assert_close(_compiled(fn)(x, layers), fn(x, layers))


def test_backend_error_names_backend_graph_and_frame():
    def broken_backend(gm, example_inputs):
        raise RuntimeError("no kernel for this op")

    def fn(x):
        return x.sin() + 1

    compiled = dynamo_capture.optimize(fn, backend=broken_backend)
    with pytest.raises(BackendCompilerFailed) as info:
        compiled(torch.randn(3))
    message = str(info.value)
    assert "broken_backend" in message and "no kernel for this op" in message
    assert __file__ in message
    assert isinstance(info.value.__cause__, RuntimeError)


COUNTER = 0
LAST = None


def writes_globals(x):
    global COUNTER, LAST
    COUNTER = COUNTER + 1
    LAST = x * COUNTER
    return LAST + COUNTER


def test_global_writes_are_read_back_and_replayed():
    global COUNTER, LAST
    compiled = _compiled(writes_globals)
    x = torch.randn(3)
    COUNTER, LAST = 0, None
    expected = [writes_globals(x) for _ in range(2)]
    eager_state = (COUNTER, LAST)
    COUNTER, LAST = 0, None
    got = [compiled(x) for _ in range(2)]
    torch.testing.assert_close(got, expected)
    assert COUNTER == eager_state[0]
    torch.testing.assert_close(LAST, eager_state[1])


def test_torch_function_reads_outside_list_as_changed_in_frame():
    def stack_after_append(outs, t):
        outs.append(t * 2)
        return torch.stack(outs), torch.cat([*outs, t])

    compiled = _compiled(stack_after_append)
    got_list, expected_list = [torch.ones(3)], [torch.ones(3)]
    torch.testing.assert_close(
        compiled(got_list, torch.arange(3.0)), stack_after_append(expected_list, torch.arange(3.0))
    )
    torch.testing.assert_close(got_list, expected_list)


def popped_between_breaks(x):
    items = [x]
    items.append(x + 1)
    print("first break")
    last = items.pop()
    print("second break")
    return last * 2, len(items)


def test_an_item_popped_before_a_break_is_read_before_the_pop_is_replayed():
    compiled = dynamo_capture.optimize(popped_between_breaks, backend=eager_backend)
    for _ in range(3):
        x = torch.randn(3)
        got, expected = compiled(x), popped_between_breaks(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]


def popped_from_an_argument(x, items, holder):
    last = items.pop()
    holder.value = items
    return last, x + 1, holder.value


class _Holder:
    value = None


def test_an_argument_list_popped_returns_the_item_it_held():
    compiled = _compiled(popped_from_an_argument)
    x = torch.randn(3)
    a, b = torch.randn(3), torch.randn(3)
    got_items, eager_items = [a, b], [a, b]
    got = compiled(x, got_items, _Holder())
    expected = popped_from_an_argument(x, eager_items, _Holder())
    torch.testing.assert_close(got[0], expected[0])
    assert got_items == [a] and eager_items == [a]


def test_deepcopy_of_a_transformers_config_sees_its_changes():
    """A transformers config answers attribute lookups itself (`attribute_map`): its
    copy is folded in one graph and guarded as any object's."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64
    )

    def fn(x):
        clone = copy.deepcopy(config)
        theta = clone.rope_parameters["rope_theta"]
        return x * clone.num_hidden_layers + theta, clone

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    for _ in range(2):
        got, clone = compiled(x)
        torch.testing.assert_close(got, fn(x)[0])
    assert backend.frame_count == 1
    assert type(clone) is type(config) and clone is not config
    assert clone.to_dict() == config.to_dict()
    config.rope_parameters["rope_theta"] = 500.0
    torch.testing.assert_close(compiled(x)[0], fn(x)[0])
    config.num_hidden_layers = 3
    torch.testing.assert_close(compiled(x)[0], fn(x)[0])
    assert backend.frame_count == 3


def test_deepcopy_of_values_made_in_the_frame_stays_in_the_graph():
    config = _Config(3)

    def fn(x):
        made = {"sizes": [1, 2], "inner": _Config((4, [5])), "outside": config}
        clone = copy.deepcopy(made)
        clone["sizes"].append(3)
        clone["inner"].layers[1].append(6)
        clone["outside"].layers += 1
        total = len(made["sizes"]) + len(made["inner"].layers[1]) + config.layers
        return x * total + len(clone["sizes"]) + clone["outside"].layers, clone

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    for _ in range(2):
        got, clone = compiled(x)
        want, expected = fn(x)
        torch.testing.assert_close(got, want)
        assert clone["inner"].layers == expected["inner"].layers and clone["outside"].layers == 4
    assert config.layers == 3 and backend.frame_count == 1
    config.layers = 5
    torch.testing.assert_close(compiled(x)[0], fn(x)[0])
    assert backend.frame_count == 2


@pytest.mark.parametrize(
    "make",
    [lambda x, c: [x * 2], lambda x, c: {"a": c, "b": c.layers}],
    ids=["graph_tensor", "two_outside_objects"],
)
def test_deepcopy_of_made_values_the_copy_cannot_stand_for_breaks(make):
    config = _Config([1])

    def fn(x):
        clone = copy.deepcopy(make(x, config))
        return x + len(clone)

    with pytest.raises(dynamo_capture.Unsupported, match="copy.deepcopy"):
        _compiled(fn)(torch.randn(2))
    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), fn(x))


def test_delattr_of_a_made_object_and_of_an_outside_one():
    outside = _Config(3)
    outside.extra = 2

    def fn(x):
        made = _Config(2)
        made.extra = 1
        delattr(made, "extra")
        delattr(outside, "extra")
        return x * made.layers + hasattr(made, "extra") + hasattr(outside, "extra")

    x = torch.randn(2)
    got = _compiled(fn)(x)
    assert not hasattr(outside, "extra")
    outside.extra = 2
    torch.testing.assert_close(got, fn(x))


@pytest.mark.slow
def test_t5_forward_with_a_cache_compiles_in_one_frame_as_torch_compile():
    """T5's cache construction deep-copies its encoder-decoder config and deletes
    attributes of the copy (`get_text_config(decoder=True)`): one frame, as torch.compile."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.T5Config(
        d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, vocab_size=100
    )
    model = transformers.T5ForConditionalGeneration(config).eval()
    ids = torch.randint(1, 64, (2, 6))
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(model.forward, backend=backend)
    with torch.no_grad():
        for _ in range(2):
            got = compiled(input_ids=ids, decoder_input_ids=ids[:, :3], use_cache=True)
            want = model(input_ids=ids, decoder_input_ids=ids[:, :3], use_cache=True)
            torch.testing.assert_close(got.logits, want.logits)
    assert backend.frame_count == 1
