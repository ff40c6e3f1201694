"""`libdevice` for the Triton interpreter: the same function names, computed by numpy.

Triton's CUDA libdevice has no interpreter implementation; generated kernels
run under TRITON_INTERPRET=1 bind the name `libdevice` to this module instead.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["LIBDEVICE_NUMPY", "libdevice"]

LIBDEVICE_NUMPY = {
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "log10": np.log10,
    "log1p": np.log1p,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "erfc": np.vectorize(math.erfc, otypes=[np.float64]),
    "lgamma": np.vectorize(
        lambda v: math.inf if v <= 0 and v == math.floor(v) else math.lgamma(v),
        otypes=[np.float64],
    ),
    "pow": np.power,
    "fmod": np.fmod,
    "fmax": np.fmax,
    "fmin": np.fmin,
    "atan2": np.arctan2,
    "hypot": np.hypot,
    "copysign": np.copysign,
    "nearbyint": np.rint,
    "trunc": np.trunc,
    "signbit": lambda x: np.signbit(x).astype(np.int32),
}


def _lift(fn):
    def apply(*args):
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        tensors = [a for a in args if isinstance(a, tl.tensor)]
        data = [a.handle.data if isinstance(a, tl.tensor) else a for a in args]
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*data))
        scalar = tl.int32 if out.dtype == np.int32 else tensors[0].dtype.scalar
        out = out.astype(tensors[0].handle.data.dtype if scalar is not tl.int32 else np.int32)
        shape = list(np.broadcast_shapes(*(t.handle.data.shape for t in tensors)))
        out = np.broadcast_to(out, shape).copy() if shape else out
        kind = tl.block_type(scalar, shape) if any(t.type.is_block() for t in tensors) else scalar
        return tl.tensor(TensorHandle(out, scalar), kind)

    return apply


class _Libdevice:
    """Attribute access like `triton.language.extra.libdevice`."""

    def __getattr__(self, name: str):
        if name not in LIBDEVICE_NUMPY:
            raise AttributeError(
                f"libdevice.{name} has no interpreter version; add it to LIBDEVICE_NUMPY"
            )
        return _lift(LIBDEVICE_NUMPY[name])


libdevice = _Libdevice()
