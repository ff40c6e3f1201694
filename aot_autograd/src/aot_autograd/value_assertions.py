"""Checks of values that eager makes and a traced graph would lose: asserted at run time.

Some functions check their arguments' values where tracing takes a path that does
not: `F.one_hot(t, num_classes=k)` raises "Class values must be smaller than
num_classes." for a class `>= k` in eager, but on fake tensors (and on any tensor a
dispatch mode sees) it computes `t.unsqueeze(-1) == arange(k)`, which gives a row of
zeros for such a class: a silently wrong result.

`VALUE_ASSERTIONS` is a table keyed by the function (what the traced code calls,
as `__torch_function__` sees it). A rule takes an `assert_value(predicate, error,
message)` callback and the call's arguments; it asserts, with tensors computed by
traced ops, what eager checks, and returns the function's result computed without
reading values into Python (or `NotHandled`, leaving the call to the function).

`ValueAssertionMode` applies the table while tracing. Each assertion becomes a value
check of the traced program (a boolean output of the forward graph, computed by every
backend) with the error eager raises; the run time raises it where the check's
value is not all true (see runtime.output_assembler), before anything is copied back.

    >>> import torch.nn.functional as F
    >>> f = aot_function(lambda t: F.one_hot(t, 3), fw_compiler=lambda gm, args: gm)
    >>> f(torch.tensor([0, 3]))  # RuntimeError: Class values must be smaller than num_classes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from aot_autograd.errors import IndexValueCheckError, ValueCheckError, ValueValueCheckError

__all__ = [
    "NotHandled",
    "VALUE_ASSERTIONS",
    "ValueAssertion",
    "ValueAssertionMode",
    "value_check_error",
]

# Errors an assertion may raise, by the name stored in a program (and its portable
# record): each is (or derives from) the class eager raises.
_ERROR_NAMES = ("RuntimeError", "IndexError", "ValueError")


@dataclass(frozen=True, slots=True)
class ValueAssertion:
    """What a failed value check raises: eager's error class (by name) and message."""

    error: str
    message: str

    def __post_init__(self) -> None:
        if self.error not in _ERROR_NAMES:
            raise ValueError(f"a value assertion raises one of {_ERROR_NAMES}, not {self.error!r}")


class NotHandled:
    """A rule's answer for a call it leaves to the function itself (eager's own path)."""


AssertValue = Callable[[torch.Tensor, str, str], None]


def _one_hot(assert_value: AssertValue, tensor: Any, num_classes: Any = -1) -> Any:
    # num_classes=-1 infers the count from the values: data-dependent, the function decides.
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.int64:
        return NotHandled
    if not isinstance(num_classes, int) or num_classes < 0:
        return NotHandled
    # Eager checks, in this order, the smallest class and then the largest.
    assert_value(tensor.ge(0).all(), "RuntimeError", "Class values must be non-negative.")
    assert_value(
        tensor.lt(num_classes).all(),
        "RuntimeError",
        "Class values must be smaller than num_classes.",
    )
    classes = torch.arange(num_classes, device=tensor.device, dtype=torch.int64)
    return tensor.unsqueeze(-1).eq(classes).to(torch.int64)


def _one_hot_call(assert_value: AssertValue, args: tuple, kwargs: dict) -> Any:
    names = ("tensor", "num_classes")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if set(bound) - set(names) or "tensor" not in bound:
        return NotHandled
    return _one_hot(assert_value, **bound)


# The function as the traced code calls it -> its rule (assert_value, args, kwargs).
VALUE_ASSERTIONS: dict[Any, Callable[[AssertValue, tuple, dict], Any]] = {
    torch.nn.functional.one_hot: _one_hot_call,
}


class ValueAssertionMode(TorchFunctionMode):
    """Applies `VALUE_ASSERTIONS` to the calls of traced code, handing each assertion
    (a boolean tensor that must be all true, and what to raise otherwise) to `record`."""

    def __init__(self, record: Callable[[torch.Tensor, ValueAssertion], None]) -> None:
        super().__init__()
        self.record = record

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        try:
            rule = VALUE_ASSERTIONS.get(func)
        except TypeError:  # an unhashable callable has no rule
            rule = None
        if rule is not None:
            out = rule(self._assert_value, args, kwargs)
            if out is not NotHandled:
                return out
        return func(*args, **kwargs)

    def _assert_value(self, predicate: torch.Tensor, error: str, message: str) -> None:
        self.record(predicate, ValueAssertion(error, message))


def value_check_error(assertion: ValueAssertion) -> Exception:
    """The exception a failed check with `assertion` raises (eager's class, and ours)."""
    kind = {
        "RuntimeError": ValueCheckError,
        "IndexError": IndexValueCheckError,
        "ValueError": ValueValueCheckError,
    }[assertion.error]
    return kind(f"{assertion.message} (a check of values eager makes, run by the compiled graph)")
