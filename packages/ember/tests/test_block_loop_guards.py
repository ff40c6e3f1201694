"""Guards of identical blocks checked as one loop over the blocks (guards.block_loops).

Footguns, worst first:
| a stale entry runs (wrong result) | one block's parameter shape, dtype or requires_grad,
|                                   | an attribute, its class or the block itself replaced
|                                   | after the compile -> the entry misses, compiled again
| guard code in proportion to depth | the guards each block shares are one loop in the module
|                                   | tree's full check: it does not grow with them
"""

from __future__ import annotations

import linecache

import pytest
import torch
from torch import nn

import ember
from guards import block_loops, module_tree


class Block(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x.to(self.norm.weight.dtype)).to(x.dtype)
        return x + self.down(torch.relu(self.up(h))) * self.scale


class OtherBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.down(torch.relu(self.up(self.norm(x))))


class Stack(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _compiled(model: nn.Module):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return ember.compile(model, backend=backend), graphs


def _guard_code(compiled) -> list[str]:
    """The entry's generated guard functions: its own and its module trees' full checks."""
    guards = compiled.__dict__["_ember_compiled"].entries[0].guards
    trees = [linecache.getlines(tree.structure.__code__.co_filename) for tree in guards.trees]
    return [guards.source, *("".join(lines) for lines in trees)]


@pytest.mark.parametrize("depth", [3, 12])
def test_identical_blocks_guards_are_one_loop(depth):
    torch.manual_seed(0)
    model = Stack(depth).eval()
    compiled, _ = _compiled(model)
    x = torch.randn(2, 8)
    torch.testing.assert_close(compiled(x), model(x))
    assert any("___block_loop" in code for code in _guard_code(compiled))


def _lines(depth: int) -> int:
    torch.manual_seed(0)
    compiled, _ = _compiled(Stack(depth).eval())
    compiled(torch.randn(2, 8))
    return sum(len(code.splitlines()) for code in _guard_code(compiled))


def test_identical_blocks_guard_code_is_flat_in_depth():
    shallow, deep = _lines(4), _lines(24)
    # what stays per block: each module's identity and the tree's own reads, not the
    # guards the blocks share
    block_loops.ENABLED = False
    try:
        unlooped = _lines(24)
    finally:
        block_loops.ENABLED = True
    assert deep < unlooped
    assert deep - shallow < (unlooped - shallow) / 2


def _swap_up(layer: Block, up: nn.Linear) -> None:
    layer.up = up
    layer.down = nn.Linear(up.out_features, 8)


CHANGES = {
    "parameter shape": lambda layer: _swap_up(layer, nn.Linear(8, 32)),
    "parameter dtype": lambda layer: layer.norm.double(),
    "requires_grad": lambda layer: layer.up.weight.requires_grad_(False),
    "attribute": lambda layer: setattr(layer, "scale", 3.0),
    "class": lambda layer: setattr(layer, "__class__", OtherBlock),
    "block replaced": None,
}


@pytest.mark.parametrize("tree", [True, False], ids=["module tree", "inline guards"])
@pytest.mark.parametrize("depth", [3, 12])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_to_one_identical_block_misses(change, depth, tree, monkeypatch):
    if not tree:  # every guard in the entry's own function
        monkeypatch.setattr(module_tree, "MIN_MODULES", 10**6)
    torch.manual_seed(0)
    model = Stack(depth)
    compiled, graphs = _compiled(model)
    x = torch.randn(2, 8)
    compiled(x)
    assert len(graphs) == 1
    target = depth - 2
    if CHANGES[change] is None:
        model.layers[target] = OtherBlock()
    else:
        CHANGES[change](model.layers[target])
    expected = model(x)
    got = compiled(x)
    torch.testing.assert_close(got, expected)
    assert len(graphs) == 2, f"{change} in layer {target} was not seen"
