"""`max(t, 0.5)`, `min(a, b)`, `max([t1, t2, 1.0])` with one-element tensors among the
items: one graph operation (torch.clamp, torch.maximum/minimum), as torch.compile
writes it, with no branch on tensor data.

Eagerly the call returns one of its items: the tensor itself or the Python number.
The graph computes the chosen item's value as a tensor, which is what eager code gets
only where the result is used in arithmetic with a tensor of at least one dimension
(and the dtype, shape and requires_grad come out alike whichever item won). So the
result is a `ChoiceValue`, which capture lets only such arithmetic (and further
min/max) read; anything else that reads it breaks the graph, and where it leaves the
compiled part (returned, or live at a break) the frame runs eagerly.

A ChoiceValue negated (`-max(t, 0.5)`) or combined with a Python number
(`0 + max(t, 0.5)`, as `sum([...])` starts) is a derived ChoiceValue: eagerly the op
applied to whichever item was picked, in the graph the op applied to the picked value.
It too is read only by arithmetic with a dimensioned tensor, where both sides' values
agree: the op keeps the tensors' dtype alike whichever tensor was picked, and the
numbers the op gives must be exact in that dtype.

NOTE: as torch.compile's, the ops give NaN where a NaN item is compared: Python's
max/min keep the first item when a comparison with NaN is false.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.values import PythonValue, TensorValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "ChoiceValue",
    "check_aliases",
    "choice_operand",
    "choice_with_number",
    "negated_choice",
    "tensor_extreme",
]

_NUMBER_TYPES = (int, float)
# arithmetic and comparisons whose result with a dimensioned tensor has its shape
_ARITHMETIC = frozenset(
    {
        operator.add,
        operator.sub,
        operator.mul,
        operator.truediv,
        operator.lt,
        operator.le,
        operator.gt,
        operator.ge,
        operator.iadd,
        operator.isub,
        operator.imul,
        operator.itruediv,
    }
)


@dataclass(eq=False, slots=True)
class ChoiceValue(Value):
    """The item min/max picked among one-element tensors and numbers: `tensor` is the
    graph's value of it; `tensors` and `numbers` are the items it may be eagerly."""

    tensor: TensorValue
    tensors: list[TensorValue] = field(default_factory=list)
    numbers: list[int | float] = field(default_factory=list)
    source: Any = None
    # a tensor that requires grad is among the items: it is the first, the rest numbers
    # (torch.clamp's gradient reaches it exactly where eagerly it is picked, ties too)
    grad: bool = False
    # an op applied after the pick (`-max(...)`, `0 + max(...)`): `tensors` are then the
    # items before it, and `numbers` the numbers the op gave
    derived: bool = False


def _plain_number(value: Value) -> int | float | None:
    if isinstance(value, PythonValue) and type(value.obj) in _NUMBER_TYPES:
        return value.obj
    return None


def _one_element_tensor(value: Value) -> bool:
    if not isinstance(value, TensorValue) or value.python_type is not torch.Tensor:
        return False
    example = value.example
    return example.dim() == 0 and not example.is_complex() and example.dtype is not torch.bool


def _representable(number: int | float, dtype: torch.dtype) -> bool:
    """The number, stored as a tensor of `dtype`, reads back equal."""
    try:
        return torch.tensor(number, dtype=dtype).item() == number
    except (RuntimeError, OverflowError):
        return False


