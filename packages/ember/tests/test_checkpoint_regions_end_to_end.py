"""torch.utils.checkpoint.checkpoint(fn, use_reentrant=False) in compiled code: the
backward recomputes each checkpointed region from its inputs, so the compiled function
holds fewer saved tensors than without checkpoint (counted by saved-tensor hooks);
dropout inside a region gives the backward the forward's mask; a selective checkpoint's
policy decides per op what is saved; values and gradients are eager's."""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

import ember

BACKENDS = ["aot_eager", "inductor"]


def _weights(n=4):
    torch.manual_seed(0)
    return [(torch.randn(16, 16) / 4).requires_grad_() for _ in range(n)]


def _layer(x, w):
    return torch.tanh(x @ w).sin() @ w


def _dropout_layer(x, w):
    return torch.nn.functional.dropout(torch.tanh(x @ w), 0.5, training=True).sin()


def _model(layer, weights, checkpointed):
    def fn(x):
        for w in weights:
            x = checkpoint(layer, x, w, use_reentrant=False) if checkpointed else layer(x, w)
        return x

    return fn


def _run_counting_saved(fn, x, seed):
    """fn(x), its gradients, and how many tensors autograd saved for its backward."""
    count = [0]

    def pack(t):
        count[0] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.manual_seed(seed)
        out = fn(x)
    return out, count[0]


def _compare(layer, backend, checkpointed, seed=0):
    """The compiled model against eager (values, gradients); its saved tensor count."""
    weights = _weights()
    fn = _model(layer, weights, checkpointed)
    compiled = ember.compile(fn, backend=backend)
    x = torch.randn(8, 16, requires_grad=True)
    compiled(x)  # compiles: the count is of a call that runs compiled code only
    tolerance = {"atol": 1e-4, "rtol": 1e-4}
    results = []
    for run in (fn, compiled):
        out, saved = _run_counting_saved(run, x, seed)
        grads = torch.autograd.grad(out.sum(), [x, *weights])
        results.append((out, grads, saved))
    torch.testing.assert_close(results[1][:2], results[0][:2], **tolerance)
    return results[1][2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpointed_layers_hold_fewer_saved_tensors(backend):
    plain = _compare(_layer, backend, checkpointed=False)
    checkpointed = _compare(_layer, backend, checkpointed=True)
    # each layer's input and weight, as eager's checkpoint saves
    assert checkpointed == 8
    assert checkpointed < plain


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", [1, 2])
def test_checkpointed_dropout_backward_uses_the_forward_mask(backend, seed):
    saved = _compare(_dropout_layer, backend, checkpointed=True, seed=seed)
    assert saved <= 12  # inputs, weights, and each layer's mask


def test_warm_start_tells_checkpointed_graphs_apart(warm):
    """The captured graphs of a model with and without checkpoint have the same code:
    the warm-start key holds the regions, so the second is not the first's entry."""
    plain = _compare(_layer, "inductor", checkpointed=False)
    ember.reset()
    checkpointed = _compare(_layer, "inductor", checkpointed=True)
    assert checkpointed < plain


def _save_matmuls(ctx, op, *args, **kwargs):
    policy = torch.utils.checkpoint.CheckpointPolicy
    return policy.MUST_SAVE if op is torch.ops.aten.mm.default else policy.PREFER_RECOMPUTE


SELECTIVE = {
    "policy_function": functools.partial(create_selective_checkpoint_contexts, _save_matmuls),
    "op_list": functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("context_fn", SELECTIVE.values(), ids=SELECTIVE.keys())
def test_selective_checkpoint_saves_what_its_policy_says(backend, context_fn):
    def layer(x, w):
        return checkpoint(_layer, x, w, use_reentrant=False, context_fn=context_fn)

    saved = _compare(layer, backend, checkpointed=False)  # (layer checkpoints itself)
    # each layer's input and weight, and its first matmul's result (the second's is
    # the next layer's input)
    assert saved == 12
