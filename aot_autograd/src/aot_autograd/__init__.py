"""aot_autograd: joint forward/backward ATen graphs, functionalization and partitioning.

Stable API: everything in `__all__`.

    >>> from aot_autograd import aot_function
    >>> f = aot_function(lambda x: x.sin().cos(), fw_compiler=lambda gm, example_inputs: gm)
    >>> f(torch.randn(3, requires_grad=True)).sum().backward()
"""

from aot_autograd.api import (
    SUPPORTS_DYNAMIC_SHAPES,
    AotCallable,
    AotConfig,
    AotModule,
    aot_function,
    aot_graph,
    aot_module,
)
from aot_autograd.checks import checks_enabled, checks_on, verify_functional_graph
from aot_autograd.errors import (
    AotAutogradError,
    DeviceMismatchError,
    DoubleBackwardError,
    EagerCallWarning,
    IndexValueCheckError,
    OverlappingWriteError,
    RestridedLeafError,
    SymbolicShapeError,
    UnsupportedMutationError,
    ValueChangedError,
    ValueCheckError,
    ValueValueCheckError,
)
from aot_autograd.partitioners import (
    RECOMPUTABLE_OPS,
    default_partition,
    is_recomputable,
    min_cut_rematerialization_partition,
    saved_bytes,
)
from aot_autograd.program import (
    INPUT_MUTATIONS,
    INPUTS_WRITTEN_IN_PLACE,
    USER_VISIBLE_OUTPUTS,
    OutputSpec,
    TracedProgram,
    trace_program,
)
from aot_autograd.symbolic import ShapeAssumptions, SymbolSource
from aot_autograd.tracer import AtenTracer, GraphRecorder
from aot_autograd.value_assertions import ValueAssertion

__version__ = "0.1.0"

__all__ = [
    "INPUTS_WRITTEN_IN_PLACE",
    "INPUT_MUTATIONS",
    "USER_VISIBLE_OUTPUTS",
    "AotAutogradError",
    "AotCallable",
    "AotConfig",
    "AotModule",
    "AtenTracer",
    "DeviceMismatchError",
    "DoubleBackwardError",
    "EagerCallWarning",
    "OverlappingWriteError",
    "RestridedLeafError",
    "GraphRecorder",
    "IndexValueCheckError",
    "OutputSpec",
    "RECOMPUTABLE_OPS",
    "SUPPORTS_DYNAMIC_SHAPES",
    "ShapeAssumptions",
    "SymbolSource",
    "SymbolicShapeError",
    "TracedProgram",
    "UnsupportedMutationError",
    "ValueAssertion",
    "ValueChangedError",
    "ValueCheckError",
    "ValueValueCheckError",
    "aot_function",
    "checks_enabled",
    "checks_on",
    "verify_functional_graph",
    "aot_graph",
    "aot_module",
    "default_partition",
    "is_recomputable",
    "min_cut_rematerialization_partition",
    "saved_bytes",
    "trace_program",
]
