"""A function compiled and dropped takes its compiled entries and graphs with it.

A process that compiles many different functions (a fuzzer, a notebook, a server
loading models) must not keep each one's code, decoded bytecode, signatures or graphs
after the function and its compiled callable are gone. Each test compiles fresh
functions (their own code objects, as `exec` of new source makes them), drops them,
and checks with weak references that nothing kept them.
"""

from __future__ import annotations

import gc
import weakref

import torch

from dynamo_capture import optimize

SOURCE = """
def scale(x, k=2, *, shift=1):
    return x * k + shift

def program(x, y):
    z = scale(x) + y * {n}
    try:
        z = z.sin()
    except ValueError:
        z = z.cos()
    return z.relu(), z.sum()
"""


def _made(n: int):
    namespace: dict = {"torch": torch, "__name__": "lifetime_programs"}
    exec(compile(SOURCE.format(n=n), f"<lifetime-{n}>", "exec"), namespace)
    return namespace["program"]


def _compile_and_run(n: int, graphs: list):
    def backend(gm, example_inputs):
        graphs.append(weakref.ref(gm))
        return gm.forward

    fn = _made(n)
    compiled = optimize(fn, backend=backend)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    got = compiled(x, y)
    want = fn(x, y)
    torch.testing.assert_close(got, want)
    return weakref.ref(fn), weakref.ref(fn.__code__), weakref.ref(compiled)


def test_dropped_functions_take_their_code_entries_and_graphs_with_them():
    graphs: list = []
    refs = [_compile_and_run(n, graphs) for n in range(12)]
    assert graphs, "the backend saw no graph"
    gc.collect()
    alive = [(n, [r() is not None for r in group]) for n, group in enumerate(refs)]
    assert all(not any(flags) for _, flags in alive), alive
    assert all(g() is None for g in graphs), f"{sum(g() is not None for g in graphs)} graphs kept"


def test_a_live_function_keeps_its_cache_and_reuses_it():
    graphs: list = []
    fn_ref, code_ref, compiled_ref = _compile_and_run(100, graphs)
    gc.collect()
    assert compiled_ref() is None
    fn = _made(101)
    compiled = optimize(fn, backend=lambda gm, inputs: gm.forward)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    compiled(x, y)
    entries = list(compiled.entries)
    gc.collect()
    torch.testing.assert_close(compiled(x, y), fn(x, y))
    assert compiled.entries == entries, "a live function's entry was dropped or recompiled"
