"""torch.func transforms and checkpoint inside captured code: one graph node per call.

    torch.func.grad(f, argnums=0)(x)     -> a node `grad_f(x)`, f a function known now
    torch.vmap(f, in_dims=(0, None))(x, y)
    torch.func.jvp(f, primals, tangents) -> traced (functorch_inline), else a node
                                            `jvp_f(primals, tangents)`
    torch.cond, torch.while_loop, map, scan -> control_flow
    torch.utils.checkpoint.checkpoint(fn, x, use_reentrant=False)
                                         -> fn traced in place (the recomputation is
                                            a memory choice of the backward)

The node calls torch's own public transform when the graph runs, so the result is
eager's; capture runs it on fake tensors only to learn the result's metadata. The
transformed function must be
known now: a function without closure cells or a module (guarded where it came
from), or a function made in the frame. A closure made in the frame whose cells hold
tensors and constants (branch_functions) gives a node taking those tensors first
(read when the transformed function is called), which rebuilds the function from
them each run.
Anything else (cells holding other objects, a non-constant option, `vjp`, which
returns a function) is Unsupported: the graph breaks there and the transform runs
eagerly, as before.

Unlike torch.compile, which inlines the transform's operators into the graph, the
node is opaque: graph counts match torch's, op counts do not.
"""

from __future__ import annotations

import functools
import itertools
import types
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.branch_functions import (
    TRANSFORMED,
    closure_over_tensors,
    function_name,
    known_function,
    name_node_target,
)
from dynamo_capture.control_flow import call_control_flow
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
    PythonValue,
    Value,
)

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "CHECKPOINT_POLICY",
    "CHECKPOINT_REGION",
    "TRANSFORMS",
    "ClosureTransform",
    "call_function_transform",
    "call_outside_transform",
    "transform_node",
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


