"""guards: fake values, sources, guard sets and symbolic shapes for Ember.

Stable API: everything in `__all__`.
"""

from guards.automatic_dynamic import SizeHistory
from guards.deepcopy_contents import DeepcopyContentsGuard, UncopiableContents, contents_snapshot
from guards.errors import (
    DataDependentError,
    FakeTensorError,
    GuardsError,
    SourceError,
    UnsupportedOpError,
)
from guards.fake_converter import FakeTensorConverter
from guards.fake_rules import DATA_DEPENDENT_OPS, FAKE_RULES, register_fake_rule
from guards.fake_tensor import FakeTensor, FakeTensorMode, fake_mode_of, is_fake
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
from guards.global_state import GlobalStateGuard
from guards.guard_kinds import (
    AttributeIdGuard,
    DictKeysGuard,
    EqualsGuard,
    Guard,
    HasAttrGuard,
    IdGuard,
    LengthGuard,
    MappingItemGuard,
    ModuleStructureGuard,
    NameAbsentGuard,
    NNModuleGuard,
    NotInInstanceDictGuard,
    SetItemsGuard,
    SubclassLayoutGuard,
    TypeGuard,
)
from guards.guard_set import CompiledGuards, GuardSet
from guards.logs import ARTIFACTS, artifact_enabled, artifact_logger, set_logs
from guards.marks import (
    DimensionMarks,
    DynamicRange,
    mark_dynamic,
    mark_static,
    marks_of,
    maybe_mark_dynamic,
)
from guards.shape_env import (
    ConstraintViolationError,
    ShapeEnv,
    ShapeEnvError,
    ShapeRecord,
    SymbolBinding,
    TensorPropertySource,
)
from guards.size_graph import (
    SIZE_RULES,
    SizeExpressionError,
    integer_quotient,
    integer_size_to_graph,
    size_to_graph,
)
from guards.sources import (
    AttrSource,
    CellContentsSource,
    ClosureSource,
    DefaultArgSource,
    GlobalSource,
    GlobalStateSource,
    HasAttrSource,
    HeldObjectSource,
    ItemSource,
    LocalSource,
    ModuleGlobalSource,
    ModuleSource,
    NNModuleSource,
    ParamBufferSource,
    Source,
    TypeSource,
    is_builtin_module_class,
)
from guards.stable_reads import use_stable_reads
from guards.sym_exprs import FloorDiv, ValueRange
from guards.sym_node import SymNode
from guards.symbolic_guards import ShapeCheck, ShapeGuard
from guards.tensor_guards import NoTensorAliasingGuard, TensorMatchGuard

__version__ = "0.1.0"

__all__ = [
    # errors
    "DataDependentError",
    "FakeTensorError",
    "GuardsError",
    "SourceError",
    "UncopiableContents",
    "UnsupportedOpError",
    # fake tensors
    "DATA_DEPENDENT_OPS",
    "FAKE_RULES",
    "FakeTensor",
    "FakeTensorConverter",
    "FakeTensorMode",
    "fake_mode_of",
    "is_fake",
    "register_fake_rule",
    # sources
    "AttrSource",
    "CellContentsSource",
    "ClosureSource",
    "DefaultArgSource",
    "GlobalSource",
    "GlobalStateSource",
    "HasAttrSource",
    "HeldObjectSource",
    "ItemSource",
    "LocalSource",
    "ModuleGlobalSource",
    "ModuleSource",
    "NNModuleSource",
    "ParamBufferSource",
    "Source",
    "TypeSource",
    "is_builtin_module_class",
    # guards
    "AttributeIdGuard",
    "CompiledGuards",
    "DeepcopyContentsGuard",
    "DictKeysGuard",
    "SetItemsGuard",
    "SubclassLayoutGuard",
    "EqualsGuard",
    "GlobalStateGuard",
    "Guard",
    "GuardSet",
    "HasAttrGuard",
    "IdGuard",
    "LengthGuard",
    "MappingItemGuard",
    "ModuleStructureGuard",
    "NNModuleGuard",
    "NameAbsentGuard",
    "NoTensorAliasingGuard",
    "NotInInstanceDictGuard",
    "TensorMatchGuard",
    "TypeGuard",
    "contents_snapshot",
    # logs, marks, filters
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
    # symbolic shapes
    "SIZE_RULES",
    "SizeExpressionError",
    "integer_quotient",
    "integer_size_to_graph",
    "size_to_graph",
    "FloorDiv",
    "ShapeCheck",
    "ShapeEnv",
    "ConstraintViolationError",
    "ShapeEnvError",
    "ShapeGuard",
    "ShapeRecord",
    "SizeHistory",
    "SymNode",
    "SymbolBinding",
    "TensorPropertySource",
    "ValueRange",
    "use_stable_reads",
]
