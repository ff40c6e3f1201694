"""The graph being captured: inputs, nodes, guards, and how real objects become values.

`CaptureContext` owns one `torch.fx.Graph`. Real objects reached from the frame
(arguments, globals, attributes, closure cells) enter through `wrap(obj, source)`,
which records the guard that keeps the capture valid. Tensor operations enter
through `call(kind, target, args, kwargs)`, which runs the operation on example
tensors to learn its result's metadata and adds a node.

Example tensors are guards FakeTensors of the inputs (or, with USE_FAKES off,
detached clones): capture reads only their metadata (dtype, shape, strides,
device), never their data; any tensor data that would flow into Python raises
Unsupported.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import math
import operator
import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.fx
from torch.nn.modules.lazy import LazyModuleMixin

from dynamo_capture import side_effects
from dynamo_capture.errors import Unsupported
from dynamo_capture.frame_guards import FrameGuards
from dynamo_capture.graph_printouts import (
    CaptureGraph,
    TorchStyleCodeGen,
    graph_input_name,
    read_on_load,
    torch_source_name,
)
from dynamo_capture.lazy_iterators import ReversedMappingIterator
from dynamo_capture.resume import STACK_LOCAL
from dynamo_capture.scalar_subclasses import constant_scalar, guarded_by_value, plain_value
from dynamo_capture.sources import (
    ArraySizesSource,
    AttrSource,
    CellContentsSource,
    FloatTensorSource,
    GlobalSource,
    ItemSource,
    IteratorStateSource,
    LocalSource,
    ModuleGlobalSource,
    ModuleSource,
    NNModuleSource,
    NumpyTensorSource,
    ParamBufferSource,
    PlainTensorSource,
    Source,
    is_builtin_module_class,
)
from dynamo_capture.sym_numbers import SymNumbers, is_symbolic_number
from dynamo_capture.symbolic_indexing import symbolic_indexing_target
from dynamo_capture.torch_function_dispatch import has_own_torch_function
from dynamo_capture.values import (
    CONSTANT_TYPES,
    BuiltinMethodValue,
    DictValue,
    IteratorValue,
    ListValue,
    MethodValue,
    PythonValue,
    SetValue,
    TensorValue,
    TupleValue,
    Value,
)
from guards import (
    ConstraintViolationError,
    DataDependentError,
    FakeTensorMode,
    ShapeEnv,
    SizeHistory,
    SymNode,
    TensorPropertySource,
    marks_of,
)
from guards.tensor_subclasses import (
    has_own_torch_dispatch,
    is_traceable_subclass,
    layout_or_none,
)

__all__ = [
    "HANDED_ITERATORS",
    "RECURRENT_MODULES",
    "TRUSTED_MODULES",
    "CaptureContext",
    "is_constant",
    "is_graph_callable",
    "recurrent_module_break",
]

# Modules whose attributes capture treats as fixed: reading them records no guard.
TRUSTED_MODULES = (
    "torch",
    "math",
    "operator",
    "functools",
    "itertools",
    "collections",
    "builtins",
    "typing",
    "dataclasses",
    "inspect",
    "numbers",
    "enum",
    "abc",
    "types",
    "warnings",
    "dynamo_capture",
)

# Capture computes on guards FakeTensors (metadata only); False: on detached clones.
USE_FAKES = True

# Factories that read a Python number's value (a symbolic float would be guarded by
# float equality): its sizes are specialized first (sym_numbers.specialize).
NUMBER_READING_FUNCTIONS = {torch.tensor, torch.as_tensor, torch.scalar_tensor}

# Ops whose output shape depends on tensor data (repeat_interleave: see
# `_shape_from_data`, only with tensor repeats).
DATA_DEPENDENT_SHAPE_OPS = {
    "nonzero",
    "masked_select",
    "unique",
    "unique_consecutive",
    "argwhere",
    "bincount",
    "repeat_interleave",
}


def is_constant(obj: Any) -> bool:
    """Whether `obj` is an immutable constant capture may fold (recursively for tuples)."""
    if type(obj) in CONSTANT_TYPES or isinstance(obj, torch.dtype | torch.device | enum.Enum):
        return True
    if isinstance(obj, tuple | frozenset):
        return all(is_constant(item) for item in obj)
    return False


_RANGE_ITERATOR = type(iter(range(0)))
_LIST_ITERATOR = type(iter([]))
# the iterators a part resuming inside loops is handed (made again by the part before)
HANDED_ITERATORS = (type(iter(())), _RANGE_ITERATOR, _LIST_ITERATOR)


def _running_frames() -> list[tuple[str, int, str]]:
    """(file, line, function) of each frame capture is running, outermost first."""
    from dynamo_capture.interpreter import RUNNING

    if not RUNNING:
        return []
    return [(where.filename, where.line, where.function) for where in RUNNING[-1].where()]


def running_user_line() -> str:
    """The user's line capture is running, as torch.compile's recompile reasons name it
    (`if n > 4:  # file.py:12 in f`): the innermost frame outside torch, or "" when none
    runs."""
    from dynamo_capture.interpreter import RUNNING

    torch_folder = os.path.dirname(torch.__file__)
    for translator in reversed(RUNNING):
        where = translator.location()
        if not where.filename.startswith(torch_folder):
            text = f"{where.text}  # " if where.text else ""
            return f"{text}{where.filename}:{where.line} in {where.function}"
    return ""


class HandedSteps:
    """The `produce` of a loop's iterator handed on to a part resuming inside the loop:
    read, and guarded on its state, when the part first reads it (`real`), as
    torch.compile guards a resume function's stack value where it is used (read, or
    handed on to the next part); a part that drops it unread (a `return` inside the
    loop) keeps no guard on it."""

    def __init__(self, make: Callable[[], IteratorValue], source: Source) -> None:
        self.make = make
        self.source = source
        self.real: IteratorValue | None = None

    def __call__(self, reader: Any) -> Value | None:
        from dynamo_capture.lazy_iterators import next_item

        if self.real is None:
            self.real = self.make()
        return next_item(reader, self.real)


def _handed_on_stack(source: Source) -> bool:
    """Whether `source` is a value a part's prologue pushes from `___stack` (only
    generated code reads that local: no user code holds what it holds)."""
    return (
        isinstance(source, ItemSource)
        and isinstance(source.source, LocalSource)
        and source.source.local_name == STACK_LOCAL
    )


# ndarray inputs capture takes as tensors (numpy_arrays); others stay Python objects
_NUMPY_INPUT_DTYPES = frozenset(
    np.dtype(t)
    for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
              np.uint8, np.bool_, np.complex64, np.complex128)
)  # fmt: skip


def _is_argument_source(source: Source) -> bool:
    """Whether `source` is a local of the frame or read from one: an item (`L['t'][0]`),
    an attribute of an object that is not an nn.Module (`L['cfg'].n`, as torch.compile
    keeps a module's attributes static), a closure cell of a function argument, an item
    of a handed-on iterator."""
    while isinstance(source, ItemSource | AttrSource | CellContentsSource | IteratorStateSource):
        source = source.base
    return isinstance(source, LocalSource)


def _item_source(source: Source, obj: tuple, index: int) -> Source:
    """The source of item `index` of tuple `obj` at `source`: a namedtuple's by field name
    (as `pair.count` reads it), a tuple's by index."""
    fields = getattr(type(obj), "_fields", None)
    return AttrSource(source, fields[index]) if fields else ItemSource(source, index)


def _is_float_input_source(source: Source) -> bool:
    """An argument source (`_is_argument_source`), an attribute of an nn.Module argument
    at any depth (`L['self'].scale`, `L['self']._modules['block'].eps`), a global or what
    is read from one (`G['SCALE']`, `G['config'].eps`): torch.compile specializes a
    module's int attributes and global ints but not floats (`specialize_float=False`),
    which follow automatic dynamic wherever they are read from."""
    while isinstance(source, ItemSource | AttrSource | CellContentsSource | IteratorStateSource):
        source = source.base
        while isinstance(source, ModuleSource | NNModuleSource):
            source = source.base
    return isinstance(source, LocalSource | GlobalSource | ModuleGlobalSource)


def _holds_enum(obj: Any) -> bool:
    if isinstance(obj, enum.Enum):
        return True
    return isinstance(obj, tuple | frozenset) and any(_holds_enum(item) for item in obj)


def _to_fake(mode: FakeTensorMode, example: torch.Tensor) -> torch.Tensor:
    """The fake value recorded as node.meta["val"] (a guards FakeTensor: real device kept)."""
    try:
        return mode.from_real(example)
    except Exception:  # noqa: BLE001 - an exotic tensor: fall back to a bare meta tensor
        return torch.empty_strided(
            example.shape, example.stride(), dtype=example.dtype, device="meta"
        )


def _map(value: Any, fn: Callable[[Value], Any]) -> Any:
    """Map the Values inside nested Python containers."""
    if isinstance(value, Value):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(_map(item, fn) for item in value)
    if isinstance(value, list):
        return [_map(item, fn) for item in value]
    if isinstance(value, dict):
        return {key: _map(item, fn) for key, item in value.items()}
    if isinstance(value, slice):
        return slice(_map(value.start, fn), _map(value.stop, fn), _map(value.step, fn))
    return value


_SYMBOLIC_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _same_sizes(now: Any, read: Any) -> bool:
    """Whether a tensor's shape `now` is still the shape `read` earlier (an in-place
    `unsqueeze_` between changes it): compared by expression, which guards nothing."""
    if len(now) != len(read):
        return False
    for a, b in zip(now, read, strict=True):
        if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
            if a.node.expr != b.node.expr:
                return False
        elif isinstance(a, torch.SymInt) or isinstance(b, torch.SymInt) or a != b:
            return False
    return True


def has_symbolic(value: Any, _seen: set[int] | None = None) -> bool:
    """Whether a SymInt/SymFloat/SymBool hides in nested containers (each container
    looked into once: a list may hold itself)."""
    if isinstance(value, _SYMBOLIC_TYPES):
        return True
    if isinstance(value, slice):
        # NOTE: its parts directly, never a tuple made here: a temporary's id, once freed,
        # may be the next temporary's, which `seen` would then skip
        return any(has_symbolic(part, _seen) for part in (value.start, value.stop, value.step))
    if not isinstance(value, list | tuple | torch.Size | dict):
        return False
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return False
    seen.add(id(value))
    items = value.values() if isinstance(value, dict) else value
    return any(has_symbolic(item, seen) for item in items)


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, list | tuple):
        return any(_has_tensor(item) for item in value)
    if isinstance(value, dict):
        return any(_has_tensor(item) for item in value.values())
    return False


