"""Regional compilation of graphs that switch grad mode or autocast (ember.regions).

A model may switch modes outside its repeated blocks (a rotary embedding computed once
under `no_grad` and with autocast off, as Llama's is in some transformers versions, or
a forward entering autocast around its layers) or inside each block. The regions are
the blocks whose nodes all run in one mode, or whose switches are undone inside them;
the switches between regions run in the graph chaining the pieces, each piece compiled
and run in the mode it needs. Every test compares against eager PyTorch.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ember
from ember import regions
from ember.regions import plan_pieces, regional


class Block(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
        h = self.norm(x) * angle.cos() + x.roll(1, -1) * angle.sin()
        h = torch.nn.functional.gelu(self.up(h))
        return x + torch.tanh(self.down(h)) * 0.5


class AutocastOffBlock(Block):
    """A block turning autocast off for part of itself (each copy alike)."""

    def forward(self, x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", enabled=False):
            scale = torch.sigmoid(x.float().mean(-1, keepdim=True) * 3.0)
        return super().forward(x, angle) * scale.to(x.dtype)


class Rotary(nn.Module):
    """Angles computed once, without grad and with autocast off (Llama's rotary)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.register_buffer("frequency", torch.linspace(0.1, 1.0, width))

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", enabled=False):
            positions = torch.arange(x.shape[-2], dtype=torch.float32)[:, None]
            angle = positions @ self.frequency[None, :]
        return angle.to(x.dtype)


class Stack(nn.Module):
    def __init__(self, depth: int = 4, block: type = Block, amp_inside: bool = False) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.rotary = Rotary()
        self.layers = nn.ModuleList(block() for _ in range(depth))
        self.head = nn.Linear(16, 3)
        self.amp_inside = amp_inside

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        angle = self.rotary(h)
        if self.amp_inside:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                for layer in self.layers:
                    h = layer(h, angle)
        else:
            for layer in self.layers:
                h = layer(h, angle)
        return self.head(h.float())


class HalfFrozen(Stack):
    """The first half of the layers run without grad, the others with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        angle = self.rotary(h)
        half = len(self.layers) // 2
        with torch.no_grad():
            for layer in self.layers[:half]:
                h = layer(h, angle)
        for layer in self.layers[half:]:
            h = layer(h, angle)
        return self.head(h)


def _captured(model: nn.Module, *inputs: torch.Tensor) -> list:
    graphs = []

    def record(gm: torch.fx.GraphModule, example_inputs: list):
        graphs.append((gm, example_inputs))
        return gm.forward

    ember.compile(model, backend=record)(*inputs)
    return graphs


def _regions(pieces: list) -> list:
    return [piece for piece in pieces if piece.region]


def _step(run, model: nn.Module, x: torch.Tensor, amp: bool) -> list[torch.Tensor]:
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        out = run(x)
    out.float().square().sum().backward()
    grads = [out.detach().clone()]
    grads += [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return grads


def _assert_step_matches_eager(compiled, model: nn.Module, x: torch.Tensor, amp: bool) -> None:
    got = _step(compiled, model, x, amp)
    expected = _step(model, model, x, amp)
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if amp else {}
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, **tolerance)


def test_switches_outside_the_blocks_leave_them_regions():
    torch.manual_seed(0)
    model = Stack(depth=4)
    x = torch.randn(2, 5, 8)
    ((gm, examples),) = _captured(model, x)
    pieces = plan_pieces(gm, examples)
    assert pieces is not None, regions._why_whole(gm, examples)
    cut = _regions(pieces)
    assert [p.region.split(" ")[0] for p in cut] == [f"self.layers.{i}" for i in range(4)]
    assert len({p.signature for p in cut}) == 1
    # the grad switches of the rotary's no_grad run between the pieces, not inside one
    switches = [p.nodes[0].target for p in pieces if p.switch]
    assert torch._C._set_grad_enabled in switches
    assert all(not any(regions._is_switch(n) for n in p.nodes) for p in pieces if not p.switch)


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_rotary_without_grad_or_autocast_trains_like_eager(backend, amp):
    torch.manual_seed(0)
    model = Stack(depth=3)
    x = torch.randn(2, 5, 8)
    compiled = ember.compile(model, backend=backend)
    for _ in range(2):
        _assert_step_matches_eager(compiled, model, x, amp)


def test_autocast_entered_around_the_blocks_compiles_them_in_it():
    torch.manual_seed(0)
    model = Stack(depth=3, amp_inside=True)
    x = torch.randn(2, 5, 8)
    ((gm, examples),) = _captured(model, x)
    pieces = plan_pieces(gm, examples)
    assert pieces is not None and len(_regions(pieces)) == 3
    inside = {p.signature[-2] for p in _regions(pieces)}
    assert inside == {(True, (("cpu", torch.bfloat16, True, True),))}, inside
    compiled = ember.compile(model, backend="inductor")
    for _ in range(2):
        _assert_step_matches_eager(compiled, model, x, amp=False)
    with torch.no_grad():
        out = compiled(x)
    torch.testing.assert_close(out, model(x), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_blocks_switching_autocast_inside_each_copy_are_regions(amp):
    torch.manual_seed(0)
    model = Stack(depth=3, block=AutocastOffBlock)
    x = torch.randn(2, 5, 8)
    ((gm, examples),) = _captured(model, x)
    pieces = plan_pieces(gm, examples)
    assert pieces is not None and len(_regions(pieces)) == 3
    assert len({p.signature for p in _regions(pieces)}) == 1
    assert all(any(regions._is_switch(n) for n in p.nodes) for p in _regions(pieces))
    compiled = ember.compile(model, backend="inductor")
    _assert_step_matches_eager(compiled, model, x, amp)


def test_blocks_in_other_grad_modes_are_other_regions():
    torch.manual_seed(0)
    model = HalfFrozen(depth=8)
    x = torch.randn(2, 5, 8)
    ((gm, examples),) = _captured(model, x)
    pieces = plan_pieces(gm, examples)
    assert pieces is not None
    # the first block of each half takes an input of other requires_grad: not merged
    cut = _regions(pieces)
    names = [p.region.split(" ")[0] for p in cut]
    assert names == [f"self.layers.{i}" for i in (1, 2, 3, 5, 6, 7)], names
    assert [p.signature[-2][0] for p in cut] == [False] * 3 + [True] * 3
    assert len({p.signature for p in cut}) == 2
    compiled = ember.compile(model, backend="inductor")
    for _ in range(2):
        _assert_step_matches_eager(compiled, model, x, amp=False)


def test_a_piece_raising_leaves_no_mode_switched():
    torch.manual_seed(0)
    model = Stack(depth=3, amp_inside=True)
    x = torch.randn(2, 5, 8)
    ((gm, examples),) = _captured(model, x)
    calls = []

    def failing_in_autocast(graph, inputs):
        def run(*args):
            calls.append(torch.is_autocast_enabled("cpu"))
            if calls[-1]:
                raise RuntimeError("piece failed")
            return graph.forward(*args)

        return run

    run = regional(failing_in_autocast)(gm, examples)
    with pytest.raises(RuntimeError, match="piece failed"):
        run(*examples)
    assert calls[-1] is True  # a piece ran in the autocast block the chain entered
    assert not torch.is_autocast_enabled("cpu") and torch.is_grad_enabled()


def test_switches_out_of_order_compile_whole():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.randn(3)
    enter = torch.amp.autocast_mode._enter_autocast
    outer = graph.call_function(enter, ("cpu", torch.bfloat16, True, True))
    inner = graph.call_function(enter, ("cpu", torch.bfloat16, False, True))
    y = graph.call_function(torch.sin, (x,))
    graph.call_function(torch.amp.autocast_mode._exit_autocast, (outer,))
    graph.call_function(torch.amp.autocast_mode._exit_autocast, (inner,))
    graph.output((y,))
    gm = torch.fx.GraphModule(nn.Module(), graph)
    compute = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    assert "out of order" in regions._modes(compute)
    assert plan_pieces(gm, [torch.randn(3)]) is None


def test_graphs_setting_other_process_state_compile_whole():
    # a piece after `set_default_dtype` would be traced in the caller's default dtype
    torch.manual_seed(0)
    ((gm, examples),) = _captured(Stack(depth=3), torch.randn(2, 5, 8))
    assert plan_pieces(gm, examples) is not None
    first = next(n for n in gm.graph.nodes if n.op == "call_function")
    with gm.graph.inserting_before(first):
        gm.graph.call_function(torch.set_default_dtype, (torch.float32,))
    assert "process state" in regions._why_whole(gm, examples)
    assert plan_pieces(gm, examples) is None
