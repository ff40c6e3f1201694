"""Log artifacts shared by every stage, on the standard `logging` library.

Each artifact is a logger named `ember.<artifact>`; a stage logs to it with
`artifact_logger("guards").info(...)` (DEBUG for verbose detail) and checks
`artifact_enabled("guards")` before building expensive text. Users turn
artifacts on with the environment variable, read once at import:

    EMBER_LOGS=graph_breaks,recompiles,guards      # on (INFO)
    EMBER_LOGS=+guards,graph                       # `+` = verbose (DEBUG)
    EMBER_LOGS=all                                 # every artifact

or at run time with `set_logs(guards=True, recompiles=logging.DEBUG)`.
An unknown name in EMBER_LOGS warns, listing the known ones (importing never
fails). TORCH_LOGS names that have an ember equivalent turn that artifact on too
(`TORCH_LOGS=recompiles_verbose,output_code` -> +recompiles, output_code); its
other names are torch's own and left alone.
The lowest layer holds this so that each stage logs the same way when used alone.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

__all__ = [
    "ARTIFACTS",
    "artifact_enabled",
    "artifact_logger",
    "parse_log_spec",
    "set_logs",
    "torch_log_levels",
]

ARTIFACTS: dict[str, str] = {
    "graph_breaks": "each graph break: the reason and the user's file and line",
    "recompiles": "each recompile: which guard failed and why",
    "guards": "the generated guard function's source for each compiled entry",
    "dynamic": "symbols created for dynamic dimensions and the guards on them",
    "graph": "each captured FX graph, as Python source",
    "bytecode": "the transformed bytecode of each compiled frame",
    "aot_graphs": "the joint, forward and backward ATen graphs",
    "decompositions": "the graph after applying a decomposition table",
    "output_code": "generated kernels and the wrapper that calls them",
    "schedule": "the scheduler's fusion and memory-planning decisions",
    "perf_hints": "places where a faster path was missed, and why",
    "cache": "warm-start cache hits, misses (the key parts) and what was not stored, and why",
}
ROOT_LOGGER = "ember"

# TORCH_LOGS name -> (ember artifact, verbose); names equal to an artifact map to it.
TORCH_LOG_NAMES: dict[str, tuple[str, bool]] = {
    "recompiles_verbose": ("recompiles", True),
    "graph_code": ("graph", False),
    "graph_sizes": ("graph", True),
    "aot_joint_graph": ("aot_graphs", False),
    "kernel_code": ("output_code", False),
    "fusion": ("schedule", False),
}


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of the record (test capture works)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _root() -> logging.Logger:
    root = logging.getLogger(ROOT_LOGGER)
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        root.addHandler(handler)
        root.propagate = False
        root.setLevel(logging.WARNING)
    return root


def artifact_logger(name: str) -> logging.Logger:
    """The logger of artifact `name`; an unknown name is an error listing the known ones."""
    if name not in ARTIFACTS:
        raise ValueError(f"unknown log artifact {name!r}; known artifacts: {', '.join(ARTIFACTS)}")
    _root()
    return logging.getLogger(f"{ROOT_LOGGER}.{name}")


def artifact_enabled(name: str, level: int = logging.INFO) -> bool:
    """Whether artifact `name` is on at `level`: cheap, call it before building text."""
    return artifact_logger(name).isEnabledFor(level)


def _parse(spec: str) -> tuple[dict[str, int], list[str]]:
    """The levels a spec names, and the names it holds that are not artifacts."""
    levels: dict[str, int] = {}
    unknown: list[str] = []
    for raw in spec.replace(" ", "").split(","):
        if not raw:
            continue
        verbose = raw.startswith("+")
        name = raw.lstrip("+")
        level = logging.DEBUG if verbose else logging.INFO
        names = list(ARTIFACTS) if name == "all" else [name]
        for one in names:
            if one in ARTIFACTS:
                levels[one] = level
            else:
                unknown.append(one)
    return levels, unknown


def _unknown_message(source: str, unknown: list[str]) -> str:
    noun = "artifact" if len(unknown) == 1 else "artifacts"
    return (
        f"{source} names unknown {noun} {', '.join(map(repr, unknown))}; known: all, "
        f"{', '.join(ARTIFACTS)} (prefix a name with '+' for verbose output)"
    )


def parse_log_spec(spec: str) -> dict[str, int]:
    """`"+guards,graph"` -> {"guards": DEBUG, "graph": INFO}; `all` names every artifact.

    An unknown name raises ValueError listing the known ones.
    """
    levels, unknown = _parse(spec)
    if unknown:
        raise ValueError(_unknown_message("EMBER_LOGS", unknown))
    return levels


def torch_log_levels(spec: str) -> dict[str, int]:
    """The ember artifacts a TORCH_LOGS value asks for: its names with an ember equivalent.

    `-name` (off in torch) and torch's component names (`dynamo`, `inductor`) are skipped.
    """
    levels: dict[str, int] = {}
    for raw in spec.replace(" ", "").split(","):
        if not raw or raw.startswith("-"):
            continue
        verbose = raw.startswith("+")
        name = raw.lstrip("+")
        artifact, verbose_name = TORCH_LOG_NAMES.get(name, (name, False))
        if artifact in ARTIFACTS:
            levels[artifact] = logging.DEBUG if verbose or verbose_name else logging.INFO
    return levels


def set_logs(**artifacts: bool | int) -> None:
    """Turn log artifacts on or off: `set_logs(guards=True, recompiles=logging.DEBUG)`.

    True means INFO, False turns the artifact off, an int is a logging level.
    Artifacts not named are turned off, so `set_logs()` silences everything.
    """
    unknown = sorted(set(artifacts) - set(ARTIFACTS))
    if unknown:
        raise ValueError(
            f"set_logs got unknown artifact(s) {', '.join(unknown)}; known: {', '.join(ARTIFACTS)}"
        )
    for name in ARTIFACTS:
        value = artifacts.get(name, False)
        if isinstance(value, bool):
            level = logging.INFO if value else logging.WARNING
        elif isinstance(value, int):
            level = value
        else:
            raise TypeError(f"set_logs({name}=...) takes a bool or a logging level, got {value!r}")
        artifact_logger(name).setLevel(level)


def _configure_from_environment() -> None:
    """EMBER_LOGS, then TORCH_LOGS for what EMBER_LOGS does not name; never raises."""
    levels = torch_log_levels(os.environ.get("TORCH_LOGS", ""))
    spec = os.environ.get("EMBER_LOGS", "")
    if spec:
        ember_levels, unknown = _parse(spec)
        levels.update(ember_levels)
        if unknown:
            warnings.warn(_unknown_message("EMBER_LOGS", unknown), UserWarning, stacklevel=2)
    if levels:
        set_logs(**levels)


_configure_from_environment()
