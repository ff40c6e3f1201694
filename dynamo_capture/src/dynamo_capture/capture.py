"""The capture driver: one frame's bytecode -> an FX graph, its guards and its entry code.

    capture_frame(target, args, kwargs)
      1. bind the call's arguments to the frame's locals L      (frame_target)
      2. guard the global state the graph depends on            (grad mode, default dtype)
      3. interpret the bytecode on values, building the graph   (interpreter)
      4. collect the returned values: graph outputs + rebuild   (OutputPlan)
      5. finish the GraphModule                                 (torch.fx)

`compile_entry` then hands the graph to the backend and generates the entry
function (Python source, registered with linecache) that calls it.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import dis
import functools
import inspect
import itertools
import linecache
import os
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx

from dynamo_capture import (  # noqa: F401  (registers handlers)
    opcodes_data,
    opcodes_exceptions,
    opcodes_flow,
    opcodes_match,
    side_effects,
)
from dynamo_capture.attributes import DELETED, replay_delete
from dynamo_capture.bound_locals import live_locals, read_before_written
from dynamo_capture.calls import UNTRACED_CONTEXT_FUNCTIONS, UNTRACED_CONTEXTS, is_made_in_frame
from dynamo_capture.control_flow import check_regions_called_more_than_once
from dynamo_capture.deferred_compile import DeferredCompile, DeferredParts
from dynamo_capture.errors import (
    CAPTURED_TRACEBACK,
    BackendCompilerFailed,
    ExceptionRaised,
    NeedsEagerFrame,
    Unsupported,
    UserLocation,
)
from dynamo_capture.frame_guards import CompiledGuards
from dynamo_capture.frame_target import FrameTarget, drives_module
from dynamo_capture.function_transforms import ClosureTransform
from dynamo_capture.function_values import function_attr, writes_free_variable
from dynamo_capture.functorch_inline import InlinedTransform, Pullback
from dynamo_capture.grad_mode_pass import drop_redundant_grad_modes, drop_undone_switches
from dynamo_capture.graph_printouts import (
    lend_stack_traces,
    module_driver_names,
    order_placeholders,
)
from dynamo_capture.interpreter import Translator, check_registry
from dynamo_capture.lazy_iterators import (
    LazySteps,
    ListSteps,
    MappingSteps,
    ReversedMappingIterator,
    check_no_pending_cleanup,
)
from dynamo_capture.methods import context_factory, kept_context, kept_grad_context
from dynamo_capture.operations import IdentityKey, key_value
from dynamo_capture.output_graph import (
    HANDED_ITERATORS,
    CaptureContext,
    HandedSteps,
    has_symbolic,
    is_constant,
)
from dynamo_capture.registry import disabled_reason
from dynamo_capture.resume import (
    ITERATOR,
    STACK_LOCAL,
    UNBOUND,
    ContextSpec,
    cell_locals,
    generated_from,
    handed_on_only,
    lies_in_loop,
)
from dynamo_capture.scalar_subclasses import made_scalar, plain_value, scalar_base
from dynamo_capture.sources import (
    AttrSource,
    ClosureSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    ModuleSource,
    NNModuleSource,
    NumpyTensorSource,
    Source,
)
from dynamo_capture.state import capturing
from dynamo_capture.tensor_extremes import ChoiceValue, check_aliases
from dynamo_capture.tensor_hooks import PendingHookHandle, check_hooked_tensors_stay, hook_replays
from dynamo_capture.torch_function_dispatch import has_own_torch_function
from dynamo_capture.unused_items import drop_unused_items
from dynamo_capture.values import (
    NULL,
    BuiltinMethodValue,
    CellValue,
    ContextValue,
    DictValue,
    DictViewValue,
    FakeId,
    FunctionValue,
    HandedOnValue,
    IteratorValue,
    ListValue,
    MethodValue,
    ObjectValue,
    PartialValue,
    PythonValue,
    SetValue,
    TensorValue,
    TupleValue,
    Value,
)
from guards import SizeHistory

__all__ = [
    "CaptureArtifacts",
    "CapturedFrame",
    "CompiledEntry",
    "capture_frame",
    "compile_entry",
    "make_entry",
]

check_registry()
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_entry_counter = itertools.count()


@dataclass
class CapturedFrame:
    """The result of capturing one frame."""

    target: FrameTarget
    graph_module: torch.fx.GraphModule
    example_inputs: list[torch.Tensor]
    input_sources: list[Source]
    output_exprs: str
    constants: list[Any]
    replays: list[str]
    ctx: CaptureContext
    capture_seconds: float

    @property
    def call_count(self) -> int:
        """Graph operations (grad-mode and autocast switches included, as torch.compile
        counts them to decide whether a graph is compiled), and the operations the code ran
        on symbolic numbers, which torch.compile traces as nodes before dropping the unused."""
        calls = sum(node.op.startswith("call") for node in self.graph_module.graph.nodes)
        return calls + self.ctx.sym_numbers.operations


@dataclass
class CaptureArtifacts:
    """Readable artifacts of one compiled entry.

    `frame_name` and `compile_id` ("<frame id>/<attempt>") say which compile made
    it; `compiled` is what the backend returned (None when no graph is called), so a
    caller can reach the backend's own artifacts.
    """

    graph_code: str
    guard_code: str
    entry_code: str
    graph_break_reason: str | None = None
    capture_seconds: float = 0.0
    backend_seconds: float = 0.0
    frame_name: str = ""
    compile_id: str = ""
    compiled: Any = None


@dataclass
class CompiledEntry:
    """One cache entry: a guard function and the code that runs when it passes."""

    guards: CompiledGuards
    run: Callable[..., Any] | None
    artifacts: CaptureArtifacts
    graph_module: torch.fx.GraphModule | None = None
    hits: int = field(default=0)
    eager: bool = False
    compiled: Any = None  # what the backend returned (None when no graph is called)
    shadows: list[Any] = field(default_factory=list)  # eager entries: break_callees.Shadow
    # eager entries whose shadows are made anew on every call (a module's hooks)
    call_shadows: Callable[[], list[Any]] | None = None
    # `run` for a call whose guards were not checked (skip_guard_eval_unsafe): reads every
    # input from its source, where `run` takes module tensors from the guards' last check
    run_unchecked: Callable[..., Any] | None = None

    def check(self, L: dict[str, Any], G: dict[str, Any]) -> bool:  # noqa: N803
        return self.guards.check(L, G)


def _converted_subclass(kind: Any) -> bool:
    """A tensor subclass keeping torch's default `__torch_function__`, which converts
    the results of operations on it to itself."""
    if not isinstance(kind, type) or kind is torch.Tensor or not issubclass(kind, torch.Tensor):
        return False
    handler = kind.__torch_function__
    if has_own_torch_function(kind):
        return True  # the graph gives plain tensors (torch_function_dispatch)
    return getattr(handler, "__func__", handler) is torch.Tensor.__torch_function__.__func__


def as_tensor_subclass(tensor: torch.Tensor, kind: type) -> torch.Tensor:
    """`tensor` as a `kind` (the compiled code's output, where eager gives a subclass)."""
    return tensor if type(tensor) is kind else tensor.as_subclass(kind)


def user_frames(where: tuple[UserLocation, ...]) -> tuple[UserLocation, ...]:
    """Drop this package's own frames (the module-call driver) from a location chain."""
    return tuple(loc for loc in where if not loc.filename.startswith(_PACKAGE_DIR))


def open_contexts(tx: Translator) -> tuple[ContextSpec, ...]:
    """The grad-mode and autocast `with` blocks open in `tx`'s frame, outermost first.

    They are the `__exit__`s at the bottom of the value stack; the run stops at the
    first `with` on a context that cannot be rebuilt.
    """
    specs = []
    for value in tx.stack:
        mode = _fresh_mode_class(tx, value)
        if mode is not None:
            specs.append(ContextSpec(mode))
            continue
        if isinstance(value, IteratorValue):
            if value.items or value.position or value.produce is not None:
                break  # a real loop's iterator (inside its body: never a cut)
            specs.append(ITERATOR)  # the empty stand-in of a loop body run as a part
            continue
        if not (isinstance(value, BuiltinMethodValue) and value.name == "__exit__"):
            break
        if not isinstance(value.receiver, ContextValue):
            break
        factory = context_factory(value.receiver)
        if factory is None:
            break
        specs.append(ContextSpec(*factory))
    return tuple(specs)


def _fresh_mode_class(tx: Translator, value: Any) -> type | None:
    """The class of a torch function mode whose `with` block is open in `tx`'s frame
    (`value` is its bound `__exit__` on the stack) when a fresh `cls()` stands for it
    exactly: the mode keeps TorchFunctionMode's `__init__`, `__enter__` and `__exit__`,
    has no attributes, and no local of the frame holds it (`with Mode() as m:` would let
    the code see that the part's mode is another object). Else None."""
    from dynamo_capture.torch_function_dispatch import is_mode_class

    if not isinstance(value, MethodValue) or not isinstance(value.self_value, ObjectValue):
        return None
    if getattr(value.func, "obj", None) is not torch.overrides.TorchFunctionMode.__exit__:
        return None
    mode = value.self_value
    if not is_mode_class(mode.cls) or mode.attrs:
        return None
    if mode.cls.__init__ is not torch.overrides.TorchFunctionMode.__init__:
        return None
    if any(local is mode for local in tx.locals.values()):
        return None
    return mode.cls


def opens_unknown_with(tx: Translator) -> bool:
    """Whether a `with` block on a context that cannot be rebuilt (a user class, a
    contextmanager generator) is open in `tx`'s frame: its `__exit__` is on the stack."""
    for value in tx.stack:
        if _fresh_mode_class(tx, value) is not None:
            continue
        if isinstance(value, MethodValue):
            if getattr(getattr(value.func, "obj", None), "__name__", None) == "__exit__":
                return True
        elif isinstance(value, BuiltinMethodValue) and value.name == "__exit__":
            if not isinstance(value.receiver, ContextValue):
                return True
            if context_factory(value.receiver) is None:
                return True
    return False


_CALLS = ("CALL",)
_BRANCH_JUMPS = (
    "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
    "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP",
)  # fmt: skip
_METHOD_LOADS = ("LOAD_ATTR", "LOAD_METHOD")
_PLAIN = (bool, int, float, str, type(None))


def _call_cut_in_loops(tx: Translator) -> bool:
    """Whether a failing call inside `for` loops may be cut at the call, the loops'
    iterators handed on below the partial values (as at a data-dependent jump): each
    can be made again (`_loop_iterators_handed_on`), and a `return` follows the call
    before any jump back (branches.breaks_inside_loop: else the frame runs eagerly)."""
    from dynamo_capture.branches import breaks_inside_loop

    if not _loop_iterators(tx) or tx.current is None or tx.parent is not None:
        return False
    if breaks_inside_loop(tx.code, tx.current.offset):
        return False
    return _loop_iterators_handed_on(tx) == "hand"


# two-operand instructions running a user's method (its operands below it on the stack):
# a break inside the method cuts at the instruction, as at a call
_USER_DUNDER_OPS = ("BINARY_SUBSCR", "COMPARE_OP")


def call_cut(tx: Translator, in_loops: bool = False) -> tuple[int, int, int, int] | None:
    """Where the failing call's instruction sequence starts, when it can be a cut.

    The values below the call's callable (the statement's partial values, e.g. `f(x)`
    in `f(x) + g(x)`) become outputs of the graph before the cut and are pushed back
    by the eager part; they must be tensors or plain constants, or (`in_loops`) the
    iterators of the `for` loops around the call. Returns (offset of the first
    instruction of the call sequence, stack depth there, offset after the call).
    """
    if _loop_iterators(tx) and not in_loops:
        return None  # a loop's iterator below that cannot be handed on
    inst, trace = tx.current, tx.trace
    if inst is None or not trace or trace[-1][0] != inst.offset:
        return None
    if inst.opname in _CALLS:
        depth = trace[-1][1] - (inst.arg or 0) - 2
    elif inst.opname == "CALL_FUNCTION_EX":  # NULL, callable, args tuple[, kwargs dict]
        depth = trace[-1][1] - 3 - ((inst.arg or 0) & 1)
    elif inst.opname in _USER_DUNDER_OPS:  # a user `__getitem__` / `__eq__` that broke
        depth = trace[-1][1] - 2
    else:
        return None
    if depth < 0:
        return None
    receiver_cut = _receiver_cut(tx, depth) if inst.opname not in _USER_DUNDER_OPS else None
    if receiver_cut is not None:
        return receiver_cut
    for offset, before in reversed(trace[:-1]):
        if before < depth:
            return None
        if before == depth:
            below = tx.stack[_open_withs(tx) : depth]  # above the open `with`s
            loops = [v for v in below if isinstance(v, IteratorValue)] if in_loops else []
            if not all(
                _carried(value) or _module_by_identity(tx, value) or _carried_container(value)
                for value in below
                if value not in loops
            ):
                return None
            index = tx.index_of[inst.offset] + 1
            if index >= len(tx.instructions):
                return None
            if offset >= generated_from(tx.code):
                # the callable was pushed by a part's prologue: cut at the call itself
                if inst.opname not in _CALLS:
                    return None
                return _cut_at_call(tx, depth, tx.instructions[index].offset)
            return offset, depth, tx.instructions[index].offset, depth + 1
    return None


def _cut_at_call(tx: Translator, depth: int, after: int) -> tuple[int, int, int, int] | None:
    """A cut at the call instruction itself, every stack value handed on: NULL, the
    callable (a function or class) and the arguments (tensors or constants)."""
    if not tx.calling_after_null or not _carried(tx.calling):
        return None
    if not all(_plain(value) for value in tx.calling_args):
        return None
    index = tx.index_of[tx.current.offset]
    while index > 0 and tx.instructions[index - 1].opname in ("PRECALL", "KW_NAMES"):
        index -= 1
    full = depth + 2 + len(tx.calling_args)
    return tx.instructions[index].offset, full, after, depth + 1


def _receiver_cut(tx: Translator, depth: int) -> tuple[int, int, int, int] | None:
    """A cut after the receiver of a failing method call on a graph tensor (`t.item()`).

    The graph before the cut computes the tensor (`x.sum()` in `x.sum().item()`) and
    hands it on; only the method call runs eagerly. Returns (offset of the method's load,
    stack depth there, offset after the call, stack depth there).
    """
    callable_value = tx.calling
    if not (
        isinstance(callable_value, BuiltinMethodValue)
        and isinstance(callable_value.receiver, TensorValue)
    ):
        return None
    trace = tx.trace
    assert trace is not None and tx.current is not None
    for offset, before in reversed(trace[:-1]):
        if before < depth + 1:
            return None
        if before == depth + 1:
            load = tx.instructions[tx.index_of[offset]]
            if load.opname not in _METHOD_LOADS or not load.method:
                return None
            if not all(_carried(value) for value in tx.stack[_open_withs(tx) : depth]):
                return None
            index = tx.index_of[tx.current.offset] + 1
            if index >= len(tx.instructions):
                return None
            return offset, depth + 1, tx.instructions[index].offset, depth + 1
    return None


def _rebuilt_as_eager(iterator: IteratorValue) -> bool:
    """Whether an iterator made again where a part ends gives what it would eagerly: one
    over a range, a tuple or an enumerate of a range or of a ModuleList or Sequential
    (items that cannot change), a
    reversed() of a dict or its view (builtin_calls._reversed_kind), or a list's (the
    same list, read at the same index). One over a dict or a set reads
    them as they are when the loop starts, which eagerly would see later changes."""
    if iterator.endless is not None:
        return False
    if isinstance(iterator.produce, HandedSteps):  # handed on to this part: the same again
        return iterator.produce.real is None or _rebuilt_as_eager(iterator.produce.real)
    if isinstance(iterator.produce, ListSteps):
        return iterator.kind == "iter"
    if isinstance(iterator.produce, MappingSteps):  # reversed(a dict): made again as eager's
        return iterator.produce.reverse
    if iterator.zipped is not None:  # each sequence read again from the zip's position
        return iterator.produce is None
    fixed = ("range", "tuple", "enumerate_range", "enumerate_modules", "reversed_fixed")
    return iterator.produce is None and iterator.kind in fixed


def _made_again_lazily(iterator: IteratorValue) -> bool:
    """Whether an iterator made where a part ends reads nothing ahead: one rebuilt as
    eagerly (`_rebuilt_as_eager`), or a map, filter, zip or enumerate over such ones."""
    if isinstance(iterator.produce, LazySteps):
        return iterator.position == len(iterator.items) and all(
            _made_again_lazily(inner) for inner in iterator.produce.iterators
        )
    return _rebuilt_as_eager(iterator)


# NOTE: kinds of loop iterator torch.compile reads through a generator or a view it
# cannot make again in a resume function: a break with one on the stack (the loop
# around it) runs the whole frame eagerly, its calls compiled, as torch.compile skips it.
# An enumerate of a list or tuple, of another iterator (a zip, a generator); a
# generator object; an iterator over a dict, its keys, values or items (a ModuleDict's);
# one over a ModuleList or Sequential (an enumerate of one is handed on).
_NOT_RESUMED_KINDS = frozenset(
    {"enumerate_sequence", "enumerate_iterator", "generator", "dict", "modules"}
)


def _loop_iterators(tx: Translator) -> list[IteratorValue]:
    """The iterators of the `for` loops open where `tx` stopped (a loop body run as a
    part has an empty stand-in instead)."""
    iterators = [value for value in tx.stack if isinstance(value, IteratorValue)]
    return [it for it in iterators if it.items or it.position or it.produce is not None]


def loop_iterator_not_resumed(tx: Translator) -> bool:
    """Whether a loop open where `tx` stopped iterates something torch.compile does not
    resume inside (`_NOT_RESUMED_KINDS`): the frame then runs eagerly as a whole."""
    return any(it.kind in _NOT_RESUMED_KINDS for it in _loop_iterators(tx))


def _temporaries_handed_on(tx: Translator) -> tuple[int, ...] | None:
    """Whether the statement's own values below a data-dependent jump's tested value
    (`0 < t < 1` keeps `t`; `f(x, t.sum() > 0 and 3)` keeps NULL, `f` and `x`) can ride
    to the parts resuming at its targets: tensors, immutable constants, an enclosing
    call's NULL and a function or class called (the same objects when handed on; a
    container or another object made in the frame would be rebuilt as a second object).
    The positions of the NULLs among the values handed on, else None."""
    from dynamo_capture.branches import branch_stack

    loops, count = branch_stack(tx.code, tx.current.offset)
    if not count:
        return ()
    kept = 1 if tx.current.opname.endswith("_OR_POP") else 0  # the tested value is still on it
    below = loops + count
    handed = tx.stack[len(tx.stack) - kept - below : len(tx.stack) - kept]
    if len(handed) != below or not all(_handed_temporary(value) for value in handed[loops:]):
        return None
    return tuple(index for index, value in enumerate(handed) if value is NULL)


def _handed_temporary(value: Value) -> bool:
    if value is NULL or isinstance(value, TensorValue):
        return True
    if not isinstance(value, PythonValue):
        return False
    if type(value.obj) in _HANDED_AS_IS:
        return True
    callable_types = type | types.BuiltinFunctionType | types.FunctionType
    return isinstance(value.obj, callable_types) or _torch_callable(value)


def _loop_iterators_handed_on(tx: Translator) -> str:
    """How a data-dependent jump with loops' iterators below its tested value is cut:
    "hand" where each can ride to the parts resuming at the jump's targets
    (branches.plan_branch): an iterator over items known now (a range, a tuple, an
    enumerate of a range), made again over the items not yet read, or over a list (the
    same list, at the same index); else "statement" (loop_iterator_not_resumed tells the
    loops that run the whole frame eagerly, as torch.compile). One a
    local or another value also holds (`it = iter(xs)`) would be two objects after the
    cut, so its jump is cut at its statement."""
    real = _loop_iterators(tx)
    if not real:
        return "hand"
    if not all(_rebuilt_as_eager(it) for it in real):
        return "statement"
    held = {id(it) for it in real}
    seen: set[int] = set()
    # a local holding one itself is handed the same object (OutputPlan names it once,
    # output_graph reads it as the stack's); one inside a value or a cell is not
    work: list[Any] = [
        *(value for value in tx.locals.values() if id(value) not in held),
        *tx.cells.values(),
    ]
    while work:
        item = work.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if id(item) in held:
            return "statement"
        if isinstance(item, list | tuple | set | frozenset):
            work.extend(item)
        elif isinstance(item, dict):
            work.extend(item.values())
        elif isinstance(item, Value) and dataclasses.is_dataclass(item):
            work.extend(getattr(item, f.name) for f in dataclasses.fields(item))
    return "hand"


def _checkpoint_calls(tx: Translator) -> tuple[tuple[int, int], ...]:
    """The translator's checkpoints with the call nodes the graph had at each."""
    calls, counts = 0, [0]
    for node in tx.ctx.graph.nodes:
        calls += node.op.startswith("call")
        counts.append(calls)
    return tuple((offset, counts[min(nodes, len(counts) - 1)]) for offset, nodes in tx.checkpoints)


def _open_withs(tx: Translator) -> int:
    """How many rebuildable `with` blocks' exits lie at the bottom of the stack (a loop
    body part's stand-in iterator ends them: no call cut lies above one)."""
    contexts = open_contexts(tx)
    return contexts.index(ITERATOR) if ITERATOR in contexts else len(contexts)


def _torch_callable(callable_value: Any) -> bool:
    """Whether the failing call is of a torch function or a method of a tensor, or of a
    NumPy function (which torch.compile traces as torch's: a break at the call itself)."""
    if isinstance(callable_value, BuiltinMethodValue):
        return isinstance(callable_value.receiver, TensorValue)
    if isinstance(callable_value, PythonValue):
        module = getattr(callable_value.obj, "__module__", None) or ""
        return any(module == name or module.startswith(f"{name}.") for name in ("torch", "numpy"))
    return False


def _disabled_callable(callable_value: Any) -> bool:
    """Whether the failing call is of a function or module marked to run eagerly
    (`ember.disable`, `torch.compiler.disable`): torch.compile breaks at the call itself,
    its arguments computed in the graph before and its result handed to the one after."""
    if isinstance(callable_value, MethodValue):  # a disabled method of an object
        callable_value = callable_value.func
    obj = getattr(callable_value, "obj", None)
    if isinstance(obj, torch.nn.Module):  # a module whose forward is disabled
        forward = getattr(type(obj), "forward", None)
        if forward is not None and disabled_reason(forward) is not None:
            return True
    return obj is not None and disabled_reason(obj) is not None


_CONVERSIONS = (bool, int, float, complex)
# NumPy's functions (ufuncs, array-function dispatchers): module attributes without state
_NUMPY_FUNCTION_TYPES = (np.ufunc, type(np.where), type(np.unique))


def _tensor_conversion(tx: Translator) -> bool:
    """Whether the failing call is `bool(t)`, `int(t)`, `float(t)` or `complex(t)` of a
    graph tensor: torch.compile breaks at the call, the tensor computed in the graph."""
    calling = tx.calling
    return (
        isinstance(calling, PythonValue)
        and any(calling.obj is conversion for conversion in _CONVERSIONS)
        and len(tx.calling_args) == 1
        and isinstance(tx.calling_args[0], TensorValue)
    )


def _reloadable(callable_value: Any) -> bool:
    """Whether loading the failing call's callable again (after its arguments, in the
    eager part) gives the same callable with no effect: a function, or a method that is
    a plain function on the receiver's class (no property, no `__getattr__`); the
    receiver's own loads are checked by `_receiver_reloads`."""
    if isinstance(callable_value, FunctionValue):
        return True
    if isinstance(callable_value, PythonValue):
        if isinstance(callable_value.obj, torch.nn.Module) and _disabled_callable(callable_value):
            # a module that runs eagerly, read from a variable: the same module again
            source = callable_value.source
            if isinstance(source, NNModuleSource):
                source = source.source
            return isinstance(source, LocalSource | GlobalSource | ClosureSource)
        if any(callable_value.obj is conversion for conversion in _CONVERSIONS):
            return True  # a builtin class loaded by name: the same class again
        plain = (types.FunctionType, types.BuiltinFunctionType, *_NUMPY_FUNCTION_TYPES)
        return isinstance(callable_value.obj, plain)
    if not isinstance(callable_value, MethodValue):
        return False
    function = getattr(callable_value.func, "obj", None)
    receiver = callable_value.self_value
    if not isinstance(function, types.FunctionType):
        return False
    if isinstance(receiver, PythonValue) and isinstance(receiver.obj, type):
        # a classmethod bound to the class it is loaded from (`Fn.apply`)
        found = inspect.getattr_static(receiver.obj, function.__name__, None)
        plain_metaclass = type(receiver.obj).__getattribute__ is type.__getattribute__
        return plain_metaclass and getattr(found, "__func__", None) is function
    if isinstance(receiver, PythonValue):
        if function.__name__ in getattr(receiver.obj, "__dict__", {}):
            return False
        cls = type(receiver.obj)
    else:
        cls = getattr(receiver, "cls", None)
    if cls is None or cls.__getattribute__ is not object.__getattribute__:
        return False
    return inspect.getattr_static(cls, function.__name__, None) is function


def _submodule_of_a_local(tx: Translator, callable_value: Any) -> bool:
    """Whether the failing call's callable is a submodule of a module a local holds
    (`self.inner`, `self.block.inner`), each step an entry of its owner's `_modules`
    (no instance or class attribute of that name): reading it again after the call's
    arguments, in the eager part, gives the same module with no effect."""
    if not (isinstance(callable_value, PythonValue) and callable_value.source is not None):
        return False
    members: list[str] = []
    source = callable_value.source
    while True:
        if isinstance(source, NNModuleSource):
            source = source.source
        elif isinstance(source, AttrSource | ModuleSource):  # `owner.name`
            members.append(source.member)
            source = source.source
        else:
            break
    if not members or not isinstance(source, LocalSource):
        return False
    root = tx.locals.get(source.local_name)
    owner = root.obj if isinstance(root, PythonValue) else None
    for member in reversed(members):
        if not isinstance(owner, torch.nn.Module) or member in owner.__dict__:
            return False
        if inspect.getattr_static(type(owner), member, _NOT_PLAIN) is not _NOT_PLAIN:
            return False
        owner = owner.__dict__.get("_modules", {}).get(member)
    return owner is not None and owner is callable_value.obj


_NOT_PLAIN = object()


def _receiver_reloads(tx: Translator, at: int) -> bool:
    """Whether the loads from `at` up to the failing call's method load (a local, a
    global or a closure variable, then attributes: `self.layer.f`) give its receiver
    again with no effect:
    each attribute read from an instance dict or a module's parameters, buffers and
    submodules (no property, descriptor or `__getattribute__` that could run code)."""
    receiver = getattr(tx.calling, "self_value", None)
    if not isinstance(tx.calling, MethodValue):
        return True  # no receiver: a function, loaded by name
    if not isinstance(receiver, PythonValue):
        return False
    insts = tx.instructions[tx.index_of[at] :]
    if insts[0].opname == "LOAD_FAST":  # the local's value when the call was made
        value = getattr(tx.locals.get(insts[0].argval), "obj", _NOT_PLAIN)
    elif insts[0].opname == "LOAD_GLOBAL":
        value = tx.f_globals.get(insts[0].argval, _NOT_PLAIN)
    elif insts[0].opname == "LOAD_DEREF":  # a free or cell variable: its contents now
        value = getattr(tx.cell(insts[0].argval).contents, "obj", _NOT_PLAIN)
    else:
        return False
    for inst in insts[1:]:
        if inst.method:  # the method load: what it binds must be the receiver
            return value is receiver.obj
        if inst.opname != "LOAD_ATTR" or value is _NOT_PLAIN:
            return False
        value = _plain_attribute(value, inst.argval)
    return False


def _plain_attribute(base: Any, member: str) -> Any:
    """`base.member` read from an instance dict or a module's stores; _NOT_PLAIN where
    reading it could run code or find it elsewhere."""
    if type(base).__getattribute__ is not object.__getattribute__:
        return _NOT_PLAIN
    on_class = inspect.getattr_static(type(base), member, None)
    if hasattr(type(on_class), "__set__") or hasattr(type(on_class), "__delete__"):
        return _NOT_PLAIN  # a property or another data descriptor
    own = getattr(base, "__dict__", None)
    if isinstance(own, dict) and member in own:
        return own[member]
    if isinstance(base, torch.nn.Module) and isinstance(own, dict):
        for store in ("_parameters", "_buffers", "_modules"):
            if member in own.get(store, {}):
                return own[store][member]
    return _NOT_PLAIN


def _carried(value: Any) -> bool:
    """Whether a value below the failing call can be handed on to the parts after the
    cut: a tensor or constant, the NULL of an enclosing call's callable slot, or the
    callable itself when it is a function or a class (a constant, guarded by identity)."""
    if value is NULL or _plain(value):
        return True
    if not isinstance(value, PythonValue):
        return False
    if type(value.obj) is slice:  # `x[:, : int(n)]`: a slice built before the call
        bounds = (value.obj.start, value.obj.stop, value.obj.step)
        return all(type(bound) in _PLAIN for bound in bounds)
    callable_types = type | types.BuiltinFunctionType | types.FunctionType
    return isinstance(value.obj, callable_types) or _torch_callable(value)


def _carried_container(value: Any, depth: int = 0) -> bool:
    """Whether a value below the failing call is a list, tuple or dict made in the frame
    (or a range) holding only values that can be handed on (`return [a, b], f(x)`): the
    graph before the cut gives it as it gives a local holding it (one object for every
    place holding it), and the part after the cut gets it as any local."""
    if depth > 4:
        return False
    if isinstance(value, BuiltinMethodValue):  # `t.mul` of `t.mul(f(x))`: made again
        return isinstance(value.receiver, TensorValue) and value.name.isidentifier()
    if isinstance(value, PythonValue):  # a range, a constant tuple of constants
        return type(value.obj) is range or _constant_tuple(value.obj)
    if getattr(value, "source", None) is not None:
        return False
    if isinstance(value, ListValue | TupleValue):
        if value.cls not in (list, tuple) or getattr(value, "maxlen", None) is not None:
            return False
        items = value.items
    elif isinstance(value, DictValue):
        if value.cls is not dict or value.attrs:
            return False
        if not all(type(key) in (str, int) for key in value.items):
            return False
        items = list(value.items.values())
    else:
        return False
    return all(_carried(item) or _carried_container(item, depth + 1) for item in items)


def _constant_tuple(obj: Any) -> bool:
    return type(obj) is tuple and all(type(item) in _PLAIN or _constant_tuple(item) for item in obj)


def _module_by_identity(tx: Translator, value: Any) -> bool:
    """Whether a value below the failing call is a module read from outside the frame and
    guarded by identity (`self.post` in `self.post(self.inner(x))`): handed on as the
    constant it is guarded to be. Not where modules are guarded by structure (a frame
    shared by the layers of a list), whose parts see another module each call."""
    return (
        isinstance(value, PythonValue)
        and isinstance(value.obj, torch.nn.Module)
        and value.source is not None
        and not tx.ctx.module_by_structure(value.source)
    )


def _fresh_container(tx: Translator, value: Any) -> bool:
    """Whether an argument of the failing call is a list or tuple of tensors and constants
    built in the frame that nothing else holds (`inner([x, x * 2])`): handed on to the
    eager part as a new one, as no other reference can tell it from the original."""
    if not isinstance(value, ListValue | TupleValue) or value.source is not None:
        return False
    if value.cls not in (list, tuple) or getattr(value, "maxlen", None) is not None:
        return False
    if not all(_plain(item) for item in value.items):
        return False
    if sum(1 for argument in tx.calling_args if argument is value) > 1:
        return False
    held = [*tx.locals.values(), *tx.stack]
    held += [cell.contents for cell in tx.cells.values()]
    held += [written for _, _, written in tx.ctx.attr_writes.values()]
    held += [written for _, written in tx.ctx.global_writes.values()]
    parent = tx.parent
    while parent is not None:
        held += [*parent.locals.values(), *parent.stack]
        parent = parent.parent
    return not any(_holds(item, value, depth=0) for item in held)


def _holds(container: Any, value: Any, depth: int) -> bool:
    """Whether `container` is `value` or holds it (lists, tuples, dicts, sets, cells and
    objects made in the frame, a few levels deep; deeper counts as holding it)."""
    if container is value:
        return True
    if depth > 4:
        return True
    if isinstance(container, ListValue | TupleValue):
        items = container.items
    elif isinstance(container, DictValue):
        items = list(container.items.values())
    elif isinstance(container, CellValue):
        items = [container.contents]
    elif isinstance(container, ObjectValue | FunctionValue | MethodValue):
        return True  # may hold it in a way not scanned here
    else:
        return False
    return any(_holds(item, value, depth + 1) for item in items)


def _plain(value: Any) -> bool:
    """A tensor, a constant, or a symbolic int (an output of the graph, as a size is)."""
    if isinstance(value, TensorValue):
        return True
    return isinstance(value, PythonValue) and type(value.obj) in (*_PLAIN, torch.SymInt)


def _may_read_own_locals(code: types.CodeType) -> bool:
    """Whether `code` may read its frame's variables: it loads the global `locals`, or
    calls the global `vars` without an argument."""
    if "locals" not in code.co_names and "vars" not in code.co_names:
        return False
    instructions = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    for index, inst in enumerate(instructions):
        if inst.opname not in ("LOAD_GLOBAL", "LOAD_NAME"):
            continue
        if inst.argval == "locals":
            return True
        if inst.argval == "vars":
            following = instructions[index + 1 : index + 3]
            calls = [i for i in following if i.opname in ("PRECALL", "CALL")]
            if calls and calls[0].arg == 0:
                return True
    return False


def _global_state_guards(ctx: CaptureContext) -> None:
    ctx.guards.global_state()


def _assert_fails(tx: Translator, error: Unsupported) -> bool:
    """Whether an `assert` statement with no message or a constant one raised `error`
    (opcodes_exceptions.plain_assert_raise), in the frame itself or in a callee the frame
    calls at its current instruction, not a `raise` statement's."""
    current = tx.current
    if current is None or tx.depth != 0 or not getattr(error, "plain_assert", False):
        return False
    return current.opname == "RAISE_VARARGS" or current.opname in _CALLS


def capture_frame(
    target: FrameTarget,
    f_locals: dict[str, Any],
    *,
    guard_context: list[CaptureContext] | None = None,
    dynamic: bool | None = False,
    history: SizeHistory | None = None,
    specialize_floats: bool = False,
    float_inputs: bool = True,
    transform_nodes: bool = True,
    batching_nodes: bool = True,
    autograd_function_nodes: bool = True,
    tensor_hook_nodes: bool = True,
    inline_regions: frozenset[Any] = frozenset(),
) -> CapturedFrame:
    """Interpret `target`'s code on `f_locals`; raise Unsupported when it cannot be one graph.

    `guard_context`, when given, receives the CaptureContext even when capture fails,
    so the caller can use the guards recorded up to the failure. `dynamic` and
    `history` choose the input dims traced with symbolic sizes (CaptureContext);
    `specialize_floats` turns symbolic floats operators take into constants (sym_numbers);
    `float_inputs=False` keeps float inputs constants (CaptureContext);
    `transform_nodes=False` breaks the graph at torch.func transforms and torch.cond
    instead of making them nodes (function_transforms), `batching_nodes=False` at
    torch.func.vmap traced into the graph (functorch_inline); `autograd_function_nodes=False`
    likewise at `Fn.apply` of autograd Functions (autograd_functions), and
    `tensor_hook_nodes=False` at `Tensor.register_hook` (tensor_hooks);
    `inline_regions` are nested_compile_region functions traced in place (control_flow).
    """
    start = time.perf_counter()
    ctx = CaptureContext(
        target.globals, dynamic=dynamic, history=history, specialize_floats=specialize_floats,
        float_inputs=float_inputs,
    )  # fmt: skip
    ctx.transform_nodes = transform_nodes
    ctx.batching_nodes = batching_nodes
    ctx.autograd_function_nodes = autograd_function_nodes
    ctx.tensor_hook_nodes = tensor_hook_nodes
    ctx.inline_regions = inline_regions
    ctx.modules_by_structure = target.modules_by_structure
    ctx.bound_locals = target.bound_locals
    ctx.frame_locals = f_locals
    if drives_module(target):  # inputs named as in forward's frame, where torch reads them
        ctx.renamed_inputs.update(  # in place: the shape env's symbol namer holds the dict
            module_driver_names(
                f_locals["self"], f_locals.get("args", ()), f_locals.get("kwargs", {})
            )
        )
    if guard_context is not None:
        guard_context.append(ctx)
    _global_state_guards(ctx)
    code = target.code
    real_cells = {
        name: (cell, ClosureSource(name))
        for name, cell in zip(code.co_freevars, target.function.__closure__ or ())
    }
    for name in cell_locals(code):  # a split frame's part: these locals hold its cells
        real_cells[name] = (f_locals[name], AttrSource(LocalSource(name), "cell_contents"))
    rng_state = torch.random.get_rng_state()
    grad_mode = torch.is_grad_enabled()
    tx: Translator | None = None
    try:
        with capturing(), side_effects.reading_through(ctx):
            arguments = _frame_locals(ctx, code, f_locals)
            tx = Translator(ctx, code, arguments, target.globals, real_cells=real_cells)
            result = tx.run()
            plan = OutputPlan(ctx)
            # hooks registered on inputs first: their handles are named before any use
            plan.prelude.extend(hook_replays(ctx, plan.expr))
            output_exprs = plan.expr(result)
            replays = plan.replays()
            check_aliases(ctx, plan.outputs)
            check_hooked_tensors_stay(ctx, plan.outputs)
            check_no_pending_cleanup(tx)
            check_regions_called_more_than_once(ctx)
            replays = plan.prelude + replays  # objects named once, before their first use
    except Unsupported as error:
        located = Unsupported(error.reason, user_frames(error.where))
        if tx is not None and tx.current is not None:
            located.offset = tx.current.offset
            located.contexts = open_contexts(tx)
            located.in_unknown_with = opens_unknown_with(tx) or (
                error.context_switch and bool(located.contexts)
            )
            if error.outside_context and tx.current.opname == "BEFORE_WITH":
                # NOTE: torch.compile cuts a frame only at a statement outside any block
                # whose graph so far has more than one call; it runs the rest eagerly
                # (its resume function meets the same `with`). With fewer calls, or
                # inside a block, the whole frame runs eagerly.
                calls = sum(1 for node in tx.ctx.graph.nodes if node.op.startswith("call"))
                located.in_unknown_with = calls <= 1 or bool(located.contexts)
                located.rest_eager = True
            elif error.read_not_resumed and tx.current.opname in _METHOD_LOADS:
                # NOTE: torch.compile cannot resume after an attribute read of the frame
                # itself that breaks: it cuts the frame at the last statement outside any
                # block whose graph so far has more than one call, and runs the rest
                # eagerly; with none, the whole frame runs eagerly. (Read in a callee, the
                # frame breaks at the call to it, as any break in a callee.)
                located.in_unknown_with = True
                located.rest_eager = True
            elif error.outside_context and _untraced_context(getattr(tx.calling, "obj", None)):
                # making a context torch.compile does not trace, in this frame: its resume
                # function meets the `with` on it (from outside now) and runs eagerly
                located.rest_eager = True
            located.checkpoints = _checkpoint_calls(tx)
            located.cannot_resume = (
                error.cannot_resume
                or _holds_unrebuildable_context(tx)
                or _holds_unfinished_generator(tx)
            )
            handed = "statement"
            if loop_iterator_not_resumed(tx):
                located.loop_not_resumed = True
            elif error.data_branch and tx.current.opname in _BRANCH_JUMPS:
                handed = _loop_iterators_handed_on(tx)
                nulls = _temporaries_handed_on(tx) if handed == "hand" else None
                if nulls is None:
                    handed = "statement"
                else:
                    located.branch_nulls = nulls
            if handed == "hand":
                located.branch_jump = tx.current.offset  # resumed at either of its targets
            located.call_cut_in_loops = _call_cut_in_loops(tx)
            located.call_cut = call_cut(tx, located.call_cut_in_loops)
            if tx.current.opname in _USER_DUNDER_OPS and not (error.callee or error.eager_call):
                # cut there: a break inside a user `__getitem__` or comparison method,
                # or a subscript of an object of a type capture does not model
                # (values.EAGER_BUILTIN_TYPES)
                located.call_cut = None
            calls = tx.current.opname in (*_CALLS, "CALL_FUNCTION_EX")
            if calls and isinstance(tx.calling, FunctionValue) and error.callee is not None:
                located.callee_code = tx.calling.code  # a function made in the frame
            if located.call_cut is not None and located.call_cut[1] == _open_withs(tx):
                # a cut at a statement's first call: for a break inside a function the
                # frame calls (torch.compile resumes after that call, its result on the
                # stack), at a torch function or tensor method that breaks, or at a call
                # that runs eagerly on its own (a disabled function, print, a logging
                # call) outside loops (inside one the loop runs eagerly); another
                # call that breaks (`id(t)`, giving a new number each call) runs with
                # its statement, so the graph after it does not depend on its result
                made_here = located.callee_code is not None
                if not (
                    (error.callee is not None and (error.callee.function is not None or made_here))
                    or (error.eager_call and not lies_in_loop(tx.code, tx.current.offset))
                    or _torch_callable(tx.calling)
                    or _disabled_callable(tx.calling)
                    or _tensor_conversion(tx)
                ):
                    located.call_cut = None
            if located.call_cut is not None:
                below = tx.stack[: located.call_cut[1]]
                nulls = [i for i, v in enumerate(below) if v is NULL]
                if located.call_cut[1] == len(tx.stack) + 2 + len(tx.calling_args):
                    nulls.append(len(tx.stack))  # a cut at the call itself: its NULL
                located.stack_nulls = tuple(nulls)
            if located.call_cut is not None and tx.current.opname in _CALLS:
                located.plain_args = all(
                    _plain(value) or _fresh_container(tx, value) for value in tx.calling_args
                ) and (_reloadable(tx.calling) or _submodule_of_a_local(tx, tx.calling))
                if located.plain_args and located.call_cut[1] == len(tx.stack):
                    located.plain_args = _receiver_reloads(tx, located.call_cut[0])
        located.callee = error.callee
        located.rest_from_checkpoint = error.rest_from_checkpoint
        if error.rest_from_checkpoint and tx is not None and tx.current is not None:
            # NOTE: torch.compile reads the items of a container it loops over when it
            # starts the loop: a break there (an RNN module in a ModuleList or a list)
            # runs the whole frame eagerly; a loop over a range reaches the module in its
            # body, and the frame is compiled up to the statement before the loop
            iterating = tx.current.opname in ("GET_ITER", "FOR_ITER")
            if iterating or any(iterator.kind != "range" for iterator in _loop_iterators(tx)):
                located.cannot_resume = True
        located.partial_methods = error.partial_methods
        located.escapes = isinstance(error, ExceptionRaised)
        if located.escapes and tx is not None and _assert_fails(tx, error):
            # NOTE: torch.compile compiles the graph before a failing `assert` of the
            # frame itself or of a callee (up to the call) and raises it after; a `raise`
            # leaving the frame runs it eagerly
            located.escapes = False
            located.rest_eager = True
        located.whole_frame = located.whole_frame or error.whole_frame
        if _may_read_own_locals(code):
            # NOTE: the part after a break holds the stack and the cells under its own
            # names: a `locals()` there would see those, not the user's variables (as
            # torch.compile's resume functions do); the frame runs eagerly instead
            located.whole_frame = True
        located.loop_not_resumed = located.loop_not_resumed or error.loop_not_resumed
        raise located from error.__cause__
    except RecursionError as error:
        raise Unsupported("capture recursed too deeply") from error
    finally:
        # NOTE: capture's own restores are no calls of the user's: a torch function mode
        # the user entered around this frame (a compiled callee of an eager frame runs
        # inside it) must not see them (it counted `_set_grad_enabled`)
        with torch._C.DisableTorchFunction():
            torch.random.set_rng_state(rng_state)
            torch._C._set_grad_enabled(grad_mode)
            torch.set_default_dtype(ctx.entry_default_dtype)
            mode, warn_only = ctx.entry_deterministic
            torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)
            for real in reversed(ctx.open_autocasts):  # capture stopped in an autocast block
                torch.amp.autocast_mode._exit_autocast(real)
            for real in reversed(ctx.open_inference_modes):  # or an inference_mode block
                torch.autograd.grad_mode._exit_inference_mode(real)
    ctx.guard_distinct_tensor_arguments()
    ctx.guard_written_objects_apart()
    ctx.output_node(plan.outputs)
    drop_redundant_grad_modes(
        ctx.graph, grad_mode, ctx.sym_numbers.steps_after
    )  # 5. switches that change nothing
    drop_undone_switches(
        ctx.graph, ctx.sym_numbers.steps_after
    )  # 6. a switch undone by the next one
    drop_unused_items(ctx.graph)  # 7. items of a result the code never read
    ctx.add_size_inputs()
    order_placeholders(ctx.graph, ctx.realized)  # 8. in torch.compile's order
    lend_stack_traces(ctx.graph)  # 9. reads made ahead traced where they are used
    _alias_example_values(ctx.graph)
    inputs = ctx.graph_inputs()
    graph_module = torch.fx.GraphModule(torch.nn.Module(), ctx.graph, class_name="GraphModule")
    graph_module.meta["frame"] = target.name  # the frame (or resume part) it was captured from
    return CapturedFrame(
        target=target,
        graph_module=graph_module,
        example_inputs=[example for _, example in inputs],
        input_sources=[source for source, _ in inputs],
        output_exprs=output_exprs,
        constants=plan.constants,
        replays=replays,
        ctx=ctx,
        capture_seconds=time.perf_counter() - start,
    )


