"""Breaks inside called code: a break in a callee (global function, bound method,
submodule forward, staticmethod, classmethod) breaks the caller at the call's statement
and runs the callee as a compiled frame of its own, so the callee's code before and
after its break is compiled too. Loops over layers whose forward breaks run each
layer's forward compiled. 30 programs (see breakcheck.Program)."""

from __future__ import annotations

import pytest
import torch
from breakcheck import LOG, Program, check_break_program

import dynamo_capture
from dynamo_capture.testing import CountingBackend


def helper_prints(t):
    u = t * 2
    print("helper", u.shape)
    return u + 1


def helper_item(t):
    u = t.abs() + 1
    s = u.sum().item()
    return u / s


def two_level_helper(t):
    a = t.sin()
    b = helper_prints(a)
    return b.cos()


class Ops:
    def __init__(self, scale):
        self.scale = scale

    def method_prints(self, t):
        u = t * self.scale
        print("method", self.scale)
        return u - 1

    @staticmethod
    def static_prints(t):
        u = t + 3
        print("static")
        return u * 2

    @classmethod
    def class_prints(cls, t):
        u = t - 3
        print("classmethod", cls.__name__)
        return u * 4

    def calls_own_method(self, t):
        a = t.exp()
        b = self.method_prints(a)
        return b.relu()


OPS = Ops(3.0)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(4, 8)
        self.down = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = self.up(x).relu()
        print("mlp", h.shape)
        return self.down(h)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(4)
        self.mlp = Mlp()

    def forward(self, x):
        h = self.norm(x)
        h = self.mlp(h)
        return x + h


class HelperBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.proj(x)
        h = helper_prints(h)
        return h.tanh()


class Stack(torch.nn.Module):
    def __init__(self, block=Block, depth=2):
        super().__init__()
        self.blocks = torch.nn.ModuleList(block() for _ in range(depth))
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        h = x * 2
        for block in self.blocks:
            h = block(h)
        return self.head(h)


class Unrolled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Block()
        self.second = HelperBlock()

    def forward(self, x):
        h = self.first(x)
        h = self.second(h)
        return h * 3


class StaticUser(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @staticmethod
    def post(h):
        g = h.sigmoid()
        LOG.append(g.shape[0])
        print("post")
        return g * 2

    def forward(self, x):
        h = self.lin(x)
        h = self.post(h)
        return h + 1


torch.manual_seed(0)
BLOCK = Block()
STACK = Stack()
STACK_HELPERS = Stack(HelperBlock, 3)
UNROLLED = Unrolled()
STATIC_USER = StaticUser()


def call_global(x):
    y = x.sin()
    z = helper_prints(y)
    return z.cos()


def call_global_item(x):
    y = x.exp()
    z = helper_item(y)
    return z * 2


def call_two_levels(x):
    y = x + 1
    z = two_level_helper(y)
    return z - 1


def call_method(x):
    y = x.sin()
    z = OPS.method_prints(y)
    return z.cos()


def call_static_via_class(x):
    y = x.sin()
    z = Ops.static_prints(y)
    return z.cos()


def call_static_via_instance(x):
    y = x.sin()
    z = OPS.static_prints(y)
    return z.cos()


def call_classmethod(x):
    y = x.sin()
    z = Ops.class_prints(y)
    return z.cos()


def call_method_calling_method(x):
    y = x * 0.5
    z = OPS.calls_own_method(y)
    return z + 1


def call_local_object_method(x, ops):
    y = x * 2
    z = ops.method_prints(y)
    return z / 2


def call_submodule(x):
    y = x * 2
    z = BLOCK(y)
    return z.sum(-1)


def call_module_twice(x):
    a = BLOCK(x)
    b = BLOCK(a)
    return a + b


def call_in_expression(x):
    y = x.exp()
    return helper_prints(y) * 2 + y


def call_result_unused(x):
    y = x * 2
    helper_prints(y)
    return y


def call_in_return(x):
    y = x - 1
    return helper_prints(y)


def lambda_caller(x):
    f = lambda t: helper_prints(t) * 3  # noqa: E731
    y = x + 2
    return f(y)


PROGRAMS = [
    # caller before, callee before and after its break, caller after
    Program(call_global, (torch.randn(3),), 4, 2),
    Program(call_global_item, (torch.randn(3),), 4, 2),
    Program(call_two_levels, (torch.randn(3),), 6, 3),
    Program(call_method, (torch.randn(3),), 4, 2),
    Program(call_static_via_class, (torch.randn(3),), 4, 2),
    Program(call_static_via_instance, (torch.randn(3),), 4, 2),
    Program(call_classmethod, (torch.randn(3),), 4, 2),
    Program(call_method_calling_method, (torch.randn(3),), 6, 3),
    Program(call_local_object_method, (torch.randn(3), Ops(5.0)), 4, 2),
    Program(call_submodule, (torch.randn(2, 4),), 6, 3),
    Program(call_module_twice, (torch.randn(2, 4),), None, 4),
    Program(call_in_expression, (torch.randn(3),), 4, 2),  # resumed after the call, as torch
    Program(call_result_unused, (torch.randn(3),), 3, 2),
    Program(call_in_return, (torch.randn(3),), 3, 2),
    Program(lambda_caller, (torch.randn(3),), 4, 3),  # the lambda runs as a frame of its own
    # the loop over blocks breaks: the frame runs eagerly, each block's forward compiled,
    # one compiled forward for all blocks of a class (the graphs torch.compile makes)
    Program(STACK, (torch.randn(2, 4),), 6, 4),
    Program(STACK_HELPERS, (torch.randn(2, 4),), 5, 3),
    Program(UNROLLED, (torch.randn(2, 4),), None, 6),
    Program(STATIC_USER, (torch.randn(2, 4),), 4, 2),
    Program(BLOCK, (torch.randn(2, 4),), 4, 2),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_break_inside_a_callee(program):
    check_break_program(program)


def test_layers_in_a_loop_each_run_their_forward_compiled():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(STACK_HELPERS, backend=backend)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), STACK_HELPERS(x))
    # every layer's forward is a compiled frame: a graph before and after its helper call
    forwards = [part for part in compiled.parts if part.frame.name.endswith("forward")]
    assert len(forwards) >= 3
    assert all(part.entries for part in forwards)
    assert "forward" not in STACK_HELPERS.blocks[0].__dict__, "shadows are removed after"


def test_shadows_are_removed_when_the_callee_raises():
    class Raising(torch.nn.Module):
        def forward(self, x):
            y = x + 1
            print("about to raise")
            raise ValueError(f"raised in the callee {y.shape[0]}")

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Raising()

        def forward(self, x):
            h = x * 2
            return self.inner(h)

    outer = Outer()
    compiled = dynamo_capture.optimize(outer, backend=CountingBackend())
    with pytest.raises(ValueError, match="raised in the callee"):
        compiled(torch.randn(3))
    assert "forward" not in outer.inner.__dict__
    assert "static_prints" in Ops.__dict__ and isinstance(
        Ops.__dict__["static_prints"], staticmethod
    )
