"""Rebuild a symbolic size as graph nodes from the sizes of the graph's inputs.

A decomposition computes sizes such as `x.shape[0] * 4` on SymInts; when such a
size reaches an op, the new graph must compute it too. `SymbolicSizes` finds
each symbol among the input tensors' sizes (`aten.sym_size.int`) and rebuilds
sums, products, floor divisions, mods, maxima and minima of them.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from prim_decomp.errors import DecomposeError

__all__ = ["SymbolicSizes"]

# sympy function class name -> how to combine symbolic operands (left to right)
_COMBINE = {
    "Add": operator.add,
    "Mul": operator.mul,
    "FloorDiv": operator.floordiv,
    "Mod": operator.mod,
    "PythonMod": operator.mod,
    "Max": torch.sym_max,
    "Min": torch.sym_min,
    "Pow": operator.pow,
    "PowByNatural": operator.pow,
    "FloatPow": operator.pow,
    "FloatTrueDiv": operator.truediv,
    "IntTrueDiv": operator.truediv,
}
# sympy function class name -> a one-operand conversion
_CONVERT = {"ToFloat": torch.sym_float, "TruncToInt": torch.sym_int}


class SymbolicSizes:
    """Where each symbol of the inputs' sizes can be read, and nodes built from them."""

    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        self.sources: dict[str, tuple[fx.Node, int | None, torch.SymInt]] = {}
        self.built: dict[str, tuple[fx.Node, torch.SymInt]] = {}

    def add_input(self, node: fx.Node, value: object) -> None:
        """Remember the symbols a placeholder's value holds."""
        if isinstance(value, torch.SymInt):
            self.sources.setdefault(str(value), (node, None, value))
        elif isinstance(value, torch.Tensor):
            for dim, size in enumerate(value.shape):
                if isinstance(size, torch.SymInt):
                    self.sources.setdefault(str(size), (node, dim, size))

    def node_for(self, value: torch.SymInt | torch.SymFloat) -> fx.Node | int | float:
        """A node computing `value`, built from the input sizes."""
        expr = getattr(value.node, "expr", None)
        if expr is None:
            return self._symbol(str(value), value)
        return self._build(expr, value)[0]

    def _symbol(self, name: str, value) -> fx.Node:
        if name in self.built:
            return self.built[name][0]
        if name not in self.sources:
            raise DecomposeError(
                f"the symbolic size {value} is not a size of any graph input; decompose "
                f"with static example inputs, or keep the op whole with table.without(op)"
            )
        node, dim, size = self.sources[name]
        if dim is not None:
            node = self.graph.call_function(torch.ops.aten.sym_size.int, (node, dim))
            node.meta["val"] = size
        self.built[name] = (node, size)
        return node

    def _build(self, expr, value=None) -> tuple[fx.Node | int, object]:
        key = str(expr)
        if key in self.built:
            return self.built[key]
        if getattr(expr, "is_Integer", False):
            return int(expr), int(expr)
        if getattr(expr, "is_Number", False):
            return float(expr), float(expr)
        if getattr(expr, "is_Symbol", False) or key in self.sources:
            node = self._symbol(key, value if value is not None else key)
            return node, self.built[key][1]
        kind = type(expr).__name__
        if kind in _CONVERT and len(expr.args) == 1:
            inner_node, inner_value = self._build(expr.args[0])
            result = _CONVERT[kind](inner_value)
            node = self.graph.call_function(_CONVERT[kind], (inner_node,))
            node.meta["val"] = result
            self.built[key] = (node, result)
            return node, result
        combine = _COMBINE.get(kind)
        if combine is None:
            raise DecomposeError(
                f"cannot rebuild the symbolic size {key} (a {type(expr).__name__}) in the "
                f"graph; decompose with static example inputs"
            )
        parts = [self._build(arg) for arg in expr.args]
        node, result = parts[0]
        for other_node, other_value in parts[1:]:
            result = combine(result, other_value)
            node = self.graph.call_function(combine, (node, other_node))
            node.meta["val"] = result
        self.built[key] = (node, result)
        return node, result
