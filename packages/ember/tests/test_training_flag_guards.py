"""`model.eval()` recompiles only the graphs that read a module's training flag.

Capture guards a module's identity and class, and its `training` flag only where it
read it: the module's own forward (`if self.training`), `F.dropout(x,
training=self.training)`, BatchNorm and Dropout. A graph that never reads the flag
keeps its entry across `train()` / `eval()`, as under torch.compile; one that does
recompiles, and every call gives eager's values.

| footgun                                              | without the check   |
| ---------------------------------------------------- | ------------------- |
| a flag that was read is not guarded                  | silent wrong result |
| every module's flag guarded                          | needless recompiles |
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch.testing import assert_close

import ember

BACKENDS = ["eager", "inductor"]


class ReadsFlag(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        return y * 2 if self.training else y - 1


class FunctionalDropout(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return F.dropout(self.linear(x), p=0.5, training=self.training)


class ReadsFlagByName(torch.nn.Module):
    def forward(self, x):
        return x + 1 if getattr(self, "training") else x - 1  # noqa: B009


def _reads_flag_of(module, x):
    return x * 3 if module.training else x


class FlagReadByHelper(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x):
        return _reads_flag_of(self.inner, self.inner(x))


def _plain():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))


def _deep_plain():
    blocks = [torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()) for _ in range(6)]
    return torch.nn.Sequential(*blocks)


def _batch_norm():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))


def _dropout():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))


def _deep_with_one_reader():
    blocks = [torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()) for _ in range(6)]
    return torch.nn.Sequential(*blocks, ReadsFlag())


PROGRAMS = [
    _plain,
    _deep_plain,
    ReadsFlag,
    FunctionalDropout,
    ReadsFlagByName,
    FlagReadByHelper,
    _batch_norm,
    _dropout,
    _deep_with_one_reader,
]


def _mode_changes(model):
    """Flip the flag of the whole model, then of each module on its own (last first)."""
    yield
    model.eval()
    yield
    model.train()
    yield
    for module in list(model.modules())[::-1]:
        module.eval()
        yield


def _matches_eager(compiled, model, x) -> None:
    torch.manual_seed(1)
    actual = compiled(x)
    torch.manual_seed(1)
    assert_close(actual, model(x))


def _torch_compiles(make) -> int:
    import torch._dynamo

    torch.manual_seed(0)
    model, x = make(), torch.randn(3, 4)
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm

    compiled = torch.compile(model, backend=count)
    for _ in _mode_changes(model):
        compiled(x)
    torch._dynamo.reset()
    return len(graphs)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", PROGRAMS, ids=[make.__name__.strip("_") for make in PROGRAMS])
def test_eval_recompiles_only_where_the_training_flag_was_read(make, backend):
    torch.manual_seed(0)
    model, x = make(), torch.randn(3, 4)
    compiled = ember.compile(model, backend=backend)
    for _ in _mode_changes(model):
        _matches_eager(compiled, model, x)
        _matches_eager(compiled, model, x)
    entries = len(ember.api.compiled_callable_of(compiled).entries)
    assert entries == _torch_compiles(make)


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_without_flag_reads_keeps_its_entry_across_eval(backend):
    model, x = _deep_plain(), torch.randn(3, 4)
    compiled = ember.compile(model, backend=backend)
    _matches_eager(compiled, model, x)
    model.eval()
    _matches_eager(compiled, model, x)
    model.train()
    _matches_eager(compiled, model, x)
    assert len(ember.api.compiled_callable_of(compiled).entries) == 1
