"""The `ember_prims` operator set, registered with `torch.library`.

Every prim has an eager implementation (CompositeExplicitAutograd, so it runs
on any device) and a meta rule giving shape, dtype and strides using only
SymInt-safe arithmetic, so it runs on symbolic sizes. Prims do no type
promotion and no broadcasting: elementwise operands have one shape and one
dtype; decompositions insert `convert_element_type` and `broadcast_in_dim`.

Stable API: the op names and schemas in `PRIM_SCHEMAS`, reached as
`torch.ops.ember_prims.<name>.default`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["PRIM_SCHEMAS", "NAMESPACE", "is_prim", "prim_ops"]

NAMESPACE = "ember_prims"
_LIB = torch.library.Library(NAMESPACE, "DEF")
PRIM_SCHEMAS: dict[str, str] = {}


def _register(schema: str, eager: Callable, meta: Callable) -> None:
    """Define one prim: its schema, eager kernel and meta rule."""
    name = schema.split("(", 1)[0]
    if name in PRIM_SCHEMAS:
        raise ValueError(f"ember_prims::{name} is defined twice")
    _LIB.define(schema)
    _LIB.impl(name, eager, "CompositeExplicitAutograd")
    _LIB.impl(name, meta, "Meta")
    PRIM_SCHEMAS[name] = schema


def _into_layout(result: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`result` in the layout of `like` (a copy only when the strides differ)."""
    if result.stride() == like.stride() or result.numel() <= 1:
        return result
    return like.copy_(result)


def _contiguous_strides(shape: list) -> list:
    strides = []
    running = 1
    for size in reversed(shape):
        strides.append(running)
        running = running * torch.sym_max(size, 1)
    return list(reversed(strides))


# --- elementwise -------------------------------------------------------------
_UNARY: dict[str, Callable] = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "exp2": torch.exp2,
    "expm1": torch.expm1, "log": torch.log, "log1p": torch.log1p, "log2": torch.log2,
    "log10": torch.log10, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh,
    "cosh": torch.cosh, "tanh": torch.tanh, "asinh": torch.asinh, "acosh": torch.acosh,
    "atanh": torch.atanh, "logistic": torch.sigmoid, "erf": torch.erf, "erfc": torch.erfc,
    "erfinv": torch.erfinv, "lgamma": torch.lgamma, "digamma": torch.digamma,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc,
    "sign": torch.sign, "bitwise_not": torch.bitwise_not,
}  # fmt: skip
_UNARY_BOOL: dict[str, Callable] = {
    "isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite,
    "signbit": torch.signbit,
}  # fmt: skip
_BINARY: dict[str, Callable] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "remainder": torch.remainder, "fmod": torch.fmod, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "atan2": torch.atan2,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor, "shift_left": torch.bitwise_left_shift,
    "shift_right": torch.bitwise_right_shift, "copysign": torch.copysign,
    "nextafter": torch.nextafter, "hypot": torch.hypot,
}  # fmt: skip
_COMPARE: dict[str, Callable] = {
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
    "ge": torch.ge,
}  # fmt: skip


def _div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """True division on floats, truncating division on integers (as C does)."""
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


def _elementwise(fn: Callable, dtype: torch.dtype | None) -> tuple[Callable, Callable]:
    def eager(a, *rest):
        return _into_layout(fn(a, *rest), torch.empty_like(a, dtype=dtype or a.dtype))

    def meta(a, *rest):
        return torch.empty_like(a, dtype=dtype or a.dtype)

    return eager, meta


def _register_elementwise() -> None:
    for name, fn in _UNARY.items():
        _register(f"{name}(Tensor a) -> Tensor", *_elementwise(fn, None))
    for name, fn in _UNARY_BOOL.items():
        _register(f"{name}(Tensor a) -> Tensor", *_elementwise(fn, torch.bool))
    for name, fn in _BINARY.items():
        fn = _div if name == "div" else fn
        _register(f"{name}(Tensor a, Tensor b) -> Tensor", *_elementwise(fn, None))
    for name, fn in _COMPARE.items():
        _register(f"{name}(Tensor a, Tensor b) -> Tensor", *_elementwise(fn, torch.bool))

    _register(
        "where(Tensor pred, Tensor a, Tensor b) -> Tensor",
        lambda pred, a, b: _into_layout(torch.where(pred, a, b), torch.empty_like(a)),
        lambda pred, a, b: torch.empty_like(a),
    )

    def convert(a, dtype):
        return _into_layout(a.to(dtype, copy=True), torch.empty_like(a, dtype=dtype))

    _register(
        "convert_element_type(Tensor a, ScalarType dtype) -> Tensor",
        convert,
        lambda a, dtype: torch.empty_like(a, dtype=dtype),
    )


_register_elementwise()