# modules torch.compile refuses to trace (its `allow_rnn` option, off by default)
RECURRENT_MODULES = (torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM)


def recurrent_module_break(module: torch.nn.Module) -> Unsupported:
    """The break where captured code reads an RNN, GRU or LSTM module: it runs eagerly.

    NOTE: torch.compile stops where it reads such a module and cannot resume there: the
    frame is compiled up to the last statement before it (where the graph so far has
    more than one call) and the rest runs eagerly, or the whole frame runs eagerly. Read
    by an inlined function, the break is that function's call, as for any other break
    (the interpreter clears `rest_from_checkpoint` there)."""
    error = Unsupported(f"{type(module).__name__} modules are not traced (they run eagerly)")
    error.rest_from_checkpoint = True
    return error


class CaptureContext:
    """Everything one capture builds: the graph, its inputs and the guards."""

    def __init__(
        self,
        frame_globals: dict[str, Any],
        *,
        dynamic: bool | None = False,
        history: SizeHistory | None = None,
        specialize_floats: bool = False,
        float_inputs: bool = True,
    ) -> None:
        self.graph = CaptureGraph(_running_frames)
        self.graph.set_codegen(TorchStyleCodeGen())
        self.guards = FrameGuards()
        self.open_autocasts: list[Any] = []  # real autocast states entered while capturing
        self.open_inference_modes: list[Any] = []  # real inference modes entered likewise
        # DisableTorchFunction(Subclass) blocks open in the frame: torch functions inside
        # them skip every __torch_function__ override and give plain tensors
        self.torch_function_disabled = 0
        # of those, DisableTorchFunction blocks (they turn torch function modes off too)
        self.torch_function_all_disabled = 0
        # torch function modes entered in the frame, innermost last (their values): the
        # calls inside their blocks are handed to them (torch_function_dispatch)
        self.function_modes: list[Value] = []
        # a torch state setter (state_setters.STATE_SETTERS) recorded in the graph: the
        # state it sets is not set while capturing, so it cannot be read any more
        self.state_set_in_graph = False
        # the code asked whether it is being compiled (`torch.compiler.is_compiling()`):
        # it does something else when run eagerly, so a capture of it without operations
        # is still kept (see CompiledCallable._skips_code)
        self.read_compiling_state = False
        # the default dtype the frame was entered with (guarded); torch.set_default_dtype
        # in the frame changes it now and in the graph (state_setters)
        self.entry_default_dtype = torch.get_default_dtype()
        # likewise the deterministic mode (and its warn_only flag)
        self.entry_deterministic = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        )
        self.dynamic = dynamic
        self.history = history
        # the sizes of tensor inputs marked with mark_dynamic (check_marked_dynamic)
        self._marked_dynamic: list[TensorPropertySource] = []
        # tensors' symbolic shapes read whole (`x.shape`, `x.size()`), by id of the Size
        # read: the Size, its tensor, and the `size()` node made once it is passed whole
        self._size_reads: dict[int, list[Any]] = {}
        # float inputs that change between calls become symbolic (else constants)
        self.float_inputs = float_inputs and not specialize_floats
        # torch.func transforms and torch.cond as graph nodes (function_transforms)
        self.transform_nodes = True
        # torch.func.vmap traced into the graph as functorch's batching calls around its
        # function (functorch_inline): a backend tracing ATen through a dispatch mode
        # (aot_autograd) takes these even where it takes no transform node
        self.batching_nodes = True
        self.batching_nodes_made = 0
        # nn.Module arguments guarded on structure (class, what capture read) instead of
        # identity: one graph serves every module of a class (FrameTarget)
        self.modules_by_structure = False
        # locals the compiled target binds itself (its module's `self`): their modules
        # stay guarded by identity under modules_by_structure (FrameTarget.bound_locals)
        self.bound_locals: frozenset[str] = frozenset()
        self.transform_nodes_made = 0
        # Fn.apply of autograd Functions as graph nodes (autograd_functions), and how many
        self.autograd_function_nodes = True
        self.autograd_function_nodes_made = 0
        # Tensor.register_hook on tensors the frame computed as graph nodes (tensor_hooks)
        self.tensor_hook_nodes = True
        # Tensor.register_hook on the frame's tensor inputs: (tensor, hook), registered on
        # the caller's tensors after the graph, in order (tensor_hooks.register_input_hook)
        self.input_hooks: list[tuple[Any, Any]] = []
        # nested_compile_region functions traced in place (by code), and the region
        # nodes made per function's code (control_flow)
        self.inline_regions: frozenset[Any] = frozenset()
        self.region_nodes: dict[Any, int] = {}
        # assume_constant_result functions called: their results are constants, unguarded
        self.unguarded_constants: list[str] = []
        # min/max of tensors the graph computes, given as the picked tensor's value:
        # (the graph node, the items), checked for aliasing when the graph ends
        self.tensor_extremes: list[tuple[torch.fx.Node, list[Any]]] = []
        # classes type(name, bases, namespace) made while capturing (made once, not per call)
        self.classes_made: list[type] = []
        self.functorch_level = 0  # torch.func transforms traced into the graph, open now
        self.jvp_nesting = 0  # of them, torch.func.jvp calls (only the outermost is traced)
        # torch.func.functional_call's members, open now: (id(module), name) -> Value, and
        # the ids of the tensors they replace (functional_calls)
        self.replaced_members: dict[tuple[int, str], Value] = {}
        self.replaced_tensors: set[int] = set()
        # NOTE: as torch.compile, sizes made symbolic because they changed (automatic
        # dynamic) or were marked get a symbol each; only dynamic=True gives equal
        # sizes one symbol (duck sizing)
        # torch.compile's names for inputs read through a module driver (graph_printouts)
        self.renamed_inputs: dict[Source, str] = {}
        renamed = self.renamed_inputs  # NOTE: not `self`: the shape env outlives capture
        # size symbols numbered as torch.compile numbers them (`s77` for L['x'].size()[0])
        self.shape_env = (
            None
            if dynamic is False
            else ShapeEnv(
                duck_shape=dynamic is True,
                symbol_source_name=lambda source: torch_source_name(source, renamed),
            )
        )
        if self.shape_env is not None:
            self.shape_env.user_location = running_user_line
        self.fake_mode = FakeTensorMode(shape_env=self.shape_env)
        self.use_fakes = USE_FAKES
        self.frame_globals = frame_globals
        # the frame's real locals (what guards read as L), where capture_frame knows them
        self.frame_locals: dict[str, Any] | None = None
        # the captured calls of blocks, replayed for identical blocks (region_reuse)
        self.region_templates: dict[type, list[Any]] = {}
        self.inputs: list[tuple[Source, torch.Tensor, TensorValue]] = []
        self._by_id: dict[int, TensorValue] = {}
        self._handed: dict[Source, IteratorValue] = {}  # loops' iterators handed on
        # the same, by the identity of the real iterator: a local holding it too
        # (`it = iter(xs); for t in it:`) reads the same value
        self._handed_objects: dict[int, tuple[Any, IteratorValue, Source]] = {}
        # the containers a slice of a Sequential or ModuleList made (`seq[1:3]`), by
        # identity: their submodules are the values read from the sliced container
        self.sliced_modules: dict[int, tuple[torch.nn.Module, list[Value]]] = {}
        # what is read ahead of eager's order, side effects refused (lazy_iterators.drain)
        self.reading_ahead: str | None = None
        # the generators made in the frame, stepped as they are read (lazy_iterators)
        self.generators: list[Any] = []
        # attribute writes to objects that exist outside the frame, replayed after the graph
        self.attr_writes: dict[tuple[int, str], tuple[Any, Source | None, Value]] = {}
        # those of them made by object.__setattr__: replayed the same way, past __setattr__
        self.raw_attr_writes: set[tuple[int, str]] = set()
        # ids of outside objects whose live __dict__ the frame read: a later attribute write
        # or delete on one breaks (the dict read would not see it until the replay)
        self.dicts_read: set[int] = set()
        # id(real closure cell) -> (the cell, its value): one value per real cell
        self.real_cell_values: dict[int, tuple[Any, Any]] = {}
        # outside lists/dicts written to: id -> (object, source, shadow Value)  (side_effects)
        self.shadows: dict[int, tuple[Any, Source | None, Value]] = {}
        # global assignments: (id(globals), name) -> (globals dict, Value), replayed in order
        self.global_writes: dict[tuple[int, str], tuple[dict[str, Any], Value]] = {}
        # reads that found one of those writes (region_reuse: a call reading none may
        # be replayed)
        self.written_reads = 0
        self._names: set[str] = set()
        # placeholders torch would have wrapped before an operation used them (module
        # parameters and buffers where read, arguments where inspected: `y is None`,
        # `x.shape`), with the number of call nodes then and the order of those events;
        # nodes named after the local they went to
        self.realized: dict[torch.fx.Node, tuple[int, int]] = {}
        self.named_nodes: dict[torch.fx.Node, str] = {}
        self._symbol_nodes: dict[Any, torch.fx.Node] = {}
        self._size_inputs: dict[torch.fx.Node, tuple[str, int]] = {}
        # numbers read from the inputs as SymInt / SymFloat, by source (wrapped once)
        self._numbers: dict[Source, Value] = {}
        # outside objects guarded on their class only (modules by structure, user
        # objects): id -> (the object, the sources it was read at), for the aliasing
        # guards of a frame that writes one of them (guard_written_objects_apart)
        self._by_type: dict[int, tuple[Any, list[Source]]] = {}
        # ndarray arguments by identity: the same array at two places is one input
        self._arrays_by_id: dict[int, tuple[Source, Value]] = {}
        self._number_inputs: dict[torch.fx.Node, tuple[Source, torch.Tensor]] = {}
        self._converted_inputs: dict[torch.fx.Node, tuple[Source, torch.Tensor]] = {}
        # SymFloat / SymBool arithmetic run while capturing, emitted as nodes where used
        self.sym_numbers = SymNumbers(
            self.graph, self.shape_env, self._symbol_node, specialize_floats=specialize_floats
        )

    # ----- inputs -------------------------------------------------------
    def module_by_structure(self, source: Source) -> bool:
        """Whether a module read at `source` is guarded on its structure (class and what
        capture read of it), not its identity: under modules_by_structure, unless it is
        reached from a local the compiled target binds itself (its root module)."""
        if not self.modules_by_structure:
            return False
        root = source.root()
        if not (isinstance(root, LocalSource) and root.local_name in self.bound_locals):
            return True
        # NOTE: below the target's own object (its module's submodules, a bound method's
        # object's modules) as torch.compile's inline_inbuilt_nn_modules: a submodule
        # replaced by one of the same class and structure reuses the entry; the root
        # itself, bound by the target, keeps its identity guard and its module tree,
        # which holds the submodules by their structure guards (guards' module_tree.py)
        while isinstance(source, NNModuleSource):
            source = source.source
        return source != root

    def _below_bound_local(self, source: Source) -> bool:
        """Whether `source` is read through a local the compiled target binds itself."""
        root = source.root()
        return isinstance(root, LocalSource) and root.local_name in self.bound_locals

    def wrap(self, obj: Any, source: Source | None) -> Value:
        """A value for real object `obj` found at `source`, guarded on what it is."""
        if isinstance(obj, RECURRENT_MODULES):
            raise recurrent_module_break(obj)
        if isinstance(obj, torch.nn.Module) and source is not None:
            if not isinstance(source, ModuleSource | NNModuleSource):
                source = NNModuleSource(source, is_builtin_module_class(type(obj)))
        if isinstance(obj, np.ndarray | np.generic) and source is not None:
            if obj.dtype in _NUMPY_INPUT_DTYPES:
                return self._ndarray_input(obj, source)
        if isinstance(obj, torch.Tensor):
            if source is None:
                raise Unsupported(
                    "a tensor reached capture without a known source (a tensor constant "
                    "built outside the frame); pass it as an argument"
                )
            if id(obj) in self.replaced_tensors and not isinstance(source, ParamBufferSource):
                # NOTE: a module attribute functional_call does not replace (another name
                # of a tensor it replaces, with tie_weights=False) is the module's own
                raise Unsupported(
                    "a parameter or buffer torch.func.functional_call replaces, read other than "
                    "as the module's attribute (module.parameters(), _parameters, a list of them)"
                )
            return self.tensor_input(obj, source)
        if source is None:
            return PythonValue(obj)
        if type(obj) is ReversedMappingIterator:
            return self._handed_reversed_mapping(obj, source)
        if type(obj) in HANDED_ITERATORS:
            if _handed_on_stack(source):
                return self._handed_iterator(obj, source)
            handed = self._handed_objects.get(id(obj))
            if handed is not None and handed[0] is obj:
                # a local holding a loop's iterator handed on (the part before made one
                # object for both): the same value, while they are the same object
                self.guards.alias(source, handed[2])
                return handed[1]
        guards = self.guards
        if source in self._numbers:
            return self._numbers[source]
        symbolic = self._symbolic_int(obj, source)
        if symbolic is None:
            symbolic = self._symbolic_float(obj, source)
        if symbolic is not None:
            guards.type_match(source, obj)
            self._numbers[source] = PythonValue(symbolic, source)
            return self._numbers[source]
        if self._numbers_changed(obj, source):
            # a tuple of numbers that changed since an earlier compile: its items are
            # wrapped one by one, so that those which changed become symbolic
            guards.type_match(source, obj)
            guards.length_check(source, obj)
            items = [self.wrap(item, _item_source(source, obj, i)) for i, item in enumerate(obj)]
            return TupleValue(items, cls=type(obj), source=source)
        if guarded_by_value(obj):
            guards.type_match(source, obj)  # an int subclass instance: folded on its value
            guards.equals_match(AttrSource(source, "real"), obj.real)
        elif _holds_enum(obj):
            guards.id_match(source, obj)  # enum members are singletons: guard identity
        elif type(obj) in (slice, range):
            # a slice handed on below a cut (`x[:, : int(n)]`): unhashable, guarded by
            # parts; a range (kept across a break) by its bounds too, as `range(0) ==
            # range(2, 2)` compares the items, not the bounds its attributes show
            parts = {part: getattr(obj, part) for part in ("start", "stop", "step")}
            kept = [value for value in parts.values() if not is_constant(value)]
            if kept:  # `slice(t0, t1)` of 0-d tensors: bounds read only when it runs
                raise Unsupported(
                    f"a {type(obj).__name__} of {type(kept[0]).__name__} bounds handed on "
                    "(its bounds are known only when it runs)"
                )
            guards.type_match(source, obj)
            for part, value in parts.items():
                if isinstance(value, enum.Enum):  # an IntEnum bound: a singleton
                    guards.id_match(AttrSource(source, part), value)
                else:
                    guards.equals_match(AttrSource(source, part), value)
        elif is_constant(obj) or isinstance(obj, torch.Size):
            guards.equals_match(source, obj)
        elif type(obj) is tuple and obj and all(isinstance(item, type) for item in obj):
            # classes (`except ERRORS:`, `isinstance(v, KINDS)`): read whole, folded on
            # which classes they are
            guards.length_check(source, obj)
            for index, item in enumerate(obj):
                guards.id_match(ItemSource(source, index), item)
        elif isinstance(obj, list | tuple):
            guards.length_check(source, obj)
        elif isinstance(obj, collections.deque):
            guards.length_check(source, obj)
            guards.equals_match(AttrSource(source, "maxlen"), obj.maxlen)
        elif isinstance(obj, dict):
            guards.dict_keys(source, obj)
        elif type(obj) in (set, frozenset):
            if any(isinstance(item, torch.Tensor) for item in obj):
                # NOTE: its guard would hold the tensors, and fail for every new one
                raise Unsupported("a set of tensors reaching captured code from outside it")
            guards.set_items(source, obj)  # `in`, iteration and set algebra fold on it
        elif isinstance(obj, set | frozenset):
            raise Unsupported(f"a {type(obj).__name__} (a set subclass) reaching captured code")
        elif isinstance(obj, types.FunctionType) and (
            obj.__closure__ or "<locals>" in obj.__qualname__
        ):
            # a closure, or any function made inside a function, is made afresh by each
            # call of its maker (a split frame's parts make it again each call): its
            # code decides what it does, and capture guards the cells and defaults it
            # reads where it reads them
            guards.id_match(AttrSource(source, "__code__"), obj.__code__)
            guards.id_match(AttrSource(source, "__globals__"), obj.__globals__)
        elif (
            isinstance(obj, torch.nn.Module)
            and self.module_by_structure(source)
            and not _uninitialized_lazy(obj)
        ):
            # NOTE: every read of the module's state is guarded where capture makes it
            # (attributes, training flag, hooks, `_modules` keys, parameters' metadata),
            # as for a module guarded on identity, whose state can change between calls
            # too; what identity alone fixed is its class. Identity comparisons (`is`,
            # `id()`) still guard identity (guard_identity).
            guards.structure_match(source, obj)
            self._note_by_type(obj, source)
        elif (
            isinstance(obj, types.MethodType)
            and isinstance(obj.__self__, torch.nn.Module)
            and self.module_by_structure(source)
        ):
            # a method bound to a module (a forward shadowed by its compiled frame): its
            # function by identity, its module by structure where capture reads it
            guards.type_match(source, obj)
            guards.id_match(AttrSource(source, "__func__"), obj.__func__)
        elif isinstance(obj, torch.nn.Module):
            guards.module_match(source, obj)
        elif _method_of_user_object(obj):
            # a method bound to a user object (`f = obj.f` handed to a resume part): made
            # afresh by each read, so guarded by its function and its object as any
            # object (its class, the attributes capture reads), not by its identity
            guards.type_match(source, obj)
            guards.id_match(AttrSource(source, "__func__"), obj.__func__)
            receiver = self.wrap(obj.__self__, AttrSource(source, "__self__"))
            return MethodValue(PythonValue(obj.__func__), receiver)
        elif _method_of_tensor(obj):
            # a tensor's method (`add = t.add`): the tensor an input, the method's name fixed
            guards.type_match(source, obj)
            guards.equals_match(AttrSource(source, "__name__"), obj.__name__)
            receiver = self.wrap(obj.__self__, AttrSource(source, "__self__"))
            return BuiltinMethodValue(receiver, obj.__name__)
        elif _is_identity_object(obj):
            guards.id_match(source, obj)
        else:
            guards.type_match(source, obj)
            self._note_by_type(obj, source)
        return PythonValue(obj, source)

    def _note_by_type(self, obj: Any, source: Source) -> None:
        known = self._by_type.get(id(obj))
        if known is None or known[0] is not obj:
            self._by_type[id(obj)] = (obj, [source])
        elif source not in known[1]:
            known[1].append(source)

    def _handed_iterator(self, iterator: Any, source: Source) -> IteratorValue:
        """A loop's iterator handed on, read and guarded when the part first reads it
        (HandedSteps); `_new_handed_iterator` reads it."""
        known = self._handed.get(source)
        if known is not None:
            return known
        kind = {_RANGE_ITERATOR: "range", _LIST_ITERATOR: "iter"}.get(type(iterator), "tuple")
        steps = HandedSteps(lambda: self._new_handed_iterator(iterator, source), source)
        value = self._handed[source] = IteratorValue([], kind=kind, produce=steps)
        self._handed_objects[id(iterator)] = (iterator, value, source)
        return value

    def _handed_reversed_mapping(self, iterator: Any, source: Source) -> IteratorValue:
        """reversed(a dict or its view) handed on to a part resuming inside its loop: read
        from its dict (guarded as any argument's keys), at its index and with the size
        the loop began with, guarded, so the part checks the dict's size at each step."""
        from dynamo_capture.lazy_iterators import MappingSteps

        known = self._handed.get(source)
        if known is not None:
            return known
        handed = self._handed_objects.get(id(iterator))
        if handed is not None and handed[0] is iterator:  # one object at two sources
            self.guards.alias(source, handed[2])
            return handed[1]
        self.guards.type_match(source, iterator)
        for member in ("kind", "index", "size"):
            self.guards.equals_match(AttrSource(source, member), getattr(iterator, member))
        if iterator._changed:
            raise Unsupported("a reversed() of a dict handed on after its size changed")
        mapping = self.wrap(iterator.mapping, AttrSource(source, "mapping"))
        # NOTE: the steps read the dict through this capture's shadows: a reader's `ctx`
        # is all they ask of it here
        steps = MappingSteps(
            types.SimpleNamespace(ctx=self),  # type: ignore[arg-type]
            mapping,
            iterator.kind,
            reverse=True,
            index=iterator.index,
            size=iterator.size,
        )
        value = self._handed[source] = IteratorValue([], kind="reversed_fixed", produce=steps)
        self._handed_objects[id(iterator)] = (iterator, value, source)
        return value

    def _new_handed_iterator(self, iterator: Any, source: Source) -> IteratorValue:
        """A loop's iterator handed on to a part resuming inside the loop, made again by
        the part before over the items it had not read (capture.OutputPlan).

        As torch.compile: a range iterator is guarded on exactly the range left, its
        items constants (a loop's index is never symbolic); a tuple iterator on its
        index and length, its items read from the tuple as any argument's items are
        (numbers follow automatic dynamic); a list iterator reads its list (the same
        object the frame may hold and change) from its index on, as eagerly. Its state
        is `__reduce__()`: (iter, (the range, tuple or list,), index), or (iter, ((),))
        once exhausted.
        """
        from dynamo_capture.lazy_iterators import list_iterator

        state_source = IteratorStateSource(source)
        state = iterator.__reduce__()
        self.guards.type_match(source, iterator)
        self.guards.length_check(state_source, state)
        items: list[Value] = []
        if len(state) == 3:
            sequence, sequence_source = state[1][0], ItemSource(ItemSource(state_source, 1), 0)
            self.guards.equals_match(ItemSource(state_source, 2), state[2])
            rest = range(state[2], len(sequence))
            if type(iterator) is _LIST_ITERATOR:
                listed = self.wrap(sequence, sequence_source)  # its length guarded
                value = list_iterator(listed)  # type: ignore[arg-type]
                value.produce.index = state[2]
                return value
            if type(iterator) is _RANGE_ITERATOR:
                for member in ("start", "stop", "step"):
                    attribute = AttrSource(sequence_source, member)
                    self.guards.equals_match(attribute, getattr(sequence, member))
                items = [PythonValue(sequence[i]) for i in rest]
            else:
                self.guards.length_check(sequence_source, sequence)
                items = [self.wrap(sequence[i], ItemSource(sequence_source, i)) for i in rest]
        kind = "range" if type(iterator) is _RANGE_ITERATOR else "tuple"
        return IteratorValue(items, source=source, kind=kind)

    def known_tensor(self, tensor: torch.Tensor) -> TensorValue | None:
        """The value of an input tensor capture has already seen, if any."""
        return self._by_id.get(id(tensor))

    def tensor_input(self, tensor: torch.Tensor, source: Source) -> TensorValue:
        known = self._by_id.get(id(tensor))
        if known is not None:
            if known.source is not None and known.source != source:
                self.guards.alias(source, known.source)
            return known
        try:
            return self._new_tensor_input(tensor, source)
        except Exception:
            # NOTE: capture fails on this input (a sparse, nested or quantized tensor):
            # the frame's eager entry is guarded on the kind of tensor, so that an input
            # capture can take is captured again
            self.guards.type_match(source, tensor)
            self.guards.id_match(AttrSource(source, "layout"), tensor.layout)  # a singleton
            for attribute in ("dtype", "is_nested"):
                self.guards.equals_match(AttrSource(source, attribute), getattr(tensor, attribute))
            raise

    def _new_tensor_input(self, tensor: torch.Tensor, source: Source) -> TensorValue:
        # NOTE: a subclass input keeps static sizes: its guard is built from the real
        # tensor, which knows its class (a fake stands for a Tensor or a Parameter)
        if self.shape_env is not None and type(tensor) in (torch.Tensor, torch.nn.Parameter):
            example = self.fake_mode.from_real(
                tensor, source, dynamic_dims=self._dims(source, tensor)
            )
            self.guards.tensor_match(source, example)
            node = self._input_placeholder(source)
            node.meta["val"] = example
            self._marked_dynamic += [
                TensorPropertySource(source, "size", dim) for dim in marks_of(tensor).dynamic
            ]
        elif has_own_torch_function(type(tensor)):
            # NOTE: the graph gets the input as a plain tensor: its operations, as those
            # an override runs, skip the override (torch_function_dispatch)
            self.guards.tensor_match(source, tensor)
            node = self._input_placeholder(source)
            plain = tensor.as_subclass(torch.Tensor)
            example = self._example_of(plain)
            node.meta["val"] = _to_fake(self.fake_mode, plain)
            self._converted_inputs[node] = (PlainTensorSource(source), plain)
        else:
            self.guards.tensor_match(source, tensor)
            if is_traceable_subclass(tensor):
                self._guard_subclass_layout(source, tensor)
            node = self._input_placeholder(source)
            example = self._example_of(tensor)
            node.meta["val"] = _to_fake(self.fake_mode, tensor)
        value = TensorValue(node, example, source, type(tensor))
        self._by_id[id(tensor)] = value
        self.inputs.append((source, tensor, value))
        return value

    def _guard_subclass_layout(self, source: Source, tensor: torch.Tensor) -> None:
        """A traceable subclass input (its fake is the subclass over inner fakes, and the
        backend takes it apart): guarded on its class, flatten context and inner tensors'
        metadata, as torch.compile guards it."""
        layout = layout_or_none(tensor)
        try:
            comparable = layout is not None and bool(layout == layout)
        except Exception:  # noqa: BLE001 - a context holding tensors, say
            comparable = False
        if not comparable:
            raise Unsupported(
                f"tensor subclass {type(tensor).__qualname__} whose flatten context or inner "
                "tensors capture cannot compare"
            )
        self.guards.subclass_layout(source, layout)

    def _ndarray_input(self, array: np.ndarray | np.generic, source: Source) -> Value:
        """An ndarray (or NumPy scalar) argument: a tensor graph input (`torch.from_numpy`
        in the entry code) that capture treats as NumPy's (numpy_arrays); guarded on
        type, dtype, shape and strides, not on its values (as torch)."""
        known = self._numbers.get(source)
        if known is not None:
            return known
        same = self._arrays_by_id.get(id(array)) if type(array) is np.ndarray else None
        if same is not None:
            # NOTE: one array at two places (a local and a stack item handed to a resume
            # part) is one object eagerly: `np.atleast_2d(a) is a`, a write seen by both
            self.guards.alias(source, same[0])
            self._numbers[source] = same[1]
            return same[1]
        self.guards.type_match(source, array)
        self.guards.equals_match(AttrSource(AttrSource(source, "dtype"), "str"), array.dtype.str)
        if type(array) is np.ndarray:
            writeable = AttrSource(AttrSource(source, "flags"), "writeable")
            self.guards.equals_match(writeable, array.flags.writeable)
            if not array.flags.writeable:
                # NOTE: a tensor cannot be read-only: a write NumPy refuses (ValueError)
                # would write the array (`np.broadcast_to`'s result, a frozen array)
                raise Unsupported("a read-only ndarray argument (NumPy refuses writes to it)")
        tensor = torch.from_numpy(np.asarray(array))
        dims = frozenset()
        if self.shape_env is not None and type(array) is np.ndarray:
            dims = self._dims(source, tensor)  # sizes that changed: symbolic, as a tensor's
        if dims:
            # the shape guards read the sizes; the array's own guards keep its rank and
            # the sizes that stay static
            self.guards.equals_match(AttrSource(source, "ndim"), array.ndim)
            example = self.fake_mode.from_real(tensor, ArraySizesSource(source), dynamic_dims=dims)
        else:
            for attribute in ("shape", "strides"):
                self.guards.equals_match(AttrSource(source, attribute), getattr(array, attribute))
            example = self.fake_mode.from_real(tensor)
        placeholder = self._input_placeholder(source)
        placeholder.meta["val"] = example
        self._converted_inputs[placeholder] = (NumpyTensorSource(source), tensor)
        value = TensorValue(placeholder, example, None, type(array))
        self._numbers[source] = value
        if type(array) is np.ndarray:
            self._arrays_by_id[id(array)] = (source, value)
        return value

    def _symbolic_int(self, value: Any, source: Source) -> torch.SymInt | None:
        """A SymInt for an int argument of the frame traced symbolically, else None.

        An int argument is a local or an item of a tuple or list argument (a value
        handed on to a resume part on its stack included). dynamic=True: every int
        argument; dynamic=None: one whose value changed since an earlier compile
        (automatic dynamic). Either way 0, 1 and negative values are symbolic too and
        an int never shares a size's symbol, as in torch. The shape guards check the
        value's range and relations; a type guard checks it is still an int.
        """
        if type(value) is not int or not _is_argument_source(source):
            return None
        if self.shape_env is None:
            return None
        if self.dynamic is not True:
            if self.history is None or not self.history.observe_int(source, value):
                return None
        return self.shape_env.create_symint(self.shape_env.create_int_symbol(value, source), value)

    def _symbolic_float(self, value: Any, source: Source) -> torch.SymFloat | None:
        """A SymFloat for a float argument whose value changed since an earlier compile,
        or any float argument from the first call under dynamic=True (as in torch).

        As in torch (automatic dynamic, `specialize_float=False`), the graph takes it
        as a 0-d float64 tensor input and reads it back with `.item()`; arithmetic on
        it stays symbolic, a decision on it (a comparison, `int(...)`) specializes it
        (the ShapeEnv's `specialized_floats`, guarded equal). NaN and inf stay constants.
        """
        if type(value) is not float or not math.isfinite(value):
            return None
        if self.shape_env is None or not self.float_inputs or not _is_float_input_source(source):
            return None
        if self.dynamic is not True:
            if self.history is None or not self.history.observe_value(source, value):
                return None
        symbol = self.shape_env.create_float_symbol(value, source)
        number = torch.SymFloat(SymNode(symbol, self.shape_env, float, value))
        tensor = torch.tensor(value, dtype=torch.float64)
        placeholder = self._input_placeholder(source)
        placeholder.meta["val"] = self.fake_mode.from_real(tensor)
        self._number_inputs[placeholder] = (FloatTensorSource(source), tensor)
        read = self.graph.call_method("item", (placeholder,))
        read.meta["val"] = number
        self.sym_numbers.bind(number, read)
        return number

    def _numbers_changed(self, obj: Any, source: Source) -> bool:
        """Whether `obj` is a tuple (or namedtuple) argument holding numbers that changed
        since an earlier compile."""
        plain_namedtuple = (
            isinstance(obj, tuple)
            and type(type(obj)) is type
            and (hasattr(type(obj), "_fields") and type(obj).__bases__ == (tuple,))
        )
        if not (type(obj) is tuple or plain_namedtuple):
            return False
        if self.shape_env is None or self.dynamic is True:
            return False
        if self.history is None or not _is_argument_source(source):
            return False
        if not any(type(item) in (int, float) for item in obj) or not is_constant(obj):
            return False
        changed = self.history.observe_value(source, obj)
        # each number item is seen at its own source too (as the item is wrapped once the
        # tuple changed): an item that changes is symbolic in the next compile
        for index, item in enumerate(obj):
            if type(item) in (int, float):
                self.history.observe_value(_item_source(source, obj, index), item)
        return changed

    def _dims(self, source: Source, tensor: torch.Tensor) -> frozenset[int]:
        """The dims of input `tensor` traced symbolically (mark_dynamic marks are added later).

        Parameters and module buffers stay static, as in torch: their sizes do not
        change between calls, and symbolic weight sizes (or a position-id table's
        length) would only blur the graph's size arithmetic.
        """
        if isinstance(tensor, torch.nn.Parameter) or isinstance(source, ParamBufferSource):
            return frozenset()
        if self.dynamic is True:
            return frozenset(range(tensor.dim()))
        if self.history is not None:
            return self.history.observe(source, tensor)
        return frozenset()

    @property
    def symbolic(self) -> bool:
        """Whether the graph has symbolic sizes (SymInt graph inputs)."""
        return self.shape_env is not None and bool(self.shape_env.graph_inputs())

    @property
    def symbolic_float_inputs(self) -> bool:
        """Whether the graph takes a float argument as a symbolic number (a 0-d float64
        input read back with `.item()`): a backend may need its value (a backward formula
        of `s ** x` takes `log(s)`)."""
        return bool(self._number_inputs)

    def guard_written_objects_apart(self) -> None:
        """Where the frame wrote an attribute of an outside object guarded on its class
        only (a module argument, a user object), the objects read stay aliased as now.

        Capture keeps one state per object: `a.scale = 5; x * b.scale` read 5 for
        `f(m, m)`, the graph's constant; for `f(m1, m2)` eager reads m2's own scale. So
        two sources of one object are guarded the same object (`alias`) and the objects
        read different objects (`distinct`), as the tensors taken as inputs are.
        """
        written = {key[0] for key in self.attr_writes}
        if not any(key in self._by_type for key in written):
            return
        firsts = []
        for _, sources in self._by_type.values():
            firsts.append(sources[0])
            for other in sources[1:]:
                self.guards.alias(other, sources[0])
        self.guards.distinct(firsts)

    def guard_distinct_tensor_arguments(self) -> None:
        """The tensor arguments capture took as different graph inputs stay different
        objects (a tensor passed twice is one input, guarded by `alias`)."""
        sources = [
            source
            for source, tensor, _ in self.inputs
            if isinstance(tensor, torch.Tensor)
            and (
                # another module guarded on structure may tie two of its tensors
                self.module_by_structure(source)
                or (not isinstance(tensor, torch.nn.Parameter) and _is_argument_source(source))
            )
        ]
        # NOTE: those of the target's own module apart, as before they were guarded on
        # structure (its tensors were not compared with the arguments'): their guard is
        # covered by the module tree's fast path, flat in the model's size
        own = [source for source in sources if self._below_bound_local(source)]
        self.guards.distinct([source for source in sources if source not in own])
        self.guards.distinct(own)
        # likewise the ndarray arguments taken as different inputs
        self.guards.distinct([source for source, _ in self._arrays_by_id.values()])

    def guard_shape_decisions(self) -> None:
        """The shape guards (and the floats specialized) join the guards of a capture that
        stopped early: the branches it took on symbolic ints before a graph break hold
        for the calls its entry accepts, even where no symbol became a graph input."""
        if self.shape_env is None:
            return
        for source, value in self.shape_env.specialized_floats.items():
            self.guards.equals_match(source, value)
        self.guards.guard_set.add_shape_env(self.shape_env)

    def add_size_inputs(self) -> None:
        """SymInt placeholders for every input-size symbol; the shape guards join the guards."""
        if self.shape_env is None:
            return
        for binding, _ in self.shape_env.graph_inputs():
            self._symbol_node(binding.symbol)
        for source, value in self.shape_env.specialized_floats.items():
            self.guards.equals_match(source, value)
        for placeholder in list(self._number_inputs):
            # a float input no operator reads (only guards, or specialized): no graph input
            (read,) = placeholder.users
            if not read.users:
                self.graph.erase_node(read)
                self.graph.erase_node(placeholder)
                del self._number_inputs[placeholder]
        self.guards.guard_set.add_shape_env(self.shape_env)

    def graph_inputs(self) -> list[tuple[Source, Any]]:
        """(where it is read at run time, example input) per placeholder, in graph order."""
        known = {value.node: (source, real) for source, real, value in self.inputs}
        known.update(self._size_inputs)
        known.update(self._number_inputs)
        known.update(self._converted_inputs)
        return [known[node] for node in self.graph.find_nodes(op="placeholder")]

    def _symbol_node(self, symbol: Any) -> torch.fx.Node:
        """The SymInt placeholder of an input-size symbol (made on first use)."""
        node = self._symbol_nodes.get(symbol)
        if node is not None:
            return node
        found = [(b, s) for b, s in self.shape_env.graph_inputs() if b.symbol == symbol]
        if not found:
            raise Unsupported(f"the size symbol {symbol} does not come from an input size")
        binding, symint = found[0]
        if isinstance(binding.sources[0], TensorPropertySource):
            node = self._placeholder(self._unique_name(binding.name))  # `s77`, as torch's
        else:  # an int input: named from where it is read (`L_n_`), as torch names it
            node = self._input_placeholder(binding.sources[0])
        node.meta["val"] = symint
        self._symbol_nodes[symbol] = node
        self._size_inputs[node] = (binding.sources[0], binding.hint)
        return node

    def check_marked_dynamic(self) -> None:
        """Raise ConstraintViolationError where the captured code specialized a size the
        caller marked with mark_dynamic (`if x.shape[0] == 4`, `x.reshape(4, -1)`), as
        torch.compile does: the mark promises one graph for every size, which such a
        graph cannot keep (maybe_mark_dynamic allows it)."""
        if self.shape_env is None:
            return
        for source in self._marked_dynamic:
            value = self.shape_env.specialized_value(source)
            if value is not None:
                raise ConstraintViolationError(
                    f"{source.expr} was marked dynamic (mark_dynamic) but the code "
                    f"specialized it to the constant {value}; remove the mark or use "
                    "maybe_mark_dynamic"
                )

    def note_size_read(self, size: Any, tensor: TensorValue) -> None:
        """`size` is `tensor`'s whole shape, read by the frame (`x.shape`, `x.size()`)."""
        if type(size) is torch.Size and has_symbolic(size):
            self._size_reads[id(size)] = [size, tensor, None]

    def _size_node(self, size: torch.Size) -> torch.fx.Node:
        """The node of a symbolic shape passed whole to an operation (`x.new_zeros(x.shape)`),
        as torch.compile records it: `x.size()` where it is a tensor's shape read whole
        (one node for each read), else `torch.Size([s0, 3])` (a slice of one, a Size made
        in the frame)."""
        read = self._size_reads.get(id(size))
        if read is not None and read[0] is size and _same_sizes(read[1].example.shape, size):
            if read[2] is None:
                read[2] = self.graph.call_method("size", (read[1].node,))
                read[2].meta["val"] = size
            return read[2]
        node = self.graph.call_function(torch.Size, ([self._sizes_to_nodes(d) for d in size],))
        node.meta["val"] = size
        return node

    def _sizes_to_nodes(self, obj: Any) -> Any:
        """`obj` with its SymInts replaced by graph nodes that compute them."""
        if isinstance(obj, _SYMBOLIC_TYPES):
            return self.sym_numbers.node_of(obj)
        if type(obj) is torch.Size and has_symbolic(obj):
            return self._size_node(obj)
        if isinstance(obj, list):
            return [self._sizes_to_nodes(item) for item in obj]
        if isinstance(obj, tuple):  # torch.Size included: sizes as a plain tuple
            return tuple(self._sizes_to_nodes(item) for item in obj)
        if isinstance(obj, dict):
            return {key: self._sizes_to_nodes(item) for key, item in obj.items()}
        if isinstance(obj, slice):
            return slice(*self._sizes_to_nodes((obj.start, obj.stop, obj.step)))
        return obj

    def _placeholder(self, name: str, keep_target: bool = False) -> torch.fx.Node:
        """A new placeholder after the existing ones (placeholders stay first).

        NOTE: FX names a node in snake case (`W` becomes `w`, `x_1` where a builtin or
        another node has the name); the forward's argument takes the node's own name, or
        its code would begin `w = W; w_1 = w`, reading the argument `w` after overwriting
        it (two inputs `W` and `w` would both be `W`). An input named as torch names it
        (`keep_target`) keeps its target (`L_x_`, node `l_x_`) where no node has that
        name (FX's node names are in snake case; no other input has the target, and a
        local's name goes to no node where it is a target: graph_printouts).
        """
        first_other = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        if first_other is None:
            node = self.graph.placeholder(name)
        else:
            with self.graph.inserting_before(first_other):
                node = self.graph.placeholder(name)
        if not keep_target or any(other.name == name for other in self.graph.nodes):
            node.target = node.name
        return node

    def _input_placeholder(self, source: Source) -> torch.fx.Node:
        """The placeholder of an input read at `source`, its target torch.compile's name
        for it (`L_x_`; FX names the node `l_x_`), see graph_printouts."""
        name = graph_input_name(source, self.renamed_inputs)
        candidate, suffix = name, -1
        while candidate in self._names or candidate.lower() in self._names:
            suffix += 1
            candidate = f"{name}_{suffix}"
        self._names.update((candidate, candidate.lower()))
        node = self._placeholder(candidate, keep_target=True)
        if read_on_load(source):
            self.note_realized(node)
        return node

    def note_realized(self, node: torch.fx.Node) -> None:
        """An input torch.compile would wrap now, before an operation uses it (the
        order of placeholders: graph_printouts.order_placeholders)."""
        if node.op == "placeholder" and node not in self.realized:
            calls = sum(1 for n in self.graph.nodes if n.op != "placeholder")
            self.realized[node] = (calls, len(self.realized))

    def _example_of(self, tensor: torch.Tensor) -> torch.Tensor:
        """The value capture computes with: a fake of the input (or a detached clone)."""
        if self.use_fakes:
            return self.fake_mode.from_real(tensor)
        with torch.no_grad():
            example = tensor.detach().clone()
        return example.requires_grad_(tensor.requires_grad)

    def _unique_name(self, base: str) -> str:
        base = "".join(c if c.isalnum() else "_" for c in base).strip("_") or "input"
        name = base if base[:1].isalpha() else f"v_{base}"
        candidate, suffix = name, 0
        while candidate in self._names:
            suffix += 1
            candidate = f"{name}_{suffix}"
        self._names.add(candidate)
        return candidate

    # ----- nodes --------------------------------------------------------
    def call(
        self,
        kind: str,
        target: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        allow_python_result: bool = False,
    ) -> Value:
        """Add a call node; its result value is found by running `target` on examples."""
        if self.reading_ahead is not None and _has_side_effect(target, kwargs):
            raise Unsupported(
                f"{_describe_target(kind, target)} writes a tensor in place or draws random "
                f"numbers in {self.reading_ahead}, left unfinished where the compiled part ends"
            )
        if target in NUMBER_READING_FUNCTIONS and self.shape_env is not None:
            args, kwargs = _map((args, kwargs), self._read_number)
        node_args = _map(args, self._to_node)
        node_kwargs = _map(kwargs, self._to_node)
        if self.shape_env is not None and has_symbolic((node_args, node_kwargs)):
            node_args = self._sizes_to_nodes(node_args)
            node_kwargs = self._sizes_to_nodes(node_kwargs)
        example_args = _map(args, _to_example)
        example_kwargs = _map(kwargs, _to_example)
        if kind == "call_function":  # x[i, p] / x[i, p] = v at a SymInt: select, not __index__
            target = symbolic_indexing_target(target, example_args)
        data_dependent = _any_data_dependent(args, kwargs)
        if self.function_modes and not self.torch_function_all_disabled:
            raise Unsupported(
                f"{_describe_target(kind, target)} under a torch function mode entered in the "
                "frame, reached without the mode (capture hands only calls it knows to modes)"
            )
        result_type = tensor_result_type(args, kwargs, self.torch_function_disabled > 0)
        outs = _out_tensors(kwargs)
        out_shapes = [out.example.shape for out in outs]
        try:
            result = self._run_on_examples(kind, target, example_args, example_kwargs)
        except Unsupported:
            raise
        except DataDependentError as error:
            raise Unsupported(
                f"{_describe_target(kind, target)} gives a result whose shape or value depends on "
                f"tensor data ({error})"
            ) from error
        except Exception as error:
            raise Unsupported(
                f"{_describe_target(kind, target)} raised {type(error).__name__} on the "
                f"capture's example values: {error}"
            ) from error
        if not _has_tensor(result) and not allow_python_result:
            error = Unsupported(
                f"{_describe_target(kind, target)} returned a Python {type(result).__name__} "
                "computed from tensor data (data-dependent); keep it a tensor"
            )
            error.python_result = True  # no node made: a Python callee may be traced instead
            raise error
        _check_out_tensors(kind, target, outs, out_shapes)
        if torch.get_default_dtype() is not self.entry_default_dtype and _has_tensor(result):
            node_kwargs = self._pin_default_dtype(kind, target, example_args, example_kwargs,
                                                  node_kwargs, result)  # fmt: skip
        node = self.graph.create_node(kind, target, node_args, node_kwargs)
        name = target if isinstance(target, str) else getattr(target, "__name__", "")
        data_dependent = data_dependent or _shape_from_data(name, args, kwargs)
        if name in ("__getitem__", "getitem") and _bool_index(example_args):
            data_dependent = True
        wrapped = self.wrap_result(node, result, data_dependent, result_type)
        return _returned_outs(wrapped, result, outs)

    def _pin_default_dtype(
        self,
        kind: str,
        target: Any,
        example_args: Any,
        example_kwargs: dict[str, Any],
        node_kwargs: dict[str, Any],
        result: Any,
    ) -> dict[str, Any]:
        """The node's kwargs for a call made while the frame has changed the default dtype.

        NOTE: the graph sets the default dtype as it runs, but a backend that traces it
        (aot_eager, inductor) keeps no such switch: its operations run under the dtype
        the frame was entered with. A call whose result dtype does not depend on the
        default dtype is kept as it is; a factory that takes a dtype gets the one in
        force now as an explicit argument; any other call (an integer tensor divided,
        a Python float added to one) breaks the graph.
        """
        wanted = _result_dtypes(result)
        if self._dtypes_under_entry_default(kind, target, example_args, example_kwargs) == wanted:
            return node_kwargs
        if kind == "call_function" and "dtype" not in example_kwargs and len(wanted) == 1:
            pinned = {**example_kwargs, "dtype": wanted[0]}
            if self._dtypes_under_entry_default(kind, target, example_args, pinned) == wanted:
                return {**node_kwargs, "dtype": wanted[0]}
        raise Unsupported(
            f"{_describe_target(kind, target)} gives a result whose dtype depends on the default "
            f"dtype the frame set ({torch.get_default_dtype()}); set it outside the compiled code"
        )

    def _run_on_examples(
        self, kind: str, target: Any, example_args: Any, example_kwargs: dict[str, Any]
    ) -> Any:
        """The call run on the example values (under the fake mode where capture uses
        fakes): its result, whose metadata the node's value takes."""
        with self.fake_mode if self.use_fakes else contextlib.nullcontext():
            if kind == "call_method":
                return getattr(example_args[0], target)(*example_args[1:], **example_kwargs)
            # a target that cannot run on fakes names what computes its metadata
            example_target = getattr(target, "__ember_example__", target)
            return example_target(*example_args, **example_kwargs)

    def _dtypes_under_entry_default(
        self, kind: str, target: Any, example_args: Any, example_kwargs: dict[str, Any]
    ) -> tuple[torch.dtype, ...] | None:
        """The result's dtypes were the call run under the frame's entry default dtype."""
        current = torch.get_default_dtype()
        torch.set_default_dtype(self.entry_default_dtype)
        try:
            result = self._run_on_examples(kind, target, example_args, example_kwargs)
        except Exception:  # noqa: BLE001 - any failure: treated as depending on it
            return None
        finally:
            torch.set_default_dtype(current)
        return _result_dtypes(result)

    def _read_number(self, value: Value) -> Value:
        """A symbolic float a tensor is built from, specialized (its sizes guarded)."""
        obj = value.obj if isinstance(value, PythonValue) else None
        if isinstance(obj, torch.SymFloat | torch.SymBool) and is_symbolic_number(obj):
            reason = "a tensor is built from its value"
            return PythonValue(self.sym_numbers.specialize(obj, reason))
        if isinstance(value, ListValue | TupleValue):
            return dataclasses.replace(value, items=[self._read_number(v) for v in value.items])
        return value

    def wrap_result(
        self,
        node: torch.fx.Node,
        result: Any,
        data_dependent: bool,
        result_type: type = torch.Tensor,
    ) -> Value:
        """The value of a graph operation's result; its tensors have `result_type` in eager."""
        if isinstance(result, torch.Tensor):
            node.meta["val"] = result if self.use_fakes else _to_fake(self.fake_mode, result)
            return TensorValue(node, result, None, _dispatched_type(result, result_type),
                               data_dependent)  # fmt: skip
        if isinstance(result, tuple | list):
            items = []
            for index, item in enumerate(result):
                item_node = self.graph.call_function(operator.getitem, (node, index))
                items.append(self.wrap_result(item_node, item, data_dependent, result_type))
            node.meta["val"] = tuple(
                _to_fake(self.fake_mode, item) if isinstance(item, torch.Tensor) else item
                for item in result
            )
            if isinstance(result, list):
                return ListValue(items)
            return TupleValue(items, type(result))
        if result is None or is_constant(result) or isinstance(result, torch.Size):
            return PythonValue(result)
        raise Unsupported(f"a graph operation returned an unsupported {type(result).__name__}")

    def _to_node(self, value: Value) -> Any:
        if isinstance(value, TensorValue):
            return value.node
        return _python_arg(value, self._to_node)

    def output_node(self, values: list[TensorValue | torch.fx.Node]) -> None:
        """The graph's outputs: tensors' nodes, and nodes computing SymInts."""
        nodes = (value if isinstance(value, torch.fx.Node) else value.node for value in values)
        self.graph.output(tuple(nodes))


