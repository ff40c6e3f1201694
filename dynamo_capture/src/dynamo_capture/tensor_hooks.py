"""`t.register_hook(fn)` on a tensor the frame computed: one graph node; on one of the
frame's inputs: a registration replayed after the graph.

    y = x * 3                      y = mul(x, 3)
    y.register_hook(lambda g: ...) y = tensor_hook_lambda(y)   (every use of y)
    return y.cos()                 cos = y.cos()

The node is an autograd Function: its forward copies the tensor, its backward calls
the user's hook on the gradient and passes on what the hook returns in place of the
gradient (the gradient itself where it returns None), as eager's autograd does with a
tensor hook. Every use of the tensor (locals, containers, the frame's outputs, reads
before the call too: the node goes right after the tensor's) reads the node, so all
the gradient reaching the tensor goes through the hook. Tensors of the graph the hook
closes over (or has as defaults) are the node's other inputs, saved for the backward,
where the hook is made again around them.

The hook is captured only where that is sound; anything else breaks the graph at the
call, which runs eagerly:

- the tensor is computed in the frame, requires grad, is not a view (a view would
  lose its base once copied), and no read of it before the call made a view of it or
  may have written it in place (those would alias the tensor, not the node's copy:
  then the whole frame runs eagerly, as a graph ending at the call would
  differentiate the reads past the hook);
- the handle the call returns is dropped (the next instruction pops it);
- the hook is a function made in the frame (a lambda or a def) whose closure and
  defaults hold only constants and tensors of the graph, the closure's variables bound
  once (outside loops: eager's hook reads them when the backward runs); a function
  read from outside with no closure and constant defaults (its identity guarded); or a
  functools.partial of either over constants. It is pure as autograd Functions'
  staticmethods must be (autograd_functions._check_pure), and one closing over tensors
  names no in-place write: a backend tracing the graph (aot_autograd) runs it once,
  when it traces the backward;
- it runs on the capture's example gradient and returns None or a tensor like it.

On an input of the frame (`register_input_hook`), the registration is replayed on the
caller's tensor after the graph, with any hook the replay can make again; a handle the
frame keeps is a PendingHookHandle that the replay makes real (`hook_replays`).
"""

from __future__ import annotations

import dis
import functools
import types
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

from dynamo_capture.autograd_functions import _check_pure
from dynamo_capture.errors import NeedsEagerFrame, TensorHookEscapes, Unsupported
from dynamo_capture.operations import guard_identity
from dynamo_capture.output_graph import is_constant
from dynamo_capture.resume import lies_in_loop
from dynamo_capture.values import (
    FunctionValue,
    MethodValue,
    ObjectValue,
    PartialValue,
    PythonValue,
    TensorValue,
    Value,
)

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator
    from dynamo_capture.output_graph import CaptureContext

__all__ = [
    "PendingHookHandle",
    "check_hooked_tensors_stay",
    "hook_replays",
    "register_input_hook",
    "register_tensor_hook",
    "remove_pending_handle",
]

_UNHOOKED = "ember_unhooked_example"


