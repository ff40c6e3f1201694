"""Tensor hooks, module hooks and activation checkpointing in captured code, against
torch.compile (modelled on pytorch's test/dynamo/test_hooks.py and
_higher_order_ops_test_activation_checkpointing.py).

    tensor hooks registered in the frame: on inputs (returned alone, with other
        outputs, several in order, global / local / inner functions, lambdas, partials
        with keywords or objects, bound methods, callable objects, closures over
        objects and over tensors of the frame), on intermediates (used before and
        after, stored in outside containers first, in a torch.cond, returning None,
        registered twice, in loops and callees, around graph breaks), handles (kept,
        returned once or twice, removed once or twice, stored on an object or a
        global), post-accumulate-grad hooks
    module hooks run by a module the frame calls: forward pre-hooks, forward hooks,
        with kwargs, full backward (pre-)hooks, a hook registered and removed in the
        frame
    torch.utils.checkpoint: reentrant or not, keywords (preserve_rng_state,
        context_fn with a selective policy), modules, bound methods, partials,
        non-tensor arguments, tuple outputs, nesting, loops over layers,
        checkpoint_sequential, graph breaks inside

Each program runs twice on fresh arguments under eager, ember and torch.compile with
counting backends: ember's results (handles by type), the gradients reaching the
inputs (and a module's parameters) after a backward of every output requiring grad,
and what the hooks wrote outside equal eager's; its graph and op counts equal
torch.compile's (`check_hooks_like_torch`). Checkpoint's op counts differ by design
(ember traces the function in place and tags its nodes; torch.compile puts one
tag_activation_checkpoint node and a getitem per output): its graph counts are
compared. Programs where ember's counts differ are kept against eager alone with the
reason where they are defined (`EAGER_PROGRAMS`).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
import torch._dynamo
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
from torch.utils.hooks import RemovableHandle
from torchcheck import REFERENCE_TORCH

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same, clone_inputs

# name -> (fn, make_args, ops compared)
PROGRAMS: dict[str, tuple[Any, Any, bool]] = {}
# checked against eager alone (values, gradients, effects): ember's counts differ from
# torch.compile's, the reason where the program is defined
EAGER_PROGRAMS: dict[str, tuple[Any, Any, bool]] = {}
breaker = torch._dynamo.graph_break

# what hooks write outside the frame; cleared before each side's run
SEEN: list[Any] = []
STORE: dict[str, Any] = {}
HANDLE: list[RemovableHandle | None] = [None]


def _vec():
    return (torch.linspace(-1.0, 2.0, 4).requires_grad_(),)


def _three():
    return (
        torch.linspace(-1.0, 2.0, 3).requires_grad_(),
        torch.linspace(0.5, 1.5, 4).reshape(2, 2),
        torch.linspace(-2.0, 0.5, 4).reshape(2, 2),
    )


def _mats():
    return (
        torch.linspace(-1.0, 1.0, 16).reshape(4, 4).requires_grad_(),
        torch.linspace(0.5, -0.5, 16).reshape(4, 4).requires_grad_(),
    )


def _registry(table):
    def program(make_args=_vec, *, ops=True):
        def register(fn):
            table[fn.__name__] = (fn, make_args, ops)
            return fn

        return register

    return program


program = _registry(PROGRAMS)
eager_program = _registry(EAGER_PROGRAMS)


# ===== the check ==========================================================================
def _normalized(value):
    """Results with handles by their type (each side's handle has its own id)."""
    if isinstance(value, RemovableHandle):
        return "RemovableHandle"
    if isinstance(value, list | tuple):
        return type(value)(_normalized(item) for item in value)
    return value


def _leaves(args):
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.requires_grad and arg.is_leaf:
            yield arg
        elif isinstance(arg, nn.Module):
            yield from arg.parameters()


def _run(callable_, make_args, calls):
    """Each call's results, the gradients of its leaves after a backward of every result
    requiring grad, and what its hooks wrote outside (or the error it raised)."""
    runs = []
    modules: dict[int, nn.Module] = {}  # the same modules each call, as a program calls its model
    for _ in range(calls):
        SEEN.clear()
        STORE.clear()
        HANDLE[0] = None
        torch.manual_seed(0)
        args = clone_inputs(make_args())
        args = tuple(
            modules.setdefault(index, arg) if isinstance(arg, nn.Module) else arg
            for index, arg in enumerate(args)
        )
        torch.manual_seed(0)
        try:
            out = callable_(*args)
        except Exception as error:  # noqa: BLE001 - compared with eager's
            runs.append(("error", type(error), str(error)))
            continue
        tensors = [
            t
            for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        if tensors:
            torch.autograd.backward([t.sum() for t in tensors])
        grads = [leaf.grad for leaf in _leaves(args)]
        runs.append((_normalized(out), grads, [_normalized(s) for s in SEEN]))
    return runs


def check_hooks_like_eager(fn, make_args, calls=2):
    backend = CountingBackend()
    expected = _run(fn, make_args, calls)
    got = _run(dynamo_capture.optimize(fn, backend=backend), make_args, calls)
    assert_same(got, expected)
    return backend, expected


def check_hooks_like_torch(fn, make_args, *, ops=True, calls=2):
    import torch._dynamo.testing

    backend, expected = check_hooks_like_eager(fn, make_args, calls)
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    try:
        reference = _run(torch.compile(fn, backend=counter), make_args, calls)
    finally:
        torch._dynamo.reset()
    try:
        assert_same(reference, expected)
    except AssertionError as error:
        pytest.skip(f"torch.compile {torch.__version__} differs from eager: {error}")
    same = backend.frame_count == counter.frame_count and (
        not ops or backend.op_count == counter.op_count
    )
    if not same and torch.__version__ < REFERENCE_TORCH:
        pytest.skip(f"torch.compile {torch.__version__} counts differently from {REFERENCE_TORCH}")
    assert backend.frame_count == counter.frame_count, (
        f"graphs: ember {backend.frame_count}, torch {counter.frame_count}"
    )
    if ops:
        assert backend.op_count == counter.op_count, (
            f"ops: ember {backend.op_count}, torch {counter.op_count}"
        )


# ===== tensor hooks on inputs =============================================================
def double(g):
    return g * 4


def halve(g):
    return g / 2


def triple(g):
    return g * 3


def add_k(g, *, k=0):
    return g + k


class WithVal:
    def __init__(self, val):
        self.val = val


class Scaler:
    def __init__(self, k):
        self.k = k

    def scale(self, g):
        return g * self.k

    def __call__(self, g):
        return g - self.k


@program()
def input_hook_lambda_returned_alone(x):
    x.register_hook(lambda g: g * 2)
    return x


@program(_three)
def input_hook_lambda_with_other_outputs(x, y, z):
    x.register_hook(lambda g: g * 2)
    return x, y * y, z * z


@program(_three)
def input_hook_removed_then_another(x, y, z):
    handle = x.register_hook(lambda g: g * 2)
    z = z * z
    handle.remove()
    x.register_hook(lambda g: g * 3)
    return x, y * y, z


@program(_three)
def input_hook_handle_returned_twice_by_two_names(x, y, z):
    handle = x.register_hook(lambda g: g * 2)
    h2 = handle
    return x, y * y, z * z, handle, h2


@program(_three)
def input_hook_handle_removed_twice_and_returned(x, y, z):
    handle = x.register_hook(lambda g: g * 2)
    z = z * z
    handle.remove()
    handle.remove()
    return x, y * y, z, handle, handle


@program(_three)
def input_hook_handle_stored_on_an_object(x, y, z):
    holder = WithVal(None)
    holder.val = x.register_hook(lambda g: g * 2)
    SEEN.append(holder.val)
    return x, y * y, z * z


@program()
def input_hook_handles_made_in_a_loop_some_removed(x):
    handles = [x.register_hook(lambda g, k=k: g * k) for k in (2.0, 3.0, 5.0)]
    handles[1].remove()
    return x.sin(), handles[0]


# a handle's attribute read in the frame: ember breaks there, the handle handed on to the
# eager part (2 ops; torch.compile 3)
@eager_program()
def input_hook_handle_attribute_read(x):
    handle = x.register_hook(double)
    y = x * 2
    if handle.id >= 0:
        y = y + 1
    return y.cos()


@program()
def input_hook_global_function_returned_alone(x):
    x.register_hook(double)
    return x


# a hooked intermediate returned: ember runs its hook eagerly (1 op; torch 2)
@eager_program()
def input_hook_inner_function_on_input_and_result(x):
    def hook(g):
        return g * 2

    z = x * x
    x.register_hook(hook)
    z.register_hook(hook)
    return x, z


@program()
def input_hook_global_function_with_result(x):
    x.register_hook(double)
    return x, x * x


@program()
def input_hooks_three_global_functions(x):
    x.register_hook(double)
    x.register_hook(halve)
    x.register_hook(triple)
    return x, x * x


@program()
def input_hooks_handles_returned(x):
    h0 = x.register_hook(double)
    h1 = x.register_hook(halve)
    return x, x * x, h0, h1


@program()
def input_hook_handle_into_a_global(x):
    HANDLE[0] = x.register_hook(double)
    return x, x * x


@program()
def input_hook_partial_with_keyword(x):
    x.register_hook(functools.partial(add_k, k=3))
    y = x.mul(2)
    return (y.mul(3),)


@program()
def input_hook_closes_over_an_object(x):
    obj = WithVal(torch.tensor(8.0))
    y = x.sin()
    x.register_hook(lambda g: g + obj.val)
    return y.sin()


@program()
def input_hook_in_inner_function_closes_over_frame_tensor(x):
    def run():
        y = x.sin()
        x.register_hook(lambda g: g + y)
        return y.sin()

    return run()


# torch.compile runs the frame eagerly (a method of an object made in the frame as the hook); ember 1 graph
@eager_program()
def input_hook_bound_method(x):
    s = Scaler(3.0)
    x.register_hook(s.scale)
    return x.cos()


@program()
def input_hook_callable_object(x):
    x.register_hook(Scaler(0.5))
    return x.exp()


@program()
def input_post_accumulate_grad_hook(x):
    x.register_post_accumulate_grad_hook(lambda p: SEEN.append(p.grad.clone()))
    return x * 2


@program()
def input_hook_in_a_callee(x):
    def register(t):
        t.register_hook(lambda g: g * 3)
        return t * 2

    return register(x).sum()


@program()
def input_hook_then_graph_break(x):
    x.register_hook(double)
    y = x.sin()
    breaker()
    return y * 2


@program()
def input_hook_after_graph_break(x):
    y = x.sin()
    breaker()
    x.register_hook(halve)
    return y * 2


@program()
def input_hooks_registered_in_a_loop(x):
    for k in (2.0, 3.0):
        x.register_hook(functools.partial(add_k, k=k))
    return x.exp()


# eager raises at the call: ember runs it eagerly, raising there (0 graphs); torch.compile
# compiles the frame's graph first (1)
@eager_program(lambda: (torch.linspace(-1.0, 2.0, 4),))
def input_hook_on_a_tensor_taking_no_gradient(x):
    x.register_hook(double)  # eager raises RuntimeError
    return x * 2


@program(lambda: (torch.linspace(-1.0, 2.0, 4).requires_grad_() * 2,))
def input_hook_on_a_non_leaf_input(x):
    x.register_hook(double)
    return x.sin()


class HooksItsWeight(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        self.linear.weight.register_hook(lambda g: g * 0.5)
        return self.linear(x).sum()


@program(lambda: (HooksItsWeight(), torch.linspace(-1.0, 2.0, 8).reshape(2, 4)))
def parameter_hook_registered_in_forward(mod, x):
    return mod(x)


@program(lambda: (torch.linspace(-1.0, 2.0, 4).requires_grad_(), torch.tensor(False)))
def input_hook_in_a_cond_branch_not_taken(x, p):
    def hooks(t):
        x.register_hook(lambda g: g * 100)
        return t + 1

    return torch.cond(p, hooks, lambda t: t - 1, (x.sin(),)) * x


@program(lambda: (torch.linspace(-1.0, 2.0, 4).requires_grad_(),))
def input_hook_inside_vmap(x):
    def per_row(t):
        x.register_hook(lambda g: g * 100)
        return t * 2

    return torch.vmap(per_row)(x.reshape(2, 2)).sum() * x


# a hook on the argument torch.func.grad differentiates: ember runs the call eagerly
# (0 graphs; torch.compile 1)
@eager_program(lambda: (torch.linspace(-1.0, 2.0, 4).requires_grad_(),))
def input_hook_inside_func_grad(x):
    def f(t):
        t.register_hook(lambda g: g * 100)
        return t.sin().sum()

    return torch.func.grad(f)(x) * x


@program()
def input_hook_in_a_branch_on_a_size(x):
    if x.shape[0] > 10:
        x.register_hook(double)
    return x.exp()


# ===== tensor hooks on intermediates ======================================================
@program()
def intermediate_hook_sum_returned(x):
    y = x * 2
    y.register_hook(lambda g: g + 1)
    return y.sum()


# the hooked tensor also stored in outside containers leaves the graph: ember runs the frame eagerly (torch 1 graph)
@eager_program()
def intermediate_hook_value_stored_outside_first(x):
    y = x * 2
    SEEN.append(y)
    STORE["t"] = y
    a = SEEN[0] * 3
    b = STORE["t"]
    y.register_hook(lambda g: g + 1)
    return (a + b).sum()


@program()
def intermediate_used_before_and_after_hook(x):
    y = x * 2
    z = y + 1
    y.register_hook(lambda g: g * 2)
    w = y * 3
    return (z + w).sum()


@program()
def intermediate_hook_then_cond(x):
    y = x * 2
    y.register_hook(lambda g: g * 2)
    z = torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (y,))
    return z.sum()


# a view read before the hook would alias the tensor, not the hook's copy: ember runs the frame eagerly (torch 1 graph)
@eager_program()
def intermediate_viewed_before_hook(x):
    y = x * 2
    v = y[:2]
    y.register_hook(lambda g: g * 3)
    return v.sum() + y.sum()


# written in place before the hook: ember runs the frame eagerly (torch 1 graph)
@eager_program()
def intermediate_written_in_place_before_hook(x):
    y = x * 2
    y.add_(1)
    y.register_hook(lambda g: g * 3)
    return y.sin()


# an item set before the hook: the hook sees the gradient of the tensor as written,
# ember runs the frame eagerly (torch.compile 1 graph)
@eager_program()
def intermediate_item_set_before_hook(x):
    y = x * 2
    y[0] = 5.0
    y.register_hook(lambda g: g * 3)
    return (y * x).sum()


# written through out= before the hook: ember runs the frame eagerly
@eager_program()
def intermediate_written_through_out_before_hook(x):
    y = x * 2
    torch.mul(x, 3.0, out=y) if not torch.is_grad_enabled() else y.mul_(1.0)
    y.register_hook(lambda g: g * 3)
    return y.sin()


# F.relu(y, True) wrote it in place before the hook: ember runs the frame eagerly
# (torch.compile 1 graph)
@eager_program()
def intermediate_relu_in_place_by_argument_before_hook(x):
    y = x * 2
    z = torch.nn.functional.relu(y, True)
    y.register_hook(lambda g: g + 1)
    return (z * y).sum()


@program()
def intermediate_hook_returns_none(x):
    y = x * 2
    y.register_hook(lambda g: None)
    return y.sum()


@program()
def intermediate_hook_appends_outside(x):
    y = x * 2

    def hook(g):
        SEEN.append(g)
        return g * 2

    y.register_hook(hook)
    return (y + x).sum()


@program()
def intermediate_hook_global_function_then_more(x):
    y = x + 1
    y.register_hook(double)
    return y + 1


@program()
def intermediate_two_partial_hooks(x):
    y = x.mul(2)
    y.register_hook(functools.partial(add_k, k=3))
    y.register_hook(functools.partial(add_k, k=4))
    return (y.mul(3),)


# a partial over an object as the hook: ember breaks at the call (2 graphs; torch 1)
@eager_program()
def intermediate_partial_hook_over_an_object(x):
    obj = WithVal(torch.tensor(5.0))
    y = x.mul(2)
    y.register_hook(functools.partial(lambda g, *, o: g + o.val, o=obj))
    return (y.mul(3),)


# a hook closing over an object holding a tensor: ember breaks at the call (2 graphs; torch 1)
@eager_program()
def intermediate_hook_closes_over_an_object(x):
    obj = WithVal(torch.tensor(2.0))
    y = x.sin()
    y.register_hook(lambda g: g + obj.val)
    return y.sin()


@program()
def intermediate_same_global_hook_twice(x):
    y = x.mul(2)
    y.register_hook(double)
    y.register_hook(double)
    return (y.mul(3),)


# a bound method as the hook of an intermediate: ember breaks at the call (2 graphs; torch 1)
@eager_program()
def intermediate_hook_bound_method(x):
    y = x * 3
    y.register_hook(Scaler(2.0).scale)
    return y.tanh()


# a callable object as the hook of an intermediate: ember breaks at the call (2 graphs; torch 1)
@eager_program()
def intermediate_hook_callable_object(x):
    y = x * 3
    y.register_hook(Scaler(1.5))
    return y.cos()


# a hooked intermediate returned: ember breaks at the call (2 graphs; torch 1)
@eager_program()
def intermediate_hook_returned_and_used(x):
    y = x.exp()
    y.register_hook(lambda g: g * 0.5)
    return y, y.sin()


@program()
def intermediate_hook_closes_over_frame_tensor(x):
    y = x.sin()
    w = x.cos().detach()
    y.register_hook(lambda g: g * w)
    return y * 2


@program()
def intermediate_hook_in_callee(x):
    def hooked(t):
        u = t * 2
        u.register_hook(lambda g: g + 1)
        return u

    return hooked(x).cos()


@program()
def intermediate_hooks_in_a_loop(x):
    outs = []
    for k in (1.0, 2.0):
        y = x * k
        y.register_hook(lambda g: g * 3)
        outs.append(y)
    return outs[0] + outs[1]


# torch.compile raises (idx must not be None for hook removal); ember breaks at the call (2 graphs)
@eager_program()
def intermediate_hook_handle_removed(x):
    y = x * 2
    handle = y.register_hook(lambda g: g * 100)
    handle.remove()
    return y.exp()


# the hooked tensor crosses a break: ember runs the hook eagerly (2 ops; torch 3)
@eager_program()
def intermediate_hook_then_graph_break(x):
    y = x * 2
    y.register_hook(lambda g: g * 3)
    breaker()
    return y.sin()


@program()
def intermediate_hook_after_graph_break(x):
    y = x * 2
    breaker()
    z = y.cos()
    z.register_hook(lambda g: g + 2)
    return z.exp()


# a hook writing the tensor it closes over in place: ember breaks at the call (2 graphs)
@eager_program()
def intermediate_hook_writes_its_closure_tensor(x):
    y = x.sin()
    w = x.cos().detach()

    def hook(g):
        w.mul_(2)
        return g * w

    y.register_hook(hook)
    return y * 2, w


@program()
def intermediate_hook_closes_over_a_tensor_needing_grad(x):
    y = x.sin()
    w = x.cos()
    y.register_hook(lambda g: g * w)
    return (y * w).sum()


# a hook reading a global tensor: ember breaks at the call (2 graphs; torch 1)
@eager_program()
def intermediate_hook_reads_a_global_tensor(x):
    y = x.sin()
    y.register_hook(lambda g: g * _GLOBAL_SCALE)
    return y.exp()


@program()
def intermediate_hook_with_tensor_default(x):
    y = x * 2
    y.register_hook(lambda g, w=torch.ones(4) * 3: g * w)  # noqa: B008 - a tensor default
    return y.sum()


@program()
def intermediate_retain_grad_and_hook(x):
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: g * 5)
    return y.sin()


# a hook on a view: ember breaks at the call (2 graphs; torch 1)
@eager_program()
def intermediate_hook_on_a_view(x):
    y = (x * 2).view(2, 2)
    y.register_hook(lambda g: g * 3)
    return y.exp()


_GLOBAL_SCALE = torch.linspace(1.0, 2.0, 4)


# ===== module hooks =======================================================================
class Lin(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu()


def _module_with(register):
    def make():
        mod = Lin()
        register(mod)
        return mod, torch.linspace(-1.0, 2.0, 8).reshape(2, 4).requires_grad_()

    return make


def _pre_hook(mod, args):
    return (args[0] * 2,)


def _forward_hook(mod, args, out):
    return out + 1


def _kwargs_pre_hook(mod, args, kwargs):
    return (args[0] - 1,), kwargs


def _backward_hook(mod, grad_input, grad_output):
    return (grad_input[0] * 2,)


def _backward_pre_hook(mod, grad_output):
    return (grad_output[0] * 3,)


@program(_module_with(lambda m: m.register_forward_pre_hook(_pre_hook)))
def module_forward_pre_hook(mod, x):
    return mod(x)


@program(_module_with(lambda m: m.register_forward_hook(_forward_hook)))
def module_forward_hook(mod, x):
    return mod(x) * 2


@program(_module_with(lambda m: m.register_forward_pre_hook(_kwargs_pre_hook, with_kwargs=True)))
def module_forward_pre_hook_with_kwargs(mod, x):
    return mod(x)


@program(_module_with(lambda m: m.linear.register_forward_hook(_forward_hook)))
def submodule_forward_hook(mod, x):
    return mod(x)


@program(_module_with(lambda m: m.linear.register_forward_hook(lambda m, a, o: SEEN.append(o))))
def submodule_forward_hook_appends_outside(mod, x):
    return mod(x)


# full backward hooks: ember runs the module call eagerly (0 graphs; torch 1)
@eager_program(_module_with(lambda m: m.register_full_backward_hook(_backward_hook)))
def module_full_backward_hook(mod, x):
    return mod(x)


# full backward pre-hooks: ember runs the module call eagerly (0 graphs; torch 1)
@eager_program(_module_with(lambda m: m.register_full_backward_pre_hook(_backward_pre_hook)))
def module_full_backward_pre_hook(mod, x):
    return mod(x)


# a module hook's handle made in the frame: ember breaks at it (3 graphs; torch 2)
@eager_program(_module_with(lambda m: None))
def module_hook_registered_and_removed_in_frame(mod, x):
    handle = mod.register_forward_hook(_forward_hook)
    y = mod(x)
    handle.remove()
    return y + mod(x)


# ===== activation checkpointing ===========================================================
def _sigmoid_mm(x, y):
    return torch.sigmoid(torch.matmul(x, y))


def _dropout_mm(x, y):
    return torch.nn.functional.dropout(torch.matmul(x, y), p=0.2)


def _breaks_inside(x, y):
    breaker()
    return torch.sigmoid(torch.matmul(x, y))


def _save_matmuls(ctx, op, *args, **kwargs):
    policy = torch.utils.checkpoint.CheckpointPolicy
    if op is torch.ops.aten.mm.default:
        return policy.MUST_SAVE
    return policy.PREFER_RECOMPUTE


def _selective():
    return torch.utils.checkpoint.create_selective_checkpoint_contexts(_save_matmuls)


class SigmoidLinear(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return torch.sigmoid(self.linear(x))

    def twice(self, x, scale):
        return self.linear(self.linear(x)) * scale


def _module_and_mat():
    return SigmoidLinear(), torch.linspace(-1.0, 1.0, 16).reshape(4, 4).requires_grad_()


class Layers(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.reentrant = reentrant

    def forward(self, x):
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=self.reentrant).relu()
        return x


@program(_mats, ops=False)
def checkpoint_reentrant_of_sin_input(x, y):
    return checkpoint(_sigmoid_mm, torch.sin(x), y, use_reentrant=True)


@program(_mats, ops=False)
def checkpoint_reentrant_no_rng_preserved(x, y):
    return checkpoint(_sigmoid_mm, torch.sin(x), y, use_reentrant=True, preserve_rng_state=False)


@program(_mats, ops=False)
def checkpoint_non_reentrant_no_rng_preserved(x, y):
    return checkpoint(_sigmoid_mm, x.sin(), y, use_reentrant=False, preserve_rng_state=False)


# preserve_rng_state=False around dropout: eager's recomputation draws another mask,
# ember runs the checkpoint eagerly (values and gradients eager's; torch.compile's differ)
@eager_program(_mats)
def checkpoint_no_rng_preserved_around_dropout(x, y):
    return checkpoint(_dropout_mm, x.sin(), y, use_reentrant=False, preserve_rng_state=False)


@program(_mats, ops=False)
def checkpoint_non_reentrant_of_sin_input(x, y):
    return checkpoint(_sigmoid_mm, torch.sin(x), y, use_reentrant=False)


@program(_mats, ops=False)
def checkpoint_reentrant_dropout(x, y):
    return checkpoint(_dropout_mm, torch.sin(x), y, use_reentrant=True)


@program(_mats, ops=False)
def checkpoint_non_reentrant_dropout(x, y):
    return checkpoint(_dropout_mm, torch.sin(x), y, use_reentrant=False)


# a break inside the checkpointed function: ember 1 graph, torch 2
@eager_program(_mats)
def checkpoint_reentrant_graph_break_inside(x, y):
    return torch.cos(checkpoint(_breaks_inside, torch.sin(x), y, use_reentrant=True))


# a break inside the checkpointed function: ember 1 graph, torch 2
@eager_program(_mats)
def checkpoint_non_reentrant_graph_break_inside(x, y):
    return torch.cos(checkpoint(_breaks_inside, torch.sin(x), y, use_reentrant=False))


@program(_module_and_mat, ops=False)
def checkpoint_reentrant_module(mod, x):
    return checkpoint(mod, torch.sin(x), use_reentrant=True)


@program(_module_and_mat, ops=False)
def checkpoint_non_reentrant_module(mod, x):
    return checkpoint(mod, torch.sin(x), use_reentrant=False)


@program(_module_and_mat, ops=False)
def checkpoint_bound_method_with_float(mod, x):
    return checkpoint(mod.twice, x, 0.5, use_reentrant=False)


@program(_mats, ops=False)
def checkpoint_selective_context_fn(x, y):
    return checkpoint(_sigmoid_mm, x.sin(), y, use_reentrant=False, context_fn=_selective).cos()


@program(_mats, ops=False)
def checkpoint_keyword_arguments(x, y):
    return checkpoint(lambda a, *, b, k: (a @ b) * k, x, b=y, k=2.0, use_reentrant=False)


@program(_mats, ops=False)
def checkpoint_partial(x, y):
    return checkpoint(functools.partial(_sigmoid_mm, y=y), x, use_reentrant=False)


@program(_mats, ops=False)
def checkpoint_tuple_output(x, y):
    a, b = checkpoint(lambda p, q: (p.sin() @ q, p * q), x, y, use_reentrant=False)
    return a + b


@program(_mats, ops=False)
def checkpoint_none_argument(x, y):
    return checkpoint(lambda p, q, r: p * q if r is None else p, x, y, None, use_reentrant=False)


@program(_mats, ops=False)
def checkpoint_nested_non_reentrant(x, y):
    def inner(a):
        return a.sin() @ y

    def outer(a):
        return checkpoint(inner, a * 2, use_reentrant=False).exp()

    return checkpoint(outer, x, use_reentrant=False)


@program(_mats, ops=False)
def checkpoint_closure_over_frame_tensor(x, y):
    w = y.cos()
    return checkpoint(lambda a: (a @ w).relu(), x, use_reentrant=False)


@program(_mats, ops=False)
def checkpoint_reads_a_global_tensor(x, y):
    return checkpoint(lambda a: a * _GLOBAL_MAT, x + y, use_reentrant=False)


@program(lambda: (Layers(False), torch.linspace(-1.0, 1.0, 8).reshape(2, 4)), ops=False)
def checkpoint_layers_in_a_loop(mod, x):
    return mod(x)


@program(lambda: (Layers(True), torch.linspace(-1.0, 1.0, 8).reshape(2, 4)), ops=False)
def checkpoint_reentrant_layers_in_a_loop(mod, x):
    return mod(x)


# torch.compile runs checkpoint_sequential's frame eagerly (0 graphs); ember 1
@eager_program(
    lambda: (
        nn.Sequential(*(nn.Linear(4, 4) for _ in range(4))),
        torch.linspace(-1.0, 1.0, 8).reshape(2, 4).requires_grad_(),
    ),
    ops=False,
)
def checkpoint_sequential_two_segments(seq, x):
    return checkpoint_sequential(seq, 2, x, use_reentrant=False)


@program(_mats, ops=False)
def checkpoint_input_hook_inside(x, y):
    def block(a):
        b = a * 2
        b.register_hook(lambda g: g * 3)
        return b.sin()

    return checkpoint(block, x, use_reentrant=False) * y


# an input hook registered inside a checkpointed function: eager registers it again when
# the backward recomputes the function; ember runs the checkpoint eagerly (torch 1 graph)
@eager_program(_mats)
def checkpoint_registers_an_input_hook(x, y):
    def block(a):
        a.register_hook(lambda g: g * 3)
        return a.sin() @ y

    return checkpoint(block, x, use_reentrant=False)


@eager_program(_mats)
def checkpoint_reentrant_registers_an_input_hook(x, y):
    def block(a):
        a.register_hook(lambda g: g * 3)
        return a.sin() @ y

    return checkpoint(block, x, use_reentrant=True)


class HookedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        x.register_hook(lambda g: g * 2)
        return self.linear(x).relu()


class HookedBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(HookedBlock() for _ in range(3))

    def forward(self, x):
        return [block(x) for block in self.blocks]


@program(lambda: (HookedBlocks(), torch.linspace(-1.0, 2.0, 8).reshape(2, 4).requires_grad_()))
def identical_blocks_each_hook_the_input(mod, x):
    return mod(x)


_GLOBAL_MAT = torch.linspace(0.5, 1.5, 16).reshape(4, 4)


# ===== tests ==============================================================================
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_hook_or_checkpoint_program_like_torch(name):
    fn, make_args, ops = PROGRAMS[name]
    check_hooks_like_torch(fn, make_args, ops=ops)


@pytest.mark.parametrize("name", list(EAGER_PROGRAMS))
def test_hook_or_checkpoint_program_like_eager(name):
    fn, make_args, _ = EAGER_PROGRAMS[name]
    check_hooks_like_eager(fn, make_args)


def swappable(g):
    return g * 2


def _intermediate_with_swappable(x):
    y = x * 3
    y.register_hook(swappable)
    return y.sin()


def _input_with_swappable(x):
    x.register_hook(swappable)
    return x.cos()


@pytest.mark.parametrize("fn", [_intermediate_with_swappable, _input_with_swappable])
def test_a_global_hook_rebound_between_calls_is_the_one_run(fn):
    """The hook read from a global is the one bound when the call runs: a graph node's
    hook is guarded by identity (a rebound global compiles again), a replayed
    registration reads the global after the graph."""
    global swappable
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    original = swappable
    try:
        for hook in (original, lambda g: g * 7, original):
            swappable = hook
            expected, got = _vec()[0], _vec()[0]
            fn(expected).sum().backward()
            compiled(got).sum().backward()
            torch.testing.assert_close(got.grad, expected.grad)
    finally:
        swappable = original


def test_handles_the_frame_returns_are_real_and_remove_their_hooks():
    """A handle kept by the frame is the one the registration replayed after the graph
    made: a RemovableHandle, the same object under two names, whose remove() takes the
    hook off the caller's tensor."""
    fn, _, _ = PROGRAMS["input_hook_handle_returned_twice_by_two_names"]
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    for _ in range(2):
        x = _three()[0]
        _, _, _, handle, same = compiled(x, *_three()[1:])
        assert isinstance(handle, RemovableHandle) and handle is same
        x.sum().backward()
        torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
        handle.remove()
        x.grad = None
        x.sum().backward()
        torch.testing.assert_close(x.grad, torch.ones_like(x))
    assert compiled.backend.frame_count == 1
