"""guards: fake values, sources, guard sets and symbolic shapes for Ember.

Stable API: everything in `__all__`.
"""

from guards.filters import (
    GuardFilterEntry,
    GuardFilterError,
    apply_guard_filter,
    keep_portable_guards_unsafe,
    keep_tensor_guards_unsafe,
    skip_all_guards_unsafe,
    skip_guard_on_all_nn_modules_unsafe,
    skip_guard_on_globals_unsafe,
    skip_guard_on_inbuilt_nn_modules_unsafe,
)
from guards.logs import ARTIFACTS, artifact_enabled, artifact_logger, set_logs
from guards.marks import (
    DimensionMarks,
    DynamicRange,
    mark_dynamic,
    mark_static,
    marks_of,
    maybe_mark_dynamic,
)

__version__ = "0.1.0"

__all__ = [
    "ARTIFACTS",
    "artifact_enabled",
    "artifact_logger",
    "set_logs",
    "DimensionMarks",
    "DynamicRange",
    "GuardFilterEntry",
    "GuardFilterError",
    "apply_guard_filter",
    "keep_portable_guards_unsafe",
    "keep_tensor_guards_unsafe",
    "mark_dynamic",
    "mark_static",
    "marks_of",
    "maybe_mark_dynamic",
    "skip_all_guards_unsafe",
    "skip_guard_on_all_nn_modules_unsafe",
    "skip_guard_on_globals_unsafe",
    "skip_guard_on_inbuilt_nn_modules_unsafe",
]