def _result_dtypes(result: Any) -> tuple[torch.dtype, ...]:
    """The dtypes of the tensors in a call's result, in order."""
    if isinstance(result, torch.Tensor):
        return (result.dtype,)
    if isinstance(result, list | tuple):
        return tuple(dtype for item in result for dtype in _result_dtypes(item))
    return ()


def _to_example(value: Value) -> Any:
    if isinstance(value, TensorValue):
        return value.example
    return _python_arg(value, _to_example)


# Callables a graph node can take as an argument: the generated code names them by their
# qualified name. An instance (an nn.Module such as PairwiseDistance) has no such name.
_NAMED_CALLABLES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    torch._ops.OpOverload,
    torch._ops.OpOverloadPacket,
)


def is_graph_callable(obj: Any) -> bool:
    """Whether `obj` is a torch function a graph node can take as an argument."""
    if not isinstance(obj, _NAMED_CALLABLES):
        return False
    return getattr(obj, "__module__", None) is not None and obj.__module__.startswith("torch")


def _python_arg(value: Value, inner: Callable[[Value], Any]) -> Any:
    if isinstance(value, PythonValue):
        shadow = side_effects.shadow_of(value.obj)
        if shadow is not None:  # an outside container the frame wrote: what it holds now
            return inner(shadow)
        if is_constant(value.obj) or isinstance(value.obj, (torch.Size, *_SYMBOLIC_TYPES)):
            return value.obj
        if value.obj is None:
            return value.obj
        if isinstance(value.obj, list | tuple) and all(is_constant(x) for x in value.obj):
            return value.obj
        if is_graph_callable(value.obj):
            return value.obj
        if constant_scalar(value):
            return plain_value(value.obj)  # an int subclass instance: its int
        raise Unsupported(f"cannot pass a {type(value.obj).__name__} to a graph operation")
    if isinstance(value, TupleValue):
        items = tuple(inner(item) for item in value.items)
        return torch.Size(items) if value.cls is torch.Size else items
    if isinstance(value, ListValue):
        return [inner(item) for item in value.items]
    if isinstance(value, DictValue):
        return {key: inner(item) for key, item in value.items.items()}
    if isinstance(value, SetValue):
        return set(value.items)
    raise Unsupported(f"cannot pass a {type(value).__name__} to a graph operation")


