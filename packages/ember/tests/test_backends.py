"""Backend names: built-ins, register_backend, entry points, and the backend contract."""

import importlib.metadata

import pytest
import torch

import ember
from ember import backends


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch):
    monkeypatch.setattr(backends, "_registered", {})


def test_builtin_names_are_listed():
    assert {"inductor", "eager", "aot_eager", "cudagraphs"} <= set(ember.list_backends())
    assert ember.list_backends() == sorted(ember.list_backends())


def test_register_as_plain_decorator_uses_the_function_name():
    @ember.register_backend
    def my_backend(gm, example_inputs):
        return gm.forward

    assert "my_backend" in ember.list_backends()
    assert backends.lookup_backend("my_backend") is my_backend
    ember.compile(lambda x: x, backend="my_backend")


def test_register_with_a_name_as_decorator_and_as_call():
    @ember.register_backend(name="named")
    def first(gm, example_inputs):
        return gm.forward

    def second(gm, example_inputs):
        return gm.forward

    assert ember.register_backend(second, name="second_name") is second
    assert backends.lookup_backend("named") is first
    assert backends.lookup_backend("second_name") is second


def test_registering_a_name_twice_is_an_error_unless_same_function():
    def one(gm, inputs):
        return gm.forward

    def two(gm, inputs):
        return gm.forward

    ember.register_backend(one, name="dup")
    ember.register_backend(one, name="dup")
    with pytest.raises(ember.InvalidArgumentError, match="already registered as 'dup'"):
        ember.register_backend(two, name="dup")


def test_builtin_names_are_reserved():
    with pytest.raises(ember.InvalidArgumentError, match="reserved"):
        ember.register_backend(lambda gm, inputs: gm.forward, name="inductor")


def test_register_rejects_non_callables_and_bad_names():
    with pytest.raises(ember.InvalidArgumentError, match="expects a callable"):
        ember.register_backend("inductor")
    with pytest.raises(ember.InvalidArgumentError, match="identifier"):
        ember.register_backend(lambda gm, inputs: gm.forward, name="has space")


def _entry_points_with(monkeypatch, *points):
    real = importlib.metadata.entry_points

    def fake(**kwargs):
        if kwargs.get("group") == backends.ENTRY_POINT_GROUP:
            return importlib.metadata.EntryPoints(points)
        return real(**kwargs)

    monkeypatch.setattr(importlib.metadata, "entry_points", fake)


def test_entry_point_backends_are_listed_and_loaded(monkeypatch):
    point = importlib.metadata.EntryPoint(
        name="third_party", value="ember.backends:_eager", group=backends.ENTRY_POINT_GROUP
    )
    _entry_points_with(monkeypatch, point)
    assert "third_party" in ember.list_backends()
    assert backends.lookup_backend("third_party") is backends._eager
    ember.compile(lambda x: x, backend="third_party")


def test_entry_point_that_is_not_callable(monkeypatch):
    point = importlib.metadata.EntryPoint(
        name="broken", value="ember.backends:ENTRY_POINT_GROUP", group=backends.ENTRY_POINT_GROUP
    )
    _entry_points_with(monkeypatch, point)
    with pytest.raises(ember.InvalidArgumentError, match="did not load a callable"):
        backends.lookup_backend("broken")


def test_eager_backend_follows_the_contract():
    def program(x, y):
        return torch.relu(x) @ y.t()

    gm = torch.fx.symbolic_trace(program)
    x, y = torch.randn(3, 4), torch.randn(5, 4)
    compiled = backends.lookup_backend("eager")(gm, [x, y])
    torch.testing.assert_close(compiled(x, y), program(x, y))


def test_a_callable_backend_is_used_as_it_is():
    def mine(gm, example_inputs):
        return gm.forward

    assert backends.lookup_backend(mine) is mine