def register_tensor_hook(
    tx: Translator, tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """The value of `tensor.register_hook(*args)`: the hook recorded as a graph node that
    every later use of `tensor` reads; Unsupported where that is not sound."""
    if tensor.node.op == "placeholder" and tensor.source is not None:
        return register_input_hook(tx, tensor, args, kwargs)
    read_before = tensor.node.op != "placeholder" and bool(tensor.node.users)
    earlier = _UNHOOKED in tensor.node.meta  # the frame registered hooks on it before
    reason = _refusal(tx, tensor, args, kwargs)
    if reason is not None and (read_before or earlier) and tensor.example.requires_grad:
        # NOTE: a graph ending after the call would differentiate those reads inside
        # itself, past the tensor the hook is registered on, where eager's hook sees
        # the gradient of every use: the whole frame runs eagerly
        raise NeedsEagerFrame(f"Tensor.register_hook() {reason}")
    if reason is not None:
        raise Unsupported(f"Tensor.register_hook() {reason}; the call runs eagerly")
    try:
        maker, extras = _hook_parts(tx, args[0])
        # NOTE: the tensors it closes over are the node's inputs, read when it runs: the
        # check sees None in their place, and refuses any write in place it could make
        function = _hook_function(maker((None,) * len(extras)))
        _check_pure(tx, function, "the tensor hook", set(), 0)
        if extras and _may_write_in_place(function.__code__):
            raise Unsupported("a hook closing over tensors that may write a tensor in place")
        if extras and (earlier or read_before):
            # NOTE: the node goes before later reads of the tensor (or below the earlier
            # hooks' nodes), where the tensors it closes over may not exist yet
            raise Unsupported("a hook closing over tensors on a tensor read or hooked before")
        if earlier:
            _insert_below_earlier_hooks(tx, tensor.node, maker)
            return PythonValue(None)
        target = _hook_target(maker, len(extras))
        hooked = tx.ctx.call("call_function", target, (tensor, *extras), {})
    except NeedsEagerFrame:
        raise
    except Unsupported as error:
        if earlier or read_before:  # as for a refusal above: the frame runs eagerly
            raise NeedsEagerFrame(error.reason) from error
        raise
    if not isinstance(hooked, TensorValue):
        raise Unsupported("Tensor.register_hook(): the hook node gave no tensor")
    if read_before:
        # NOTE: eager's hook sees the gradient of every use of the tensor, those before
        # the call too: the node goes right after the tensor's and every read of the
        # tensor (before and after) reads it (refused where a read made a view or
        # wrote the tensor in place: those would alias the tensor, not its copy)
        tensor.node.append(hooked.node)
        tensor.node.replace_all_uses_with(
            hooked.node, delete_user_cb=lambda user: user is not hooked.node
        )
    tx.ctx.autograd_function_nodes_made += 1  # a backend refusing them gets a graph without
    hooked.node.meta[_UNHOOKED] = tensor.example  # the tensor's example before the hook
    # NOTE: the value object is shared by every local and container holding the tensor:
    # pointing it at the node makes all of them read the hooked tensor from now on
    tensor.node, tensor.example = hooked.node, hooked.example
    return PythonValue(None)


class PendingHookHandle(RemovableHandle):
    """The handle of a hook the frame registered on one of its inputs, while capturing:
    the replay after the graph makes the real one (`___h<index>`), which the frame's
    outputs and writes hand on; `remove()` in the frame is replayed after it. Any other
    use of it breaks the graph."""

    def __init__(self, index: int) -> None:  # NOTE: no hooks dict: never a real handle
        self.index = index

    def __repr__(self) -> str:
        return f"<pending hook handle {self.index}>"


def register_input_hook(
    tx: Translator, tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`x.register_hook(hook)` on a tensor the frame got from its caller: registered on
    the caller's tensor after the graph ran (a replay, as torch.compile does).

    NOTE: a hook on a tensor sees the whole gradient reaching it, whichever uses of the
    tensor came before the call: registering it after the graph is as good as
    registering it where the frame did. Where the hook cannot be made again outside the
    graph the call breaks the graph. A handle the frame keeps is a PendingHookHandle."""
    reason = _input_refusal(tx, tensor, args, kwargs)
    if reason is not None:
        raise Unsupported(f"Tensor.register_hook() {reason}; the call runs eagerly")
    hook = args[0]
    if isinstance(hook, PythonValue):
        guard_identity(tx, hook)
    following = tx.instructions[tx.next_index] if tx.next_index < len(tx.instructions) else None
    kept = following is None or following.opname != "POP_TOP"
    handle = PendingHookHandle(len(tx.ctx.input_hooks)) if kept else None
    tx.ctx.input_hooks.append(("register", tensor, hook, handle))
    return PythonValue(handle)


def remove_pending_handle(
    tx: Translator, receiver: Value, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`handle.remove()` of a PendingHookHandle: replayed after its registration."""
    tx.ctx.input_hooks.append(("remove", receiver.obj, None, None))  # type: ignore[attr-defined]
    return PythonValue(None)


def hook_replays(ctx: CaptureContext, expr: Any) -> list[str]:
    """The statements registering (and removing) the frame's hooks on its inputs, in
    order; `expr` gives a value's expression after the graph."""
    lines = []
    for kind, tensor_or_handle, hook, handle in ctx.input_hooks:
        if kind == "remove":
            lines.append(f"___h{tensor_or_handle.index}.remove()")
            continue
        statement = f"{expr(tensor_or_handle)}.register_hook({expr(hook)})"
        lines.append(statement if handle is None else f"___h{handle.index} = {statement}")
    return lines


def _input_refusal(
    tx: Translator, tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]
) -> str | None:
    """Why `register_input_hook` cannot replay the call, or None."""
    from dynamo_capture.capture import OutputPlan

    if kwargs or len(args) != 1:
        return "with arguments other than one hook"
    if tx.ctx.reading_ahead is not None:
        return f"in {tx.ctx.reading_ahead}"
    if not tensor.example.requires_grad:
        return "on a tensor that takes no gradient"  # eager raises
    hook = args[0]
    if isinstance(hook, FunctionValue) and not _cells_fixed(tx, hook.code):
        return "with a hook whose closure variables may be bound again before it runs"
    if isinstance(hook, PythonValue) and (hook.source is None or not callable(hook.obj)):
        return "with a hook that is no function read from outside the frame"
    if not isinstance(hook, FunctionValue | PythonValue | PartialValue | MethodValue | ObjectValue):
        return f"with a hook of kind {type(hook).__name__}"
    try:  # it can be made again after the graph (a trial plan, thrown away)
        OutputPlan(tx.ctx).expr(hook)
    except Unsupported as error:
        return f"with a hook that cannot leave the graph ({error.reason})"
    return None


def _refusal(
    tx: Translator, tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]
) -> str | None:
    """Why capturing the call is not sound, or None."""
    if kwargs or len(args) != 1:
        return "with arguments other than one hook"
    if not tx.ctx.tensor_hook_nodes:
        return "where a tensor hooked in the graph would leave it"
    if not tx.ctx.autograd_function_nodes:
        return "with a backend that cannot compile autograd Function nodes"
    if tx.ctx.reading_ahead is not None:
        return f"in {tx.ctx.reading_ahead}"
    if not torch.is_grad_enabled() or not tensor.example.requires_grad:
        return "on a tensor that takes no gradient"
    if tensor.node.op != "call_function" and tensor.node.op != "call_method":
        return "on a tensor the frame did not compute"
    if tensor.example._base is not None:
        return "on a view"
    if any(_aliases(user) for user in tensor.node.users):
        return "on a tensor the frame viewed or wrote in place before"
    following = tx.instructions[tx.next_index] if tx.next_index < len(tx.instructions) else None
    if following is None or following.opname != "POP_TOP":
        return "whose handle is kept"
    return _hook_refusal(tx, args[0])