def tensor_extreme(tx: Translator, name: str, items: list[Value]) -> Value | None:
    """max/min of `items` (at least two, a one-element tensor among them) as a graph
    operation: a ChoiceValue, or the tensor where every item is a tensor the graph
    computes; None where that is not sound (capture compares them as before)."""
    tensors: list[TensorValue] = []
    numbers: list[int | float] = []
    for item in items:
        if isinstance(item, ChoiceValue) and item.derived:
            return None
        if isinstance(item, ChoiceValue):
            tensors += item.tensors
            numbers += item.numbers
        elif _one_element_tensor(item):
            tensors.append(item)
        elif (number := _plain_number(item)) is not None:
            numbers.append(number)
        else:
            return None
    if not tensors:
        return None
    grad = any(t.example.requires_grad for t in tensors)
    first = items[0]
    if grad and not (
        len(tensors) == 1
        and (first is tensors[0] or (isinstance(first, ChoiceValue) and first.grad))
    ):
        return None  # ties: Python keeps the first item, torch.maximum splits the gradient
    dtype = tensors[0].example.dtype
    if any(
        t.example.dtype != dtype or t.example.device != tensors[0].example.device for t in tensors
    ):
        return None
    if not dtype.is_floating_point and any(isinstance(number, float) for number in numbers):
        return None  # torch.clamp would make the integer tensor a float one
    if not dtype.is_floating_point and not all(_representable(n, dtype) for n in numbers):
        return None
    pair = torch.maximum if name == "max" else torch.minimum
    bound = "min" if name == "max" else "max"
    current: Value = items[0]
    for item in items[1:]:
        left, right = _graph_side(current), _graph_side(item)
        if isinstance(left, TensorValue) and isinstance(right, TensorValue):
            result = tx.ctx.call("call_function", pair, (left, right), {})
        elif isinstance(left, TensorValue) or isinstance(right, TensorValue):
            tensor, number = (left, right) if isinstance(left, TensorValue) else (right, left)
            result = tx.ctx.call("call_function", torch.clamp, (tensor,), {bound: number.obj})
        else:
            current = PythonValue((max if name == "max" else min)(left.obj, right.obj))
            continue
        current = result
    assert isinstance(current, TensorValue)
    if not numbers and not grad and not any(_graph_input(t) for t in tensors):
        # eagerly one of the tensors, each computed in the graph: the picked value is it
        # (while no code can see that it is the same object: check_aliases)
        tx.ctx.tensor_extremes.append((current.node, tensors))
        return current
    return ChoiceValue(current, tensors, numbers, grad=grad)


_NUMBER_OPS = {
    operator.add: operator.add,
    operator.sub: operator.sub,
    operator.mul: operator.mul,
    operator.truediv: operator.truediv,
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.itruediv: operator.truediv,
}


def _exact_in(numbers: list[int | float], dtype: torch.dtype) -> bool:
    return all(_representable(number, dtype) for number in numbers)


def negated_choice(tx: Translator, choice: ChoiceValue) -> ChoiceValue:
    """-choice: eagerly the picked item negated; in the graph the picked value negated.
    A choice among unsigned integer tensors breaks (negating wraps around there)."""
    dtype = choice.tensor.example.dtype
    if not (dtype.is_floating_point or dtype.is_signed):
        raise Unsupported("negating min()/max() of unsigned integer tensors and numbers")
    tensor = tx.ctx.call("call_function", operator.neg, (choice.tensor,), {})
    assert isinstance(tensor, TensorValue)
    numbers = [-number for number in choice.numbers]
    return ChoiceValue(tensor, choice.tensors, numbers, grad=choice.grad, derived=True)


def choice_with_number(tx: Translator, fn: Any, left: Value, right: Value) -> Value | None:
    """`choice <op> number` or `number <op> choice` for + - * /: a derived ChoiceValue, or
    None where one side is not a plain number (or the op is another). Breaks where the
    numbers eager computes are not exact in the graph's dtype (the graph computes them
    rounded to it)."""
    op = _NUMBER_OPS.get(fn)
    choice, other = (left, right) if isinstance(left, ChoiceValue) else (right, left)
    number = _plain_number(other)
    if op is None or number is None or not isinstance(choice, ChoiceValue):
        return None
    if op is not fn and choice is left:
        # NOTE: eagerly `pick += 1` writes a picked tensor in place (the item itself)
        raise Unsupported("an in-place operator on the result of min()/max() of tensors")
    operands = (choice.tensor, other) if choice is left else (other, choice.tensor)
    try:
        numbers = [op(n, number) if choice is left else op(number, n) for n in choice.numbers]
    except (ZeroDivisionError, OverflowError) as error:
        raise Unsupported(f"min()/max() of tensors and numbers: {error}") from error
    tensor = tx.ctx.call("call_function", op, operands, {})
    assert isinstance(tensor, TensorValue)
    dtype = tensor.example.dtype
    if tensor.example.dim() != 0 or not _exact_in([number, *choice.numbers, *numbers], dtype):
        raise Unsupported(
            "arithmetic on min()/max() of tensors and numbers whose numbers the tensors' "
            "dtype rounds"
        )
    return ChoiceValue(tensor, choice.tensors, numbers, grad=choice.grad, derived=True)


