"""Options of `compile_graph`, declared once: name, type, default and meaning."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from inductor_codegen.errors import InductorError

__all__ = ["Options", "default_cache_dir"]


def default_cache_dir() -> Path:
    """EMBER_CACHE_DIR, or ~/.cache/ember."""
    return Path(os.environ.get("EMBER_CACHE_DIR") or Path.home() / ".cache" / "ember")


@dataclass(frozen=True, slots=True)
class Options:
    """compile_graph(..., options={...}) keys.

    cache_dir:   where compiled kernels and wrappers live (default: EMBER_CACHE_DIR
                 or ~/.cache/ember).
    cxx:         the C++ compiler (default: CXX or g++).
    cxx_flags:   compiler flags (default: -O3 -march=native -fopenmp -shared -fPIC ...).
    lowerings:   the lowering table, OpOverload -> function (default: LOWERINGS);
                 ops missing from it run through ATen.
    compile_workers: compiler processes run at once (default: CPU count).
    """

    cache_dir: Path | None = None
    cxx: str = field(default_factory=lambda: os.environ.get("CXX", "g++"))
    cxx_flags: tuple[str, ...] | None = None
    lowerings: dict | None = None
    compile_workers: int | None = None

    @staticmethod
    def from_mapping(options) -> Options:
        if options is None:
            return Options()
        if isinstance(options, Options):
            return options
        known = {f.name for f in fields(Options)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InductorError(
                f"unknown compile_graph option(s) {', '.join(unknown)}; the options are: "
                f"{', '.join(sorted(known))}"
            )
        values = dict(options)
        if values.get("cxx_flags") is not None:
            values["cxx_flags"] = tuple(values["cxx_flags"])
        if values.get("cache_dir") is not None:
            values["cache_dir"] = Path(values["cache_dir"])
        return Options(**values)
