"""Context managers across graph breaks and torch.func transforms in compiled code:
ember's graph and op counts equal torch.compile's (counting backends), its results eager's,
and the state left after each call (grad mode, autocast, default dtype, inference mode)
the state before it (torchcheck.check_like_torch).

    (a) contextlib.contextmanager generators with a break in the block, nested, raising
        (swallowed by the generator, finally blocks); contextlib.suppress / nullcontext
        (enter_result) / ExitStack (break inside, pop_all, callbacks) / redirect_stdout;
        user classes whose __exit__ swallows (returns True) or not; grad-mode classes as
        decorators (a break in the callee), set_grad_enabled nested around a break,
        inference_mode nested off; autocast as a decorator with a break; sdpa_kernel
        with a break and as a decorator; record_function ignored; fork_rng; default
        dtype set across a break; exceptions leaving no_grad / autocast blocks (before
        and after a break); several items in one `with`; a global no_grad object;
        continue / break / return leaving blocks; a global function under
        `@torch.inference_mode()` breaking inside (torch's wrapper runs eagerly, the
        function compiled by itself)
    (b) torch.func.grad / grad_and_value / vjp / jvp / jacrev / jacfwd / hessian of
        modules, functional_call over parameters and buffers (per-sample gradients,
        stack_module_state ensembles), vmap with pytree in_dims (tuples, lists, dicts of
        parameters), keyword arguments, chunk_size, out_dims tuples, nested; vjp,
        jacrev, jacfwd and hessian of dicts of tensors; grad of a module's method and
        inside its forward; breaks before, after and inside the transformed function

Programs where torch.compile itself differs (it raises, gives another value, or compiles
frames capture does not see) or where ember's graphs differ from it (each with its
reason in DIFFERENCES) are checked against eager, with ember's own graph count (DIFFERS).
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest
import torch
import torch._dynamo
from torch import nn
from torch.func import functional_call
from torchcheck import check_like_torch, program_registry

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same

PROGRAMS, program = program_registry()
DIFFERS, differs = program_registry()
# ===== (a) context managers ==========================================================


def v3():
    return torch.randn(3)


def v3g():
    return torch.randn(3, requires_grad=True)


def m4():
    return torch.randn(4, 4)


def q4():
    return torch.randn(1, 2, 4, 8)


@contextlib.contextmanager
def no_grad_generator():
    with torch.no_grad():
        yield 2


@contextlib.contextmanager
def scaled(k):
    yield k


@contextlib.contextmanager
def swallow_value_error(log):
    try:
        yield
    except ValueError:
        log.append("swallowed")


@contextlib.contextmanager
def logged_finally(log):
    log.append("enter")
    try:
        yield len(log)
    finally:
        log.append("exit")


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@program(v3g)
def generator_context_break_inside(x):
    with no_grad_generator() as k:
        y = x * k
        torch._dynamo.graph_break()
        y = y + 1
    return y, y.requires_grad, x.sin()


@program(v3g)
def generator_contexts_nested_break_inner(x):
    with scaled(3) as a:
        x = x * a
        with no_grad_generator() as b:
            y = x * b
            torch._dynamo.graph_break()
            y = y.cos()
        x = x + y
    return x


@program(v3)
def generator_context_swallows_raised(x):
    log = []
    with swallow_value_error(log):
        x = x + 1
        raise ValueError("inside")
    return x * 2, log


@program(v3)
def generator_context_finally_on_raise(x):
    log = []
    try:
        with logged_finally(log) as n:
            x = x * n
            raise KeyError("k")
    except KeyError:
        x = x - 1
    return x, log


@program(v3)
def generator_context_finally_break_inside(x):
    log = []
    with logged_finally(log) as n:
        x = x * n
        print("in block")
        x = x + 1
    return x, log


@program(v3)
def generator_context_default_dtype(x):
    with default_dtype(torch.float64):
        y = torch.ones(3) + x
    return y, torch.ones(2).dtype


@program(v3)
def suppress_raised(x):
    with contextlib.suppress(ValueError):
        x = x + 1
        raise ValueError("gone")
    return x * 2


@program(v3)
def suppress_nothing_raised(x):
    with contextlib.suppress(KeyError, IndexError):
        x = x.sin()
    return x + 1


@program(v3)
def suppress_with_break(x):
    with contextlib.suppress(IndexError):
        x = x + 1
        torch._dynamo.graph_break()
        x = x * [1.0, 2.0][2]
    return x - 1


@program(v3)
def nullcontext_enter_result(x):
    with contextlib.nullcontext(x * 2) as y:
        z = y + 1
    return z


@program(v3)
def exit_stack_break_inside(x):
    log = []
    with contextlib.ExitStack() as stack:
        k = stack.enter_context(logged_finally(log))
        stack.enter_context(torch.no_grad())
        x = x * k
        torch._dynamo.graph_break()
        x = x + 1
    return x, log


@program(v3)
def exit_stack_pop_all(x):
    log = []
    with contextlib.ExitStack() as stack:
        stack.callback(log.append, "a")
        moved = stack.pop_all()
    x = x + 1
    moved.close()
    return x, log


@program(v3)
def redirect_stdout_with_break(x):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print("hidden")
        x = x + 1
    return x, buffer.getvalue()


class SwallowAll:
    def __init__(self):
        self.entered = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, exc_type, exc, tb):
        return True


class KeepErrors:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("in")
        return 5

    def __exit__(self, exc_type, exc, tb):
        self.log.append(exc_type.__name__ if exc_type else "clean")
        return False


@program(v3)
def user_exit_true_swallows(x):
    ctx = SwallowAll()
    with ctx:
        x = x + 1
        raise RuntimeError("swallowed")
    return x * 2, ctx.entered


@program(v3)
def user_exit_false_propagates(x):
    log = []
    try:
        with KeepErrors(log) as k:
            x = x * k
            raise IndexError("out")
    except IndexError:
        x = x + 1
    return x, log


@program(v3)
def user_context_break_inside(x):
    log = []
    with KeepErrors(log) as k:
        x = x * k
        torch._dynamo.graph_break()
        x = x.sin()
    return x, log


@differs(m4)
def autocast_entered_by_calls(x):
    ctx = torch.autocast("cpu", dtype=torch.bfloat16)
    ctx.__enter__()
    y = torch.mm(x, x)
    ctx.__exit__(None, None, None)
    return y, torch.mm(x, x)


@differs(v3g)
def no_grad_entered_by_calls(x):
    ctx = torch.no_grad()
    ctx.__enter__()
    y = x * 2
    ctx.__exit__(None, None, None)
    return y, y.requires_grad, (x * 3).requires_grad


@differs(v3g)
def enable_grad_entered_by_calls_in_no_grad(x):
    with torch.no_grad():
        ctx = torch.enable_grad()
        ctx.__enter__()
        y = x * 2
        ctx.__exit__(None, None, None)
        z = x * 3
    return y, z


@torch.enable_grad()
def _enabled_doubled(t):
    return t * 2


@torch.set_grad_enabled(False)
def _disabled_tripled(t):
    return t * 3


@torch.inference_mode()
def _inference_quadrupled(t):
    return t * 4


@torch.no_grad()
def _no_grad_with_break(t):
    t = t * 2
    torch._dynamo.graph_break()
    return t + 1


@differs(v3g)
def grad_decorators_in_no_grad(x):
    with torch.no_grad():
        a = _enabled_doubled(x)
    b = _disabled_tripled(x)
    return a, b, torch.is_grad_enabled()


@program(v3g)
def no_grad_decorated_callee_breaks(x):
    y = _no_grad_with_break(x)
    return y, y.requires_grad, x.cos()


@program(v3)
def inference_mode_decorated_callee(x):
    y = _inference_quadrupled(x)
    return y + 1


@program(v3)
def inference_mode_nested_off(x):
    with torch.inference_mode():
        y = x * 2
        with torch.inference_mode(False):
            z = x * 3
    return y, z, torch.is_inference_mode_enabled()


@program(v3g)
def set_grad_enabled_nested_break(x):
    with torch.set_grad_enabled(False):
        y = x * 2
        with torch.set_grad_enabled(True):
            torch._dynamo.graph_break()
            z = x * 3
        w = x * 4
    return y, z, w


@program(m4)
def autocast_decorated_callee_breaks(x):
    @torch.autocast("cpu", dtype=torch.bfloat16)
    def inner(t):
        t = torch.mm(t, t)
        torch._dynamo.graph_break()
        return torch.mm(t, t)

    return inner(x), torch.mm(x, x)


@program(q4)
def sdpa_kernel_list_with_break(q):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]):
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        torch._dynamo.graph_break()
        b = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    return a + b


@program(v3)
def record_function_block(x):
    with torch.autograd.profiler.record_function("outer"):
        y = x.sin()
        with torch.profiler.record_function("inner"):
            y = y * 2
    return y + 1


@differs(v3)
def record_function_entered_by_calls(x):
    rf = torch.profiler.record_function("manual")
    rf.__enter__()
    y = x.cos()
    rf.__exit__(None, None, None)
    return y * 3


@differs(v3g)
def saved_tensors_hooks_block(x):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 2, lambda t: t):
        y = x.sin()
    return y


@program(v3)
def fork_rng_block(x):
    with torch.random.fork_rng():
        torch.manual_seed(1)
        a = torch.randn(3)
    return x + a


@program(v3)
def return_inside_with_after_break(x):
    with torch.no_grad():
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2


@program(v3g)
def with_in_try_finally_break(x):
    log = []
    try:
        with torch.no_grad():
            y = x * 2
            torch._dynamo.graph_break()
            y = y + 1
    finally:
        log.append(torch.is_grad_enabled())
    return y, log


@program(v3g)
def no_grad_in_loop_with_break(x):
    out = []
    for i in range(2):
        with torch.set_grad_enabled(i == 0):
            y = x * (i + 1)
            torch._dynamo.graph_break()
            out.append(y.requires_grad)
    return y, out


@program(v3)
def default_dtype_set_across_break(x):
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    a = torch.ones(2)
    torch._dynamo.graph_break()
    b = torch.zeros(2)
    torch.set_default_dtype(old)
    return x + 1, a.dtype, b.dtype


@program(m4)
def autocast_exception_caught_outside(x):
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.mm(x, x)
            raise ValueError(y.dtype)
    except ValueError:
        pass
    return y, torch.mm(x, x), torch.is_autocast_enabled("cpu")


@program(v3g)
def no_grad_exception_caught_outside(x):
    try:
        with torch.no_grad():
            y = x * 2
            raise KeyError("k")
    except KeyError:
        z = x * 3
    return y, z, torch.is_grad_enabled()


@program(v3)
def fork_rng_with_break(x):
    with torch.random.fork_rng():
        torch.manual_seed(3)
        torch._dynamo.graph_break()
        a = torch.rand(3)
    return x * a, torch.rand(3)


@program(v3)
def generator_context_swallows_after_break(x):
    log = []
    with swallow_value_error(log):
        x = x + 1
        torch._dynamo.graph_break()
        raise ValueError("late")
    return x, log


@program(v3g)
def inference_mode_with_break_inside(x):
    with torch.inference_mode():
        y = x * 2
        torch._dynamo.graph_break()
        z = y + 1
    return z, z.is_inference()


@program(v3)
def exit_stack_callback_with_break(x):
    log = []
    with contextlib.ExitStack() as stack:
        stack.callback(log.append, "closed")
        x = x.sin()
        torch._dynamo.graph_break()
        x = x + 1
    return x, log


@program(q4)
def sdpa_kernel_decorated_callee(q):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    @sdpa_kernel(SDPBackend.MATH)
    def attend(t):
        return torch.nn.functional.scaled_dot_product_attention(t, t, t)

    return attend(q) * 2


@program(v3g)
def saved_tensors_hooks_with_break(x):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        y = x.sin()
        torch._dynamo.graph_break()
        z = y.cos()
    return z


# ----- more contexts: several items, outside objects, exits by continue/break/return ----
NO_GRAD = torch.no_grad()
COUNTS = {"n": 0}


@contextlib.contextmanager
def counted():
    COUNTS["n"] += 1
    try:
        yield COUNTS["n"]
    finally:
        COUNTS["n"] -= 1


@contextlib.contextmanager
def shifted(t):
    yield t + 1


class Swallow:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


@program(v3g)
def set_grad_enabled_called_then_break(x):
    torch.set_grad_enabled(False)
    y = x * 2
    torch._dynamo.graph_break()
    z = x * 3
    return y, z


@program(v3g, m4)
def two_items_one_with_break(x, m):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        a = torch.mm(m, m)
        torch._dynamo.graph_break()
        b = x * 2
    return a, b, torch.mm(m, m)


@program(v3g)
def global_no_grad_object(x):
    with NO_GRAD:
        y = x * 2
    return y, x * 3


@program(v3g)
def global_no_grad_object_break_inside(x):
    with NO_GRAD:
        y = x * 2
        torch._dynamo.graph_break()
        z = x * 3
    return y, z


@program(v3)
def generator_finally_global_break(x):
    with counted() as n:
        x = x * n
        torch._dynamo.graph_break()
        x = x + COUNTS["n"]
    return x, COUNTS["n"]


@program(v3)
def generator_yields_tensor_break(x):
    with shifted(x) as y:
        torch._dynamo.graph_break()
        z = y * 2
    return z


@program(v3)
def swallow_after_break(x):
    with Swallow():
        x = x + 1
        torch._dynamo.graph_break()
        raise ValueError("swallowed")
    return x


@program(v3)
def suppress_raise_after_break(x):
    with contextlib.suppress(KeyError):
        x = x * 2
        torch._dynamo.graph_break()
        raise KeyError("k")
    return x + 1


@program(v3g)
def with_in_loop_continue_break(x):
    out = []
    for i in range(4):
        with torch.no_grad():
            if i == 1:
                continue
            if i == 3:
                break
            out.append(x * i)
    return out, torch.is_grad_enabled()


@program(v3g, m4)
def return_from_nested_with(x, m):
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.mm(m, m), x * 2


@torch.inference_mode()
def _inference_callee_breaks(t):
    t = t * 2
    torch._dynamo.graph_break()
    return t + 1


@program(v3)
def inference_decorated_callee_breaks(x):
    y = _inference_callee_breaks(x)
    return y, y.is_inference()


@program(m4)
def autocast_disabled_with_break(m):
    with torch.autocast("cpu", enabled=False):
        a = torch.mm(m, m)
        torch._dynamo.graph_break()
        b = torch.mm(m, m)
    return a, b


@program(v3g)
def enable_grad_inside_no_grad_break(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
            torch._dynamo.graph_break()
            z = y * 3
        w = x * 4
    return y, z, w


@program(v3)
def default_dtype_generator_with_break(x):
    @contextlib.contextmanager
    def dtype(d):
        old = torch.get_default_dtype()
        torch.set_default_dtype(d)
        try:
            yield
        finally:
            torch.set_default_dtype(old)

    with dtype(torch.float64):
        a = torch.ones(2)
        torch._dynamo.graph_break()
        b = torch.ones(2)
    return x, a.dtype, b.dtype, torch.ones(1).dtype


@program(v3g)
def no_grad_exception_after_break_caught(x):
    try:
        with torch.no_grad():
            y = x * 2
            torch._dynamo.graph_break()
            raise RuntimeError("after")
    except RuntimeError:
        z = x * 3
    return y, z


# ===== (b) torch.func transforms =====================================================


with torch.random.fork_rng():  # the modules' weights, without touching the global RNG
    torch.manual_seed(0)
    LINEAR = nn.Linear(4, 3)
    MLP = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    BN = nn.BatchNorm1d(4).eval()
    ENSEMBLE = [nn.Linear(4, 2) for _ in range(3)]


def v4():
    return torch.randn(4)


def b24():
    return torch.randn(2, 4)


def b34():
    return torch.randn(3, 4)


@program(v4)
def grad_of_module_output(x):
    return torch.func.grad(lambda t: LINEAR(t).pow(2).sum())(x)


@program(b24)
def grad_wrt_params_functional_call(x):
    params = dict(LINEAR.named_parameters())

    def loss(p, t):
        return functional_call(LINEAR, p, (t,)).sum()

    grads = torch.func.grad(loss)(params, x)
    return grads["weight"], grads["bias"]


@program(b24)
def grad_and_value_functional_call_mlp(x):
    params = {k: v.detach() for k, v in MLP.named_parameters()}

    def loss(p):
        return functional_call(MLP, p, (x,)).pow(2).mean()

    grads, value = torch.func.grad_and_value(loss)(params)
    return value, [grads[k] for k in sorted(grads)]


@program(b24)
def functional_call_with_buffers(x):
    params = dict(BN.named_parameters())
    buffers = dict(BN.named_buffers())
    return functional_call(BN, (params, buffers), (x,))


@program(b24)
def functional_call_replaced_weight(x):
    return functional_call(LINEAR, {"weight": torch.ones(3, 4)}, (x,))


@program(b34)
def vmap_of_module(x):
    return torch.vmap(MLP)(x)


@program(b34)
def vmap_of_functional_call_per_sample_grads(x):
    params = {k: v.detach() for k, v in LINEAR.named_parameters()}

    def loss(p, t):
        return functional_call(LINEAR, p, (t.unsqueeze(0),)).sum()

    return torch.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, x)


@program(b34, lambda: torch.randn(4, 3))
def vmap_in_dims_zero_one(x, y):
    return torch.vmap(lambda a, b: a * b, in_dims=(0, 1))(x, y)


@program(b34)
def vmap_out_dims_tuple(x):
    return torch.vmap(lambda a: (a * 2, a.sum()), out_dims=(1, 0))(x)


@program(lambda: torch.randn(2, 3, 4))
def vmap_nested_in_dims(x):
    inner = torch.vmap(lambda r: r.sum(), in_dims=0)
    return torch.vmap(inner, in_dims=1)(x)


@program(b34, v4)
def vmap_dict_in_dims(x, y):
    def f(d):
        return d["a"] + d["b"]

    return torch.vmap(f, in_dims=({"a": 0, "b": None},))({"a": x, "b": y})


@program(b34)
def vmap_with_kwargs(x):
    def f(a, scale=1.0):
        return a * scale

    return torch.vmap(f)(x, scale=3.0)


@program(lambda: torch.randn(6, 4))
def vmap_chunk_size(x):
    return torch.vmap(lambda r: r.sin().sum(), chunk_size=2)(x)


@program(b34)
def vmap_randomness_same(x):
    return torch.vmap(lambda r: r + torch.rand(()), randomness="same")(x)


@program(b34)
def vmap_of_method(x):
    return torch.vmap(torch.Tensor.sum)(x)


@program(v4)
def jacrev_of_module(x):
    return torch.func.jacrev(LINEAR)(x)


@program(v4)
def jacfwd_of_module(x):
    return torch.func.jacfwd(MLP)(x)


@program(b24)
def jacrev_wrt_params(x):
    params = {k: v.detach() for k, v in LINEAR.named_parameters()}
    jac = torch.func.jacrev(lambda p: functional_call(LINEAR, p, (x,)))(params)
    return jac["weight"], jac["bias"]


@program(v4, v4)
def jacfwd_argnums_one(x, y):
    return torch.func.jacfwd(lambda a, b: a * b.sin(), argnums=1)(x, y)


@program(v4)
def hessian_of_module_loss(x):
    return torch.func.hessian(lambda t: MLP(t).pow(2).sum())(x)


@program(v4)
def grad_has_aux_tuple(x):
    def f(t):
        y = t.sin()
        return y.sum(), (y, t.cos())

    g, (a, b) = torch.func.grad(f, has_aux=True)(x)
    return g, a, b


@program(v4)
def vjp_of_module(x):
    out, pullback = torch.func.vjp(MLP, x)
    (g,) = pullback(torch.ones_like(out))
    return out, g


@program(v4)
def jvp_has_aux(x):
    def f(t):
        return t.exp(), t.sum()

    out, tangent, aux = torch.func.jvp(f, (x,), (torch.ones_like(x),), has_aux=True)
    return out, tangent, aux


@differs(v4)
def linearize_sin(x):
    out, jvp_fn = torch.func.linearize(torch.sin, x)
    return out, jvp_fn(torch.ones_like(x))


@program(v4)
def grad_then_break(x):
    g = torch.func.grad(lambda t: t.pow(3).sum())(x)
    torch._dynamo.graph_break()
    return g + 1


@program(v4)
def grad_in_no_grad_block(x):
    with torch.no_grad():
        g = torch.func.grad(lambda t: (t * t).sum())(x)
    return g, g.requires_grad


@program(v4)
def grad_body_prints(x):
    def f(t):
        print("inside")
        return t.sin().sum()

    return torch.func.grad(f)(x)


@program(b34)
def vmap_body_breaks(x):
    def f(r):
        torch._dynamo.graph_break()
        return r * 2

    return torch.vmap(f)(x)


@program(b34)
def vmap_grad_of_module(x):
    return torch.vmap(torch.func.grad(lambda t: MLP(t).sum()))(x)


@program(v4)
def jacrev_jacfwd_hessian_of_mlp(x):
    return torch.func.jacfwd(torch.func.jacrev(lambda t: MLP(t).sum()))(x)


@program(b34)
def functional_call_in_vmap_ensemble(x):
    models = [nn.Linear(4, 2) for _ in range(3)]
    params, buffers = torch.func.stack_module_state(models)
    base = models[0]

    def run(p, b, t):
        return functional_call(base, (p, b), (t,))

    return torch.vmap(run, in_dims=(0, 0, None))(params, buffers, x)


@program(v4)
def vjp_called_with_two_cotangents(x):
    out, pullback = torch.func.vjp(lambda t: (t.sin(), t.cos()), x)
    return pullback((torch.ones_like(x), torch.ones_like(x) * 2))


@program(v4)
def grad_of_grad_mode_inside(x):
    def f(t):
        with torch.no_grad():
            c = t * 2
        return (t * c).sum()

    return torch.func.grad(f)(x)


@program(b34)
def vmap_with_autocast_inside(x):
    def f(r):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.mv(r.unsqueeze(1).expand(4, 4), r)

    return torch.vmap(f)(x)


@program(v4)
def jvp_of_module(x):
    return torch.func.jvp(MLP, (x,), (torch.ones_like(x),))


@program(lambda: torch.randn(5, 3))
def vmap_chunk_size_uneven_out_dims(x):
    return torch.vmap(lambda r: (r * 2, r.sum()), chunk_size=2, out_dims=(1, 0))(x)


@program(lambda: torch.randn(4, 3), lambda: torch.randn(3))
def vmap_chunk_size_larger_than_batch(x, y):
    return torch.vmap(torch.mul, in_dims=(0, None), chunk_size=8)(x, y)


@program(lambda: torch.randn(2, 3), lambda: torch.randn(3, 2))
def vmap_nested_tuple_in_dims(x, y):
    def f(pair):
        a, b = pair
        return a * b

    return torch.vmap(f, in_dims=((0, 1),))((x, y))


@program(lambda: torch.randn(2, 3), lambda: torch.randn(2, 3))
def vmap_list_argument(x, y):
    return torch.vmap(lambda items: items[0] + items[1])([x, y])


@program(b34)
def stack_module_state_vmap_ensemble(x):
    params, buffers = torch.func.stack_module_state(ENSEMBLE)

    def run(p, b, t):
        return functional_call(ENSEMBLE[0], (p, b), (t,))

    return torch.vmap(run, in_dims=(0, 0, None))(params, buffers, x)


@program(v4, v4)
def grad_with_keyword_argument(x, w):
    return torch.func.grad(lambda t, weight=None: (t * weight).sin().sum())(x, weight=w)


@program(b34, v4)
def vmap_keyword_tensor_unbatched(x, w):
    return torch.vmap(lambda r, weight: r * weight)(x, weight=w)


@program(b34)
def vmap_in_dims_mismatch_raises(x):
    return torch.vmap(lambda r: r * 2, in_dims=(0, 0))(x)


@program(b34)
def vmap_over_a_batch_of_no_rows(x):
    # associative_scan's generic mode reaches these (a slice past the end)
    return torch.vmap(lambda a, b: a * b + 1)(x[3:], x[:0].cos())


# ----- more transforms: containers of tensors, modules' methods, unbatched outputs ------
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def loss(self, x):
        return self.lin(x).pow(2).sum()

    def forward(self, x):
        return torch.func.grad(self.loss)(x)


with torch.random.fork_rng():
    torch.manual_seed(1)
    MODEL = Model()


@program(b24)
def jacfwd_wrt_params(x):
    params = {k: v.detach() for k, v in LINEAR.named_parameters()}
    jac = torch.func.jacfwd(lambda p: functional_call(LINEAR, p, (x,)))(params)
    return jac["weight"], jac["bias"]


@program(b24)
def hessian_wrt_bias(x):
    params = {"bias": LINEAR.bias.detach()}
    return torch.func.hessian(lambda p: functional_call(LINEAR, p, (x,)).pow(2).sum())(params)


@program(v4)
def vjp_of_dict_primal(x):
    out, pullback = torch.func.vjp(lambda d: d["a"].sin() * d["b"], {"a": x, "b": x * 2})
    return out, pullback(torch.ones_like(out))


@program(v4)
def grad_of_module_method(x):
    return torch.func.grad(MODEL.loss)(x)


@program(v4)
def grad_inside_module_forward(x):
    return MODEL(x)


@program(lambda: torch.randn(3, 4, 2))
def vmap_negative_in_dim(x):
    return torch.vmap(lambda r: r.sum(0), in_dims=-1)(x)


@program(b34)
def vmap_out_dims_none_for_unbatched(x):
    c = torch.ones(2)
    return torch.vmap(lambda r: (r * 2, c), out_dims=(0, None))(x)


@program(b34)
def vmap_randomness_different(x):
    return torch.vmap(lambda r: r + torch.rand(4), randomness="different")(x).shape


@program(v4)
def grad_of_vector_output_raises(x):
    return torch.func.grad(lambda t: t.sin())(x)


@program(b34)
def vmap_returning_number_raises(x):
    return torch.vmap(lambda r: 3)(x)


@program(v4)
def jvp_of_closure_over_module(x):
    return torch.func.jvp(lambda t: LINEAR(t).tanh(), (x,), (torch.ones_like(x),))


@program(b34)
def vmap_of_jacrev(x):
    return torch.vmap(torch.func.jacrev(lambda t: t.sin().sum()))(x)


@program(v4)
def grad_argnums_tuple_of_dict_and_tensor(x):
    def f(d, t):
        return (d["w"] * t).sum()

    return torch.func.grad(f, argnums=(0, 1))({"w": x.cos()}, x)


@program(b34)
def vmap_inside_no_grad_with_break(x):
    with torch.no_grad():
        y = torch.vmap(lambda r: r * 2)(x)
        torch._dynamo.graph_break()
        z = torch.vmap(lambda r: r.sum())(y)
    return y, z


@program(v4)
def functional_call_strict_tie(x):
    return functional_call(MLP, {"0.weight": torch.ones(5, 4)}, (x,), strict=False)


@program(b34)
def vmap_of_functional_call_module_in_dims_none(x):
    params = dict(LINEAR.named_parameters())
    return torch.vmap(lambda p, t: functional_call(LINEAR, p, (t,)), in_dims=(None, 0))(params, x)


@program(b34)
def vmap_out_dims_none_for_batched_raises(x):
    return torch.vmap(lambda r: r * 2, out_dims=None)(x)


@program(b34, lambda: torch.randn(4))
def vmap_out_dims_none_returns_unbatched_argument(x, w):
    return torch.vmap(lambda r, v: (r.sum(), v), in_dims=(0, None), out_dims=(0, None))(x, w)


@differs(b34)
def vmap_out_dims_none_for_tensor_made_inside(x):
    return torch.vmap(lambda r: (r + 1, torch.zeros(2)), out_dims=(0, None))(x)


# ----- transforms made outside the frame, errors, containers given as arguments ---------
GRAD_SIN = torch.func.grad(lambda t: t.sin().sum())
VMAP_SUM = torch.vmap(lambda r: r.sum())


@program(v4)
def transform_made_outside(x):
    return GRAD_SIN(x) + 1


@program(b34)
def vmap_made_outside(x):
    return VMAP_SUM(x) * 2


@program(b34)
def vmap_local_called_twice(x):
    f = torch.vmap(lambda r: r * 2)
    return f(x) + f(x + 1)


@program(b34)
def vmap_data_dependent_branch_raises(x):
    def f(r):
        if r.sum() > 0:
            return r
        return -r

    return torch.vmap(f)(x)


@program(v4)
def grad_of_item_raises(x):
    return torch.func.grad(lambda t: t.sum() * t.sum().item())(x)


@program(v4)
def grad_argnums_out_of_range_raises(x):
    return torch.func.grad(lambda t: t.sum(), argnums=1)(x)


@program(b34)
def vmap_in_dims_list_raises(x):
    return torch.vmap(lambda r: r * 2, in_dims=[0])(x)


@program(v4)
def jacrev_has_aux_dict(x):
    return torch.func.jacrev(lambda t: (t.sin(), {"c": t.cos()}), has_aux=True)(x)


@differs(b34)
def vmap_of_batchnorm_eval(x):
    return torch.vmap(BN, in_dims=0)(x.unsqueeze(1))


@program(v4)
def grad_under_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        g = torch.func.grad(lambda t: (t * 2).sum())(x)
    return g


@program(lambda: {k: v.detach().clone() for k, v in LINEAR.named_parameters()}, b34)
def grad_of_params_dict_argument(params, x):
    return torch.func.grad(lambda p: functional_call(LINEAR, p, (x,)).sum())(params)


@program(lambda: {k: v.detach().clone() for k, v in LINEAR.named_parameters()}, b34)
def vmap_over_params_dict_argument(params, x):
    return torch.vmap(lambda t: functional_call(LINEAR, params, (t,)))(x)


@program(b34)
def vmap_returns_tuple_with_int_raises(x):
    return torch.vmap(lambda r: (r, 1))(x)


@program(v4)
def grad_of_closure_mutating_list(x):
    seen = []

    def f(t):
        seen.append(1)
        return t.sin().sum()

    return torch.func.grad(f)(x), len(seen)


@differs(b34)
def vmap_randomness_error_raises(x):
    return torch.vmap(lambda r: r + torch.rand(4))(x)


# ----- transforms inside contexts, contexts inside transformed functions -------------
@contextlib.contextmanager
def halved():
    yield 0.5


@program(v4)
def grad_inside_inference_mode(x):
    with torch.inference_mode():
        return torch.func.grad(lambda t: t.sin().sum())(x)


@program(b34)
def vmap_of_grad_in_no_grad(x):
    with torch.no_grad():
        return torch.vmap(torch.func.grad(lambda t: (t**3).sum()))(x)


@program(v4)
def jvp_under_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.func.jvp(torch.sin, (x,), (torch.ones_like(x),))


@program(b34)
def vmap_body_with_no_grad(x):
    def f(r):
        with torch.no_grad():
            return r * 2

    return torch.vmap(f)(x)


@program(b34)
def functional_call_in_no_grad_then_break(x):
    with torch.no_grad():
        y = functional_call(LINEAR, dict(LINEAR.named_parameters()), (x,))
    torch._dynamo.graph_break()
    return y, y.requires_grad


@program(v4)
def grad_with_generator_context_inside(x):
    def f(t):
        with halved() as k:
            return (t * k).sin().sum()

    return torch.func.grad(f)(x)


@program(b34)
def vmap_with_generator_context_inside(x):
    def f(r):
        with halved() as k:
            return r * k

    return torch.vmap(f)(x)


@program(v4)
def grad_then_exception_caught(x):
    try:
        g = torch.func.grad(lambda t: t.sum())(x)
        raise ValueError(g.shape)
    except ValueError:
        g = x * 0
    return g


# ===== the checks =======================================================================
def _state():
    return (
        torch.is_grad_enabled(),
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        torch.get_default_dtype(),
        torch.is_inference_mode_enabled(),
    )


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    before = _state()
    check_like_torch(fn, make_args)
    assert _state() == before, "a call left grad mode, autocast, default dtype or inference on"


# graphs ember compiles over two calls where torch.compile differs, and why
DIFFERENCES = {
    # torch.compile: AttributeError ('autocast' object has no attribute 'prev'): its
    # graph enters autocast, its eager part calls the object's own __exit__
    "autocast_entered_by_calls": 1,
    # torch.compile: the block's product requires grad (its graph leaves the mode on)
    "no_grad_entered_by_calls": 2,
    # a break inside a `with` block that would undo the mode the call set: the frame
    # runs eagerly (torch.compile: 2 graphs)
    "enable_grad_entered_by_calls_in_no_grad": 0,
    # @set_grad_enabled(False)'s fresh context traced (torch.compile skips its clone:
    # 2 graphs, the callee's own frame one)
    "grad_decorators_in_no_grad": 1,
    # record_function's __enter__ and __exit__ ignored (torch.compile breaks at __exit__)
    "record_function_entered_by_calls": 1,
    # the hooks run eagerly; torch.compile compiles the pack hook's own frame (1 graph)
    "saved_tensors_hooks_block": 0,
    # linearize's GraphModule runs eagerly (torch.compile compiles its frames: 4 graphs)
    "linearize_sin": 2,
    # an out_dim of None for a tensor the function made: capture does not tell whether
    # the level batched it, so the call runs eagerly (torch.compile: 1 graph)
    "vmap_out_dims_none_for_tensor_made_inside": 0,
    # batch norm under vmap traced (torch.compile breaks at a str.split in it: 1 op)
    "vmap_of_batchnorm_eval": 1,
    # the graph raises vmap's random-op error as eager does, functorch's levels
    # closed after it (torch.compile raises another message)
    "vmap_randomness_error_raises": 1,
}


@pytest.mark.parametrize("name", sorted(DIFFERS))
def test_program_where_torch_differs_matches_eager(name):
    fn, make_args = DIFFERS[name]
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend)
    before = _state()
    for _ in range(2):
        args = make_args()
        torch.manual_seed(0)
        try:
            expected = fn(*args)
        except RuntimeError as error:  # the compiled call raises the same
            with pytest.raises(type(error), match=re.escape(str(error))):
                compiled(*args)
            assert _state() == before
            continue
        eager_state = _state()
        torch.set_grad_enabled(before[0])
        torch.manual_seed(0)
        got = compiled(*args)
        assert _state() == eager_state
        torch.set_grad_enabled(before[0])
        assert_same(got, expected)
    assert _state() == before
    assert len(backend.graphs) == DIFFERENCES[name]


def test_every_difference_has_its_reason():
    assert set(DIFFERENCES) == set(DIFFERS)


def test_decorated_set_grad_enabled_restores_the_mode_of_the_call():
    # the decorator's context set the mode when made: traced, it is switched in the
    # graph and the mode before the call restored after it (it was left off)
    backend = CountingBackend()
    fn, make_args = DIFFERS["grad_decorators_in_no_grad"]
    with torch.enable_grad():
        a, b, enabled = dynamo_capture.optimize(fn, backend=backend)(*make_args())
        assert torch.is_grad_enabled()
    assert a.requires_grad and not b.requires_grad and enabled is True


def test_chunked_vmap_splits_and_concatenates_in_the_graph():
    backend = CountingBackend()
    fn, make_args = PROGRAMS["vmap_chunk_size_uneven_out_dims"]
    (x,) = make_args()
    got = dynamo_capture.optimize(fn, backend=backend)(x)
    assert_same(got, fn(x))
    (graph,) = backend.graphs
    calls = [
        node.target for node in graph.graph.nodes if node.op in ("call_function", "call_method")
    ]
    assert calls.count("tensor_split") == 1 and calls.count(torch.cat) == 2


def test_vmap_dict_in_dims_in_another_key_order_runs_like_eager():
    # torch pairs the dims with the dict's items by position: `b` is batched here
    def fn(x, y):
        return torch.vmap(lambda d: d["a"] + d["b"], in_dims=({"b": None, "a": 0},))(
            {"a": x, "b": y}
        )

    x, y = torch.randn(3, 2), torch.randn(2)
    got = dynamo_capture.optimize(fn, backend=CountingBackend())(x, y)
    assert_same(got, fn(x, y))
    assert got.shape == (2, 3, 2)


def test_graph_raising_inside_vmap_leaves_no_functorch_level_open():
    # the graph opens a vmap level and raises inside it: later operations must not run
    # batched (as torch.compile, the layer stack's depth on entry is restored)
    fn, make_args = DIFFERS["vmap_randomness_error_raises"]
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    with pytest.raises(RuntimeError, match="randomness"):
        compiled(*make_args())
    assert torch._C._functorch.maybe_current_level() is None
    assert torch.ones(2).add(1).shape == (2,)


def test_transform_made_outside_guards_its_options():
    def body(r):
        return r * 2

    def fn(x, transform):
        return transform(x) + 1

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend)
    x = torch.randn(3, 4)
    for transform in (torch.vmap(body), torch.vmap(body, out_dims=1), torch.vmap(body)):
        assert_same(compiled(x, transform), fn(x, transform))
    assert len(backend.graphs) == 2
