"""Automatic dynamic: which dims to make symbolic after a recompile caused by a size change.

Capture keeps one `SizeHistory` per code object. Before building fakes for a
compile it calls `observe(source, tensor)` for each tensor input; the answer is
the set of dims whose size differed from an earlier compile (sticky: once
dynamic, a dim stays dynamic), to pass as `dynamic_dims` to
`FakeTensorMode.from_real`. `observe_int` does the same for int inputs. A tensor
whose rank changed has every dim dynamic from then on, whatever its rank (as
torch.compile's automatic dynamic marks such a size). A source that was a tensor
in one compile and a number in another is dynamic in both kinds from then on.

    >>> history = SizeHistory()
    >>> history.observe(LocalSource("x"), torch.empty(8, 3))
    frozenset()
    >>> history.observe(LocalSource("x"), torch.empty(16, 3))
    frozenset({0})
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from guards.sources import Source

__all__ = ["SizeHistory"]


@dataclass(slots=True)
class _Seen:
    sizes: tuple[int, ...]
    dynamic: set[int] = field(default_factory=set)
    any_rank: bool = False  # the rank changed once: every dim is dynamic


class SizeHistory:
    """Sizes seen per source over the compiles of one function."""

    def __init__(self) -> None:
        self._tensors: dict[Source, _Seen] = {}
        self._ints: dict[Source, tuple[object, bool]] = {}

    def observe(self, source: Source, tensor: torch.Tensor) -> frozenset[int]:
        """Record `tensor`'s sizes; the dims that changed since an earlier compile."""
        sizes = tuple(int(size) for size in tensor.shape)
        seen = self._tensors.get(source)
        if seen is None and source in self._ints:  # a number before: every dim dynamic
            seen = _Seen(sizes, any_rank=True)
        if seen is None:
            self._tensors[source] = _Seen(sizes)
            return frozenset()
        if seen.any_rank or len(seen.sizes) != len(sizes):
            self._tensors[source] = _Seen(sizes, set(range(len(sizes))), any_rank=True)
            return frozenset(range(len(sizes)))
        seen.dynamic.update(d for d, (a, b) in enumerate(zip(seen.sizes, sizes)) if a != b)
        seen.sizes = sizes
        return frozenset(seen.dynamic)

    def observe_int(self, source: Source, value: int) -> bool:
        """Record int input `value`; whether it changed since an earlier compile (sticky)."""
        return self.observe_value(source, value)

    def observe_value(self, source: Source, value: object) -> bool:
        """Record constant input `value` (an int, a tuple of numbers...); whether it
        changed since an earlier compile (sticky)."""
        seen = self._ints.get(source)
        # a tensor before: symbolic at once (torch.compile's automatic dynamic merges
        # what it saw of a source, and a tensor and a number differ in everything)
        dynamic = source in self._tensors or (seen is not None and (seen[1] or seen[0] != value))
        self._ints[source] = (value, dynamic)
        return dynamic

    def dynamic_dims(self, source: Source) -> frozenset[int]:
        """The dims of the tensor at `source` made dynamic so far."""
        seen = self._tensors.get(source)
        return frozenset(seen.dynamic) if seen is not None else frozenset()