def check_aliases(ctx: Any, outputs: list[Any]) -> None:
    """Eagerly, min/max of tensors returns one of them, the same object: where one of
    those tensors leaves the compiled part too, or the graph writes into any tensor after
    the pick, code could see that the graph's value is another object; the frame runs
    eagerly there."""
    from dynamo_capture.errors import NeedsEagerFrame
    from dynamo_capture.output_graph import _has_side_effect

    for node, tensors in ctx.tensor_extremes:
        if any(item is output for item in tensors for output in outputs):
            raise NeedsEagerFrame("a tensor min()/max() picked leaves the compiled part as well")
        later = node.next
        while later.op != "root":
            if later.op == "call_module" or (
                later.op in ("call_function", "call_method")
                and _has_side_effect(later.target, later.kwargs)
            ):
                raise NeedsEagerFrame("a tensor is written after min()/max() picked among tensors")
            later = later.next


def _graph_leaves(node: torch.fx.Node) -> set[torch.fx.Node]:
    """The placeholders and attributes the graph computes `node` from."""
    seen: set[torch.fx.Node] = set()
    leaves: set[torch.fx.Node] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.op in ("placeholder", "get_attr"):
            leaves.add(current)
        stack.extend(current.all_input_nodes)
    return leaves


def _graph_input(value: TensorValue) -> bool:
    """An input of the graph (eagerly min/max returns that very object)."""
    return value.source is not None or value.node.op == "placeholder"


def _graph_side(value: Value) -> Value:
    return value.tensor if isinstance(value, ChoiceValue) else value


def choice_operand(fn: Any, left: Value, right: Value) -> tuple[Value, Value]:
    """The operands of `left <fn> right` with a ChoiceValue among them replaced by its
    graph tensor, where the result is the same whichever item eager's min/max picked;
    raises Unsupported elsewhere."""
    choice, other = (left, right) if isinstance(left, ChoiceValue) else (right, left)
    assert isinstance(choice, ChoiceValue)
    in_place = fn in (operator.iadd, operator.isub, operator.imul, operator.itruediv)
    if fn not in _ARITHMETIC or (in_place and choice is left):
        raise Unsupported(
            f"{getattr(fn, '__name__', fn)} on the result of min()/max() of tensors and numbers"
        )
    if not (
        isinstance(other, TensorValue)
        and other.python_type is torch.Tensor
        and other.example.dim() >= 1
    ):
        raise Unsupported(
            "the result of min()/max() of tensors and numbers used other than in arithmetic "
            "with a tensor of at least one dimension"
        )
    example = other.example
    # a derived choice's tensor items went through the same op as the graph's value
    picked = [] if choice.derived else choice.tensors
    kinds = {torch.result_type(t.example, example) for t in picked}
    kinds |= {torch.result_type(number, example) for number in choice.numbers}
    kinds.add(torch.result_type(choice.tensor.example, example))
    if len(kinds) != 1:
        raise Unsupported(
            "min()/max() of tensors and numbers whose result dtype depends on the pick"
        )
    if choice.grad and not (
        example.requires_grad and _graph_leaves(choice.tensor.node) <= _graph_leaves(other.node)
    ):
        # NOTE: eagerly a number picked leaves the tensor out of the autograd graph: an
        # input reached only through it gets no gradient (None), not zeros
        raise Unsupported("min()/max() of a tensor that requires grad, its pick not used alike")
    dtype = choice.tensor.example.dtype
    if kinds != {dtype} and not all(_representable(n, dtype) for n in choice.numbers):
        # NOTE: a number is used in the result's dtype eagerly, but rounded to the
        # tensors' dtype first in the graph
        raise Unsupported("min()/max() of tensors and numbers the tensors' dtype rounds")
    tensor = choice.tensor
    return (tensor, right) if choice is left else (left, tensor)
