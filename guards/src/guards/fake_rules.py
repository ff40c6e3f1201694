"""Per-operator rules for fake tensors, keyed by the op.

Most operators need no rule: their meta kernel computes the output's
metadata. A rule exists where the meta kernel cannot answer (the output shape
depends on tensor values), where the answer needs the real device, or where
the operator does nothing observable on metadata. A rule takes
`(mode, func, args, kwargs)` with every tensor already a fake of `mode`, and
returns the result, or `NotImplemented` to fall through to the meta kernel.
Adding an op is one entry here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from guards.errors import DataDependentError
from guards.logs import artifact_enabled, artifact_logger

__all__ = [
    "DATA_DEPENDENT_OPS",
    "FAKE_RULES",
    "MIXED_DEVICE_OPS",
    "fake_rule_for",
    "register_fake_rule",
]

aten = torch.ops.aten

FakeRule = Callable[[Any, Any, tuple, dict], Any]
FAKE_RULES: dict[Any, FakeRule] = {}


def register_fake_rule(*ops: Any) -> Callable[[FakeRule], FakeRule]:
    """Register `rule` for each op (an OpOverload, or an OpOverloadPacket for all overloads)."""

    def decorate(rule: FakeRule) -> FakeRule:
        for op in ops:
            if op in FAKE_RULES:
                raise ValueError(f"a fake rule for {op} is already registered")
            FAKE_RULES[op] = rule
        return rule

    return decorate


def fake_rule_for(func: Any) -> FakeRule | None:
    """The rule for an OpOverload: its own, else its packet's, else None."""
    rule = FAKE_RULES.get(func)
    if rule is None:
        rule = FAKE_RULES.get(func.overloadpacket)
    return rule


# Operators whose output (shape or Python value) depends on tensor data.
DATA_DEPENDENT_OPS: dict[Any, str] = {
    aten._local_scalar_dense: "reads a tensor element as a Python number (.item(), int(), bool())",
    aten.is_nonzero: "reads a tensor element as a Python bool",
    aten.equal: "compares tensor values and returns a Python bool",
    aten.allclose: "compares tensor values and returns a Python bool",
    aten.nonzero: "output size is the number of non-zero elements",
    aten.argwhere: "output size is the number of non-zero elements",
    aten.masked_select: "output size is the number of True mask elements",
    aten._unique: "output size is the number of distinct values",
    aten._unique2: "output size is the number of distinct values",
    aten.unique_dim: "output size is the number of distinct slices",
    aten.unique_consecutive: "output size is the number of runs of equal values",
    aten.unique_dim_consecutive: "output size is the number of runs of equal slices",
    aten.bincount: "output size is the largest value plus one",
    aten.histogramdd: "bin edges depend on the data",
    aten.segment_reduce: "output size depends on the lengths tensor",
}