def _alias_example_values(graph: torch.fx.Graph) -> None:
    """Each node's value also under `meta["example_value"]`, where torch.compile's
    graphs keep it (backends written for torch's graphs read it there)."""
    for node in graph.nodes:
        if "val" in node.meta:
            node.meta.setdefault("example_value", node.meta["val"])


_HANDED_AS_IS = (int, float, bool, str, type(None))  # a part hands them on unguarded


def _frame_locals(
    ctx: CaptureContext, code: types.CodeType, f_locals: dict[str, Any]
) -> dict[str, Value]:
    """The frame's locals as values; a part's local passed as UNBOUND stays unbound
    (its prologue deletes it), guarded to be UNBOUND in later calls. A local the code
    never reads before storing it (a dead argument, one a resume part no longer needs)
    is left out: it is no input and has no guards."""
    arguments = {}
    live = read_before_written(code)
    kept = set(code.co_cellvars) | set(cell_locals(code))
    handed_on = handed_on_only(code)
    stack = f_locals.get(STACK_LOCAL)
    if type(stack) is tuple:
        # the loops' iterators handed on first: a local holding one reads the same value
        for index, item in enumerate(stack):
            if type(item) in HANDED_ITERATORS:
                ctx.wrap(item, ItemSource(LocalSource(STACK_LOCAL), index))
    for name, value in f_locals.items():
        if name in code.co_freevars:
            continue
        if live is not None and name not in live and name not in kept:
            continue
        if value is UNBOUND:
            ctx.guards.id_match(LocalSource(name), UNBOUND)
            continue
        if name in handed_on and type(value) in _HANDED_AS_IS:
            # NOTE: immutable values only: an object capture models (an iterator also on
            # the stack, a list) is rebuilt by the part, the local with it
            arguments[name] = HandedOnValue(LocalSource(name))
            continue
        arguments[name] = ctx.wrap(value, LocalSource(name))
    return arguments


