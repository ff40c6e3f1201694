"""Options of `compile_graph`, declared once: name, type, default and meaning."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from guards.cache_root import cache_root
from inductor_codegen.errors import InductorError

__all__ = ["Options", "default_cache_dir"]


def default_cache_dir() -> Path:
    """The cache root: EMBER_CACHE_DIR, or ~/.cache/ember (see guards.cache_root)."""
    return cache_root()


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
    reinplace:   store mutated inputs' new values into the inputs themselves where that
                 is sound, and report them (default True; see lowering.reinplace).
                 False returns every new value for the caller to copy back.
    fold_convolutions: for an inference graph (no backward reads it): fold per-channel
                 affine maps after 2-D float32 convolutions (eval-mode batch norm) into
                 their weights and prepack them for oneDNN, folded again whenever the
                 tensors they come from change (see frozen_convolutions; default False,
                 ember's inductor backend turns it on for inference graphs).
    """

    cache_dir: Path | None = None
    cxx: str = field(default_factory=lambda: os.environ.get("CXX", "g++"))
    cxx_flags: tuple[str, ...] | None = None
    lowerings: dict | None = None
    compile_workers: int | None = None
    reinplace: bool = True
    fold_convolutions: bool = False

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
        _check_values(values)
        if values.get("cxx_flags") is not None:
            values["cxx_flags"] = tuple(values["cxx_flags"])
        if values.get("cache_dir") is not None:
            values["cache_dir"] = Path(values["cache_dir"])
        return Options(**values)


def _check_values(values: dict) -> None:
    """Each option's value is of the accepted kind; the error names it and what is accepted."""
    checks = {
        "cache_dir": (
            lambda v: isinstance(v, (str, os.PathLike)) and bool(os.fspath(v)),
            "a folder path",
        ),
        "cxx": (lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty str"),
        "cxx_flags": (
            lambda v: isinstance(v, (list, tuple)) and all(isinstance(f, str) and f for f in v),
            "a list or tuple of non-empty str",
        ),
        "lowerings": (lambda v: isinstance(v, Mapping), "a dict from OpOverload to function"),
        "compile_workers": (
            lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
            "a positive int",
        ),
        "reinplace": (lambda v: isinstance(v, bool), "True or False"),
        "fold_convolutions": (lambda v: isinstance(v, bool), "True or False"),
    }
    for name, value in values.items():
        valid, accepted = checks.get(name, (None, ""))
        if value is not None and valid is not None and not valid(value):
            raise InductorError(f"compile_graph option {name!r} takes {accepted}, got {value!r}")
