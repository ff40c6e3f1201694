"""F.interpolate with a float scale_factor under dynamic shapes: the output sizes come
from the symbolic input sizes (recompute_scale_factor either way), one graph for every
size, as torch.compile captures it."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torchcheck import check_like_torch


def nearest_by_two(x):
    return F.interpolate(x, scale_factor=2.0, mode="nearest")


def bilinear_recomputed(x):
    return F.interpolate(x, scale_factor=1.5, mode="bilinear", recompute_scale_factor=True)


def bilinear_kept(x):
    return F.interpolate(x, scale_factor=1.5, mode="bilinear", recompute_scale_factor=False)


def bilinear_aligned_down(x):
    return F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=True)


def per_dimension_factors(x):
    return F.interpolate(x, scale_factor=(2.0, 0.5), mode="nearest", recompute_scale_factor=True)


def bicubic_recomputed(x):
    return F.interpolate(x, scale_factor=1.7, mode="bicubic", recompute_scale_factor=True)


def sizes_from_shape(x):
    return F.interpolate(x, size=(x.shape[2] * 2, x.shape[3] + 1), mode="nearest")


def linear_kept(x):
    return F.interpolate(x[:, :, 0], scale_factor=2.5, mode="linear", recompute_scale_factor=False)


def area_down(x):
    return F.interpolate(x, scale_factor=0.5, mode="area")


PROGRAMS = {
    fn.__name__: fn
    for fn in (
        nearest_by_two,
        bilinear_recomputed,
        bilinear_kept,
        bilinear_aligned_down,
        per_dimension_factors,
        bicubic_recomputed,
        sizes_from_shape,
        linear_kept,
        area_down,
    )
}


def _odd_sizes():
    sizes = itertools.cycle([7, 9, 13, 5])
    return lambda: (torch.randn(1, 2, (n := next(sizes)), n + 2),)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_interpolate_scale_factor_dynamic_counts_like_torch(name):
    check_like_torch(PROGRAMS[name], _odd_sizes(), calls=4, dynamic=True)


@pytest.mark.parametrize("name", ["bilinear_recomputed", "bilinear_kept", "sizes_from_shape"])
def test_interpolate_scale_factor_automatic_dynamic_counts_like_torch(name):
    check_like_torch(PROGRAMS[name], _odd_sizes(), calls=4)
