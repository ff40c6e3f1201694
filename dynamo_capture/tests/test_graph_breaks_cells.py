"""Breaks in frames whose locals are captured by inner functions (cell variables).

The parts of such a frame share its cells: each part takes the cells as
parameters, so a closure made before the break sees what the code after it
writes, and the reverse, as in eager code. A write to a cell from compiled code
is a break of its own (it runs in the eager part). A method whose `self` is a
cell and that calls `super()` runs eagerly as a whole. See breakcheck.Program.
"""

from __future__ import annotations

import pytest
import torch
from breakcheck import LOG, Program, check_break_program


def closure_before_break(x):
    scale = 2.0

    def f(t):
        return t * scale

    y = f(x)
    print("mid")
    return f(y) + 1


def captured_parameter(x, k):
    g = lambda t: t * k  # noqa: E731
    y = g(x)
    print("mid")
    return g(y)


def cell_written_after_break(x):
    scale = 2.0
    f = lambda t: t * scale  # noqa: E731
    y = f(x)
    print("mid")
    scale = 3.0  # the closure made before the break must see this
    return f(y)


def cell_written_before_break(x):
    scale = 2.0
    f = lambda t: t * scale  # noqa: E731
    scale = x.shape[0] + 1.0
    print("mid", scale)
    return f(x)


def nonlocal_counter(x):
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        return t + count

    y = bump(x)
    print("mid")
    y = bump(y)
    return y * count


def closure_made_after_break(x):
    base = x * 2
    print("mid")
    add = lambda t: t + base  # noqa: E731
    return add(x), base


def closure_escapes_through_a_list(x, out):
    base = x.sum()
    out.append(lambda: base * 2)
    print("mid")
    base = base + 1
    return x * 3


def comprehension_captures(x, k):
    ys = [x * i * k for i in range(3)]
    print("mid")
    return sum(y * k for y in ys)


def break_in_nested_function_reading_cell(x):
    offset = x.mean()

    def inner(t):
        print("inner")
        return t - offset

    return inner(x * 2) * 3


def loop_in_a_frame_with_cells(x):
    total = x * 0
    add = lambda t: t + total  # noqa: E731
    for step in range(3):
        x = add(x) * 2
        print("step", step)
        total = total + 1
    return x, add(x)


def no_grad_block_in_a_frame_with_cells(x):
    scale = 2.0
    f = lambda t: t * scale  # noqa: E731
    with torch.no_grad():
        y = f(x)
        print("inside", torch.is_grad_enabled())
        scale = 5.0
        z = f(y)
    return z + f(x)


def _wrap(func):
    def wrapper(self, *args, **kwargs):
        def tie(out):
            return out + self.bias  # `self` is a cell of wrapper

        out = func(self, *args, **kwargs)
        return tie(out)

    return wrapper


class Wrapped(torch.nn.Module):
    """A decorated forward, as transformers' models have: the break is in the callee."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.bias = torch.nn.Parameter(torch.randn(4))

    @_wrap
    def forward(self, x):
        h = self.lin(x)
        print("inside forward")
        return h.relu()


class Base(torch.nn.Module):
    def scale(self, x):
        return x * 2


class UsesSuper(Base):
    def scale(self, x):
        keep = lambda: self  # noqa: E731  (`self` is a cell)
        y = super().scale(x)
        print("mid")
        return y + (keep() is self)


def _logged(x):
    LOG.append(float(x.sum()))
    return x


def break_via_log_in_closure(x):
    factor = 3

    def step(t):
        return _logged(t) * factor

    a = step(x)
    factor = 4
    return step(a)


def branch_on_a_value_after_a_break_with_cells(x):
    y = x * 2
    print("mid")
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        return t + count

    # a data-dependent jump in the resumed part: the parts of the taken branch take the
    # frame's cells too (they follow its varnames)
    if (y < 0).any():
        y = bump(y)
    else:
        y = bump(bump(y))
    return y * count


torch.manual_seed(0)
X = torch.randn(4)
WRAPPED = Wrapped()
USES_SUPER = UsesSuper()

PROGRAMS = [
    Program(closure_before_break, (X,), 2, 1),
    Program(captured_parameter, (X, 3.0), 2, 1),
    Program(cell_written_after_break, (X,), 2, 1),
    Program(cell_written_before_break, (X,), None, 1),
    Program(nonlocal_counter, (X,), 2, 1),
    Program(closure_made_after_break, (X,), 2, 1),
    Program(comprehension_captures, (X, 2.0), 2, 1),
    Program(break_in_nested_function_reading_cell, (X,), 3, 2),  # inner: a frame of its own
    Program(WRAPPED, (torch.randn(2, 4),), 3, 2),
    Program(loop_in_a_frame_with_cells, (X,), None, 1),  # runs eagerly: a break in a loop
    Program(no_grad_block_in_a_frame_with_cells, (torch.randn(4, requires_grad=True),), 2, 1),
    Program(USES_SUPER.scale, (X,), 0, 1),
    Program(break_via_log_in_closure, (X,), None, 4),
    Program(branch_on_a_value_after_a_break_with_cells, (X,), None, 2),
    Program(branch_on_a_value_after_a_break_with_cells, (X.abs(),), None, 2),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_break_in_a_frame_with_cells(program):
    check_break_program(program)


def test_closure_escaping_through_a_list_sees_the_later_write():
    import dynamo_capture
    from dynamo_capture.testing import CountingBackend

    compiled = dynamo_capture.optimize(closure_escapes_through_a_list, backend=CountingBackend())
    eager_out, compiled_out = [], []
    x = torch.randn(4)
    torch.testing.assert_close(
        compiled(x, compiled_out), closure_escapes_through_a_list(x, eager_out)
    )
    torch.testing.assert_close(compiled_out[0](), eager_out[0]())
    assert compiled.graph_breaks


def test_a_fresh_closure_each_call_reuses_the_compiled_code():
    import dynamo_capture
    from dynamo_capture.testing import CountingBackend

    def make(k):
        return lambda t: t * k

    def apply(f, x):
        return f(x) + 1

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(apply, backend=backend)
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(compiled(make(2.0), x), x * 2.0 + 1)
    assert len(backend.graphs) == 1, "a closure is guarded on its code and cells, not its identity"
    torch.testing.assert_close(compiled(make(3.0), x), x * 3.0 + 1)  # the cell is guarded
    torch.testing.assert_close(compiled(lambda t: t - 1, x), x)  # another code