_PLAIN_TORCH_FUNCTIONS = (
    torch.Tensor.__torch_function__.__func__,  # type: ignore[attr-defined]
    torch._C._disabled_torch_function_impl,
)


def _dispatched_type(result: torch.Tensor, result_type: type) -> type:
    """The type eager gives `result`: a traceable subclass's own `__torch_dispatch__` says
    which results are of the subclass (the example computed through it is of that type;
    one it gives plain is a plain tensor), else `result_type` (torch function handling)."""
    if is_traceable_subclass(result):
        return type(result)
    if has_own_torch_dispatch(result_type):
        return torch.Tensor
    return result_type


def tensor_result_type(args: Any, kwargs: Any, disabled: bool = False) -> type:
    """The Python type eager gives the tensors an operation on `args` returns.

    Inside a DisableTorchFunction(Subclass) block (`disabled`: of the frame, or one
    entered outside it), a subclass argument breaks the graph.

    A plain tensor for tensors and parameters (nn.Parameter turns torch function
    handling off); for a subclass keeping torch's default `__torch_function__`, the
    most derived such subclass among the arguments (torch converts the results to it).
    A subclass defining its own `__torch_function__` is a plain tensor in the graph: an
    operation reaching here on it runs inside its override (subclass handling off: a
    plain result, as eager's); one that did not go through the override breaks.
    """
    kinds = [
        tensor.python_type
        for tensor in _tensor_arguments(args, kwargs)
        if tensor.python_type is not torch.Tensor
    ]
    chosen: type = torch.Tensor
    converted = [kind for kind in kinds if not has_own_torch_function(kind)]
    if converted and (disabled or not torch._C._is_torch_function_enabled()):
        # NOTE: the graph keeps no DisableTorchFunction(Subclass) switch: run on the real
        # subclass inputs, its operations would call the overrides eager skips here
        raise Unsupported(
            "an operation on a tensor subclass inside a DisableTorchFunction(Subclass) "
            "block (the graph does not turn torch function handling off)"
        )
    for kind in kinds:
        if not issubclass(kind, torch.Tensor):  # a NumPy array: only numpy_arrays takes it
            raise Unsupported(f"a torch operation on a {kind.__name__} (NumPy) value")
        if has_own_torch_function(kind):
            if disabled or not torch._C._is_torch_function_enabled():
                continue  # a plain tensor in the graph: results are plain, as eager's
            raise Unsupported(
                f"an operation on tensor subclass {kind.__qualname__}, which defines its own "
                "__torch_function__, that capture did not hand to it"
            )
        handler = getattr(kind.__torch_function__, "__func__", kind.__torch_function__)
        if handler not in _PLAIN_TORCH_FUNCTIONS:
            raise Unsupported(
                f"an operation on tensor subclass {kind.__qualname__}, which defines its own "
                "__torch_function__ (capture does not run it)"
            )
        if handler is torch._C._disabled_torch_function_impl:
            continue  # nn.Parameter and the like: results are plain tensors
        if chosen is torch.Tensor or issubclass(kind, chosen):
            chosen = kind
    return chosen


