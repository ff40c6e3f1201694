"""Errors eager kernels raise that fake tensors do not: checked while tracing.

Fake tensors run an op's meta function, which computes the output's shape and
dtype but skips many checks the real kernel makes: dtypes it does not implement
(`argmax` of a bool tensor, `abs` of bool, `lerp` of integers), the dtype of an
index (`index_select` with a float index), an in-place result that cannot be cast
back (`int_tensor.mul_(1.5)`), a full reduction of an empty tensor (`max()`).
A compiled graph that decomposes the op never reaches the kernel, and a dead
statement is not in the graph at all, so the error eager raises would be lost.

`check_kernel_accepts(op, args, kwargs)` runs the op's real kernel once on small
tensors of the arguments' dtypes, device and number of dims (each size capped at
1; an empty dim stays empty; zeros for an index, ones elsewhere), its result
cached per signature. Where that probe fails, for an op given a tensor that is not
floating point, a bool or complex number (`x - True`), an empty tensor or an index,
or where the kernel lacks the dtype (`NotImplementedError`), it runs again at the
arguments' full sizes (a size argument may not fit the capped tensors);
other failures of floating-point ops are taken as the capping's (a kernel larger
than the capped image), not probed at full size, which would cost compile time,
unless the arguments are small (at most `_FULL_PROBE_NUMEL` elements together):
`F.interpolate(x, scale_factor=0.5)` of a width-1 `x` raises eager's "output sizes
should be greater than 0" even where its result is unused.
Where the full-size probe also fails, the op is rejected: on fakes with static
sizes by `guards.DataDependentError` (the trace then runs on real tensors, where
the op's kernel runs on the real values and raises eager's error); on real tensors
the kernel runs on the real arguments, raising its error; with symbolic sizes the
probe's error is raised.

A factory (`arange`, `full`, `linspace`: no tensor argument) is probed as called, where
its meta function says the result is small (at most `_FACTORY_PROBE_NUMEL` elements,
the dtype's dispatch does not depend on the size): `arange(n, dtype=torch.bool)` raises
eager's "not implemented for 'Bool'" at trace time. A larger one is not probed.

Ops whose result depends on values (`nonzero`, `.item()`) or on random numbers
are not probed, nor views (metadata only, checked by their meta functions), nor ops
given integers for an index-like argument the probe does not fill with zeros (lengths,
offsets, a non-class target): a CPU kernel may read at those positions of the capped
stand-ins unchecked (`_ctc_loss_backward` stops the process, no exception).

Some kernels raise on values no probe has: an index out of range, an integer divisor
of zero. `checks_values` names those ops; the tracer keeps their results computed even
where unused, so the compiled graph runs the same check at every call.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

import guards
from aot_autograd.symbolic import concrete_hint

__all__ = ["check_kernel_accepts", "checks_values", "takes_index_tensor"]

aten = torch.ops.aten

_SKIPPED_TAGS = (
    torch.Tag.data_dependent_output,
    torch.Tag.dynamic_output_shape,
    torch.Tag.nondeterministic_seeded,
)
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
_accepted: set[tuple] = set()
_MAX_ACCEPTED = 100_000
_INDEX_NAMES = frozenset({"index", "indices"})
_autocast_off = torch._C._DisableAutocast
# Ops whose whole work is checking their arguments' values (`info` of a factorization):
# a probe's stand-in values say nothing about the real ones.
_VALUE_CHECKS = frozenset({aten._linalg_check_errors.default})


def _is_probed(op: Any) -> bool:
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return False
    if op in _VALUE_CHECKS:
        return False
    if any(tag in op.tags for tag in _SKIPPED_TAGS):
        return False
    return not any(
        r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns
    )


def takes_index_tensor(op: Any) -> bool:
    """Whether `op` takes a tensor of indices (`gather`, `index_select`, `x[idx]`): its
    kernel raises on an index out of range, a check of the values, not of the dtypes."""
    if not isinstance(op, torch._ops.OpOverload):
        return False
    return any(a.name in _INDEX_NAMES and "Tensor" in str(a.type) for a in op._schema.arguments)


# Ops dividing integers, in every form (functional, in place, out=); `div` only with a
# rounding mode (true division of integers gives floats).
_INTEGER_DIVISIONS = frozenset(
    getattr(packet, name)
    for packet in (
        aten.remainder,
        aten.remainder_,
        aten.floor_divide,
        aten.floor_divide_,
        aten.fmod,
        aten.fmod_,
        aten.div,
        aten.div_,
    )
    for name in packet.overloads()
    if packet not in (aten.div, aten.div_) or "mode" in name
)


# Losses taking a tensor of class indices as `target`: their kernels raise on a class
# out of range ("Target 5 is out of bounds").
_CLASS_TARGET_LOSSES = frozenset(
    {
        aten.nll_loss_forward.default,
        aten.nll_loss2d_forward.default,
        aten.multi_margin_loss.default,
        aten.multilabel_margin_loss_forward.default,
    }
)


def checks_values(op: Any, out: Any) -> bool:
    """Whether `op`'s kernel raises on some values of its arguments, which fakes and the
    probe's stand-ins do not have: an index out of range (`gather`, `index_select`,
    `x[idx]`, a class `target` of `nll_loss`) or an integer divisor of zero (`x % y`, `x // y`, `fmod` of integers,
    with result `out`). Such a result is computed even where nothing uses it."""
    if takes_index_tensor(op) or op in _CLASS_TARGET_LOSSES:
        return True
    if op not in _INTEGER_DIVISIONS or not isinstance(out, torch.Tensor):
        return False
    return not out.dtype.is_floating_point and not out.dtype.is_complex


def _scalar_operands(op: Any, args: tuple, kwargs: dict) -> list:
    """The numbers passed for the op's `Scalar` or `Tensor` arguments (`x - True`, `x * 2`)."""
    operands = []
    for i, argument in enumerate(op._schema.arguments):
        kind = argument.type
        if isinstance(kind, torch.OptionalType):
            kind = kind.getElementType()
        if not isinstance(kind, (torch.NumberType, torch.TensorType)):
            continue
        if i < len(args):
            operands.append(args[i])
        elif argument.name in kwargs:
            operands.append(kwargs[argument.name])
    return operands


