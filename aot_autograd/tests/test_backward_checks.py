"""Checks of values autograd's C++ backward formulas make (skipped on fakes) run at every
backward of the compiled function, raising eager's error (see backward_checks)."""

from __future__ import annotations

import pytest
import torch

from aot_autograd import aot_function
from aot_autograd.backward_checks import BACKWARD_CHECKS


def _compiled(fn):
    return aot_function(fn, fw_compiler=lambda gm, inputs: gm, bw_compiler=lambda gm, inputs: gm)


def _phase_dependent(x):
    return torch.linalg.eig(x)[1].real.sum()


def _phase_free(x):
    values, vectors = torch.linalg.eig(x)
    return vectors.abs().sum() + values.real.sum()


def _grad(fn, x):
    x = x.clone().requires_grad_()
    fn(x).backward()
    return x.grad


def test_eig_backward_raises_where_the_loss_depends_on_the_eigenvectors_phase():
    x = torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(RuntimeError, match="linalg_eig_backward: .* ill-defined"):
        _grad(_phase_dependent, x)
    with pytest.raises(RuntimeError, match="linalg_eig_backward: .* ill-defined"):
        _grad(_compiled(_phase_dependent), x)


def test_eig_backward_checks_each_call_on_its_own_values():
    compiled = _compiled(_phase_free)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(2, 3, 3, dtype=torch.float64, generator=generator)
        torch.testing.assert_close(_grad(compiled, x), _grad(_phase_free, x))


def test_complex_eigh_backward_raises_as_eager():
    def fn(x):
        return torch.linalg.eigh(x + x.mH)[1].real.sum()

    x = torch.randn(3, 3, dtype=torch.complex128, generator=torch.Generator().manual_seed(2))
    with pytest.raises(RuntimeError, match="linalg_eigh_backward: .* ill-defined"):
        _grad(fn, x)
    with pytest.raises(RuntimeError, match="linalg_eigh_backward: .* ill-defined"):
        _grad(_compiled(fn), x)


def test_absent_eigenvector_gradient_is_not_checked():
    def fn(x):
        values, vectors = torch.linalg.eig(x)
        return values.real.sum(), vectors

    x = torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    expected_x, compiled_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    fn(expected_x)[0].backward()
    _compiled(fn)(compiled_x)[0].backward()
    torch.testing.assert_close(compiled_x.grad, expected_x.grad)


def test_checks_are_keyed_by_autograd_node_names():
    x = torch.randn(3, 3, dtype=torch.complex128, requires_grad=True)
    names = {torch.linalg.eig(x)[1].grad_fn.name(), torch.linalg.eigh(x)[1].grad_fn.name()}
    assert names <= set(BACKWARD_CHECKS)
