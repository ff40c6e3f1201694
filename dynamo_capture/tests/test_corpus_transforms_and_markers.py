"""Higher-order ops, function transforms and compiler markers: ember's graph and op
counts equal torch.compile's, its results eager's (programcheck.check_program_like_torch).

    torch.cond: closures over tensors and locals, several outputs and operands, nested,
        a Python bool predicate, functorch's import, gradients through it; branches
        closing over a module (`self`, an argument) or that are a module's methods
    torch.utils.checkpoint.checkpoint(use_reentrant=False) of functions and modules
    torch.func.grad / grad_and_value / vmap (in_dims, out_dims, nested, of a module) /
        jacrev / jacfwd / hessian / vjp / jvp inside the compiled function
    torch.autograd.grad in the frame: a graph break at the call, its result handed on
    torch.compiler.disable on functions, modules, methods and forwards: a graph break
        at the call itself, its arguments computed in the graph before and its result
        handed to the one after (in frames with free variables too)
"""

from __future__ import annotations

import pytest
import torch
from programcheck import check_program_like_torch, program_table
from torch import nn
from torch.utils.checkpoint import checkpoint

import dynamo_capture  # noqa: F401

PROGRAMS, _program = program_table()


def x4():
    return (torch.linspace(-2, 2, 16).reshape(4, 4),)


def x4g():
    return (torch.linspace(-2, 2, 16).reshape(4, 4).requires_grad_(),)


# ---- cond ----
@_program
def cond_closure_tensor():
    c = torch.tensor(3.0)

    def fn(x):
        return torch.cond(x.sum() > 0, lambda x: x * c, lambda x: x - c, (x,))

    return dict(fn=fn, args=lambda: (torch.ones(4),))


@_program
def cond_closure_both_branches_neg():
    c = torch.tensor(3.0)

    def fn(x):
        return torch.cond(x.sum() > 0, lambda x: x * c, lambda x: x - c, (x,))

    return dict(fn=fn, args=lambda: (-torch.ones(4),))


@_program
def cond_python_bool_pred():
    def fn(x, flag):
        return torch.cond(flag, lambda x: x.sin(), lambda x: x.cos(), (x,))

    return dict(fn=fn, args=lambda: (torch.ones(4), True))


@_program
def cond_closure_over_local():
    def fn(x):
        y = x * 2
        return torch.cond(x.sum() > 0, lambda a: a + y, lambda a: a - y, (x,))

    return dict(fn=fn, args=lambda: (torch.ones(4),))


@_program
def cond_multiple_outputs():
    def fn(x):
        return torch.cond(x.mean() > 0, lambda a: (a + 1, a * 2), lambda a: (a - 1, a / 2), (x,))

    return dict(fn=fn, args=x4)


@_program
def cond_nested():
    def inner_t(a):
        return torch.cond(a.max() > 1, lambda b: b * 10, lambda b: b * 20, (a,))

    def fn(x):
        return torch.cond(x.sum() > 0, inner_t, lambda a: a.neg(), (x,))

    return dict(fn=fn, args=x4)


@_program
def cond_operands_two():
    def fn(x, y):
        return torch.cond(x.sum() > y.sum(), lambda a, b: a + b, lambda a, b: a - b, (x, y))

    return dict(fn=fn, args=lambda: (torch.ones(3), torch.arange(3.0)))


@_program
def cond_functorch_import():
    from functorch.experimental.control_flow import cond

    def fn(x):
        return cond(x.sum() > 0, lambda a: a.exp(), lambda a: a.log1p(), [x])

    return dict(fn=fn, args=lambda: (torch.ones(4),))


@_program
def cond_grad():
    def fn(x):
        y = torch.cond(x.sum() > 0, lambda a: a.sin(), lambda a: a.cos(), (x,))
        return y

    return dict(fn=fn, args=x4g)


class _CondOverSelf(nn.Module):
    """Branches closing over `self` (its submodule's parameters)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(
            x.sum() > 0, lambda a: self.lin(a).relu(), lambda a: self.lin(a).sigmoid(), (x,)
        )


class _CondOfMethods(nn.Module):
    """Branches that are the module's own methods."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def positive(self, a):
        return self.lin(a)

    def negative(self, a):
        return -self.lin(a).tanh()

    def forward(self, x):
        return torch.cond(x.sum() > 0, self.positive, self.negative, (x,))


@_program
def cond_branches_close_over_self():
    torch.manual_seed(0)
    model = _CondOverSelf()
    return dict(fn=model, args=x4g)


@_program
def cond_branches_close_over_self_negative():
    torch.manual_seed(0)
    model = _CondOverSelf()
    return dict(fn=model, args=lambda: (-x4g()[0],))


@_program
def cond_branches_are_methods():
    torch.manual_seed(0)
    model = _CondOfMethods()
    return dict(fn=model, args=x4g)


@_program
def cond_branches_close_over_an_argument_module():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)

    def fn(module, x):
        return torch.cond(x.mean() > 0, lambda a: module(a) * 2, lambda a: a.cos(), (x,))

    return dict(fn=fn, args=lambda: (lin, *x4g()))


@_program
def cond_nested_over_self():
    torch.manual_seed(0)
    model = _CondOverSelf()

    def fn(x):
        return torch.cond(x.sum() < 0, lambda a: model(a) * 2, lambda a: a.exp(), (x,))

    return dict(fn=fn, args=lambda: (-x4g()[0],))


# ---- checkpoint ----
@_program
def ckpt_nonreentrant_fn():
    def body(a):
        return a.sin().cos()

    def fn(x):
        return checkpoint(body, x, use_reentrant=False) + 1

    return dict(fn=fn, args=x4g)


