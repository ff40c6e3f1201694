"""A residual `out += identity` at the start of a graph after a cut (a graph break, a
DDP bucket boundary) is compiled, and trains as eager does.

`out` is then an input of the graph, a non-leaf requiring grad, written in place:
capture's fake for it is a non-leaf as well (so the write traces), and aot_autograd
differentiates the write (the new value a graph output copied into the caller's
tensor with autograd recording it) instead of running the graph's ops eagerly.

| rank | footgun                                                   | before         | test |
|------|-----------------------------------------------------------|----------------|------|
| 1    | the gradient through the residual write lost or doubled   | ran eagerly    | test_residual_block_after_a_graph_break_trains_like_eager |
| 3    | every block's tail run eagerly (ResNet DDP: 1.1x eager)    | slowdown       | test_residual_block_cut_at_ddp_buckets_is_compiled |
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import ember
from aot_autograd import EagerCallWarning

BACKENDS = ("aot_eager", "inductor")

pytestmark = pytest.mark.usefixtures("fresh_ember")


class Block(nn.Module):
    """torchvision's BasicBlock, with a graph break before the residual add (`cut`) and a
    downsample path (computed after `bn2`, as torchvision does) where `downsample`."""

    def __init__(self, channels: int, cut: bool = True, downsample: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.cut = cut
        self.downsample = None
        if downsample:
            conv = nn.Conv2d(channels, channels, 1, bias=False)
            self.downsample = nn.Sequential(conv, nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        if self.cut:
            torch._dynamo.graph_break()
        out += identity
        return self.relu(out)


def _model(cut: bool = True, downsample: bool = False) -> nn.Module:
    torch.manual_seed(0)
    blocks = [Block(4, cut, downsample), Block(4, cut, downsample)]
    return nn.Sequential(nn.Conv2d(3, 4, 1), *blocks)


def _train(model: nn.Module, run, steps: int = 3) -> list:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    results = []
    for _ in range(steps):
        x = torch.randn(2, 3, 8, 8, generator=generator)
        loss = run(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
        optimizer.step()
    results.append([t.detach().clone() for t in model.state_dict().values()])
    return results


@pytest.mark.parametrize("backend", BACKENDS)
def test_residual_block_after_a_graph_break_trains_like_eager(backend):
    reference = _model()
    model = copy.deepcopy(reference)
    compiled = ember.compile(model, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EagerCallWarning)
        got = _train(model, compiled)
    torch.testing.assert_close(got, _train(reference, reference))


def test_residual_add_is_captured_after_the_graph_break():
    # capture's fake of `out` is a non-leaf, as the caller's tensor: the write traces
    report = ember.explain(_model())(torch.randn(2, 3, 8, 8))
    assert report.break_reasons and all(
        "leaf Variable" not in str(reason) for reason in report.break_reasons
    )
    residual_adds = [
        node
        for graph in report.graphs
        for node in graph.graph.nodes
        if node.op == "placeholder"
        and node.name.removeprefix("l_").startswith("out")  # `l_out_`: torch's names
        and any("add" in str(user.target) for user in node.users)
    ]
    assert residual_adds


def test_residual_write_keeps_eager_autograd_history():
    def tail(out, identity):
        out += identity
        return out.relu()

    compiled = ember.compile(tail, backend="aot_eager")
    leaf = torch.randn(2, 3, requires_grad=True)
    identity = torch.randn(2, 3, requires_grad=True)
    results = []
    for run in (tail, compiled):
        out = leaf * 2
        version = out._version
        y = run(out, identity)
        assert out.grad_fn is not None and out._version > version
        grads = torch.autograd.grad((y * 3).sum() + out.sum(), (leaf, identity))
        results.append((y.detach(), out.detach(), grads))
    torch.testing.assert_close(results[1], results[0])
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        compiled(torch.randn(2, 3, requires_grad=True), identity)


def test_residual_block_cut_at_ddp_buckets_is_compiled():
    import dynamo_capture
    from dynamo_capture.ddp_buckets import DDPBucketBackend
    from ember.backends import lookup_backend
    from ember.config import resolve_options

    reference = _model(cut=False, downsample=True)
    model = copy.deepcopy(reference)
    inner = lookup_backend("aot_eager", resolve_options(None, None, "aot_eager"))
    # the last bucket holds the last downsample's convolution and batch norm: a cut at
    # that convolution, after `bn2`, whose output `out` the next piece takes and writes
    downsample_bytes = (4 * 4 + 2 * 4) * 4
    backend = DDPBucketBackend(inner, 4 * 4 * 9 * 4, first_bucket_cap=downsample_bytes)
    compiled = dynamo_capture.optimize(model, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EagerCallWarning)
        got = _train(model, compiled)
    torch.testing.assert_close(got, _train(reference, reference))


def _mul_twice(x, y):
    x.mul_(y)
    x.mul_(y)  # (the backward reads the old values, saved apart)
    return x.sum(1)


def _through_views(x, y):
    x[1:3].mul_(y[:2])
    x.t().add_(y.t())
    return x.cos(), x


def _two_inputs(x, y):
    x.add_(y)
    y.mul_(x)
    return x + y


def _under_no_grad(x, y):
    z = x + y
    with torch.no_grad():
        x.mul_(2)
    return z * y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_mul_twice, _through_views, _two_inputs, _under_no_grad])
@pytest.mark.parametrize("dynamic", [False, True])
def test_writes_into_non_leaf_inputs_match_eager(fn, backend, dynamic):
    compiled = ember.compile(fn, backend=backend, dynamic=dynamic)
    for rows in (4, 6):  # (a second size: a new compile, or the symbolic graph again)
        results = []
        for run in (fn, compiled):
            generator = torch.Generator().manual_seed(rows)
            leaves = [torch.randn(rows, 3, generator=generator).requires_grad_() for _ in "xy"]
            x, y = (leaf * 1.5 for leaf in leaves)
            with warnings.catch_warnings():
                warnings.simplefilter("error", EagerCallWarning)
                outputs = run(x, y)
            flat = outputs if isinstance(outputs, tuple) else (outputs,)
            loss = sum((o * o).sum() for o in flat) + (x * y).sum()
            grads = torch.autograd.grad(loss, leaves)
            results.append(([o.detach() for o in flat], x.detach(), y.detach(), grads))
            results[-1] += ((x.grad_fn is None, y.grad_fn is None),)
        torch.testing.assert_close(results[1], results[0])
    leaves = [torch.randn(4, 3).requires_grad_() for _ in "xy"]
    report = ember.explain(fn)(*(leaf * 1 for leaf in leaves))
    assert report.graph_count == 1 and not report.break_reasons  # captured whole


def test_residual_write_from_the_warm_start_cache(warm):
    from ember import warm_cache

    def tail(out, identity, w):
        out += identity
        return (out.relu() * w).sum(0)

    for _ in range(2):  # compiled and stored, then loaded (no trace of the forward)
        ember.reset()
        compiled = ember.compile(tail, backend="inductor")
        results = []
        for run in (tail, compiled):
            generator = torch.Generator().manual_seed(0)
            shapes = [(4, 3), (4, 3), (3,)]
            leaves = [torch.randn(s, generator=generator).requires_grad_() for s in shapes]
            a, identity, w = leaves
            out = a * 2
            with warnings.catch_warnings():
                warnings.simplefilter("error", EagerCallWarning)
                y = run(out, identity, w)
            grads = torch.autograd.grad(y.sum() + (out * out).sum(), leaves)
            results.append((y.detach(), out.detach(), grads, out._version))
        torch.testing.assert_close(results[1], results[0])
    assert warm_cache.STATS["hits"] >= 1
