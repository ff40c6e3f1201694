"""`dynamo_capture.nonstrict_trace` and `disallow_in_graph` against torch's own markers.

torch's `torch._dynamo.nonstrict_trace` and `disallow_in_graph` register the function
in private registries of torch's that capture does not read (benchmarks/RESULTS.md:
those programs keep their own graph counts in test_corpus_decorators_and_globals.py).
Each program here is built twice, marked once with ember's marker and once with
torch's: ember's graphs and ops equal torch.compile's, its values eager's.
"""

from __future__ import annotations

import pytest
import torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same

EMBER = {"nonstrict": dynamo_capture.nonstrict_trace}


def _torch_markers():
    import torch._dynamo

    return {"nonstrict": torch._dynamo.nonstrict_trace}


def x4():
    return (torch.linspace(-1, 1, 4),)


PROGRAMS = {}


def program(factory):
    PROGRAMS[factory.__name__] = factory
    return factory


@program
def traceable_body(mark):
    @mark["nonstrict"]
    def body(a, b):
        return a * b + 1

    return lambda x: body(x, x + 1).sum()


@program
def break_inside(mark):
    @mark["nonstrict"]
    def body(a, b):
        torch._dynamo.graph_break()
        return a * b

    def fn(x):
        t0 = x + 1
        return body(x, t0) * t0

    return fn


@program
def dict_of_constants_argument(mark):
    @mark["nonstrict"]
    def body(a, d):
        torch._dynamo.graph_break()
        return a * d["k"]

    return lambda x: body(x, {"k": 2}) + 1


@program
def dict_of_tensors_argument(mark):
    @mark["nonstrict"]
    def body(a, d):
        return a * d["w"] + d["n"]

    return lambda x: body(x, {"w": x.cos(), "n": 3}) - 1


@program
def list_argument_and_keyword(mark):
    @mark["nonstrict"]
    def body(parts, *, scale):
        return torch.cat(parts) * scale

    return lambda x: body([x, x.exp()], scale=2.0).relu()


@program
def tuple_result(mark):
    @mark["nonstrict"]
    def body(a):
        return a.sin(), a.cos()

    def fn(x):
        s, c = body(x)
        return s * c

    return fn


@program
def dict_result(mark):
    @mark["nonstrict"]
    def body(a):
        torch._dynamo.graph_break()
        return {"double": a * 2, "pair": [a + 1, a - 1]}

    def fn(x):
        out = body(x)
        return out["double"] + out["pair"][0] * out["pair"][1]

    return fn


@program
def called_twice(mark):
    @mark["nonstrict"]
    def body(a):
        return a.tanh() * 3

    return lambda x: body(body(x) + 1)


def data_dependent_branch_inside(mark):
    @mark["nonstrict"]
    def body(a):
        return a * 2 if a.sum() > 0 else a - 2

    return lambda x: body(x + 1)


@program
def called_from_a_callee(mark):
    @mark["nonstrict"]
    def body(a):
        return a.abs() + 1

    def helper(t):
        return body(t * 2) - 1

    return lambda x: helper(x).mean()


def _counts(fn, args, backend_factory, compile_fn):
    backend = backend_factory()
    compiled = compile_fn(fn, backend)
    results = [compiled(*args()) for _ in range(2)]
    return backend, results


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_nonstrict_trace_like_torch(name):
    import torch._dynamo
    import torch._dynamo.testing

    ours = PROGRAMS[name](EMBER)
    expected = [ours(*x4()) for _ in range(2)]
    backend, got = _counts(
        ours, x4, CountingBackend, lambda f, b: dynamo_capture.optimize(f, backend=b)
    )
    for value, reference in zip(got, expected, strict=True):
        assert_same(value, reference)
    torch._dynamo.reset()
    try:
        counter, _ = _counts(
            PROGRAMS[name](_torch_markers()),
            x4,
            torch._dynamo.testing.CompileCounter,
            lambda f, b: torch.compile(f, backend=b),
        )
    finally:
        torch._dynamo.reset()
    assert (backend.frame_count, backend.op_count) == (counter.frame_count, counter.op_count)


def test_nonstrict_trace_with_a_module_argument_runs_the_call_eagerly():
    lin = torch.nn.Linear(4, 4)

    @dynamo_capture.nonstrict_trace
    def body(m, a):
        return m(a) + a

    def fn(x):
        return body(lin, x).sum()

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend)
    x = torch.randn(2, 4)
    assert_same(compiled(x), fn(x))


def test_data_dependent_branch_inside_gives_eagers_values():
    # fake values cannot take the branch: the call runs eagerly (torch.compile falls
    # back too, with graphs around it: 3 graphs, 4 ops; ember runs the frame eagerly)
    fn = data_dependent_branch_inside(EMBER)
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    for sign in (1, -1):
        x = torch.linspace(-1, 1, 4) + sign
        assert_same(compiled(x), fn(x))


def test_allow_and_disallow_undo_nonstrict_trace():
    def body(a):
        return a + 1

    assert dynamo_capture.nonstrict_trace(body) is body
    assert dynamo_capture.is_nonstrict_traced(body)
    dynamo_capture.allow_in_graph(body)
    assert not dynamo_capture.is_nonstrict_traced(body)
    dynamo_capture.nonstrict_trace(body)
    dynamo_capture.disallow_in_graph(body)
    assert not dynamo_capture.is_nonstrict_traced(body)
    with pytest.raises(TypeError):
        dynamo_capture.nonstrict_trace(3)


def test_disallow_in_graph_of_a_torch_function_like_torchs():
    import torch._dynamo
    import torch._dynamo.testing

    def fn(a):
        x = torch.add(a, 1)
        x = torch.sub(x, 1)
        return torch.add(x, 1)

    backend = CountingBackend()
    dynamo_capture.disallow_in_graph(torch.sub)
    try:
        got = dynamo_capture.optimize(fn, backend=backend)(*x4())
    finally:
        # NOTE: back to no entry at all (allow_in_graph would leave one of its own)
        dynamo_capture.registry._disallowed_in_graph.pop(id(torch.sub), None)
    assert_same(got, fn(*x4()))
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    torch._dynamo.disallow_in_graph(torch.sub)
    try:
        torch.compile(fn, backend=counter)(*x4())
    finally:
        torch._dynamo.allow_in_graph(torch.sub)
        torch._dynamo.reset()
    assert (backend.frame_count, backend.op_count) == (counter.frame_count, counter.op_count)
