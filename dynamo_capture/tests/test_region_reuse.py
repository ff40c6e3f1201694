"""Calls of identical blocks replay the first call's nodes (region_reuse).

Each test compares against eager PyTorch, and against capture with replay off: the
same guards; a block that differs (class, shape, hook, training flag, attribute,
identity relied on) is traced on its own, and a change made to one block after the
compile recompiles rather than reusing the wrong nodes.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dynamo_capture
from dynamo_capture import region_reuse
from dynamo_capture.region_reuse import MODULE_CALLS


class Block(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.up(self.norm(x)))
        h = self.down(h) * self.scale + h[..., : x.shape[-1]].sigmoid()
        if self.training:
            h = h * 0.75
        return x + torch.tanh(h) * torch.sin(x)


class OtherBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2 - 1


class Stack(nn.Module):
    def __init__(self, depth: int = 4, width: int = 8) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.fixture
def replays(monkeypatch):
    """The sources of the calls replayed from a template."""
    replayed: list[str] = []
    replay = region_reuse._replay

    def counting(tx, template, module_value, tensors):
        result = replay(tx, template, module_value, tensors)
        replayed.append(module_value.source.name)
        return result

    monkeypatch.setattr(region_reuse, "_replay", counting)
    return replayed


def _capture(model, *inputs, enabled: bool = True):
    region_reuse.ENABLED = enabled
    try:
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        report = dynamo_capture.explain(model)(*inputs)
        out = dynamo_capture.optimize(model, backend=backend, fullgraph=True)(*inputs)
    finally:
        region_reuse.ENABLED = True
    return report, graphs[0], out


def _assert_same_capture_as_tracing(model, x):
    replayed, graph, out = _capture(model, x)
    traced, graph_traced, _ = _capture(model, x, enabled=False)
    assert sorted(replayed.guards) == sorted(traced.guards)
    assert graph.code == graph_traced.code
    torch.testing.assert_close(out, model(x))
    return graph


def test_identical_blocks_replay_the_first_blocks_nodes(replays):
    torch.manual_seed(0)
    model = Stack(depth=4)
    graph = _assert_same_capture_as_tracing(model, torch.randn(3, 8, requires_grad=True))
    assert replays[:3] == ["self.layers.1", "self.layers.2", "self.layers.3"]
    # every block's nodes carry its own module call, as when traced
    calls = {name for node in graph.graph.nodes for _, name, _ in node.meta.get(MODULE_CALLS, ())}
    assert {f"self.layers.{i}" for i in range(4)} | {"self.layers.3.norm"} <= calls


def test_replayed_blocks_train_like_eager():
    torch.manual_seed(0)
    model = Stack(depth=4)
    x = torch.randn(3, 8, requires_grad=True)
    compiled = dynamo_capture.optimize(model, backend=dynamo_capture.testing.eager_backend)
    out = compiled(x)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    expected = model(x)
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected)
    for got, want in zip(grads, [p.grad for p in model.parameters()] + [x.grad], strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize(
    "change",
    ["another_class", "another_shape", "hook", "eval", "attribute"],
)
def test_a_block_that_differs_is_traced_on_its_own(replays, change):
    torch.manual_seed(0)
    model = Stack(depth=4)
    _differ(model, 2, change)
    _assert_same_capture_as_tracing(model, torch.randn(3, 8, requires_grad=True))
    assert "self.layers.2" not in replays
    assert "self.layers.1" in replays


@pytest.mark.parametrize(
    "change",
    ["another_class", "another_shape", "hook", "eval", "attribute"],
)
def test_a_block_changed_after_the_compile_recompiles(change):
    torch.manual_seed(0)
    model = Stack(depth=4)
    x = torch.randn(3, 8)
    compiled = dynamo_capture.optimize(model, backend=dynamo_capture.testing.eager_backend)
    torch.testing.assert_close(compiled(x), model(x))
    _differ(model, 2, change)
    torch.testing.assert_close(compiled(x), model(x))


def _differ(model: Stack, index: int, change: str) -> None:
    if change == "another_class":
        other = OtherBlock()
        other.load_state_dict(model.layers[index].state_dict())
        model.layers[index] = other
    elif change == "another_shape":
        model.layers[index].up = nn.Linear(8, 24)
        model.layers[index].down = nn.Linear(24, 8)
    elif change == "hook":
        model.layers[index].register_forward_hook(lambda module, args, out: out * 3)
    elif change == "eval":
        model.layers[index].eval()
    elif change == "attribute":
        model.layers[index].scale = 2.0
    else:
        raise AssertionError(change)


class Shared(nn.Module):
    """Blocks comparing a submodule by identity (`is`): capture relied on which it is."""

    def __init__(self) -> None:
        super().__init__()
        self.special = nn.Identity()
        self.layers = nn.ModuleList(
            IdentityBlock(self.special if i == 2 else nn.Identity()) for i in range(4)
        )

    def forward(self, x):
        for layer in self.layers:
            x = layer(x, self.special)
        return x


class IdentityBlock(Block):
    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.act = act

    def forward(self, x, special):
        out = super().forward(x)
        return out * 2 if self.act is special else out


def test_identity_relied_on_is_not_replayed(replays):
    torch.manual_seed(0)
    model = Shared()
    _assert_same_capture_as_tracing(model, torch.randn(3, 8, requires_grad=True))
    # every block's trace relied on which module its `act` is: none is replayed
    assert replays == []


def test_tied_parameters_across_blocks_replay_with_the_shared_parameter(replays):
    torch.manual_seed(0)
    model = Stack(depth=4)
    model.layers[3].up.weight = model.layers[1].up.weight
    x = torch.randn(3, 8, requires_grad=True)
    _assert_same_capture_as_tracing(model, x)
    assert "self.layers.3" in replays
    compiled = dynamo_capture.optimize(model, backend=dynamo_capture.testing.eager_backend)
    torch.testing.assert_close(compiled(x), model(x))
    model.layers[3].up.weight = nn.Parameter(torch.randn(16, 8))  # untied: recompiles
    torch.testing.assert_close(compiled(x), model(x))


class Written(nn.Module):
    """The frame writes an attribute each block reads: each block sees its own value."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(4))

    def forward(self, x):
        for index, layer in enumerate(self.layers):
            layer.scale = float(index)
            x = layer(x)
        return x


