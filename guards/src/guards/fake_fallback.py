"""Running an op without a meta kernel for real, on zeros, to learn its output metadata.

Some operators (a few linear-algebra and histogram kernels, CTC loss) have no
meta kernel. When every tensor input stands for a CPU tensor and is small, the
op runs on real zero-filled CPU tensors with the same metadata, and its outputs
become fakes. This is only sound for ops whose output metadata does not depend
on the data, so ops tagged `dynamic_output_shape` or `data_dependent_output`
never take this path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.utils._mode_utils import no_dispatch

from guards.errors import DataDependentError
from guards.fake_arguments import map_structure

if TYPE_CHECKING:
    from guards.fake_tensor import FakeTensor, FakeTensorMode

__all__ = ["FALLBACK_MAX_ELEMENTS", "can_fall_back", "run_fallback"]

# The most elements (over all inputs) the fallback allocates for real.
FALLBACK_MAX_ELEMENTS = 1 << 22

_VALUE_TAGS = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)


def can_fall_back(func: Any, fakes: list[FakeTensor]) -> bool:
    """Whether `func` may run for real on zeros of `fakes` (raises for data-dependent ops)."""
    if any(tag in func.tags for tag in _VALUE_TAGS):
        raise DataDependentError(
            f"{func} has a data-dependent output and no meta kernel; fake tensors cannot "
            "compute it. Capture breaks the graph here.",
            op=str(func),
        )
    if any(fake.device.type != "cpu" for fake in fakes):
        return False
    elements = sum(
        fake.meta.untyped_storage().nbytes() // max(fake.element_size(), 1) for fake in fakes
    )
    return elements <= FALLBACK_MAX_ELEMENTS


def _zeros_like(fake: FakeTensor, storages: dict[int, torch.Tensor]) -> torch.Tensor:
    """A real CPU tensor with `fake`'s metadata; fakes sharing a meta storage share one."""
    meta = fake.meta
    key = meta.untyped_storage()._cdata
    base = storages.get(key)
    if base is None:
        base = torch.zeros(meta.untyped_storage().nbytes(), dtype=torch.uint8)
        storages[key] = base
    real = torch.empty(0, dtype=fake.dtype)
    real.set_(base.untyped_storage(), meta.storage_offset(), meta.shape, meta.stride())
    return real


def run_fallback(mode: FakeTensorMode, func: Any, args: tuple, kwargs: dict) -> Any:
    """Run `func` on zeros shaped like the fakes; outputs that are inputs stay those fakes."""
    storages: dict[int, torch.Tensor] = {}
    fake_of: dict[int, FakeTensor] = {}

    def to_real(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and hasattr(value, "meta"):
            real = _zeros_like(value, storages)
            fake_of[id(real)] = value
            return real
        return value

    def to_fake(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            same = fake_of.get(id(value))
            return same if same is not None else mode.from_real(value.detach())
        return value

    with no_dispatch():
        real_args = map_structure(to_real, args)
        real_kwargs = {name: map_structure(to_real, value) for name, value in kwargs.items()}
        out = func(*real_args, **real_kwargs)
    return map_structure(to_fake, out)
