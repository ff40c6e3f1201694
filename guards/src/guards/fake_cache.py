"""A cache of op output metadata for fake tensors, keyed by the op and its inputs' metadata.

Capture and AOT tracing run the same ops on the same shapes over and over
(every layer of a transformer), and torch's meta kernels for common ops are
Python code. For an op whose outputs are fresh tensors (no mutation, no
aliasing of inputs), the output metadata depends only on the op, the input
metadata and the other arguments; the cache keeps it and makes new outputs
with `empty_strided` on the meta device.

Not cached: ops with a fake rule, mutating or aliasing ops, ops with
symbolic sizes, and arguments that are not plain constants.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._mode_utils import no_dispatch

from guards.fake_arguments import leaves, map_structure

__all__ = ["DispatchCache", "OutputSpec"]

_CONSTANTS = (int, float, bool, str, type(None), complex, torch.dtype, torch.device,
              torch.layout, torch.memory_format)  # fmt: skip


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """The metadata of one fresh output tensor."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    dtype: torch.dtype

    def make(self) -> torch.Tensor:
        """A new meta tensor with this metadata."""
        with no_dispatch():
            meta = torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device="meta")
            if self.storage_offset:
                storage = torch.UntypedStorage(
                    (self.storage_offset + meta.untyped_storage().nbytes() // meta.element_size())
                    * meta.element_size(),
                    device="meta",
                )
                meta.set_(storage, self.storage_offset, self.shape, self.stride)
        return meta


class DispatchCache:
    """Output metadata by (op, default dtype, input metadata, constant arguments)."""

    def __init__(self) -> None:
        self._entries: dict[Any, Any] = {}
        self._cacheable: dict[Any, bool] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def cacheable(self, func: Any) -> bool:
        """Whether `func`'s outputs are always fresh tensors (schema: no mutation, no alias)."""
        known = self._cacheable.get(func)
        if known is None:
            schema = func._schema
            known = (
                not schema.is_mutable
                and all(ret.alias_info is None for ret in schema.returns)
                and torch.Tag.nondeterministic_seeded not in func.tags
                and torch.Tag.dynamic_output_shape not in func.tags
                and torch.Tag.data_dependent_output not in func.tags
            )
            self._cacheable[func] = known
        return known

    def key(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """The cache key, or None when an argument is not a plain constant or static tensor."""
        # NOTE: the default dtype decides the dtype of factories given none and of
        # integer tensors combined with Python floats
        parts: list[Any] = [func, tuple(kwargs), torch.get_default_dtype()]
        for value in itertools.chain(leaves(args), leaves(tuple(kwargs.values()))):
            if isinstance(value, torch.Tensor):
                meta = value.meta  # a FakeTensor
                if meta._has_symbolic_sizes_strides:
                    return None
                parts.append(
                    (meta.dtype, tuple(meta.shape), meta.stride(), meta.storage_offset(),
                     value.device, meta.is_conj(), meta.is_neg())
                )  # fmt: skip
            elif type(value) is tuple or isinstance(value, _CONSTANTS):
                parts.append((type(value), value))
            else:
                return None
        return tuple(parts)

    def lookup(self, key: Any) -> Any:
        """The outputs' template (OutputSpecs where tensors were) for `key`, or None."""
        hit = self._entries.get(key)
        if hit is None:
            self.misses += 1
        else:
            self.hits += 1
        return hit

    def store(self, key: Any, out: Any) -> None:
        """Remember the outputs of one run (only if every tensor output is plain and dense)."""
        storable = True

        def spec_of(value: Any) -> Any:
            nonlocal storable
            if isinstance(value, torch.Tensor):
                if value.layout != torch.strided or value.is_conj() or value.is_neg():
                    storable = False
                    return None
                return OutputSpec(
                    tuple(value.shape), value.stride(), value.storage_offset(), value.dtype
                )
            if not isinstance(value, _CONSTANTS):
                storable = False
            return value

        template = map_structure(spec_of, out)
        if storable:
            self._entries[key] = template
