"""Graph counts like torch.compile's for breaks deep in called code, recompiles and
calls kept out of the graph.

Each program runs a sequence of calls (one argument factory each; a factory may first
change a global, an attribute or a module the program reads) under capture, under
torch.compile and eagerly: the results equal eager's, and capture's counting backend
gets as many graphs, with as many operations, as torch.compile's. Covered: graph
breaks (graph_break, print, logging, `.item()`, `.tolist()`) one to four calls deep,
inside loops of called functions, in methods of modules held in a ModuleList,
ModuleDict or Sequential; recompiles on dtypes, requires_grad, ints and floats
(automatic dynamic), list lengths, dict keys, globals, module attributes, attributes
set on input tensors, mark_dynamic / mark_static / maybe_mark_dynamic, the recompile
limit; and torch functions kept out of the graph with disallow_in_graph, their
arguments computed in the graph before (`torch.sub(x * 2, 1)`).
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import dynamo_capture
from dynamo_capture import registry
from dynamo_capture.testing import CountingBackend, assert_same, clone_inputs

_log = logging.getLogger(__name__)

PROGRAMS = {}


def program(fn=None, **settings):
    """Register `fn`, a factory of {"fn", "calls"} (fresh objects for each side)."""

    def register(make):
        PROGRAMS[make.__name__] = (make, settings)
        return make

    return register(fn) if fn is not None else register


def _run(compiled, spec):
    for make in spec["calls"]:
        torch.manual_seed(0)
        args = make()
        torch.manual_seed(0)
        expected = spec["fn"](*clone_inputs(args)) if spec.get("eager_copy", True) else None
        torch.manual_seed(0)
        got = compiled(*args)
        if expected is not None:
            assert_same(got, expected)


def _counts_like_torch(make, ember=None, reference=None, **settings):
    counter = CountingBackend()
    spec = make()
    _run(dynamo_capture.optimize(spec["fn"], backend=counter, **settings, **(ember or {})), spec)
    torch._dynamo.reset()
    torch_counter = torch._dynamo.testing.CompileCounter()
    with torch._dynamo.config.patch(**(reference or {})):
        spec = make()
        _run(torch.compile(spec["fn"], backend=torch_counter, **settings), spec)
    torch._dynamo.reset()
    got = (counter.frame_count, counter.op_count)
    expected = (torch_counter.frame_count, torch_counter.op_count)
    assert got == expected, f"graphs/ops: ember {got}, torch {expected}"


def _fresh(*shape):
    return lambda: (torch.randn(*shape),)


def _twice(fn, *shape):
    return {"fn": fn, "calls": [_fresh(*shape or (4,))] * 2}


def _each(fn, make, values, **extra):
    return {"fn": fn, "calls": [lambda v=v: make(v) for v in values], **extra}


def _vector_and(value):
    return (torch.randn(4), value)


# ----- graph_break at depths ----------------------------------------------------------------
def _breaks_once(x):
    x = x + 1
    torch._dynamo.graph_break()
    return x * 2


def _two_deep(x):
    return _breaks_once(x.sin()).cos()


def _three_deep(x):
    return _two_deep(x - 1).exp()


def _four_deep(x):
    return _three_deep(x * 3) + 1


@program
def break_one_call_deep():
    return _twice(lambda x: _breaks_once(x) + 1)


@program
def break_two_calls_deep():
    return _twice(lambda x: _two_deep(x) + 1)


@program
def break_three_calls_deep():
    return _twice(lambda x: _three_deep(x) + 1)


@program
def break_four_calls_deep():
    return _twice(lambda x: _four_deep(x).sum())


@program
def break_deep_without_operations_after():
    def returns_after_break(x):
        torch._dynamo.graph_break()
        return x

    def middle(x):
        return returns_after_break(x)

    return _twice(lambda x: middle(x.sin()))


@program
def break_deep_called_twice():
    def fn(x):
        a = _two_deep(x)
        return a + _two_deep(a)

    return _twice(fn)


@program
def two_breaks_in_one_callee():
    def inner(x):
        x = x + 1
        torch._dynamo.graph_break()
        x = x * 2
        torch._dynamo.graph_break()
        return x - 1

    return _twice(lambda x: inner(x.cos()).sin())


@program
def break_deep_with_growing_sizes():
    return {"fn": lambda x: _two_deep(x) + 1, "calls": [_fresh(n) for n in (3, 4, 5, 6)]}


@program
def breaks_at_depth_three_and_one():
    return {"fn": lambda x: _three_deep(x) + _breaks_once(x), "calls": [_fresh(4)] * 3}


# ----- print, logging, item at depths ---------------------------------------------------------
def _prints(x):
    x = x + 1
    print("", end="")
    return x * 2


@program
def print_in_the_frame():
    def fn(x):
        x = x + 1
        print("", end="")
        return x * 2

    return _twice(fn)


@program
def print_one_call_deep():
    return _twice(lambda x: _prints(x).sum())


@program
def print_two_calls_deep():
    def middle(x):
        return _prints(x.sin()).cos()

    return _twice(lambda x: middle(x) + 1)


@program
def logging_in_the_frame():
    def fn(x):
        x = x + 1
        _log.info("value %s", 1)
        return x * 2

    return _twice(fn)


@program
def logging_one_call_deep():
    def inner(x):
        x = x.sin()
        _log.debug("debug %d", 3)
        return x.cos()

    return _twice(lambda x: inner(x + 1) * 2)


@program
def item_in_the_frame():
    def fn(x):
        return x * x.sum().item()

    return _twice(fn)


@program
def item_one_call_deep():
    def largest(x):
        return x.max().item()

    def fn(x):
        y = x + 1
        return y * largest(y)

    return _twice(fn)


@program
def item_decides_a_branch_two_calls_deep():
    def positive(x):
        return x.sum().item() > 0

    def middle(x):
        if positive(x):
            return x + 1
        return x - 1

    calls = [_fresh(4), _fresh(4), lambda: (torch.ones(4),), lambda: (-torch.ones(4),)]
    return {"fn": lambda x: middle(x * 2).sin(), "calls": calls}


@program
def tolist_one_call_deep():
    def as_list(x):
        return x.tolist()

    def fn(x):
        y = x + 1
        return y * len(as_list(y))

    return _twice(fn)


# ----- breaks inside loops of called functions ------------------------------------------------
@program
def break_in_a_loop_of_a_callee():
    def inner(x):
        for i in range(3):
            x = x + i
            torch._dynamo.graph_break()
        return x

    return _twice(lambda x: inner(x.sin()).cos())


@program
def print_in_a_loop_of_a_callee():
    def inner(x):
        for _ in range(2):
            x = x * 2
            print("", end="")
        return x

    return _twice(lambda x: inner(x + 1) - 1)


@program
def loop_calling_a_breaking_function():
    def fn(x):
        for _ in range(3):
            x = _breaks_once(x)
        return x

    return _twice(fn)


@program
def loop_in_a_callee_calling_a_breaking_function():
    def inner(x):
        for _ in range(2):
            x = _breaks_once(x)
        return x

    return _twice(lambda x: inner(x).sum())


@program
def break_in_a_while_loop():
    def fn(x):
        i = 0
        while i < 3:
            x = x + 1
            torch._dynamo.graph_break()
            i += 1
        return x

    return _twice(fn)


# ----- modules --------------------------------------------------------------------------------
class _Breaking(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        x = self.linear(x)
        torch._dynamo.graph_break()
        return x.relu()


class _PrintingHelper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def helper(self, x):
        x = x * 2
        print("", end="")
        return x

    def forward(self, x):
        return self.helper(self.linear(x)).sigmoid()


class _Layers(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _module(make_module):
    torch.manual_seed(0)
    return _twice(make_module(), 2, 4)


@program
def breaking_layers_of_a_module_list():
    return _module(lambda: _Layers([_Breaking() for _ in range(3)]))


@program
def breaking_helper_method_of_module_list_layers():
    return _module(lambda: _Layers([_PrintingHelper() for _ in range(2)]))


@program
def module_list_mixing_breaking_and_plain_layers():
    return _module(lambda: _Layers([torch.nn.Linear(4, 4), _Breaking(), torch.nn.Linear(4, 4)]))


@program
def module_list_layers_indexed():
    class Indexed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([_Breaking(), _Breaking()])

        def forward(self, x):
            return self.layers[1](self.layers[0](x))

    return _module(Indexed)


@program
def module_method_breaking_on_item():
    class Normalized(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def scale(self, x):
            return x.abs().max().item()

        def forward(self, x):
            y = self.linear(x)
            return y / self.scale(y)

    return _module(Normalized)


@program
def sequential_with_breaking_layers():
    return _module(
        lambda: torch.nn.Sequential(
            torch.nn.Linear(4, 4), _Breaking(), torch.nn.ReLU(), _Breaking()
        )
    )


@program
def module_dict_with_a_breaking_layer():
    class Table(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.ModuleDict({"a": _Breaking(), "b": torch.nn.Linear(4, 4)})

        def forward(self, x):
            for layer in self.table.values():
                x = layer(x)
            return x

    return _module(Table)


@program
def nested_sequentials_with_a_break():
    class Doubling(torch.nn.Module):
        def forward(self, x):
            torch._dynamo.graph_break()
            return x * 2

    return _module(
        lambda: torch.nn.Sequential(
            torch.nn.Linear(4, 4),
            torch.nn.Sequential(torch.nn.ReLU(), Doubling()),
            torch.nn.Sigmoid(),
        )
    )


class _Wrapping(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _Breaking()
        self.post = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.post(self.inner(x + 1))


@program
def breaking_submodule_called_inside_another_submodule_call():
    return _module(_Wrapping)


@program
def breaking_submodule_inside_two_submodule_calls():
    class Stacked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = _Breaking()
            self.act = torch.nn.Tanh()
            self.out = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.out(self.act(self.fc(x * 2)))

    return _module(Stacked)


@program
def wrapping_layers_of_a_module_list():
    return _module(lambda: _Layers([_Wrapping() for _ in range(3)]))


def test_submodule_around_a_breaking_call_swapped_between_calls_gives_eager_values():
    torch.manual_seed(0)
    module = _Wrapping()
    posts = [module.post, torch.nn.Linear(4, 4)]
    compiled = dynamo_capture.optimize(module, backend=CountingBackend())
    for index in (0, 0, 1, 0, 1):
        module.post = posts[index]
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(x), module(x))


# ----- other breaking callees -----------------------------------------------------------------
@program
def break_in_a_callee_under_no_grad():
    def inner(x):
        with torch.no_grad():
            x = x * 2
            torch._dynamo.graph_break()
            x = x + 1
        return x

    return {
        "fn": lambda x: inner(x.sin()).cos(),
        "calls": [lambda: (torch.randn(4, requires_grad=True),)] * 2,
    }


@program
def break_in_a_callee_with_keyword_arguments():
    def inner(x, *, scale, shift=0):
        x = x * scale
        torch._dynamo.graph_break()
        return x + shift

    return _twice(lambda x: inner(x.sin(), scale=2, shift=1).cos())


@program
def break_in_a_callee_with_varargs():
    def inner(*xs):
        total = sum(xs)
        torch._dynamo.graph_break()
        return total * 2

    return _twice(lambda x: inner(x, x + 1, x * 2).cos())


@program
def break_in_a_closure():
    def fn(x):
        y = x + 1

        def inner(z):
            z = z * y
            torch._dynamo.graph_break()
            return z + y

        return inner(x).sum()

    return _twice(fn)


@program
def break_in_a_staticmethod():
    class Holder:
        @staticmethod
        def go(x):
            x = x + 1
            torch._dynamo.graph_break()
            return x * 3

    return _twice(lambda x: Holder.go(x.sin()))


@program
def break_in_a_callee_whose_result_is_unused():
    def inner(x):
        torch._dynamo.graph_break()
        return x + 1

    def fn(x):
        a = x.sin()
        inner(a)
        return a.cos()

    return _twice(fn)


@program
def break_after_an_inplace_write_in_a_callee():
    def inner(x):
        x.add_(1)
        torch._dynamo.graph_break()
        x.mul_(2)
        return x

    return _twice(lambda x: inner(x.clone()))


def _first_doubled_then_second(xs):
    total = xs[0] * 2
    torch._dynamo.graph_break()
    return total + xs[1]


def _appends_then_breaks(xs):
    xs.append(xs[0] * 3)
    torch._dynamo.graph_break()
    return xs[-1] + len(xs)


@program
def list_built_for_a_breaking_callee():
    return _twice(lambda x: _first_doubled_then_second([x, x * 2]) + 1, 3)


@program
def tuple_built_for_a_breaking_callee():
    return _twice(lambda x: _first_doubled_then_second((x.sin(), x * 2)) + 1, 3)


@program
def list_built_for_a_callee_that_appends_to_it():
    return _twice(lambda x: _appends_then_breaks([x + 1, x]) * 2, 3)


@program
def list_held_by_a_local_given_to_a_callee_that_appends():
    def fn(x):
        items = [x + 1]
        y = _appends_then_breaks(items)
        return y + items[-1]

    return _twice(fn, 3)


@program
def list_given_to_a_breaking_callee_in_a_loop():
    def inner(xs):
        out = []
        for t in xs:
            out.append(t + 1)
            torch._dynamo.graph_break()
        return out

    return _twice(lambda x: inner([x, x * 2]), 3)


# ----- recompiles -----------------------------------------------------------------------------
@program
def dtypes_change():
    dtypes = [torch.float32, torch.float64, torch.float32, torch.bfloat16]
    return _each(lambda x: x * 2, lambda d: (torch.ones(3, dtype=d),), dtypes)


@program
def requires_grad_changes_under_no_grad():
    def fn(x):
        with torch.no_grad():
            y = x * 2
        return y + x

    return _each(fn, lambda r: (torch.randn(3, requires_grad=r),), [True, False, True])


@program(dynamic=True)
def int_argument_under_dynamic_true():
    return _each(lambda x, n: x + n, _vector_and, [2, 3, 4])


@program
def int_argument_as_a_loop_count():
    def fn(x, n):
        for _ in range(n):
            x = x + 1
        return x

    return _each(fn, _vector_and, [2, 3, 4, 3])


@program
def float_argument_in_a_branch():
    def fn(x, s):
        if s > 1.0:
            return x * s
        return x - s

    return _each(fn, _vector_and, [0.5, 1.5, 2.5, 0.25])


@program
def none_then_tensor_argument():
    return _each(
        lambda x, y: x if y is None else x + y,
        _vector_and,
        [None, torch.ones(4), None, torch.ones(4)],
    )


@program
def list_of_tensors_changes_length():
    return _each(sum, lambda n: ([torch.randn(3) for _ in range(n)],), [2, 3, 4, 2])


@program
def list_of_ints_as_a_view_shape():
    shapes = [[3, 4], [4, 3], [2, 6], [3, 4]]
    return _each(lambda x, shape: x.view(shape), lambda s: (torch.randn(12), s), shapes)


@program
def dict_of_tensors_changes_keys():
    def fn(table):
        total = 0
        for value in table.values():
            total = total + value
        return total

    keys = ["ab", "abc", "ab", "ba"]
    return _each(fn, lambda ks: ({k: torch.randn(3) for k in ks},), keys)


@program
def int_in_a_dict_argument_changes():
    return _each(lambda x, d: x * d["k"], _vector_and, [{"k": v} for v in (1, 2, 3, 4)])


@program
def tensor_rank_changes():
    shapes = [(2, 3), (2, 3, 4), (2, 3), (5,)]
    return _each(lambda x: x.sum(-1), lambda s: (torch.randn(*s),), shapes)


@program
def two_dims_grow():
    shapes = [(2, 3), (3, 3), (3, 4), (5, 6)]
    return _each(lambda x: x.t() @ x, lambda s: (torch.randn(*s),), shapes)


@program
def transposed_then_contiguous_input():
    def make(transposed):
        return (torch.randn(3, 4).t() if transposed else torch.randn(4, 3),)

    return _each(lambda x: x + 1, make, [0, 1, 0, 1])


FACTOR = 3
FLAG = True
TABLE = {"scale": 2}
HELPER = torch.sin


def _set_global(name, value, args):
    globals()[name] = value
    return args


@program
def global_int_changes():
    return _each(
        lambda x: x * FACTOR,
        lambda v: _set_global("FACTOR", v, (torch.ones(3),)),
        [3, 3, 4, 5, 3],
    )


@program
def global_bool_changes():
    return _each(
        lambda x: x + 1 if FLAG else x - 1,
        lambda v: _set_global("FLAG", v, (torch.ones(3),)),
        [True, False, True, False],
    )


@program
def global_dict_item_changes():
    def make(value):
        TABLE["scale"] = value
        return (torch.ones(3),)

    return _each(lambda x: x * TABLE["scale"], make, [2, 2, 3, 4])


@program
def global_function_swapped():
    def make(sine):
        return _set_global("HELPER", torch.sin if sine else torch.cos, (torch.ones(3),))

    return _each(lambda x: HELPER(x), make, [1, 0, 1, 0])


class _Configured(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)
        self.k = 2
        self.use_relu = True

    def forward(self, x):
        y = self.linear(x) * self.k
        if self.use_relu:
            y = y.relu()
        if self.training:
            y = y + 1
        return y


def _module_changes(changes):
    torch.manual_seed(0)
    module = _Configured()

    def make(change):
        change(module)
        return (torch.randn(2, 3),)

    return _each(module, make, changes)


@program
def module_training_flag_flips():
    return _module_changes(
        [lambda m: None, lambda m: m.eval(), lambda m: m.train(), lambda m: m.eval()]
    )


@program
def module_int_attribute_changes():
    return _module_changes([lambda m, v=v: setattr(m, "k", v) for v in (2, 3, 4, 5)])


@program
def module_bool_attribute_changes():
    return _module_changes([lambda m, v=v: setattr(m, "use_relu", v) for v in (1, 0, 1)])


@program
def module_parameter_requires_grad_changes():
    return _module_changes(
        [lambda m, v=v: m.linear.weight.requires_grad_(v) for v in (True, False, True)]
    )


@program
def attribute_of_an_input_tensor_changes():
    def make(value):
        x = torch.randn(3)
        x.scale = value
        return (x,)

    return {**_each(lambda x: x * x.scale, make, [1, 1, 2, 3]), "eager_copy": False}


def _marked(mark, n, dim=0):
    x = torch.randn(n, 3)
    mark(x, dim)
    return (x,)


@program
def marked_dynamic_on_the_first_call():
    return _each(lambda x: x * 2, lambda n: _marked(torch._dynamo.mark_dynamic, n), [2, 3, 4])


@program
def marked_dynamic_then_unmarked():
    def make(value):
        n, marked = value
        x = torch.randn(n, 3)
        if marked:
            torch._dynamo.mark_dynamic(x, 0)
        return (x,)

    return _each(lambda x: x * 2, make, [(2, 1), (3, 0), (4, 0)])


@program
def maybe_marked_dynamic():
    return _each(lambda x: x + 1, lambda n: _marked(torch._dynamo.maybe_mark_dynamic, n), [2, 3, 4])


@program
def marked_static_sizes_grow():
    return _each(lambda x: x + 1, lambda n: _marked(torch._dynamo.mark_static, n), [2, 3, 4, 5])


@program(dynamic=False)
def marked_dynamic_under_dynamic_false():
    return _each(lambda x: x * 2, lambda n: _marked(torch._dynamo.mark_dynamic, n), [2, 3, 4])


@program
def marked_dynamic_size_in_a_branch():
    def fn(x):
        if x.shape[0] > 3:
            return x * 2
        return x + 1

    return _each(fn, lambda n: _marked(torch._dynamo.mark_dynamic, n), [2, 3, 5, 6])


def _limited(limit, **settings):
    return {
        "ember": {"recompile_limit": limit},
        "reference": {"recompile_limit": limit},
        **settings,
    }


@program(**_limited(1))
def recompile_limit_one_on_dtypes():
    dtypes = [torch.float32, torch.float64, torch.int64, torch.float32]
    return _each(lambda x: x * 2, lambda d: (torch.ones(3, dtype=d),), dtypes)


@program(**_limited(3))
def recompile_limit_three_on_strings():
    return _each(
        lambda x, mode: x + len(mode), _vector_and, ["a", "bb", "ccc", "dddd", "a", "eeeee"]
    )


@program(**_limited(2, dynamic=False))
def recompile_limit_with_a_graph_break():
    def fn(x, n):
        x = x + n
        torch._dynamo.graph_break()
        return x * n

    return _each(fn, _vector_and, [1, 2, 3, 4, 5])


@program(**_limited(2, dynamic=False))
def entries_kept_past_the_recompile_limit():
    return _each(lambda x, n: x * n, _vector_and, [1, 2, 3, 1, 2, 5, 1])


@program
def string_argument_picks_the_function():
    def fn(x, mode):
        if mode == "sin":
            return x.sin()
        return x.cos()

    return _each(fn, _vector_and, ["sin", "cos", "sin", "cos", "tan"])


@program
def dtype_argument_changes():
    return _each(lambda x, d: x.to(d), _vector_and, [torch.float64, torch.float16, torch.float64])


@program
def int_argument_as_a_factory_size():
    return _each(lambda n: torch.ones(n) * 2, lambda n: (n,), [2, 3, 4, 5])


# ----- torch functions kept out of the graph ---------------------------------------------------
@program
def disallowed_function_between_two_graphs():
    def fn(x):
        x = x + 1
        x = torch.sub(x, 2)
        return x * 3

    return _twice(fn, 3)


@program
def disallowed_function_first_and_last():
    return _twice(lambda x: torch.sub(torch.sub(x, 2) * 3, 1), 3)


@program
def disallowed_function_of_a_computed_argument():
    def fn(x):
        y = torch.sub(x * 2, 1)
        return y + x

    return _twice(fn, 3)


@program
def disallowed_function_of_a_computed_argument_under_no_grad():
    def fn(x):
        with torch.no_grad():
            y = torch.sub(x * 2, 1)
        return y + x

    return {"fn": fn, "calls": [lambda: (torch.randn(3, requires_grad=True),)] * 2}


@program
def disallowed_function_of_a_computed_argument_under_enable_grad():
    def fn(x):
        with torch.enable_grad():
            y = torch.sub(x * 2, 1)
        return y + x

    return _twice(fn, 3)


@program
def disallowed_function_in_a_loop():
    def fn(x):
        for _ in range(2):
            x = torch.sub(x + 1, 1)
        return x

    return _twice(fn, 3)


@program
def disallowed_function_in_a_callee():
    def inner(x):
        return torch.sub(x.cos(), 2) + 2

    return _twice(lambda x: inner(x + 1).sum(), 3)


@program
def disabled_function_two_calls_deep():
    @torch.compiler.disable
    def eager(x):
        return x * 5

    def inner(x):
        return eager(x.sin()).cos()

    return _twice(lambda x: inner(x + 1) - 1, 3)


@pytest.fixture
def sub_kept_out_of_the_graph():
    dynamo_capture.disallow_in_graph(torch.sub)
    torch._dynamo.disallow_in_graph(torch.sub)
    yield
    registry._disallowed_in_graph.pop(id(torch.sub), None)
    torch._dynamo.allow_in_graph(torch.sub)
    torch._dynamo.reset()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_counts_like_torch(name, sub_kept_out_of_the_graph):
    make, settings = PROGRAMS[name]
    _counts_like_torch(make, **settings)
