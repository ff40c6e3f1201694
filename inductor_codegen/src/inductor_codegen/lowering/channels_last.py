"""Channels-last (NHWC) storage between convolutions, for a device's lowering table.

A device whose convolution library runs fastest on NHWC data (oneDNN on CPUs) lowers
`aten.convolution` with `lower_convolution_channels_last`, and wraps its other
lowerings with `keep_channels_last`, both for the dtypes it names:

* an input that is not in memory yet (the previous convolution's batch norm and
  activation, say) is computed straight into an NHWC buffer, its loop nest running
  over (N, H, W, C) so that loads and stores stay contiguous;
* an input already in memory in another layout is copied once per graph, however
  many convolutions read it;
* the output gets channels-last strides; every later read goes through them;
* a value that reads channels-last data and would be stored anyway (several
  readers, a residual block's output say, or a value saved for the backward pass,
  ReLU's mask included) is stored channels-last too, so the next convolution (or the
  backward) needs no copy.

Only where nobody outside the graph sees the layouts: a convolution whose output the
user gets (a graph output other than a saved one, see `GraphLowering.layout_is_visible`)
keeps the eager layout, and so do transposed and non-2D convolutions. An output saved
for the backward pass keeps channels-last: the compiled forward reports its strides
and aot_autograd compiles the backward against them, whose `convolution_backward`
(`lower_convolution_backward_channels_last`) then reads NHWC gradients and inputs, the
gradient computed straight into NHWC by the backward's own pointwise kernels. (The
Triton generator, `codegen/triton/layouts.py`, applies the same rules to 16-bit
convolutions.)
"""

from __future__ import annotations

import operator
import weakref

import sympy
import torch

from inductor_codegen.ir import ExternBuffer, InputBuffer, Layout, TensorValue, expr_loads
from inductor_codegen.lowering.graph import (
    MAX_INLINE_SIZE,
    MAX_SHARED_INLINE_SIZE,
    BufferRef,
    inline_size,
    readers,
)

__all__ = [
    "NHWC_ORDER",
    "as_channels_last",
    "channels_last_layout",
    "keep_channels_last",
    "lower_convolution_backward_channels_last",
    "lower_convolution_channels_last",
    "lower_convolution_pointwise_channels_last",
    "reads_channels_last",
]

# NCHW dims from outermost to innermost in memory for channels-last storage.
NHWC_ORDER = (0, 2, 3, 1)
# Per GraphLowering: the channels-last copy of each value already made, and the
# names of the buffers stored channels-last.
_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_NHWC: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def channels_last_layout(dtype: torch.dtype, size) -> Layout:
    """NCHW sizes with NHWC strides."""
    n, c, h, w = size
    return Layout(dtype, tuple(size), (h * w * c, sympy.Integer(1), w * c, c))


def _is_channels_last(layout: Layout) -> bool:
    wanted = channels_last_layout(layout.dtype, layout.size)
    return all(size == 1 or a == b for size, a, b in zip(layout.size, layout.stride, wanted.stride))


def as_channels_last(ctx, value: TensorValue) -> TensorValue:
    """`value` as an NHWC buffer: itself when it is one, else computed or copied into one."""
    if value.view is not None and value.view.layout.offset == 0:
        if _is_channels_last(value.view.layout):
            return value
    copies = _COPIES.setdefault(ctx, {})
    key = (value.view.buffer, value.view.layout) if value.view is not None else id(value)
    if key in copies:
        return copies[key][1]
    result = ctx.realize(TensorValue(value.dtype, value.size, value.loader), order=NHWC_ORDER)
    copies[key] = (value, result)  # the value is kept so that its id stays unique
    _mark_channels_last(ctx, result.view.buffer)
    return result


def _mark_channels_last(ctx, name: str) -> None:
    _NHWC.setdefault(ctx, set()).add(name)
    ctx.private_layouts.add(name)  # a saved output returns it as it is


def reads_channels_last(ctx, value: TensorValue) -> bool:
    """Whether `value` (4-d) loads a buffer that this graph stores channels-last, or a
    channels-last graph input (a saved activation a compiled forward handed over)."""
    names = _NHWC.get(ctx, set()) | _channels_last_inputs(ctx)
    if not names:
        return False
    index = tuple(sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(4))
    return any(load.buffer in names for load in expr_loads(value.loader(index)))


