"""torch.func.functional_call in captured code: the module traced on the given tensors.

Each program is one graph (fullgraph=True) with eager's results, and gives
torch.compile's graph and op counts.
"""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import clone_inputs

torch.manual_seed(5)
_SEQUENTIAL = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
_LINEAR = torch.nn.Linear(3, 2)
_NORM = torch.nn.BatchNorm1d(3)


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 3)
        self.b = torch.nn.Linear(3, 3)
        self.b.weight = self.a.weight

    def forward(self, x, scale=1.0):
        return self.b(self.a(x)) * scale


class _SumsItsParameters(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return x * sum(p.sum() for p in self.parameters())


_TIED = _Tied()
_SUMS = _SumsItsParameters()


def r(*shape):
    return torch.randn(*shape)


def _module_own_parameters(x):
    return torch.func.functional_call(_LINEAR, dict(_LINEAR.named_parameters()), (x,))


def _new_parameters(x, w, b):
    return torch.func.functional_call(_LINEAR, {"weight": w, "bias": b}, (x,))


def _one_nested_parameter(x, w):
    return torch.func.functional_call(_SEQUENTIAL, {"0.weight": w}, (x,))


def _parameters_computed_in_frame(x):
    params = {name: p * 2 for name, p in _SEQUENTIAL.named_parameters()}
    return torch.func.functional_call(_SEQUENTIAL, params, x).sum() + x.sum()


def _buffers(x, mean, var):
    out = torch.func.functional_call(_NORM, {"running_mean": mean, "running_var": var}, (x,))
    return out, mean, var


def _tied_weights_with_keywords(x, w):
    return torch.func.functional_call(_TIED, {"a.weight": w}, (x,), {"scale": 2.0})


def _untied_weights(x, w):
    return torch.func.functional_call(_TIED, {"a.weight": w}, (x,), tie_weights=False)


def _two_dicts(x, w, b):
    return torch.func.functional_call(_SEQUENTIAL, ({"0.weight": w}, {"0.bias": b}), (x,))


PROGRAMS = {
    "module_own_parameters": (_module_own_parameters, (r(2, 3),)),
    "new_parameters": (_new_parameters, (r(2, 3), r(2, 3), r(2))),
    "one_nested_parameter": (_one_nested_parameter, (r(2, 3), r(4, 3))),
    "parameters_computed_in_frame": (_parameters_computed_in_frame, (r(2, 3),)),
    "buffers": (_buffers, (r(4, 3), r(3), torch.rand(3) + 0.5)),
    "tied_weights_with_keywords": (_tied_weights_with_keywords, (r(2, 3), r(3, 3))),
    "untied_weights": (_untied_weights, (r(2, 3), r(3, 3))),
    "two_dicts": (_two_dicts, (r(2, 3), r(4, 3), r(4))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_functional_call_programs(name, check):
    fn, args = PROGRAMS[name]
    check(fn, *args)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_functional_call_counts_like_torch(name):
    fn, args = PROGRAMS[name]
    check_like_torch(fn, lambda: clone_inputs(args))


def _through_parameters_method(x, w):
    return torch.func.functional_call(_SUMS, {"w": w}, (x,))


def test_functional_call_refuses_other_routes_to_a_replaced_parameter():
    """module.parameters() inside would read the module's own tensor: not traced."""
    x, w = r(3), r(3)
    with pytest.raises(dynamo_capture.Unsupported, match="functional_call replaces"):
        dynamo_capture.optimize(
            _through_parameters_method, backend=lambda gm, ex: gm.forward, fullgraph=True
        )(x, w)
    compiled = dynamo_capture.optimize(
        _through_parameters_method, backend=lambda gm, ex: gm.forward
    )
    torch.testing.assert_close(compiled(x, w), _through_parameters_method(x, w))


def test_functional_call_of_unknown_name_or_strict_runs_eagerly():
    def unknown(x, w):
        return torch.func.functional_call(_LINEAR, {"other": w}, (x,))

    def strict(x, w):
        return torch.func.functional_call(_LINEAR, {"weight": w}, (x,), strict=True)

    for fn in (unknown, strict):
        x, w = r(2, 3), r(2, 3)
        with pytest.raises(dynamo_capture.Unsupported, match="functional_call"):
            dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward, fullgraph=True)(x, w)
        try:
            expected = fn(x, w)
        except Exception as error:  # noqa: BLE001 - the compiled function raises the same
            with pytest.raises(type(error)):
                dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)(x, w)
        else:
            got = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)(x, w)
            torch.testing.assert_close(got, expected)
