"""A value several nodes read is stored once it reads more than a few large buffers.

A pre-norm transformer's residual stream, `x + a + b + c + ...`, is read by the next
layer norm and by the next addition. Recomputed by every reader, the last norm's three
passes over a row would each load every layer's output again (a sum that grows with
depth); stored every few layers, no kernel loads more than a few of them.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from graph_helpers import check

from inductor_codegen.codegen.cpp import convolution as cpp_table


def _pre_norm_stream(x, a, b, c, d):
    outputs = []
    for update in (a, b, c, d):
        x = x + update
        outputs.append(F.layer_norm(x, x.shape[-1:]))
    return outputs


def _loads(compiled) -> int:
    """How many loads of an input the generated C++ makes (each counted where written)."""
    return len(re.findall(r"\bin_ptr\d+\[", compiled.artifact("codegen")))


def test_residual_stream_is_stored_not_summed_again_by_each_norm(monkeypatch):
    inputs = [torch.randn(2, 16, 128) for _ in range(5)]
    stored = check(_pre_norm_stream, *inputs)
    monkeypatch.setattr(cpp_table, "READS_THRESHOLD", 10**6)
    recomputed = check(_pre_norm_stream, *inputs)
    # Recomputed, the fourth norm's passes load all five inputs each; stored, the
    # stream is written once and the later norms load it. Nothing but the norms' kernel
    # reads it: it is kept in a row array on the stack (codegen/cpp/row_buffers.py).
    assert _loads(stored) < _loads(recomputed)
    assert "_row[128];" in stored.artifact("codegen")
    buffers = [c.artifact("wrapper").count("torch.empty_strided") for c in (stored, recomputed)]
    assert buffers == [4, 4]  # the four norms


def test_shared_value_of_few_loads_is_still_inlined():
    """`x + a`, read by a norm and by the next addition, is recomputed, not stored."""

    def fn(x, a, b):
        y = x + a
        return F.layer_norm(y, y.shape[-1:]), y + b

    inputs = [torch.randn(4, 64) for _ in range(3)]
    compiled = check(fn, *inputs)
    wrapper = compiled.artifact("wrapper")
    assert wrapper.count("torch.empty_strided") == 2, wrapper  # the two outputs only
