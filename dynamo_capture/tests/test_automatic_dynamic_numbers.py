"""Numbers that change between calls: recompiled once, then symbolic (automatic dynamic).

An int or float argument (a local, an item of a tuple or list argument, a value read
from a tensor with `.item()` / `.tolist()` and handed to the code after the graph
break) is a constant in the first graph; when a later call brings another value the
frame recompiles once with that number symbolic, as torch.compile does: an int as a
SymInt input (0, 1 and negative values included), a float as a 0-d float64 tensor
input read back with `.item()`. Each program runs under capture and torch.compile
with counting backends (`torchcheck`), one call per value.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torchcheck import check_like_torch

import dynamo_capture
from guards import ShapeEnv


def _calls(*argument_lists):
    """make_args for check_like_torch: the next argument tuple on each call."""
    pending = list(argument_lists)
    return lambda: pending.pop(0)


def _values(make, values):
    return [make(v) for v in values]


def _vector(v):
    return (torch.randn(4), v)


def scale_by_int(x, n):
    return x * n


def scale_by_float(x, s):
    return x * s


def float_arithmetic(x, s):
    return x * (s * 2 + 1) - math.sqrt(s)


def float_and_int(x, s, n):
    return x * s + n


def int_branch(x, n):
    if n > 2:
        return x + n
    return x - n


def int_of_float(x, s):
    return x * int(s)


def float_returned(x, s):
    return x * s, s


def items_of_tuple(x, pair):
    a, b = pair
    return x * a - b


def items_of_list(x, values):
    return x * values[0] + values[1]


def float_as_operator_argument(x, s):
    return x.clamp(min=-s, max=s) + F.leaky_relu(x, s) + torch.full((4,), s)


def item_of_sum(x):
    v = x.sum().item()
    return x * v


def item_in_arithmetic(x):
    v = x.sum().item()
    w = v * 2 - 1
    return torch.sin(x) * w


def item_returned(x):
    v = x.max().item()
    return x + v, v


def int_item(x):
    return x * x.sum().item()


def tolist_summed(x):
    values = x.tolist()
    return x * sum(values)


CASES = {
    "int_0123": (scale_by_int, _values(_vector, [0, 1, 2, 3])),
    "int_then_0_1_negative": (scale_by_int, _values(_vector, [2, 3, 1, 0, -5])),
    "float_changes": (scale_by_float, _values(_vector, [0.5, 1.5, 2.5, 3.5])),
    "float_arithmetic": (float_arithmetic, _values(_vector, [0.5, 1.5, 2.5, 3.5])),
    "float_and_int": (float_and_int, [(torch.randn(4), i + 0.5, i) for i in range(4)]),
    "int_branch": (int_branch, _values(_vector, [2, 3, 4, 5])),
    "int_of_float": (int_of_float, _values(_vector, [0.5, 1.5, 2.5, 3.5])),
    "float_returned": (float_returned, _values(_vector, [0.5, 1.5, 2.5, 3.5])),
    "tuple_items": (items_of_tuple, [(torch.randn(4), (i, i - 1)) for i in range(4)]),
    "tuple_float_items": (items_of_tuple, [(torch.randn(4), (i + 0.5, 3)) for i in range(4)]),
    "list_items": (items_of_list, [(torch.randn(4), [i, i + 1]) for i in range(2, 6)]),
    "float_as_operator_argument": (
        float_as_operator_argument,
        _values(_vector, [0.25, 0.5, 0.75, 1.0]),
    ),
    "item_of_sum": (item_of_sum, [(torch.randn(4),) for _ in range(4)]),
    "item_in_arithmetic": (item_in_arithmetic, [(torch.randn(4),) for _ in range(4)]),
    "item_returned": (item_returned, [(torch.randn(4),) for _ in range(4)]),
    "int_item": (int_item, [(torch.arange(4) + i,) for i in range(4)]),
    "tolist_summed": (tolist_summed, [(torch.randn(4),) for _ in range(4)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_changing_numbers_recompile_once_like_torch(name):
    fn, argument_lists = CASES[name]
    check_like_torch(fn, _calls(*argument_lists, *argument_lists), calls=len(argument_lists))


def test_float_input_is_a_float64_tensor_read_with_item():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    compiled = dynamo_capture.optimize(scale_by_float, backend=backend)
    for s in (0.5, 1.5, 2.5):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, s), scale_by_float(x, s))
    assert len(graphs) == 2
    gm, example_inputs = graphs[1]
    assert [node.target for node in gm.graph.nodes if node.op == "call_method"] == ["item"]
    assert example_inputs[-1].dtype == torch.float64 and example_inputs[-1].dim() == 0


def test_order_on_symbolic_float_is_a_guard_relation():
    # `s > 1.0` on the symbolic float is guarded as a relation: a value on the same
    # side reuses the graph, one on the other side recompiles once
    def branch(x, s):
        if s > 1.0:
            return x * s
        return x - s

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = dynamo_capture.optimize(branch, backend=backend)
    for s in (0.5, 1.5, 2.5, 0.75, 0.25, 1.0000000000000002):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, s), branch(x, s))
    assert len(graphs) == 3
    assert "1.0" in compiled.entries[-1].artifacts.guard_code


def test_equality_on_symbolic_float_specializes_it():
    def equal(x, s):
        return x + 1 if s == 1.5 else x - 1

    compiled = dynamo_capture.optimize(equal, backend=lambda gm, example_inputs: gm.forward)
    for s in (0.5, 1.5, 2.5, 1.5, 0.5):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, s), equal(x, s))


def test_int_symbol_takes_any_integer():
    env = ShapeEnv()
    from guards import LocalSource

    symbol = env.create_int_symbol(1, LocalSource("n"))
    assert not symbol.is_positive and symbol.is_integer
    assert env.checks() == []  # no range guard: 0, 1 and negative values are covered


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_aot_backends_match_eager_on_changing_float_inputs(backend):
    import ember

    compiled = ember.compile(float_arithmetic, backend=backend)
    for s in (0.5, 1.5, 2.5):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, s), float_arithmetic(x, s))


def test_text_of_symbolic_int_is_its_value():
    # str(n) / f"{n}" of a symbolic int read its value (guarded), not the symbol's name
    def digits(x, n):
        return x * len(str(n)) + len(f"{n}:{n * 2}")

    compiled = dynamo_capture.optimize(digits, backend=lambda gm, example_inputs: gm.forward)
    for n in (2, 30, 500, 7, -1):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, n), digits(x, n))


def _calls_argument(x, fn):
    return fn(x)


def _adds(n):
    def add(t):
        return t + n

    return add


class _Config:
    def __init__(self, scale):
        self.scale = scale


def _scaled_by_config(x, config):
    return x * config.scale


def _scaled_by_dict(x, options):
    return x * options["scale"]


@pytest.mark.parametrize(
    "fn, holder",
    [
        (_calls_argument, _adds),
        (_scaled_by_config, _Config),
        (_scaled_by_dict, lambda n: {"scale": n}),
    ],
    ids=["closure_cell", "attribute", "dict_item"],
)
def test_int_read_from_an_argument_becomes_dynamic_like_torch(fn, holder):
    values = iter(range(2, 20))
    check_like_torch(fn, lambda: (torch.randn(4), holder(next(values))), calls=4)


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 1

    def forward(self, x):
        return x * self.n


def test_int_attribute_of_a_module_stays_static_like_torch():
    graphs = []
    module = _Scaled()
    compiled = dynamo_capture.optimize(
        module, backend=lambda gm, ex: graphs.append(gm) or gm.forward
    )
    for n in range(2, 5):
        module.n = n
        torch.testing.assert_close(compiled(torch.ones(2)), torch.ones(2) * n)
    assert len(graphs) == 3  # torch.compile: one graph per value (a module's ints are static)


# ----- symbolic ints leaving the frame: graph outputs, ints when the graph runs -----
def _returns_int_arithmetic(x, n):
    return x + 1, n + 1


def _returns_size_arithmetic(x):
    return x * 2, x.shape[0] * 2 + 1


def test_symbolic_int_returned_is_a_graph_output_like_torch():
    turns = itertools.cycle((2, 3, 4))
    check_like_torch(_returns_int_arithmetic, lambda: (torch.zeros(4), next(turns)), calls=3)


@pytest.mark.parametrize("dynamic", [None, True])
def test_symbolic_size_returned_is_a_graph_output_like_torch(dynamic):
    turns = itertools.cycle((2, 3, 4))
    check_like_torch(
        _returns_size_arithmetic, lambda: (torch.zeros(next(turns)),), calls=3, dynamic=dynamic
    )
