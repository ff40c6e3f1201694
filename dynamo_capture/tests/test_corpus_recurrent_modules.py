"""nn.RNN, nn.GRU and nn.LSTM in compiled code: torch.compile does not trace them (its
`allow_rnn` option is off), so ember breaks where the compiled frame reads one, as
torch.compile does: the frame is compiled up to the last statement before it whose
graph has more than one call and the rest runs eagerly (or the whole frame does); a
module read by an inlined function breaks at that function's call. Counts are
torch.compile's, values and gradients eager's.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend


def _seq(batch_first=True):
    shape = (2, 3, 4) if batch_first else (3, 2, 4)
    return lambda: (torch.randn(*shape, requires_grad=True),)


class Encoder(nn.Module):
    """Linear work before the recurrent module: the graph before it is compiled."""

    def __init__(self, rnn):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.rnn = rnn
        self.head = nn.Linear(rnn.hidden_size * (2 if rnn.bidirectional else 1), 2)

    def forward(self, x, *state):
        x = self.proj(x).relu()
        x = x * 2
        out, hidden = self.rnn(x, *state)
        return self.head(out).sum(-1), hidden


class Bare(nn.Module):
    """The recurrent module first: nothing before it, the frame runs eagerly."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *state):
        out, hidden = self.rnn(x, *state)
        return out.relu() + 1, hidden


def _through_helper(rnn):
    def helper(y):
        out, _ = rnn(y)
        return out * 2

    def fn(x):
        y = x.sin().cos()
        return helper(y).exp() + 1

    return fn


def _one_call_before(rnn):
    def fn(x):
        y = x.sin()
        out, _ = rnn(y)
        return out.cos()

    return fn


class RangeLoop(nn.Module):
    """The module read in a loop over a range: compiled up to the statement before it."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.rnn = nn.GRU(4, 4, batch_first=True)

    def forward(self, x):
        x = self.proj(x).relu() * 2
        for _ in range(2):
            x, _ = self.rnn(x)
        return x.sum()


class ModuleListLoop(nn.Module):
    """The module met iterating a ModuleList: the whole frame runs eagerly."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.LSTM(4, 4, batch_first=True)])

    def forward(self, x):
        x = self.proj(x).relu() * 2
        for layer in self.layers:
            x = layer(x)
            if isinstance(x, tuple):
                x = x[0]
        return x.sum()


class IndexedModuleList(nn.Module):
    """The module read by index from a ModuleList: compiled up to that statement."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.layers = nn.ModuleList([nn.RNN(4, 4, batch_first=True)])

    def forward(self, x):
        x = self.proj(x).relu() * 2
        x, _ = self.layers[0](x)
        return x.sum()


class SequentialHolding(nn.Module):
    """The module inside an nn.Sequential: the break is the Sequential's call."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.LSTM(4, 4, batch_first=True))

    def forward(self, x):
        y = x.sin().cos()
        out, _ = self.body(y)
        return out.exp()


@pytest.mark.parametrize(
    "cls",
    [RangeLoop, ModuleListLoop, IndexedModuleList, SequentialHolding],
    ids=lambda c: c.__name__,
)
def test_recurrent_module_in_containers_and_loops_breaks_like_torch(cls):
    torch.manual_seed(0)
    module = cls()
    check_like_torch(module, _seq())


def _modules():
    torch.manual_seed(0)
    return {
        "gru_batch_first": (nn.GRU(4, 5, batch_first=True), _seq()),
        "lstm_two_layers_bidirectional": (
            nn.LSTM(4, 5, num_layers=2, bidirectional=True),
            _seq(batch_first=False),
        ),
        "rnn_relu_bidirectional": (
            nn.RNN(4, 5, nonlinearity="relu", bidirectional=True, batch_first=True),
            _seq(),
        ),
        "gru_two_layers_with_h0": (
            nn.GRU(4, 5, num_layers=2),
            lambda: (torch.randn(3, 2, 4, requires_grad=True), torch.randn(2, 2, 5)),
        ),
        "lstm_with_h0_c0": (
            nn.LSTM(4, 5, batch_first=True),
            lambda: (
                torch.randn(2, 3, 4, requires_grad=True),
                (torch.randn(1, 2, 5), torch.randn(1, 2, 5)),
            ),
        ),
    }


MODULES = _modules()


def _check_gradients(module, make_args):
    eager, target = copy.deepcopy(module), copy.deepcopy(module)
    compiled = dynamo_capture.optimize(target, backend=CountingBackend())
    args = make_args()
    results = []
    for model, run in ((eager, eager), (target, compiled)):
        inputs = [a.detach().requires_grad_(a.requires_grad) if torch.is_tensor(a) else a
                  for a in args]  # fmt: skip
        out, _ = run(*inputs)
        out.sum().backward()
        results.append((inputs[0].grad, [p.grad for p in model.parameters()]))
    torch.testing.assert_close(results[1], results[0])


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("wrapper", [Encoder, Bare])
def test_recurrent_module_breaks_like_torch(name, wrapper):
    rnn, make_args = MODULES[name]
    module = wrapper(copy.deepcopy(rnn))
    check_like_torch(module, make_args)
    _check_gradients(module, make_args)


@pytest.mark.parametrize("name", ["gru_batch_first", "rnn_relu_bidirectional"])
@pytest.mark.parametrize("make_fn", [_through_helper, _one_call_before])
def test_recurrent_module_read_in_functions_breaks_like_torch(name, make_fn):
    rnn, make_args = MODULES[name]
    check_like_torch(make_fn(copy.deepcopy(rnn)), make_args)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_recurrent_module_compiled_itself_runs_eagerly(name):
    rnn, make_args = MODULES[name]
    counter = check_like_torch(copy.deepcopy(rnn), make_args)
    assert counter.frame_count == 0


def test_recurrent_module_with_fullgraph_is_an_error():
    compiled = dynamo_capture.optimize(nn.GRU(4, 4), backend=CountingBackend(), fullgraph=True)
    with pytest.raises(dynamo_capture.Unsupported, match="GRU modules are not traced"):
        compiled(torch.randn(3, 2, 4))