def _unusual(op: Any, args: tuple, kwargs: dict, tensors: list) -> bool:
    """Arguments a kernel may reject where the meta function does not: a tensor that is
    not floating point, a bool or complex number operand, an empty tensor, or an index
    argument. (An int operand is common and rarely rejected: a failing capped probe of
    `constant_pad_nd(x, pads, 0)` is the capping's.)"""
    for t in tensors:
        if not t.dtype.is_floating_point:
            return True
        if any(concrete_hint(s) == 0 for s in t.shape):
            return True
    for value in _scalar_operands(op, args, kwargs):
        if isinstance(value, (bool, complex, torch.SymBool)):
            return True
    return takes_index_tensor(op)


def _may_assert_on_device(op: Any, args: tuple, kwargs: dict, tensors: list) -> bool:
    """Whether a probe of `op` could fail a device-side assertion on a GPU: an op taking an
    index or given an integer tensor for an index-like argument (see
    `_index_like_integers`). A GPU kernel reports an index out of range by an assertion
    that leaves the device unusable for the whole process, not by an exception the probe
    could catch; such ops are not probed on a GPU. Other integer ops are: a dead
    `softmax` of an integer tensor raises eager's dtype error on a GPU as on the CPU."""
    if not _on_gpu(tensors):
        return False
    if takes_index_tensor(op) or op in _CLASS_TARGET_LOSSES:
        return True
    return _index_like_integers(op, args, kwargs)


def _on_gpu(tensors: list) -> bool:
    return any(t.device.type == "cuda" for t in tensors)


# Words of the argument names whose integer tensors a GPU kernel checks against another
# argument's sizes by an assertion: indices, class targets, offsets and lengths
# (`gather`'s `index`, `nll_loss_backward`'s `target`, `embedding_bag`'s `offsets`,
# `ctc_loss`'s `target_lengths`, `max_unpool2d`'s `indices`).
_INDEX_LIKE_WORDS = ("index", "indices", "idx", "target", "offset", "length", "label", "bag")
# Ops whose own input is such a tensor: `one_hot`'s classes.
_INDEX_INPUT_OPS = frozenset({aten.one_hot.default})


def _index_like_integers(
    op: Any, args: tuple, kwargs: dict, zero_filled: frozenset = frozenset()
) -> bool:
    """Whether `op` gets integers for an index-like argument (by its name) other than
    those named in `zero_filled`: an integer tensor, or a list of ints (`_ctc_loss`'s
    `input_lengths`)."""
    if op in _INDEX_INPUT_OPS:
        return True
    for i, argument in enumerate(op._schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(argument.name)
        if value is None or argument.name in zero_filled:
            continue
        if not any(word in argument.name for word in _INDEX_LIKE_WORDS):
            continue
        leaves = pytree.tree_leaves(value)
        if any(isinstance(t, torch.Tensor) and _integral(t) for t in leaves):
            return True
        if isinstance(value, (list, tuple)) and any(_is_int(v) for v in leaves):
            return True
    return False


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)


