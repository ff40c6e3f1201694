"""torch.func transforms and torch.cond in captured code.

Each program runs under capture and torch.compile with counting backends: the graph
counts are torch.compile's and the results are eager's. grad, grad_and_value and vmap
and jvp, vjp, jacrev, jacfwd, hessian are traced into the graph as torch.compile traces
them (functorch_inline), so their op counts are torch's too; forms not traced so are one
opaque node each (op counts differ).
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


TRACED = (
    "grad",
    "grad_and_value",
    "vmap",
    "vmap_in_dims",
    "jvp",
    "jacrev",
    "cond_tensor_predicate",
)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_function_transform_has_torch_graph_count(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args, ops=name in TRACED)


def _argnums_pair(x, y):
    return torch.func.grad(lambda a, b: (a * b.sin()).sum(), argnums=(0, 1))(x, y)


def _aux_output(x):
    return torch.func.grad(lambda y: (y.sum(), y.cos()), has_aux=True)(x)


def _value_and_aux(x):
    return torch.func.grad_and_value(lambda y: (y.exp().sum(), y * 2), has_aux=True)(x)


def _grad_under_no_grad(x):
    with torch.no_grad():
        return torch.func.grad(_loss)(x)


def _grad_of_grad(x):
    return torch.func.grad(lambda y: torch.func.grad(_loss)(y).sum())(x)


def _vmap_of_grad(x):
    return torch.func.vmap(torch.func.grad(_loss))(x)


def _nested_vmap(x):
    return torch.func.vmap(torch.func.vmap(torch.sum))(x)


def _vmap_out_dims(x):
    return torch.func.vmap(lambda row: (row * 2, row.sum()), out_dims=(1, 0))(x)


def _vmap_last_dim_with_constant(x):
    return torch.func.vmap(lambda col, k: col * k, in_dims=(-1, None))(x, 3)


def _vmap_closure_then_ops(x, w):
    return torch.func.vmap(lambda row: row @ w)(x).relu() + x.mean()


def _vjp_of_closure(x, w):
    out, pullback = torch.func.vjp(lambda a: a * w, x)
    (grad,) = pullback(torch.ones_like(out))
    return out + grad


def _vjp_of_two_primals(x, y):
    out, pullback = torch.func.vjp(lambda a, b: (a * b).sin(), x, y)
    return pullback(torch.ones_like(out))


def _vjp_tuple_output(x):
    (a, b), pullback = torch.func.vjp(lambda t: (t.sin(), t.cos()), x)
    return pullback((torch.ones_like(a), b))


def _vjp_with_aux_and_unused_primal(x, y):
    out, pullback, aux = torch.func.vjp(lambda a, b: (a.exp(), a.sum()), x, y, has_aux=True)
    return pullback(out), aux


def _vjp_under_no_grad(x):
    with torch.no_grad():
        out, pullback = torch.func.vjp(torch.sin, x)
        return pullback(out)[0]


def _vjp_pullback_called_twice(x):
    out, pullback = torch.func.vjp(torch.tanh, x)
    return pullback(out)[0] + pullback(out * 2, create_graph=False)[0]


def _jvp_of_two_primals(x, y):
    return torch.func.jvp(torch.mul, (x, y), (torch.ones_like(x), torch.zeros_like(y)))


def _jvp_output_independent_of_primals(x):
    return torch.func.jvp(lambda a: (a.sin(), torch.ones(3)), (x,), (x,))


def _jvp_with_aux(x):
    return torch.func.jvp(lambda a: (a.sin(), a.cos()), (x,), (x,), has_aux=True)


def _jvp_of_jvp(x):
    return torch.func.jvp(lambda a: torch.func.jvp(torch.sin, (a,), (a,))[1], (x,), (x,))


def _jvp_in_vmap(x):
    return torch.func.vmap(lambda row: torch.func.jvp(torch.sin, (row,), (row * 0 + 1,))[1])(x)


def _jvp_in_grad(x):
    return torch.func.grad(lambda a: torch.func.jvp(torch.sin, (a,), (a,))[1].sum())(x)


def _jvp_under_no_grad(x):
    with torch.no_grad():
        return torch.func.jvp(torch.cos, (x,), (x,))


def _jacrev_of_closure(x, w):
    return torch.func.jacrev(lambda a: (a * w).sin())(x)


def _hessian_of_closure_with_constant_cell(x):
    k = 3
    return torch.func.hessian(lambda a: (a * k).sin().sum())(x)


def _jacrev_of_second_argument(x, y):
    return torch.func.jacrev(torch.mul, argnums=1)(x, y)


def _jacrev_of_matrix_product(x, w):
    return torch.func.jacrev(lambda a: a @ w)(x)


def _jacrev_under_no_grad(x):
    with torch.no_grad():
        return torch.func.jacrev(torch.tanh)(x)


_LINEAR = torch.nn.Linear(3, 2)


def _grad_of_dict_of_parameters(x, w, b):
    return torch.func.grad(lambda p, x: (x @ p["w"].t() + p["b"]).sum())({"w": w, "b": b}, x)


def _grad_of_tuple_of_parameters(x, w, b):
    return torch.func.grad(lambda p, x: (x @ p[0].t() + p[1]).sum())((w, b), x)


def _grad_of_functional_call(x):
    params = {name: p.detach() for name, p in _LINEAR.named_parameters()}
    return torch.func.grad(lambda p, x: torch.func.functional_call(_LINEAR, p, (x,)).sum())(
        params, x
    )


def _grad_and_value_with_dict_aux(x, w):
    def loss(p):
        return (p["w"] * x).sum(), {"doubled": p["w"] * 2}

    return torch.func.grad_and_value(loss, has_aux=True)({"w": w})


def _grad_of_list_among_argnums(x, w):
    return torch.func.grad(lambda a, ps: (a * ps[0] * ps[1]).sum(), argnums=(0, 1))(x, [w, w * 2])


def _matrix_and_vector():
    return torch.randn(2, 3), torch.randn(4)


def _exp_of_product(a, b):
    return (a.sum(0) * b[:3]).exp()


def _jacrev_of_argnum_tuple(x, y):
    return torch.func.jacrev(_exp_of_product, argnums=(0, 1))(x, y)


def _jacfwd_of_argnum_tuple(x, y):
    return torch.func.jacfwd(_exp_of_product, argnums=(0, 1))(x, y)


def _sin_sum_with_aux(a, b):
    out = a.sin().sum(0) * b[0]
    return out, (out.detach() * 2, b.cos())


def _jacrev_with_tuple_aux(x, y):
    return torch.func.jacrev(_sin_sum_with_aux, argnums=(0, 1), has_aux=True)(x, y)


def _jacrev_with_aux_of_one_argnum(x, y):
    return torch.func.jacrev(_sin_sum_with_aux, has_aux=True)(x, y)


def _jacfwd_with_dict_aux(x, y):
    def f(a, b):
        out = a.sin().sum(0) * b[0]
        return out, {"norm": out.norm(), "b": b}

    return torch.func.jacfwd(f, argnums=(0, 1), has_aux=True)(x, y)


def _jacfwd_with_aux_of_one_argnum(x, y):
    return torch.func.jacfwd(_sin_sum_with_aux, has_aux=True)(x, y)


def _jacrev_of_argnum_tuple_under_no_grad(x, y):
    with torch.no_grad():
        return torch.func.jacrev(lambda a, b: a * b[:3], argnums=(0, 1))(x, y)


def _jacfwd_of_jacrev_of_argnum_tuple(x, y):
    inner = torch.func.jacrev(lambda a, b: (a * b[:3]).sum(), argnums=(0, 1))
    return torch.func.jacfwd(inner, argnums=0)(x, y)


def _hessian_of_argnum_tuple(x, y):
    return torch.func.hessian(lambda a, b: (a.sum(0) * b[:3]).sum(), argnums=(0, 1))(x, y)


def _jacrev_of_closure_with_argnum_tuple(x, y):
    w = y[:3] * 2
    return torch.func.jacrev(lambda a, b: (a * w).sum(0) * b[:3], argnums=(0, 1))(x, y)


TRACED_PROGRAMS = {
    "argnums_pair": (_argnums_pair, lambda: (torch.randn(3), torch.randn(3))),
    "aux_output": (_aux_output, _vector),
    "value_and_aux": (_value_and_aux, _vector),
    "grad_under_no_grad": (_grad_under_no_grad, _vector),
    "grad_of_grad": (_grad_of_grad, _vector),
    "vmap_of_grad": (_vmap_of_grad, lambda: (torch.randn(2, 3),)),
    "nested_vmap": (_nested_vmap, lambda: (torch.randn(2, 3, 4),)),
    "vmap_out_dims": (_vmap_out_dims, lambda: (torch.randn(4, 3),)),
    "vmap_last_dim_with_constant": (_vmap_last_dim_with_constant, lambda: (torch.randn(4, 3),)),
    "vmap_closure_then_ops": (
        _vmap_closure_then_ops,
        lambda: (torch.randn(4, 3), torch.randn(3, 3)),
    ),
    "jvp_of_two_primals": (_jvp_of_two_primals, lambda: (torch.randn(3), torch.randn(3))),
    "jvp_output_independent_of_primals": (_jvp_output_independent_of_primals, _vector),
    "jvp_with_aux": (_jvp_with_aux, _vector),
    "jvp_of_jvp": (_jvp_of_jvp, _vector),
    "jvp_in_vmap": (_jvp_in_vmap, lambda: (torch.randn(2, 3),)),
    "jvp_in_grad": (_jvp_in_grad, _vector),
    "jvp_under_no_grad": (_jvp_under_no_grad, _vector),
    "jvp_of_input_requiring_grad": (
        lambda x: torch.func.jvp(torch.exp, (x,), (torch.ones_like(x),))[1].sum(),
        lambda: (torch.randn(3, requires_grad=True),),
    ),
    "jacrev_of_closure_traced": (_jacrev_of_closure, lambda: (torch.randn(3), torch.randn(3))),
    "jacrev_of_second_argument": (
        _jacrev_of_second_argument,
        lambda: (torch.randn(3), torch.randn(3)),
    ),
    "jacrev_of_matrix_product": (
        _jacrev_of_matrix_product,
        lambda: (torch.randn(2, 3), torch.randn(3, 4)),
    ),
    "jacrev_under_no_grad": (_jacrev_under_no_grad, _vector),
    "jacrev_of_input_requiring_grad": (
        lambda x: torch.func.jacrev(torch.exp)(x).sum(),
        lambda: (torch.randn(3, requires_grad=True),),
    ),
    "jacrev_in_vmap": (
        lambda x: torch.func.vmap(torch.func.jacrev(torch.sin))(x),
        lambda: (torch.randn(2, 3),),
    ),
    "jacrev_of_jacrev": (lambda x: torch.func.jacrev(torch.func.jacrev(torch.sin))(x), _vector),
    "jacfwd_of_closure": (
        lambda x, w: torch.func.jacfwd(lambda a: (a * w).cos())(x),
        lambda: (torch.randn(3), torch.randn(3)),
    ),
    "jacfwd_of_second_argument": (
        lambda x, y: torch.func.jacfwd(torch.mul, argnums=1)(x, y),
        lambda: (torch.randn(3), torch.randn(3)),
    ),
    "jacfwd_of_matrix_product": (
        lambda x, w: torch.func.jacfwd(lambda a: a @ w)(x),
        lambda: (torch.randn(2, 3), torch.randn(3, 4)),
    ),
    "jacfwd_in_vmap": (
        lambda x: torch.func.vmap(torch.func.jacfwd(torch.sin))(x),
        lambda: (torch.randn(2, 3),),
    ),
    "jacfwd_of_input_requiring_grad": (
        lambda x: torch.func.jacfwd(torch.exp)(x).sum(),
        lambda: (torch.randn(3, requires_grad=True),),
    ),
    "hessian_of_closure_traced": (
        _hessian_of_closure_with_constant_cell,
        _vector,
    ),
    "grad_of_dict_of_parameters": (
        _grad_of_dict_of_parameters,
        lambda: (torch.randn(4, 3), torch.randn(2, 3), torch.randn(2)),
    ),
    "grad_of_tuple_of_parameters": (
        _grad_of_tuple_of_parameters,
        lambda: (torch.randn(4, 3), torch.randn(2, 3), torch.randn(2)),
    ),
    "grad_of_functional_call": (_grad_of_functional_call, lambda: (torch.randn(4, 3),)),
    "grad_and_value_with_dict_aux": (
        _grad_and_value_with_dict_aux,
        lambda: (torch.randn(3), torch.randn(3)),
    ),
    "grad_of_list_among_argnums": (
        _grad_of_list_among_argnums,
        lambda: (torch.randn(3), torch.randn(3)),
    ),
    "vjp_of_closure": (_vjp_of_closure, lambda: (torch.randn(3), torch.randn(3))),
    "vjp_of_two_primals": (_vjp_of_two_primals, lambda: (torch.randn(3), torch.randn(3))),
    "vjp_tuple_output": (_vjp_tuple_output, _vector),
    "vjp_with_aux_and_unused_primal": (
        _vjp_with_aux_and_unused_primal,
        lambda: (torch.randn(3), torch.randn(3)),
    ),
    "vjp_under_no_grad": (_vjp_under_no_grad, _vector),
    "vjp_pullback_called_twice": (_vjp_pullback_called_twice, _vector),
    "vjp_of_input_requiring_grad": (
        lambda x: torch.func.vjp(lambda a: a**2, x)[1](torch.ones_like(x))[0].sum(),
        lambda: (torch.randn(3, requires_grad=True),),
    ),
    "jacrev_of_argnum_tuple": (_jacrev_of_argnum_tuple, _matrix_and_vector),
    "jacfwd_of_argnum_tuple": (_jacfwd_of_argnum_tuple, _matrix_and_vector),
    "jacrev_of_one_argnum_in_a_tuple": (
        lambda x, y: torch.func.jacrev(lambda a, b: a.sum() * b, argnums=(1,))(x, y),
        _matrix_and_vector,
    ),
    "jacrev_with_tuple_aux": (_jacrev_with_tuple_aux, _matrix_and_vector),
    "jacrev_with_aux_of_one_argnum": (_jacrev_with_aux_of_one_argnum, _matrix_and_vector),
    "jacfwd_with_dict_aux": (_jacfwd_with_dict_aux, _matrix_and_vector),
    "jacfwd_with_aux_of_one_argnum": (_jacfwd_with_aux_of_one_argnum, _matrix_and_vector),
    "jacrev_of_argnum_tuple_under_no_grad": (
        _jacrev_of_argnum_tuple_under_no_grad,
        _matrix_and_vector,
    ),
    "jacfwd_of_jacrev_of_argnum_tuple": (_jacfwd_of_jacrev_of_argnum_tuple, _matrix_and_vector),
    "hessian_of_argnum_tuple": (_hessian_of_argnum_tuple, _matrix_and_vector),
    "jacrev_of_closure_with_argnum_tuple": (
        _jacrev_of_closure_with_argnum_tuple,
        _matrix_and_vector,
    ),
}


@pytest.mark.parametrize("name", list(TRACED_PROGRAMS))
def test_traced_transform_counts_ops_like_torch(name):
    fn, make_args = TRACED_PROGRAMS[name]
    check_like_torch(fn, make_args)


def test_vmap_batch_size_becomes_dynamic_like_torch():
    sizes = iter([2, 3, 4, 2, 3, 4])
    check_like_torch(
        _vmap_closure_then_ops,
        lambda: (torch.randn(next(sizes), 3), torch.ones(3, 3)),
        calls=3,
    )


def test_cond_with_python_bool_inlines_the_branch_like_torch():
    flags = [True, False, True, False]
    pending = [(torch.randn(3), flag) for flag in flags]
    pending += pending
    check_like_torch(cond_on_bool, lambda: pending.pop(0), calls=len(flags))


def test_cond_takes_the_branch_of_each_call():
    compiled = dynamo_capture.optimize(cond_on_tensor, backend=lambda gm, ex: gm.forward)
    for x in (torch.ones(3), -torch.ones(3), torch.randn(3)):
        torch.testing.assert_close(compiled(x), cond_on_tensor(x))


def test_grad_of_closure_over_frame_tensor_is_traced_into_the_graph_like_torch():
    def closure(x, w):
        return torch.func.grad(lambda t: (t * w).sum())(x) + 1

    counter = check_like_torch(closure, lambda: (torch.randn(3), torch.randn(3)))
    assert counter.frame_count == 1


def test_transform_of_a_closure_returned_from_the_frame_runs_it_eagerly():
    def returns_transform(x, w):
        return torch.func.grad(lambda t: (t * w).sum()), x + 1

    compiled = dynamo_capture.optimize(returns_transform, backend=lambda gm, ex: gm.forward)
    x, w = torch.randn(3), torch.randn(3)
    got_fn, got = compiled(x, w)
    expected_fn, expected = returns_transform(x, w)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_fn(x), expected_fn(x))
    assert compiled.graph_breaks


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_aot_backends_run_transforms_eagerly(backend):
    import ember

    for fn, make_args in (PROGRAMS["grad"][:2], PROGRAMS["cond_tensor_predicate"][:2]):
        compiled = ember.compile(fn, backend=backend)
        args = make_args()
        torch.testing.assert_close(compiled(*args), fn(*args))


def _cond_pair(x):
    a, b = torch.cond(x.sum() > 0, lambda t: (t.sin(), t + 1), lambda t: (t.cos(), t - 1), (x,))
    return a * b


def _cond_list(x):
    return torch.cond(x.mean() > 0, lambda t: [t.exp()], lambda t: [t.neg()], (x,))


@pytest.mark.parametrize("fn", [_cond_pair, _cond_list], ids=["pair", "list"])
def test_cond_outputs_are_read_by_getitem_nodes_like_torch(fn):
    check_like_torch(fn, _vector)


def _jacfwd_of_closure_two_cells(x, w, b):
    return torch.func.jacfwd(lambda a: (a @ w + b).tanh())(x)


def _jvp_of_closure(x, w):
    out, tangent = torch.func.jvp(lambda a: a * w, (x,), (torch.ones_like(x),))
    return out + tangent


def _closure_cell_rebound_before_the_call(x):
    w = x
    jacobian = torch.func.jacrev(lambda a: (a * w).sin())
    w = x * 2  # the call reads the cell as it is now, as eager does
    return jacobian(x)


CLOSURE_PROGRAMS = {
    "jacrev_of_closure": (_jacrev_of_closure, lambda: (torch.randn(3), torch.randn(3))),
    "jacfwd_of_closure_two_cells": (
        _jacfwd_of_closure_two_cells,
        lambda: (torch.randn(3), torch.randn(3, 3), torch.randn(3)),
    ),
    "hessian_of_closure_with_constant_cell": (_hessian_of_closure_with_constant_cell, _vector),
    "jvp_of_closure": (_jvp_of_closure, lambda: (torch.randn(3), torch.randn(3))),
    "closure_cell_rebound_before_the_call": (_closure_cell_rebound_before_the_call, _vector),
}


@pytest.mark.parametrize("name", list(CLOSURE_PROGRAMS))
def test_transform_of_closure_over_tensors_is_one_node_like_torch_graph_count(name):
    fn, make_args = CLOSURE_PROGRAMS[name]
    check_like_torch(fn, make_args, ops=False)


def test_vjp_leaves_functorch_levels_as_they_were():
    compiled = dynamo_capture.optimize(_vjp_of_closure, backend=lambda gm, ex: gm.forward)
    for _ in range(2):
        x, w = torch.randn(3), torch.randn(3)
        torch.testing.assert_close(compiled(x, w), _vjp_of_closure(x, w))
        assert torch._C._functorch.maybe_current_level() is None


def test_pullback_returned_from_the_frame_runs_eagerly():
    def returned(x):
        return torch.func.vjp(torch.sin, x)

    x = torch.randn(3)
    out, pullback = dynamo_capture.optimize(returned, backend=lambda gm, ex: gm.forward)(x)
    torch.testing.assert_close(out, x.sin())
    torch.testing.assert_close(pullback(torch.ones(3))[0], x.cos())
    assert torch._C._functorch.maybe_current_level() is None


def _jacfwd_inside_jvp(x):
    return torch.func.jvp(lambda a: torch.func.jacfwd(torch.sin)(a).sum(0), (x,), (x,))


def _opaque_jacfwd_inside_jvp(x):
    def inner(a):
        return torch.func.jacfwd(torch.mul, argnums=(0, 1))(a, a)[0].sum(0)

    return torch.func.jvp(inner, (x,), (x,))


def test_transform_node_inside_traced_jvp_runs_eagerly():
    """torch's own jacfwd (an opaque node) inside a traced jvp would open a second dual
    level: the frame runs it eagerly; a jacfwd traced here shares the jvp's level."""
    check_like_torch(_jacfwd_inside_jvp, _vector)
    compiled = dynamo_capture.optimize(_opaque_jacfwd_inside_jvp, backend=lambda gm, ex: gm.forward)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), _opaque_jacfwd_inside_jvp(x))
        assert torch._C._functorch.maybe_current_level() is None
