"""torch's control-flow operators inside captured code: one graph node per call, its
outputs read by getitem nodes, as torch.compile's graphs call the higher-order operator.

    torch.cond(pred, true_fn, false_fn, operands)
        pred a tensor                    -> out = cond_true_fn_false_fn(pred, *cells, *operands)
        pred a SymBool of symbolic sizes -> the same node, the predicate a node of sizes
        pred a Python bool or int        -> the branch it picks, inlined (guarded)
    torch.while_loop(cond_fn, body_fn, carried)  -> a node while_loop_cond_fn_body_fn(...)
    map(f, xs, *args), scan(combine_fn, init, xs), associative_scan(combine_fn, xs, dim)
                                         -> a node calling torch's own operator
    torch.compiler.nested_compile_region(fn)(*args)
                                         -> a node calling fn (torch's invoke_subgraph),
                                            else fn traced in place: a region changes
                                            nothing but what is compiled once

The node calls torch's own operator when the graph runs, so the branch taken, the
values, the gradients and the errors torch.cond raises (a branch mutating its input,
returning an alias) are eager's. Capture runs the functions on fake tensors only to learn
the outputs' structure and metadata: a cond's two branches, which must agree; one step of
a loop, which must give back what it carries. Before that their code is checked to have
no effect outside itself (branch_functions.check_branch_is_pure), since this run is real
Python. Operators met again while running on fakes (a cond inside a branch, a
while_loop in a map) run through `FAKE_RULES`, registered for guards' fake mode.

The functions are rebuilt each call from the tensors their cells hold
(branch_functions.function_maker), lifted as node inputs as torch.compile lifts them.
Anything else (a function that cannot be rebuilt, operands that are not tensors, outputs
that are not tensors) is Unsupported: the graph breaks at the call, which runs eagerly
and so behaves, or raises, as eager does. A backend that cannot compile such nodes
(aot_autograd's: it traces to ATen, and the branch not taken must not run) gets the same
graph break; nested_compile_region is traced in place instead.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from dynamo_capture.branch_functions import (
    check_branch_is_pure,
    function_maker,
    function_name,
    name_node_target,
)
from dynamo_capture.errors import RegionsCalledOnce, Unsupported
from dynamo_capture.operations import NotConstant, as_constant
from dynamo_capture.sym_numbers import is_symbolic_number
from dynamo_capture.values import (
    DictValue,
    FunctionValue,
    ListValue,
    MethodValue,
    PythonValue,
    TensorValue,
    TupleValue,
    Value,
)

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "CONTROL_FLOW",
    "FAKE_RULES",
    "call_control_flow",
    "check_regions_called_more_than_once",
]

_TORCH_COND = torch.cond
_WHILE_LOOP = torch.while_loop
_MAP = sys.modules["torch._higher_order_ops.map"].map  # loaded with torch.cond
_SCAN = getattr(torch._higher_order_ops, "scan", None)
_ASSOCIATIVE_SCAN = getattr(torch._higher_order_ops, "associative_scan", None)
_REGION = sys.modules.get("torch._higher_order_ops.invoke_subgraph")
_REGION_CALL = getattr(_REGION, "invoke_subgraph_placeholder", None)


def call_control_flow(
    tx: Translator, fn: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """The value of `fn(*args, **kwargs)` when `fn` is one of torch's control-flow
    operators (`CONTROL_FLOW`); None for any other callee."""
    try:
        handler = CONTROL_FLOW.get(fn)
    except TypeError:  # unhashable
        return None
    return None if handler is None else handler(tx, args, kwargs)


def _node(tx: Translator, target: Any, args: tuple[Any, ...]) -> Value:
    from dynamo_capture.function_transforms import transform_node

    return transform_node(tx, target, args, {})


def _flat_node(
    tx: Translator, target: Any, example: Callable[..., Any], args: tuple[Value, ...], what: str
) -> Value:
    """A node calling `target`, which returns its outputs' tensors as a flat tuple, each
    read by a getitem node; the value has the structure `example` (its run on fakes)
    returns: a tensor, or tuples, lists and dicts of tensors."""
    from dynamo_capture.output_graph import _to_example

    if not tx.ctx.transform_nodes:
        raise Unsupported(
            f"{target.__name__}: the backend cannot compile torch's control-flow operators "
            "as graph nodes, so the call runs eagerly"
        )
    with tx.ctx.fake_mode:
        result = example(*(_to_example(arg) for arg in args))
    leaves, spec = pytree.tree_flatten(result)
    if not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        raise Unsupported(f"{what} returns values other than tensors")
    target.__ember_example__ = lambda *a: tuple(pytree.tree_leaves(example(*a)))
    flat = _node(tx, target, args)
    return _as_value(pytree.tree_unflatten(list(flat.items), spec), what)  # type: ignore[attr-defined]


def _as_value(tree: Any, what: str) -> Value:
    if isinstance(tree, Value):
        return tree
    if type(tree) is tuple:
        return TupleValue([_as_value(item, what) for item in tree])
    if type(tree) is list:
        return ListValue([_as_value(item, what) for item in tree])
    if type(tree) is dict:
        return DictValue({key: _as_value(item, what) for key, item in tree.items()})
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        return TupleValue([_as_value(item, what) for item in tree], type(tree))
    raise Unsupported(f"{what} returns a {type(tree).__name__}")


def _flat(result: Any) -> tuple[Any, ...]:
    return tuple(pytree.tree_leaves(result))


def _tensor_leaves(values: list[Value], what: str) -> None:
    """Unsupported unless every leaf of `values` (tuples, lists, dicts) is a tensor."""
    for value in values:
        if isinstance(value, TupleValue | ListValue):
            _tensor_leaves(list(value.items), what)
        elif isinstance(value, DictValue):
            _tensor_leaves(list(value.items.values()), what)
        elif not isinstance(value, TensorValue):
            raise Unsupported(f"{what} that are not tensors (eager raises or runs it as it is)")


def _leaves(value: Value) -> list[Value]:
    if isinstance(value, TupleValue | ListValue):
        return [leaf for item in value.items for leaf in _leaves(item)]
    if isinstance(value, DictValue):
        return [leaf for item in value.items.values() for leaf in _leaves(item)]
    return [value]


def _map_leaves(tx: Translator, value: Value, fn: Callable[[Value], Value]) -> Value:
    """`value` (tensors in tuples, lists, dicts) with `fn` applied to each tensor."""
    if isinstance(value, TupleValue):
        return TupleValue([_map_leaves(tx, item, fn) for item in value.items], value.cls)
    if isinstance(value, ListValue):
        return ListValue([_map_leaves(tx, item, fn) for item in value.items])
    if isinstance(value, DictValue):
        return DictValue({k: _map_leaves(tx, item, fn) for k, item in value.items.items()})
    return fn(value)


def _bind(
    name: str, names: tuple[str, ...], args: list[Value], kwargs: dict[str, Value]
) -> dict[str, Value]:
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    if set(bound) != set(names) or len(args) > len(names):
        raise Unsupported(f"{name} takes {', '.join(names)}; got {', '.join(bound)}")
    return bound


def _functions(
    tx: Translator, values: list[tuple[Value, str]]
) -> tuple[Callable[[tuple[Any, ...]], list[Any]], list[Value]]:
    """Makers of several functions from one flat tuple of their cells' tensors (each
    function checked to be pure), and those tensors."""
    makers, cells, splits = [], [], [0]
    for value, what in values:
        make, tensors = function_maker(value, what, tx.ctx.guards)
        check_branch_is_pure(tx, make((None,) * len(tensors)), what)
        makers.append(make)
        cells.extend(tensors)
        splits.append(len(cells))

    def make_all(flat: tuple[Any, ...]) -> list[Any]:
        return [make(flat[splits[i] : splits[i + 1]]) for i, make in enumerate(makers)]

    return make_all, cells


def _function(tx: Translator, value: Value, what: str) -> tuple[Callable[..., Any], list[Value]]:
    make_all, cells = _functions(tx, [(value, what)])
    return (lambda flat: make_all(flat)[0]), cells


# ---- torch.cond ---------------------------------------------------------------------
def _cond(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.calls import call
    from dynamo_capture.operations import sequence_items

    names = ("pred", "true_fn", "false_fn", "operands")
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    bound.setdefault("operands", TupleValue([]))
    if set(bound) != set(names):
        raise Unsupported(f"torch.cond takes {', '.join(names)}; got {', '.join(bound)}")
    pred, operands = bound["pred"], bound["operands"]
    if not isinstance(operands, TupleValue | ListValue) and not (
        isinstance(operands, PythonValue) and type(operands.obj) in (tuple, list)
    ):
        raise Unsupported("torch.cond operands must be a tuple or list")
    items = sequence_items(tx, operands)
    symbolic = isinstance(pred, PythonValue) and is_symbolic_number(pred.obj)
    if not isinstance(pred, TensorValue) and not symbolic:
        try:
            chosen = bound["true_fn"] if bool(as_constant(pred)) else bound["false_fn"]
        except NotConstant:
            raise Unsupported(
                "torch.cond with a predicate that is neither a tensor nor a Python bool"
            ) from None
        return call(tx, chosen, items, {})  # a Python predicate picks the branch, as in torch
    _tensor_leaves(items, "torch.cond with operands")
    branches, cells = _functions(
        tx,
        [(bound["true_fn"], "torch.cond's true_fn"), (bound["false_fn"], "torch.cond's false_fn")],
    )
    count = len(cells)

    def cond(predicate: torch.Tensor, *cells_and_operands: Any) -> Any:
        true_fn, false_fn = branches(cells_and_operands[:count])
        operand_values = cells_and_operands[count:]
        return _flat(_TORCH_COND(predicate, true_fn, false_fn, operand_values))

    def example(predicate: torch.Tensor, *cells_and_operands: Any) -> Any:
        true_fn, false_fn = branches(cells_and_operands[:count])
        with _operators_on_fakes():
            return _both_branches(true_fn, false_fn, cells_and_operands[count:])

    names = [function_name(fn) for fn in branches((None,) * count)]
    name_node_target(cond, f"cond_{names[0]}_{names[1]}")
    return _flat_node(tx, cond, example, (pred, *cells, *items), "torch.cond's branches")


def _both_branches(true_fn: Callable[..., Any], false_fn: Callable[..., Any], operands: Any) -> Any:
    on_true, on_false = true_fn(*operands), false_fn(*operands)
    if not _same_metadata(on_true, on_false):
        raise Unsupported("torch.cond's branches return outputs of different structure or metadata")
    return on_true


def _same_metadata(a: Any, b: Any) -> bool:
    leaves_a, spec_a = pytree.tree_flatten(a)
    leaves_b, spec_b = pytree.tree_flatten(b)
    if spec_a != spec_b:
        return False
    for x, y in zip(leaves_a, leaves_b, strict=True):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and (
            x.shape != y.shape or x.dtype != y.dtype or x.device != y.device
        ):
            return False
    return True


# ---- torch.while_loop --------------------------------------------------------------
def _while_loop(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.operations import sequence_items

    bound = _bind("torch.while_loop", ("cond_fn", "body_fn", "carried_inputs"), args, kwargs)
    carried = bound["carried_inputs"]
    if not isinstance(carried, TupleValue | ListValue):
        raise Unsupported("torch.while_loop with carried_inputs not a tuple or list")
    carried_items = sequence_items(tx, carried)
    if not all(isinstance(item, TensorValue) for item in carried_items):
        raise Unsupported("torch.while_loop carrying values other than tensors")
    functions, cells = _functions(
        tx,
        [
            (bound["cond_fn"], "torch.while_loop's cond_fn"),
            (bound["body_fn"], "torch.while_loop's body_fn"),
        ],
    )
    count = len(cells)

    def while_loop(*cells_and_carried: Any) -> Any:
        cond_fn, body_fn = functions(cells_and_carried[:count])
        return _flat(_WHILE_LOOP(cond_fn, body_fn, cells_and_carried[count:]))

    def example(*cells_and_carried: Any) -> Any:
        cond_fn, body_fn = functions(cells_and_carried[:count])
        carried_values = cells_and_carried[count:]
        with _operators_on_fakes():
            cond_fn(*carried_values)
            result = body_fn(*carried_values)
        if not _same_metadata(_flat(result), tuple(carried_values)):
            raise Unsupported("torch.while_loop's body_fn returns other than what it carries")
        return result

    names = [function_name(fn) for fn in functions((None,) * count)]
    name_node_target(while_loop, f"while_loop_{names[0]}_{names[1]}")
    return _flat_node(
        tx, while_loop, example, (*cells, *carried_items), "torch.while_loop's body_fn"
    )


# ---- map, scan, associative_scan -----------------------------------------------------
def _map(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`map(f, xs, *args)` over tensors (xs a tensor or tuples, lists, dicts of them)."""
    if len(args) < 2 or kwargs:
        raise Unsupported("torch's map takes f, xs and tensor arguments by position")
    _tensor_leaves(list(args[1:]), "torch's map over values")
    make, cells = _function(tx, args[0], "the function given to torch's map")
    count = len(cells)

    def mapped(*cells_and_args: Any) -> Any:
        return _flat(_MAP(make(cells_and_args[:count]), *cells_and_args[count:]))

    def example(*cells_and_args: Any) -> Any:
        fn = make(cells_and_args[:count])
        xs, *rest = cells_and_args[count:]
        leaves = pytree.tree_leaves(xs)
        with _operators_on_fakes():
            result = fn(pytree.tree_map(lambda t: t[0], xs), *rest)
        return _stacked(result, leaves[0].shape[0], 0)

    name_node_target(mapped, f"map_{function_name(make((None,) * count))}")
    return _flat_node(tx, mapped, example, (*cells, *args[1:]), "the function given to torch's map")