def _zero_filled_names(op: Any) -> frozenset:
    """The arguments a probe fills with zeros (an index valid at any size)."""
    return _INDEX_NAMES | ({"target"} if op in _CLASS_TARGET_LOSSES else frozenset())


def _may_read_out_of_bounds(op: Any, args: tuple, kwargs: dict) -> bool:
    """Whether a capped probe of `op` could read past its stand-ins on the CPU: an
    index-like argument it does not fill with zeros holds integers (a tensor filled with
    ones, a list of lengths kept at its values) that point into tensors capped to one
    element a dim. A CPU kernel need not check them: `_ctc_loss_backward` given
    `input_lengths` of 50 over a one-step `log_probs` stops the process with a
    segmentation fault, not an exception the probe could catch. Such ops are not probed."""
    return _index_like_integers(op, args, kwargs, _zero_filled_names(op))


def _integral(t: torch.Tensor) -> bool:
    return not (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool)


_FULL_PROBE_NUMEL = 1 << 12


def _small(tensors: list) -> bool:
    """Whether the arguments are small enough to probe at full size at little cost."""
    total = 0
    for t in tensors:
        numel = 1
        for s in t.shape:
            numel *= concrete_hint(s)
        total += numel
    return total <= _FULL_PROBE_NUMEL


def _runs_here(device: torch.device) -> bool:
    return device.type == "cpu" or (device.type == "cuda" and torch.cuda.is_available())


def _accept(key: tuple | None) -> None:
    if key is None:
        return
    if len(_accepted) >= _MAX_ACCEPTED:
        _accepted.clear()
    _accepted.add(key)


def _signature(op: Any, leaves: list) -> tuple | None:
    parts: list[Any] = [op]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            sizes = tuple(0 if concrete_hint(s) == 0 else 1 for s in leaf.shape)
            parts.append((leaf.dtype, leaf.device.type, sizes))
        elif isinstance(leaf, _SYMBOLIC):
            parts.append(("sym", type(leaf).__name__, _hint(leaf)))
        else:
            try:
                hash(leaf)
            except TypeError:
                return None
            parts.append((type(leaf), leaf))
    return tuple(parts)


def _hint(value: Any) -> Any:
    if isinstance(value, torch.SymInt):
        return concrete_hint(value)
    if isinstance(value, torch.SymFloat):
        return float(value.node.hint)
    if isinstance(value, torch.SymBool):
        return bool(value.node.hint)
    return value


def _probe_value(leaf: Any, capped: bool, fill: int) -> Any:
    if isinstance(leaf, torch.Tensor):
        sizes = [concrete_hint(s) for s in leaf.shape]
        if capped:
            sizes = [min(s, 1) for s in sizes]
        return torch.full(sizes, fill, dtype=leaf.dtype, device=leaf.device)
    if isinstance(leaf, _SYMBOLIC):
        return _hint(leaf)
    return leaf


def _probe_arguments(op: Any, args: tuple, kwargs: dict, capped: bool) -> tuple[list, dict]:
    """Small stand-ins for the arguments: zeros for an index (valid at any size), ones
    elsewhere (a divisor, an exponent)."""
    names = [a.name for a in op._schema.arguments]
    index_names = _zero_filled_names(op)

    def stand_in(name: str, value: Any) -> Any:
        fill = 0 if name in index_names else 1
        return pytree.tree_map(lambda leaf: _probe_value(leaf, capped, fill), value)

    probe_args = [stand_in(names[i] if i < len(names) else "", a) for i, a in enumerate(args)]
    return probe_args, {k: stand_in(k, v) for k, v in kwargs.items()}


def _probe(op: Any, args: tuple, kwargs: dict, capped: bool) -> Exception | None:
    try:
        with _disable_current_modes(), torch.no_grad(), _autocast_off():
            probe_args, probe_kwargs = _probe_arguments(op, args, kwargs, capped)
            op(*probe_args, **probe_kwargs)
    except Exception as error:  # noqa: BLE001 - any kernel error is the op's rejection
        return error
    return None


_FACTORY_PROBE_NUMEL = 1 << 16
# Arguments of a factory op that set how many elements it makes, and what a small probe
# of the same op (its dtype, its device) takes instead.
_FACTORY_COUNTS = {"size": lambda v: [min(n, 1) for n in v], "n": min, "m": min, "steps": min}