def _hook_refusal(tx: Translator, hook: Value) -> str | None:
    """Why `hook` cannot be a graph node's backward, or None: a function made in the frame
    over constants, a function read from outside with no closure and constant defaults,
    or a functools.partial of either over constants."""
    if isinstance(hook, PartialValue):
        if not all(_is_constant(value) for value in (*hook.args, *hook.kwargs.values())):
            return "with a functools.partial hook over more than constants"
        return _hook_refusal(tx, hook.func)
    if isinstance(hook, PythonValue) and isinstance(hook.obj, types.FunctionType):
        function = hook.obj
        if hook.source is None or function.__closure__ is not None:
            return "with a hook read from outside the frame that closes over variables"
        defaults = (*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values())
        if not all(is_constant(value) for value in defaults):
            return "with a hook whose defaults are not constants"
        return None
    if not isinstance(hook, FunctionValue) or hook.attrs or hook.kwdefaults:
        return "with a hook not made in the frame as a plain function"
    for cell in hook.closure:
        if not _is_constant_or_tensor(cell.contents):
            return "with a hook whose closure holds more than constants and tensors"
    if not _cells_fixed(tx, hook.code):
        return "with a hook whose closure variables may be bound again before it runs"
    if not all(_is_constant_or_tensor(value) for value in hook.defaults):
        return "with a hook whose defaults are not constants or tensors"
    return None


def _is_constant_or_tensor(value: Value | None) -> bool:
    """A constant, or a tensor of the graph (handed to the hook's node, see _hook_parts)."""
    return _is_constant(value) or isinstance(value, TensorValue)


