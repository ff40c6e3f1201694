"""Symbolic numbers as graph nodes: SymFloat / SymBool arithmetic recorded while it runs.

A SymInt's value is its sympy expression over the input-size symbols, so
`sym_sizes.emit_size` rebuilds its nodes from the expression alone. A float
computed from sizes (`x.size(-1) ** 0.5`, `n / 2`, `math.sqrt(d)`) has no such
integer form, so capture records how each one was made while the user's code
runs it (`record(result, target, args)`: a `SymRecipe`) and emits the nodes
only when an operator takes the value:

    d ** 0.5           -> operator.pow(s1, 0.5)
    math.sqrt(d)       -> torch._sym_sqrt(s1)
    n / 2              -> operator.truediv(s0, 2)
    float(n)           -> torch.sym_float(s0)

Each node's meta["val"] is the torch.SymFloat (SymBool, SymInt) it computes.
A symbolic number with no recipe (made inside a torch function capture did not
see) is specialized: its symbols are guarded equal to their example values and
the number becomes a plain constant, logged on `EMBER_LOGS=dynamic`.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx

from dynamo_capture.sym_sizes import SymbolNode, emit_size
from guards import ShapeEnv, artifact_enabled, artifact_logger

__all__ = [
    "SYM_FUNCTIONS",
    "SymNumbers",
    "SymRecipe",
    "concrete_numbers",
    "holds_symbolic_number",
    "is_symbolic_number",
    "recomputed_from_values",
]

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)

# A Python function called on symbolic numbers -> the function the graph calls instead
# (it takes both plain numbers and SymInt/SymFloat, as torch's own sym_* functions do).
SYM_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    builtins.float: torch.sym_float,
    builtins.int: torch.sym_int,
    math.sqrt: torch._sym_sqrt,
    math.cos: torch._sym_cos,
    math.sin: torch._sym_sin,
    math.tan: torch._sym_tan,
    math.cosh: torch._sym_cosh,
    math.sinh: torch._sym_sinh,
    math.tanh: torch._sym_tanh,
    math.asin: torch._sym_asin,
    math.acos: torch._sym_acos,
    math.atan: torch._sym_atan,
    math.log2: torch._sym_log2,
    math.floor: math.floor,
    math.ceil: math.ceil,
    math.trunc: math.trunc,
    builtins.round: builtins.round,
    builtins.abs: builtins.abs,
}


def is_symbolic_number(value: Any) -> bool:
    """Whether `value` is a SymInt / SymFloat / SymBool that is not a constant."""
    if not isinstance(value, _SYMBOLIC):
        return False
    node = value.node
    return not node.expr.is_Number and node.expr not in (sympy.true, sympy.false)


def concrete_numbers(values: Any, where: str = "") -> Any:
    """`values` (a tuple, list or dict of them, or one value) with every symbolic number
    replaced by its value, guarded equal: for a Python function that would read a
    symbolic number's name instead of its value (`str(n)`, `f"{n}"`, `hash(n)`)."""
    if is_symbolic_number(values):
        node = values.node
        return node.pytype(node.shape_env.evaluate(node, where=where))
    if isinstance(values, tuple | list):
        return type(values)(concrete_numbers(item, where) for item in values)
    if isinstance(values, dict):
        return {key: concrete_numbers(item, where) for key, item in values.items()}
    if isinstance(values, slice):
        return slice(*concrete_numbers((values.start, values.stop, values.step), where))
    return values


def recomputed_from_values(
    fn: Callable[..., Any], args: Any, kwargs: dict[str, Any], result: Any, where: str
) -> Any:
    """`result` of fn(*args, **kwargs), computed again from the guarded values of the
    symbolic numbers among the arguments when it is text: made from them
    (`"{}".format(n)`, `repr(x.shape)`), it would name them ("s0")."""
    if not _holds_text(result) or not holds_symbolic_number((args, kwargs)):
        return result
    return fn(*concrete_numbers(args, where), **concrete_numbers(kwargs, where))


def _holds_text(value: Any) -> bool:
    if isinstance(value, str | bytes):
        return True
    if isinstance(value, tuple | list):
        return any(_holds_text(item) for item in value)
    return False


def holds_symbolic_number(values: Any) -> bool:
    """Whether a symbolic number (not a constant) is `values` or hides in its tuples,
    lists, dicts and slices (`torch.Size([s0, 4])`)."""
    if is_symbolic_number(values):
        return True
    if isinstance(values, tuple | list):
        return any(holds_symbolic_number(item) for item in values)
    if isinstance(values, dict):
        return any(holds_symbolic_number(item) for item in values.values())
    if isinstance(values, slice):
        return holds_symbolic_number((values.start, values.stop, values.step))
    return False


@dataclass(frozen=True, slots=True)
class SymRecipe:
    """How one symbolic number was made: `target(*args)`, the args numbers or Sym values."""

    result: Any
    target: Callable[..., Any]
    args: tuple[Any, ...]