def _shape_from_data(name: str, args: Any, kwargs: Any) -> bool:
    """Whether operation `name` makes a result whose shape depends on tensor data.

    repeat_interleave does only when its repeats are a tensor (or it is the one-argument
    form, `repeat_interleave(repeats)`): with a number of repeats (GPT-J's rotary
    `repeat_interleave(sin, 2, 3)`) its shape is the input's, one dim times the number.
    """
    if name != "repeat_interleave":
        return name in DATA_DEPENDENT_SHAPE_OPS
    repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
    return repeats is None or bool(_tensor_arguments((repeats,), {}))


def _any_data_dependent(args: Any, kwargs: Any) -> bool:
    return any(tensor.data_dependent_shape for tensor in _tensor_arguments(args, kwargs))


def _tensor_arguments(args: Any, kwargs: Any) -> list[TensorValue]:
    """The tensors among an operation's arguments, in order: in Python containers and in
    tuple and list values, at any depth."""
    found: list[TensorValue] = []

    def visit(value: Value) -> Value:
        if isinstance(value, TensorValue):
            found.append(value)
        if isinstance(value, TupleValue | ListValue):
            for item in value.items:
                visit(item)
        return value

    _map(args, visit)
    _map(kwargs, visit)
    return found


def _bool_index(example_args: Any) -> bool:
    index = example_args[1] if len(example_args) > 1 else None
    indexes = index if isinstance(index, tuple | list) else (index,)
    return any(
        isinstance(item, torch.Tensor) and item.dtype in (torch.bool, torch.uint8)
        for item in indexes
    )