def _aliases(user: torch.fx.Node) -> bool:
    """Whether a node reading a tensor made a view of it or may have written it in place
    (a trailing-underscore method, `t[i] = v`, `out=`, `inplace=True`, a module call)."""
    from dynamo_capture.reentrant_checkpoints import _writes_in_place

    if _writes_in_place(user):
        return True
    value = user.meta.get("val")
    if isinstance(value, torch.Tensor):
        return value._base is not None
    return any(isinstance(item, torch.Tensor) and item._base is not None for item in _items(value))


def _items(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list | tuple) else ()


def _cells_fixed(tx: Translator, code: types.CodeType) -> bool:
    """Whether the variables `code` closes over keep the values they hold now.

    NOTE: the hook reads them when the backward runs, eager's late binding: the code
    that made them (the nearest calling frame whose cells they are) must store each
    at most once and outside any loop, and no function made in it may write them."""
    names = set(code.co_freevars)
    if not names:
        return True
    maker: Translator | None = tx
    while maker is not None and not names <= set(maker.code.co_cellvars):
        maker = maker.parent
    if maker is None:
        return False
    stores = [
        inst
        for inst in dis.get_instructions(maker.code)
        if inst.opname in ("STORE_DEREF", "DELETE_DEREF") and inst.argval in names
    ]
    if len({inst.argval for inst in stores}) != len(stores):
        return False
    if any(lies_in_loop(maker.code, inst.offset) for inst in stores):
        return False
    return not any(_writes_any(inner, names) for inner in _nested_codes(maker.code))


def _nested_codes(code: types.CodeType) -> list[types.CodeType]:
    inner = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return inner + [deeper for c in inner for deeper in _nested_codes(c)]


def _writes_any(code: types.CodeType, names: set[str]) -> bool:
    return any(
        inst.opname in ("STORE_DEREF", "DELETE_DEREF") and inst.argval in names
        for inst in dis.get_instructions(code)
    )


def _is_constant(value: Value | None) -> bool:
    return isinstance(value, PythonValue) and value.source is None and is_constant(value.obj)


def _hook_parts(tx: Translator, hook: Value) -> tuple[Any, list[TensorValue]]:
    """The hook `_hook_refusal` took, as a maker of the Python callable from the tensors
    it closes over (given in the backward: the graph's values, saved by the node), and
    those tensors: a function read from outside (its identity guarded), a partial of one,
    or a function made in the frame, its cells and defaults made again around them."""
    if isinstance(hook, PartialValue):
        inner, extras = _hook_parts(tx, hook.func)
        args = [value.obj for value in hook.args]  # type: ignore[attr-defined]
        kwargs = {name: value.obj for name, value in hook.kwargs.items()}  # type: ignore[attr-defined]
        return (lambda tensors: functools.partial(inner(tensors), *args, **kwargs)), extras
    if isinstance(hook, PythonValue):
        guard_identity(tx, hook)
        function = hook.obj
        return (lambda tensors: function), []
    assert isinstance(hook, FunctionValue)
    extras: list[TensorValue] = []

    def slot(value: Value | None) -> tuple[bool, Any]:
        if isinstance(value, TensorValue):
            extras.append(value)
            return True, len(extras) - 1
        return False, value.obj  # type: ignore[union-attr]

    cells = [slot(cell.contents) for cell in hook.closure]
    defaults = [slot(value) for value in hook.defaults]
    code, scope, name = hook.code, hook.globals, hook.name

    def make(tensors: tuple[torch.Tensor, ...]) -> types.FunctionType:
        def fill(slots: list[tuple[bool, Any]]) -> tuple[Any, ...]:
            return tuple(tensors[item] if is_tensor else item for is_tensor, item in slots)

        closure = tuple(types.CellType(item) for item in fill(cells))
        return types.FunctionType(code, scope, name, fill(defaults) or None, closure or None)

    return make, extras


def _may_write_in_place(code: types.CodeType) -> bool:
    """Whether code (or a function nested in it) names a trailing-underscore attribute
    (`t.add_`), an `out=` keyword, or assigns or deletes an item."""
    for inst in dis.get_instructions(code):
        if inst.opname in ("STORE_SUBSCR", "DELETE_SUBSCR", "STORE_SLICE"):
            return True
        if inst.opname == "KW_NAMES" and "out" in (inst.argval or ()):
            return True
    if any(name.endswith("_") and not name.endswith("__") for name in code.co_names):
        return True
    return any(_may_write_in_place(inner) for inner in _nested_codes(code))


