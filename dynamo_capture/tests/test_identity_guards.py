"""`is` and identity `==` on objects: guarded on what decides the answer.

An object compared with None (or with any object of another type) is guarded on
its type, so a new object of the same type each call keeps the compiled entry (a
cache object made afresh per request). Two objects of one type keep an identity
guard: which objects they are decides `a is b`.
"""

from __future__ import annotations

import operator

import torch

import dynamo_capture


class Cache:
    def __init__(self, scale: float) -> None:
        self.scale = scale


def scaled(x, cache=None):
    if cache is None:
        return x + 1
    return x * cache.scale


def test_new_object_compared_with_none_keeps_entry(backend):
    fn = dynamo_capture.optimize(scaled, backend=backend, fullgraph=True)
    x = torch.randn(3)
    for _ in range(4):
        cache = Cache(2.0)
        torch.testing.assert_close(fn(x, cache), scaled(x, cache))
    assert len(fn.entries) == 1


def test_none_after_object_recompiles_with_eager_result(backend):
    fn = dynamo_capture.optimize(scaled, backend=backend, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(fn(x, Cache(3.0)), x * 3.0)
    torch.testing.assert_close(fn(x, None), x + 1)
    torch.testing.assert_close(fn(x, Cache(3.0)), x * 3.0)
    assert len(fn.entries) == 2


def test_new_object_compared_with_operator_is_not_keeps_entry(backend):
    def f(x, cache):
        return x * 2 if operator.is_not(cache, None) else x

    fn = dynamo_capture.optimize(f, backend=backend, fullgraph=True)
    x = torch.randn(3)
    for _ in range(3):
        torch.testing.assert_close(fn(x, Cache(1.0)), x * 2)
    assert len(fn.entries) == 1


def test_objects_of_one_type_keep_identity_guard(backend):
    def same(x, a, b):
        return x + 1 if a is b else x - 1

    fn = dynamo_capture.optimize(same, backend=backend, fullgraph=True)
    x = torch.randn(3)
    a, b = Cache(1.0), Cache(1.0)
    torch.testing.assert_close(fn(x, a, a), x + 1)
    torch.testing.assert_close(fn(x, a, b), x - 1)
    torch.testing.assert_close(fn(x, b, b), x + 1)
    torch.testing.assert_close(fn(x, b, a), x - 1)


def test_object_of_another_type_in_place_of_none_is_guarded(backend):
    class Other:
        scale = 5.0

    fn = dynamo_capture.optimize(scaled, backend=backend, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(fn(x, Cache(2.0)), x * 2.0)
    torch.testing.assert_close(fn(x, Other()), x * 5.0)


def _add_into_first(a, b, c):
    a.add_(b)
    return c + 1


def test_tensor_arguments_that_start_aliasing_recompile_like_torch():
    import torch._dynamo
    import torch._dynamo.testing

    def run(compile_fn):
        torch.manual_seed(0)
        x, y, z = torch.randn(3), torch.randn(3), torch.randn(3)
        compiled = compile_fn(_add_into_first)
        compiled(x.clone(), y.clone(), z.clone())
        compiled(z.clone(), y.clone(), x.clone())  # still distinct: no recompile
        shared, expected_shared = x.clone(), x.clone()
        got = compiled(shared, y.clone(), shared)  # aliased: recompile
        expected = _add_into_first(expected_shared, y.clone(), expected_shared)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(shared, expected_shared)

    graphs = []
    run(
        lambda fn: dynamo_capture.optimize(
            fn, backend=lambda gm, ex: graphs.append(gm) or gm.forward
        )
    )
    counter = torch._dynamo.testing.CompileCounter()
    torch._dynamo.reset()
    run(lambda fn: torch.compile(fn, backend=counter))
    torch._dynamo.reset()
    assert len(graphs) == counter.frame_count == 2


def test_aliased_arguments_under_an_aot_backend_match_eager():
    import ember

    compiled = ember.compile(_add_into_first, backend="aot_eager")
    x, y = torch.randn(3), torch.randn(3)
    compiled(x.clone(), y.clone(), torch.randn(3))
    shared, expected_shared = x.clone(), x.clone()
    got = compiled(shared, y.clone(), shared)
    expected = _add_into_first(expected_shared, y.clone(), expected_shared)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(shared, expected_shared)