def context_rebuilds(value: ContextValue) -> bool:
    """Whether a context manager capture knows can be made again outside the graph as
    the same object (OutputPlan._context): a grad-mode or autocast context not entered,
    a set_grad_enabled made (it set the mode then), a nullcontext. A generator's
    context or one entered by hand holds state no new object has."""
    if value.kind == "grad" and value.kwargs.get("set_on_construction"):
        return value.saved is not None
    if value.kind in ("grad", "autocast"):
        return value.saved is None
    return value.kind == "null" and len(value.args) == 1


def _holds_unrebuildable_context(tx: Translator) -> bool:
    """Whether a local the rest of the frame reads, where capture stopped, holds a context
    manager no resume function can be handed (context_rebuilds): torch.compile runs such
    a frame eagerly (its calls compiled) rather than resume it."""
    live = live_locals(tx.code)
    current = tx.current
    if live is None or current is None or current.offset not in live:
        return False
    return any(
        isinstance(value, ContextValue) and not context_rebuilds(value)
        for name, value in tx.locals.items()
        if name in live[current.offset]
    )


def _holds_unfinished_generator(tx: Translator) -> bool:
    """Whether a local the rest of the frame reads, or a value on its stack, where capture
    stopped, is a generator made in the frame and not finished: no resume function can
    be handed it paused (its items are made when read, after the code between), so
    the frame runs eagerly (its calls compiled), as torch.compile skips it."""
    live = live_locals(tx.code)
    current = tx.current
    if current is None:
        return False
    values = list(tx.stack)
    if live is None:
        values += tx.locals.values()
    elif current.offset in live:
        values += [value for name, value in tx.locals.items() if name in live[current.offset]]
    return any(_unfinished_generator(value) for value in values)