# --- views and shapes ----------------------------------------------------------
def _view(a: torch.Tensor, size: list, stride: list, offset) -> torch.Tensor:
    return a.as_strided(size, stride, offset)


def _broadcast_in_dim(a, shape, broadcast_dimensions):
    stride = [0] * len(shape)
    for axis, out_axis in enumerate(broadcast_dimensions):
        stride[out_axis] = 0 if a.shape[axis] == 1 else a.stride(axis)
    return _view(a, list(shape), stride, a.storage_offset())


def _permute(a, dims):
    size = [a.shape[d] for d in dims]
    stride = [a.stride(d) for d in dims]
    return _view(a, size, stride, a.storage_offset())


def _slice(a, dim, start, end, step=1):
    size = list(a.shape)
    stride = list(a.stride())
    size[dim] = torch.sym_max(0, (end - start + step - 1) // step)
    stride[dim] = stride[dim] * step
    return _view(a, size, stride, a.storage_offset() + start * a.stride(dim))


def _squeeze(a, dims):
    keep = [d for d in range(a.dim()) if d not in dims]
    size = [a.shape[d] for d in keep]
    stride = [a.stride(d) for d in keep]
    return _view(a, size, stride, a.storage_offset())


def _as_strided(a, size, stride, storage_offset):
    return _view(a, list(size), list(stride), storage_offset)


def _reshape(a, shape):
    out = torch.empty_strided(
        shape, _contiguous_strides(list(shape)), dtype=a.dtype, device=a.device
    )
    return out.copy_(a.reshape(shape)) if a.device.type != "meta" else out


def _copy_strided(a, stride):
    out = torch.empty_strided(a.shape, stride, dtype=a.dtype, device=a.device)
    return out.copy_(a) if a.device.type != "meta" else out


def _register_shapes() -> None:
    views = {
        "broadcast_in_dim(Tensor(a) a, SymInt[] shape, int[] broadcast_dimensions) -> Tensor(a)": (
            _broadcast_in_dim
        ),
        "permute(Tensor(a) a, int[] dims) -> Tensor(a)": _permute,
        "slice(Tensor(a) a, int dim, SymInt start, SymInt end, SymInt step=1) -> Tensor(a)": (
            _slice
        ),
        "squeeze(Tensor(a) a, int[] dims) -> Tensor(a)": _squeeze,
        "as_strided(Tensor(a) a, SymInt[] size, SymInt[] stride, SymInt storage_offset) "
        "-> Tensor(a)": _as_strided,
    }
    for schema, fn in views.items():
        _register(schema, fn, fn)
    _register("reshape(Tensor a, SymInt[] shape) -> Tensor", _reshape, _reshape)
    _register("copy_strided(Tensor a, SymInt[] stride) -> Tensor", _copy_strided, _copy_strided)


_register_shapes()


# --- reductions ------------------------------------------------------------------
def _reduced_like(a: torch.Tensor, dims: list[int], dtype: torch.dtype | None = None):
    shape = [size for axis, size in enumerate(a.shape) if axis not in dims]
    return torch.empty_strided(
        shape, _contiguous_strides(shape), dtype=dtype or a.dtype, device=a.device
    )


def _reduction(fn: Callable) -> tuple[Callable, Callable]:
    def eager(a, dims, *rest):
        dims = sorted(d % max(a.dim(), 1) for d in dims)
        like = _reduced_like(a, dims)
        if not dims:
            return like.copy_(a)
        return _into_layout(fn(a, dims, *rest), like)

    def meta(a, dims, *rest):
        return _reduced_like(a, [d % max(a.dim(), 1) for d in dims])

    return eager, meta


def _prod(a, dims):
    for axis in reversed(dims):
        a = torch.prod(a, axis)
    return a


def _register_reductions() -> None:
    reductions = {
        "sum": lambda a, dims: torch.sum(a, dims),
        "prod": _prod,
        "amax": lambda a, dims: torch.amax(a, dims),
        "amin": lambda a, dims: torch.amin(a, dims),
    }
    for name, fn in reductions.items():
        _register(f"{name}(Tensor a, int[] dims) -> Tensor", *_reduction(fn))
    _register(
        "var(Tensor a, int[] dims, float correction) -> Tensor",
        *_reduction(lambda a, dims, correction: torch.var(a, dims, correction=correction)),
    )
    for name, fn in {"argmax": torch.argmax, "argmin": torch.argmin}.items():

        def eager(a, dim, fn=fn):
            return _into_layout(fn(a, dim), _reduced_like(a, [dim % a.dim()], torch.int64))

        def meta(a, dim):
            return _reduced_like(a, [dim % a.dim()], torch.int64)

        _register(f"{name}(Tensor a, int dim) -> Tensor", eager, meta)

    def cumsum(a, dim):
        return _into_layout(torch.cumsum(a, dim), torch.empty_like(a))

    _register("cumsum(Tensor a, int dim) -> Tensor", cumsum, lambda a, dim: torch.empty_like(a))


_register_reductions()


# --- factories and random numbers ------------------------------------------------
def _register_factories() -> None:
    def iota(length, start, step, dtype, device):
        return torch.arange(start, start + length * step, step, dtype=dtype, device=device)

    def iota_meta(length, start, step, dtype, device):
        return torch.empty(length, dtype=dtype, device="meta")

    _register(
        "iota(SymInt length, SymInt start, SymInt step, ScalarType dtype, Device device) -> Tensor",
        iota,
        iota_meta,
    )
    _register(
        "full(SymInt[] shape, Scalar value, ScalarType dtype, Device device) -> Tensor",
        lambda shape, value, dtype, device: torch.full(shape, value, dtype=dtype, device=device),
        lambda shape, value, dtype, device: torch.empty(shape, dtype=dtype, device="meta"),
    )
    _register(
        "empty_strided(SymInt[] shape, SymInt[] stride, ScalarType dtype, Device device) -> Tensor",
        lambda shape, stride, dtype, device: torch.empty_strided(
            shape, stride, dtype=dtype, device=device
        ),
        lambda shape, stride, dtype, device: torch.empty_strided(
            shape, stride, dtype=dtype, device="meta"
        ),
    )

    def uniform(shape, low, high, dtype, device, generator=None):
        out = torch.empty(shape, dtype=dtype, device=device)
        return out.uniform_(low, high, generator=generator)

    def normal(shape, mean, std, dtype, device, generator=None):
        out = torch.empty(shape, dtype=dtype, device=device)
        return out.normal_(mean, std, generator=generator)

    def random_meta(shape, first, second, dtype, device, generator=None):
        return torch.empty(shape, dtype=dtype, device="meta")

    for name, fn in {"uniform": uniform, "normal": normal}.items():
        first, second = ("low", "high") if name == "uniform" else ("mean", "std")
        _register(
            f"{name}(SymInt[] shape, float {first}, float {second}, ScalarType dtype, "
            f"Device device, Generator? generator=None) -> Tensor",
            fn,
            random_meta,
        )


_register_factories()


# --- joining and indexing ----------------------------------------------------------
def _cat_meta(tensors, dim):
    shape = list(tensors[0].shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    return torch.empty_strided(
        shape, _contiguous_strides(shape), dtype=tensors[0].dtype, device=tensors[0].device
    )


def _index_meta(a, indices):
    """Advanced indexing with index tensors already broadcast to one shape, all dims leading."""
    index_shape = list(next(i for i in indices if i is not None).shape)
    shape = index_shape + list(a.shape[len(indices) :])
    return torch.empty_strided(shape, _contiguous_strides(shape), dtype=a.dtype, device=a.device)


def _register_indexing() -> None:
    _register(
        "cat(Tensor[] tensors, int dim) -> Tensor",
        lambda tensors, dim: _into_layout(torch.cat(tensors, dim), _cat_meta(tensors, dim)),
        _cat_meta,
    )
    _register(
        "gather(Tensor a, int dim, Tensor index) -> Tensor",
        lambda a, dim, index: _into_layout(
            torch.gather(a, dim, index), torch.empty_like(index, dtype=a.dtype)
        ),
        lambda a, dim, index: torch.empty_like(index, dtype=a.dtype),
    )
    for name, fn in {"scatter": torch.scatter, "scatter_add": torch.scatter_add}.items():
        _register(
            f"{name}(Tensor a, int dim, Tensor index, Tensor src) -> Tensor",
            lambda a, dim, index, src, fn=fn: _into_layout(
                fn(a, dim, index, src), torch.empty_like(a)
            ),
            lambda a, dim, index, src: torch.empty_like(a),
        )
    _register(
        "index(Tensor a, Tensor[] indices) -> Tensor",
        lambda a, indices: _into_layout(a[tuple(indices)], _index_meta(a, indices)),
        _index_meta,
    )
    _register(
        "index_put(Tensor a, Tensor[] indices, Tensor values, bool accumulate) -> Tensor",
        lambda a, indices, values, accumulate: _into_layout(
            torch.index_put(a, tuple(indices), values, accumulate), torch.empty_like(a)
        ),
        lambda a, indices, values, accumulate: torch.empty_like(a),
    )


_register_indexing()


def prim_ops() -> list[torch._ops.OpOverload]:
    """Every ember_prims OpOverload."""
    namespace = getattr(torch.ops, NAMESPACE)
    return [getattr(namespace, name).default for name in PRIM_SCHEMAS]


def is_prim(op: object) -> bool:
    """Whether `op` is an ember_prims operator."""
    return isinstance(op, torch._ops.OpOverload) and op.namespace == NAMESPACE
