"""What the OpInfo tests share: an op's samples as functions of flat tensors, all of
them as one graph, and one compile-and-compare step for make_fx graphs."""

from __future__ import annotations

import pytest
import torch
from graph_helpers import flat_tensor_inputs, trace

from inductor_codegen import compile_graph

TOLERANCE = {"equal_nan": True, "rtol": 1e-4, "atol": 1e-5}


def tolerance(dtype: torch.dtype = torch.float32) -> dict:
    """assert_close's keywords for outputs computed in `dtype`: tight for float32, torch's
    defaults for the dtype otherwise."""
    return TOLERANCE if dtype == torch.float32 else {"equal_nan": True}


def sample_fns(info, device: str, limit: int | None, dtype: torch.dtype = torch.float32) -> list:
    """[(fn, tensors)]: the first `limit` samples of `dtype` (all with None), each
    `fn(*tensors)` = the op."""
    fns = []
    for sample in list(info.sample_inputs(device, dtype))[:limit]:
        tensors, rebuild = flat_tensor_inputs(sample.input, sample.args, sample.kwargs)

        def fn(*ts, _rebuild=rebuild):
            inp, args, kwargs = _rebuild(*ts)
            return info.op(inp, *args, **kwargs)

        fns.append((fn, [t.clone() for t in tensors]))
    return fns


def one_graph(cases: list):
    """(all_samples, flat): the samples of `cases` ([(fn, tensors, expected)]) as one
    function of all their tensors, and those tensors."""
    counts = [len(tensors) for _, tensors, _ in cases]

    def all_samples(*flat):
        outputs, start = [], 0
        for (fn, _, _), n in zip(cases, counts):
            outputs.append(fn(*flat[start : start + n]))
            start += n
        return tuple(outputs)

    return all_samples, [t for _, tensors, _ in cases for t in tensors]


def close(actual, expected, dtype: torch.dtype = torch.float32) -> bool:
    try:
        torch.testing.assert_close(actual, expected, **tolerance(dtype))
    except (AssertionError, TypeError, ValueError):
        return False
    return True


def compile_and_check(info, device: str, limit: int, options=None, dtype=torch.float32):
    """Every sample make_fx traces, compiled as one graph and compared with eager; the
    compiled graph. Skips when no sample traces or the traced graph itself is wrong."""
    cases = []
    for fn, tensors in sample_fns(info, device, limit, dtype):
        try:
            expected = fn(*tensors)
            trace(fn, *tensors)
        except Exception:  # the reference front end cannot trace this sample
            continue
        cases.append((fn, tensors, expected))
    if not cases:
        pytest.skip("no sample could be traced by make_fx")
    all_samples, flat = one_graph(cases)
    gm = trace(all_samples, *flat)
    if not close(list(gm(*flat)), [expected for _, _, expected in cases], dtype):
        pytest.skip("the make_fx graph itself differs from eager (a front-end problem)")
    compiled = compile_graph(gm, flat, options=options)
    for (_, _, expected), got in zip(cases, compiled(*flat)):
        torch.testing.assert_close(got, expected, **tolerance(dtype))
    return compiled
