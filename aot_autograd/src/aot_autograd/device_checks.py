"""Eager's refusal of an op given tensors on two devices: checked while tracing.

A CUDA kernel refuses arguments on another device ("Expected all tensors to be on
the same device, but got running_mean is on cpu, different from other tensors on
cuda:0"): `F.batch_norm` of a CUDA input with CPU running statistics, `x_cuda +
y_cpu`, `x_cuda @ w_cpu`. Fake tensors carry a device but their meta functions do
not compare them, and a decomposition turns the op into others that a code
generator lowers for one device, so the compiled graph would compute where eager
raises. `check_devices_agree(op, args, kwargs)` raises eager's error before the
op is recorded.

The rule, as eager's kernels apply it: the tensor arguments (in lists too) share
one device, except CPU tensors of no dims, which every kernel takes as numbers
(`x_cuda * torch.tensor(2.0)`). Ops made to take two devices are left alone:
copies between devices (`copy_`, `_to_copy`), indexing with CPU indices
(`x_cuda[idx_cpu]`, `index_put_`), `set_`, and the fused and foreach optimizer
kernels (CPU step counts). The meta device is left alone too: eager's meta
kernels compare devices only in part (`mm` of a meta and a CPU tensor runs).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["check_devices_agree"]

aten = torch.ops.aten

# Ops whose kernels take tensors on two devices (by overload packet name), and the
# name prefixes of op families that do.
_CROSS_DEVICE_OPS = frozenset(
    {
        "copy_", "copy", "_copy_from", "_copy_from_and_resize", "_to_copy", "to",
        "index", "_unsafe_index", "index_put", "index_put_", "_index_put_impl_",
        "_unsafe_index_put", "set_", "lift", "lift_fresh", "lift_fresh_copy",
        "_local_scalar_dense", "is_same_size", "_has_same_storage_numel", "record_stream",
        "_assert_async", "_make_dep_token", "_functional_assert_async",
    }
)  # fmt: skip
_CROSS_DEVICE_PREFIXES = ("_foreach_", "_fused_", "_amp_")


def _takes_two_devices(op: Any) -> bool:
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return True  # (another library's op: its own rules)
    name = op._schema.name.split("::")[-1]
    return name in _CROSS_DEVICE_OPS or name.startswith(_CROSS_DEVICE_PREFIXES)


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


def _is_cpu_scalar(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and t.dim() == 0


def check_devices_agree(op: Any, args: tuple, kwargs: dict) -> None:
    """Raise eager's error where `op`'s tensor arguments are on two devices (see the
    module docstring)."""
    if _takes_two_devices(op):
        return
    common: torch.device | None = None
    mismatch: tuple[str, torch.device] | None = None
    for name, t in _named_tensors(op, args, kwargs):
        if t.device.type == "meta":
            return
        if _is_cpu_scalar(t):
            continue
        if common is None:
            common = t.device
        elif t.device != common and mismatch is None:
            mismatch = (name, t.device)
    if mismatch is not None:
        name, device = mismatch
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but got {name} is on {device}, "
            f"different from other tensors on {common} (when checking argument in method "
            f"{op}). Move them to one device (`.to(device)`) before the call"
        )
