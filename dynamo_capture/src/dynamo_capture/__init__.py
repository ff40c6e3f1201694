"""dynamo_capture: bytecode capture of Python functions and modules into FX graphs.

Stable API: everything in `__all__`.
"""

from dynamo_capture.errors import (
    BackendCompilerFailed,
    CaptureError,
    CaptureUnavailableError,
    RecompileError,
    StanceError,
    Unsupported,
    UserLocation,
)
from dynamo_capture.explain import ExplainOutput, GraphBreak, explain
from dynamo_capture.fallbacks import EagerFallback, EagerFallbackWarning
from dynamo_capture.optimize import CompiledCallable, optimize, reset
from dynamo_capture.registry import (
    Substitute,
    allow_in_graph,
    assume_constant_result,
    disable,
    disabled_reason,
    disallow_in_graph,
    eager_only_depth,
    is_allowed_in_graph,
    is_constant_result,
    is_nonstrict_traced,
    nonstrict_trace,
    substitute_for,
    substitute_in_graph,
)
from dynamo_capture.stance import STANCES, Stance, current_stance, set_stance
from dynamo_capture.state import capturing, is_compiling, is_exporting

__version__ = "0.1.0"

__all__ = [
    "STANCES",
    "BackendCompilerFailed",
    "CaptureError",
    "CaptureUnavailableError",
    "CompiledCallable",
    "EagerFallback",
    "EagerFallbackWarning",
    "ExplainOutput",
    "GraphBreak",
    "RecompileError",
    "Stance",
    "StanceError",
    "Substitute",
    "allow_in_graph",
    "assume_constant_result",
    "capturing",
    "current_stance",
    "disable",
    "disallow_in_graph",
    "disabled_reason",
    "eager_only_depth",
    "explain",
    "is_allowed_in_graph",
    "is_compiling",
    "is_constant_result",
    "is_exporting",
    "is_nonstrict_traced",
    "nonstrict_trace",
    "optimize",
    "reset",
    "set_stance",
    "substitute_for",
    "substitute_in_graph",
    "Unsupported",
    "UserLocation",
]