_IN_PLACE_OPERATORS = frozenset(
    {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
     operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
     operator.ixor, operator.ilshift, operator.irshift, operator.imatmul}
)  # fmt: skip


# operations that draw from the global random generator (by name, function or method)
_RANDOM_OPERATIONS = frozenset(
    {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
     "bernoulli", "multinomial", "normal", "poisson", "dropout", "dropout1d", "dropout2d",
     "dropout3d", "alpha_dropout", "feature_alpha_dropout", "rrelu", "native_dropout"}
)  # fmt: skip


def _has_side_effect(target: Any, kwargs: dict[str, Any]) -> bool:
    """Whether a call writes into a tensor (a trailing-underscore method or function such
    as `add_` or `torch.relu_`, an in-place operator, `out=`, `inplace=True`) or draws
    from the global random generator."""
    if target in _IN_PLACE_OPERATORS or "out" in kwargs:
        return True
    inplace = kwargs.get("inplace")
    if isinstance(inplace, PythonValue) and inplace.obj is True:
        return True
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if not isinstance(name, str):
        return False
    return name in _RANDOM_OPERATIONS or (name.endswith("_") and not name.startswith("__"))


def _out_tensors(kwargs: dict[str, Any]) -> list[TensorValue]:
    """The tensors a call's `out=` argument names (one tensor, or a tuple or list)."""
    out = kwargs.get("out")
    if isinstance(out, TensorValue):
        return [out]
    if isinstance(out, TupleValue | ListValue):
        return [item for item in out.items if isinstance(item, TensorValue)]
    return []