def call_function_transform(
    tx: Translator, fn: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """The value of `fn(*args, **kwargs)` when `fn` is a transform, a function it made,
    `torch.func.jvp` or `torch.cond`; None for any other callee."""
    # NOTE: by identity: a callee may be unhashable (a callable list subclass)
    if any(fn is transform for transform in TRANSFORMS):
        return _make_transformed(tx, fn, args, kwargs)
    if isinstance(fn, InlinedTransform):
        return call_inlined_transform(tx, fn, args, kwargs)
    if isinstance(fn, ClosureTransform):  # its cells are read now, as the call reads them
        closure = closure_over_tensors(fn.function)
        if closure is None:
            raise Unsupported(
                f"torch.func.{fn.transform.__name__} of a closure whose cells changed"
            )
        target = _transformed_closure(fn.transform, fn.options, closure[0], len(closure[1]))
        return transform_node(tx, target, (*closure[1], *args), kwargs)
    if getattr(fn, TRANSFORMED, False):
        return transform_node(tx, fn, tuple(args), kwargs)
    if fn is torch.func.vjp:
        if not tx.ctx.transform_nodes:
            raise Unsupported("torch.func.vjp: the backend cannot compile functorch's calls")
        return call_vjp(tx, args, kwargs)
    if isinstance(fn, Pullback):
        return call_pullback(tx, fn, args, kwargs)
    if fn is torch.func.jvp:
        return _jvp(tx, args, kwargs)
    controlled = call_control_flow(tx, fn, args, kwargs)
    if controlled is not None:
        return controlled
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


def transform_node(
    tx: Translator, target: Any, args: tuple[Any, ...], kwargs: dict[str, Value]
) -> Value:
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
        function = known_function(args[0], f"the function given to {name}")
    except Unsupported:
        # a closure over the frame's values: traced into the graph, or a node taking
        # the tensors of its cells as arguments
        inlined = inlined_transform(name, args[0], options, None)
        closure = None
        if closure_over_tensors(args[0]) is not None:
            closure = ClosureTransform(transform, options, args[0])
        if inlined is not None and _traced_into_graph(tx, name):
            inlined.fallback = closure
            return PythonValue(inlined)
        if closure is None:
            raise
        return PythonValue(closure)
    applied = transform(function, **options)

    def transformed(*call_args: Any, **call_kwargs: Any) -> Any:
        return applied(*call_args, **call_kwargs)

    name_node_target(transformed, f"{name}_{function_name(function)}")
    if _traced_into_graph(tx, name):  # into the graph as torch.compile traces it, where it can
        inlined = inlined_transform(name, args[0], options, transformed)
        if inlined is not None:
            return PythonValue(inlined)
    return PythonValue(transformed)


def _traced_into_graph(tx: Translator, name: str) -> bool:
    """Whether torch.func.<name> is traced into the graph (functorch_inline) for this
    backend: vmap as functorch's batching calls where it takes those, any transform
    where it takes function transforms."""
    return tx.ctx.transform_nodes or (name == "vmap" and tx.ctx.batching_nodes)


def _jvp(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if not args:
        raise Unsupported("torch.func.jvp called without the function")
    options = _options("jvp", ("has_aux",), [], {k: v for k, v in kwargs.items()})
    if len(args) == 3 and isinstance(options.get("has_aux", False), bool):
        traced = call_jvp(tx, args[0], args[1], args[2], options.get("has_aux", False))
        if traced is not None:  # as torch.compile traces it, where it can
            return traced
    try:
        function = known_function(args[0], "the function given to jvp")
    except Unsupported:
        closure = closure_over_tensors(args[0])
        if closure is None:
            raise
        make, cells = closure

        def jvp_closure(*cells_and_inputs: Any) -> Any:
            primals, tangents = cells_and_inputs[len(cells) :]
            fn = make(cells_and_inputs[: len(cells)])
            return torch.func.jvp(fn, primals, tangents, **options)

        name_node_target(jvp_closure, f"jvp_{args[0].name}")  # type: ignore[attr-defined]
        return transform_node(tx, jvp_closure, (*cells, *args[1:3]), {})

    def jvp(primals: Any, tangents: Any) -> Any:
        return torch.func.jvp(function, primals, tangents, **options)

    name_node_target(jvp, f"jvp_{function_name(function)}")
    return transform_node(tx, jvp, tuple(args[1:3]), {})


class ClosureTransform:
    """`torch.func.jacrev(f)` of a closure `f` made in the frame over tensors: called in
    captured code, a node taking the cells' tensors (read at the call) first."""

    __slots__ = ("function", "options", "transform")

    def __init__(self, transform: Any, options: dict[str, Any], function: FunctionValue):
        self.transform, self.options, self.function = transform, options, function


def _transformed_closure(
    transform: Any, options: dict[str, Any], make: Callable[..., Any], count: int
) -> Callable[..., Any]:
    def transformed(*cells_and_args: Any, **call_kwargs: Any) -> Any:
        fn = make(cells_and_args[:count])
        return transform(fn, **options)(*cells_and_args[count:], **call_kwargs)

    name_node_target(transformed, f"{transform.__name__}_{function_name(make((None,) * count))}")
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
    # forward's. False is taken where the traced function draws none (_checkpoint)
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
    # NOTE: preserve_rng_state=False changes values only where fn draws random numbers
    # (eager's recomputation draws others): checked on the traced region below
    unpreserved = "preserve_rng_state" in changed
    if unpreserved:
        changed.remove("preserve_rng_state")
    if changed or not args:
        raise Unsupported(f"torch.utils.checkpoint.checkpoint with options {changed}")
    graph = tx.ctx.graph
    last = graph._root.prev  # the graph's last node before the call
    before = outside_state(tx.ctx)
    hooks_before = len(tx.ctx.input_hooks)
    try:
        result = call(tx, args[0], list(args[1:]), options)  # what is left goes to fn
        if reentrant is not False:
            check_reentrant_region(tx.ctx, before, last.next, args[1:], result)
    except Unsupported as error:
        # NOTE: the graph breaks at the checkpoint call, which then runs eagerly as a
        # whole: fn's own parts compiled for the forward would not be the code the
        # backward's recomputation runs (checkpoint checks that both save alike)
        raise Unsupported(f"torch.utils.checkpoint.checkpoint: {error.reason}") from error
    if len(tx.ctx.input_hooks) != hooks_before:
        # NOTE: eager's checkpoint runs fn again in the backward, registering the hook
        # again (reentrant: on detached copies of the inputs); a replay after the graph
        # registers it once, on the caller's tensor
        raise Unsupported(
            "torch.utils.checkpoint.checkpoint of a function registering a hook on an input"
        )
    if unpreserved and any(_may_draw_random(node) for node in _nodes_after(graph, last)):
        raise Unsupported(
            "torch.utils.checkpoint.checkpoint with options ['preserve_rng_state'] around "
            "a function drawing random numbers"
        )
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


def _nodes_after(graph: torch.fx.Graph, last: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes the graph gained after `last`."""
    nodes, node = [], last.next
    while node is not graph._root:
        nodes.append(node)
        node = node.next
    return nodes


def _may_draw_random(node: torch.fx.Node) -> bool:
    """Whether a node may draw from a random generator: a random operation by name
    (output_graph._has_side_effect's table), any in-place method or function (`uniform_`,
    `exponential_`), or a call of a subgraph (a higher-order operator's branches, whose
    nodes are not read here)."""
    from dynamo_capture.output_graph import _RANDOM_OPERATIONS

    if node.op == "call_module":
        return True
    if node.op not in ("call_function", "call_method"):
        return False
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if not isinstance(name, str) or name in _RANDOM_OPERATIONS or name.endswith("_"):
        return True
    if any(word in name for word in ("rand", "normal", "bernoulli", "dropout")):
        return True
    return any(
        isinstance(arg, torch.fx.Node) and arg.op == "get_attr"
        for arg in (*node.args, *node.kwargs.values())
    )


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
