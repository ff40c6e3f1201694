"""torch.func transforms and torch.cond in captured code: one opaque graph node each.

Each program runs under capture and torch.compile with counting backends: the graph
counts are torch.compile's (torch inlines the transform's operators, so op counts
differ) and the results are eager's.
"""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture


def _loss(x):
    return (x.sin() ** 2).sum()


def _positive(x):
    return x.sin()


def _negative(x):
    return x.cos()


def grad_then_add(x):
    return torch.func.grad(_loss)(x) + 1


def grad_and_value_product(x):
    g, v = torch.func.grad_and_value(_loss)(x)
    return g * v


def vmap_of_lambda(x):
    return torch.vmap(lambda row: row.sum() * row)(x) * 2


def vmap_in_dims(x, y):
    return torch.func.vmap(torch.mul, in_dims=(0, None))(x, y)


def jvp_of_sin(x):
    out, tangent = torch.func.jvp(torch.sin, (x,), (torch.ones_like(x),))
    return out + tangent


def jacrev_sum(x):
    return torch.func.jacrev(torch.sin)(x).sum(0)


def jacfwd_sum(x):
    return torch.func.jacfwd(torch.sin)(x).sum(0)


def hessian_sum(x):
    return torch.func.hessian(_loss)(x).sum()


def cond_on_tensor(x):
    return torch.cond(x.sum() > 0, _positive, _negative, (x,)) + 1


def cond_on_bool(x, flag):
    return torch.cond(flag, _positive, _negative, (x,)) * 2


def _vector():
    return (torch.randn(3),)


PROGRAMS = {
    "grad": (grad_then_add, _vector),
    "grad_and_value": (grad_and_value_product, _vector),
    "vmap": (vmap_of_lambda, lambda: (torch.randn(2, 3),)),
    "vmap_in_dims": (vmap_in_dims, lambda: (torch.randn(2, 3), torch.randn(3))),
    "jvp": (jvp_of_sin, _vector),
    "jacrev": (jacrev_sum, _vector),
    "jacfwd": (jacfwd_sum, _vector),
    "hessian": (hessian_sum, _vector),
    "cond_tensor_predicate": (cond_on_tensor, _vector),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_function_transform_is_one_node_with_torch_graph_count(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args, ops=False)


def test_cond_with_python_bool_inlines_the_branch_like_torch():
    flags = [True, False, True, False]
    pending = [(torch.randn(3), flag) for flag in flags]
    pending += pending
    check_like_torch(cond_on_bool, lambda: pending.pop(0), calls=len(flags))


def test_cond_takes_the_branch_of_each_call():
    compiled = dynamo_capture.optimize(cond_on_tensor, backend=lambda gm, ex: gm.forward)
    for x in (torch.ones(3), -torch.ones(3), torch.randn(3)):
        torch.testing.assert_close(compiled(x), cond_on_tensor(x))


def test_transform_of_closure_over_frame_tensor_breaks_and_runs_eagerly():
    def closure(x, w):
        return torch.func.grad(lambda t: (t * w).sum())(x) + 1

    compiled = dynamo_capture.optimize(closure, backend=lambda gm, ex: gm.forward)
    x, w = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compiled(x, w), closure(x, w))
    assert compiled.graph_breaks


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_aot_backends_run_transforms_eagerly(backend):
    import ember

    for fn, make_args in (PROGRAMS["grad"][:2], PROGRAMS["cond_tensor_predicate"][:2]):
        compiled = ember.compile(fn, backend=backend)
        args = make_args()
        torch.testing.assert_close(compiled(*args), fn(*args))