def _channels_last_inputs(ctx) -> frozenset[str]:
    """The graph's 4-d tensor inputs stored channels-last and not also contiguous."""
    names = frozenset(
        buf.name
        for buf in ctx.inputs
        if isinstance(buf, InputBuffer)
        and len(buf.layout.size) == 4
        and _is_channels_last(buf.layout)
        and not _is_contiguous(buf.layout)
    )
    return names


def _is_contiguous(layout: Layout) -> bool:
    expected = sympy.Integer(1)
    for size, stride in reversed(tuple(zip(layout.size, layout.stride))):
        if size != 1 and stride != expected:
            return False
        expected = expected * size
    return True


def keep_channels_last(lowering, dtypes: tuple[torch.dtype, ...]):
    """`lowering`, storing its result channels-last where it reads channels-last data and
    would be stored anyway (the rule of `GraphLowering` for shared and large values).
    `dtypes` are the convolutions' (none: `lowering` as it is); a result of any dtype
    reading their NHWC data is stored NHWC (a float32 batch-norm statistic of bfloat16
    activations, ReLU's boolean mask saved for the backward).
    A tuple result (max pooling's values and indices) is decided per element, from the
    readers of the `getitem` taking it."""

    if not dtypes:
        return lowering

    def lower(ctx, node, *args, **kwargs):
        value = lowering(ctx, node, *args, **kwargs)
        if isinstance(value, tuple):
            taken = {
                u.args[1]: u
                for u in node.users
                if u.target is operator.getitem and isinstance(u.args[1], int) and u.users
            }
            return tuple(_kept(ctx, taken[k], v) if k in taken else v for k, v in enumerate(value))
        return _kept(ctx, node, value)

    lower.__name__ = getattr(lowering, "__name__", "lower")
    return lower


def _kept(ctx, node, value):
    """`value` (the result `node` names) channels-last when the rule above stores it."""
    if (
        not isinstance(value, TensorValue)
        or value.view is not None
        or value.ndim != 4
        or ctx.layout_is_visible(node)
        or not all(isinstance(s, sympy.Integer) for s in value.size)
        or not reads_channels_last(ctx, value)  # (cheap: no NHWC buffer in most graphs)
    ):
        return value
    size = inline_size(value)
    shared = readers(node) > 1 and size > MAX_SHARED_INLINE_SIZE
    saved = any(user.op == "output" for user in node.users)  # (only saved ones get here)
    if shared or saved or size > MAX_INLINE_SIZE:
        return as_channels_last(ctx, value)
    return value


def lower_convolution_channels_last(
    ctx, node, args: tuple, dtypes: tuple[torch.dtype, ...]
) -> TensorValue | None:
    """aten.convolution with channels-last input, weight and output; None where the
    rules above keep the eager layout (the caller lowers it as usual then)."""
    x, weight, _bias, _stride, _padding, _dilation, transposed, _output_padding, _groups = args
    val = node.meta.get("val")
    if (
        transposed
        or not isinstance(val, torch.Tensor)
        or val.dim() != 4
        or val.dtype not in dtypes
        or not isinstance(x, TensorValue)
        or not isinstance(weight, TensorValue)
        or x.ndim != 4
        or weight.ndim != 4
        or not all(isinstance(s, int) for s in val.shape)
        or ctx.layout_is_visible(node)
    ):
        return None
    args = (as_channels_last(ctx, x), as_channels_last(ctx, weight), *args[2:])
    ext_args = ctx.extern_arg(args)
    reads = tuple(a.name for a in ext_args if isinstance(a, BufferRef))
    layout = channels_last_layout(val.dtype, tuple(sympy.Integer(s) for s in val.shape))
    name = ctx.new_name()
    ctx.add_buffer(ExternBuffer(name, node.target, ext_args, {}, (layout,), False, reads))
    _mark_channels_last(ctx, name)
    return TensorValue.of_buffer(name, layout)


