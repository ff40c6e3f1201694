"""Parameters of a compiled model can be swapped in place, as torch.compile allows.

`torch.utils.swap_tensors` refuses a tensor that has a weak reference on it, and
`module.to()` / `.double()` with `set_swap_module_params_on_conversion(True)` and
FSDP2-style code swap parameters that way. Ember keeps no weak reference on a
user's tensor (its guards hold none after compiling, its fake converter drops the
real tensors once the entry is compiled), and after a swap the compiled model
gives eager's values, recompiling where the tensor's metadata changed.

| footgun                                             | without the check   |
| --------------------------------------------------- | ------------------- |
| a weak reference left on a parameter                | error on swap       |
| a swapped parameter read through stale metadata     | silent wrong result |
"""

from __future__ import annotations

import gc
import sys
import weakref

import pytest
import torch
from torch.testing import assert_close

import ember

BACKENDS = ["eager", "inductor"]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4), torch.nn.Tanh()
    )


def _compiled(backend: str, model: torch.nn.Module):
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(3, 4)
    assert_close(compiled(x), model(x))
    gc.collect()
    return compiled, x


@pytest.fixture
def swap_on_conversion():
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    yield
    torch.__future__.set_swap_module_params_on_conversion(before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_model_leaves_no_weakref_on_its_tensors(backend):
    model = _model()
    model.register_buffer("offset", torch.ones(4))
    compiled, x = _compiled(backend, model)
    for name, tensor in [*model.named_parameters(), *model.named_buffers(), ("x", x)]:
        assert weakref.getweakrefcount(tensor) == 0, name


@pytest.mark.parametrize("backend", BACKENDS)
def test_swap_tensors_of_a_parameter_of_the_same_shape_between_calls(backend):
    model = _model()
    compiled, x = _compiled(backend, model)
    torch.utils.swap_tensors(model[2].weight, torch.nn.Parameter(torch.randn(4, 4)))
    assert_close(compiled(x), model(x))
    torch.utils.swap_tensors(model[0].bias, torch.nn.Parameter(torch.randn(4)))
    assert_close(compiled(x), model(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_swap_tensors_of_a_parameter_of_another_shape_recompiles(backend):
    model = _model()
    compiled, x = _compiled(backend, model)
    torch.utils.swap_tensors(model[2].weight, torch.nn.Parameter(torch.randn(6, 4)))
    torch.utils.swap_tensors(model[2].bias, torch.nn.Parameter(torch.randn(6)))
    assert_close(compiled(x), model(x))
    assert compiled(x).shape == (3, 6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_double_with_swap_on_conversion_recompiles(backend, swap_on_conversion):
    model = _model()
    compiled, x = _compiled(backend, model)
    weight = model[0].weight
    model.double()
    assert model[0].weight is weight and weight.dtype == torch.float64  # swapped in place
    assert_close(compiled(x.double()), model(x.double()))
    model.float()
    assert_close(compiled(x), model(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_swapped_parameters_train_like_eager(backend):
    model = _model()
    reference = _model()
    compiled, x = _compiled(backend, model)
    for module in (model, reference):
        torch.utils.swap_tensors(module[0].weight, torch.nn.Parameter(torch.full((4, 4), 0.1)))
    compiled(x).sum().backward()
    reference(x).sum().backward()
    assert_close(model[0].weight.grad, reference[0].weight.grad)
    assert_close(model[2].bias.grad, reference[2].bias.grad)


def test_compiled_entry_keeps_no_input_or_parameter_alive():
    def f(module, x):
        return module(x)

    model, x = _model(), torch.randn(3, 4)
    compiled = ember.compile(f, backend="eager")
    assert_close(compiled(model, x), f(model, x))
    dead = [weakref.ref(t) for t in (x, *model.parameters())]
    del model, x
    gc.collect()
    assert all(ref() is None for ref in dead)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_entry_keeps_no_input_storage_alive(dynamic):
    import numpy as np

    def f(module, t):
        return module(t).sin() + 1

    # the storage of a tensor made by from_numpy holds the array: it is freed with it
    array = np.ones((64, 4), dtype=np.float32)
    alone = sys.getrefcount(array)
    model, x = _model(), torch.from_numpy(array)
    compiled = ember.compile(f, backend="eager", dynamic=dynamic)
    assert_close(compiled(model, x), f(model, x))
    del x
    gc.collect()
    assert sys.getrefcount(array) == alone
