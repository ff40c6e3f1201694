"""Backward formulas that replace autograd's where its C++ formula branches on tensor data.

Some of autograd's C++ formulas choose between two computations by reading the
input's values (`prod` counts the input's zeros with `.item()`). On fake tensors,
and on any tensor subclass, they skip the read and always take one branch, so a
graph traced on fakes computes the other branch's numbers for every input: with
inf or NaN in the input the two differ (`prod` over a dim of size 1 of `[inf]`:
eager's `grad * result / input` gives NaN, the zero-safe branch `grad`).

Before the backward is traced, every autograd node of a table entry gets a hook
(`torch.autograd.graph.Node.register_hook`) that returns the gradient computed by
the entry in place of the C++ formula's (which is left dead in the graph). An
entry computes both branches and selects between them with `where` on the
condition eager reads, so the choice is made on the data at every call.

Each entry takes the autograd node and the gradient of its output and returns the
gradient of its input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

__all__ = ["BACKWARD_FORMULAS", "override_backward_formulas"]

BackwardFormula = Callable[[Any, torch.Tensor], torch.Tensor]
BACKWARD_FORMULAS: dict[str, BackwardFormula] = {}


def _register(name: str) -> Callable[[BackwardFormula], BackwardFormula]:
    def register(formula: BackwardFormula) -> BackwardFormula:
        if name in BACKWARD_FORMULAS:
            raise ValueError(f"backward formula for {name} registered twice")
        BACKWARD_FORMULAS[name] = formula
        return formula

    return register


def _conj(t: torch.Tensor) -> torch.Tensor:
    return t.conj_physical() if t.is_complex() else t


def _signed(value: int) -> int:
    """A saved int64 attribute of an autograd node: negative values come back as their
    unsigned 64-bit wrap (`prod(x, -3)`'s `_saved_dim` is 2**64 - 3)."""
    return value - 2**64 if value >= 2**63 else value


def _prod_without_zeros(grad: torch.Tensor, input: torch.Tensor, dim: int) -> torch.Tensor:
    """Each element's gradient as the product of the others (exclusive cumulative products).

    The formula eager uses where the input holds a zero.
    """
    if input.numel() == 0:
        return grad.expand_as(input)
    if input.shape[dim] == 1:
        return grad
    size = input.shape[dim]
    ones_shape = list(input.shape)
    ones_shape[dim] = 1
    ones = torch.ones(ones_shape, dtype=grad.dtype, device=grad.device)
    before = torch.cat([ones, input.narrow(dim, 0, size - 1)], dim).cumprod(dim)
    after_reversed = torch.cat([ones, input.narrow(dim, 1, size - 1).flip(dim)], dim)
    after = after_reversed.cumprod(dim).flip(dim)
    return grad * _conj(before * after)


@_register("ProdBackward0")
def _prod_backward(node: Any, grad: torch.Tensor) -> torch.Tensor:
    """`prod(x)`: `grad * result / x` without zeros; zeros (one zero: the products of the
    others) with two zeros or more; the exclusive products with one zero."""
    input = node._saved_self.to(grad.dtype)
    if input.dim() == 0:
        return grad
    result = node._saved_result
    without_zeros = grad * _conj(result / input)
    flat = input.contiguous().view(-1)
    one_zero = _prod_without_zeros(grad, flat, 0).view_as(input)
    zeros = (input == 0).sum()
    # NOTE: eager gives zeros for two zeros or more only outside grad mode (a plain
    # `backward()`); a compiled backward does not support double backward.
    with_zeros = torch.where(zeros > 1, torch.zeros_like(one_zero), one_zero)
    return torch.where(zeros == 0, without_zeros, with_zeros)


@_register("ProdBackward1")
def _prod_dim_backward(node: Any, grad: torch.Tensor) -> torch.Tensor:
    """`prod(x, dim)`: `grad * result / x` when no element of `x` is zero, else the
    exclusive products along `dim`."""
    input = node._saved_self.to(grad.dtype)
    if input.dim() == 0:
        return grad
    result = node._saved_result
    dim = _signed(node._saved_dim) % input.dim()
    if not node._saved_keepdim:
        grad, result = grad.unsqueeze(dim), result.unsqueeze(dim)
    without_zeros = grad * _conj(result / input)
    with_zeros = _prod_without_zeros(grad, input, dim)
    return torch.where((input == 0).any(), with_zeros, without_zeros)


@_register("CumprodBackward0")
def _cumprod_backward(node: Any, grad: torch.Tensor) -> torch.Tensor:
    """`cumprod(x, dim)`: eager's O(n) formula, the one it takes outside grad mode
    (`cumprod_backward` in torch's FunctionsManual.cpp).

    Before the first zero along `dim`, the reversed cumulative sum of `result * grad`
    divided by `x` (without zeros, everywhere); at the first zero, the sum of `grad`
    times the products of the elements between it and the second zero, times the product
    before it; after it, 0. torch 2.11 differentiates fakes through its O(n^2) formula
    instead, which gives NaN where the gradient past a zero is infinite (a `/ x` with
    zeros in `x` after the cumprod): 72% NaN where eager has numbers (fuzz seed 1909).
    """
    input = node._saved_self
    grad = grad.to(input.dtype)
    if input.numel() <= 1:
        return grad
    dim = _signed(node._saved_dim) % input.dim()
    if input.shape[dim] == 1:
        return grad
    input, output = _conj(input), _conj(node._saved_result)
    zeros = (input == 0).cumsum(dim)
    before_first = zeros == 0
    summed = (output * grad).masked_fill(~before_first, 0.0).flip(dim).cumsum(dim).flip(dim)
    result = torch.where(before_first, summed / input, torch.zeros_like(summed))
    up_to_second = zeros == 1
    first_index = up_to_second.max(dim, keepdim=True).indices
    first = torch.zeros_like(up_to_second).scatter(dim, first_index, 1)
    first = torch.logical_and(first, up_to_second)
    between = up_to_second & ~first
    products = input.masked_fill(~between, 1.0).cumprod(dim)
    total = (products * grad.masked_fill(zeros != 1, 0.0)).sum(dim, keepdim=True)
    before = output.gather(dim, (first_index - 1).relu()).masked_fill(first_index == 0, 1.0)
    return torch.where(first, total * before, result)


def autograd_nodes(roots: Sequence[Any]) -> Iterator[Any]:
    """Every autograd node reachable from `roots` (nodes, None allowed), once each.

    A node's Python object lives only while referenced (the next access makes a new
    one), so every node seen is kept alive: otherwise a freed node's id is reused by
    the next one's object, which is then taken as seen and never visited.
    """
    stack = [n for n in roots if n is not None]
    alive = list(stack)
    seen = {id(n) for n in stack}
    while stack:
        node = stack.pop()
        yield node
        for next_node, _ in node.next_functions:
            if next_node is not None and id(next_node) not in seen:
                seen.add(id(next_node))
                alive.append(next_node)
                stack.append(next_node)


def _nodes(outputs: Sequence[torch.Tensor]) -> Iterator[Any]:
    """Every autograd node the outputs' backward reaches, once each."""
    return autograd_nodes([t.grad_fn for t in outputs])


def _hook(formula: BackwardFormula, node: Any) -> Callable:
    def replace(grad_inputs: tuple, grad_outputs: tuple) -> tuple | None:
        if grad_inputs[0] is None or grad_outputs[0] is None:
            return None
        grad = formula(node, grad_outputs[0])
        return (grad.to(grad_inputs[0].dtype), *grad_inputs[1:])

    return replace


def override_backward_formulas(outputs: Sequence[torch.Tensor]) -> list[Any]:
    """Hook every node of `BACKWARD_FORMULAS` in the outputs' autograd graph.

    Returns the hook handles (remove them once the backward ran).
    """
    handles = []
    for node in _nodes(outputs):
        formula = BACKWARD_FORMULAS.get(node.name())
        if formula is not None:
            handles.append(node.register_hook(_hook(formula, node)))
    return handles