def _unfinished_generator(value: Any) -> bool:
    if not (isinstance(value, IteratorValue) and value.kind == "generator"):
        return False
    steps = value.produce
    child = getattr(steps, "child", None)
    return value.position < len(value.items) or (child is not None and not child.done)


_NAMED_VALUES = (
    ObjectValue, ListValue, DictValue, SetValue, FunctionValue, IteratorValue, MethodValue,
    BuiltinMethodValue, PartialValue,
)  # fmt: skip


class OutputPlan:
    """Turns the returned Value into graph outputs plus a Python expression rebuilding it."""

    def __init__(self, ctx: CaptureContext) -> None:
        self.ctx = ctx
        self.outputs: list[TensorValue | torch.fx.Node] = []  # a node: a SymInt's
        self.constants: list[Any] = []
        # statements that build each mutable value made while capturing once, into a
        # local: a value reached twice (`return o, o`, a dict key also returned) stays
        # one object, as eagerly
        self.prelude: list[str] = []
        self._named: dict[Any, tuple[Value, str]] = {}
        # outside values read into a local before the replayed writes (_source_read)
        self._reads: dict[str, str] = {}
        # the closures whose cells are being made (a cell holding one of them: a cycle)
        self._making: set[int] = set()

    def _constant(self, value: Any) -> str:
        if has_symbolic(value):
            raise Unsupported("keeping a symbolic size outside the graph")
        for index, existing in enumerate(self.constants):
            if existing is value:
                return f"___k[{index}]"
        if self.ctx.modules_by_structure and _module_bound(value) and not is_made_in_frame(value):
            # NOTE: the entry serves every module of a class: one of them (or its method)
            # kept as a constant would be the one seen at compile time for all of them
            raise Unsupported(
                f"a {type(value).__name__} of the module read without a source leaves a frame "
                "compiled for every module of its class"
            )
        self.constants.append(value)
        return f"___k[{len(self.constants) - 1}]"

    def _output(self, value: TensorValue) -> str:
        for index, existing in enumerate(self.outputs):
            if existing is value:
                return f"___out[{index}]"
        self.outputs.append(value)
        return f"___out[{len(self.outputs) - 1}]"

    def _source_read(self, source: Source) -> str:
        """An outside value, read by its source. Where the frame's writes to outside
        objects are replayed, it is read into a local before them: an item the frame
        popped from an outside list is no longer at its place once the pop is replayed."""
        ctx = self.ctx
        if not (ctx.shadows or ctx.attr_writes or ctx.global_writes or ctx.input_hooks):
            return source.expr
        named = self._reads.get(source.expr)
        if named is None:
            named = f"___s{len(self._reads)}"
            self._reads[source.expr] = named
            self.prelude.append(f"{named} = {source.expr}")
        return named

    def _symbolic_int(self, obj: torch.SymInt | torch.SymFloat | torch.SymBool) -> str:
        """A symbolic number computed in the frame (`i + 1` of a symbolic `i`, `s * 2` of
        a symbolic float `s`, `s > 0.5`): a graph output, an int (float, bool) when the
        graph runs, as torch.compile returns it or hands it to a resume function."""
        node = self.ctx.sym_numbers.node_of(obj)
        if not isinstance(node, torch.fx.Node):
            return repr(node)  # the expression folded to a number
        read = ""
        if isinstance(obj, torch.SymFloat):
            # NOTE: as torch.compile, a float leaves the graph as a 0-d float64 tensor
            # (`torch.scalar_tensor`), read back with `.item()` where the graph ran
            node = self._float_output(node)
            read = ".item()"
        for index, existing in enumerate(self.outputs):
            if existing is node:
                return f"___out[{index}]{read}"
        self.outputs.append(node)
        return f"___out[{len(self.outputs) - 1}]{read}"

    def _float_output(self, node: torch.fx.Node) -> torch.fx.Node:
        """The 0-d float64 tensor node holding the float `node` computes (made once)."""
        for user in node.users:
            if user.target is torch.scalar_tensor and user in self.outputs:
                return user
        with self.ctx.graph.inserting_after(node):
            wrapped = self.ctx.graph.call_function(
                torch.scalar_tensor, (node,), {"dtype": torch.float64}
            )
        wrapped.meta["val"] = self.ctx.fake_mode.from_real(torch.zeros((), dtype=torch.float64))
        return wrapped

    def expr(self, value: Value) -> str:
        if isinstance(value, _NAMED_VALUES):
            named = self._named.get(id(value))
            if named is not None and named[0] is value:
                return named[1]
            built = self._build(value)
            name = f"___v{len(self.prelude)}"
            self.prelude.append(f"{name} = {built}")
            self._named[id(value)] = (value, name)
            return name
        if isinstance(value, TensorValue) and value.python_type is np.ndarray:
            return self._array_expr(value)
        return self._build(value)

    def _array_expr(self, value: TensorValue) -> str:
        """An ndarray made in the graph, built once however many places hold it (a local
        and a stack item): eagerly they are one object (`np.atleast_2d(a) is a`)."""
        key = ("ndarray", value.node)
        named = self._named.get(key)
        if named is not None:
            return named[1]
        built = self._build(value)
        name = f"___v{len(self.prelude)}"
        self.prelude.append(f"{name} = {built}")
        self._named[key] = (value, name)
        return name

    def _build(self, value: Value) -> str:
        made = self.ctx.classes_made
        if (isinstance(value, PythonValue) and any(value.obj is cls for cls in made)) or (
            isinstance(value, ObjectValue) and any(value.cls is cls for cls in made)
        ):
            # NOTE: eagerly each call makes a new class; the compiled code holds one
            raise NeedsEagerFrame("a class made by type() in the frame leaves the compiled part")
        if isinstance(value, ChoiceValue):
            # NOTE: eagerly it is one of min/max's items (a number, or the tensor itself);
            # the graph has only the picked value as a tensor
            raise NeedsEagerFrame(
                "the result of min()/max() of tensors and numbers leaves the compiled part"
            )
        for obj, source, shadow in self.ctx.shadows.values():
            if shadow is value:  # an outside list/dict: the same object, contents replayed
                return source.expr if source is not None else self._constant(obj)
        if isinstance(value, TensorValue):
            converted = self.ctx._converted_inputs.get(value.node)
            if converted is not None and isinstance(converted[0], NumpyTensorSource):
                return self._source_read(converted[0].source)  # an input array: itself
            if value.python_type is np.ndarray:  # an array from a tensor: NumPy's again
                return f"{self._output(value)}.numpy(force=True)"
            if isinstance(value.python_type, type) and issubclass(value.python_type, np.generic):
                return f"{self._output(value)}.numpy(force=True)[()]"  # a NumPy scalar
            if value.source is not None and value.node.op == "placeholder":
                return self._source_read(value.source)
            if _converted_subclass(value.python_type):
                # NOTE: a backend's compiled code may give plain tensors where eager's
                # operations on the subclass give the subclass (torch's default handling)
                convert = self._constant(as_tensor_subclass)
                return f"{convert}({self._output(value)}, {self._constant(value.python_type)})"
            return self._output(value)
        if isinstance(value, PythonValue):
            return self._python(value)
        if isinstance(value, HandedOnValue):
            return value.source.expr
        if isinstance(value, TupleValue):
            inner = "".join(f"{self.expr(item)}, " for item in value.items)
            if value.cls is tuple:
                return f"({inner})"
            if hasattr(value.cls, "_make"):
                return f"{self._constant(value.cls)}._make(({inner}))"
            if value.cls is torch.Size or _is_structseq(value.cls):
                return f"{self._constant(value.cls)}(({inner}))"
            # a user subclass: its own __new__ may take other arguments
            return f"___tuple_new({self._constant(value.cls)}, ({inner}))"
        if isinstance(value, ListValue):
            listed = "[" + ", ".join(self.expr(item) for item in value.items) + "]"
            if value.cls is collections.deque:
                return f"{self._constant(value.cls)}({listed}, {value.maxlen!r})"
            if value.cls is list:
                return listed
            # a user subclass: its own __init__ may take other arguments or add items
            attrs = ", ".join(f"{name!r}: {self.expr(item)}" for name, item in value.attrs.items())
            return f"___list_new({self._constant(value.cls)}, {listed}, {{{attrs}}})"
        if isinstance(value, DictValue):
            inner = ", ".join(
                f"{self._key_expr(key)}: {self.expr(item)}" for key, item in value.items.items()
            )
            if value.cls is dict:
                return "{" + inner + "}"
            if "default_factory" in value.attrs:
                factory = self.expr(value.attrs["default_factory"])
                return f"{self._constant(value.cls)}({factory}, {{{inner}}})"
            own_init = isinstance(value.cls.__init__, types.FunctionType)
            if (own_init or value.attrs) and value.cls.__new__ is dict.__new__:
                # a subclass whose own __init__ ran while capturing (not run again), or
                # an instance given attributes
                attrs = ", ".join(
                    f"{name!r}: {self.expr(item)}" for name, item in value.attrs.items()
                )
                return f"___dict_new({self._constant(value.cls)}, {{{inner}}}, {{{attrs}}})"
            if value.attrs:
                raise Unsupported(f"returning a {value.cls.__name__} with attributes set")
            return f"{self._constant(value.cls)}({{{inner}}})"
        if isinstance(value, SetValue):
            if any(isinstance(item, IdentityKey) for item in value.items):
                listed = "{" + ", ".join(self._key_expr(item) for item in value.items) + "}"
                if value.cls is set:
                    return listed
                return f"{self._constant(value.cls)}({listed})"
            if value.cls is frozenset:
                return self._constant(frozenset(value.items))
            if value.cls is not set:  # a user subclass keeping set's __new__ and __init__
                return f"{self._constant(value.cls)}({self._constant(frozenset(value.items))})"
            return self._constant(set(value.items)) + ".copy()"
        if isinstance(value, IteratorValue):
            return self._iterator(value)
        if isinstance(value, DictViewValue):
            return f"({self.expr(value.mapping)}).{value.kind}()"
        if isinstance(value, FunctionValue):
            return self._function(value)
        if isinstance(value, ObjectValue):
            # made first and named, its attributes set after: they may hold the object
            # itself (a tape whose entries' closures hold the variables holding the tape)
            made = f"___v{len(self.prelude)}"
            self.prelude.append(f"{made} = ___build_object({self._constant(value.cls)}, {{}})")
            self._named[id(value)] = (value, made)
            attrs = ", ".join(f"{name!r}: {self.expr(item)}" for name, item in value.attrs.items())
            if attrs:
                self.prelude.append(f"___set_attributes({made}, {{{attrs}}})")
            return made
        if isinstance(value, ContextValue):
            return self._context(value)
        if isinstance(value, MethodValue):
            # a user method bound to a value (`obj.f` kept across a break, returned):
            # bound again to the rebuilt object, as `obj.f` reads it eagerly
            return f"___method({self.expr(value.func)}, {self.expr(value.self_value)})"
        if isinstance(value, BuiltinMethodValue) and value.name.isidentifier():
            # a builtin method of a value (`t.add`, `lst.append`): read off the rebuilt value
            return f"({self.expr(value.receiver)}).{value.name}"
        if isinstance(value, PartialValue):
            args = "".join(f"{self.expr(item)}, " for item in value.args)
            kwargs = ", ".join(
                f"{name!r}: {self.expr(item)}" for name, item in value.kwargs.items()
            )
            return f"___partial({self.expr(value.func)}, {args}**{{{kwargs}}})"
        raise Unsupported(f"returning a {type(value).__name__} from the compiled frame")

    def _context(self, value: ContextValue) -> str:
        """A context manager made in the frame and not entered (kept in a local across a
        break, returned), made again as the same object."""
        if not context_rebuilds(value):
            raise Unsupported(f"keeping a {value.kind} context manager past a graph break")
        if value.kind == "grad" and value.kwargs.get("set_on_construction"):
            # set_grad_enabled(mode): made (it set the mode then), not entered; made
            # again without setting the mode a second time, with the mode it restores
            mode, previous = value.args[0], value.saved
            if previous is not None:
                return f"___grad_context({mode!r}, {previous!r})"
        elif value.kind == "grad" and value.saved is None:
            # a no_grad() / enable_grad() not entered: a fresh one is the same object
            return f"{self._constant(torch.enable_grad if value.args[0] else torch.no_grad)}()"
        elif value.kind == "null" and len(value.args) == 1:  # a nullcontext (not a profiler)
            return f"{self._constant(contextlib.nullcontext)}({self.expr(value.args[0])})"
        elif value.kind == "autocast" and value.saved is None:
            made = f"{self._constant(torch.autocast)}(*{self._constant(tuple(value.args))})"
            return f"___kept_context({made})"
        raise Unsupported(f"keeping a {value.kind} context manager past a graph break")

    def _iterator(self, value: IteratorValue) -> str:
        """An iterator made while capturing, made again over its items not yet read: a zip,
        map, filter or generator object as eagerly, else a tuple iterator."""
        if value.endless is not None:
            raise Unsupported("returning an endless iterator (itertools.count, repeat, cycle)")
        handed = value.produce
        if isinstance(handed, HandedSteps):  # a loop's iterator this part was handed
            if handed.real is None:
                # handed on unread: read (and guarded) now, as torch.compile guards a
                # stack value it hands on to the next resume function
                handed.real = handed.make()
            if value.position != len(value.items):
                raise Unsupported("an iterator handed on with items read but not taken")
            return self._iterator(handed.real)
        if isinstance(value.produce, ListSteps) and value.position == len(value.items):
            # the list itself, which the code after may still change
            steps = value.produce
            return f"___list_iterator({self.expr(steps.list)}, {steps.index})"
        if isinstance(value.produce, MappingSteps) and value.produce.reverse:
            return self._reversed_mapping(value)
        if value.zipped is not None and value.produce is None:
            # over the same sequences (a list the code after changes is seen), each read
            # from the zip's position on, as eagerly
            sequences, strict = value.zipped
            position = value.position
            rest = "".join(f"___list_iterator({self.expr(s)}, {position}), " for s in sequences)
            return f"zip({rest}strict={strict!r})"
        if isinstance(value.produce, LazySteps):
            return self._lazy(value)
        if value.produce is not None:
            self._read_ahead(value)
        items = value.items[value.position :]
        if value.kind == "range" and _plain_ints(items):
            return f"iter({self._constant(_as_range([item.obj for item in items]))})"
        listed = "(" + "".join(f"{self.expr(item)}, " for item in items) + ")"
        if value.kind == "zip" and all(isinstance(item, TupleValue) for item in items):
            rows = [row.items for row in items]  # type: ignore[attr-defined]
            if not rows:
                return "zip()"
            columns = [
                "(" + "".join(f"{self.expr(v)}, " for v in column) + ")" for column in zip(*rows)
            ]
            return f"zip({', '.join(columns)})"
        if value.kind == "map":
            return f"map(___identity, {listed})"
        if value.kind == "filter":
            return f"filter(___keep, {listed})"
        if value.kind == "generator":
            return f"___generator({listed}, {value.position > 0})"
        return f"iter({listed})"

    def _reversed_mapping(self, value: IteratorValue) -> str:
        """reversed(a dict or its view) made again as CPython's own over the same dict, past
        the items read, checking what this part changed of the dict as its next step
        would: a new size raises eager's error there (ReversedMappingIterator)."""
        steps = value.produce
        if value.position != len(value.items):
            raise Unsupported("a reversed() of a dict with items read but not taken")
        # NOTE: the dict's state is read through the capture's shadows (all a reader is
        # asked for by side_effects.current)
        if steps.changed(types.SimpleNamespace(ctx=self.ctx)) == "keys":
            raise Unsupported("a dict whose keys changed (at the same size) while iterated")
        mapping = self.expr(steps.container)
        arguments = f"{mapping}, {steps.kind!r}, {steps.index}, {steps.size}"
        return f"___reversed_mapping({arguments})"

    def _lazy(self, value: IteratorValue) -> str:
        """A map, filter, zip or enumerate made in the frame, left unfinished: the same
        builtin over its iterators made again (each over the same list, or the items a
        range or tuple has left, ...), its function the same, so nothing is read ahead
        and each item is made when eagerly it is. Where one of its iterators cannot be
        made again so (a generator, an iterator over a set), the frame runs eagerly."""
        steps = value.produce
        if steps.kind == "callable":  # reading ahead would call the function early
            raise Unsupported("an iter(function, sentinel) iterator leaving captured code")
        if value.position != len(value.items) or not _made_again_lazily(value):
            self._read_ahead(value)
        try:
            inner = [self.expr(iterator) for iterator in steps.iterators]
            function = "None" if steps.function is None else self.expr(steps.function)
        except Unsupported:
            self._read_ahead(value)
        if steps.kind in ("map", "filter"):
            return f"{steps.kind}({function}, {', '.join(inner)})"
        if steps.kind == "zip":
            return f"zip({''.join(f'{it}, ' for it in inner)})"
        return f"enumerate({inner[0]}, {steps.count})"

    def _read_ahead(self, value: IteratorValue) -> None:
        """Refuse to read ahead a lazy iterator (a generator, map or filter made in the
        frame) left unfinished where the compiled part ends: the frame runs eagerly.

        NOTE: reading its items now, at the break or the return, reads the tensors, lists
        and objects its body uses as they are now; eagerly they are read later, after the
        code that follows may have written them (`xs[1].add_(1)`, `xs[1] = y`, an append).
        Nothing of what that code does is known here, so no read ahead is sound."""
        raise NeedsEagerFrame(
            f"a {value.kind} made in the frame is left unfinished where the compiled part "
            "ends; its items are made eagerly when they are read, after later writes"
        )

    def _function(self, value: FunctionValue) -> str:
        """A closure made while capturing, made again from its code and its real cells."""
        self._making.add(id(value))
        try:
            return self._make_function(value)
        finally:
            self._making.discard(id(value))

    def _make_function(self, value: FunctionValue) -> str:
        cells = []
        for name, cell in zip(value.code.co_freevars, value.closure, strict=True):
            source = cell.source
            if isinstance(source, AttrSource) and source.member == "cell_contents":
                cells.append(f"{source.source.expr}, ")  # a real cell a part was handed
            elif source is None and not writes_free_variable(value.code, name):
                cells.append(f"{self._cell(value, cell)}, ")
            else:
                raise Unsupported(
                    f"returning the function {value.name!r}, whose closure holds a cell made "
                    "while capturing"
                )
        defaults = "(" + "".join(f"{self.expr(item)}, " for item in value.defaults) + ")"
        kwdefaults = ", ".join(
            f"{name!r}: {self.expr(item)}" for name, item in value.kwdefaults.items()
        )
        attributes = dict(value.attrs)
        if value.annotations is not None and "__annotations__" not in attributes:
            annotations = function_attr(value, "__annotations__")
            if annotations is None:
                raise Unsupported(f"returning the function {value.name!r} with its annotations")
            attributes["__annotations__"] = annotations
        attrs = ", ".join(f"{name!r}: {self.expr(item)}" for name, item in attributes.items())
        return (
            f"___make_function({self._constant(value.code)}, {self._constant(value.globals)}, "
            f"{defaults}, {{{kwdefaults}}}, ({''.join(cells)}), {{{attrs}}})"
        )

    def _cell(self, function: FunctionValue, cell: CellValue) -> str:
        """A cell made while capturing, as a new cell holding what it holds now, made once
        for all the closures that share it.

        NOTE: the code has run to where its values leave it (its return, a part's end),
        and no closure sharing the cell writes it (writes_free_variable): what the cell
        holds now is what it holds from then on, so a new cell is as good as the one the
        eager frame made."""
        named = self._named.get(id(cell))
        if named is not None and named[0] is cell:
            return named[1]
        if isinstance(cell.contents, FunctionValue) and id(cell.contents) in self._making:
            raise Unsupported(f"returning the function {function.name!r}, which calls itself")
        contents = "" if cell.contents is None else self.expr(cell.contents)
        name = f"___v{len(self.prelude)}"
        self.prelude.append(f"{name} = {self._constant(types.CellType)}({contents})")
        self._named[id(cell)] = (cell, name)
        return name

    def replays(self) -> list[str]:
        """Statements that redo the frame's attribute writes on outside objects, in order."""
        lines = []
        for key, (obj, source, value) in self.ctx.attr_writes.items():
            target = source.expr if source is not None else self._constant(obj)
            # a write object.__setattr__ made (inside a class's own __setattr__) skips it
            if value is DELETED:
                lines.append(f"{self._constant(replay_delete)}({target}, {key[1]!r})")
                continue
            setter = "object.__setattr__" if key in self.ctx.raw_attr_writes else "setattr"
            lines.append(f"{setter}({target}, {key[1]!r}, {self.expr(value)})")
        for (_, name), (scope, value) in self.ctx.global_writes.items():
            lines.append(f"{self._constant(scope)}[{name!r}] = {self.expr(value)}")
        for obj, source, shadow in self.ctx.shadows.values():
            target = source.expr if source is not None else self._constant(obj)
            lines.append(
                side_effects.replay_statement(target, shadow, self._item_expr, self._key_expr)
            )
        if self.ctx.graph.find_nodes(op="call_function", target=torch._C._set_grad_enabled):
            # NOTE: the graph switches grad mode as it runs; a backend that traces it
            # (aot_eager, inductor) keeps the switches' effect on its tensors but not on
            # the process, so the mode the frame leaves is set again after the graph
            setter = self._constant(torch._C._set_grad_enabled)
            lines.append(f"{setter}({torch.is_grad_enabled()!r})")
        if self.ctx.graph.find_nodes(op="call_function", target=torch.set_default_dtype):
            # likewise the default dtype the frame leaves
            setter = self._constant(torch.set_default_dtype)
            lines.append(f"{setter}({self._constant(torch.get_default_dtype())})")
        if self.ctx.graph.find_nodes(
            op="call_function", target=torch._C._set_deterministic_algorithms
        ):
            # and the deterministic mode
            setter = self._constant(torch._C._set_deterministic_algorithms)
            mode = torch.are_deterministic_algorithms_enabled()
            warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
            lines.append(f"{setter}({mode!r}, warn_only={warn_only!r})")
        return lines

    def _item_expr(self, value: Value) -> str:
        return self.expr(value)

    def _key_expr(self, key: Any) -> str:
        return self.expr(key_value(key))

    def _python(self, value: PythonValue) -> str:
        obj = value.obj
        if isinstance(obj, PendingHookHandle):
            return f"___h{obj.index}"  # named by the hook's replay (tensor_hooks.hook_replays)
        if (
            isinstance(obj, InlinedTransform | ClosureTransform | Pullback)
            and getattr(obj, "applied", None) is None
        ):
            raise Unsupported("a torch.func transform of a closure leaving the compiled frame")
        if isinstance(obj, FakeId):
            raise Unsupported("the id() of an object made in the frame leaves the frame")
        if has_symbolic(obj):
            if value.source is not None:
                return self._source_read(value.source)  # an int or float input made symbolic
            if isinstance(obj, torch.SymInt | torch.SymFloat | torch.SymBool):
                return self._symbolic_int(obj)
            if type(obj) in (torch.Size, tuple, list) and all(
                type(size) in (int, torch.SymInt) for size in obj
            ):  # a shape or strides with symbolic sizes: made again from them
                sizes = "".join(
                    f"{self._symbolic_int(size) if isinstance(size, torch.SymInt) else int(size)}, "
                    for size in obj
                )
                if type(obj) is list:
                    return f"[{sizes}]"
                return (
                    f"{self._constant(torch.Size)}(({sizes}))"
                    if type(obj) is torch.Size
                    else f"({sizes})"
                )
            raise Unsupported("returning a symbolic size from the compiled frame")
        if value.source is None and (isinstance(obj, BaseException) or obj is CAPTURED_TRACEBACK):
            # NOTE: one object made while capturing; eagerly each call makes a new one
            raise Unsupported(f"a {type(obj).__name__} made in the frame leaves the compiled part")
        if value.source is None and made_scalar(obj):
            # made again each call, as eager makes a new instance (its __new__ already ran)
            new = self._constant(scalar_base(type(obj)).__new__)
            return f"{new}({self._constant(type(obj))}, {self._constant(plain_value(obj))})"
        if obj is None or isinstance(obj, bool) or (type(obj) in (int, str)):
            return repr(obj)
        if type(obj) is float and obj == obj and obj not in (float("inf"), float("-inf")):
            return repr(obj)
        if value.source is not None and not is_constant(obj):
            return self._source_read(value.source)
        if value.source is None and is_made_in_frame(obj):
            return f"___copy_module({self._constant(obj)})"  # a new module each call, as eager
        if value.source is None and id(obj) in self.ctx.sliced_modules:
            # eager makes a new container each call, of the submodules then in place
            raise Unsupported(
                f"a {type(obj).__name__} made in the frame of modules it reads (a slice, "
                "nn.Sequential(*layers)) leaving the compiled frame"
            )
        if isinstance(obj, list | dict | set):
            return f"{self._constant(obj)}.copy()"
        return self._constant(obj)


