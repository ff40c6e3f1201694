"""Folded, prepacked convolutions of inference graphs (frozen_convolutions.py): values
against eager, the fold kept while its sources keep their bytes and made again when they
change, what is not folded, and the epilogues left in the kernel after the convolution.

Footguns, worst first:
  silent wrong result  a source tensor written between calls (any way, version counter
                       bumped or not) must be seen: the fold is checked by content
  silent wrong result  a graph run for several weight sets alternately (regions of one
                       shape) must use each set's own fold
  silent wrong result  a per-channel vector made by a random or impure op folded once
  slowdown             a fold on every call while nothing changed
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import trace

from inductor_codegen import compile_graph
from inductor_codegen import frozen_convolutions as frozen
from inductor_codegen.lowering.graph import USER_VISIBLE_OUTPUTS

pytestmark = pytest.mark.skipif(not frozen.available(), reason="this torch build has no oneDNN")

TOL = {"rtol": 1e-4, "atol": 1e-4}
FOLD = {"fold_convolutions": True}


def _inference_graph(fn, *args):
    with torch.no_grad():
        gm = trace(fn, *args)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    output.meta[USER_VISIBLE_OUTPUTS] = (0,)
    return gm


def _bn(channels: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.rand(channels, generator=g) - 0.5,
        torch.rand(channels, generator=g) + 0.5,
        torch.rand(channels, generator=g) + 0.5,
        torch.rand(channels, generator=g) - 0.5,
    )


def residual_block(x, w1, b1, m1, v1, g1, s1, w2, m2, v2, g2, s2):
    y = F.relu(F.batch_norm(F.conv2d(x, w1, b1, 1, 1), m1, v1, g1, s1, False, 0.0, 1e-5))
    z = F.batch_norm(F.conv2d(y, w2, None, 1, 1), m2, v2, g2, s2, False, 0.0, 1e-5)
    return F.max_pool2d(F.relu(z + y), 2)


def _block_args(seed: int = 0):
    torch.manual_seed(seed)
    return (
        torch.randn(4, 4, 10, 10),
        torch.randn(8, 4, 3, 3),
        torch.randn(8),
        *_bn(8, seed),
        torch.randn(8, 8, 3, 3),
        *_bn(8, seed + 1),
    )


def _counting(compiled):
    weights = compiled.folded_weights
    count = {"folds": 0}
    fold = weights._fold

    def counted(args):
        count["folds"] += 1
        return fold(args)

    weights._fold = counted
    return count


def test_residual_block_folds_and_keeps_epilogues_in_one_kernel():
    args = _block_args()
    compiled = compile_graph(_inference_graph(residual_block, *args), list(args), options=FOLD)
    torch.testing.assert_close(compiled(*args), residual_block(*args), **TOL)
    wrapper = compiled.artifact("wrapper")
    assert "folded_weight_1" in wrapper  # the second fold's prepacked weight
    assert "torch_convolution" not in wrapper  # both convolutions folded
    codegen = compiled.artifact("codegen")
    assert "rsqrt" not in codegen and "std::sqrt" not in codegen  # no batch norm left
    # input to channels-last, conv1's ReLU, then add + ReLU + max pool in one kernel
    assert compiled.kernel_count == 3


def test_alternating_weight_sets_keep_a_fold_each():
    args_a, args_b = _block_args(0), _block_args(1)
    x = args_a[0]
    args_b = (x, *args_b[1:])
    compiled = compile_graph(_inference_graph(residual_block, *args_a), list(args_a), options=FOLD)
    count = _counting(compiled)
    for _ in range(3):
        for args in (args_a, args_b):
            torch.testing.assert_close(compiled(*args), residual_block(*args), **TOL)
    assert count["folds"] == 2
    args_b[3].add_(0.25)  # a running mean of the second set
    for args in (args_a, args_b):
        torch.testing.assert_close(compiled(*args), residual_block(*args), **TOL)
    assert count["folds"] == 3


def test_every_write_between_calls_is_seen():
    args = _block_args()
    compiled = compile_graph(_inference_graph(residual_block, *args), list(args), options=FOLD)
    count = _counting(compiled)
    writes = [
        lambda: args[1].data.mul_(0.5),  # no version bump
        lambda: args[2].numpy().__setitem__(0, 3.0),  # nor here
        lambda: args[4].copy_(torch.full_like(args[4], 2.0)),
        lambda: args[7].untyped_storage().copy_(torch.randn(8, 8, 3, 3).untyped_storage()),
    ]
    for write in writes:
        before = compiled(*args)
        write()
        after = compiled(*args)
        torch.testing.assert_close(after, residual_block(*args), **TOL)
        assert not torch.equal(before, after)
    assert count["folds"] == 1 + len(writes)


def scaled_by_random(x, w):
    return F.conv2d(x, w) * torch.rand(4, 1, 1)


def test_random_vector_is_not_folded():
    x, w = torch.randn(1, 2, 20, 20), torch.randn(4, 2, 3, 3)
    gm = _inference_graph(scaled_by_random, x, w)
    new_gm, _, weights = frozen.fold_convolutions(gm, [x, w])
    assert all(fold.steps == () for fold in weights.folds)  # the conv alone, prepacked
    assert "rand" in new_gm.code


def conv_times_input(x, w, scale):
    return F.conv2d(x, w, padding=1) * scale


def test_per_channel_input_changing_every_call_refolds():
    """A per-channel graph input that is not a parameter is folded too, and refolded
    whenever its values change: correct, at a fold per call."""
    x, w = torch.randn(2, 3, 12, 12), torch.randn(5, 3, 3, 3)
    scale = torch.rand(5, 1, 1)
    compiled = compile_graph(
        _inference_graph(conv_times_input, x, w, scale), [x, w, scale], options=FOLD
    )
    count = _counting(compiled)
    for _ in range(3):
        scale = torch.rand(5, 1, 1)
        torch.testing.assert_close(compiled(x, w, scale), conv_times_input(x, w, scale), **TOL)
    assert count["folds"] == 3
    # the folds of freed inputs are dropped, not kept up to the cap
    assert len(compiled.folded_weights._states) <= 2


def test_option_off_by_default():
    args = _block_args()
    compiled = compile_graph(_inference_graph(residual_block, *args), list(args))
    assert not hasattr(compiled, "folded_weights")
    assert "torch_convolution" in compiled.artifact("wrapper")


def test_small_outputs_are_not_folded():
    """A convolution with few output positions per weight element (batch 1, 4x4) is not
    worth a per-call comparison of its weight: left to aten.convolution."""
    x, w = torch.randn(1, 8, 6, 6), torch.randn(16, 8, 3, 3)
    gm = _inference_graph(lambda x, w: F.conv2d(x, w), x, w)
    assert frozen.fold_convolutions(gm, [x, w]) is None
