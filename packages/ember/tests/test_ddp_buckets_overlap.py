"""Graphs cut at DDP's buckets with an AOT backend: each piece is an autograd node, so
the last piece's gradients are ready (and DDP's all-reduce of them can start) while
the backward of the earlier pieces still runs."""

from __future__ import annotations

import pytest
import torch

import dynamo_capture
from dynamo_capture.ddp_buckets import DDPBucketBackend
from ember.backends import lookup_backend
from ember.config import resolve_options


def make_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(16, 16), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


LAYER_BYTES = (16 * 16 + 16) * 4


@pytest.mark.parametrize("cap, last_before_first", [(LAYER_BYTES, True), (10**9, False)])
def test_last_bucket_gradients_are_ready_before_the_first_layers_backward(cap, last_before_first):
    model = make_model()
    backend = DDPBucketBackend(
        lookup_backend("aot_eager", resolve_options(None, None, "aot_eager")), cap
    )
    compiled = dynamo_capture.optimize(model, backend=backend)
    seen = []
    last, first = model[-2].weight, model[0].weight
    last.register_post_accumulate_grad_hook(lambda p: seen.append(first.grad is None))
    x = torch.randn(3, 16)
    compiled(x).sum().backward()
    assert seen == [last_before_first]  # uncut: one autograd node, all gradients at once
    reference = make_model()
    reference(x).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