def _small_factory_arguments(op: Any, args: tuple, kwargs: dict) -> tuple[list, dict]:
    """`op`'s arguments with its element count cut to about one (`size`, `n`, `steps`;
    `arange`'s `end` one `step` past `start`): its kernel's dtype check runs at any size."""
    names = [a.name for a in op._schema.arguments]
    values = dict(zip(names, args))
    values.update(kwargs)
    for name, cut in _FACTORY_COUNTS.items():
        value = values.get(name)
        if isinstance(value, (list, tuple)) and all(isinstance(n, int) for n in value):
            values[name] = cut(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            values[name] = cut(value, 1)
    if op._schema.name == "aten::arange" and "end" in values:
        start, step = values.get("start", 0), values.get("step", 1)
        values["end"] = start + step if "start" in values else min(values["end"], 1)
    positional = [values.pop(name) for name in names[: len(args)]]
    return positional, values


def _check_factory_accepts(op: Any, args: tuple, kwargs: dict, leaves: list) -> None:
    """Run a factory op (no tensor argument) once, where its result is small, else a
    copy of it making about one element: its kernel may lack the requested dtype, which
    its meta function does not check."""
    device = kwargs.get("device")
    if device is not None and not _runs_here(torch.device(device)):
        return
    key = _signature(op, leaves)
    if key is not None and key in _accepted:
        return
    hinted_args, hinted_kwargs = pytree.tree_map_only(_SYMBOLIC, _hint, (args, kwargs))
    with _disable_current_modes(), torch.no_grad(), _autocast_off():
        try:
            shape = op(*hinted_args, **{**hinted_kwargs, "device": "meta"})
        except Exception:  # noqa: BLE001 - the meta function's own error is raised later
            return
        if not isinstance(shape, torch.Tensor):
            return
        if shape.numel() > _FACTORY_PROBE_NUMEL:
            hinted_args, hinted_kwargs = _small_factory_arguments(op, hinted_args, hinted_kwargs)
            try:
                small = op(*hinted_args, **{**hinted_kwargs, "device": "meta"})
            except Exception:  # noqa: BLE001 - no small twin: the kernel is not probed
                return
            if not isinstance(small, torch.Tensor) or small.numel() > _FACTORY_PROBE_NUMEL:
                return
        op(*hinted_args, **hinted_kwargs)  # eager's error, where its kernel raises one
    _accept(key)


def check_kernel_accepts(op: Any, args: tuple, kwargs: dict) -> None:
    """Raise where `op`'s real kernel rejects arguments like these (see the module docstring).

    Called before the op is recorded or decomposed, outside any mode.
    """
    if not _is_probed(op):
        return
    leaves = pytree.tree_leaves((args, kwargs))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    if not tensors:
        _check_factory_accepts(op, args, kwargs, leaves)
        return
    if not all(_runs_here(t.device) for t in tensors):
        return
    if _may_assert_on_device(op, args, kwargs, tensors):
        return
    if _may_read_out_of_bounds(op, args, kwargs):
        return
    key = _signature(op, leaves)
    if key is not None and key in _accepted:
        return
    fake = any(guards.is_fake(t) for t in tensors)
    error = _probe(op, args, kwargs, capped=True)
    if error is None or not (
        _unusual(op, args, kwargs, tensors)
        or isinstance(error, NotImplementedError)
        or _small(tensors)
    ):
        _accept(key)
        return
    full_key = key and (*key, tuple(tuple(concrete_hint(s) for s in t.shape) for t in tensors))
    if full_key is not None and full_key in _accepted:
        return
    error = _probe(op, args, kwargs, capped=False)
    if error is None:
        _accept(full_key)
        return
    if not fake:  # the real values decide
        with _disable_current_modes(), torch.no_grad(), _autocast_off():
            real_args, real_kwargs = pytree.tree_map_only(
                torch.Tensor, lambda t: t.detach().clone(), (args, kwargs)
            )
            op(*real_args, **real_kwargs)
        return
    if any(isinstance(leaf, _SYMBOLIC) for leaf in leaves) or any(
        isinstance(s, torch.SymInt) for t in tensors for s in t.shape
    ):
        raise error
    raise guards.DataDependentError(
        f"{op} rejected arguments of these dtypes and sizes ({type(error).__name__}: {error}); "
        "its kernel decides on the real values",
        op=str(op),
    )