def _stacked(result: Any, length: int, dim: int) -> Any:
    """What stacking `length` results of the metadata of `result` along `dim` gives."""
    return pytree.tree_map(lambda out: torch.stack([out] * length, dim), result)


def _options(name: str, kwargs: dict[str, Value], allowed: dict[str, Any]) -> dict[str, Any]:
    unknown = set(kwargs) - set(allowed)
    if unknown:
        raise Unsupported(f"{name} with options {sorted(unknown)}")
    try:
        return {**allowed, **{key: as_constant(value) for key, value in kwargs.items()}}
    except NotConstant:
        raise Unsupported(f"{name} with options known only when it runs") from None


def _scan(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`scan(combine_fn, init, xs, dim=0, reverse=False)` over tensors: as torch lowers
    it, xs moved to scan along dim 0 (and flipped for reverse) by graph operations
    before the node, its stacked outputs moved (flipped) back after it."""
    from dynamo_capture.calls import call

    kwargs = dict(kwargs)
    positional = ("combine_fn", "init", "xs")
    bound = _bind("scan", positional, args, {k: kwargs.pop(k) for k in positional if k in kwargs})
    options = _options("scan", kwargs, {"dim": 0, "reverse": False})
    init, xs = bound["init"], bound["xs"]
    _tensor_leaves([init, xs], "scan over values")
    make, cells = _function(tx, bound["combine_fn"], "scan's combine_fn")
    count = len(cells)
    dim, reverse = options["dim"], options["reverse"]
    if not isinstance(dim, int) or not isinstance(reverse, bool):
        raise Unsupported("scan with a dim or reverse of another type (eager raises)")

    def apply(fn: Any, *rest: Any) -> Callable[[Value], Value]:
        return lambda t: call(tx, PythonValue(fn), [t, *(PythonValue(r) for r in rest)], {})

    ndim = _leaves(xs)[0].example.ndim  # type: ignore[attr-defined]
    if not -ndim <= dim < ndim:
        raise Unsupported(f"scan along dim {dim} of tensors of {ndim} dims (eager raises)")
    dim %= ndim
    if dim != 0:
        xs = _map_leaves(tx, xs, apply(torch.movedim, dim, 0))
    if reverse:
        xs = _map_leaves(tx, xs, apply(torch.flip, [0]))

    def scanned(*cells_and_args: Any) -> Any:
        init_value, xs_value = cells_and_args[count:]
        return _flat(_SCAN(make(cells_and_args[:count]), init_value, xs_value))

    def example(*cells_and_args: Any) -> Any:
        fn = make(cells_and_args[:count])
        init_value, xs_value = cells_and_args[count:]
        leaves = pytree.tree_leaves(xs_value)
        with _operators_on_fakes():
            carry, out = fn(init_value, pytree.tree_map(lambda t: t[0], xs_value))
        if not _same_metadata(carry, init_value):
            raise Unsupported("scan's combine_fn returns a carry other than its init")
        return carry, _stacked(out, leaves[0].shape[0], 0)

    name_node_target(scanned, f"scan_{function_name(make((None,) * count))}")
    result = _flat_node(tx, scanned, example, (*cells, init, xs), "scan's combine_fn")
    carry, out = result.items  # type: ignore[attr-defined]
    if reverse:
        out = _map_leaves(tx, out, apply(torch.flip, [0]))
    if dim != 0:
        move_back = apply(torch.movedim, 0, dim)
        out = _map_leaves(tx, out, lambda t: move_back(t) if dim < t.example.ndim else t)
    return TupleValue([carry, out])


def _associative_scan(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise")`."""
    kwargs = dict(kwargs)
    positional = ("combine_fn", "xs", "dim")
    bound = _bind(
        "associative_scan", positional, args, {k: kwargs.pop(k) for k in positional if k in kwargs}
    )
    options = _options("associative_scan", kwargs, {"reverse": False, "combine_mode": "pointwise"})
    try:
        dim = as_constant(bound["dim"])
    except NotConstant:
        raise Unsupported("associative_scan along a dim known only when it runs") from None
    xs = bound["xs"]
    _tensor_leaves([xs], "associative_scan over values")
    if options["combine_mode"] == "generic":
        return _generic_associative_scan(tx, bound["combine_fn"], xs, dim, options["reverse"])
    if options["combine_mode"] == "pointwise" and not all(
        leaf.example.device.type in ("cuda", "xpu") for leaf in _leaves(xs)
    ):
        raise Unsupported(
            "associative_scan(combine_mode='pointwise') of tensors on neither CUDA nor XPU "
            "(eager raises)"
        )
    make, cells = _function(tx, bound["combine_fn"], "associative_scan's combine_fn")
    count = len(cells)

    def scanned(*cells_and_xs: Any) -> Any:
        fn = make(cells_and_xs[:count])
        return _flat(_ASSOCIATIVE_SCAN(fn, cells_and_xs[count], dim, **options))

    def example(*cells_and_xs: Any) -> Any:
        fn = make(cells_and_xs[:count])
        xs_value = cells_and_xs[count]
        first = pytree.tree_map(lambda t: t.narrow(dim, 0, 1), xs_value)
        with _operators_on_fakes():
            combined = fn(first, first)
        if not _same_metadata(combined, first):
            raise Unsupported("associative_scan's combine_fn changes its inputs' metadata")
        return pytree.tree_map(torch.empty_like, xs_value)

    name_node_target(scanned, f"associative_scan_{function_name(make((None,) * count))}")
    return _flat_node(tx, scanned, example, (*cells, xs), "associative_scan's combine_fn")


def _generic_associative_scan(
    tx: Translator, combine_fn: Value, xs: Value, dim: Any, reverse: Any
) -> Value:
    """`associative_scan(..., combine_mode="generic")`: torch's own Python traced in place,
    as eager runs it (slices of xs, combine_fn vmapped over them, interleaved) and as
    torch.compile traces it; no node, so any backend compiles its operators."""
    from dynamo_capture.calls import inline_function

    arguments = [combine_fn, xs, PythonValue(dim)]
    options = {"reverse": PythonValue(reverse), "combine_mode": PythonValue("generic")}
    return inline_function(tx, _ASSOCIATIVE_SCAN, arguments, options, None)


# ---- torch.compiler.nested_compile_region --------------------------------------------
def _compile_region(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`fn(*args)` of a function torch.compiler.nested_compile_region marked: a node
    calling fn (as torch.compile's invoke_subgraph), where fn can be rebuilt and its
    arguments are tensors; else fn traced in place, which eager's call is. A function
    whose node the graph has once only is traced in place too, as torch.compile
    inlines a region called from one place (`check_regions_called_more_than_once`
    starts capture again with it in `inline_regions`)."""
    from dynamo_capture.calls import call

    if not args:
        raise Unsupported("nested_compile_region's call without its function")
    function, rest = args[0], list(args[1:])
    key = _region_key(function)
    if (
        key is not None
        and key not in tx.ctx.inline_regions
        and tx.ctx.transform_nodes
        and not kwargs
        and all(isinstance(a, TensorValue) for a in rest)
    ):
        try:
            node = _region_node(tx, function, rest)
        except Unsupported:
            pass  # traced in place below
        else:
            tx.ctx.region_nodes[key] = tx.ctx.region_nodes.get(key, 0) + 1
            return node
    return call(tx, function, rest, kwargs)


def _region_key(function: Value) -> Any:
    """The code object that names a region: its function's (a method's function's)."""
    if isinstance(function, MethodValue):
        function = function.func
    if isinstance(function, FunctionValue):
        return function.code
    obj = function.obj if isinstance(function, PythonValue) else None
    return getattr(obj, "__code__", None)


def check_regions_called_more_than_once(ctx: Any) -> None:
    """RegionsCalledOnce for the region functions whose node the graph has once only."""
    once = frozenset(key for key, count in ctx.region_nodes.items() if count == 1)
    if once:
        raise RegionsCalledOnce(once | ctx.inline_regions)


def _region_node(tx: Translator, function: Value, args: list[Value]) -> Value:
    make, cells = _function(tx, function, "the nested_compile_region function")
    count = len(cells)

    def region(*cells_and_args: Any) -> Any:
        return _flat(make(cells_and_args[:count])(*cells_and_args[count:]))

    def example(*cells_and_args: Any) -> Any:
        with _operators_on_fakes():
            return make(cells_and_args[:count])(*cells_and_args[count:])

    name_node_target(region, f"invoke_subgraph_{function_name(make((None,) * count))}")
    return _flat_node(tx, region, example, (*cells, *args), "the nested_compile_region function")


CONTROL_FLOW: dict[Any, Callable[[Any, list[Value], dict[str, Value]], Value]] = {
    _TORCH_COND: _cond,
    torch.ops.higher_order.cond: _cond,
    _WHILE_LOOP: _while_loop,
    _MAP: _map,
}
if _SCAN is not None:
    CONTROL_FLOW[_SCAN] = _scan
if _ASSOCIATIVE_SCAN is not None:
    CONTROL_FLOW[_ASSOCIATIVE_SCAN] = _associative_scan
if _REGION_CALL is not None:
    CONTROL_FLOW[_REGION_CALL] = _compile_region


# ---- the operators met again while running on fakes -----------------------------------
def _cond_on_fakes(pred: Any, true_fn: Any, false_fn: Any, operands: Any = ()) -> Any:
    """torch.cond as a branch run on fakes calls it: the branch a Python predicate picks,
    else both, which must agree (the metadata of the result is all capture learns)."""
    if isinstance(pred, bool | int | float):
        return (true_fn if pred else false_fn)(*operands)
    return _both_branches(true_fn, false_fn, tuple(operands))


def _fake_cond(mode: Any, pred: Any, true_fn: Any, false_fn: Any, operands: Any) -> Any:
    with mode:
        return _cond_on_fakes(pred, true_fn, false_fn, operands)


def _fake_while_loop(
    mode: Any, cond_fn: Any, body_fn: Any, carried: Any, additional: Any = ()
) -> Any:
    with mode:
        cond_fn(*carried, *additional)
        result = tuple(body_fn(*carried, *additional))
    if not _same_metadata(result, tuple(carried)):
        raise Unsupported("torch.while_loop's body_fn returns other than what it carries")
    return result


def _fake_map(mode: Any, f: Any, xs: Any, pos_args: Any) -> Any:
    with mode:
        result = f(*(t[0] for t in xs), *pos_args)
        return _stacked(result, xs[0].shape[0], 0)


# higher-order operator name -> its rule under guards' fake mode (torch's own rules are
# for torch's FakeTensorMode)
FAKE_RULES: dict[str, Callable[..., Any]] = {
    "cond": _fake_cond,
    "while_loop": _fake_while_loop,
    "map_impl": _fake_map,
}


def _register_fake_rules() -> None:
    from guards.fake_tensor import FakeTensorMode

    for name, rule in FAKE_RULES.items():
        operator = getattr(torch.ops.higher_order, name, None)
        if operator is not None and FakeTensorMode not in operator.python_key_table:
            operator.py_impl(FakeTensorMode)(rule)


_register_fake_rules()


def _while_loop_on_fakes(cond_fn: Any, body_fn: Any, carried: Any) -> Any:
    """torch.while_loop as a function run on fakes calls it: one step, which must give
    back what it carries."""
    cond_fn(*carried)
    result = body_fn(*carried)
    if not _same_metadata(_flat(result), _flat(carried)):
        raise Unsupported("torch.while_loop's body_fn returns other than what it carries")
    return result


def _map_on_fakes(f: Any, xs: Any, *args: Any) -> Any:
    """torch's map as a function run on fakes calls it: f on the first slice, stacked."""
    leaves = pytree.tree_leaves(xs)
    return _stacked(f(pytree.tree_map(lambda t: t[0], xs), *args), leaves[0].shape[0], 0)


# (module, name) -> what the name is while capture runs functions on fakes
_ON_FAKES: dict[tuple[Any, str], Callable[..., Any]] = {
    (torch, "cond"): _cond_on_fakes,
    (sys.modules[_TORCH_COND.__module__], "cond"): _cond_on_fakes,
    (torch, "while_loop"): _while_loop_on_fakes,
    (sys.modules[_WHILE_LOOP.__module__], "while_loop"): _while_loop_on_fakes,
    (sys.modules[_MAP.__module__], "map"): _map_on_fakes,
    (torch.compiler, "is_dynamo_compiling"): lambda: True,
}


@contextlib.contextmanager
def _operators_on_fakes() -> Iterator[None]:
    """torch's control-flow operators, while capture runs functions on fakes, are
    `_ON_FAKES`' stand-ins; called otherwise (through a name bound before), they call
    their higher-order operator at once, whose rule under guards' fake mode is
    FAKE_RULES'.

    NOTE: eagerly, torch.cond, while_loop and map compile their operator with
    torch.compile unless `torch.compiler.is_dynamo_compiling()`; under capture's fake
    mode (a dispatch mode of its own) torch.compile skips the frame for that mode and
    keeps that choice: later eager calls of the process then fail. Capture is the
    compiler here, so it says so while the functions run on fakes. The operators' own
    autograd rules, reached first where an input requires grad, trace with torch's
    fake tensors, which refuse the real parameters a branch reads: hence the stand-ins.
    """
    saved = {key: getattr(*key) for key in _ON_FAKES}
    for (module, name), stand_in in _ON_FAKES.items():
        setattr(module, name, stand_in)
    try:
        yield
    finally:
        for (module, name), original in saved.items():
            setattr(module, name, original)
