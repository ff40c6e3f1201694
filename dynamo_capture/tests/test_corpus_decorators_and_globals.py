"""Compiler markers, globals, sources, outputs and views as torch's test/dynamo files
check them (test_decorators.py, test_global.py, test_config.py, test_skip_non_tensor.py,
test_sources.py, test_input_attr_tracking.py, test_model_output.py, test_view.py,
test_interop.py): ember's graph and op counts equal torch.compile's, its results and the
state the programs leave equal eager's (programcheck.check_program_like_torch).

    markers: torch.compiler.disable / torch._dynamo.disable (recursive or not) on
        functions, lambdas, methods, static and class methods, modules and module
        classes, applied inside the frame; allow_in_graph, disallow_in_graph,
        assume_constant_result, mark_static_address, nonstrict_trace,
        torch._dynamo.graph_break() in the frame, callees, loops and blocks,
        is_compiling / is_dynamo_compiling
        branches, `@torch.no_grad` / `@torch.enable_grad` callees
    globals: read, written, deleted, made in the frame, `global` in callees, another
        module's globals read and written, global containers and tensors mutated
    config: torch._dynamo.config.patch as a context manager and decorator
    non-tensor inputs: nothing compiled for frames without tensor work
    sources: attributes of inputs, closures, globals and classes, input attributes set
        in the frame and read after, containers of inputs
    outputs: dataclasses, namedtuples, ModelOutput-like OrderedDict subclasses
    views: `.view`, `.view_as`, `unflatten`, `view(dtype)` of inputs returned and mutated
    interop: torch.fx.wrap'ped functions, fx-traced, jit-scripted and jit-traced callables
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import global_state_module as gsm
import pytest
import torch
import torch._dynamo
import torch.fx
from programcheck import Program, assert_same_results, check_program_like_torch, run_program
from torch import nn

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same

PROGRAMS: dict[str, Program] = {}


def _program(factory: Program) -> Program:
    PROGRAMS[factory.__name__] = factory
    return factory


def x4():
    return (torch.linspace(-2, 2, 16).reshape(4, 4),)


def x8():
    return (torch.linspace(-2, 2, 8),)


LOG: list = []


# ---- torch.compiler.disable / torch._dynamo.disable ----
@_program
def disable_plain_function():
    @torch.compiler.disable
    def f(a):
        return a.exp() + 1

    def fn(x):
        return f(x.sin()).cos()

    return dict(fn=fn, args=x4)


@_program
def dynamo_disable_plain_function():
    @torch._dynamo.disable
    def f(a):
        return a * 2

    def fn(x):
        y = x + 1
        return f(y) - y

    return dict(fn=fn, args=x4)


@_program
def disable_non_recursive_simple():
    def f(a):
        return a.relu() * 3

    g = torch._dynamo.disable(f, recursive=False)

    def fn(x):
        return g(x.sin()) + 1

    return dict(fn=fn, args=x4)


@_program
def disable_non_recursive_calls_helper():
    def helper(a):
        return a.sin() + a.cos()

    def f(a):
        return helper(a) * 2

    g = torch._dynamo.disable(f, recursive=False)

    def fn(x):
        return g(x + 1) - 1

    return dict(fn=fn, args=x4)


@_program
def disable_applied_in_frame():
    def f(a):
        return a.tanh() * 2

    def fn(x):
        return torch.compiler.disable(f)(x + 1) + 2

    return dict(fn=fn, args=x4)


@_program
def disable_lambda():
    g = torch.compiler.disable(lambda a: a * 4)

    def fn(x):
        return g(x.sin()).sum()

    return dict(fn=fn, args=x4)


@_program
def disable_with_reason():
    @torch.compiler.disable(reason="not traceable")
    def f(a):
        return a - 3

    def fn(x):
        return f(x * 2) * 2

    return dict(fn=fn, args=x4)


@_program
def disable_user_method():
    class Box:
        def __init__(self):
            self.k = 3.0

        @torch.compiler.disable
        def scale(self, a):
            return a * self.k

    box = Box()

    def fn(x):
        return box.scale(x + 1).cos()

    return dict(fn=fn, args=x4)


@_program
def disable_staticmethod():
    class Ops:
        @staticmethod
        @torch.compiler.disable
        def twice(a):
            return a * 2

    def fn(x):
        return Ops.twice(x.sin()) + 1

    return dict(fn=fn, args=x4)


@_program
def disable_classmethod():
    class Ops:
        k = 5

        @classmethod
        @torch.compiler.disable
        def scaled(cls, a):
            return a * cls.k

    def fn(x):
        return Ops.scaled(x.cos()) - 1

    return dict(fn=fn, args=x4)


@_program
def disable_module_instance():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.out = nn.Linear(4, 4)

        def forward(self, x):
            return self.out(self.lin(x.sin()))

    torch.manual_seed(0)
    m = M()
    m.lin = torch._dynamo.disable(m.lin)

    def fn(x):
        return m(x)

    return dict(fn=fn, args=x4)


@_program
def disable_module_class_decorator():
    @torch._dynamo.disable
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(torch.sigmoid(x))

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.out = nn.Linear(4, 4)

        def forward(self, x):
            return self.out(self.inner(x.sin()))

    torch.manual_seed(0)
    m = Outer()

    def fn(x):
        return m(x)

    return dict(fn=fn, args=x4)


@_program
def disable_module_with_pre_hook():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(torch.sigmoid(x))

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.out = nn.Linear(4, 4)

        def forward(self, x):
            return self.out(self.inner(torch.sin(x)))

    torch.manual_seed(0)
    m = Outer()
    m.inner.register_forward_pre_hook(lambda mod, args: (args[0].sigmoid(),))
    m.inner = torch._dynamo.disable(m.inner)

    def fn(x):
        return m(x)

    return dict(fn=fn, args=x4)


@_program
def disable_returns_tuple():
    @torch.compiler.disable
    def split(a):
        return a + 1, a - 1

    def fn(x):
        p, q = split(x * 2)
        return p * q

    return dict(fn=fn, args=x4)


@_program
def disable_keyword_arguments():
    @torch.compiler.disable
    def f(a, *, scale=1.0, shift=0.0):
        return a * scale + shift

    def fn(x):
        return f(x.sin(), scale=2.0, shift=x.cos()) + 1

    return dict(fn=fn, args=x4)


@_program
def disable_result_unused():
    @torch.compiler.disable
    def record(a):
        LOG.append(float(a.sum()))

    def fn(x):
        y = x * 2
        record(y)
        return y + 1

    return dict(fn=fn, args=x4, state=lambda fn: list(LOG), between=lambda i, fn: LOG.clear())


@_program
def disable_appends_to_list():
    seen = []

    @torch.compiler.disable
    def f(a):
        seen.append(a.shape[0])
        return a + len(seen)

    def fn(x):
        return f(x.sin()) * 2

    return dict(fn=fn, args=x4, state=lambda fn: list(seen))


@_program
def disable_in_loop():
    @torch.compiler.disable
    def f(a):
        return a * 2

    def fn(x):
        for _ in range(3):
            x = f(x) + 1
        return x

    return dict(fn=fn, args=x4)


@_program
def disable_mutates_input():
    @torch.compiler.disable
    def f(a):
        a.add_(1)

    def fn(x):
        y = x * 2
        f(y)
        return y.sin()

    return dict(fn=fn, args=x4)


@_program
def disable_in_callee():
    @torch.compiler.disable
    def f(a):
        return a + 10

    def g(a):
        b = a.sin()
        return f(b) * b

    def fn(x):
        return g(x).cos() + x

    return dict(fn=fn, args=x4)


@_program
def disable_inside_no_grad():
    @torch.compiler.disable
    def f(a):
        return a * 3

    def fn(x):
        with torch.no_grad():
            y = f(x + 1)
        return y + x

    return dict(fn=fn, args=x4)


@_program
def disable_returns_python_number():
    @torch.compiler.disable
    def f(a):
        return float(a.abs().max())

    def fn(x):
        return x / f(x)

    return dict(fn=fn, args=x4)


@_program
def disable_module_forward_only():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(4))

        @torch._dynamo.disable
        def forward(self, x):
            return x * self.w

    m = M()

    def fn(x):
        return m(x.sin()).sum()

    return dict(fn=fn, args=x4)


@_program
def disable_called_twice():
    @torch.compiler.disable
    def f(a):
        return a + 1

    def fn(x):
        return f(x).sin() + f(x * 2).cos()

    return dict(fn=fn, args=x4)


# ---- graph_break() ----
@_program
def graph_break_plain():
    def fn(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    return dict(fn=fn, args=x4)


@_program
def graph_break_in_callee():
    def g(a):
        a = a + 1
        torch._dynamo.graph_break()
        return a * 2

    def fn(x):
        return g(x.sin()).cos()

    return dict(fn=fn, args=x4)


@_program
def graph_break_twice():
    def fn(x):
        x = x + 1
        torch._dynamo.graph_break()
        x = x * 2
        torch._dynamo.graph_break()
        return x - 3

    return dict(fn=fn, args=x4)


@_program
def graph_break_in_loop():
    def fn(x):
        for i in range(3):
            x = x + i
            torch._dynamo.graph_break()
        return x

    return dict(fn=fn, args=x4)


@_program
def graph_break_in_no_grad_block():
    def fn(x):
        with torch.no_grad():
            y = x * 2
            torch._dynamo.graph_break()
            y = y + 1
        return y + x

    return dict(fn=fn, args=lambda: (torch.ones(4, requires_grad=True),))


@_program
def graph_break_imported_name():
    from torch._dynamo import graph_break

    def fn(x):
        x = x.exp()
        graph_break()
        return x.log()

    return dict(fn=fn, args=x4)


@_program
def graph_break_in_branch():
    def fn(x, flag):
        x = x + 1
        if flag:
            torch._dynamo.graph_break()
        return x * 2

    return dict(fn=fn, args=lambda: (torch.ones(4), True))


@_program
def graph_break_nested_callees():
    def h(a):
        torch._dynamo.graph_break()
        return a + 1

    def g(a):
        return h(a * 2) * 3

    def fn(x):
        return g(x).sum()

    return dict(fn=fn, args=x4)


# ---- allow_in_graph / disallow_in_graph / constants / static addresses ----
def _allowed_add(a):
    return a + 1


@_program
def allow_in_graph_traceable():
    torch._dynamo.allow_in_graph(_allowed_add)

    def fn(x):
        x = torch.add(x, 1)
        x = _allowed_add(x)
        return torch.add(x, 1)

    return dict(fn=fn, args=x4)


@_program
def disallow_torch_sub():
    def fn(a):
        x = torch.add(a, 1)
        x = torch.sub(x, 1)
        return torch.add(x, 1)

    def between(i, fn):
        torch._dynamo.disallow_in_graph(torch.sub)

    def state(fn):
        torch._dynamo.allow_in_graph(torch.sub)

    return dict(fn=fn, args=x4, between=between, state=state)


@_program
def assume_constant_global_function():
    @torch.compiler.assume_constant_result
    def k():
        return 5

    def fn(x):
        return x * k() + k()

    return dict(fn=fn, args=x4)


@_program
def assume_constant_method():
    class Cfg:
        def __init__(self):
            self.n = 3

        @torch.compiler.assume_constant_result
        def size(self):
            return self.n * 2

    cfg = Cfg()

    def fn(x):
        return x.repeat(cfg.size(), 1).sum(0)

    return dict(fn=fn, args=x4)


@_program
def assume_constant_string():
    @torch._dynamo.assume_constant_result
    def mode():
        return "scale"

    def fn(x):
        if mode() == "scale":
            return x * 2
        return x + 2

    return dict(fn=fn, args=x4)


@_program
def mark_static_address_buffer():
    buf = torch.zeros(4, 4)
    torch._dynamo.mark_static_address(buf)

    def fn(x):
        return x + buf

    return dict(fn=fn, args=x4)


@_program
def mark_static_address_argument():
    def fn(x, b):
        b.add_(1)
        return x * b

    def args():
        b = torch.zeros(4)
        torch._dynamo.mark_static_address(b)
        return (torch.ones(4), b)

    return dict(fn=fn, args=args)


@_program
def nonstrict_trace_traceable():
    @torch._dynamo.nonstrict_trace
    def trace_me(a, b):
        return a * b + 1

    def fn(x):
        return trace_me(x, x + 1).sum()

    return dict(fn=fn, args=x4)


@_program
def nonstrict_trace_with_break_inside():
    @torch._dynamo.nonstrict_trace
    def trace_me(a, b):
        torch._dynamo.graph_break()
        return a * b

    def fn(x):
        t0 = x + 1
        return trace_me(x, t0) * t0

    return dict(fn=fn, args=x4)


@_program
def nonstrict_trace_dict_argument():
    @torch._dynamo.nonstrict_trace
    def trace_me(a, d):
        torch._dynamo.graph_break()
        return a * d["k"]

    def fn(x):
        d = {"k": 2}
        return trace_me(x, d) + 1

    return dict(fn=fn, args=x4)


# ---- is_compiling ----
@_program
def is_compiling_compiler():
    def fn(x):
        if torch.compiler.is_compiling():
            return x * 2
        return x + x

    return dict(fn=fn, args=x4)


@_program
def is_dynamo_compiling():
    def fn(x):
        if torch.compiler.is_dynamo_compiling():
            return x * 2
        return x + x

    return dict(fn=fn, args=x4)


@_program
def is_compiling_in_callee():
    def helper():
        return torch.compiler.is_compiling()

    def fn(x):
        return x * 2 if helper() else (x + x).neg().neg()

    return dict(fn=fn, args=x4)


@_program
def is_compiling_in_lambda():
    check = lambda: torch.compiler.is_compiling()  # noqa: E731

    def fn(x):
        return x * 2 if check() else x + x

    return dict(fn=fn, args=x4)


@_program
def is_compiling_in_generator():
    def gen():
        yield torch.compiler.is_compiling()

    def fn(x):
        for flag in gen():
            if flag:
                x = x * 1.0
        return x + 1

    return dict(fn=fn, args=x4)


@_program
def is_compiling_after_break():
    def fn(x):
        x = x + 1
        torch._dynamo.graph_break()
        if torch.compiler.is_compiling():
            return x * 2
        return x + x

    return dict(fn=fn, args=x4)


# ---- @torch.no_grad / enable_grad callees ----
@_program
def no_grad_decorated_callee():
    @torch.no_grad()
    def g(a):
        return a * 2

    def fn(x):
        return g(x) + x

    return dict(fn=fn, args=lambda: (torch.ones(4, requires_grad=True),))


@_program
def no_grad_bare_decorator_callee():
    @torch.no_grad
    def g(a):
        return a.sin()

    def fn(x):
        y = g(x)
        return y * x, y.requires_grad

    return dict(fn=fn, args=lambda: (torch.ones(4, requires_grad=True),))


@_program
def enable_grad_callee_inside_no_grad():
    @torch.enable_grad()
    def g(a):
        return a * 3

    def fn(x):
        with torch.no_grad():
            y = g(x)
        return y, y.requires_grad

    return dict(fn=fn, args=lambda: (torch.ones(4, requires_grad=True),))


@_program
def no_grad_method_callee():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        @torch.no_grad()
        def stats(self, x):
            return self.lin(x).mean()

        def forward(self, x):
            return self.lin(x) - self.stats(x)

    torch.manual_seed(0)
    m = M()

    def fn(x):
        return m(x)

    return dict(fn=fn, args=x4)


@_program
def no_grad_callee_with_break():
    @torch.no_grad()
    def g(a):
        a = a * 2
        torch._dynamo.graph_break()
        return a + 1

    def fn(x):
        return g(x) * x

    return dict(fn=fn, args=lambda: (torch.ones(4, requires_grad=True),))


@_program
def inference_mode_callee():
    @torch.inference_mode()
    def g(a):
        return a * 2

    def fn(x):
        return g(x).sum()

    return dict(fn=fn, args=x4)


# ---- globals ----
G_SCALE = 3.0
G_TENSOR = torch.arange(4.0)
G_COUNTER = 0
G_LIST: list = []
G_DICT: dict = {}


def _reset_globals():
    global G_SCALE, G_TENSOR, G_COUNTER, G_LIST, G_DICT
    G_SCALE, G_TENSOR, G_COUNTER, G_LIST, G_DICT = 3.0, torch.arange(4.0), 0, [], {}
    globals().pop("G_MADE", None)
    gsm.reset()


def _globals_state(fn):
    return (
        G_SCALE,
        G_TENSOR,
        G_COUNTER,
        list(G_LIST),
        dict(G_DICT),
        globals().get("G_MADE"),
        (gsm.SCALE, gsm.COUNT, gsm.TENSOR, list(gsm.ITEMS), dict(gsm.TABLE)),
    )


def _globals_program(fn, args=x4, **extra):
    _reset_globals()
    return dict(fn=fn, args=args, state=_globals_state, **extra)


def _read_global_number(x):
    return x * G_SCALE


@_program
def global_number_read():
    return _globals_program(_read_global_number)


def _read_global_tensor(x):
    return x + G_TENSOR


@_program
def global_tensor_read():
    return _globals_program(_read_global_tensor)


def _write_global_number(x):
    global G_SCALE
    G_SCALE = G_SCALE + 1
    return x * G_SCALE


@_program
def global_number_written():
    return _globals_program(_write_global_number)


def _write_global_tensor(x):
    global G_TENSOR
    G_TENSOR = G_TENSOR + x.sum(0)
    return x * 2


@_program
def global_tensor_rebound():
    return _globals_program(_write_global_tensor)


def _mutate_global_tensor(x):
    G_TENSOR.add_(x.sum(0))
    return x - 1


@_program
def global_tensor_mutated_in_place():
    return _globals_program(_mutate_global_tensor)


def _counter_increment(x):
    global G_COUNTER
    G_COUNTER += 1
    return x + G_COUNTER


@_program
def global_counter_increment():
    return _globals_program(_counter_increment)


def _append_global_list(x):
    G_LIST.append(x.sum(0))
    return x * len(G_LIST)


@_program
def global_list_appended():
    return _globals_program(_append_global_list)


def _update_global_dict(x):
    G_DICT["k"] = x.mean()
    G_DICT.setdefault("n", 0)
    return x + 1


@_program
def global_dict_updated():
    return _globals_program(_update_global_dict)


def _make_global(x):
    global G_MADE
    G_MADE = x * 5
    return x + 1


@_program
def global_made_in_frame():
    return _globals_program(_make_global)


def _make_then_delete_global(x):
    global G_MADE
    G_MADE = 7
    y = x * G_MADE
    del G_MADE
    return y


@_program
def global_made_then_deleted():
    return _globals_program(_make_then_delete_global)


def _delete_existing_global(x):
    global G_MADE
    del G_MADE
    return x + 1


@_program
def global_deleted_in_frame():
    def between(i, fn):
        globals()["G_MADE"] = 1

    return _globals_program(_delete_existing_global, between=between)


def _global_in_callee_writer(a):
    global G_SCALE
    G_SCALE = 10.0
    return a * 2


def _calls_global_writer(x):
    y = _global_in_callee_writer(x)
    return y * G_SCALE


@_program
def global_statement_in_callee():
    return _globals_program(_calls_global_writer)


def _global_written_then_break(x):
    global G_COUNTER
    G_COUNTER = 4
    torch._dynamo.graph_break()
    return x * G_COUNTER


@_program
def global_written_before_break():
    return _globals_program(_global_written_then_break)


def _global_read_after_callee_break(x):
    global G_SCALE
    G_SCALE = 6.0
    y = _break_helper(x)
    return y * G_SCALE


def _break_helper(a):
    torch._dynamo.graph_break()
    return a + G_SCALE


@_program
def global_read_by_callee_after_break():
    return _globals_program(_global_read_after_callee_break)


def _other_module_read(x):
    return x * gsm.SCALE + gsm.TENSOR


@_program
def other_module_global_read():
    return _globals_program(_other_module_read, args=lambda: (torch.ones(3),))


def _other_module_attribute_written(x):
    gsm.SCALE = 4.0
    return x * gsm.SCALE


@_program
def other_module_attribute_written():
    return _globals_program(_other_module_attribute_written)


def _other_module_function_writes(x):
    y = gsm.bump(x)
    return y + gsm.COUNT


@_program
def other_module_global_statement():
    return _globals_program(_other_module_function_writes)


def _other_module_attribute_then_function(x):
    gsm.SCALE = 7.0
    return gsm.bump(x)


@_program
def other_module_attribute_read_by_its_function():
    return _globals_program(_other_module_attribute_then_function)


def _other_module_getattr_after_global(x):
    y = gsm.bump(x)
    return y * getattr(gsm, "COUNT"), hasattr(gsm, "COUNT")  # noqa: B009 - the builtin


@_program
def other_module_getattr_after_global_statement():
    return _globals_program(_other_module_getattr_after_global)


def _other_module_globals_dict_after_global(x):
    y = gsm.bump(x)
    return y + gsm.bump.__globals__["COUNT"]


@_program
def other_module_globals_dict_after_global_statement():
    return _globals_program(_other_module_globals_dict_after_global)


def _other_module_setattr_builtin(x):
    setattr(gsm, "SCALE", 9.0)  # noqa: B010 - the builtin
    return gsm.bump(x) + getattr(gsm, "SCALE", 0)


@_program
def other_module_setattr_then_its_function():
    return _globals_program(_other_module_setattr_builtin)


def _other_module_new_attribute(x):
    gsm.MADE = 3
    made = x * gsm.MADE
    del gsm.MADE
    return made


@_program
def other_module_attribute_made_and_deleted():
    return _globals_program(_other_module_new_attribute)


def _other_module_vars_after_global(x):
    y = gsm.bump(x)
    return y * vars(gsm)["COUNT"]


@_program
def other_module_vars_after_global_statement():
    return _globals_program(_other_module_vars_after_global)


def _other_module_setter(x):
    gsm.set_scale(5.0)
    return gsm.bump(x)


@_program
def other_module_setter_then_read():
    return _globals_program(_other_module_setter)


def _other_module_containers(x):
    gsm.ITEMS.append(x.sum())
    gsm.TABLE["last"] = x.max()
    return x * len(gsm.ITEMS)


@_program
def other_module_containers_mutated():
    return _globals_program(_other_module_containers)


def _other_module_tensor_mutated(x):
    gsm.TENSOR.mul_(2)
    return x + gsm.TENSOR


@_program
def other_module_tensor_mutated():
    return _globals_program(_other_module_tensor_mutated, args=lambda: (torch.ones(3),))


def _global_function_rebound(x):
    return _current_op(x)


def _op_sin(a):
    return a.sin()


def _op_cos(a):
    return a.cos()


_current_op = _op_sin


@_program
def global_function_rebound_between_calls():
    def between(i, fn):
        global _current_op
        _current_op = _op_sin if i == 0 else _op_cos

    return dict(fn=_global_function_rebound, args=x4, between=between)


def _global_number_changes(x):
    return x * G_SCALE


@_program
def global_number_changed_between_calls():
    def between(i, fn):
        global G_SCALE
        G_SCALE = 3.0 + i

    return _globals_program(_global_number_changes, between=between)


# ---- config patches ----
@_program
def config_patch_decorator_on_fn():
    @torch._dynamo.config.patch(verbose=True)
    def fn(x):
        return x.sin() + 1

    return dict(fn=fn, args=x4)


@_program
def config_patch_context_in_frame():
    def fn(x):
        with torch._dynamo.config.patch(verbose=True):
            y = x * 2
        return y + 1

    return dict(fn=fn, args=x4)


@_program
def config_patch_decorated_callee():
    @torch._dynamo.config.patch(verbose=True)
    def g(a):
        return a.cos()

    def fn(x):
        return g(x) * 2

    return dict(fn=fn, args=x4)


@_program
def config_read_in_frame():
    def fn(x):
        if torch._dynamo.config.verbose:
            return x + 1
        return x - 1

    return dict(fn=fn, args=x4)


# ---- functions with only non-tensor inputs ----
@_program
def non_tensor_ints_added():
    def fn(a, b):
        return a + b

    return dict(fn=fn, args=lambda: (4, 5))


@_program
def non_tensor_string_formatting():
    def fn(name, n):
        return f"{name}-{n * 2}"

    return dict(fn=fn, args=lambda: ("a", 3))


@_program
def non_tensor_list_sum():
    def fn(items):
        return sum(items) * 2

    return dict(fn=fn, args=lambda: ([1, 2, 3],))


@_program
def non_tensor_dict_read():
    def fn(d):
        return d["a"] * d["b"]

    return dict(fn=fn, args=lambda: ({"a": 2, "b": 3.5},))


@_program
def tensor_and_int_add():
    def fn(a, b):
        return a + b

    return dict(fn=fn, args=lambda: (torch.randn(4), 5))


@_program
def tensor_in_list_add():
    def fn(lst):
        return lst[0] + lst[1]

    return dict(fn=fn, args=lambda: ([torch.randn(4), 5],))


@_program
def tensor_in_dict_add():
    def fn(d):
        return torch.add(d["a"], d["b"])

    return dict(fn=fn, args=lambda: ({"a": torch.randn(4), "b": 5},))


@_program
def non_tensor_makes_tensor():
    def fn(n):
        return torch.ones(n) * 2

    return dict(fn=fn, args=lambda: (3,))


@_program
def non_tensor_conditional_break():
    def fn(x, n):
        if n == 0:
            torch._dynamo.graph_break()
        return x + 1

    return dict(fn=fn, args=lambda: (torch.ones(3), 0))


# ---- sources ----
@_program
def source_input_attribute():
    class Holder:
        def __init__(self):
            self.t = torch.ones(4)
            self.k = 2

    def fn(h):
        return h.t * h.k

    return dict(fn=fn, args=lambda: (Holder(),))


@_program
def source_nested_input_attribute():
    class Inner:
        def __init__(self):
            self.w = torch.arange(4.0)

    class Outer:
        def __init__(self):
            self.inner = Inner()

    def fn(o, x):
        return x + o.inner.w

    return dict(fn=fn, args=lambda: (Outer(), torch.ones(4)))


@_program
def source_closure_tensor():
    w = torch.arange(4.0)

    def fn(x):
        return x * w

    return dict(fn=fn, args=x4)


@_program
def source_closure_object_attribute():
    class Cfg:
        scale = 2.5
        bias = torch.ones(4)

    cfg = Cfg()

    def fn(x):
        return x * cfg.scale + cfg.bias

    return dict(fn=fn, args=x4)


@_program
def source_class_attribute():
    class Cfg:
        factor = 3

    def fn(x):
        return x * Cfg.factor

    return dict(fn=fn, args=x4)


@_program
def source_class_attribute_changed():
    class Cfg:
        factor = 3

    def between(i, fn):
        Cfg.factor = 3 + i

    def fn(x):
        return x * Cfg.factor

    return dict(fn=fn, args=x4, between=between)


@_program
def source_input_attribute_set_then_read():
    class Holder:
        pass

    def fn(h, x):
        h.y = x * 2
        return h.y + 1, h.y

    return dict(fn=fn, args=lambda: (Holder(), torch.ones(4)))


@_program
def source_input_attribute_overwritten():
    class Holder:
        def __init__(self):
            self.t = torch.ones(4)

    holders = []

    def fn(h, x):
        h.t = h.t + x
        holders.append(h)
        return h.t * 2

    return dict(
        fn=fn, args=lambda: (Holder(), torch.ones(4)), state=lambda fn: [h.t for h in holders]
    )


@_program
def source_input_attribute_set_break_read():
    class Holder:
        pass

    seen = []

    def fn(h, x):
        h.a = x + 1
        torch._dynamo.graph_break()
        seen.append(h)
        return h.a * 2

    return dict(fn=fn, args=lambda: (Holder(), torch.ones(4)), state=lambda fn: [h.a for h in seen])


@_program
def source_input_tensor_attribute_set():
    def fn(x):
        x.note = 5
        return x * x.note

    return dict(fn=fn, args=x4)


@_program
def source_list_item_of_input():
    def fn(items):
        return items[0] * items[1]["w"]

    return dict(fn=fn, args=lambda: ([torch.ones(4), {"w": torch.arange(4.0)}],))


@_program
def source_global_object_attribute():
    def fn(x):
        return x * _GLOBAL_CFG.scale + _GLOBAL_CFG.offset

    return dict(fn=fn, args=x4)


class _Cfg:
    scale = 1.5
    offset = 2


_GLOBAL_CFG = _Cfg()


@_program
def source_module_attribute_of_input():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0
            self.register_buffer("b", torch.ones(4))

    def fn(m, x):
        return x * m.scale + m.b

    return dict(fn=fn, args=lambda: (M(), torch.ones(4)))


@_program
def source_property_of_input():
    class Holder:
        def __init__(self):
            self._t = torch.ones(4)

        @property
        def t(self):
            return self._t * 2

    def fn(h):
        return h.t + 1

    return dict(fn=fn, args=lambda: (Holder(),))


# ---- outputs: dataclasses, namedtuples, ModelOutput-like ----
@dataclasses.dataclass
class _Out:
    hidden: torch.Tensor
    extra: torch.Tensor | None = None


_Pair = collections.namedtuple("_Pair", ["a", "b"])


@_program
def dataclass_output():
    def fn(x):
        return _Out(hidden=x.sin(), extra=x.cos())

    return dict(fn=fn, args=x4)


@_program
def dataclass_output_default_field():
    def fn(x):
        out = _Out(x * 2)
        return out.hidden + 1, out.extra is None

    return dict(fn=fn, args=x4)


@_program
def dataclass_input_fields_read():
    def fn(o):
        return o.hidden * o.extra

    return dict(fn=fn, args=lambda: (_Out(torch.ones(4), torch.arange(4.0)),))


@_program
def dataclass_replace_in_frame():
    def fn(x):
        out = _Out(x, x + 1)
        return dataclasses.replace(out, extra=x * 3)

    return dict(fn=fn, args=x4)


@_program
def namedtuple_output():
    def fn(x):
        return _Pair(x + 1, x - 1)

    return dict(fn=fn, args=x4)


@_program
def namedtuple_fields_used():
    def fn(x):
        p = _Pair(a=x.sin(), b=x.cos())
        return p.a * p.b + p[0]

    return dict(fn=fn, args=x4)


@_program
def model_output_transformers():
    outputs = pytest.importorskip("transformers.modeling_outputs")

    def fn(x):
        out = outputs.BaseModelOutput(last_hidden_state=x.sin())
        return out.last_hidden_state + out[0], out.to_tuple()

    return dict(fn=fn, args=x4)


@_program
def model_output_returned():
    outputs = pytest.importorskip("transformers.modeling_outputs")

    def fn(x):
        return outputs.BaseModelOutput(last_hidden_state=x * 2, hidden_states=(x,))

    return dict(fn=fn, args=x4)


@_program
def model_output_key_access():
    outputs = pytest.importorskip("transformers.modeling_outputs")

    def fn(x):
        out = outputs.BaseModelOutputWithPooling(last_hidden_state=x, pooler_output=x[:, 0])
        return out["pooler_output"] * 2, len(out), list(out.keys())

    return dict(fn=fn, args=x4)


@_program
def model_output_input_read():
    outputs = pytest.importorskip("transformers.modeling_outputs")

    def fn(out):
        return out.last_hidden_state.sum() + out[0].mean()

    return dict(fn=fn, args=lambda: (outputs.BaseModelOutput(last_hidden_state=torch.ones(2, 3)),))


# ---- views ----
@_program
def view_returned():
    def fn(x):
        return x.view(-1)

    return dict(fn=fn, args=x4)


@_program
def view_as_returned():
    def fn(x, y):
        return x.view_as(y)

    return dict(fn=fn, args=lambda: (torch.arange(16.0), torch.ones(4, 4)))


@_program
def unflatten_returned():
    def fn(x):
        return x.unflatten(0, (2, 4))

    return dict(fn=fn, args=x8)


@_program
def view_dtype_returned():
    def fn(x):
        return x.view(torch.int32) + 1

    return dict(fn=fn, args=x8)


@_program
def view_dtype_only():
    def fn(x):
        return x.view(torch.int32)

    return dict(fn=fn, args=x8)


@_program
def view_mutated_updates_input():
    def fn(x):
        v = x.view(-1)
        v.add_(1)
        return x * 2

    return dict(fn=fn, args=x4)


@_program
def input_mutated_view_returned():
    def fn(x):
        v = x.view(2, 8)
        x.mul_(2)
        return v

    return dict(fn=fn, args=x4)


@_program
def view_and_input_returned():
    def fn(x):
        return x, x.view(-1), x.view(2, 8)

    return dict(fn=fn, args=x4)


@_program
def view_of_view_mutated():
    def fn(x):
        v = x.view(16).view(2, 8)
        v[0].zero_()
        return x.sum(), v

    return dict(fn=fn, args=x4)


@_program
def unflatten_mutated():
    def fn(x):
        u = x.unflatten(0, (2, 4))
        u[1] += 3
        return x

    return dict(fn=fn, args=x8)


@_program
def view_dtype_mutated():
    def fn(x):
        v = x.view(torch.int32)
        v.bitwise_and_(0x7FFFFFFF)
        return x

    return dict(fn=fn, args=x8)


@_program
def view_shape_from_input_size():
    def fn(x):
        return x.view(x.size(0) * x.size(1)).sin()

    return dict(fn=fn, args=x4)


# ---- interop: fx.wrap, fx traced, jit scripted / traced ----
def _interop_fn(a, b):
    return a + b * 0.67


@_program
def fx_traced_called():
    traced = torch.fx.symbolic_trace(_interop_fn)

    def fn(a, b):
        return traced(a, b) + 1

    return dict(fn=fn, args=lambda: (torch.ones(4), torch.arange(4.0)))


@_program
def jit_script_called():
    scripted = torch.jit.script(_interop_fn)

    def fn(a, b):
        return scripted(a, b) + 1

    return dict(fn=fn, args=lambda: (torch.ones(4), torch.arange(4.0)))


@_program
def jit_trace_called():
    traced = torch.jit.trace(_interop_fn, (torch.zeros(4), torch.zeros(4)))

    def fn(a, b):
        return traced(a, b) + 1

    return dict(fn=fn, args=lambda: (torch.ones(4), torch.arange(4.0)))


@_program
def jit_scripted_module_called():
    class M(nn.Module):
        def forward(self, x):
            return x * 2 + 1

    scripted = torch.jit.script(M())

    def fn(x):
        return scripted(x).sin()

    return dict(fn=fn, args=x4)


@_program
def fx_wrapped_function_called():
    def fn(x):
        return _fx_wrapped(x.sin()) + 1

    return dict(fn=fn, args=x4)


def _fx_wrapped(a):
    return a * 3


torch.fx.wrap("_fx_wrapped")


@_program
def fx_graph_module_called():
    class M(nn.Module):
        def forward(self, x):
            return x.relu() * 2

    gm = torch.fx.symbolic_trace(M())

    def fn(x):
        return gm(x) - 1

    return dict(fn=fn, args=x4)


@_program
def jit_is_scripting_branch():
    def fn(x):
        if torch.jit.is_scripting():
            return x + 1
        return x * 2

    return dict(fn=fn, args=x4)


@_program
def functools_wraps_disabled():
    def f(a):
        return a * 2

    disabled = torch.compiler.disable(f)

    @functools.wraps(f)
    def wrapper(a):
        return disabled(a) + 1

    def fn(x):
        return wrapper(x.sin())

    return dict(fn=fn, args=x4)


# Where ember's graphs are not torch.compile's: the graphs ember makes (first call, then
# the second's recompiles), its values eager's. Torch runs the frame eagerly where ember
# captures it (DELETE_GLOBAL, a scripted module's call), or ember cannot do what
# torch does (reading torch's private registries, compiling the callees of code that
# runs eagerly: it has no frame hook).
NOT_LIKE_TORCH: dict[str, tuple[int, str]] = {
    "global_deleted_in_frame": (1, "torch runs a frame with `del` of a global eagerly"),
    "global_made_then_deleted": (1, "torch runs a frame with `del` of a global eagerly"),
    "jit_scripted_module_called": (1, "torch runs the frame eagerly; ember breaks at the call"),
    "disable_applied_in_frame": (1, "the wrapper is a call's result: the statement runs eagerly"),
    "disable_non_recursive_calls_helper": (2, "the helper a non-recursive disabled function "
                                           "calls runs eagerly (torch compiles its frame)"),
    "nonstrict_trace_with_break_inside": (3, "torch's nonstrict_trace registry is private, "
                                          "not read: the break inside breaks"),
    "nonstrict_trace_dict_argument": (2, "torch's nonstrict_trace registry is private, not read"),
    "disallow_torch_sub": (1, "torch.sub disallowed in torch's private registry, not read"),
    "config_patch_decorator_on_fn": (0, "a config.patch decorator's context is not modelled"),
    "config_patch_decorated_callee": (1, "the decorated callee runs eagerly (torch compiles its inner frame)"),
    "other_module_globals_dict_after_global_statement": (
        2, "a globals dict read after the frame assigned into it breaks"),
    "other_module_vars_after_global_statement": (
        2, "a globals dict read after the frame assigned into it breaks"),
    "other_module_attribute_made_and_deleted": (
        1, "torch runs a frame deleting a module attribute eagerly; ember breaks there"),
}  # fmt: skip


def _check_values_and_graphs(program: Program, graphs: int) -> None:
    expected, expected_state = run_program(program, lambda fn: fn)
    counter = CountingBackend()
    got, got_state = run_program(program, lambda fn: dynamo_capture.optimize(fn, backend=counter))
    assert_same_results(got, expected)
    assert_same(got_state, expected_state)
    assert counter.frame_count == graphs, f"graphs: ember {counter.frame_count}, noted {graphs}"


@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - set(NOT_LIKE_TORCH)))
def test_program_like_torch(name):
    check_program_like_torch(PROGRAMS[name])


@pytest.mark.parametrize("name", sorted(NOT_LIKE_TORCH))
def test_program_values_where_graphs_differ_from_torch(name):
    _check_values_and_graphs(PROGRAMS[name], NOT_LIKE_TORCH[name][0])
