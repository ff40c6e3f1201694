"""What every kernel printer shares, whatever the language it prints.

A printer walks one FusedKernel and writes its text. The parts that do not
depend on the language live here: a kernel's parameters (`KernelArg`, in the
order the wrapper passes them), the numbering of temporaries, pointers and
scalar inputs (`KernelPrinter`), and the chain of scopes through which a
value printed once is found again (`ScopeChain`). A language subclasses
them and says only how it spells a parameter's type.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inductor_codegen.indexing import numel
from inductor_codegen.ir import ScalarArg
from inductor_codegen.runtime import IndexCheck

__all__ = [
    "KernelArg",
    "KernelPrinter",
    "KernelSource",
    "ScopeChain",
    "row_major_coordinates",
]


@dataclass(frozen=True, slots=True)
class KernelArg:
    """One parameter of a kernel: a buffer pointer (in or out) or a scalar input."""

    kind: str  # "in", "out", "scalar" or "size" (a size symbol, int64_t)
    name: str  # buffer, scalar-input or size-symbol name in the wrapper
    ctype: str


@dataclass(frozen=True, slots=True)
class KernelSource:
    name: str
    source: str  # the function, named KERNEL_NAME until the cache names it
    args: tuple[KernelArg, ...]
    # Bounds checks of indirect loads, numbered from 1 in the order of this tuple;
    # with any, the last argument (kind "status") is an IndexStatus address.
    checks: tuple[IndexCheck, ...] = ()


class ScopeChain:
    """A block of generated lines whose values are found in it or its enclosing blocks."""

    parent: ScopeChain | None
    cache: dict

    def lookup(self, key):
        scope = self
        while scope is not None:
            if key in scope.cache:
                return scope.cache[key]
            scope = scope.parent
        return None


class KernelPrinter:
    """Names and parameters of one kernel being printed.

    Pointers are named in_ptr0, in_ptr1, ... and out_ptr0, ... by first use;
    scalar inputs ks0, ks1, ...; temporaries tmp0, tmp1, ... . A language says
    how a parameter's type is spelled (`pointer_type`, `scalar_type`).
    """

    def __init__(self, kernel, buffers: dict, produced: set[str] | None = None):
        self.kernel = kernel
        self.buffers = buffers
        self.temps = 0
        self.args: dict[str, KernelArg] = {}
        self.pointer_names: dict[str, str] = {}
        self.scalars: dict[str, str] = {}
        # Buffers this kernel computes: their pointers are outputs even where read.
        self.produced = set(kernel.nodes) if produced is None else produced

    def pointer_type(self, kind: str, dtype: torch.dtype, aliased: bool = False) -> str:
        """A pointer parameter's type; `aliased`: another parameter points at its memory."""
        raise NotImplementedError

    def _aliased(self) -> set[str]:
        """Buffers of this kernel stored into an input it also reads, and those inputs."""
        names: set[str] = set()
        for name in getattr(self.kernel, "nodes", ()):
            into = getattr(self.buffers.get(name), "stored_into", None)
            if into is not None:
                names |= {name, into}
        return names

    def scalar_type(self, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def new_temp(self) -> str:
        self.temps += 1
        return f"tmp{self.temps - 1}"

    def pointer(self, buffer: str, writing: bool) -> str:
        if buffer in self.pointer_names:
            return self.pointer_names[buffer]
        kind = "out" if writing or buffer in self.produced else "in"
        count = sum(1 for a in self.args.values() if a.kind == kind)
        name = f"{kind}_ptr{count}"
        dtype = self.buffers[buffer].layout.dtype
        aliased = buffer in self._aliased()
        self.args[buffer] = KernelArg(kind, buffer, self.pointer_type(kind, dtype, aliased))
        self.pointer_names[buffer] = name
        return name

    def scalar(self, arg: ScalarArg) -> str:
        if arg.name not in self.scalars:
            self.scalars[arg.name] = f"ks{len(self.scalars)}"
            self.args["scalar:" + arg.name] = KernelArg(
                "scalar", arg.name, self.scalar_type(arg.dtype)
            )
        return self.scalars[arg.name]


def row_major_coordinates(flat: str, sizes, print_index, floordiv: str):
    """The coordinates of flat index `flat` over `sizes` (row-major), as text parts: for
    each dim, (`flat` divided by the sizes after it, the dim's size to take it modulo,
    or None for the first dim). A language joins them with its own modulo."""
    parts = []
    for k in range(len(sizes)):
        below = numel(sizes[k + 1 :])
        quotient = flat if below == 1 else f"({flat} {floordiv} {print_index(below)})"
        parts.append((quotient, print_index(sizes[k]) if k > 0 else None))
    return parts
