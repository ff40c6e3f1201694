"""torch.func transforms and torch.cond inside captured code: one graph node per call.

    torch.func.grad(f, argnums=0)(x)     -> a node `grad_f(x)`, f a function known now
    torch.vmap(f, in_dims=(0, None))(x, y)
    torch.func.jvp(f, primals, tangents) -> traced (functorch_inline), else a node
                                            `jvp_f(primals, tangents)`
    torch.cond(pred, true_fn, false_fn, (x,))
        pred a tensor                    -> a node `cond_true_fn_false_fn(pred, x)`
        pred a Python bool               -> the branch it picks, inlined (guarded)
    torch.utils.checkpoint.checkpoint(fn, x, use_reentrant=False)
                                         -> fn traced in place (the recomputation is
                                            a memory choice of the backward)

The node calls torch's own public transform when the graph runs, so the result is
eager's; capture runs it on fake tensors only to learn the result's metadata (for
torch.cond: each branch on fakes, which must agree). The transformed function must be
known now: a function without closure cells or a module (guarded where it came
from), or a function made in the frame. A closure made in the frame whose cells hold
tensors and constants gives a node taking those tensors first (read when the
transformed function is called), which rebuilds the function from them each run.
Anything else (cells holding other objects, a non-constant option, `vjp`, which
returns a function) is Unsupported: the graph breaks there and the transform runs
eagerly, as before.

Unlike torch.compile, which inlines the transform's operators into the graph, the
node is opaque: graph counts match torch's, op counts do not.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.functional_calls import FUNCTIONAL_CALLS, call_functional
from dynamo_capture.functorch_inline import (
    InlinedTransform,
    Pullback,
    call_inlined_transform,
    call_jvp,
    call_pullback,
    call_vjp,
    inlined_transform,
)
from dynamo_capture.operations import NotConstant, as_constant
from dynamo_capture.reentrant_checkpoints import check_reentrant_region, outside_state
from dynamo_capture.values import (
    FunctionValue,
    ListValue,
    MethodValue,
    PythonValue,
    TensorValue,
    TupleValue,
    Value,
)

if TYPE_CHECKING:
    from dynamo_capture.frame_guards import FrameGuards
    from dynamo_capture.interpreter import Translator

__all__ = [
    "CHECKPOINT_POLICY",
    "CHECKPOINT_REGION",
    "TRANSFORMS",
    "ClosureTransform",
    "call_function_transform",
    "call_outside_transform",
]

# transform -> the option names it takes (all must be constants)
TRANSFORMS: dict[Callable[..., Any], tuple[str, ...]] = {
    torch.func.grad: ("argnums", "has_aux"),
    torch.func.grad_and_value: ("argnums", "has_aux"),
    torch.func.vmap: ("in_dims", "out_dims", "randomness", "chunk_size"),
    torch.vmap: ("in_dims", "out_dims", "randomness", "chunk_size"),
    torch.func.jacrev: ("argnums", "has_aux", "chunk_size"),
    torch.func.jacfwd: ("argnums", "has_aux", "randomness"),
    torch.func.hessian: ("argnums",),
}

_TRANSFORMED = "__ember_transformed__"  # set on the functions made here
_HIGHER_ORDER_COND = torch.ops.higher_order.cond  # the operator torch.cond calls
_TORCH_COND = torch.cond
_WHILE_LOOP = torch.while_loop
_MAP = sys.modules["torch._higher_order_ops.map"].map  # loaded with torch.cond


def call_function_transform(
    tx: Translator, fn: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """The value of `fn(*args, **kwargs)` when `fn` is a transform, a function it made,
    `torch.func.jvp` or `torch.cond`; None for any other callee."""
    if fn in TRANSFORMS:
        return _make_transformed(tx, fn, args, kwargs)
    if isinstance(fn, InlinedTransform):
        return call_inlined_transform(tx, fn, args, kwargs)
    if isinstance(fn, ClosureTransform):  # its cells are read now, as the call reads them
        closure = _closure_over_tensors(fn.function)
        if closure is None:
            raise Unsupported(
                f"torch.func.{fn.transform.__name__} of a closure whose cells changed"
            )
        target = _transformed_closure(fn.transform, fn.options, closure[0], len(closure[1]))
        return _node(tx, target, (*closure[1], *args), kwargs)
    if getattr(fn, _TRANSFORMED, False):
        return _node(tx, fn, tuple(args), kwargs)
    if fn is torch.func.vjp:
        if not tx.ctx.transform_nodes:
            raise Unsupported("torch.func.vjp: the backend cannot compile functorch's calls")
        return call_vjp(tx, args, kwargs)
    if isinstance(fn, Pullback):
        return call_pullback(tx, fn, args, kwargs)
    if fn is torch.func.jvp:
        return _jvp(tx, args, kwargs)
    if fn is _TORCH_COND or fn is _HIGHER_ORDER_COND:
        return _cond(tx, args, kwargs)
    if fn is _WHILE_LOOP:
        return _while_loop(tx, args, kwargs)
    if fn is _MAP:
        return _map(tx, args, kwargs)
    if fn is torch.utils.checkpoint.checkpoint:
        return _checkpoint(tx, args, kwargs)
    if fn in FUNCTIONAL_CALLS:
        return call_functional(tx, args, kwargs)
    return None


@functools.cache
def _transform_wrapper_codes() -> dict[types.CodeType, Callable[..., Any]]:
    """The code of the function each torch.func transform returns -> the transform
    (hessian's is jacfwd's, of jacrev's)."""
    codes: dict[types.CodeType, Callable[..., Any]] = {}
    for transform in (
        torch.func.grad,
        torch.func.grad_and_value,
        torch.func.vmap,
        torch.func.jacrev,
        torch.func.jacfwd,
    ):
        wrapper = transform(torch.neg)
        if isinstance(wrapper, types.FunctionType):
            codes.setdefault(wrapper.__code__, transform)
    return codes


def call_outside_transform(
    tx: Translator, fn: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """A function a torch.func transform made outside the frame (`G =
    torch.func.grad(f)` at import), called in it: traced as the same transform made in
    the frame (its function and options read from the wrapper's cells, the options
    guarded); None for any other callee."""
    from dynamo_capture.calls import call
    from dynamo_capture.sources import CellContentsSource

    obj = fn.obj
    if not isinstance(obj, types.FunctionType):
        return None
    transform = _transform_wrapper_codes().get(obj.__code__)
    if transform is None or not obj.__closure__:
        return None
    names = obj.__code__.co_freevars
    cells = {name: cell.cell_contents for name, cell in zip(names, obj.__closure__, strict=True)}
    if "func" not in cells or cells.get("_preallocate_and_copy"):
        return None

    def cell_source(name: str) -> Any:
        return None if fn.source is None else CellContentsSource(fn.source, names.index(name), name)

    options: dict[str, Value] = {}
    for name in TRANSFORMS[transform]:
        if name in cells:
            if fn.source is not None:
                tx.ctx.guards.equals_match(cell_source(name), cells[name])
            options[name] = PythonValue(cells[name])
    function = tx.ctx.wrap(cells["func"], cell_source("func"))
    made = _make_transformed(tx, transform, [function], options)
    return call(tx, made, args, kwargs)


def _node(tx: Translator, target: Any, args: tuple[Any, ...], kwargs: dict[str, Value]) -> Value:
    """A node calling `target`; Unsupported where the backend refused such nodes."""
    if not tx.ctx.transform_nodes:
        raise Unsupported(
            f"{target.__name__}: the backend cannot compile torch.func transforms or "
            "torch.cond as graph nodes, so the call runs eagerly"
        )
    if tx.ctx.jvp_nesting:
        # NOTE: torch's own transform would not know of the traced jvp around it (its
        # forward-AD nesting is Python state of torch.func): a jvp inside would open a
        # second dual level, which forward AD refuses
        raise Unsupported(f"{target.__name__} inside a torch.func.jvp traced into the graph")
    tx.ctx.transform_nodes_made += 1
    return tx.ctx.call("call_function", target, args, kwargs)


def _make_transformed(
    tx: Translator, transform: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    name = transform.__name__
    if not args:
        raise Unsupported(f"torch.func.{name} called without the function to transform")
    options = _options(name, TRANSFORMS[transform], args[1:], kwargs)
    try:
        function = _known_function(args[0], f"the function given to {name}")
    except Unsupported:
        # a closure over the frame's values: traced into the graph, or a node taking
        # the tensors of its cells as arguments
        inlined = inlined_transform(name, args[0], options, None)
        closure = None
        if _closure_over_tensors(args[0]) is not None:
            closure = ClosureTransform(transform, options, args[0])
        if inlined is not None and tx.ctx.transform_nodes:
            inlined.fallback = closure
            return PythonValue(inlined)
        if closure is None:
            raise
        return PythonValue(closure)
    applied = transform(function, **options)

    def transformed(*call_args: Any, **call_kwargs: Any) -> Any:
        return applied(*call_args, **call_kwargs)

    _name(transformed, f"{name}_{_function_name(function)}")
    if tx.ctx.transform_nodes:  # traced into the graph as torch.compile does, where it can
        inlined = inlined_transform(name, args[0], options, transformed)
        if inlined is not None:
            return PythonValue(inlined)
    return PythonValue(transformed)


def _jvp(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if not args:
        raise Unsupported("torch.func.jvp called without the function")
    options = _options("jvp", ("has_aux",), [], {k: v for k, v in kwargs.items()})
    if len(args) == 3 and isinstance(options.get("has_aux", False), bool):
        traced = call_jvp(tx, args[0], args[1], args[2], options.get("has_aux", False))
        if traced is not None:  # as torch.compile traces it, where it can
            return traced
    try:
        function = _known_function(args[0], "the function given to jvp")
    except Unsupported:
        closure = _closure_over_tensors(args[0])
        if closure is None:
            raise
        make, cells = closure

        def jvp_closure(*cells_and_inputs: Any) -> Any:
            primals, tangents = cells_and_inputs[len(cells) :]
            fn = make(cells_and_inputs[: len(cells)])
            return torch.func.jvp(fn, primals, tangents, **options)

        _name(jvp_closure, f"jvp_{args[0].name}")  # type: ignore[attr-defined]
        return _node(tx, jvp_closure, (*cells, *args[1:3]), {})

    def jvp(primals: Any, tangents: Any) -> Any:
        return torch.func.jvp(function, primals, tangents, **options)

    _name(jvp, f"jvp_{_function_name(function)}")
    return _node(tx, jvp, tuple(args[1:3]), {})


class ClosureTransform:
    """`torch.func.jacrev(f)` of a closure `f` made in the frame over tensors: called in
    captured code, a node taking the cells' tensors (read at the call) first."""

    __slots__ = ("function", "options", "transform")

    def __init__(self, transform: Any, options: dict[str, Any], function: FunctionValue):
        self.transform, self.options, self.function = transform, options, function


def _closure_over_tensors(
    value: Value, guards: FrameGuards | None = None
) -> tuple[Callable[..., Any], list[Value]] | None:
    """For a function made in the frame whose cells hold tensors and constants: a maker
    of the real function from the cells' tensors, and those tensors (as Values); else None.

    The node runs the transform on a function rebuilt each call from the tensors the
    graph gives it, so nothing of a compile-time value is kept but the constants, which
    capture derived (and guarded) like any other. With `guards`, a cell may also hold a
    module read from the frame's inputs or globals (`self` of the forward making the
    function): kept as it is, guarded to be that very module (its parameters are read
    when the node runs, as the graph reads a global module's)."""
    from dynamo_capture.values import CellValue

    if not isinstance(value, FunctionValue) or not value.closure or value.kwdefaults:
        return None
    try:
        defaults = tuple(as_constant(item) for item in value.defaults)
    except NotConstant:
        return None
    tensors: list[Value] = []
    layout: list[tuple[str, Any]] = []  # ("tensor", index) or ("constant", value)
    for cell in value.closure:
        contents = cell.contents if isinstance(cell, CellValue) else None
        if isinstance(contents, TensorValue):
            layout.append(("tensor", len(tensors)))
            tensors.append(contents)
            continue
        module = _guarded_module(contents, guards)
        if module is not None:
            layout.append(("constant", module))
            continue
        try:
            layout.append(("constant", as_constant(contents) if contents is not None else None))
        except NotConstant:
            return None
        if contents is None:
            return None
    code, scope, name = value.code, value.globals, value.name

    def make(cell_tensors: tuple[Any, ...]) -> Callable[..., Any]:
        cells = tuple(
            types.CellType(cell_tensors[item] if kind == "tensor" else item)
            for kind, item in layout
        )
        return types.FunctionType(code, scope, name, defaults or None, cells)

    return make, tensors


def _transformed_closure(
    transform: Any, options: dict[str, Any], make: Callable[..., Any], count: int
) -> Callable[..., Any]:
    def transformed(*cells_and_args: Any, **call_kwargs: Any) -> Any:
        fn = make(cells_and_args[:count])
        return transform(fn, **options)(*cells_and_args[count:], **call_kwargs)

    _name(transformed, f"{transform.__name__}_{_function_name(make((None,) * count))}")
    return transformed


# checkpoint's own options -> the values each may have to be traced: those that change
# only what the backward keeps or checks (early_stop, determinism_check), not a value
_CHECKPOINT_OPTIONS: dict[str, tuple[Any, ...]] = {
    "context_fn": (torch.utils.checkpoint.noop_context_fn,),
    "determinism_check": ("default", "none"),
    "debug": (False,),
    "early_stop": (True, False),
    # NOTE: without it eager's recomputation draws other random numbers than its forward
    # did (another dropout mask in the backward): traced, the backward would use the
    # forward's
    "preserve_rng_state": (True,),
}

# node.meta key: the checkpoint call (a number per capture) a node of the graph was made
# by; a backend may recompute the nodes of one region in the backward instead of saving
# their results, as checkpoint does
CHECKPOINT_REGION = "ember_checkpoint_region"
# node.meta key: the policy function of a selective checkpoint (context_fn=
# functools.partial(create_selective_checkpoint_contexts, policy)), which a backend may
# ask per ATen op whether to save its result or recompute it
CHECKPOINT_POLICY = "ember_checkpoint_policy"


def _policy_option(tx: Translator, options: dict[str, Value]) -> Callable | None:
    """The policy of a selective checkpoint's context_fn (taken out of `options`, and
    guarded by identity), or None, the option left in `options`."""
    value = options.get("context_fn")
    if not isinstance(value, PythonValue) or value.source is None:
        return None
    policy = _selective_policy(value.obj)
    if policy is not None:
        tx.ctx.guards.id_match(value.source, value.obj)
        del options["context_fn"]
    return policy


def _selective_policy(context_fn: Any) -> Callable | None:
    """The policy function of a selective checkpoint's context_fn, or None where
    context_fn is anything else (which may change values: it runs eagerly)."""
    if not (
        isinstance(context_fn, functools.partial)
        and context_fn.func is torch.utils.checkpoint.create_selective_checkpoint_contexts
    ):
        return None
    try:
        caching, _ = context_fn()  # builds two dispatch modes; runs nothing
    except (TypeError, ValueError) as error:  # eager raises it at the call
        raise Unsupported(f"torch.utils.checkpoint.checkpoint: {error}") from error
    return getattr(caching, "policy_fn", None)


def _checkpoint(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`checkpoint(fn, *args, use_reentrant=False)`: fn traced into the graph.

    The values and gradients are those of fn: checkpointing only chooses to recompute
    fn's intermediates in the backward rather than save them, a choice of memory. Any
    option that changes values (a context_fn, preserve_rng_state=False) is Unsupported:
    the call runs eagerly, as before; but a selective checkpoint's context_fn
    (`functools.partial(create_selective_checkpoint_contexts, policy)`), which chooses
    only what is saved, gives its nodes the policy (CHECKPOINT_POLICY) for the backend. use_reentrant=True (or left out, which warns as
    eager does) is traced alike where that is sound (reentrant_checkpoints), else
    Unsupported.
    """
    from dynamo_capture.calls import call

    options = dict(kwargs)
    policy = _policy_option(tx, options)
    try:
        reentrant = as_constant(options.pop("use_reentrant", PythonValue(None)))
        settings = {
            name: as_constant(options.pop(name)) for name in _CHECKPOINT_OPTIONS if name in options
        }
    except NotConstant:
        raise Unsupported(
            "torch.utils.checkpoint.checkpoint with options known only when it runs"
        ) from None
    if reentrant is None:
        warnings.warn(
            "torch.utils.checkpoint: the use_reentrant parameter should be passed "
            "explicitly; use_reentrant=False is recommended",
            stacklevel=2,
        )
    if reentrant is not False and options:
        # eager raises: reentrant checkpoint takes no keyword arguments for fn
        raise Unsupported("torch.utils.checkpoint.checkpoint(use_reentrant=True) with kwargs")
    if reentrant is not False:
        # options the reentrant form ignores (what its backward keeps or checks)
        settings.pop("determinism_check", None)
        settings.pop("early_stop", None)
    if policy is not None and reentrant is not False:  # eager raises
        raise Unsupported("torch.utils.checkpoint.checkpoint(use_reentrant=True) with context_fn")
    changed = [
        name
        for name, allowed in _CHECKPOINT_OPTIONS.items()
        if name in settings and not any(settings[name] is v or settings[name] == v for v in allowed)
    ]
    if changed or not args:
        raise Unsupported(f"torch.utils.checkpoint.checkpoint with options {changed}")
    graph = tx.ctx.graph
    last = graph._root.prev  # the graph's last node before the call
    before = outside_state(tx.ctx)
    try:
        result = call(tx, args[0], list(args[1:]), options)  # what is left goes to fn
        if reentrant is not False:
            check_reentrant_region(tx.ctx, before, last.next, args[1:], result)
    except Unsupported as error:
        # NOTE: the graph breaks at the checkpoint call, which then runs eagerly as a
        # whole: fn's own parts compiled for the forward would not be the code the
        # backward's recomputation runs (checkpoint checks that both save alike)
        raise Unsupported(f"torch.utils.checkpoint.checkpoint: {error.reason}") from error
    region = next(_checkpoint_regions)
    node = last.next
    while node is not graph._root:
        if CHECKPOINT_REGION not in node.meta:  # a nested call keeps its own
            node.meta[CHECKPOINT_REGION] = region
            if policy is not None:
                node.meta[CHECKPOINT_POLICY] = policy
        node = node.next
    return result


_checkpoint_regions = itertools.count()


def _cond(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.calls import call
    from dynamo_capture.operations import sequence_items

    names = ("pred", "true_fn", "false_fn", "operands")
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    if set(bound) != set(names):
        raise Unsupported(f"torch.cond takes {', '.join(names)}; got {', '.join(bound)}")
    pred, operands = bound["pred"], bound["operands"]
    if not isinstance(operands, TupleValue | PythonValue) and not hasattr(operands, "items"):
        raise Unsupported("torch.cond operands must be a tuple or list")
    items = sequence_items(tx, operands)
    if not isinstance(pred, TensorValue):
        try:
            chosen = bound["true_fn"] if bool(as_constant(pred)) else bound["false_fn"]
        except NotConstant:
            raise Unsupported(
                "torch.cond with a predicate that is neither a tensor nor a bool"
            ) from None
        return call(tx, chosen, items, {})  # a Python predicate picks the branch, as in torch
    guards = tx.ctx.guards
    make_true, true_cells = _branch(bound["true_fn"], "torch.cond's true_fn", guards)
    make_false, false_cells = _branch(bound["false_fn"], "torch.cond's false_fn", guards)
    split = len(true_cells), len(true_cells) + len(false_cells)

    def branches(cells: tuple[Any, ...]) -> tuple[Callable[..., Any], Callable[..., Any]]:
        return make_true(cells[: split[0]]), make_false(cells[split[0] : split[1]])

    def cond(predicate: torch.Tensor, *cells_and_operands: Any) -> Any:
        # NOTE: a flat tuple of the outputs, each read by a getitem node, as the graphs
        # of torch.compile read torch.ops.higher_order.cond's
        true_fn, false_fn = branches(cells_and_operands)
        operand_values = cells_and_operands[split[1] :]
        result = _TORCH_COND(predicate, true_fn, false_fn, operand_values)
        return tuple(result) if isinstance(result, tuple | list) else (result,)

    names = [_function_name(fn) for fn in branches((None,) * split[1])]
    _name(cond, f"cond_{names[0]}_{names[1]}")
    example = _cond_example(branches, split[1])
    return _flat_node(tx, cond, example, (pred, *true_cells, *false_cells, *items))


def _flat_node(
    tx: Translator, target: Any, example: Callable[..., Any], args: tuple[Value, ...]
) -> Value:
    """A node calling `target`, which returns its outputs as a flat tuple, each read by
    a getitem node; the value has the structure `example` (its run on fakes) returns."""
    target.__ember_example__ = _flat_outputs(example)
    flat = _node(tx, target, args, {})
    structure = _cond_structure(tx, example, args)
    if structure is None:
        return flat.items[0]  # type: ignore[attr-defined]
    if structure is list:
        return ListValue(list(flat.items))  # type: ignore[attr-defined]
    return TupleValue(list(flat.items), structure)  # type: ignore[attr-defined]


def _while_loop(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`torch.while_loop(cond_fn, body_fn, carried)` with tensors carried: a node calling
    it, the functions known now or closures made in the frame over tensors."""
    from dynamo_capture.operations import sequence_items

    bound = _bind("torch.while_loop", ("cond_fn", "body_fn", "carried_inputs"), args, kwargs)
    carried = bound["carried_inputs"]
    if not isinstance(carried, TupleValue | ListValue):
        raise Unsupported("torch.while_loop with carried_inputs not a tuple or list")
    carried_items = sequence_items(tx, carried)
    if not all(isinstance(item, TensorValue) for item in carried_items):
        raise Unsupported("torch.while_loop carrying values other than tensors")
    make_cond, cond_cells = _branch(bound["cond_fn"], "torch.while_loop's cond_fn")
    make_body, body_cells = _branch(bound["body_fn"], "torch.while_loop's body_fn")
    split = len(cond_cells), len(cond_cells) + len(body_cells)

    def functions(cells: tuple[Any, ...]) -> tuple[Callable[..., Any], Callable[..., Any]]:
        return make_cond(cells[: split[0]]), make_body(cells[split[0] : split[1]])

    def while_loop(*cells_and_carried: Any) -> Any:
        cond_fn, body_fn = functions(cells_and_carried)
        result = _WHILE_LOOP(cond_fn, body_fn, cells_and_carried[split[1] :])
        return tuple(result) if isinstance(result, tuple | list) else (result,)

    def example(*cells_and_carried: Any) -> Any:
        cond_fn, body_fn = functions(cells_and_carried)
        carried_values = cells_and_carried[split[1] :]
        with _conds_on_fakes():
            cond_fn(*carried_values)
            result = body_fn(*carried_values)
        flat = (result,) if isinstance(result, torch.Tensor) else tuple(result)
        if not _same_metadata(flat, carried_values):
            raise Unsupported("torch.while_loop's body_fn returns other than what it carries")
        return result

    names = [_function_name(fn) for fn in functions((None,) * split[1])]
    _name(while_loop, f"while_loop_{names[0]}_{names[1]}")
    return _flat_node(tx, while_loop, example, (*cond_cells, *body_cells, *carried_items))


def _map(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`map(f, xs, *args)` of torch's control-flow operators over one tensor `xs`, with
    tensor arguments: a node calling it, `f` known now or a closure over tensors."""
    if len(args) < 2 or kwargs:
        raise Unsupported("torch's map takes f, xs and tensor arguments by position")
    if not all(isinstance(item, TensorValue) for item in args[1:]):
        raise Unsupported("torch's map over values other than one tensor and tensor arguments")
    make, cells = _branch(args[0], "the function given to torch's map")
    count = len(cells)

    def mapped(*cells_and_args: Any) -> Any:
        result = _MAP(make(cells_and_args[:count]), *cells_and_args[count:])
        return tuple(result) if isinstance(result, tuple | list) else (result,)

    def example(*cells_and_args: Any) -> Any:
        fn = make(cells_and_args[:count])
        xs, *rest = cells_and_args[count:]
        with _conds_on_fakes():
            result = fn(xs[0], *rest)

        def stacked(out: Any) -> Any:
            return out.unsqueeze(0).expand(xs.shape[0], *out.shape).contiguous()

        if isinstance(result, tuple | list):
            return type(result)(stacked(out) for out in result)
        return stacked(result)

    _name(mapped, f"map_{_function_name(make((None,) * count))}")
    return _flat_node(tx, mapped, example, (*cells, *args[1:]))


def _bind(
    name: str, names: tuple[str, ...], args: list[Value], kwargs: dict[str, Value]
) -> dict[str, Value]:
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    if set(bound) != set(names) or len(args) > len(names):
        raise Unsupported(f"{name} takes {', '.join(names)}; got {', '.join(bound)}")
    return bound


def _flat_outputs(example: Callable[..., Any]) -> Callable[..., Any]:
    def flat(*args: Any) -> tuple[Any, ...]:
        result = example(*args)
        if isinstance(result, tuple | list):
            if not all(isinstance(item, torch.Tensor) for item in result):
                raise Unsupported("torch.cond's branches return a nested or non-tensor output")
            return tuple(result)
        return (result,)

    return flat


def _cond_structure(tx: Translator, example: Callable[..., Any], args: tuple[Value, ...]) -> Any:
    """None where the branches return one tensor, else the type of the sequence they return."""
    from dynamo_capture.output_graph import _to_example

    with tx.ctx.fake_mode:
        result = example(*(_to_example(arg) for arg in args))
    return type(result) if isinstance(result, tuple | list) else None


def _cond_example(branches: Callable[..., Any], cells: int) -> Any:
    """What capture runs on fakes for a cond node: both branches, which must agree."""

    def example(predicate: torch.Tensor, *cells_and_operands: Any) -> Any:
        true_fn, false_fn = branches(cells_and_operands)
        with _conds_on_fakes():
            return _both_branches(true_fn, false_fn, cells_and_operands[cells:])

    return example


def _branch(
    value: Value, what: str, guards: FrameGuards | None = None
) -> tuple[Callable[..., Any], list[Value]]:
    """A maker of a cond branch from the tensors its cells hold, and those tensors: none
    for a function known now; a closure made in the frame over tensors and constants
    gives its cells' tensors, which the node takes as inputs (as torch.compile lifts
    them). With `guards`, a closure over a module and a method of a module (`self.f`)
    are branches too, the module guarded to be the same (`_guarded_module`)."""
    method = _module_method(value, guards)
    if method is not None:
        return (lambda cells: method), []
    try:
        function = _known_function(value, what)
    except Unsupported:
        closure = _closure_over_tensors(value, guards)
        if closure is None:
            raise
        return closure[0], closure[1]
    return (lambda cells: function), []


def _guarded_module(value: Any, guards: FrameGuards | None) -> torch.nn.Module | None:
    """The module `value` holds when it was read from where the guards can check it is
    the same module each call (an input, a global, an attribute of one), guarded so."""
    if guards is None or not isinstance(value, PythonValue):
        return None
    if not isinstance(value.obj, torch.nn.Module) or value.source is None:
        return None
    guards.id_match(value.source, value.obj)
    return value.obj


def _module_method(value: Value, guards: FrameGuards | None) -> Callable[..., Any] | None:
    """`module.f` for a method of a module from the inputs or globals, a plain function
    of its class (its lookup guarded where capture made the method); else None."""
    if not isinstance(value, MethodValue) or not isinstance(value.func, PythonValue):
        return None
    function = value.func.obj
    if not isinstance(function, types.FunctionType) or function.__closure__:
        return None
    module = _guarded_module(value.self_value, guards)
    return types.MethodType(function, module) if module is not None else None


def _both_branches(true_fn: Callable[..., Any], false_fn: Callable[..., Any], operands: Any) -> Any:
    on_true, on_false = true_fn(*operands), false_fn(*operands)
    if not _same_metadata(on_true, on_false):
        raise Unsupported("torch.cond's branches return tensors of different metadata")
    return on_true


def _cond_on_fakes(pred: Any, true_fn: Any, false_fn: Any, operands: Any) -> Any:
    """torch.cond as a branch run on fakes calls it: the branch a Python predicate picks,
    else both, which must agree (the metadata of the result is all capture learns)."""
    if isinstance(pred, bool | int | float):
        return (true_fn if pred else false_fn)(*operands)
    return _both_branches(true_fn, false_fn, tuple(operands))


@contextlib.contextmanager
def _conds_on_fakes() -> Iterator[None]:
    """torch.cond, while capture runs a cond's branches on fakes, is `_cond_on_fakes`.

    NOTE: torch's own torch.cond, called under capture's fake mode (a dispatch mode of
    its own), compiles its operator with torch.compile, which skips the frame for that
    mode and keeps that choice: later eager torch.cond calls of the process then fail.
    The branches call it as `torch.cond` (or through its module), read when called.
    """
    module = sys.modules[_TORCH_COND.__module__]
    saved = torch.cond, getattr(module, "cond", None)
    torch.cond = module.cond = _cond_on_fakes  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cond, module.cond = saved  # type: ignore[assignment]


def _same_metadata(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same_metadata(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and not isinstance(a, torch.Tensor)


def _known_function(value: Value, what: str) -> Callable[..., Any]:
    """The real callable `value` stands for: known now, and the same in every call the
    guards let through (a function without cells or a module from the inputs or
    globals, a lambda made in the frame without closure cells)."""
    if isinstance(value, PythonValue) and callable(value.obj):
        if isinstance(value.obj, types.FunctionType) and value.obj.__closure__:
            # its guards check the code, not the cells: another closure would pass them
            raise Unsupported(f"{what} is a closure (its cells are not guarded)")
        return value.obj
    if isinstance(value, FunctionValue) and not value.closure and not value.kwdefaults:
        try:
            defaults = tuple(as_constant(item) for item in value.defaults)
        except NotConstant:
            raise Unsupported(f"{what} has defaults that are not constants") from None
        return types.FunctionType(value.code, value.globals, value.name, defaults or None)
    raise Unsupported(f"{what} is not a function capture knows now (a closure over the frame)")


def _options(
    name: str, allowed: tuple[str, ...], positional: list[Value], kwargs: dict[str, Value]
) -> dict[str, Any]:
    options = dict(zip(allowed, positional, strict=False))
    if len(positional) > len(allowed):
        raise Unsupported(f"torch.func.{name}: too many arguments")
    options.update(kwargs)
    unknown = set(options) - set(allowed)
    if unknown:
        raise Unsupported(f"torch.func.{name}: options {sorted(unknown)} are not handled")
    try:
        return {key: as_constant(value) for key, value in options.items()}
    except NotConstant:
        raise Unsupported(f"torch.func.{name}: options must be constants") from None


def _function_name(function: Any) -> str:
    name = getattr(function, "__name__", type(function).__name__)
    return "".join(c if c.isalnum() else "_" for c in name).strip("_") or "fn"


def _name(function: Any, name: str) -> None:
    function.__name__ = function.__qualname__ = name
    setattr(function, _TRANSFORMED, True)
