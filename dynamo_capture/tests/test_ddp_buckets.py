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