def _check_out_tensors(
    kind: str, target: Any, outs: list[TensorValue], shapes: list[torch.Size]
) -> None:
    """A call writing into `out=` tensors it resizes, or into a non-contiguous one, runs
    eagerly (a graph break at the call), as torch.compile breaks there: the graph's
    value of the out tensor would keep its old geometry for the code that reads it."""
    for out, shape in zip(outs, shapes):
        if out.example.shape != shape or not out.example.is_contiguous():
            error = Unsupported(
                f"{_describe_target(kind, target)} resizes its out= tensor or writes a "
                "non-contiguous one; it runs eagerly (a graph break at the call)"
            )
            error.eager_call = True
            raise error


def _returned_outs(wrapped: Value, result: Any, outs: list[TensorValue]) -> Value:
    """A call's value where it returns its `out=` tensors: those very values, as eager
    returns the very tensors passed (`torch.add(a, b, out=c) is c`)."""
    by_example = {id(out.example): out for out in outs}
    if isinstance(result, torch.Tensor):
        return by_example.get(id(result), wrapped)
    if isinstance(result, tuple | list) and isinstance(wrapped, TupleValue | ListValue):
        items = [by_example.get(id(item), value) for item, value in zip(result, wrapped.items)]
        if isinstance(wrapped, ListValue):
            return ListValue(items)
        return TupleValue(items, wrapped.cls)
    return wrapped


