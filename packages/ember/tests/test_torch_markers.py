"""torch's own compiler markers through ember.compile: disable, allow_in_graph,
mark_dynamic / mark_static, assume_constant_result, is_compiling, on real objects."""

import pytest
import torch
import torch._dynamo

import ember
from dynamo_capture.testing import CountingBackend


def _double(x):
    return x * 2


def test_compiling_a_torch_disabled_function_returns_it_unchanged():
    disabled = torch.compiler.disable(_double)
    assert ember.compile(disabled, backend="eager") is disabled
    assert ember.compile(ember.disable(_double)).__wrapped__ is _double
    module = torch.compiler.disable(torch.nn.ReLU())
    assert ember.compile(module) is module


class _Preprocess(torch.nn.Module):
    @torch.compiler.disable(reason="reads a Python-side table")
    def forward(self, x):
        return x.abs() + 1


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = _Preprocess()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(self.pre(x.sin())).relu()


def test_torch_disabled_forward_in_a_model_breaks_the_graph_and_matches_eager():
    model = _Model()
    backend = CountingBackend()
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    code = "\n".join(gm.code for gm in backend.graphs)
    assert "abs" not in code  # the disabled forward was not traced
    explained = ember.explain(model)(x)
    assert any("reads a Python-side table" in b.reason for b in explained.break_reasons)


def _gelu_like(x):
    match x:  # a class pattern
        case torch.Tensor():
            return x * torch.sigmoid(1.702 * x)
    return x


torch.compiler.allow_in_graph(_gelu_like)


def test_ember_allow_in_graph_of_a_torch_allowed_function_is_one_node_under_fullgraph():
    # torch's registration is not read (it lives in a private registry of torch's);
    # ember's own marker keeps the function one node.
    backend = CountingBackend()
    ember.allow_in_graph(_gelu_like)
    compiled = ember.compile(lambda x: _gelu_like(x) + 1, backend=backend, fullgraph=True)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), _gelu_like(x) + 1)
    assert _gelu_like in [n.target for n in backend.graphs[0].graph.nodes]


def test_torch_mark_dynamic_input_compiles_once_for_all_sizes():
    backend = CountingBackend()
    compiled = ember.compile(lambda x: (x * 2).sum(0), backend=backend)
    for n in (3, 5, 9):
        x = torch.randn(n, 4)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x), (x * 2).sum(0))
    assert len(backend.graphs) == 1
    values = [n.meta.get("val") for n in backend.graphs[0].graph.nodes if n.op == "placeholder"]
    assert any(isinstance(v, torch.SymInt) for v in values) or any(
        isinstance(v, torch.Tensor) and isinstance(v.shape[0], torch.SymInt) for v in values
    )


def test_torch_mark_static_keeps_a_size_static_under_dynamic_true():
    backend = CountingBackend()
    compiled = ember.compile(lambda x: x + 1, backend=backend, dynamic=True)
    for n in (3, 5):
        x = torch.randn(n)
        torch._dynamo.mark_static(x, 0)
        torch.testing.assert_close(compiled(x), x + 1)
    assert len(backend.graphs) == 2


def test_torch_mark_dynamic_range_is_guarded():
    backend = CountingBackend()
    compiled = ember.compile(lambda x: x.cos(), backend=backend)
    x = torch.randn(8)
    torch._dynamo.mark_dynamic(x, 0, min=4, max=16)
    torch.testing.assert_close(compiled(x), x.cos())
    y = torch.randn(12)
    torch._dynamo.mark_dynamic(y, 0, min=4, max=16)
    torch.testing.assert_close(compiled(y), y.cos())
    assert len(backend.graphs) == 1


@torch.compiler.assume_constant_result
def _world_size():
    return 4


def test_torch_assume_constant_result_folds_into_the_graph():
    backend = CountingBackend()
    compiled = ember.compile(lambda x: x / _world_size(), backend=backend, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x / 4)
    assert "_world_size" not in backend.graphs[0].code


@pytest.mark.parametrize(
    "query", [torch.compiler.is_compiling, torch._dynamo.is_compiling, ember.is_compiling]
)
def test_is_compiling_is_true_inside_ember_capture(query):
    def fn(x):
        return x + 1 if query() else x - 1

    x = torch.zeros(2)
    torch.testing.assert_close(ember.compile(fn, backend="eager", fullgraph=True)(x), x + 1)


def test_transformers_model_still_captures_in_one_graph():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 64, (2, 8))
    explained = ember.explain(model)(ids)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    compiled = ember.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids).logits, model(ids).logits)