def lower_convolution_backward_channels_last(
    ctx, node, args: tuple, dtypes: tuple[torch.dtype, ...]
) -> tuple | None:
    """aten.convolution_backward on channels-last gradient, input and weight, where the
    gradient or the input reads channels-last data (saved activations handed over
    channels-last); its gradients come back in the strides torch's meta rule gives for
    such operands (NHWC for the input's). None where the eager layout is kept (the
    caller lowers it as usual then). A gradient the user gets is copied to the traced
    layout at the output, as every output is."""
    grad, x, weight, *rest = args
    transposed = rest[4]
    val = node.meta.get("val")
    operands = (grad, x, weight)
    if (
        transposed
        or not isinstance(val, (tuple, list))
        or not all(isinstance(v, TensorValue) and v.ndim == 4 for v in operands)
        or x.dtype not in dtypes
        or not all(isinstance(s, sympy.Integer) for v in operands for s in v.size)
        or not (reads_channels_last(ctx, grad) or _stored_channels_last(ctx, x)
                or reads_channels_last(ctx, x))
    ):  # fmt: skip
        return None
    operands = tuple(as_channels_last(ctx, v) for v in operands)
    layouts = _convolution_backward_layouts(node, operands, rest)
    args = (*operands, *rest)
    ext_args = ctx.extern_arg(args)
    reads = tuple(a.name for a in ext_args if isinstance(a, BufferRef))
    name = ctx.new_name()
    ctx.add_buffer(
        ExternBuffer(name, node.target, ext_args, {}, layouts, False, reads, tuple_result=True)
    )
    results = []
    for i, layout in enumerate(layouts):
        if layout is None:
            results.append(None)
            continue
        ctx.buffer_by_name[f"{name}_{i}"] = InputBuffer(f"{name}_{i}", layout)
        if len(layout.size) == 4 and _is_channels_last(layout):
            _mark_channels_last(ctx, f"{name}_{i}")
        results.append(TensorValue.of_buffer(f"{name}_{i}", layout))
    return tuple(results)


def _stored_channels_last(ctx, value: TensorValue) -> bool:
    layout = value.view.layout if value.view is not None else None
    return layout is not None and _is_channels_last(layout) and not _is_contiguous(layout)


def _convolution_backward_layouts(node, operands, rest) -> tuple:
    """The layouts of convolution_backward's results for channels-last operands, by
    torch's meta rule (the run time checks the kernel's against them)."""
    metas = [
        torch.empty_strided(
            tuple(int(s) for s in v.size),
            tuple(int(s) for s in v.view.layout.stride),
            dtype=v.dtype,
            device="meta",
        )
        for v in operands
    ]
    out = node.target(*metas, *rest)
    return tuple(
        Layout(t.dtype, tuple(sympy.Integer(s) for s in t.shape),
               tuple(sympy.Integer(s) for s in t.stride()))
        if isinstance(t, torch.Tensor) else None
        for t in out
    )  # fmt: skip


def lower_convolution_pointwise_channels_last(ctx, node, args: tuple) -> TensorValue | None:
    """mkldnn._convolution_pointwise (a folded, prepacked convolution, see
    `frozen_convolutions`) on channels-last input, its output channels-last; where the
    user gets the output, in the strides the node's value has (the wrapper copies
    oneDNN's result into them when they differ). None for what this does not handle."""
    x, *rest = args
    val = node.meta.get("val")
    if (
        not isinstance(val, torch.Tensor)
        or val.dim() != 4
        or not isinstance(x, TensorValue)
        or x.ndim != 4
        or not all(isinstance(s, int) for s in val.shape)
    ):
        return None
    size = tuple(sympy.Integer(s) for s in val.shape)
    visible = ctx.layout_is_visible(node)
    if visible:
        strides = tuple(sympy.Integer(s) for s in val.stride())
        layout = Layout(val.dtype, size, strides)
    else:
        x = as_channels_last(ctx, x)
        layout = channels_last_layout(val.dtype, size)
    ext_args = ctx.extern_arg((x, *rest))
    reads = tuple(a.name for a in ext_args if isinstance(a, BufferRef))
    name = ctx.new_name()
    ctx.add_buffer(ExternBuffer(name, node.target, ext_args, {}, (layout,), False, reads))
    if not visible:
        _mark_channels_last(ctx, name)
    return TensorValue.of_buffer(name, layout)