def _hook_function(hook: Any) -> types.FunctionType:
    """The Python function a hook runs (a partial's)."""
    return hook.func if isinstance(hook, functools.partial) else hook


def _insert_below_earlier_hooks(tx: Translator, outermost: torch.fx.Node, maker: Any) -> None:
    """Puts `hook`'s node below the chain of hook nodes ending at `outermost`.

    NOTE: eager runs a tensor's hooks in the order they were registered, each on what
    the one before returned; the gradient reaches the outermost node first, so a later
    hook's node goes in below those of the earlier ones."""
    innermost = _innermost_hook(outermost)
    below = TensorValue(innermost.args[0], innermost.meta[_UNHOOKED])
    with tx.ctx.graph.inserting_before(innermost):
        hooked = tx.ctx.call("call_function", _hook_target(maker, 0), (below,), {})
    if not isinstance(hooked, TensorValue):
        raise Unsupported("Tensor.register_hook(): the hook node gave no tensor")
    tx.ctx.autograd_function_nodes_made += 1
    hooked.node.meta[_UNHOOKED] = below.example
    innermost.replace_input_with(below.node, hooked.node)


def _innermost_hook(node: torch.fx.Node) -> torch.fx.Node:
    """The first of the chain of hook nodes ending at `node`."""
    while _UNHOOKED in node.args[0].meta:
        node = node.args[0]
    return node


def _hook_target(maker: Any, extras: int) -> Any:
    """The node's target: an autograd Function copying its input forward and calling the
    hook `maker` makes from its other `extras` inputs (the tensors it closes over, saved)
    on the gradient backward (the gradient itself where it returns None)."""
    nones = (None,) * extras

    class TensorHook(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, tensor: torch.Tensor, *closed: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(*closed)
            return tensor.clone()

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> Any:
            result = maker(ctx.saved_tensors)(grad)
            return (grad if result is None else result, *nones)

    def tensor_hook(tensor: torch.Tensor, *closed: torch.Tensor) -> torch.Tensor:
        return TensorHook.apply(tensor, *closed)

    def example(tensor: torch.Tensor, *closed: torch.Tensor) -> torch.Tensor:
        _example_hook_result(maker(closed), torch.ones_like(tensor))
        return TensorHook.apply(tensor, *closed)

    function = _hook_function(maker(nones))
    name = "".join(c if c.isalnum() else "_" for c in function.__name__)
    tensor_hook.__name__ = tensor_hook.__qualname__ = f"tensor_hook_{name}"
    tensor_hook.__ember_example__ = example  # type: ignore[attr-defined]
    return tensor_hook


def _example_hook_result(hook: Any, grad: torch.Tensor) -> torch.Tensor:
    """The gradient after `hook` ran on the example `grad`; Unsupported where it cannot
    run there or returns something autograd would refuse."""
    try:
        result = hook(grad)
    except Unsupported:
        raise
    except Exception as error:
        raise Unsupported(
            f"the tensor hook {_hook_function(hook).__qualname__} cannot run on the capture's example "
            f"gradient ({type(error).__name__}: {error})"
        ) from error
    if result is None:
        return grad
    if not (
        isinstance(result, torch.Tensor)
        and result.shape == grad.shape
        and result.dtype == grad.dtype
        and result.device == grad.device
    ):
        raise Unsupported(
            f"the tensor hook {_hook_function(hook).__qualname__} returns something other than None or "
            "a gradient like the one it got"
        )
    return result


def check_hooked_tensors_stay(ctx: CaptureContext, outputs: list[Any]) -> None:
    """TensorHookEscapes where a tensor with a hook node is among the graph's outputs.

    NOTE: outside the graph a hook registered on that tensor (or its retained .grad)
    would see the gradient before the graph's hook ran, where eager's hooks run in the
    order registered: capture starts again with the hooks run eagerly."""
    for output in outputs:
        node = output.node if isinstance(output, TensorValue) else output
        if isinstance(node, torch.fx.Node) and _UNHOOKED in node.meta:
            raise TensorHookEscapes("a tensor with a hook registered in the frame leaves the graph")
