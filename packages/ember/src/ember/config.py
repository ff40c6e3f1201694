"""Compile options and modes, declared once: name, type, default, help.

    ember.compile(fn, options={"max_autotune": True})
    ember.compile(fn, mode="reduce-overhead")      # = options {"triton.cudagraphs": True}

A mode is a named set of options. Giving both is fine where they agree; an option
that contradicts the mode is an error. Unknown names are errors listing the choices.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ember.errors import InvalidArgumentError

__all__ = ["MODES", "OPTIONS", "Option", "resolve_options"]


@dataclass(frozen=True, slots=True)
class Option:
    """One compile option.

    `applies_to` names the backends that read it (empty: every backend);
    `codegen_name` is the `inductor_codegen.compile_graph` option it becomes.
    """

    name: str
    type: type | tuple[type, ...]
    default: Any
    help: str
    applies_to: tuple[str, ...] = ()
    codegen_name: str | None = None
    choices: tuple[Any, ...] = ()  # the accepted values, where there are only a few
    # A check of the value beyond its type (None: the type is enough), and what it accepts.
    valid: Callable[[Any], str | None] | None = None


def _positive_int(value: Any) -> str | None:
    return None if value is None or value >= 1 else "a positive int"


def _non_empty_str(value: Any) -> str | None:
    return None if value is None or value.strip() else "a non-empty str"


def _cache_dir(value: Any) -> str | None:
    return None if value is None or os.fspath(value) else "a non-empty folder path"


def _flags(value: Any) -> str | None:
    if value is None or all(isinstance(flag, str) and flag for flag in value):
        return None
    return "a list or tuple of non-empty str (one compiler flag each)"


def _decompositions(value: Any) -> str | None:
    if value is None:
        return None
    operators = (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
    for op, rule in value.items():
        if not isinstance(op, operators) or not callable(rule):
            op = str(op) if isinstance(op, operators) else repr(op)
            return (
                "a mapping from ATen operators (torch.ops.aten.x.default) to callables, such "
                f"as a prim_decomp.DecompositionTable (not so its entry {op}: {rule!r})"
            )
    return None


_CODEGEN = ("inductor",)
_AOT = ("inductor", "aot_eager")
_NONE = type(None)

OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (
        Option(
            "guard_filter_fn",
            (_NONE, Callable),  # type: ignore[arg-type]
            None,
            "fn(entries) -> list[bool]: which guards of each compiled frame to keep",
        ),
        Option(
            "recompile_limit",
            int,
            8,
            "compiled entries per function before running eagerly",
            valid=_positive_int,
        ),
        Option(
            "decompositions",
            (_NONE, Mapping),
            None,
            "a prim_decomp.DecompositionTable used instead of the backend's default table",
            _AOT,
            valid=_decompositions,
        ),
        Option(
            "partitioner",
            (_NONE, str),
            None,
            "how training graphs are split into forward and backward: 'min_cut' saves the "
            "fewest bytes and recomputes cheap ops in the backward (the inductor backend's "
            "default), 'default' saves every value the backward reads (aot_eager's default)",
            _AOT,
            choices=(None, "min_cut", "default"),
        ),
        Option(
            "cache_dir",
            (_NONE, str, os.PathLike),
            None,
            "where compiled kernels are cached (default: $EMBER_CACHE_DIR or ~/.cache/ember)",
            _CODEGEN,
            codegen_name="cache_dir",
            valid=_cache_dir,
        ),
        Option(
            "compile_threads",
            (_NONE, int),
            None,
            "C++ compiler processes run at once (default: the CPU count)",
            _CODEGEN,
            codegen_name="compile_workers",
            valid=_positive_int,
        ),
        Option(
            "cpp.cxx",
            (_NONE, str),
            None,
            "the C++ compiler for CPU kernels (default: $CXX or g++)",
            _CODEGEN,
            codegen_name="cxx",
            valid=_non_empty_str,
        ),
        Option(
            "cpp.cxx_flags",
            (_NONE, tuple, list),
            None,
            "flags for the C++ compiler (default: -O3 -march=native -fopenmp ...)",
            _CODEGEN,
            codegen_name="cxx_flags",
            valid=_flags,
        ),
        Option(
            "warm_start",
            bool,
            True,
            "keep compiled graphs on disk (and on EMBER_REMOTE_CACHE) for later processes; "
            "EMBER_WARM_START=0 turns it off everywhere",
            _CODEGEN,
        ),
        Option(
            "deferred_recompiles",
            bool,
            True,
            "compile a static entry made after a function's first (a recompile) at its "
            "second call: its first runs the captured graph as it is, op by op, and one "
            "another entry covers by then (a first decode step, once the steps after it "
            "made the cache length symbolic) is dropped without compiling; False compiles "
            "every entry at once",
            _AOT,
        ),
        Option(
            "regional",
            (bool, type(None)),
            None,
            "compile the calls of identical blocks (a ModuleList of equal layers) once, "
            "each call running the one compiled block with its own parameters; None (the "
            "default) does so for CPU graphs and compiles CUDA graphs whole (measured as fast "
            "or faster there: fusion across blocks, fewer pieces to launch); True on every "
            "device; False compiles the whole graph everywhere",
            _AOT,
        ),
        Option(
            "reinplace",
            bool,
            True,
            "write a mutated input's new value into the input itself where that is sound "
            "(a static key/value cache's update, BatchNorm's running statistics) instead "
            "of copying the whole new value back after each call",
            _CODEGEN,
            codegen_name="reinplace",
        ),
        Option(
            "fold_convolutions",
            bool,
            False,
            "in inference graphs on the CPU (no_grad, inference_mode), fold per-channel "
            "affine maps after 2-D convolutions (eval-mode BatchNorm2d) into the weights and "
            "prepack them for oneDNN; folded again whenever those tensors' contents change "
            "(each call compares the folded tensors' bytes with copies: twice the weights' "
            "memory and one read of them a call)",
            _CODEGEN,
        ),
        Option(
            "max_autotune",
            bool,
            False,
            "benchmark GPU kernel configurations and keep the fastest (Triton)",
            _CODEGEN,
            codegen_name="max_autotune",
        ),
        Option(
            "triton.cudagraphs",
            bool,
            False,
            "replay compiled GPU graphs with CUDA graphs",
            _CODEGEN,
            codegen_name="cudagraphs",
        ),
    )
}

MODES: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"triton.cudagraphs": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True},
    "max-autotune": {"max_autotune": True, "triton.cudagraphs": True},
}


def _check_mode(mode: str | None) -> dict[str, Any]:
    if mode is None:
        return {}
    if not isinstance(mode, str) or mode not in MODES:
        raise InvalidArgumentError(
            f"unknown mode {mode!r}; the modes are: {', '.join(repr(m) for m in MODES)}"
        )
    return MODES[mode]


def _check_value(option: Option, value: Any) -> None:
    types = option.type if isinstance(option.type, tuple) else (option.type,)
    ok = any(callable(value) if t is Callable else isinstance(value, t) for t in types)  # type: ignore[comparison-overlap]
    if option.type is int and isinstance(value, bool):
        ok = False
    if not ok:
        expected = " or ".join("callable" if t is Callable else t.__name__ for t in types)  # type: ignore[comparison-overlap]
        raise InvalidArgumentError(
            f"option {option.name!r} takes {expected}, got {value!r} ({type(value).__name__})"
        )
    if option.choices and value not in option.choices:
        accepted = ", ".join(repr(choice) for choice in option.choices)
        raise InvalidArgumentError(f"option {option.name!r} takes one of {accepted}, got {value!r}")
    accepted = option.valid(value) if option.valid is not None else None
    if accepted is not None:
        shown = repr(value) if len(repr(value)) <= 200 else repr(value)[:197] + "..."
        raise InvalidArgumentError(
            f"option {option.name!r} takes {accepted}, got {shown}; it is: {option.help}"
        )


def _suggestion(name: object) -> str:
    """' (did you mean 'cpp.cxx'?)' for a near or unqualified option name; else ''."""
    if not isinstance(name, str):
        return ""
    close = [o for o in OPTIONS if o.rsplit(".", 1)[-1] == name]
    close = close or difflib.get_close_matches(name, OPTIONS, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def resolve_options(
    mode: str | None, options: Mapping[str, Any] | None, backend_name: str | None
) -> dict[str, Any]:
    """Every option's value after applying the mode and the user's options, checked.

    `backend_name` is the built-in backend's name, or None for a custom callable.
    """
    from_mode = _check_mode(mode)
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise InvalidArgumentError(f"options must be a dict, got {type(options).__name__}")
    unknown = sorted((o for o in options if o not in OPTIONS), key=repr)
    if unknown:
        listing = "\n".join(f"  {o.name}: {o.help}" for o in OPTIONS.values())
        named = ", ".join(f"{o!r}{_suggestion(o)}" for o in unknown)
        raise InvalidArgumentError(f"unknown option(s) {named}; the known options are:\n{listing}")
    for name, value in options.items():
        option = OPTIONS[name]
        _check_value(option, value)
        if name in from_mode and from_mode[name] != value:
            raise InvalidArgumentError(
                f"mode {mode!r} sets {name}={from_mode[name]!r} but options set {name}={value!r}; "
                "drop the option or choose another mode"
            )
        if option.applies_to and value != option.default and backend_name not in option.applies_to:
            raise InvalidArgumentError(
                f"option {name!r} only applies to backend(s) {', '.join(option.applies_to)}; "
                f"the backend here is {backend_name or 'a custom callable'!r}"
            )
    if from_mode and backend_name not in _CODEGEN:
        raise InvalidArgumentError(
            f"mode {mode!r} configures code generation and only applies to backend 'inductor'; "
            f"the backend here is {backend_name or 'a custom callable'!r}"
        )
    resolved = {name: option.default for name, option in OPTIONS.items()}
    resolved.update(from_mode)
    resolved.update(options)
    return resolved
