"""Checkpoint regions (node meta CHECKPOINT_REGION, as capture tags
`torch.utils.checkpoint.checkpoint`): both partitioners recompute a region's values in
the backward from its inputs, saving fewer values; random ops' results stay saved, so
the backward reads the forward's dropout mask; values and gradients are eager's."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import fx

from aot_autograd import aot_graph, default_partition, min_cut_rematerialization_partition
from aot_autograd.checkpoint_regions import CHECKPOINT_POLICY, CHECKPOINT_REGION

PARTITIONS = {"default": default_partition, "min_cut": min_cut_rematerialization_partition}


class _RegionTracer(fx.Tracer):
    """Tags the nodes made inside `region(k)` with region k, as capture does."""

    current = None

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        if self.current is not None and node.op.startswith("call"):
            node.meta[CHECKPOINT_REGION] = self.current
        return node


_TRACER = _RegionTracer()


@contextlib.contextmanager
def region(k):
    _TRACER.current = k
    try:
        yield
    finally:
        _TRACER.current = None


def _graph(fn, tagged):
    """fn as a graph module, its regions tagged or not."""
    tracer = _TRACER if tagged else fx.Tracer()
    root = torch.nn.Module()
    return fx.GraphModule(root, tracer.trace(fn))


def _layers(x, w1, w2, w3, w4):
    for k, w in enumerate((w1, w2, w3, w4)):
        with region(k):
            x = torch.tanh(x @ w).sin() @ w
    return x


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(8, 16, requires_grad=True)
    ws = [(torch.randn(16, 16) / 4).requires_grad_() for _ in range(4)]
    return [x, *ws]


def _compile(fn, inputs, partition, tagged):
    """fn compiled (the eager compiler), and the saved values of its forward graph."""
    saved = []

    def forward_compiler(gm, example_inputs):
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        saved.append(len(outputs) - 1)  # one forward output; the rest is saved
        return gm

    compiled = aot_graph(
        _graph(fn, tagged),
        inputs,
        fw_compiler=forward_compiler,
        bw_compiler=lambda gm, _: gm,
        partition_fn=partition,
    )
    return compiled, saved


def _check_against_eager(fn, compiled, inputs, seed=None):
    results = []
    for run in (fn, compiled):
        if seed is not None:
            torch.manual_seed(seed)
        out = run(*inputs)
        out = out[0] if isinstance(out, (tuple, list)) else out
        grads = torch.autograd.grad(out.sum(), [t for t in inputs if t.requires_grad])
        results.append((out, grads))
    torch.testing.assert_close(results[1], results[0])


@pytest.mark.parametrize("partition", PARTITIONS.values(), ids=PARTITIONS.keys())
def test_checkpointed_layers_save_only_region_inputs(partition):
    inputs = _inputs()
    plain, saved_plain = _compile(_layers, inputs, partition, tagged=False)
    tagged, saved_tagged = _compile(_layers, inputs, partition, tagged=True)
    _check_against_eager(_layers, tagged, inputs)
    _check_against_eager(_layers, plain, inputs)
    # each layer's input and weight: x, four weights, three layer outputs
    assert saved_tagged == [8]
    assert saved_tagged[0] < saved_plain[0]


def _dropout_layers(x, w1, w2, w3, w4):
    for k, w in enumerate((w1, w2, w3, w4)):
        with region(k):
            x = torch.nn.functional.dropout(torch.tanh(x @ w), 0.5, training=True).sin()
    return x


@pytest.mark.parametrize("partition", PARTITIONS.values(), ids=PARTITIONS.keys())
def test_checkpointed_dropout_keeps_the_forward_mask(partition):
    inputs = _inputs()
    tagged, saved = _compile(_dropout_layers, inputs, partition, tagged=True)
    _check_against_eager(_dropout_layers, tagged, inputs, seed=1)
    _check_against_eager(_dropout_layers, tagged, inputs, seed=2)
    # the region inputs and weights, and each layer's mask
    assert saved == [12]


def _region_then_write(w, b):
    with region(0):
        h = torch.tanh(w + b).exp()
    b.add_(1)  # an input written after the region read it
    return h * b


@pytest.mark.parametrize("partition", PARTITIONS.values(), ids=PARTITIONS.keys())
def test_checkpoint_region_reading_an_input_written_later_matches_eager(partition):
    torch.manual_seed(0)
    w = torch.randn(4, 4, requires_grad=True)
    b = torch.randn(4, 4)
    compiled, _ = _compile(_region_then_write, [w, b.clone()], partition, tagged=True)
    eager_b, compiled_b = b.clone(), b.clone()
    out = _region_then_write(w, eager_b)
    (grad,) = torch.autograd.grad(out.sum(), [w])
    got = compiled(w, compiled_b)
    (got_grad,) = torch.autograd.grad(got.sum(), [w])
    torch.testing.assert_close(got, out)
    torch.testing.assert_close(got_grad, grad)
    torch.testing.assert_close(compiled_b, eager_b)


def _policy_graph(policy):
    """`_layers` traced with its regions tagged with `policy`."""
    gm = _graph(_layers, tagged=True)
    for node in gm.graph.nodes:
        if node.meta.get(CHECKPOINT_REGION) is not None:
            node.meta[CHECKPOINT_POLICY] = policy
    return gm


def _save_matmuls(ctx, op, *args, **kwargs):
    return op is torch.ops.aten.mm.default


def _failing_policy(ctx, op, *args, **kwargs):
    raise RuntimeError("a policy reading tensor values")


@pytest.mark.parametrize("partition", PARTITIONS.values(), ids=PARTITIONS.keys())
@pytest.mark.parametrize(
    ("policy", "expected"),
    [(_save_matmuls, 12), (_failing_policy, None)],
    ids=["save_matmuls", "failing_policy_saves"],
)
def test_selective_checkpoint_policy_decides_what_is_saved(partition, policy, expected):
    inputs = _inputs()
    saved = []

    def forward_compiler(gm, example_inputs):
        saved.append(len(next(n for n in gm.graph.nodes if n.op == "output").args[0]) - 1)
        return gm

    compiled = aot_graph(
        _policy_graph(policy),
        inputs,
        fw_compiler=forward_compiler,
        bw_compiler=lambda gm, _: gm,
        partition_fn=partition,
    )
    _check_against_eager(_layers, compiled, inputs)
    # the first matmul of each layer saved besides the inputs; a failing policy saves
    # every op's result
    if expected is not None:
        assert saved == [expected]
    else:
        assert saved[0] > 12