def _data_dependent(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    why = DATA_DEPENDENT_OPS[func.overloadpacket]
    raise DataDependentError(
        f"{func} needs tensor values, which fake tensors do not have: {why}. "
        "Capture breaks the graph here; to stay in one graph, avoid reading values "
        "(e.g. keep the number as a tensor, or use nonzero_static / a mask instead).",
        op=str(func),
    )


register_fake_rule(*DATA_DEPENDENT_OPS)(_data_dependent)


@register_fake_rule(aten.index.Tensor)
def _index(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
    for index in indices:
        if index is not None and index.dtype in (torch.bool, torch.uint8):
            raise DataDependentError(
                f"{func} with a boolean mask index: the output size is the number of True "
                "elements, which fake tensors do not know. Use torch.where(mask, x, other) "
                "to keep the shape static.",
                op=str(func),
            )
    return NotImplemented


@register_fake_rule(aten.repeat_interleave.Tensor, aten.repeat_interleave.self_Tensor)
def _repeat_interleave(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    if kwargs.get("output_size") is None:
        raise DataDependentError(
            f"{func} without output_size: the output size is the sum of the repeats. "
            "Pass output_size=... to keep it static.",
            op=str(func),
        )
    return NotImplemented


# Matrix products whose meta kernels compute a result for operands of different dtypes
# where eager's kernels raise (bmm, baddbmm and dot's meta kernels check): eager's message.
_SAME_DTYPE_PRODUCTS = {
    aten.mm.default: "expected m1 and m2 to have the same dtype, but got: {} != {}",
    aten.addmm.default: "self and mat2 must have the same dtype, but got {} and {}",
    aten.addbmm.default: "self and mat2 must have the same dtype, but got {} and {}",
    aten.mv.default: "addmv input tensors must have the same dtype, but got {} and {}",
}


@register_fake_rule(*_SAME_DTYPE_PRODUCTS)
def _same_dtype_product(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    # NOTE: a graph holding such a product raises only when it runs, past the try
    # statement of the user's code that catches eager's error at the call
    dtypes = [a.dtype for a in args if isinstance(a, torch.Tensor)]
    if len(set(dtypes)) > 1:
        first = dtypes[0]
        other = next(d for d in dtypes if d != first)
        raise RuntimeError(_SAME_DTYPE_PRODUCTS[func].format(first, other))
    return NotImplemented


@register_fake_rule(aten._assert_async, aten._assert_scalar, aten.sym_constrain_range)
def _assertion(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    # NOTE: a runtime assertion checks values; on fakes there are none to check.
    return None


# Binary elementwise ops whose meta function (a Python decomposition) lays out the
# result apart from eager's kernel, a TensorIterator: that one follows the operands'
# layout, the first operand's where two disagree, a 0-d tensor not counting (`x.t() //
# y.sum()` keeps the transposed strides). The result takes the layout of `add` of the
# same operands, a TensorIterator meta kernel.
_TENSOR_ITERATOR_LAYOUT_OPS = (
    aten.floor_divide.default,
    aten.floor_divide.Scalar,
    aten.div.Tensor_mode,
    aten.div.Scalar_mode,
    aten.copysign.Tensor,
    aten.copysign.Scalar,
    aten.xlogy.Tensor,
    aten.xlogy.Scalar_Other,
)


@register_fake_rule(*_TENSOR_ITERATOR_LAYOUT_OPS)
def _tensor_iterator_layout(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    fakes = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    out = mode._run_meta(func, args, kwargs, fakes)
    layout = mode._run_meta(aten.add.Tensor, tuple(args[:2]), {}, fakes)
    if tuple(layout.shape) != tuple(out.shape) or layout.stride() == out.stride():
        return out
    return out.new_empty_strided(out.shape, layout.stride())


# Broadcasting elementwise ops that eager's CPU kernels run through a TensorIterator, with
# their tensor operands in its order. Their meta functions (Python references) lay out the
# result by the broadcast operands' strides with a shortcut for contiguous ones, which
# TensorIterator does not take; it reads size-1 dims' strides where the output's dim is
# size 1 too (`x1 >= x0.unsqueeze(1)`, x0 a transposed (1, n): eager (1, 1, n), the
# meta function row-major).
_BROADCASTING_TENSOR_ITERATOR_OPS = (
    aten.add.Tensor,
    aten.sub.Tensor,
    aten.mul.Tensor,
    aten.div.Tensor,
    aten.eq.Tensor,
    aten.ne.Tensor,
    aten.lt.Tensor,
    aten.le.Tensor,
    aten.gt.Tensor,
    aten.ge.Tensor,
    aten.maximum.default,
    aten.minimum.default,
    aten.fmax.default,
    aten.fmin.default,
    aten.pow.Tensor_Tensor,
    aten.atan2.default,
    aten.hypot.default,
    aten.fmod.Tensor,
    aten.remainder.Tensor,
    aten.logical_and.default,
    aten.logical_or.default,
    aten.logical_xor.default,
    aten.bitwise_and.Tensor,
    aten.bitwise_or.Tensor,
    aten.bitwise_xor.Tensor,
    aten.where.self,
    aten.lerp.Scalar,
    aten.lerp.Tensor,
    aten.addcmul.default,
    aten.addcdiv.default,
)


@register_fake_rule(*_BROADCASTING_TENSOR_ITERATOR_OPS)
def _broadcasting_tensor_iterator(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    fakes = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    out = mode._run_meta(func, args, kwargs, fakes)
    operands = [a for a in args if isinstance(a, torch.Tensor)]
    if len(operands) < 2 or not isinstance(out, torch.Tensor):
        return out
    if all(tuple(a.shape) == tuple(out.shape) for a in operands):
        return out  # no broadcast: the meta function's layout is eager's
    if any(a.device.type != "cpu" or a.layout != torch.strided for a in operands):
        return out
    shape = _ints(out.shape)
    layouts = [(_ints(a.shape), _ints(a.stride())) for a in operands]
    if shape is None or 0 in shape or any(None in layout for layout in layouts):
        return out  # symbolic: the meta function's layout, guard-free
    strides = tensor_iterator_strides(shape, layouts)
    if all(n <= 1 or a == b for n, a, b in zip(shape, _ints(out.stride()) or (), strides)):
        return out
    return out.new_empty_strided(out.shape, strides)


# Norms whose meta kernels (torch 2.11) keep a reduced dim of size 1 named by a negative
# index (`linalg.vector_norm(x, dim=[-1])` of a (2, 3, 1) tensor: (2, 3, 1), eager (2, 3)),
# every later shape built from it then wrong. The dims are wrapped before the meta kernel.
_NORMS_WITH_DIMS = (
    aten.linalg_vector_norm.default,
    aten.norm.ScalarOpt_dim,
    aten.norm.ScalarOpt_dim_dtype,
)


@register_fake_rule(*_NORMS_WITH_DIMS)
def _norm_dims_wrapped(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    x = args[0]
    from_kwargs = "dim" in kwargs
    dims = kwargs["dim"] if from_kwargs else (args[2] if len(args) > 2 else None)
    if dims is None or not isinstance(x, torch.Tensor):
        return NotImplemented
    rank = max(x.dim(), 1)  # a 0-d tensor takes dim 0 and -1
    listed = [dims] if isinstance(dims, int) else list(dims)
    if all(not isinstance(d, int) or d >= 0 for d in listed):
        return NotImplemented
    wrapped = [d % rank if isinstance(d, int) and -rank <= d < 0 else d for d in listed]
    if from_kwargs:
        kwargs = {**kwargs, "dim": wrapped}
    else:
        args = (*args[:2], wrapped, *args[3:])
    fakes = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    return mode._run_meta(func, args, kwargs, fakes)


# Interpolations whose meta kernels compute an empty result where eager's kernels raise
# (`F.interpolate(x, scale_factor=0.5, mode="linear")` of a width 1: output width 0). The
# nearest modes' meta kernels check; these raise eager's message, keyed by the sizes' names.
_INTERPOLATIONS = {
    aten.upsample_linear1d.default: ("W",),
    aten.upsample_bilinear2d.default: ("H", "W"),
    aten.upsample_bicubic2d.default: ("H", "W"),
    aten._upsample_bilinear2d_aa.default: ("H", "W"),
    aten._upsample_bicubic2d_aa.default: ("H", "W"),
    aten.upsample_trilinear3d.default: ("D", "H", "W"),
}


@register_fake_rule(*_INTERPOLATIONS)
def _interpolation_sizes(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    names = _INTERPOLATIONS[func]
    x = args[0]
    output = _ints(args[1] if len(args) > 1 else kwargs["output_size"])
    sizes = _ints(x.shape[-len(names) :]) if isinstance(x, torch.Tensor) else None
    if output is None or sizes is None or len(output) != len(names):
        return NotImplemented  # symbolic or malformed: the meta kernel's answer
    if all(n > 0 for n in (*sizes, *output)):
        return NotImplemented

    def described(values: tuple) -> str:
        return ", ".join(f"{name}: {n}" for name, n in zip(names, values))

    joint = " and " if len(names) == 1 else " "  # (eager's 1-d message says "and")
    raise RuntimeError(
        "Input and output sizes should be greater than 0, but got "
        f"input ({described(sizes)}){joint}output ({described(output)})"
    )


def _ints(values: Any) -> tuple | None:
    """`values` as ints, None where one is symbolic."""
    out = []
    for value in values:
        if isinstance(value, torch.SymInt):
            value = value.node.maybe_as_int()
            if value is None:
                return None
        out.append(int(value))
    return tuple(out)


def tensor_iterator_strides(shape: tuple, operands: list) -> tuple:
    """The strides of the output TensorIterator allocates for inputs `operands` ((sizes,
    strides) pairs, in the op's order) broadcast to `shape`: its fast setup where every
    operand has `shape` (row-major, channels-last, or the operands' common dense strides),
    else its order of dims by the operands' strides (ATen's `reorder_dimensions`)."""
    ndim = len(shape)
    if ndim == 0:
        return ()
    if all(sizes == shape for sizes, _ in operands):
        if all(_is_contiguous(sizes, steps) for sizes, steps in operands):
            return _row_major(shape)
        if ndim == 4 and all(_is_channels_last(sizes, steps) for sizes, steps in operands):
            n, c, h, w = shape
            return (h * w * c, 1, w * c, c)
        firsts = {steps for _, steps in operands}
        if len(firsts) == 1 and _non_overlapping_and_dense(shape, operands[0][1]):
            return operands[0][1]
    # each operand's strides over `shape`: 0 where it broadcasts (added or size-1 dims)
    broadcast = []
    for sizes, steps in operands:
        lead = ndim - len(sizes)
        row = [0] * ndim
        for d, (n, step) in enumerate(zip(sizes, steps)):
            row[lead + d] = 0 if n == 1 and shape[lead + d] != 1 else step
        broadcast.append(row)

    def should_swap(dim0: int, dim1: int) -> int:
        for row in broadcast:
            a, b = row[dim0], row[dim1]
            if a == 0 or b == 0:
                continue
            if a != b:
                return -1 if a < b else 1
            if shape[dim0] > shape[dim1]:
                return 1
        return 0

    perm = list(range(ndim))[::-1]  # fastest dim first
    for i in range(1, ndim):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            comparison = should_swap(perm[dim0], perm[dim1])
            if comparison > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif comparison < 0:
                break
    strides = [0] * ndim
    step = 1
    for d in perm:
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def _row_major(shape: tuple) -> tuple:
    return tuple(math.prod(shape[d + 1 :]) for d in range(len(shape)))


def _is_channels_last(sizes: tuple, strides: tuple) -> bool:
    """c10's `is_contiguous(channels_last)` of a 4-d tensor."""
    if 0 in sizes:
        return True
    expected = 1
    for d in (1, 3, 2, 0):
        if sizes[d] != 1:
            if strides[d] != expected:
                return False
            expected *= sizes[d]
    return True


def _non_overlapping_and_dense(sizes: tuple, strides: tuple) -> bool:
    """c10's `is_non_overlapping_and_dense`: dims of size > 1 by stride tile the memory."""
    expected = 1
    for d in sorted(range(len(sizes)), key=lambda d: (strides[d], sizes[d])):
        if sizes[d] < 2:
            continue
        if strides[d] != expected:
            return False
        expected *= sizes[d]
    return True


def _is_contiguous(sizes: tuple, strides: tuple) -> bool:
    """c10's `is_contiguous`: row-major, size-1 dims' strides aside."""
    if any(size == 0 for size in sizes):
        return True
    expected = 1
    for size, stride in reversed(list(zip(sizes, strides))):
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


def _strides_like_channels_last(sizes: tuple, strides: tuple) -> bool:
    """c10's `is_channels_last_strides_2d_s4`, what `suggest_memory_format` reads for a
    4-d tensor: NHWC order by strides, ambiguous layouts (N111, 1C1W) counted NCHW."""
    if strides[1] == 0:
        return False
    least = 0
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < least:
            return False
        if d == 0 and least == strides[1]:
            return False
        least = strides[d] * sizes[d] if sizes[d] > 1 else strides[d]
    return True


def _convolution_channels_last(x: Any, weight: Any) -> bool:
    """Whether eager's CPU convolution (oneDNN or the slow kernels, transposed or not)
    lays out its output channels-last: where the 4-d input or weight suggests it. A 3-d
    input is made contiguous and viewed 4-d (`unsqueeze(2)`) first, the weight viewed
    so too. Symbolic sizes and strides are compared as eager compares them (guarded
    where their ranges do not decide)."""
    layouts = []
    for tensor, is_input in ((x, True), (weight, False)):
        shape, steps = tuple(tensor.shape), tuple(tensor.stride())
        if len(shape) == 3:
            if is_input and not _is_contiguous(shape, steps):
                steps = (shape[1] * shape[2], shape[2], 1)
            shape, steps = (*shape[:2], 1, shape[2]), (*steps[:2], shape[2] * steps[2], steps[2])
        layouts.append(_strides_like_channels_last(shape, steps))
    return any(layouts)


@register_fake_rule(aten.convolution.default)
def _convolution_cpu(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """A CPU convolution of 1-d or 2-d data, in eager's layout.

    # NOTE: the meta function follows the input's suggested layout alone and reads a
    # 3-d input as it is; eager's CPU kernels go channels-last when the 4-d input (a
    # 3-d one made contiguous and unsqueezed) or the weight suggests it. A transposed
    # 3-d input of one spatial element (`x.transpose(-1, -2)`, sizes (N, C, 1)) has
    # channels-last 4-d strides: eager's output was (C*L, 1, C) where ember's was
    # row-major.
    """
    x, weight = args[0], args[1]
    if x.device.type != "cpu" or x.layout != torch.strided or x.dim() not in (3, 4):
        return NotImplemented
    if weight.dim() != x.dim():
        return NotImplemented
    fakes = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    out = mode._run_meta(func, args, kwargs, fakes)
    sizes = tuple(out.shape)
    if any(size == 0 for size in sizes):  # eager's empty result: no layout to follow
        return out
    if _convolution_channels_last(x, weight):
        n, c, *spatial = sizes
        width = spatial[-1]
        if len(spatial) == 1:
            want = (width * c, 1, c)
        else:
            want = (spatial[0] * width * c, 1, width * c, c)
    else:
        want = tuple(math.prod(sizes[d + 1 :]) for d in range(len(sizes)))
    return out.new_empty_strided(out.shape, want)


# Operators that legitimately take tensors on different devices; the output
# (if new) goes on the device of the first tensor argument.
MIXED_DEVICE_OPS: frozenset[Any] = frozenset(
    {
        aten.copy_.default,
        aten.copy.default,
        aten._copy_from.default,
        aten._copy_from_and_resize.default,
        aten._to_copy.default,
        aten.index.Tensor,
        aten.index_put.default,
        aten.index_put_.default,
        aten._index_put_impl_.default,
        aten._unsafe_index.Tensor,
        aten._unsafe_index_put.default,
        aten.set_.source_Tensor,
    }
)


def _batch_norm_stats_dtype(x: torch.Tensor, params: list) -> torch.dtype:
    """The dtype of CPU batch norm's saved statistics: float32 for a half input with
    float32 parameters ("mixed" batch norm), else the input's."""
    dtypes = {p.dtype for p in params if isinstance(p, torch.Tensor)}
    if dtypes == {torch.float32} and x.dtype in (torch.bfloat16, torch.float16):
        return torch.float32
    return x.dtype


def _batch_norm_cpu(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """CPU batch norm, in eager's layouts and dtypes.

    Eager's kernel lays its output out in the input's suggested memory format: row-major
    below 4 dims whatever the input's strides (a transposed input too), where the meta
    function keeps the input's layout. Outside training it saves no statistics: eager
    returns empty tensors for them. The saved statistics keep the input's dtype unless
    the batch norm is mixed (the meta function, written for CUDA, saves float32 ones).
    """
    x = args[0]
    if x.device.type != "cpu":
        return NotImplemented
    names = [argument.name for argument in func._schema.arguments]
    bound = {**dict(zip(names, args)), **kwargs}
    training = bound.get("training", False)
    params = [bound.get(name) for name in ("weight", "bias", "running_mean", "running_var")]
    stats = _batch_norm_stats_dtype(x, params)
    output = x.new_empty(x.shape) if x.dim() < 4 else torch.empty_like(x)
    if not training and func is aten._native_batch_norm_legit.no_stats:
        return NotImplemented
    fakes = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not training:
        empty = x.new_empty((0,), dtype=stats)
        running = ()  # the functional op's running statistics
        if len(func._schema.returns) > 3:
            running = _running_statistics(mode._run_meta(func, args, kwargs, fakes), params)
        return output, empty, empty.clone(), *running
    outs = mode._run_meta(func, args, kwargs, fakes)
    if x.dim() >= 4:
        output = outs[0]
    saved = tuple(t.new_empty(t.shape, dtype=stats) for t in outs[1:3])
    return (output, *saved, *_running_statistics(outs, params))


def _running_statistics(outs: tuple, params: list) -> tuple:
    """The functional op's updated running statistics, in their own dtypes (the meta
    function gives the compute dtype)."""
    return tuple(t.new_empty(t.shape, dtype=p.dtype) for t, p in zip(outs[3:], params[2:]))


register_fake_rule(
    aten.native_batch_norm.default,
    aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit.no_stats,
    aten._native_batch_norm_legit_functional.default,
    aten._native_batch_norm_legit_no_training.default,
)(_batch_norm_cpu)


_EMBEDDING_BAG_SUM, _EMBEDDING_BAG_MAX = 0, 2


@register_fake_rule(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def _embedding_bag_cpu(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """CPU embedding_bag's bookkeeping outputs have sizes of their own.

    The meta kernel runs on meta tensors, so it gives a GPU kernel's sizes. On CPU
    (EmbeddingBag.cpp): `offset2bag` is empty on the fast sum path (float, half or
    bfloat16 weights with unit inner strides, no padding_idx); `bag_size` has one entry a bag,
    `max_indices` is (bags, dim) for max mode, else one entry a bag; the forward-only
    sum leaves the last two unfilled, one entry an offset.
    """
    names = [argument.name for argument in func._schema.arguments]
    bound = {**dict(zip(names, args)), **kwargs}
    weight, indices, offsets = bound["weight"], bound["indices"], bound["offsets"]
    if offsets.device.type != "cpu":
        return NotImplemented
    # (symbolic sizes too: the meta kernel's sizes are a GPU kernel's at any size)
    reduction = bound.get("mode", 0)
    weights = bound.get("per_sample_weights")
    padding_idx = bound.get("padding_idx", -1)
    bags = offsets.size(0) - (1 if bound.get("include_last_offset", False) else 0)
    fast_sum = (
        weight.dtype in (torch.float32, torch.float16, torch.bfloat16)
        and weight.stride(1) == 1
        and (padding_idx is None or padding_idx < 0)
        and (weights is None or weights.stride(0) == 1)
    )
    output = weight.new_empty((bags, weight.size(1)))
    if reduction == _EMBEDDING_BAG_SUM and fast_sum:
        offset2bag = offsets.new_empty((0,))
    else:
        offset2bag = offsets.new_empty((indices.size(0),))
    # The forward-only sum fills neither bag_size nor max_indices: both one entry an offset.
    unfilled = func is aten._embedding_bag_forward_only.default and reduction == _EMBEDDING_BAG_SUM
    bag_size = offsets.new_empty((offsets.size(0) if unfilled else bags,))
    if reduction == _EMBEDDING_BAG_MAX:
        max_indices = offsets.new_empty((bags, weight.size(1)))
    else:
        max_indices = offsets.new_empty((offsets.size(0) if unfilled else bags,))
    return output, offset2bag, bag_size, max_indices


@register_fake_rule(aten._fused_sdp_choice.default)
def _attention_kernel_choice(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """The fused attention kernel scaled_dot_product_attention takes on this device.

    The device's own check decides it from sizes, strides, dtypes and the GPU,
    which a meta tensor cannot stand for (its answer is always the unfused math
    path), so it runs on uninitialized stand-ins of the same layout. Symbolic
    sizes fall through to the meta kernel: a choice made for one size could be
    wrong for another.
    """
    from torch.utils._mode_utils import no_dispatch

    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    device = tensors[0].device
    usable = device.type == "cpu" or (device.type == "cuda" and torch.cuda.is_available())
    if not usable or any(_symbolic(t) for t in tensors):
        artifact_logger("perf_hints").info(
            "attention kernel choice left to the meta kernel (unfused): %s",
            "symbolic sizes" if usable else f"no usable {device.type} device",
        )
        return NotImplemented

    def stand_in(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)

    with no_dispatch():
        real_args = tuple(stand_in(a) for a in args)
        real_kwargs = {name: stand_in(v) for name, v in kwargs.items()}
        choice = func(*real_args, **real_kwargs)
    if artifact_enabled("perf_hints"):
        described = [
            f"{tuple(t.shape)}/{t.stride()}/{t.dtype}" if isinstance(t, torch.Tensor) else repr(t)
            for t in (*args, *kwargs.values())
        ]
        artifact_logger("perf_hints").info(
            "attention kernel choice %s for %s", choice, ", ".join(described)
        )
    return choice


def _symbolic(tensor: torch.Tensor) -> bool:
    return any(isinstance(s, torch.SymInt) for s in (*tensor.shape, *tensor.stride()))
