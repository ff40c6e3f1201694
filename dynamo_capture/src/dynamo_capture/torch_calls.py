"""torch functions, torch classes and Tensor methods: graph nodes, folded metadata, contexts."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import types
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.operations import NotConstant, as_constant, constant_arguments, describe
from dynamo_capture.output_graph import has_symbolic
from dynamo_capture.state import is_compiling
from dynamo_capture.tensor_extremes import ChoiceValue
from dynamo_capture.values import (
    ContextValue,
    ListValue,
    PythonValue,
    TensorValue,
    TupleValue,
    Value,
)

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "DATA_METHODS",
    "INLINED_TORCH_MODULES",
    "METADATA_METHODS",
    "call_tensor_method",
    "call_torch",
    "construct_torch_class",
    "is_torch_callable",
]

# Tensor methods whose result is tensor data turned into Python values.
DATA_METHODS = {
    "item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__complex__",
    "data_ptr", "backward", "register_hook", "retain_grad", "untyped_storage", "storage",
    "__array__", "__reduce_ex__", "__repr__", "__str__", "__format__",
}  # fmt: skip
# Tensor methods answered from the example's metadata (static shapes).
METADATA_METHODS = {
    "size", "dim", "ndimension", "numel", "nelement", "stride", "is_contiguous",
    "is_floating_point", "is_complex", "element_size", "get_device",
    "is_signed", "has_names", "__len__", "is_inference", "is_pinned", "is_set_to",
}  # fmt: skip
_SHAPE_METHODS = {"size", "numel", "nelement", "stride", "__len__", "is_contiguous"}
# torch functions with global side effects: never folded, never put in a graph.
_SIDE_EFFECTS = {
    "manual_seed", "seed", "save", "load", "use_deterministic_algorithms", "set_printoptions",
    "set_num_threads", "set_default_dtype", "set_default_device", "set_rng_state",
    "set_default_tensor_type", "set_grad_enabled", "set_anomaly_enabled",
    "set_float32_matmul_precision", "set_flush_denormal",
}  # fmt: skip
# torch functions answered from metadata without a node.
_METADATA_FUNCTIONS = {
    torch.is_tensor, torch.is_floating_point, torch.is_complex, torch.numel,
    torch.is_grad_enabled, torch.get_default_dtype, torch.is_autocast_enabled,
    torch.is_inference_mode_enabled, torch.result_type, torch.promote_types,
    torch.can_cast, torch.is_storage, torch.broadcast_shapes,
}  # fmt: skip
# torch functions reading a random generator's state: each runs eagerly (a graph break)
_RNG_STATE_READS = frozenset(
    fn
    for fn in (torch.random.get_rng_state, torch.random.initial_seed,
               getattr(torch.cuda, "get_rng_state", None),
               getattr(torch.cuda, "get_rng_state_all", None))
    if fn is not None
)  # fmt: skip
_GRAD_CONTEXTS = {torch.no_grad: False, torch.enable_grad: True}
# torch functions that run a backward pass: a graph break at the call (as Tensor.backward)
_EAGER_AUTOGRAD = frozenset({torch.autograd.grad, torch.autograd.backward})
# torch.optim's modules of optimizers (not its lr schedulers): their functions traced
OPTIMIZER_MODULES = tuple(
    f"torch.optim.{name}"
    for name in ("optimizer", "sgd", "adam", "adamw", "rmsprop", "adagrad", "adamax",
                 "nadam", "radam", "asgd", "adadelta", "rprop")
)  # fmt: skip
# torch modules whose Python functions (and classes) are traced like user code.
INLINED_TORCH_MODULES = (
    "torch.nn.modules",
    "torch.utils._contextlib",
    "torch.nn.utils.parametrize",
    "torch.nn.utils.convert_parameters",
    "torch.testing",
    "torch.utils._pytree",
    "torch.nn.utils.clip_grad",
    "torch.utils._foreach_utils",
    # probability distributions: their classes are made and their methods traced as
    # user code (argument validation follows Distribution._validate_args, guarded)
    "torch.distributions",
    # the optimizers' functional updates (adam, _single_tensor_adam, _get_value, ...),
    # traced under `torch.compiler.is_compiling()` as torch.compile traces them
    *OPTIMIZER_MODULES,
)
# associative_scan(combine_mode="generic") is Python over slices and a vmap of the
# combine_fn, in eager as under torch.compile: its helpers are traced like user code
_ASSOCIATIVE_SCAN_MODULE = sys.modules.get("torch._higher_order_ops.associative_scan")
_ASSOCIATIVE_SCAN_HELPERS = (
    "generic_associative_scan",
    "wrap_combine_fn_flat",
    "safe_map",
    "_interleave",
)
# torch's Python functions traced like user code, as torch.compile traces them
INLINED_TORCH_FUNCTIONS = frozenset(
    {
        torch.jit._unwrap_optional,
        *(
            getattr(_ASSOCIATIVE_SCAN_MODULE, name)
            for name in _ASSOCIATIVE_SCAN_HELPERS
            if hasattr(_ASSOCIATIVE_SCAN_MODULE, name)
        ),
    }
)
# torch predicates about tensors' Python types and tracing: answered for plain tensors.
# whether arguments have a __torch_function__ override: False for plain tensors,
# parameters and constants, True for overrides capture runs (torch_function_dispatch);
# anything else breaks the graph (see call_torch)
_TORCH_FUNCTION_QUERIES = frozenset(
    {torch._C._has_torch_function, torch._C._has_torch_function_unary,
     torch._C._has_torch_function_variadic, torch.overrides.has_torch_function,
     torch.overrides.has_torch_function_unary, torch.overrides.has_torch_function_variadic}
)  # fmt: skip
_FOLDED = {
    torch.jit.is_scripting: False,
    torch.jit.is_tracing: False,
    torch._C._get_tracing_state: None,
    torch.are_deterministic_algorithms_enabled: None,
}


def is_torch_callable(obj: Any) -> bool:
    """A torch function that becomes a graph node (not a class, not a module's method).

    Python methods of torch classes (nn.Module internals) and torch's nested helpers
    are inlined like user code instead.
    """
    if isinstance(obj, type):
        return False
    module = getattr(obj, "__module__", None) or ""
    if module.split(".")[0] == "torch":
        if isinstance(obj, types.FunctionType):
            # Lambdas have no importable name, so a graph could not refer to them.
            return (
                obj not in INLINED_TORCH_FUNCTIONS
                and "." not in obj.__qualname__
                and obj.__name__ != "<lambda>"
                and not module.startswith(INLINED_TORCH_MODULES)
            )
        return True
    if isinstance(obj, types.BuiltinFunctionType | types.BuiltinMethodType):
        owner = getattr(obj, "__self__", None)
        owner_name = getattr(owner, "__name__", "") if owner is not None else ""
        return isinstance(owner_name, str) and owner_name.split(".")[0] == "torch"
    return isinstance(obj, torch._ops.OpOverload | torch._ops.OpOverloadPacket)


def _examples(values: Any) -> Any:
    if isinstance(values, TensorValue):
        return values.example
    if isinstance(values, list):
        return [_examples(item) for item in values]
    if isinstance(values, dict):
        return {key: _examples(item) for key, item in values.items()}
    return as_constant(values)


def _has_tensor_value(args: list[Value], kwargs: dict[str, Value]) -> bool:
    def visit(value: Value) -> bool:
        if isinstance(value, TensorValue):
            return True
        items = getattr(value, "items", None)
        if isinstance(items, list):
            return any(visit(item) for item in items)
        return False

    return any(visit(v) for v in [*args, *kwargs.values()])


def _check_no_torch_function_overrides(
    name: str, args: list[Value], kwargs: dict[str, Value]
) -> None:
    """Raise Unsupported where `torch.overrides.has_torch_function(...)` would hand the
    call to an override capture does not run: a torch function mode entered outside
    the frame, or an argument (or item of one) that is neither a constant, a tensor of
    a subclass keeping torch's default or turning handling off, nor one whose subclass
    defines its own override (capture runs that: torch_function_dispatch)."""

    def overridden(value: Value) -> bool:
        if isinstance(value, TensorValue):  # as torch checks: not exactly a Tensor, and
            kind = value.python_type  # handling not turned off (as nn.Parameter turns it)
            handler = getattr(kind, "__torch_function__", None)
            handler = getattr(handler, "__func__", handler)
            return (
                kind is not torch.Tensor and handler is not torch._C._disabled_torch_function_impl
            )
        items = getattr(value, "items", None)
        if isinstance(items, list | tuple):
            return any(overridden(item) for item in items)
        if isinstance(value, PythonValue):
            return hasattr(type(value.obj), "__torch_function__")
        return True  # an object capture does not see into

    from dynamo_capture.torch_function_dispatch import has_own_torch_function

    def opaque(value: Value) -> bool:  # an override capture does not run
        if isinstance(value, TensorValue):
            return overridden(value) and not has_own_torch_function(value.python_type)
        items = getattr(value, "items", None)
        if isinstance(items, list | tuple):
            return any(opaque(item) for item in items)
        return overridden(value)

    if torch._C._is_torch_function_mode_enabled() or any(
        opaque(v) for v in [*args, *kwargs.values()]
    ):
        raise Unsupported(
            f"torch.overrides.{name} on an argument with its own __torch_function__ (or "
            "under a torch function mode): capture does not run overrides"
        )


def call_torch(tx: Translator, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """A call to a torch function: a context, a folded constant, or a graph node."""
    name = getattr(fn, "__name__", "") or ""
    if name in ("is_compiling", "is_dynamo_compiling"):
        tx.ctx.read_compiling_state = True
        return PythonValue(True)
    from dynamo_capture.torch_function_dispatch import (
        call_with_overrides,
        dispatch_torch_function,
        overrides_apply,
    )

    if fn in _TORCH_FUNCTION_QUERIES:
        # NOTE: a mode entered outside the frame, or an argument whose override capture
        # does not run, breaks; the overrides capture runs answer True
        _check_no_torch_function_overrides(name, args, kwargs)
        return PythonValue(overrides_apply(tx, args, kwargs))
    if fn is torch.overrides.handle_torch_function:
        # `handle_torch_function(public_api, relevant_args, *args, **kwargs)` after a
        # has_torch_function check answered True: the call handed to its override
        public_api = as_constant(args[0])
        handled = dispatch_torch_function(
            tx, public_api, list(args[2:]), kwargs, kwargs_as_dict=True
        )
        if handled is None:
            raise Unsupported(f"handle_torch_function of {describe(args[0])} with no override")
        return handled
    if fn in _FOLDED:
        folded = _FOLDED[fn]
        return PythonValue(
            fn() if folded is None and fn is not torch._C._get_tracing_state else folded
        )
    if fn not in _GUARDED_STATE_READS:  # state queries: no override sees them
        handled = call_with_overrides(tx, fn, list(args), kwargs)
        if handled is not None:
            return handled
    if name in _SIDE_EFFECTS:
        raise Unsupported(f"torch.{name} changes global state; call it outside the compiled code")
    if fn in _RNG_STATE_READS:
        # NOTE: the state is no tensor operation: a backend tracing the graph would keep
        # the state read while compiling as a constant. torch.compile breaks here too.
        error = Unsupported(f"torch.{name}() reads the random generator's state eagerly")
        error.eager_call = True
        raise error
    if fn in _EAGER_AUTOGRAD:
        # NOTE: torch.compile breaks here too: the gradients are computed eagerly, on
        # the autograd graph the graph before the break recorded
        raise Unsupported(f"torch.autograd.{name} runs the backward pass eagerly")
    if fn is torch.autocast or fn is torch.amp.autocast:
        return _autocast_context(torch.autocast, args, kwargs)
    if fn in _METADATA_FUNCTIONS:
        try:
            return PythonValue(fn(*_examples(list(args)), **_examples(dict(kwargs))))
        except NotConstant as error:
            raise Unsupported(f"torch.{name} on values known only when it runs") from error
    _check_runs_eagerly(fn, kwargs)
    from dynamo_capture.operations import realize

    args = [realize(tx, a) for a in args]
    kwargs = {k: realize(tx, v) for k, v in kwargs.items()}
    if any(isinstance(a, ChoiceValue) for a in args):
        return _call_on_picked_tensor(tx, fn, args, kwargs)
    rewrite = _REWRITES.get(fn)
    rewritten = rewrite(tx, args, kwargs) if rewrite is not None else None
    if rewritten is not None:
        return rewritten
    if not _has_tensor_value(args, kwargs):
        if _changes_state(fn):
            # NOTE: folding runs the function now (and the factory probe runs it too):
            # a change of torch's state made while capturing would leak past the capture
            raise Unsupported(
                f"{getattr(fn, '__module__', 'torch')}.{name} changes torch's global state "
                "(it is not run while capturing); call it outside the compiled code"
            )
        try:
            real_args, real_kwargs = constant_arguments(args, kwargs)
        except NotConstant:
            pass
        else:
            if (
                not real_args
                and not real_kwargs
                and isinstance(fn, types.BuiltinFunctionType)
                and fn not in _GUARDED_STATE_READS
                and not _in_torch_code(tx)
            ):
                # NOTE: a C function of no arguments reads torch's state (a thread count,
                # a saved-tensors-hooks message): folded, its value would hold for later
                # calls unguarded; it runs eagerly
                raise Unsupported(
                    f"{getattr(fn, '__module__', None) or 'torch'}.{name}() reads torch's "
                    "state, which runs eagerly"
                )
            if not _returns_tensor(tx, fn, real_args, real_kwargs):
                result = fn(*real_args, **real_kwargs)
                if _makes_fresh_container(fn, result, real_args, real_kwargs):
                    # NOTE: eagerly each call gets a new list/dict/set (a defaultdict's
                    # factory): folded, every call would share the one made while
                    # capturing, and the frame's writes to it would go to that object.
                    # Its code is traced like user code instead (as torch.compile does)
                    from dynamo_capture.calls import inline_function

                    return inline_function(tx, fn, args, kwargs, None)
                return PythonValue(result)
    elif _launches_outside_dispatch(fn):
        # NOTE: the graph node is evaluated on fake tensors, which have no memory; a
        # function that launches its own kernel on its arguments' data pointers would
        # read and write through them (on a GPU: an illegal address, which breaks the
        # process's CUDA context for good). It runs eagerly, on the real tensors.
        error = Unsupported(
            f"{getattr(fn, '__module__', None) or 'torch'}.{name or type(fn).__name__} runs "
            "its own kernel on its tensors' memory, bypassing torch's dispatcher: it runs "
            "eagerly"
        )
        error.eager_call = True
        raise error
    if isinstance(fn, types.FunctionType):
        try:
            return tx.ctx.call("call_function", fn, tuple(args), kwargs)
        except Unsupported as error:
            if not getattr(error, "python_result", False):
                raise
        # NOTE: a Python function of torch's giving no tensor from tensors
        # (`F._none_or_dtype(mask)` reads the dtype): its body is traced, as torch.compile
        # does, so what it reads is guarded or breaks there (a tensor's data read in it)
        from dynamo_capture.calls import inline_function

        return inline_function(tx, fn, args, kwargs, None)
    return tx.ctx.call("call_function", fn, tuple(args), kwargs)


def _own_kernel_callables() -> tuple[type, ...]:
    """Types of torch's callables that launch kernels they build themselves."""
    try:
        from torch.cuda.jiterator import _JittedFunction
    except ImportError:  # a torch built without it
        return ()
    return (_JittedFunction,)


_OWN_KERNEL_CALLABLES = _own_kernel_callables()


def _launches_outside_dispatch(fn: Any) -> bool:
    """A callable of torch's that takes tensors without going through the dispatcher, so
    fake tensors cannot stand for its arguments: a private C function of `torch._C`
    itself (its public submodules `_nn`, `_fft`, `_linalg`, `_special`, ... dispatch), or
    one of `_OWN_KERNEL_CALLABLES` (jiterator's compiled functions)."""
    if isinstance(fn, _OWN_KERNEL_CALLABLES):
        return True
    return (
        isinstance(fn, types.BuiltinFunctionType)
        and getattr(fn, "__module__", None) == "torch._C"
        and (getattr(fn, "__name__", "") or "").startswith("_")
    )


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# Reads of the global state every entry's guard checks (grad and inference mode,
# autocast per device with its dtype, deterministic mode, default dtype): folded.
_GUARDED_STATE_READS = frozenset(
    getattr(torch, name)
    for name in (
        "is_grad_enabled", "is_inference_mode_enabled", "is_autocast_enabled",
        "is_autocast_cpu_enabled", "get_autocast_gpu_dtype", "get_autocast_cpu_dtype",
        "get_default_dtype", "are_deterministic_algorithms_enabled",
    )
    if hasattr(torch, name)
)  # fmt: skip


def _in_torch_code(tx: Translator) -> bool:
    """Whether the code being captured is torch's own (a context manager saving and
    restoring a state it reads): its reads are folded as they always were."""
    code = getattr(tx, "code", None)
    return code is not None and code.co_filename.startswith(_TORCH_DIR)


def _call_on_picked_tensor(
    tx: Translator, fn: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`torch.relu(max(a, b))` of tensors only: eagerly the function gets the very tensor
    picked, in the graph the picked value; alike where the function makes a new tensor
    from it. A function writing its argument in place or giving a view of it, a pick
    among numbers or of a tensor requiring grad breaks."""
    name = getattr(fn, "__name__", "") or ""
    picked: list[Value] = []
    for arg in args:
        if isinstance(arg, ChoiceValue):
            if arg.numbers or arg.grad or arg.derived:
                raise Unsupported(
                    f"torch.{name} of the result of min()/max() of tensors and numbers"
                )
            picked.append(arg.tensor)
        else:
            picked.append(arg)
    if name.endswith("_") or "out" in kwargs:
        raise Unsupported(f"torch.{name} writes the tensor min()/max() picked")
    result = tx.ctx.call("call_function", fn, tuple(picked), kwargs)
    if not isinstance(result, TensorValue) or result.example._is_view():
        raise Unsupported(f"torch.{name} of the tensor min()/max() picked gives a view of it")
    return result


def _requires_grad_(tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`t.requires_grad_(flag)`: the tensor itself where it already has that flag (no
    node); a cut at the call where it changes, as torch.compile breaks there: a tensor of
    the graph made a leaf of autograd (or an input's flag changed) runs eagerly."""
    try:
        flag = [as_constant(a) for a in args] or [as_constant(v) for v in kwargs.values()]
    except NotConstant as error:
        raise Unsupported("Tensor.requires_grad_ with a flag known only when it runs") from error
    requires_grad = bool(flag[0]) if flag else True
    if tensor.example.requires_grad == requires_grad:
        return tensor
    error = Unsupported(
        "Tensor.requires_grad_() changing the flag runs eagerly (a cut at the call)"
    )
    error.eager_call = True
    raise error


def _check_runs_eagerly(fn: Any, kwargs: dict[str, Value]) -> None:
    """Raise Unsupported for the torch calls torch.compile runs eagerly, breaking the graph
    at the call (its arguments computed in the graph before): `torch.autograd.grad`
    (which walks the autograd graph of the eager tensors), and a tensor made with
    `requires_grad=True` (a new leaf of the autograd graph, which a graph cannot return)."""
    if fn is torch.autograd.grad:
        error = Unsupported("torch.autograd.grad runs eagerly (a graph break at the call)")
    else:
        flag = kwargs.get("requires_grad")
        if not (isinstance(flag, PythonValue) and flag.obj is True):
            return
        name = getattr(fn, "__name__", repr(fn))
        error = Unsupported(
            f"torch.{name}(..., requires_grad=True) makes a leaf tensor, which runs "
            "eagerly (a graph break at the call); create it outside the compiled code"
        )
    error.eager_call = True
    raise error


def _addcdiv_with_value(
    tx: Translator, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """`torch.addcdiv(input, t1, t2, value=v)` on floating tensors and a number `v`: the
    graph holds `input + (t1 / t2) * v`, the ops torch.compile records for it. Other
    forms (integer tensors, which addcdiv rejects eagerly) stay one addcdiv node."""
    if len(args) != 3 or set(kwargs) != {"value"}:
        return None
    if not all(isinstance(a, TensorValue) and a.example.is_floating_point() for a in args):
        return None
    value = kwargs["value"]
    if not (isinstance(value, PythonValue) and type(value.obj) in (int, float)):
        return None
    quotient = tx.ctx.call("call_function", torch.div, (args[1], args[2]), {})
    scaled = tx.ctx.call("call_function", torch.mul, (quotient, value), {})
    return tx.ctx.call("call_function", torch.add, (args[0], scaled), {})


def tensor_of_ints(data: Any, dtype: torch.dtype = torch.int64, device: Any = None) -> torch.Tensor:
    """`torch.tensor(data, dtype=dtype)` of a (nested, rectangular) list or tuple of ints,
    built from each number as it is: traced with symbolic ints, it keeps them symbolic
    where torch.tensor reads their values (as torch.compile's own reference tensor
    constructor does); built here from torch.scalar_tensor, torch.stack and reshape."""
    shape: list[int] = []
    level = data
    while isinstance(level, list | tuple):
        shape.append(len(level))
        level = level[0] if level else None
    flat: list[Any] = []

    def flatten(item: Any) -> None:
        if isinstance(item, list | tuple):
            for inner in item:
                flatten(inner)
        else:
            flat.append(item)

    flatten(data)
    if not flat:
        return torch.empty(shape, dtype=dtype, device=device)
    items = [torch.scalar_tensor(number, dtype=dtype, device=device) for number in flat]
    return torch.stack(items).reshape(shape)


def _rectangular_ints(value: Value) -> Any:
    """The nested list of (constant or symbolic) ints a ListValue / TupleValue holds, or
    None where it holds anything else or is ragged."""
    if isinstance(value, PythonValue):
        if type(value.obj) is int or isinstance(value.obj, torch.SymInt):
            return value.obj
        return None
    if not isinstance(value, ListValue | TupleValue) or value.cls not in (list, tuple):
        return None
    items = [_rectangular_ints(item) for item in value.items]
    if any(item is None for item in items):
        return None
    if len({len(item) if isinstance(item, list) else -1 for item in items}) > 1:
        return None  # ragged, or numbers beside lists: torch.tensor raises; run it as it is
    return items


def _tensor_of_a_symbolic_number(
    tx: Translator, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """`torch.tensor(n)` of a symbolic int `n`: `torch.scalar_tensor(n, dtype=torch.int64)`,
    which takes the number as it is (torch.tensor reads its value, a guard fixing `n`);
    torch.compile keeps it symbolic too. (A symbolic float or bool a tensor is built
    from is specialized where the node is made.)"""
    from dynamo_capture.sym_numbers import is_symbolic_number

    if len(args) != 1 or not set(kwargs) <= {"dtype", "device"}:
        return None
    number = args[0]
    if not all(isinstance(v, PythonValue) for v in kwargs.values()):
        return None
    if isinstance(number, ListValue | TupleValue):
        return _tensor_of_symbolic_ints(tx, number, kwargs)
    if not (isinstance(number, PythonValue) and isinstance(number.obj, torch.SymInt)):
        return None
    if not is_symbolic_number(number.obj):
        return None
    options = {"dtype": PythonValue(torch.int64), **kwargs}
    return tx.ctx.call("call_function", torch.scalar_tensor, (number,), options)


def _tensor_of_symbolic_ints(tx: Translator, data: Value, kwargs: dict[str, Value]) -> Value | None:
    """`torch.tensor([n, n + 1])` of a list of ints some symbolic: one `tensor_of_ints`
    node, which takes the numbers as they are (torch.tensor would read and fix them)."""
    numbers = _rectangular_ints(data)
    if numbers is None or not has_symbolic(numbers):
        return None
    dtype = kwargs.get("dtype", PythonValue(torch.int64)).obj
    if dtype is None:
        dtype = torch.int64
    if not isinstance(dtype, torch.dtype) or dtype.is_complex or dtype is torch.bool:
        return None
    options = {"dtype": PythonValue(dtype), **{k: v for k, v in kwargs.items() if k != "dtype"}}
    return tx.ctx.call("call_function", tensor_of_ints, (data,), options)


def _as_tensor_of_a_tensor(
    tx: Translator, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """`torch.as_tensor(t)` of a tensor already of the dtype and device asked for: `t`
    itself, as eagerly (`torch.as_tensor(t) is t`); a graph node would make a new one."""
    if len(args) != 1 or not isinstance(args[0], TensorValue) or set(kwargs) - {"dtype", "device"}:
        return None
    try:
        options = {key: as_constant(value) for key, value in kwargs.items()}
    except NotConstant:
        return None
    example = args[0].example
    dtype, device = options.get("dtype"), options.get("device")
    if dtype is not None and dtype != example.dtype:
        return None
    if device is not None and (
        not isinstance(device, str | torch.device | int) or torch.device(device) != example.device
    ):
        return None
    return args[0]


# torch functions recorded as other ops where their arguments fit (None: as themselves)
_REWRITES = {
    torch.addcdiv: _addcdiv_with_value,
    torch.tensor: _tensor_of_a_symbolic_number,
    torch.as_tensor: _as_tensor_of_a_tensor,
}


# C functions named like these change torch's state (functorch's transform levels, hooks,
# dispatch keys): never run while capturing to fold them
_STATE_CHANGING = re.compile(
    r"^_?(set|enable|disable|push|pop|increment|decrement|enter|exit|reset|clear|register|"
    r"unregister|init|lazy_init)_|_(increment|decrement)_nesting$"
)


def _changes_state(fn: Any) -> bool:
    """A C function, or a Python function of torch's (torch.backends.*.set_flags), named
    like a setter of torch's state."""
    if not isinstance(fn, types.BuiltinFunctionType | types.BuiltinMethodType | types.FunctionType):
        return False
    return bool(_STATE_CHANGING.search(getattr(fn, "__name__", "") or ""))


def _returns_tensor(tx: Translator, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether `fn` makes tensors (a factory), judged by calling it on the meta device.

    With symbolic sizes among the arguments the probe runs under the capture's fake
    mode, so that it computes on the SymInts instead of specializing them.
    """
    symbolic = has_symbolic((args, kwargs))
    try:
        with tx.ctx.fake_mode if symbolic else contextlib.nullcontext(), torch.device("meta"):
            result = fn(*args, **kwargs)
    except Exception:  # noqa: BLE001
        return True
    return isinstance(result, torch.Tensor | list | tuple) and _contains_tensor(result)


_MUTABLE_CONTAINERS = (list, dict, set, bytearray)


def _makes_fresh_container(fn: Any, result: Any, args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether the Python function `fn` gave a list, dict or set it makes anew on each
    call (a second call gives another object), not one it keeps (a registry)."""
    if not isinstance(fn, types.FunctionType) or not isinstance(result, _MUTABLE_CONTAINERS):
        return False
    return fn(*args, **kwargs) is not result


def _contains_tensor(result: Any) -> bool:
    if isinstance(result, torch.Tensor):
        return True
    if isinstance(result, list | tuple):
        return any(_contains_tensor(item) for item in result)
    return False


def _autocast_context(cls: type, args: list[Value], kwargs: dict[str, Value]) -> ContextValue:
    """An autocast context (torch.autocast or a subclass such as torch.cpu.amp.autocast).

    NOTE: the real object is made now, as eager makes it at this call: its constructor
    reads the defaults in effect (the autocast dtype, the cache flag), checks the
    arguments (raising eager's errors) and may disable itself with a warning; capture
    keeps only the four values it settled on (methods.autocast_context)."""
    try:
        real_args, real_kwargs = constant_arguments(args, kwargs)
    except NotConstant as error:
        raise Unsupported("torch.autocast with arguments known only when it runs") from error
    from dynamo_capture.methods import autocast_context

    return autocast_context(cls(*real_args, **real_kwargs))


def construct_torch_class(
    tx: Translator, cls: type, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """A torch class called while capturing: grad-mode contexts, Size, device, dtype info."""
    if cls in _GRAD_CONTEXTS:
        context = ContextValue("grad", (_GRAD_CONTEXTS[cls],))
        if not args and not kwargs:
            return context
        function = args[0] if args else kwargs.get("orig_func")
        if function is None or (isinstance(function, PythonValue) and function.obj is None):
            raise Unsupported(f"torch.{cls.__name__} given None or another keyword raises")
        # `torch.no_grad(f)`: the class decorates f itself, as `torch.no_grad()(f)` does
        from dynamo_capture.calls import decorate_with_context

        return decorate_with_context(tx, context, function)
    if cls is torch.set_grad_enabled:
        mode = as_constant(args[0]) if args else as_constant(kwargs["mode"])
        # set_grad_enabled(mode) sets the mode when made (it works called as a function);
        # entering it changes nothing more, leaving it restores the mode before
        from dynamo_capture.methods import set_grad_mode

        previous = torch.is_grad_enabled()
        set_grad_mode(tx, bool(mode))
        return ContextValue("grad", (bool(mode),), {"set_on_construction": True}, saved=previous)
    if issubclass(cls, torch.autograd.profiler.record_function):
        return ContextValue("null")  # a profiler range: ignored in a graph, as torch.compile does
    if cls is torch.inference_mode:
        raise Unsupported("torch.inference_mode inside captured code")
    if cls in (torch._C.DisableTorchFunction, torch._C.DisableTorchFunctionSubclass):
        # NOTE: the graph's operations run on plain tensors, which no __torch_function__
        # override sees: the block records nothing (as torch.compile's graphs); a part
        # resumed inside it enters a fresh one around its eager code
        return ContextValue("torch_function", (cls,))
    if issubclass(cls, torch.autocast):
        return _autocast_context(cls, args, kwargs)
    if cls is torch.Size:
        items = args[0] if args else TupleValue([])
        from dynamo_capture.operations import sequence_items

        values = sequence_items(tx, items)
        try:
            return PythonValue(torch.Size([as_constant(v) for v in values]))
        except NotConstant as error:
            raise Unsupported("torch.Size of values known only when it runs") from error
    if cls in (torch.device, torch.finfo, torch.iinfo, torch.dtype):
        try:
            real_args, real_kwargs = constant_arguments(args, kwargs)
        except NotConstant as error:
            raise Unsupported(f"torch.{cls.__name__} of non-constant values") from error
        return PythonValue(cls(*real_args, **real_kwargs))
    raise Unsupported(f"creating a {cls.__module__}.{cls.__qualname__} inside captured code")


# In-place ops that change an input tensor's storage, not only its view of it: a graph
# returns new tensors and cannot replay them on the caller's object. (Those that change
# only its shape, strides or offset, `t_`, `unsqueeze_`, `as_strided_`, are captured: the
# compiled function restrides the caller's tensor after the graph, as eager left it.)
INPUT_METADATA_MUTATIONS = frozenset({"resize_", "resize_as_", "set_"})
INPUT_RESTRIDES = frozenset(
    {"unsqueeze_", "squeeze_", "t_", "transpose_", "swapdims_", "swapaxes_", "as_strided_"}
)


def call_tensor_method(
    tx: Translator, tensor: TensorValue, name: str, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """tensor.name(*args, **kwargs)."""
    from dynamo_capture.torch_function_dispatch import call_with_overrides

    method = getattr(torch.Tensor, name, None)
    if method is not None and name != "as_subclass":
        handled = call_with_overrides(tx, method, [tensor, *args], kwargs)
        if handled is not None:
            return handled
    if name == "as_subclass":
        return _as_subclass(tensor, args, kwargs)
    if name == "register_hook":
        from dynamo_capture.tensor_hooks import register_tensor_hook

        return register_tensor_hook(tx, tensor, args, kwargs)
    if name in DATA_METHODS:
        raise Unsupported(
            f"Tensor.{name}() turns tensor data into a Python value (data-dependent); "
            "keep the value a tensor"
        )
    if name == "storage_offset":
        # NOTE: guards do not fix an input's storage offset (a view of another slice of
        # its base passes them): read where the code runs, a graph break at the call
        error = Unsupported("Tensor.storage_offset() runs eagerly (a graph break at the call)")
        error.eager_call = True
        raise error
    if name == "requires_grad_":
        return _requires_grad_(tensor, args, kwargs)
    if name == "detach_" and (tensor.source is not None or tensor.example._is_view()):
        # NOTE: `y.detach_()` of an input takes the caller's tensor out of autograd
        # (no grad_fn, requires_grad False), which a graph's outputs cannot express:
        # the call runs eagerly (eager refuses it on a view, which runs eagerly too)
        error = Unsupported(
            "Tensor.detach_() of an input or a view runs eagerly (a cut at the call)"
        )
        error.eager_call = True
        raise error
    if name == "new_tensor" and len(args) == 1 and set(kwargs) <= {"dtype", "device"}:
        # `x.new_tensor([n, m])` of ints some symbolic: x's dtype and device unless given
        options = {
            "dtype": PythonValue(tensor.example.dtype),
            "device": PythonValue(tensor.example.device),
            **kwargs,
        }
        if all(isinstance(v, PythonValue) for v in options.values()):
            made = _tensor_of_symbolic_ints(tx, args[0], options)
            if made is not None:
                return made
    if name == "random_" or (name == "uniform_" and "from" in kwargs):
        # NOTE: these lower to ATen overloads named `from`, a Python keyword a graph's
        # code cannot spell (`aten.random.from`): the call runs eagerly, as in
        # torch.compile, which breaks there too
        error = Unsupported(f"Tensor.{name}() runs eagerly (a graph break at the call)")
        error.eager_call = True
        raise error
    if name in METADATA_METHODS:
        if tensor.data_dependent_shape and name in _SHAPE_METHODS:
            raise Unsupported(f"Tensor.{name}() of a tensor whose shape depends on data")
        try:
            real_args, real_kwargs = constant_arguments(args, kwargs)
        except NotConstant as error:
            raise Unsupported(f"Tensor.{name} with non-constant arguments") from error
        result = getattr(tensor.example, name)(*real_args, **real_kwargs)
        if name == "size":
            tx.ctx.note_size_read(result, tensor)
        return PythonValue(result)
    if name == "type" and not args and not kwargs:
        return PythonValue(tensor.example.type())
    if name in ("__setitem__",):
        from dynamo_capture.operations import set_item

        set_item(tx, tensor, args[0], args[1])
        return PythonValue(None)
    if name == "__getitem__":
        from dynamo_capture.operations import get_item

        return get_item(tx, tensor, args[0])
    if name in INPUT_METADATA_MUTATIONS and tensor.node.op == "placeholder":
        # NOTE: the caller's tensor object itself may get new storage; a compiled graph
        # returns new tensors and cannot replay that on the caller's object, so the
        # statement runs eagerly (a graph break) and capture resumes after it.
        raise Unsupported(f"Tensor.{name}() resizes or replaces an input tensor's storage")
    if name in INPUT_RESTRIDES and tensor.node.op == "placeholder" and tensor.example.requires_grad:
        # NOTE: autograd would take the gradient of the input in the shape it had when the
        # compiled graph ran, where eager's is in its new shape (a parameter's `w.t_()`
        # under no_grad): the statement runs eagerly
        raise Unsupported(f"Tensor.{name}() restrides an input requiring grad in place")
    if name in INPUT_RESTRIDES and tensor.node.op == "placeholder":
        # NOTE: the input's own fake (its example input, its placeholder's value) keeps
        # the geometry it was passed with; capture goes on with an alias restrided
        tensor.example = tensor.example.view(tensor.example.shape)
    if name in ("add", "add_", "sub", "sub_") and isinstance(kwargs.get("alpha"), TensorValue):
        return _add_tensor_alpha(tx, tensor, name, args, kwargs)
    value = kwargs.get("value")
    if name in _ADDC_METHODS and (
        isinstance(value, TensorValue) or (name.endswith("_") and value is not None)
    ):
        return _addc_with_value(tx, tensor, name, args, kwargs)
    from dynamo_capture.operations import realize

    args = [realize(tx, a) for a in args]
    kwargs = {k: realize(tx, v) for k, v in kwargs.items()}
    result = tx.ctx.call("call_method", name, (tensor, *args), kwargs)
    if name.endswith("_") and not name.endswith("__"):
        return tensor
    return result


# Tensor.addcdiv / addcmul with a `value`: rewritten as torch.compile rewrites the
# in-place ones (its dynamo decompositions), and for a tensor `value` (an optimizer's step
# size under `is_compiling()`), which the op itself would read as a Python number
_ADDC_METHODS = {"addcdiv_": "div", "addcdiv": "div", "addcmul_": "mul", "addcmul": "mul"}


def _addc_with_value(
    tx: Translator, tensor: TensorValue, name: str, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`t.addcdiv_(t1, t2, value=v)`: `t.add_(t1 / t2 * v)` (addcmul_: `t1 * t2`), the
    three operations of torch.compile's rewrite (there `div`, inductor's `fma`,
    `copy_`)."""
    from dynamo_capture.operations import realize

    rest = {key: value for key, value in kwargs.items() if key != "value"}
    if len(args) != 2 or rest or not all(isinstance(a, TensorValue) for a in args):
        raise Unsupported(f"Tensor.{name} with a `value` and other arguments")
    combine = getattr(torch, _ADDC_METHODS[name])
    product = tx.ctx.call("call_function", combine, tuple(realize(tx, a) for a in args), {})
    scaled = tx.ctx.call("call_function", torch.mul, (product, realize(tx, kwargs["value"])), {})
    in_place = name.endswith("_")
    result = tx.ctx.call("call_method", "add_" if in_place else "add", (tensor, scaled), {})
    return tensor if in_place else result


def _add_tensor_alpha(
    tx: Translator, tensor: TensorValue, name: str, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`t.add_(other, alpha=a)` with a tensor `a` (an optimizer's tensor lr under
    `is_compiling()`), which the op would read as a Python number: `t.add_(other * a)`."""
    from dynamo_capture.operations import realize

    rest = {key: value for key, value in kwargs.items() if key != "alpha"}
    if len(args) != 1 or rest or not isinstance(args[0], TensorValue):
        raise Unsupported(f"Tensor.{name} with a tensor `alpha` and other arguments")
    alpha = realize(tx, kwargs["alpha"])
    scaled = tx.ctx.call("call_function", torch.mul, (realize(tx, args[0]), alpha), {})
    result = tx.ctx.call("call_method", name, (tensor, scaled), {})
    return tensor if name.endswith("_") else result


def _as_subclass(tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`t.as_subclass(cls)`: the same graph value, which eager's operations treat as a
    `cls` (no override runs for the call itself)."""
    cls = args[0] if args else kwargs.get("cls")
    kind = cls.obj if isinstance(cls, PythonValue) else None
    if len(args) + len(kwargs) != 1 or not (
        isinstance(kind, type) and issubclass(kind, torch.Tensor)
    ):
        raise Unsupported("Tensor.as_subclass of something other than a tensor class")
    if kind is torch.Tensor:
        # NOTE: torch.compile breaks here too (it takes only a user subclass)
        raise Unsupported("Tensor.as_subclass(torch.Tensor) runs eagerly (a graph break)")
    handler = getattr(kind.__torch_function__, "__func__", kind.__torch_function__)
    if handler is torch._C._disabled_torch_function_impl:
        raise Unsupported(f"Tensor.as_subclass({kind.__qualname__}), a class turning overrides off")
    return TensorValue(tensor.node, tensor.example, None, kind, tensor.data_dependent_shape)


def is_compiling_function(obj: Any) -> bool:
    return obj is is_compiling