def _module_bound(value: Any) -> bool:
    """An nn.Module, or a method bound to one."""
    owner = getattr(value, "__self__", None) if isinstance(value, types.MethodType) else value
    return isinstance(owner, torch.nn.Module)


def _identity(value: Any) -> Any:
    return value


def _keep(value: Any) -> bool:
    return True


def _plain_ints(items: list[Value]) -> bool:
    return all(isinstance(item, PythonValue) and type(item.obj) is int for item in items)


def _as_range(numbers: list[int]) -> range:
    """The range giving `numbers` (the items a range iterator has yet to give)."""
    if len(numbers) < 2:
        return range(numbers[0], numbers[0] + 1) if numbers else range(0)
    step = numbers[1] - numbers[0]
    return range(numbers[0], numbers[-1] + step, step)


def _list_iterator(items: list[Any] | tuple[Any, ...] | range, index: int) -> Any:
    """An iterator over a list (a tuple, a range), `index` items of it already read:
    its own iterator with that index set, as it would be eagerly (the list may have
    changed length since)."""
    iterator = iter(items)
    if index:
        iterator.__setstate__(index)  # type: ignore[attr-defined]
    return iterator


def _generator(items: tuple[Any, ...], started: bool) -> Any:
    """A generator made while capturing, made again over the items it has yet to give
    (`started`: it gave some already, so it waits at a yield, as eagerly).

    Capture read its rest ahead where the compiled part ended, sending None at each
    yield; a later `send` of another value would have changed what it yields, so that
    is an error, not a silent change.
    """
    replay = _replay(items, started)
    if started:
        next(replay)  # now waiting at the yield that gave the last item read
    return replay


