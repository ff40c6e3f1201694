"""Ember: a PyTorch compiler written in Python, in stages that stand alone.

    import ember

    @ember.compile
    def f(x):
        return torch.sin(x) + x.cos()

Stable API: everything in `__all__`. Each stage is its own package (guards,
dynamo_capture, prim_decomp, aot_autograd, inductor_codegen); this package composes
them and re-exports what users call.
"""

from dynamo_capture import (
    EagerFallbackWarning,
    allow_in_graph,
    assume_constant_result,
    disable,
    disallow_in_graph,
    is_compiling,
    is_exporting,
    nonstrict_trace,
    set_stance,
    substitute_in_graph,
)
from ember.api import OptimizedModule, compile, reset
from ember.backends import list_backends, register_backend
from ember.errors import (
    BackendNotFoundError,
    CaptureError,
    CaptureUnavailableError,
    EmberError,
    InvalidArgumentError,
    RecompileError,
    StanceError,
)
from ember.introspection import explain, last_artifacts
from ember.progress import install as _install_progress
from ember.tracing import start_from_environment as _trace_from_environment
from ember.tracing import trace
from guards import (
    keep_portable_guards_unsafe,
    keep_tensor_guards_unsafe,
    mark_dynamic,
    mark_static,
    maybe_mark_dynamic,
    set_logs,
    skip_all_guards_unsafe,
    skip_guard_on_all_nn_modules_unsafe,
    skip_guard_on_globals_unsafe,
    skip_guard_on_inbuilt_nn_modules_unsafe,
)

__version__ = "0.1.0"

_trace_from_environment()  # EMBER_TRACE_DIR: trace the whole process
_install_progress()  # a progress line for long compiles, on a terminal


def is_dynamo_compiling() -> bool:
    """Same as `is_compiling()`; the name torch code checks. Stable API."""
    return is_compiling()


__all__ = [
    "BackendNotFoundError",
    "CaptureError",
    "CaptureUnavailableError",
    "EagerFallbackWarning",
    "EmberError",
    "InvalidArgumentError",
    "OptimizedModule",
    "RecompileError",
    "StanceError",
    "allow_in_graph",
    "assume_constant_result",
    "compile",
    "disable",
    "disallow_in_graph",
    "explain",
    "is_compiling",
    "is_dynamo_compiling",
    "is_exporting",
    "keep_portable_guards_unsafe",
    "keep_tensor_guards_unsafe",
    "last_artifacts",
    "list_backends",
    "mark_dynamic",
    "mark_static",
    "maybe_mark_dynamic",
    "nonstrict_trace",
    "register_backend",
    "reset",
    "set_logs",
    "set_stance",
    "skip_all_guards_unsafe",
    "skip_guard_on_all_nn_modules_unsafe",
    "skip_guard_on_globals_unsafe",
    "skip_guard_on_inbuilt_nn_modules_unsafe",
    "substitute_in_graph",
    "trace",
]