class SymNumbers:
    """The recipes of one capture's symbolic numbers, and the nodes emitted from them."""

    def __init__(
        self,
        graph: torch.fx.Graph,
        shape_env: ShapeEnv | None,
        symbol_node: SymbolNode,
        *,
        specialize_floats: bool = False,
    ) -> None:
        self.graph = graph
        self.shape_env = shape_env
        self.symbol_node = symbol_node
        # True: every SymFloat / SymBool an operator takes becomes its example value
        # (for a backend that takes symbolic sizes but not numbers computed from them)
        self.specialize_floats = specialize_floats
        self.emitted_numbers = 0  # SymFloat / SymBool nodes emitted from recipes
        # operations on symbolic numbers the code ran (`i + 1`, `i < n`): torch.compile
        # traces each as a graph node, so a graph of no other operation is still compiled
        self.operations = 0
        # the graph's last node when each such operation ran: torch.compile's node for it
        # lies right after, keeping two grad-mode switches around it from being adjacent
        self.steps_after: set[torch.fx.Node] = set()
        # id(SymNode) -> recipe; the recipe holds the result, so the id stays its own
        self._recipes: dict[int, SymRecipe] = {}
        self._nodes: dict[int, tuple[Any, Any]] = {}  # id(SymNode) -> (value, node)
        self._aliases: dict[int, tuple[Any, Any]] = {}  # id(SymNode) -> (value, equal value)

    def record(self, result: Any, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Remember that `result` is `target(*args)` when it is a symbolic number made from one.

        SymInts computed from SymInts only need no recipe (their expression is exact);
        a SymInt computed from a float (`int(n / 2)`, `math.floor(d ** 0.5)`) does.
        """
        if not is_symbolic_number(result) or any(arg is result for arg in args):
            return
        self.operations += 1
        last = next(iter(reversed(self.graph.nodes)), None)  # a list view under torch 2.11
        if last is not None:
            self.steps_after.add(last)
        for arg in args:
            # `0 + f`, `f * 1`: the result is the argument itself (one node, not two)
            if is_symbolic_number(arg) and type(arg) is type(result):
                if arg.node.expr == result.node.expr:
                    self._aliases[id(result.node)] = (result, arg)
                    return
        from_float = any(isinstance(arg, torch.SymFloat | torch.SymBool) for arg in args)
        if isinstance(result, torch.SymInt) and not from_float:
            return
        self._recipes[id(result.node)] = SymRecipe(result, target, args)

    def bind(self, value: Any, node: torch.fx.Node) -> None:
        """`node` computes symbolic number `value` (a float input read from its tensor)."""
        self._nodes[id(value.node)] = (value, node)

    def node_of(self, value: Any) -> Any:
        """A graph node (or plain number) computing symbolic number `value`."""
        if not is_symbolic_number(value):
            return _constant_of(value)
        key = id(value.node)
        if key in self._nodes:
            return self._nodes[key][1]
        if key in self._aliases:
            return self.node_of(self._aliases[key][1])
        recipe = self._recipes.get(key)
        if self.specialize_floats and not isinstance(value, torch.SymInt):
            node = self.specialize(value, "the backend takes no symbolic floats")
        elif recipe is not None:
            node = self.graph.call_function(
                recipe.target, tuple(self.node_of(arg) for arg in recipe.args)
            )
            node.meta["val"] = value
            self.emitted_numbers += not isinstance(value, torch.SymInt)
        elif isinstance(value, torch.SymInt):
            # NOTE: each read emits its own nodes; one node shared by equal expressions
            # (`x.shape[-1] // 2` twice) crossed the cuts between layer regions as a size
            # no piece could read (test_regional_decode_caches)
            node = emit_size(self.graph, value.node.expr, self.symbol_node)
        else:
            node = self.specialize(value, "it was computed where capture keeps no record")
        self._nodes[key] = (value, node)
        return node

    def specialize(self, value: Any, reason: str) -> Any:
        """The example value of `value`, with its symbols guarded equal to their example values."""
        expr = value.node.expr
        env = self.shape_env if self.shape_env is not None else value.node.shape_env
        hint = value.node.hint
        if hint is None:
            hint = sympy.sympify(env.hint_of(expr)).evalf()
        hint = value.node.pytype(hint)
        if artifact_enabled("dynamic"):
            artifact_logger("dynamic").info(
                "specializing the symbolic %s %s to %r: %s",
                type(value).__name__,
                expr,
                hint,
                reason,
            )
        for symbol in sorted(expr.free_symbols, key=str):
            env.record(sympy.Eq(symbol, env.hint_of(symbol)), f"specialized: {reason}")
        return hint


def _constant_of(value: Any) -> Any:
    if isinstance(value, torch.SymBool):
        return bool(value.node.expr == sympy.true)
    if isinstance(value, torch.SymInt | torch.SymFloat):
        return value.node.pytype(value.node.expr)
    return value