def _replay(items: tuple[Any, ...], started: bool) -> Any:
    if started:
        _refuse_sent((yield))
    for item in items:
        _refuse_sent((yield item))


def _refuse_sent(sent: Any) -> None:
    if sent is not None:
        raise RuntimeError(
            "send() of a value to a generator that a compiled part made and ran ahead of "
            "time, sending None; compile the function with the generator's sends in one "
            "part (no graph break between its creation and its sends)"
        )


def _make_function(
    code: Any,
    f_globals: dict[str, Any],
    defaults: tuple,
    kwdefaults: dict,
    closure: tuple,
    attrs: dict[str, Any] | None = None,
) -> Any:
    function = types.FunctionType(code, f_globals, code.co_name, defaults or None, closure)
    function.__kwdefaults__ = kwdefaults or None
    function.__qualname__ = code.co_qualname
    for name, value in (attrs or {}).items():
        setattr(function, name, value)
    return function


def _build_object(cls: type, attrs: dict[str, Any]) -> Any:
    instance = object.__new__(cls)
    _set_attributes(instance, attrs)
    return instance


def _set_attributes(instance: Any, attrs: dict[str, Any]) -> None:
    """The attributes of an object rebuilt after a graph, set without its __setattr__."""
    state = getattr(instance, "__dict__", None)
    for name, value in attrs.items():
        if state is not None and not _slot_of(type(instance), name):
            state[name] = value
        else:  # a slot (a dataclass with slots=True, frozen or not): its descriptor sets it
            object.__setattr__(instance, name, value)


