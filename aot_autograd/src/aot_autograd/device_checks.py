"""Eager's refusal of an op given tensors on two devices: checked while tracing.

A CUDA kernel refuses arguments on another device: `F.batch_norm` of a CUDA input
with CPU running statistics, `x_cuda + y_cpu`, a convolution with a CPU weight,
`index_select` with CPU indices. Fake tensors carry a device, but a meta function
does not compare them, and a decomposition turns the op into others that a code
generator lowers for one device, so the compiled graph would compute where eager
raises. `check_devices_agree(op, args, kwargs)` raises eager's error (a
`DeviceMismatchError`, a RuntimeError as eager's) before the op is recorded.

The rule is a family per op, as eager's kernels check:

| family | ops | takes | eager's message |
| --- | --- | --- | --- |
| device copies | `_to_copy`, `copy_`, `set_`, `lift_fresh`, foreach/fused/amp kernels | any devices | (none) |
| indexing | `index`, `index_put`, `_unsafe_index(_put)` | indices on the CPU or self's device; else as elementwise | "indices should be either on cpu or on the same device as the indexed tensor (cpu)" |
| elementwise | TensorIterator kernels: `add`, `where`, `masked_fill`, `floor_divide`, ... | 0-dim CPU tensors beside any device (read as numbers) | "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!" |
| convolutions | `convolution`, `_convolution`, `cudnn_convolution`, ... | one device | "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same" |
| every other aten op | `mm`, `cat`, `clamp.Tensor`, `native_batch_norm`, `index_select`, `embedding`, ... | one device, 0-dim CPU tensors refused too | "Expected all tensors to be on the same device, but got index is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA__index_select)" |

Which ops are elementwise is read from eager's own op declarations
(`native_functions.yaml`, shipped with torch in `torchgen/packaged`): an op declared
`device_check: NoCheck` has no generated device check, and its kernel (a
TensorIterator) takes 0-dim CPU tensors; every other op with a device kernel gets the
generated check, which refuses them, and whose method name (`wrapper_CUDA_mm` for a
structured kernel, `wrapper_CUDA__index_select` otherwise) the message gives. Without
that file, ops tagged `pointwise` are the elementwise ones.

Another library's op keeps its own rules (left alone), and so does the meta device
(eager's meta kernels compare devices only in part: `mm` of a meta and a CPU tensor
runs). Where eager's kernel spells its error as another op's (`embedding` indexes
with `index_select`), `_SPELLED_AS` says so.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from pathlib import Path
from typing import Any

import torch

from aot_autograd.errors import DeviceMismatchError

__all__ = ["check_devices_agree", "device_family"]

# Ops whose kernels take tensors on two devices (by overload packet name), and the name
# prefixes of op families that do.
_DEVICE_COPIES = frozenset(
    {
        "copy_", "copy", "_copy_from", "_copy_from_and_resize", "_to_copy", "to", "set_",
        "lift", "lift_fresh", "lift_fresh_copy", "_local_scalar_dense", "is_same_size",
        "_has_same_storage_numel", "record_stream", "_assert_async", "_make_dep_token",
        "_functional_assert_async",
    }
)  # fmt: skip
_DEVICE_COPY_PREFIXES = ("_foreach_", "_fused_", "_amp_")
# Indexing with a list of index tensors, which may be on the CPU (eager moves them).
_INDEXING = frozenset({"index", "_unsafe_index", "index_put", "index_put_", "_index_put_impl_",
                       "_unsafe_index_put"})  # fmt: skip
# Ops reading a 0-dim value tensor as a number (declared NoCheck too; listed for torch
# builds without the declarations).
_ELEMENTWISE = frozenset({"masked_fill", "masked_fill_", "fill", "fill_", "index_fill",
                          "index_fill_"})  # fmt: skip
_CONVOLUTIONS = frozenset({"convolution", "_convolution", "convolution_overrideable",
                           "cudnn_convolution", "cudnn_convolution_transpose",
                           "miopen_convolution", "mkldnn_convolution", "_convolution_mode",
                           "_slow_conv2d_forward", "slow_conv3d_forward",
                           "slow_conv_dilated2d", "slow_conv_dilated3d"})  # fmt: skip
# op name -> (the op eager's error names, {argument name: the name it gives})
_SPELLED_AS = {"embedding": ("index_select", {"weight": "self", "indices": "index"})}

# The names eager's type strings use: legacy tensor type names where they exist
# ("torch.cuda.FloatTensor"), else the backend and scalar type ("CUDABFloat16Type").
_LEGACY_TYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
    torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int",
    torch.int64: "Long",
}  # fmt: skip
_SCALAR_TYPE_NAMES = {
    torch.bfloat16: "BFloat16", torch.bool: "Bool", torch.complex32: "ComplexHalf",
    torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}  # fmt: skip


def device_family(op: Any) -> str:
    """Which of the module docstring's families `op` belongs to: "other library",
    "device copy", "indexing", "elementwise", "convolution" or "one device"."""
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return "other library"
    name = op._schema.name.split("::")[-1]
    if name in _DEVICE_COPIES or name.startswith(_DEVICE_COPY_PREFIXES):
        return "device copy"
    if name in _INDEXING:
        return "indexing"
    if name in _CONVOLUTIONS:
        return "convolution"
    declared = _declarations()
    if declared is not None:
        unchecked = _qualified_name(op) in declared.unchecked or name in _ELEMENTWISE
    else:
        unchecked = name in _ELEMENTWISE or torch.Tag.pointwise in op.tags
    return "elementwise" if unchecked else "one device"


@dataclasses.dataclass(frozen=True, slots=True)
class _Declarations:
    """What eager's op declarations say of device checks, by `name.overload` ("mm" for
    a default overload)."""

    unchecked: frozenset[str]  # declared `device_check: NoCheck`
    structured: frozenset[str]  # structured kernels (named without the overload first)


@functools.cache
def _declarations() -> _Declarations | None:
    """native_functions.yaml as torch ships it (None where it does not)."""
    spec = importlib.util.find_spec("torchgen")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0], _DECLARATIONS)
    if not path.is_file():
        return None
    unchecked, structured = set(), set()
    for entry in path.read_text().split("\n- func: ")[1:]:
        name = entry.split("(", 1)[0].strip()
        if "\n  device_check: NoCheck" in entry:
            unchecked.add(name)
        if "\n  structured_delegate:" in entry or "\n  structured: True" in entry:
            structured.add(name)
    return _Declarations(frozenset(unchecked), frozenset(structured))


_DECLARATIONS = "packaged/ATen/native/native_functions.yaml"


def _qualified_name(op: Any) -> str:
    name = op._schema.name.split("::")[-1]
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def _method_name(op: Any, kernel: torch.device, spelled: str) -> str:
    """The name eager's generated kernel wrapper gives in its device check's message."""
    overload = (
        "" if op._overloadname == "default" or spelled != _packet_name(op) else op._overloadname
    )
    unambiguous = f"{spelled}_{overload}" if overload else spelled
    qualified = f"{spelled}.{overload}" if overload else spelled
    declared = _declarations()
    backend = kernel.type.upper()
    if declared is not None and qualified in declared.structured:
        return f"wrapper_{backend}_{unambiguous}"
    return f"wrapper_{backend}_{overload}_{unambiguous}"


def _packet_name(op: Any) -> str:
    return op._schema.name.split("::")[-1]


def check_devices_agree(op: Any, args: tuple, kwargs: dict) -> None:
    """Raise eager's error (DeviceMismatchError) where `op`'s tensor arguments are on
    devices its eager kernel refuses (see the module docstring)."""
    family = device_family(op)
    if family in ("other library", "device copy"):
        return
    named = _named_tensors(op, args, kwargs)
    if any(t.device.type == "meta" for _, t in named):
        return
    if len({t.device for _, t in named}) < 2:
        return
    if family == "indexing":
        _check_indexing(named)
    elif family == "elementwise":
        _check_elementwise(named)
    elif family == "convolution":
        _check_convolution(named)
    else:
        _check_one_device(op, named)


def _named_tensors(op: Any, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    """(argument name, tensor) for each tensor argument, those in lists included."""
    found = []
    for i, argument in enumerate(op._schema.arguments):
        if i < len(args):
            value = args[i]
        elif argument.name in kwargs:
            value = kwargs[argument.name]
        else:
            continue
        values = value if isinstance(value, (list, tuple)) else (value,)
        found += [(argument.name, t) for t in values if isinstance(t, torch.Tensor)]
    return found


def _check_elementwise(named: list[tuple[str, torch.Tensor]]) -> None:
    """TensorIterator's rule: the first device other than the CPU is the common one; a
    0-dim CPU tensor beside it is read as a number."""
    devices = [t.device for _, t in named]
    common = next((d for d in devices if d.type != "cpu"), devices[0])
    for _, t in named:
        if t.device == common or (t.device.type == "cpu" and t.dim() == 0):
            continue
        raise DeviceMismatchError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{common} and {t.device}!{_HOW_TO_FIX}"
        )


def _check_indexing(named: list[tuple[str, torch.Tensor]]) -> None:
    indexed = named[0][1]
    for name, t in named:
        if name == "indices" and t.device not in (indexed.device, torch.device("cpu")):
            raise DeviceMismatchError(
                "indices should be either on cpu or on the same device as the indexed tensor "
                f"({indexed.device}){_HOW_TO_FIX}"
            )
    _check_elementwise([(name, t) for name, t in named if name != "indices"])


def _check_convolution(named: list[tuple[str, torch.Tensor]]) -> None:
    tensors = dict(named)
    given = tensors.get("input")
    if given is None:
        return
    for name in ("weight", "bias"):
        t = tensors.get(name)
        if t is not None and t.device != given.device:
            raise DeviceMismatchError(
                f"Input type ({_type_string(given)}) and {name} type ({_type_string(t)}) "
                f"should be the same{_HOW_TO_FIX}"
            )


def _check_one_device(op: Any, named: list[tuple[str, torch.Tensor]]) -> None:
    """The check eager's generated kernel wrappers make: every tensor argument on the
    first one's device (a 0-dim CPU tensor too); the kernel is the other device's."""
    spelled, renamed = _SPELLED_AS.get(_packet_name(op), (_packet_name(op), {}))
    common = named[0][1].device
    for argument, t in named:
        if t.device == common:
            continue
        kernel = next(x.device for _, x in named if x.device.type != "cpu")
        method = _method_name(op, kernel, spelled)
        raise DeviceMismatchError(
            "Expected all tensors to be on the same device, but got "
            f"{renamed.get(argument, argument)} is on {t.device}, different from other tensors "
            f"on {common} (when checking argument in method {method}){_HOW_TO_FIX}"
        )


def _type_string(t: torch.Tensor) -> str:
    """Eager's name of a tensor's type in its messages: torch.cuda.FloatTensor,
    torch.HalfTensor, CUDABFloat16Type."""
    legacy = _LEGACY_TYPE_NAMES.get(t.dtype)
    if legacy is not None and t.device.type in ("cpu", "cuda"):
        return f"torch.{'cuda.' if t.device.type == 'cuda' else ''}{legacy}Tensor"
    scalar = _SCALAR_TYPE_NAMES.get(t.dtype, str(t.dtype).removeprefix("torch."))
    return f"{t.device.type.upper()}{scalar}Type"


# Appended to eager's message, which it keeps as its first line.
_HOW_TO_FIX = "\n(Move the tensors to one device, `.to(device)`, before the call.)"
