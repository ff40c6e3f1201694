"""Sums of one-hot rows: `sum_r where(r == k & rest, v, 0)` is the term it picks.

nll_loss's backward is a comparison with the class index (no scatter); log_softmax's
backward sums that gradient over the row. The sum has one nonzero term at most, so the
lowering reads it directly (`where(0 <= k < n & rest, v, 0)`) instead of looping over
the row: at [4096, 50257] that loop was a kernel of its own over 206M elements.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("prim_decomp")  # (packages of the pipeline: tests run alone without)
from graph_helpers import check  # noqa: E402


def _one_hot_sum(target, value, offset=0, n=37):
    index = torch.arange(offset, n + offset).view(1, n)
    keep = target != -100
    hit = (index == target.unsqueeze(1)) & keep.unsqueeze(1)
    return torch.where(hit, value.unsqueeze(1), torch.zeros(())).sum(1, keepdim=True)


@pytest.mark.parametrize("offset", [0, 3])
def test_one_hot_sum_picks_its_one_term(offset):
    target = torch.tensor([0, 5, 36, 37, -1, -100, 40, 2])  # out of range and ignored rows too
    value = torch.randn(8)
    compiled = check(lambda t, v: _one_hot_sum(t, v, offset), target, value)
    assert "reduction loop" not in compiled.artifact("schedule")


def test_a_term_that_varies_along_the_row_is_still_summed():
    def fn(target, x):
        index = torch.arange(x.shape[1]).view(1, -1)
        return torch.where(index == target.unsqueeze(1), x, torch.zeros(())).sum(1)

    compiled = check(fn, torch.tensor([1, 4, 0]), torch.randn(3, 9))
    assert "reduction loop" in compiled.artifact("schedule")


def test_two_hits_in_a_row_are_still_summed():
    def fn(target, v):
        index = torch.arange(9).view(1, -1)
        hit = (index == target.unsqueeze(1)) | (index == 0)
        return torch.where(hit, v.unsqueeze(1), torch.zeros(())).sum(1)

    check(fn, torch.tensor([1, 4, 0]), torch.randn(3))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_backward_sums_no_row_for_its_one_hot(reduction):
    def step(logits, target):
        loss = F.cross_entropy(logits, target, reduction=reduction)
        (grad,) = torch.autograd.grad(loss, [logits])
        return loss, grad

    logits = torch.randn(6, 301, requires_grad=True)
    target = torch.tensor([3, 300, -100, 0, 17, 5])
    compiled = check(lambda x, t: step(x, t), logits, target, rtol=1e-5, atol=1e-6)
    # the forward's max and sum of exponentials loop over a row; the backward none
    assert compiled.artifact("schedule").count("reduction loop [301]") == 2