def _slot_of(cls: type, name: str) -> bool:
    """Whether `name` is a slot of `cls` or one of its bases."""
    return any(name in getattr(klass, "__slots__", ()) for klass in cls.__mro__)


def _list_subclass_new(cls: type, items: list[Any], attrs: dict[str, Any]) -> list[Any]:
    """An instance of a list subclass holding `items` and attributes `attrs`, made without
    running its __init__ (which ran while capturing: running it again could add or change
    items)."""
    instance = list.__new__(cls)
    list.extend(instance, items)
    for name, item in attrs.items():
        object.__setattr__(instance, name, item)
    return instance


def _dict_subclass_new(cls: type, items: dict[Any, Any], attrs: dict[str, Any]) -> dict[Any, Any]:
    """An instance of a dict (or OrderedDict) subclass holding `items` and attributes
    `attrs`, made without running its own __init__ or __setitem__ (both ran while
    capturing)."""
    instance = dict.__new__(cls)
    for name, item in attrs.items():
        object.__setattr__(instance, name, item)
    store = (
        collections.OrderedDict.__setitem__
        if isinstance(instance, collections.OrderedDict)
        else dict.__setitem__
    )
    for key, item in items.items():
        store(instance, key, item)
    return instance


def _register_source(name: str, source: str) -> str:
    filename = f"<ember-entry-{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return filename


