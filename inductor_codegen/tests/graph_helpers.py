"""Build ATen graphs the way the stages before codegen will.

make_fx traces (standing in for capture + aot_autograd), and prim_decomp's
`inductor_default` table decomposes, as the `inductor` backend does.
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

from inductor_codegen import compile_graph
from prim_decomp import inductor_default

_DECOMPOSITIONS = dict(inductor_default)


def decompositions():
    return _DECOMPOSITIONS


def trace(fn, *args) -> torch.fx.GraphModule:
    """A functional core-ATen graph of fn(*args), with meta['val'] on every node."""
    return make_fx(fn, decomposition_table=decompositions(), tracing_mode="real")(*args)


def compile_fn(fn, *args, options=None):
    gm = trace(fn, *args)
    return compile_graph(gm, list(args), options=options), gm


def check(fn, *args, rtol=None, atol=None, options=None):
    """Compile fn for args, run it, and compare with eager; returns the CompiledGraph."""
    compiled, _ = compile_fn(fn, *args, options=options)
    expected = fn(*args)
    actual = compiled(*args)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    return compiled


def flat_tensor_inputs(*structure):
    """(tensors, rebuild): tensor leaves of a structure and a function to rebuild it."""
    leaves, spec = pytree.tree_flatten(structure)
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = [leaves[i] for i in positions]

    def rebuild(*new_tensors):
        new = list(leaves)
        for i, t in zip(positions, new_tensors):
            new[i] = t
        return pytree.tree_unflatten(new, spec)

    return tensors, rebuild
