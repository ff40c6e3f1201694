"""A value read by extern calls is stored once, however many calls or arguments read it."""

from __future__ import annotations

import re

import torch
from graph_helpers import check


def _three_projections(x, wq, wk, wv):
    h = x * 2 + 1  # cheap: inline until an extern call needs it in memory
    return h @ wq, h @ wk, h @ wv


def _same_value_three_times(x):
    h = x * 3
    return torch.addmm(h, h, h)


def _extern_buffer_args(wrapper: str) -> list[list[str]]:
    """The buffer arguments of each extern (ATen) call in a generated wrapper."""
    calls = re.findall(r"= (?:aten|torch)\w*\(([^)]*)\)", wrapper)
    return [
        [arg.strip() for arg in call.split(",") if arg.strip().startswith("buf")] for call in calls
    ]


def test_one_buffer_serves_every_extern_call_reading_a_value():
    x = torch.randn(8, 16)
    weights = [torch.randn(16, 16) for _ in range(3)]
    compiled = check(_three_projections, x, *weights)
    wrapper = open(compiled.wrapper_path).read()
    stored = {arg for args in _extern_buffer_args(wrapper) for arg in args}
    assert len(stored) == 1, wrapper  # all three matmuls read the one buffer


def test_one_buffer_serves_an_extern_call_taking_a_value_thrice():
    compiled = check(_same_value_three_times, torch.randn(6, 6))
    wrapper = open(compiled.wrapper_path).read()
    (args,) = [args for args in _extern_buffer_args(wrapper) if args]
    assert len(args) == 3 and len(set(args)) == 1, wrapper
