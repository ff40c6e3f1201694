"""Functions traced through eager's own kernels, not torch's Python decompositions.

Tracing with symbolic sizes enables torch's Python dispatcher (guards.fake_tensor), so
composite ops get SymInt-aware versions. For some ops that dispatcher also replaces
eager's kernel by a Python decomposition that computes another formula: linear
upsampling (`F.interpolate(x, mode="bilinear")`) becomes `a + (b - a) * w` where eager's
kernel sums `a * (1 - w) + b * w`, so beside an infinite pixel the traced graph gives
NaN where eager gives inf. A graph traced with static sizes keeps eager's op, so the
result of a compiled function changed with its first recompilation.

`EAGER_KERNELS` lists those functions (as the traced code calls them, as
`__torch_function__` sees them); `EagerKernelMode` runs them with the Python dispatcher
off, so the traced graph holds the ATen op itself (`upsample_bilinear2d`), run by
eager's kernel or lowered by the compiler's own rule for it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["EAGER_KERNELS", "EagerKernelMode"]

_nn = torch._C._nn

EAGER_KERNELS: frozenset[Any] = frozenset(
    {
        F.interpolate,
        F.upsample,
        F.upsample_bilinear,
        _nn.upsample_linear1d,
        _nn.upsample_bilinear2d,
        _nn.upsample_trilinear3d,
        _nn.upsample_bicubic2d,
        _nn._upsample_bilinear2d_aa,
        _nn._upsample_bicubic2d_aa,
    }
)


class EagerKernelMode(TorchFunctionMode):
    """Runs the functions of `EAGER_KERNELS` with torch's Python dispatcher off."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        try:
            listed = func in EAGER_KERNELS
        except TypeError:  # an unhashable callable is not listed
            listed = False
        if listed:
            with torch._C._DisablePythonDispatcher():
                return func(*args, **kwargs)
        return func(*args, **kwargs)
