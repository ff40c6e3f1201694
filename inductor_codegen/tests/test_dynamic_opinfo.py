"""OpInfo forward samples (float32, CPU) through graphs with every dim of size >= 2 symbolic.

All samples of one op go into one graph, traced on guards fakes whose sizes are
size symbols (equal sizes share one, as duck sizing does), compiled once and
compared with eager. A few representative ops run by default;
EMBER_FULL_OPINFO=1 runs the whole default subset of test_opinfo.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree
from dynamic_graphs import trace_symbolic
from opinfo_samples import one_graph
from test_opinfo import FULL, _cases, _sample_fns

from inductor_codegen import DynamicShapeError, compile_graph

QUICK = {"sum", "softmax", "nn.functional.layer_norm", "cat", "split", "var_mean"}


def _symbolic_cases():
    for case in _cases():
        if FULL or case.values[0].name in QUICK:
            yield case


def _leaves(values):
    return [torch.as_tensor(v) for v in pytree.tree_leaves([tuple(v) for v in values])]


@pytest.mark.parametrize("info", list(_symbolic_cases()))
def test_opinfo_forward_with_symbolic_sizes(info):
    cases = []
    for fn, tensors in _sample_fns(info):
        try:
            cases.append((fn, tensors, fn(*tensors)))
        except Exception:  # noqa: BLE001 - a sample eager itself rejects
            continue
    if not cases:
        pytest.skip("no sample runs eagerly")
    all_samples, flat = one_graph(cases)
    dynamic = {i: [d for d, s in enumerate(t.shape) if s >= 2] for i, t in enumerate(flat)}
    try:
        gm, examples = trace_symbolic(all_samples, *flat, dynamic=dynamic)
    except Exception as error:  # noqa: BLE001 - the test tracer's limits, not the codegen's
        pytest.skip(f"cannot be traced on symbolic fakes: {type(error).__name__}")
    try:
        compiled = compile_graph(gm, examples)
    except DynamicShapeError as error:
        pytest.skip(f"needs static sizes: {error}")
    expected = [e if isinstance(e, torch.Tensor) else tuple(e) for _, _, e in cases]
    got = compiled(*flat)
    for a, b in zip(_leaves([got]), _leaves([tuple(expected)])):
        torch.testing.assert_close(a, b, equal_nan=True, rtol=1e-4, atol=1e-5)