def entry_source(
    frame: Any, name: str, calls_graph: bool, held: dict[Source, str] | None = None
) -> str:
    """The Python source of the entry function of one cache entry.

    `held` gives, for some graph inputs, an expression that reads the input without its
    source: a module tree guard's tensors, which its check just read (see `held_reads`).
    """
    lines = [f"def {name}(L, G):"]
    if calls_graph:
        held = held or {}
        for tree in sorted({expr.partition("[")[0] for expr in held.values()}):
            lines.append(f"    {tree} = {tree}_state.tensors")
        others = [source for source in frame.input_sources if source not in held]
        reads, arguments = shared_reads(others)
        lines.extend(f"    {statement}" for statement in reads)
        read = dict(zip(others, arguments))
        arguments = [held.get(source) or read[source] for source in frame.input_sources]
        lines.append(f"    ___out = ___compiled({', '.join(arguments)})")
    lines.extend(f"    {statement}" for statement in frame.replays)
    lines.append(f"    return {frame.output_exprs}")
    return "\n".join(lines) + "\n"


def held_reads(guards: CompiledGuards, sources: list[Source]) -> tuple[dict[Source, str], dict]:
    """Graph inputs that a module tree guard of `guards` holds: an expression for each
    (`___tree0[12]`: the 13th tensor of the first tree), and the trees' states by name.

    NOTE: a tree's `holds` leaves in its state the very tensors that its modules'
    `_parameters` / `_buffers` hold now (it checks their identity on every call), so an
    entry run right after its guards passed reads them there, by position, instead of
    walking each one's module path again. An entry run without its guards checked
    (skip_guard_eval_unsafe) must not: it runs `CompiledEntry.run_unchecked`.
    """
    wanted = set(sources)
    held: dict[Source, str] = {}
    states: dict[str, Any] = {}
    for tree in guards.trees:
        name = f"___tree{len(states)}"
        positions = {s: i for i, s in enumerate(tree.tensor_sources) if s in wanted}
        if positions:
            states[f"{name}_state"] = tree.state
            held.update((s, f"{name}[{i}]") for s, i in positions.items() if s not in held)
    return held, states


def shared_reads(sources: list[Source]) -> tuple[list[str], list[str]]:
    """Expressions for `sources`, where a value several of them are reached through
    (a module whose parameters are inputs) is read once into a local first.

    Returns (statements to run first, one expression per source). Parameters of one
    layer read `L['self']._modules['layers']._modules['0']` once instead of per tensor.
    """
    shared: collections.Counter[Source] = collections.Counter()
    for source in sources:
        base = source.base
        while base is not None:
            shared[base] += 1
            base = base.base
    statements: list[str] = []
    locals_: dict[Source, str] = {}

    def read(source: Source) -> str:
        if source in locals_:
            return locals_[source]
        base = source.base
        base_text = read(base) if base is not None else ""
        text = source.reconstruct(base_text)
        if text == base_text:  # a source that only marks its base (a module's kind)
            return text
        if shared[source] > 1:
            locals_[source] = f"___r{len(locals_)}"
            statements.append(f"{locals_[source]} = {text}")
            return locals_[source]
        return text

    return statements, [read(source) for source in sources]


def _as_plain_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """An input of a subclass with its own __torch_function__ as the graph takes it
    (PlainTensorSource): the same data and autograd history, as a torch.Tensor."""
    return tensor.as_subclass(torch.Tensor)


def _from_numpy(array: Any) -> torch.Tensor:
    """An ndarray or NumPy scalar input as the graph takes it (NumpyTensorSource)."""
    return torch.from_numpy(np.asarray(array))


def _float_tensor(value: float) -> torch.Tensor:
    """A float input as the graph takes it (FloatTensorSource)."""
    return torch.tensor(value, dtype=torch.float64)


def _untraced_context(obj: Any) -> bool:
    """A context manager class or function torch.compile does not trace."""
    try:
        return obj in UNTRACED_CONTEXTS or obj in UNTRACED_CONTEXT_FUNCTIONS
    except TypeError:  # an unhashable object
        return False


def _call_backend(backend: Callable[..., Any], frame: CapturedFrame) -> Any:
    """Run the backend on the frame's graph; its errors become BackendCompilerFailed."""
    graph = frame.graph_module
    # NOTE: a backend that traces the graph runs its torch.set_default_dtype nodes while
    # tracing; the default dtype in force is put back after it, as torch.compile does
    default_dtype = torch.get_default_dtype()
    deterministic = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    try:
        compiled = backend(graph, list(frame.example_inputs))
        if not callable(compiled):
            raise TypeError(
                f"it returned {compiled!r} ({type(compiled).__name__}), not a callable; a "
                "backend(gm, example_inputs) must return a callable taking the graph's inputs, "
                "such as gm.forward"
            )
    except Exception as error:
        code = frame.target.code
        where = f'{frame.target.name} (File "{code.co_filename}", line {code.co_firstlineno})'
        name = graph.meta.get("frame", type(graph).__name__)
        raise BackendCompilerFailed(backend, name, where, error) from error
    finally:
        torch.set_default_dtype(default_dtype)
        torch._C._set_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
    return compiled


def compile_entry(
    frame: CapturedFrame,
    backend: Callable[..., Any],
    guard_filter_fn: Callable[..., Any] | None = None,
    defer: bool = False,
) -> CompiledEntry:
    """Hand the graph to the backend, compile the guards, generate the entry function.

    `defer`: the backend compiles the graph at the entry's second call, the first runs
    it as captured (`deferred_compile`)."""
    calls_graph = frame.call_count > 0 or bool(frame.ctx.graph.find_nodes(op="output")[0].args[0])
    start = time.perf_counter()
    if calls_graph and defer:
        parts = DeferredParts(frame.target, frame.graph_module, tuple(frame.example_inputs))
        compiled = DeferredCompile(backend, parts)
    else:
        compiled = _call_backend(backend, frame) if calls_graph else None
    backend_seconds = time.perf_counter() - start
    guards = frame.ctx.guards.compile(guard_filter_fn, name=frame.target.name)
    frame.ctx.fake_mode.converter.forget_real_tensors()  # the entry keeps the fakes
    entry = make_entry(frame, guards, compiled if calls_graph else _NO_GRAPH)
    entry.artifacts.capture_seconds = frame.capture_seconds
    entry.artifacts.backend_seconds = backend_seconds
    return entry


_NO_GRAPH = object()


def make_entry(parts: Any, guards: CompiledGuards, compiled: Any) -> CompiledEntry:
    """The entry running `compiled` (`_NO_GRAPH`: none is called) when `guards` pass.

    `parts` has the frame's `target`, `graph_module`, `input_sources`, `output_exprs`,
    `replays` and `constants`: a `CapturedFrame`, or a capture record installed in a
    later process (`portable.install_parts`).
    """
    calls_graph = compiled is not _NO_GRAPH
    compiled = compiled if calls_graph else None
    graph = parts.graph_module
    target_name = parts.target.name
    name = (
        f"___entry_{''.join(c if c.isalnum() else '_' for c in target_name)}_{next(_entry_counter)}"
    )
    held, states = held_reads(guards, parts.input_sources) if calls_graph else ({}, {})
    source = entry_source(parts, name, calls_graph, held)
    filename = _register_source(name, source)
    scope: dict[str, Any] = {
        **states,
        "___compiled": compiled,
        "___k": parts.constants,
        "___build_object": _build_object,
        "___set_attributes": _set_attributes,
        "___grad_context": kept_grad_context,
        "___kept_context": kept_context,
        "___copy_module": copy.deepcopy,
        "___tuple_new": tuple.__new__,
        "___list_new": _list_subclass_new,
        "___dict_new": _dict_subclass_new,
        "___identity": _identity,
        "___keep": _keep,
        "___generator": _generator,
        "___list_iterator": _list_iterator,
        "___reversed_mapping": ReversedMappingIterator,
        "___make_function": _make_function,
        "___method": types.MethodType,
        "___partial": functools.partial,
        "___float_tensor": _float_tensor,
        "___from_numpy": _from_numpy,
        "___as_plain": _as_plain_tensor,
    }
    exec(compile(source, filename, "exec"), scope)  # noqa: S102
    unchecked = None
    if held:
        unchecked_name = f"{name}_unchecked"
        unchecked_source = entry_source(parts, unchecked_name, calls_graph)
        unchecked_file = _register_source(unchecked_name, unchecked_source)
        exec(compile(unchecked_source, unchecked_file, "exec"), scope)  # noqa: S102
        unchecked = scope[unchecked_name]
    artifacts = CaptureArtifacts(
        graph_code=graph.code if graph is not None else "",
        guard_code=guards.source,
        entry_code=source,
        compiled=compiled,
    )
    entry = CompiledEntry(
        guards, scope[name], artifacts, graph, compiled=compiled, run_unchecked=unchecked
    )
    if isinstance(compiled, DeferredCompile):
        compiled.bind(scope, entry)
    return entry


def _is_structseq(cls: type) -> bool:
    """A C struct sequence (torch.return_types.max, os.stat_result): built from one
    sequence, as `cls((a, b))`; `tuple.__new__(cls, ...)` refuses it."""
    return issubclass(cls, tuple) and hasattr(cls, "n_sequence_fields")
