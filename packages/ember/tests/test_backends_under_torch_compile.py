"""ember's backends under torch.compile with dynamic sizes: right shapes for every size.

torch.compile hands a backend SymInts of torch's own shape environment and
reuses what it returns for every size those symbols may take. A backend that
compiled for the example's sizes would return results shaped for another call
(a silent wrong result); ember's backends compile over their own ShapeEnv, or
per input signature where a size cannot be carried over.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch.testing import assert_close

import ember
from ember import torch_symbols

BACKENDS = ["aot_eager", "inductor"]
SIZES = (4, 5, 9, 2, 17)


def _sum_rows(x):
    return (x * 2).sum(1)


def _flatten(x):
    return x.reshape(x.shape[0] * x.shape[1]) * 2


def _concat(x, y):
    return torch.cat([x, y]).sum(0) + x.new_zeros(x.shape[1])


def _scaled_slice(x):
    return x[:, 1:] * x.shape[0]


FUNCTIONS = {
    "sum_rows": (_sum_rows, lambda b: (torch.randn(b, 3),)),
    "flatten": (_flatten, lambda b: (torch.randn(b, 4),)),
    "concat": (_concat, lambda b: (torch.randn(b, 3), torch.randn(b + 1, 3))),
    "scaled_slice": (_scaled_slice, lambda b: (torch.randn(b, 5).t(),)),
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _check_sizes(compiled, fn, make, mark=False):
    for size in SIZES:
        args = make(size)
        if mark:
            for arg in args:
                torch._dynamo.mark_dynamic(arg, 0)
        assert_close(compiled(*args), fn(*args))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_torch_compile_dynamic_true_gives_shapes_of_each_call(backend, name):
    fn, make = FUNCTIONS[name]
    compiled = torch.compile(fn, backend=ember.backends.lookup_backend(backend, {}), dynamic=True)
    _check_sizes(compiled, fn, make)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["sum_rows", "flatten"])
def test_torch_compile_automatic_dynamic_gives_shapes_of_each_call(backend, name):
    fn, make = FUNCTIONS[name]
    compiled = torch.compile(fn, backend=ember.backends.lookup_backend(backend, {}))
    _check_sizes(compiled, fn, make)


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_mark_dynamic_gives_shapes_of_each_call(backend):
    fn, make = FUNCTIONS["concat"]
    compiled = torch.compile(fn, backend=ember.backends.lookup_backend(backend, {}))
    _check_sizes(compiled, fn, make, mark=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_dynamic_int_argument_gives_values_of_each_call(backend):
    def fn(x, n):
        return x.repeat(n, 1) * n

    compiled = torch.compile(fn, backend=ember.backends.lookup_backend(backend, {}))
    for n in (2, 3, 5, 4):
        x = torch.randn(n + 1, 3)
        assert_close(compiled(x, n), fn(x, n))


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_dynamic_training_gives_grads_of_each_call(backend):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh())
    compiled = torch.compile(
        model, backend=ember.backends.lookup_backend(backend, {}), dynamic=True
    )
    for size in SIZES:
        x = torch.randn(size, 3, requires_grad=True)
        out = compiled(x)
        expected = model(x)
        assert_close(out, expected)
        (grad,) = torch.autograd.grad(out.sum(), x)
        (expected_grad,) = torch.autograd.grad(expected.sum(), x)
        assert_close(grad, expected_grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_symbols_not_carried_over_compile_per_input_sizes(backend, monkeypatch):
    def refuse(gm, example_inputs):
        raise ValueError("refused for the test")

    monkeypatch.setattr(torch_symbols, "adopt_torch_symbols", refuse)
    fn, make = FUNCTIONS["flatten"]
    compiled = torch.compile(fn, backend=ember.backends.lookup_backend(backend, {}), dynamic=True)
    _check_sizes(compiled, fn, make)


def test_graph_with_torch_symbols_is_compiled_over_guards_shape_env():
    seen = []
    inductor = ember.backends.lookup_backend("inductor", {})

    def spy(gm, example_inputs):
        compiled = inductor(gm, example_inputs)
        seen.append(compiled)
        return compiled

    compiled = torch.compile(_sum_rows, backend=spy, dynamic=True)
    for size in SIZES:
        x = torch.randn(size, 3)
        assert_close(compiled(x), _sum_rows(x))
    assert len(seen) == 1
    assert not isinstance(seen[0], torch_symbols.SpecializingCall)


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_fakes_as_example_inputs_give_shapes_of_each_call(backend):
    inner = ember.backends.lookup_backend(backend, {})

    def with_fakes(gm, example_inputs):
        fakes = [node.meta["example_value"] for node in gm.graph.find_nodes(op="placeholder")]
        return inner(gm, fakes)

    fn, make = FUNCTIONS["flatten"]
    compiled = torch.compile(fn, backend=with_fakes, dynamic=True)
    _check_sizes(compiled, fn, make)
