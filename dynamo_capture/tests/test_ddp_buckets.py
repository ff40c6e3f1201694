"""Graphs cut at DDP's gradient buckets: each piece compiled on its own, chained."""

from __future__ import annotations

import torch

import dynamo_capture
from dynamo_capture.ddp_buckets import DDPBucketBackend


def make_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(16, 16), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def layer_bytes():
    return (16 * 16 + 16) * 4


def test_graph_cut_at_buckets_trains_as_eager(backend):
    model = make_model()
    reference = make_model()
    bucketed = DDPBucketBackend(backend, bucket_bytes_cap=2 * layer_bytes())
    compiled = dynamo_capture.optimize(model, backend=bucketed)
    for _ in range(2):
        x = torch.randn(3, 16, requires_grad=True)
        y = x.detach().clone().requires_grad_()
        compiled(x).pow(2).sum().backward()
        reference(y).pow(2).sum().backward()
        torch.testing.assert_close(x.grad, y.grad)
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
    assert len(bucketed.pieces) == 2  # 4 layers, 2 per bucket
    assert len(backend.graphs) == 2


def test_graph_within_one_bucket_is_not_cut(backend):
    model = make_model()
    bucketed = DDPBucketBackend(backend, bucket_bytes_cap=25 * 1024 * 1024)
    compiled = dynamo_capture.optimize(model, backend=bucketed)
    x = torch.randn(3, 16)
    torch.testing.assert_close(compiled(x), model(x))
    assert bucketed.pieces == [] and len(backend.graphs) == 1


def test_first_bucket_filled_from_the_end_holds_the_first_cap(backend):
    # DDP all-reduces its first bucket (the last parameters) at a smaller size, so the
    # first communication starts early: the last layer alone is the first piece here.
    model = make_model()
    reference = make_model()
    bucketed = DDPBucketBackend(
        backend, bucket_bytes_cap=2 * layer_bytes(), first_bucket_cap=layer_bytes()
    )
    compiled = dynamo_capture.optimize(model, backend=bucketed)
    x = torch.randn(3, 16)
    compiled(x).sum().backward()
    reference(x).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    # pieces from the start: layers 0-1 | layer 2 | layer 3 (the first bucket DDP fills)
    assert len(bucketed.pieces) == 3
    last = bucketed.pieces[-1]
    shapes = [tuple(n.meta["val"].shape) for n in last.graph.find_nodes(op="placeholder")]
    assert shapes.count((16, 16)) == 1 and shapes.count((16,)) == 1  # one weight, one bias


def test_first_bucket_cap_follows_ddp():
    from dynamo_capture.ddp_buckets import ddp_first_bucket_cap

    class Config:
        first_bucket_bytes_cap = 1234

    class Recorded:
        _bucket_config = Config()
        bucket_bytes_cap = 25 * 1024 * 1024

    class Default:
        bucket_bytes_cap_default = True
        bucket_bytes_cap = 25 * 1024 * 1024

    class UserSet:
        bucket_bytes_cap_default = False
        bucket_bytes_cap = 4 * 1024 * 1024

    assert ddp_first_bucket_cap(Recorded()) == 1234
    assert ddp_first_bucket_cap(Default()) == torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
    assert ddp_first_bucket_cap(UserSet()) == 4 * 1024 * 1024
