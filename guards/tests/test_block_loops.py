"""Guards identical blocks share, checked as one loop over the blocks (block_loops.py)."""

from __future__ import annotations

import torch

from guards import GuardSet, LocalSource, NNModuleSource
from guards.block_loops import BLOCK, BlockLoopGuard, loop_identical_blocks
from guards.guard_codegen import generate_guard_function
from guards.sources import AttrSource, ModuleSource, ParamBufferSource

ROOT = NNModuleSource(LocalSource("self"))


def _stack(depth: int) -> torch.nn.Sequential:
    torch.manual_seed(0)
    blocks = [
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)) for _ in range(depth)
    ]
    return torch.nn.Sequential(*blocks)


def _guards(model: torch.nn.Module) -> list:
    guards = GuardSet()
    guards.add_nn_module(ROOT, model)
    for index, block in enumerate(model):
        source = ModuleSource(ROOT, str(index))
        guards.add_nn_module(source, block)
        for name, child in block._modules.items():
            child_source = ModuleSource(source, name)
            guards.add_nn_module(child_source, child)
            for parameter, tensor in child._parameters.items():
                guards.add_tensor(ParamBufferSource(child_source, parameter), tensor)
        norm = ModuleSource(source, "1")
        guards.add_equals(AttrSource(norm, "eps"), block[1].eps)
    return list(guards)


def _check(guards: list, header: str):
    return generate_guard_function(guards, header, stable_reads=False).check


def _looped(model: torch.nn.Module):
    looped = loop_identical_blocks(_guards(model), _check)
    check = generate_guard_function(looped, "test", stable_reads=False).check
    return looped, check


def test_identical_blocks_share_one_loop_of_their_common_guards():
    model = _stack(5)
    guards = _guards(model)
    looped, check = _looped(model)
    loops = [g for g in looped if isinstance(g, BlockLoopGuard)]
    assert len(loops) == 1
    (loop,) = loops
    assert len(loop.blocks) == 5
    # each block's parameters (4) and its norm's eps, read from the block
    assert len(loop.body) == 5
    assert all(g.source.root() == BLOCK for g in loop.body)
    assert len(looped) == len(guards) - 5 * 5 + 1
    assert check({"self": model}, {})


def test_a_change_in_one_block_fails_the_loop():
    model = _stack(5)
    _, check = _looped(model)
    model[3][1].eps = 1e-3
    assert not check({"self": model}, {})
    model[3][1].eps = 1e-5
    assert check({"self": model}, {})
    model[2][0].weight = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.float64))
    assert not check({"self": model}, {})


def test_a_guard_one_block_does_not_share_stays_on_its_own():
    model = _stack(4)
    model[1][1].eps = 1e-3  # another eps, guarded as such
    looped, check = _looped(model)
    (loop,) = [g for g in looped if isinstance(g, BlockLoopGuard)]
    assert len(loop.body) == 4  # the parameters; each eps checked on its own
    assert sum(getattr(g.source, "member", None) == "eps" for g in looped) == 4
    assert check({"self": model}, {})
    model[1][1].eps = 1e-5
    assert not check({"self": model}, {})


class OtherSequential(torch.nn.Sequential):
    pass


def test_a_block_of_another_class_is_not_looped_with_the_others():
    model = _stack(4)
    model[2] = OtherSequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    looped, check = _looped(model)
    (loop,) = [g for g in looped if isinstance(g, BlockLoopGuard)]
    assert [source.member for source in loop.blocks] == ["0", "1", "3"]
    assert check({"self": model}, {})
    model[2][1].eps = 1e-3
    assert not check({"self": model}, {})