def _describe_target(kind: str, target: Any) -> str:
    if kind == "call_method":
        return f"Tensor.{target}"
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", repr(target))
    return f"{module}.{name}" if module else name


def _uninitialized_lazy(module: torch.nn.Module) -> bool:
    """A lazy module not yet called: its first call in the frame turns it into its
    regular class (lazy_modules), so it is guarded by identity, not by its class now."""
    return isinstance(module, LazyModuleMixin) and module.has_uninitialized_params()


def _method_of_user_object(obj: Any) -> bool:
    """A Python function bound to an instance of a plain user class (no module, class,
    tensor or object of torch's)."""
    if not (isinstance(obj, types.MethodType) and isinstance(obj.__func__, types.FunctionType)):
        return False
    receiver = obj.__self__
    cls = type(receiver)
    if isinstance(receiver, type | torch.nn.Module | torch.Tensor) or cls.__module__ in (
        "builtins",
        "torch",
    ):
        return False
    return not cls.__module__.startswith("torch.") and hasattr(receiver, "__dict__")


def _method_of_tensor(obj: Any) -> bool:
    """A builtin method of a plain tensor (`t.add`), named as Tensor names it."""
    if not isinstance(obj, types.BuiltinMethodType) or type(obj.__self__) is not torch.Tensor:
        return False
    name = obj.__name__
    return name.isidentifier() and callable(getattr(torch.Tensor, name, None))


def _is_identity_object(obj: Any) -> bool:
    return isinstance(
        obj,
        types.FunctionType
        | types.BuiltinFunctionType
        | types.ModuleType
        | type
        | types.MethodType
        | types.MethodWrapperType
        | types.WrapperDescriptorType
        | types.MethodDescriptorType,
    )
