"""getattr with a default and hasattr on objects whose __getattr__ or property raises
AttributeError, and generators made in the frame driven by send / close.

The hooks are traced: getattr and hasattr take the AttributeError the traced code
raises as a missing attribute, as they do eagerly (one graph, as torch.compile).
Capture runs a generator to its end when it is made, sending None at each yield:
`send(None)` is `next`; another send, a throw or a close runs the frame eagerly.
"""

from __future__ import annotations

import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, eager_backend


def _one():
    return (torch.randn(3, 4),)


class _Table:
    def __init__(self):
        self.entries = {"scale": 3}

    def __getattr__(self, name):
        if name in self.entries:
            return self.entries[name]
        raise AttributeError(name)


class _RaisingProperty:
    @property
    def value(self):
        raise AttributeError("not set")


_TABLE = _Table()


def getattr_hook_made_in_frame(x):
    table = _Table()
    return x * table.scale, hasattr(table, "shift"), getattr(table, "shift", 4)


def getattr_hook_of_global(x):
    return x * _TABLE.scale + hasattr(_TABLE, "shift") + getattr(_TABLE, "shift", 4)


def property_raising_attribute_error(x):
    return x + hasattr(_RaisingProperty(), "value") + getattr(_RaisingProperty(), "value", 7)


def getattr_hook_caught_by_try(x):
    table = _Table()
    try:
        value = table.shift
    except AttributeError as error:
        value = len(str(error))
    return x * value


def hasattr_lets_other_errors_through(x):
    class Strict:
        def __getattr__(self, name):
            raise KeyError(name)

    try:
        hasattr(Strict(), "q")
    except KeyError:
        x = x + 1
    return x


def _pair_maker(x):
    yield x + 1
    yield x + 2


def _running_total():
    total = 0
    while True:
        sent = yield total
        if sent is None:
            return
        total += sent


def generator_send_none_is_next(x):
    numbers = _pair_maker(x)
    first = numbers.send(None)
    return first + numbers.send(None)


def generator_used_across_a_break(x):
    numbers = _pair_maker(x)
    first = next(numbers)
    print("between")
    return first + next(numbers)


def test_getattr_and_hasattr_take_a_hook_raising_attribute_error_as_missing():
    for fn in (
        getattr_hook_made_in_frame,
        getattr_hook_of_global,
        property_raising_attribute_error,
        getattr_hook_caught_by_try,
        hasattr_lets_other_errors_through,
    ):
        check_like_torch(fn, _one)


def test_generator_send_none_and_use_across_a_break_like_torch(capsys):
    check_like_torch(generator_send_none_is_next, _one)


def test_generator_left_unfinished_at_a_break_runs_the_frame_eagerly(capsys):
    """torch.compile reads the generator ahead at the break (2 graphs); its items would then
    miss a write made after the break, so ember runs the frame eagerly (values as eager)."""
    compiled = dynamo_capture.optimize(generator_used_across_a_break, backend=eager_backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), generator_used_across_a_break(x))


def generator_driven_by_send(x):
    totals = _running_total()
    next(totals)
    totals.send(2)
    return x * totals.send(3)


def generator_closed_early(x):
    numbers = _pair_maker(x)
    first = next(numbers)
    numbers.close()
    return first


def test_generator_send_and_close_run_the_frame_eagerly():
    """send of a value and close would change what the generator capture ran ahead
    gives: the frame runs eagerly, with eager's results."""
    for fn in (generator_driven_by_send, generator_closed_early):
        compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), fn(x))
        torch.testing.assert_close(compiled(x), fn(x))


def test_generator_left_at_a_break_is_a_generator():
    def hands_back(x):
        numbers = _pair_maker(x)
        next(numbers)
        print("between")
        return numbers

    compiled = dynamo_capture.optimize(hands_back, backend=CountingBackend())
    x = torch.randn(3)
    numbers = compiled(x)
    assert type(numbers).__name__ == "generator"
    assert numbers.send(None) is not None
    torch.testing.assert_close(list(numbers), [])