@pytest.mark.parametrize("name", ["aot_eager", "inductor"])
def test_stage_backends_compile_correctly(name):
    gm = torch.fx.symbolic_trace(lambda x: torch.sin(x) + 1)
    x = torch.randn(4)
    backend = backends.lookup_backend(name, {"decompositions": None})
    compiled = backend(gm, [x])
    result = compiled([x]) if getattr(compiled, "_boxed_call", False) else compiled(x)
    torch.testing.assert_close(result, torch.sin(x) + 1)


def _loss_and_saved_bytes(compiled, x) -> tuple[torch.Tensor, int]:
    """The loss of one forward, and the bytes of the tensors autograd saved for its backward."""
    saved = []

    def pack(tensor):
        saved.append(tensor.numel() * tensor.element_size())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = compiled(x).square().sum()
    return loss, sum(saved)


class _GeluMlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 64)
        self.down = torch.nn.Linear(64, 16)

    def forward(self, x):
        h = self.up(x)
        return self.down(torch.nn.functional.gelu(h) * torch.sigmoid(h) + h.tanh())


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_partitioner_option_chooses_what_training_saves(backend):
    torch.manual_seed(0)
    model = _GeluMlp()
    x = torch.randn(8, 16)
    expected = model(x).square().sum()
    expected.backward()
    expected_grads = [p.grad.clone() for p in model.parameters()]
    saved = {}
    for partitioner in ("default", "min_cut"):
        model.zero_grad()
        compiled = ember.compile(model, backend=backend, options={"partitioner": partitioner})
        loss, saved[partitioner] = _loss_and_saved_bytes(compiled, x)
        loss.backward()
        torch.testing.assert_close(loss, expected)
        for param, grad in zip(model.parameters(), expected_grads, strict=True):
            torch.testing.assert_close(param.grad, grad)
    # min-cut keeps `h` and recomputes gelu/sigmoid/tanh of it in the backward
    assert saved["min_cut"] < saved["default"], saved


def test_partitioner_option_rejects_unknown_names():
    with pytest.raises(ember.InvalidArgumentError, match="'min_cut', 'default'"):
        ember.compile(lambda x: x, options={"partitioner": "greedy"})


def test_inductor_on_gpu_inputs_keeps_variance_for_one_pass_welford(monkeypatch):
    import prim_decomp

    aten = torch.ops.aten
    table = backends._gpu_table()
    assert aten.var_mean.correction in prim_decomp.inductor_default
    assert aten.var_mean.correction not in table and aten.var.correction not in table
    assert aten.embedding_dense_backward.default not in table  # ATen's kernel, not a scatter
    assert len(table) == len(prim_decomp.inductor_default) - 3
    assert not backends._on_gpu([torch.randn(4, 8), 3])
    # the GPU table's graphs (variance kept whole) compile and match eager
    used = []
    monkeypatch.setattr(backends, "_on_gpu", lambda inputs: True)
    monkeypatch.setattr(backends, "_gpu_table", lambda: used.append(table) or table)
    norm = torch.nn.BatchNorm2d(3)
    x = torch.randn(2, 3, 5, 5, requires_grad=True)
    compiled = ember.compile(torch.nn.BatchNorm2d(3), backend="inductor")
    compiled.load_state_dict(norm.state_dict())
    torch.testing.assert_close(compiled(x), norm(x))
    assert used


def test_gpu_table_keeps_the_embedding_backward_whole(monkeypatch):
    table = backends._gpu_table()
    seen = []
    monkeypatch.setattr(backends, "_on_gpu", lambda inputs: True)
    monkeypatch.setattr(backends, "_gpu_table", lambda: seen.append(table) or table)
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(32, 8)
    index = torch.randint(0, 32, (64, 64))
    compiled = ember.compile(embedding, backend="inductor")
    compiled(index).sin().sum().backward()
    got = embedding.weight.grad.clone()
    embedding.weight.grad = None
    embedding(index).sin().sum().backward()
    torch.testing.assert_close(got, embedding.weight.grad)
    assert seen