@_program
def ckpt_nonreentrant_module():
    torch.manual_seed(0)
    lin = nn.Sequential(nn.Linear(4, 4), nn.GELU())

    def fn(x):
        return checkpoint(lin, x, use_reentrant=False).sum()

    return dict(fn=fn, args=x4g)


@_program
def ckpt_twice():
    def body(a):
        return a.tanh() * 2

    def fn(x):
        y = checkpoint(body, x, use_reentrant=False)
        return checkpoint(body, y, use_reentrant=False)

    return dict(fn=fn, args=x4g)


# ---- func transforms ----
@_program
def func_grad_simple():
    def fn(x):
        return torch.func.grad(lambda a: a.sin().sum())(x)

    return dict(fn=fn, args=x4)


@_program
def func_grad_argnums():
    def fn(x, y):
        return torch.func.grad(lambda a, b: (a * b).sum(), argnums=(0, 1))(x, y)

    return dict(fn=fn, args=lambda: (torch.ones(3), torch.arange(3.0)))


@_program
def func_grad_has_aux():
    def fn(x):
        return torch.func.grad(lambda a: (a.pow(2).sum(), a.mean()), has_aux=True)(x)

    return dict(fn=fn, args=x4)


@_program
def func_grad_and_value():
    def fn(x):
        return torch.func.grad_and_value(lambda a: a.exp().sum())(x)

    return dict(fn=fn, args=x4)


@_program
def func_grad_closure():
    w = torch.linspace(0, 1, 4)

    def fn(x):
        return torch.func.grad(lambda a: (a @ w).sum())(x)

    return dict(fn=fn, args=x4)


@_program
def func_vmap_simple():
    def fn(x):
        return torch.func.vmap(lambda r: r.sum() * r)(x)

    return dict(fn=fn, args=x4)


@_program
def func_vmap_in_dims():
    def fn(x, y):
        return torch.vmap(lambda a, b: a * b, in_dims=(0, None))(x, y)

    return dict(fn=fn, args=lambda: (torch.ones(3, 4), torch.arange(4.0)))


@_program
def func_vmap_out_dims():
    def fn(x):
        return torch.vmap(lambda a: a * 2, out_dims=1)(x)

    return dict(fn=fn, args=lambda: (torch.arange(6.0).reshape(2, 3),))


@_program
def func_vmap_nested():
    def fn(x):
        return torch.vmap(torch.vmap(lambda a: a.sin()))(x)

    return dict(fn=fn, args=x4)


@_program
def func_vmap_module():
    torch.manual_seed(0)
    lin = nn.Linear(4, 2)

    def fn(x):
        return torch.vmap(lin)(x)

    return dict(fn=fn, args=x4)


@_program
def func_jacrev():
    def fn(x):
        return torch.func.jacrev(lambda a: a.sin() * a)(x)

    return dict(fn=fn, args=lambda: (torch.linspace(0, 1, 3),))


@_program
def func_jacfwd():
    def fn(x):
        return torch.func.jacfwd(lambda a: a.cos())(x)

    return dict(fn=fn, args=lambda: (torch.linspace(0, 1, 3),))


@_program
def func_vmap_grad():
    def fn(x):
        return torch.vmap(torch.func.grad(lambda a: a.pow(3).sum()))(x)

    return dict(fn=fn, args=x4)


@_program
def func_hessian():
    def fn(x):
        return torch.func.hessian(lambda a: a.pow(3).sum())(x)

    return dict(fn=fn, args=lambda: (torch.linspace(0, 1, 3),))


@_program
def func_vjp():
    def fn(x):
        out, vjp_fn = torch.func.vjp(lambda a: a.sin(), x)
        return out, vjp_fn(torch.ones_like(out))

    return dict(fn=fn, args=x4)


@_program
def func_jvp():
    def fn(x):
        return torch.func.jvp(lambda a: a.exp(), (x,), (torch.ones_like(x),))

    return dict(fn=fn, args=x4)


# ---- autograd.grad inside frame ----
@_program
def agrad_simple():
    def fn(x):
        y = (x * x).sum()
        return torch.autograd.grad(y, x)

    return dict(fn=fn, args=x4g)


@_program
def agrad_create_graph():
    def fn(x):
        y = x.pow(3).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        return g.sum()

    return dict(fn=fn, args=x4g)


@_program
def agrad_backward_in_frame():
    def fn(x):
        y = (x * 3).sum()
        y.backward()
        return x.grad

    return dict(fn=fn, args=x4g)


# ---- compiler.disable ----
@_program
def disable_user_fn():
    @torch.compiler.disable
    def helper(a):
        return a * 2

    def fn(x):
        return helper(x.sin()).cos()

    return dict(fn=fn, args=x4)


@_program
def disable_module_instance():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    lin_d = torch.compiler.disable(lin)

    def fn(x):
        return lin_d(x.relu()) + 1

    return dict(fn=fn, args=x4)


@_program
def disable_module_forward_method():
    class M(nn.Module):
        @torch.compiler.disable
        def forward(s, x):
            return x * 3

    m = M()

    def fn(x):
        return m(x + 1) - 1

    return dict(fn=fn, args=x4)


@_program
def disable_nested_calls():
    @torch.compiler.disable
    def h1(a):
        return a + 1

    def h2(a):
        return h1(a) * 2

    def fn(x):
        return h2(x).sum() + h2(x).mean()

    return dict(fn=fn, args=x4)


@_program
def disable_returns_python():
    @torch.compiler.disable
    def count(a):
        return int(a.numel())

    def fn(x):
        return x * count(x)

    return dict(fn=fn, args=x4)


@_program
def disallow_user_fn():
    def fn(x):
        return _dis_fn(x.sin()).cos()

    return dict(fn=fn, args=x4)


def _dis_fn(a):
    return a * 5


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_like_torch(name):
    check_program_like_torch(PROGRAMS[name])
