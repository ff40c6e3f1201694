"""Operations on stdlib constants that capture runs at capture time: enum.Flag and
IntFlag membership, iteration and length (the enum module's own methods, pure on
members), indexing bytes. Each program is one graph, as torch.compile's."""

from __future__ import annotations

import enum

import pytest
import torch
from torchcheck import check_like_torch


class Access(enum.Flag):
    READ = 1
    WRITE = 2
    RUN = 4


class Bits(enum.IntFlag):
    LOW = 1
    HIGH = 2


def _one():
    return (torch.randn(3, 4),)


def flag_membership(x):
    granted = Access.READ | Access.WRITE
    return x + (Access.WRITE in granted) + (Access.RUN not in granted)


def flag_iteration_and_length(x):
    granted = Access.READ | Access.RUN
    for member in granted:
        x = x + member.value
    return x, len(granted)


def flag_membership_picks_a_branch(x):
    granted = Access.READ
    if Access.WRITE in granted:
        return x * 2
    return x - 1


def int_flag_arithmetic_and_membership(x):
    both = Bits.LOW | Bits.HIGH
    return x * (both & 2) + int(both) + (Bits.LOW in both), both == 3


def bytes_indexing(x):
    data = b"abc"
    return x + data[0] + data[-1] + len(data[1:]), data[:2]


PROGRAMS = [
    flag_membership,
    flag_iteration_and_length,
    flag_membership_picks_a_branch,
    int_flag_arithmetic_and_membership,
    bytes_indexing,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_stdlib_constant_operation_folded_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1
