"""A corpus of generated programs: each break kind at each place in a frame, against eager
(results, printed text, side effects on outside lists) and compiled once per part."""

from __future__ import annotations

import linecache

import pytest
import torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend

LOG: list = []


@dynamo_capture.disable
def disabled_fn(t):
    LOG.append(t.shape[0])


def helper_break(t):
    u = t * 2
    print("helper", u.shape)
    return u + 1


BREAKS = {
    "print": 'print("b", {v}.shape)',
    "item": "s = {v}.sum().item()\n    {v} = {v} * s",
    "tolist": "n = len({v}.tolist())\n    {v} = {v} + n",
    "float": "LOG.append(float({v}.sum()))",
    "data_if": "if {v}.sum() > 0:\n        {v} = {v} + 1\n    else:\n        {v} = {v} - 1",
    "callee": "{v} = helper_break({v})",
    "disabled": "disabled_fn({v})",
}

SHAPES = {
    "after_ops": "def fn(x, out):\n    a = x.sin() + 1\n    {b_a}\n    return a.cos() * 2\n",
    "at_start": "def fn(x, out):\n    {b_x}\n    y = x.exp()\n    return y - 1\n",
    "two_breaks": (
        "def fn(x, out):\n    a = x + 1\n    {b_a}\n    b = a * 3\n    {b_b}\n    return b.tanh()\n"
    ),
    "side_effects": (
        "def fn(x, out):\n    out.append(x + 1)\n    a = x * 2\n    {b_a}\n"
        "    out.append(a - 1)\n    return len(out), a\n"
    ),
    "at_end": "def fn(x, out):\n    a = x.relu() + 2\n    {b_a}\n",
}


def _program(shape: str, kind: str):
    template = BREAKS[kind]
    source = SHAPES[shape].format(
        b_a=template.format(v="a"), b_b=template.format(v="b"), b_x=template.format(v="x")
    )
    if shape == "at_end":
        source += "    return a\n"
    filename = f"<break-corpus-{shape}-{kind}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope = {"LOG": LOG, "disabled_fn": disabled_fn, "helper_break": helper_break}
    exec(compile(source, filename, "exec"), scope)  # noqa: S102
    return scope["fn"]


CASES = [(shape, kind) for shape in SHAPES for kind in BREAKS]


@pytest.mark.parametrize("shape, kind", CASES, ids=[f"{s}-{k}" for s, k in CASES])
def test_generated_break_program(shape, kind, capsys):
    fn = _program(shape, kind)
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend)
    x = torch.randn(4)
    LOG.clear()
    eager_out: list = []
    expected = fn(x.clone(), eager_out)
    eager_log, eager_text = list(LOG), capsys.readouterr().out
    LOG.clear()
    got_out: list = []
    got = compiled(x.clone(), got_out)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_out, eager_out)
    assert LOG == eager_log and capsys.readouterr().out == eager_text
    assert compiled.graph_breaks, "every program has a break"
    assert backend.graphs, "code around the break is compiled"
    graphs, breaks = len(backend.graphs), len(compiled.graph_breaks)
    compiled(x.clone(), [])
    assert (len(backend.graphs), len(compiled.graph_breaks)) == (graphs, breaks)