def test_attribute_written_by_the_frame_before_each_block_is_read_per_block():
    torch.manual_seed(0)
    model = Written()
    x = torch.randn(3, 8)
    reference = Written()
    reference.load_state_dict(model.state_dict())
    compiled = dynamo_capture.optimize(model, backend=dynamo_capture.testing.eager_backend)
    torch.testing.assert_close(compiled(x), reference(x))


def test_a_block_inside_another_grad_mode_is_traced_on_its_own(replays):
    class Mixed(Stack):
        def forward(self, x):
            for index, layer in enumerate(self.layers):
                with torch.set_grad_enabled(index % 2 == 0):
                    x = layer(x)
            return x

    torch.manual_seed(0)
    model = Mixed(depth=4)
    x = torch.randn(3, 8, requires_grad=True)
    _assert_same_capture_as_tracing(model, x)
    # layer 2 takes a tensor made under no_grad (no requires_grad): traced; layer 3 as 1
    assert set(replays) == {"self.layers.3"}


class MaskedBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = super().forward(x)
        return h * h[h > 0].mean()  # an intermediate of data-dependent shape


def test_a_block_with_data_dependent_shapes_is_traced_each_call(replays):
    torch.manual_seed(0)
    model = Stack(depth=4)
    for index in range(4):
        model.layers[index] = MaskedBlock()
    x = torch.randn(3, 8, requires_grad=True)
    compiled = dynamo_capture.optimize(model, backend=dynamo_capture.testing.eager_backend)
    torch.testing.assert_close(compiled(x), model(x))
    assert replays == []


def test_a_block_reading_an_attribute_the_frame_wrote_is_traced(replays):
    torch.manual_seed(0)
    model = Written()
    x = torch.randn(3, 8, requires_grad=True)
    compiled = dynamo_capture.optimize(model, backend=dynamo_capture.testing.eager_backend)
    expected = Written()
    expected.load_state_dict(model.state_dict())
    torch.testing.assert_close(compiled(x), expected(x))
    assert replays == []
