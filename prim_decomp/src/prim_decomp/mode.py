"""`DecompositionMode`: run eager code with a table's decompositions applied.

Every ATen call the table holds is replaced by its decomposition, recursively,
while the code runs on real (or fake) tensors. The ops that actually ran are
counted in `leaf_ops`, so a test can check what a table reduces a program to.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["DecompositionMode"]


class DecompositionMode(TorchDispatchMode):
    """Apply `table` to every op called inside `with DecompositionMode(table):`.

    Stable API. Example:

        with DecompositionMode(core_aten | prims) as mode:
            y = torch.nn.functional.gelu(x)
        mode.leaf_ops  # Counter of the ops that ran, e.g. ember_prims.erf.default
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # NOTE: TorchDispatchMode's documented opt-out. Left True, torch wraps
        # `__torch_dispatch__` in its compiler-disabling wrapper, which imports torch's compiler
        # (about 1 s) at the mode's first dispatch; this mode never runs under
        # torch.compile, so there is nothing to disable.
        return False

    def __init__(self, table: Mapping) -> None:
        super().__init__()
        self.table = table
        self.leaf_ops: Counter = Counter()
        self.decomposed_ops: Counter = Counter()
        self._active: list[torch._ops.OpOverload] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rule = self.table.get(func)
        if rule is not None and _all_strided(args, kwargs) and func not in self._active:
            self._active.append(func)
            try:
                with self:
                    result = rule(*args, **kwargs)
            finally:
                self._active.pop()
            if result is not NotImplemented:
                self.decomposed_ops[func] += 1
                return result
        self.leaf_ops[func] += 1
        return func(*args, **kwargs)


def _all_strided(args: tuple, kwargs: dict) -> bool:
    """Whether every tensor argument is dense and strided (decompositions assume so)."""
    leaves = pytree.tree_leaves((args, kwargs))
    return all(t.layout == torch.strided for t in leaves if isinstance(t, torch.Tensor))
