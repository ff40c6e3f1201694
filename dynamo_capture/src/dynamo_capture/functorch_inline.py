"""torch.func's transforms traced into the graph, as torch.compile traces them.

torch.compile inlines torch.func's Python and records the functorch calls it makes;
this module records the same calls around the transformed function, traced like user
code on the transform's tensors. For `torch.func.grad(f)(x)`:

    _saved_tensors_hooks_disable(message)     grad and vjp refuse saved-tensor hooks
    _grad_increment_nesting()                 level 1
    x1 = _wrap_for_grad(x, 1)                 every tensor argument
    set_inplace_requires_grad_allowed(True)
    _set_tensor_requires_grad(x1)             every differentiated argument
    set_inplace_requires_grad_allowed(False)
    out = f(x1)                               traced here
    grads = _autograd_grad((out,), [x1], create_graph=True)
    _unwrap_for_grad(grads[0], 1); _unwrap_for_grad(out, 1)
    _grad_decrement_nesting()
    _saved_tensors_hooks_enable()

and for `torch.func.vmap(f, in_dims, out_dims)(x)`: lazy_load_decompositions(),
`_vmap_increment_nesting(batch_size, randomness)`, `_add_batch_dim(x, in_dim, level)`
for each batched argument, f traced on tensors without their batch dimension,
`_remove_batch_dim(out, level, batch_size, out_dim)` for each output,
`_vmap_decrement_nesting()` (in_dims a prefix of the arguments' pytree; keyword
arguments unbatched; with chunk_size, each batched tensor `tensor_split`, one level a
chunk, each output's chunks `torch.cat`, as torch's `_chunked_vmap`).
`torch.func.vjp(f, x)` opens a grad level as grad does and
returns a `Pullback`, whose call is one `_autograd_vjp` node; `torch.func.jvp` opens a jvp
level and a forward-AD dual level, makes a dual of each primal and tangent and unpacks
each output; `torch.func.jacrev(f)(x)` is vjp of f, an identity basis over the output
and vmap of the pullback over it; `jacfwd` is vmap over an identity basis over the inputs
(one block per differentiated input) of jvp of f; `hessian` is jacfwd of jacrev. A
tuple of argnums gives a tuple of Jacobians; `has_aux` unwraps aux's tensors (jacfwd
then takes their first batch row, as torch does). Graph and op counts then equal torch.compile's.

The nodes call torch's functorch functions when the graph runs (`torch._C._functorch`,
and `torch.func.vmap` once, for the batching rules it loads on first use), so results are eager's; capture
only gives each node its result's metadata (`__ember_example__`). Arguments may be
tuples, lists and dicts of tensors (pytree order, as torch's). Anything else (vmap
with chunk_size and randomness="same", non-constant options, a function capture
cannot trace) keeps the opaque node of function_transforms.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.values import DictValue, ListValue, PythonValue, TensorValue, TupleValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "InlinedTransform",
    "Pullback",
    "call_hessian",
    "call_inlined_transform",
    "call_jacfwd",
    "call_jacrev",
    "call_jvp",
    "call_pullback",
    "call_vjp",
    "inlined_transform",
]

_GRAD_HOOKS_MESSAGE = (
    "torch.func.{grad, vjp, jacrev, hessian} don't yet support saved tensor hooks. "
    "Please open an issue with your use case."
)


class InlinedTransform:
    """What `torch.func.grad(f, ...)` / `vmap(f, ...)` gives in captured code: called
    there, it is traced into the graph; anywhere else it is torch's own transform."""

    __slots__ = ("applied", "fallback", "function", "kind", "options")

    def __init__(self, kind: str, function: Value, options: dict[str, Any], applied: Any):
        self.kind, self.function, self.options, self.applied = kind, function, options, applied
        self.fallback: Any = None  # what is called where a call is not traced (jacrev)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.applied(*args, **kwargs)


def inlined_transform(
    kind: str, function: Value, options: dict[str, Any], applied: Any
) -> InlinedTransform | None:
    """The transform to trace into the graph, or None where its options are not ones
    traced here (the opaque node is used then)."""
    if kind in ("grad", "grad_and_value"):
        argnums = options.get("argnums", 0)
        numbers = argnums if isinstance(argnums, tuple) else (argnums,)
        if not all(type(n) is int and n >= 0 for n in numbers) or not numbers:
            return None
        if not isinstance(options.get("has_aux", False), bool):
            return None
    elif kind in ("jacrev", "jacfwd", "hessian"):
        pass  # checked when called (the opaque node otherwise)
    elif kind == "vmap":
        chunk_size = options.get("chunk_size")
        if chunk_size is not None and (type(chunk_size) is not int or chunk_size <= 0):
            return None
        randomness = options.get("randomness", "error")
        if randomness not in ("error", "different", "same"):
            return None
        if chunk_size is not None and randomness == "same":
            return None  # each chunk restores the RNG state: not traced here
        if not _dims_tree(options.get("in_dims", 0)):
            return None
        dims = options.get("out_dims", 0)
        flat = dims if isinstance(dims, tuple) else (dims,)
        if not all(d is None or type(d) is int for d in flat):
            return None
    else:
        return None
    return InlinedTransform(kind, function, options, applied)


def call_inlined_transform(
    tx: Translator, transform: InlinedTransform, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    if kwargs and transform.kind not in ("vmap", "grad", "grad_and_value"):
        raise Unsupported(f"torch.func.{transform.kind}(f)(...) with keyword arguments")
    if transform.kind in ("vmap", "grad", "grad_and_value", "jacrev", "jacfwd", "hessian"):
        # containers from outside the frame (a dict of parameters an eager part made)
        # read as containers of tensors, their items guarded
        from dynamo_capture.operations import realize

        args = [realize(tx, arg) for arg in args]
        kwargs = {name: realize(tx, value) for name, value in kwargs.items()}
    if transform.kind == "vmap":
        return _vmap(tx, transform, args, kwargs)
    if transform.kind in ("jacrev", "jacfwd", "hessian"):
        trace = {"jacrev": call_jacrev, "jacfwd": call_jacfwd, "hessian": call_hessian}
        traced = trace[transform.kind](tx, transform, args)
        if traced is not None:
            return traced
        from dynamo_capture.function_transforms import call_function_transform

        fallback = transform.applied or transform.fallback
        if fallback is None:
            raise Unsupported(f"torch.func.{transform.kind} of a closure in a form not traced")
        return call_function_transform(tx, fallback, args, {})  # type: ignore[return-value]
    return _grad(tx, transform, args, kwargs)


def _dims_tree(dims: Any) -> bool:
    """`dims` is a vmap in_dims: None, an int, or tuples, lists and dicts of them."""
    if dims is None or type(dims) is int:
        return True
    if type(dims) in (tuple, list):
        return all(_dims_tree(d) for d in dims)
    if type(dims) is dict:
        return all(_dims_tree(d) for d in dims.values())
    return False


# ----- node targets: torch's functorch calls, with the metadata of their results -----
def _same_metadata(tensor: torch.Tensor, *rest: Any) -> torch.Tensor:
    return torch.empty_strided(
        tensor.shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device
    )


def _wrap_for_grad(tensor: torch.Tensor, level: int) -> torch.Tensor:
    return torch._C._functorch._wrap_for_grad(tensor, level)


def _unwrap_for_grad(tensor: torch.Tensor, level: int) -> torch.Tensor:
    return torch._C._functorch._unwrap_for_grad(tensor, level)


def _set_tensor_requires_grad(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.requires_grad_()


def _autograd_grad(
    outputs: tuple[torch.Tensor, ...], inputs: list[torch.Tensor], create_graph: bool = True
) -> tuple[torch.Tensor, ...]:
    """torch.func.grad's gradient: zeros for an input the output does not depend on."""
    differentiable = tuple(out for out in outputs if out.requires_grad)
    if not differentiable:
        return tuple(torch.zeros_like(inp) for inp in inputs)
    grads = torch.autograd.grad(
        differentiable, inputs, create_graph=create_graph, allow_unused=True
    )
    return tuple(
        torch.zeros_like(inp) if grad is None else grad
        for grad, inp in zip(grads, inputs, strict=True)
    )


def _autograd_grad_example(outputs: Any, inputs: list[torch.Tensor], *_: Any, **__: Any) -> Any:
    return tuple(_same_metadata(inp) for inp in inputs)


def _autograd_vjp(
    outputs: list[torch.Tensor],
    inputs: list[torch.Tensor],
    cotangents: list[torch.Tensor],
    retain_graph: bool = True,
    create_graph: bool = True,
) -> tuple[torch.Tensor, ...]:
    """torch.func.vjp's pullback: outputs that do not require grad are left out, and an
    input no output depends on gets zeros."""
    pairs = [(out, co) for out, co in zip(outputs, cotangents, strict=True) if out.requires_grad]
    if not pairs:
        return tuple(torch.zeros_like(inp) for inp in inputs)
    grads = torch.autograd.grad(
        [out for out, _ in pairs],
        inputs,
        [co for _, co in pairs],
        retain_graph=retain_graph,
        create_graph=create_graph,
        allow_unused=True,
    )
    return tuple(
        torch.zeros_like(inp) if grad is None else grad
        for grad, inp in zip(grads, inputs, strict=True)
    )


def _vmap_increment_nesting(batch_size: int, randomness: str) -> int:
    return torch._C._functorch._vmap_increment_nesting(batch_size, randomness)


def _no_result(*args: Any) -> None:
    return None


_VMAP_READY = False


def _lazy_load_decompositions() -> None:
    """torch.func.vmap registers its batching decompositions on its first call; this node
    makes that first call (through the public `torch.func.vmap`) once a process."""
    global _VMAP_READY
    if not _VMAP_READY:
        torch.func.vmap(torch.neg)(torch.zeros(1, 1))
        _VMAP_READY = True


def _add_batch_dim(tensor: torch.Tensor, in_dim: int, level: int) -> torch.Tensor:
    return torch._C._functorch._add_batch_dim(tensor, in_dim, level)


def _add_batch_dim_example(tensor: torch.Tensor, in_dim: int, level: int) -> torch.Tensor:
    if tensor.shape[in_dim] == 0:  # a batch of no rows: no row to select
        return tensor.new_empty(tensor.shape[:in_dim] + tensor.shape[in_dim + 1 :])
    return tensor.select(in_dim, 0).clone()


def _remove_batch_dim(
    tensor: torch.Tensor, level: int, batch_size: int, out_dim: int
) -> torch.Tensor:
    return torch._C._functorch._remove_batch_dim(tensor, level, batch_size, out_dim)


def _remove_batch_dim_example(
    tensor: torch.Tensor, level: int, batch_size: int, out_dim: int
) -> torch.Tensor:
    shape = list(tensor.shape)
    shape.insert(out_dim, batch_size)
    return tensor.new_empty(shape)


_wrap_for_grad.__ember_example__ = _same_metadata  # type: ignore[attr-defined]
_unwrap_for_grad.__ember_example__ = _same_metadata  # type: ignore[attr-defined]
_set_tensor_requires_grad.__ember_example__ = _same_metadata  # type: ignore[attr-defined]
_autograd_grad.__ember_example__ = _autograd_grad_example  # type: ignore[attr-defined]
_autograd_vjp.__ember_example__ = _autograd_grad_example  # type: ignore[attr-defined]
_add_batch_dim.__ember_example__ = _add_batch_dim_example  # type: ignore[attr-defined]
_remove_batch_dim.__ember_example__ = _remove_batch_dim_example  # type: ignore[attr-defined]
_vmap_increment_nesting.__ember_example__ = _no_result  # type: ignore[attr-defined]


# ----- the traced transforms ---------------------------------------------------------
def _effect(tx: Translator, target: Any, *args: Any) -> None:
    """A node run for its effect on functorch's or autograd's state."""
    tx.ctx.graph.call_function(target, args)


def _tensor(tx: Translator, target: Any, *args: Any, **kwargs: Any) -> Value:
    return tx.ctx.call("call_function", target, args, kwargs)


def _tensors_of(value: Value, what: str) -> list[TensorValue]:
    """The tensors of a tensor or a (nested) tuple, list or dict of them, in torch's
    pytree order (a dict's in insertion order)."""
    if isinstance(value, TensorValue):
        return [value]
    if isinstance(value, TupleValue | ListValue):
        return [item for inner in value.items for item in _tensors_of(inner, what)]
    if isinstance(value, DictValue) and value.cls is dict:
        return [item for inner in value.items.values() for item in _tensors_of(inner, what)]
    raise Unsupported(f"{what} holds a {type(value).__name__}, not tensors")


def _map_tensors(value: Value, fn: Any) -> Value:
    """`value` with each of its tensors (in _tensors_of's order) replaced by fn(tensor)."""
    if isinstance(value, TensorValue):
        return fn(value)
    if isinstance(value, TupleValue):
        return TupleValue([_map_tensors(item, fn) for item in value.items], value.cls)
    if isinstance(value, ListValue):
        return ListValue([_map_tensors(item, fn) for item in value.items])
    if isinstance(value, DictValue) and value.cls is dict:
        return DictValue({key: _map_tensors(item, fn) for key, item in value.items.items()})
    return value


def _holds_tensors(value: Value) -> bool:
    try:
        return bool(_tensors_of(value, ""))
    except Unsupported:
        return False


def _open_grad_level(tx: Translator) -> tuple[int, tuple[Any, bool]]:
    """The calls torch.func.grad and vjp make on entry: saved-tensor hooks refused, a new
    grad level, grad mode on. The level, and what closing it needs."""
    from dynamo_capture.methods import set_grad_mode

    hooks = torch._C._autograd
    previous_message = hooks._saved_tensors_hooks_get_disabled_error_message()
    _effect(tx, hooks._saved_tensors_hooks_disable, _GRAD_HOOKS_MESSAGE)
    tx.ctx.functorch_level += 1
    _effect(tx, torch._C._functorch._grad_increment_nesting)
    switched = not torch.is_grad_enabled()
    if switched:  # grad and vjp differentiate under no_grad too (enable_grad inside)
        set_grad_mode(tx, True)
    return tx.ctx.functorch_level, (previous_message, switched)


def _close_grad_level(tx: Translator, opened: tuple[Any, bool]) -> None:
    from dynamo_capture.methods import set_grad_mode

    previous_message, switched = opened
    hooks = torch._C._autograd
    if switched:
        set_grad_mode(tx, False)
    _effect(tx, torch._C._functorch._grad_decrement_nesting)
    tx.ctx.functorch_level -= 1
    if previous_message is None:
        _effect(tx, hooks._saved_tensors_hooks_enable)
    else:
        _effect(tx, hooks._saved_tensors_hooks_disable, previous_message)


def _wrap_and_require_grad(
    tx: Translator, args: list[Value], numbers: tuple[int, ...], level: int
) -> list[Value]:
    """Every tensor argument wrapped at `level`; those differentiated made to require grad."""
    wrapped = [_map_tensors(arg, lambda t: _tensor(tx, _wrap_for_grad, t, level)) for arg in args]
    for number in numbers:
        for tensor in _tensors_of(wrapped[number], "a differentiated argument"):
            _effect(tx, torch._C._functorch.set_inplace_requires_grad_allowed, True)
            _tensor(tx, _set_tensor_requires_grad, tensor)
            _effect(tx, torch._C._functorch.set_inplace_requires_grad_allowed, False)
    return wrapped


def _split_aux(output: Value, has_aux: bool, kind: str) -> tuple[Value, Value | None]:
    """f's output and, with has_aux, its aux (f must return `(out, aux)` then)."""
    if not has_aux:
        return output, None
    if not (isinstance(output, TupleValue) and len(output.items) == 2):
        raise Unsupported(f"torch.func.{kind} with has_aux: f must return (out, aux)")
    return output.items[0], output.items[1]


def _unwrap_aux(tx: Translator, aux: Value, kind: str, level: int) -> Value:
    """aux with each of its tensors unwrapped from `level` (it must hold only tensors)."""
    _tensors_of(aux, f"the aux output of torch.func.{kind}")
    return _map_tensors(aux, lambda t: _tensor(tx, _unwrap_for_grad, t, level))


def _open_vmap_level(tx: Translator, batch_size: Any, randomness: str, load: bool = True) -> int:
    """The calls torch.func.vmap makes on entry: its batching rules loaded (unless
    `load` is False: a chunked vmap loads them once, before its chunks), a new vmap
    level of `batch_size`. The level."""
    if load:
        _effect(tx, _lazy_load_decompositions)
    tx.ctx.functorch_level += 1
    tx.ctx.call(
        "call_function",
        _vmap_increment_nesting,
        (PythonValue(batch_size), PythonValue(randomness)),
        {},
        allow_python_result=True,
    )
    return tx.ctx.functorch_level


def _close_vmap_level(tx: Translator) -> None:
    _effect(tx, torch._C._functorch._vmap_decrement_nesting)
    tx.ctx.functorch_level -= 1


def _jacobian_argnums(
    transform: InlinedTransform,
    args: list[Value],
    unsupported_option: bool,
    containers: bool = False,
) -> tuple[int, ...] | None:
    """The differentiated argument numbers of jacrev or jacfwd, or None where the call
    is not traced (argnums or has_aux not ones traced, an option set that is not
    traced, arguments that are not tensors)."""
    argnums = transform.options.get("argnums", 0)
    numbers = argnums if isinstance(argnums, tuple) else (argnums,)
    if (
        not numbers
        or not all(type(n) is int and 0 <= n < len(args) for n in numbers)
        or len(set(numbers)) != len(numbers)
        or not isinstance(transform.options.get("has_aux", False), bool)
        or unsupported_option
        or not all(isinstance(a, TensorValue) or (containers and _holds_tensors(a)) for a in args)
    ):
        return None
    return numbers


def _grad(
    tx: Translator, transform: InlinedTransform, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    from dynamo_capture.calls import call

    argnums = transform.options.get("argnums", 0)
    has_aux = transform.options.get("has_aux", False)
    numbers = argnums if isinstance(argnums, tuple) else (argnums,)
    if max(numbers) >= len(args) or not all(_holds_tensors(args[n]) for n in numbers):
        raise Unsupported(
            f"torch.func.{transform.kind}: a differentiated argument is not tensors (a tensor, "
            "or tuples, lists and dicts of them)"
        )
    if any(not isinstance(a, PythonValue) and not _holds_tensors(a) for a in args):
        raise Unsupported(f"torch.func.{transform.kind}: arguments holding other values")
    level, opened = _open_grad_level(tx)
    wrapped = _wrap_and_require_grad(tx, args, numbers, level)
    # keyword arguments' tensors are wrapped too, never differentiated
    wrapped_kwargs = {
        name: _map_tensors(value, lambda t: _tensor(tx, _wrap_for_grad, t, level))
        for name, value in kwargs.items()
    }
    output, aux = _split_aux(
        call(tx, transform.function, wrapped, wrapped_kwargs), has_aux, transform.kind
    )
    if not isinstance(output, TensorValue) or output.example.dim() != 0:
        raise Unsupported(f"torch.func.{transform.kind}: f must return a scalar tensor")
    differentiated = [t for n in numbers for t in _tensors_of(wrapped[n], "an argument")]
    grads = _tensor(tx, _autograd_grad, (output,), differentiated, create_graph=True)
    flat_grads = iter(
        [
            _tensor(tx, _unwrap_for_grad, _item(tx, grads, index), level)
            for index in range(len(differentiated))
        ]
    )
    grad_items = [_map_tensors(wrapped[n], lambda _: next(flat_grads)) for n in numbers]
    value = _tensor(tx, _unwrap_for_grad, output, level)
    if aux is not None:
        aux = _unwrap_aux(tx, aux, transform.kind, level)
    _close_grad_level(tx, opened)
    grad = grad_items[0] if not isinstance(argnums, tuple) else TupleValue(grad_items)
    if transform.kind == "grad":
        return TupleValue([grad, aux]) if aux is not None else grad
    value_part = TupleValue([value, aux]) if aux is not None else value
    return TupleValue([grad, value_part])


def _item(tx: Translator, sequence: Value, index: int) -> Value:
    if isinstance(sequence, TupleValue):  # a tuple result: its items are getitem nodes
        return sequence.items[index]
    import operator

    return _tensor(tx, operator.getitem, sequence, index)


def _vmap(
    tx: Translator, transform: InlinedTransform, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """vmap(f, in_dims, out_dims, randomness, chunk_size)(*args, **kwargs) as torch's
    vmap_impl runs it: the batched tensors (in_dims a prefix of the arguments'
    structure) found in pytree order; without chunk_size one vmap level around f; with
    it, each batched tensor `tensor_split` into chunks, one level a chunk (empty chunks
    skipped) and each output's chunks `torch.cat` on its out_dim. Keyword arguments
    reach f unbatched."""
    in_dims = transform.options.get("in_dims", 0)
    dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
    if len(dims) != len(args):
        raise Unsupported("torch.func.vmap: in_dims do not match the arguments")
    leaves: list[tuple[TensorValue, int]] = []
    for arg, dim in zip(args, dims, strict=True):
        _map_batched(arg, dim, lambda t, d: leaves.append((t, d)) or t)
    sizes = [tensor.example.shape[dim] for tensor, dim in leaves]
    if not sizes or any(size is not sizes[0] and size != sizes[0] for size in sizes):
        raise Unsupported("torch.func.vmap: batch sizes that differ or no batched argument")
    batch_size = sizes[0]  # a SymInt where the batch dimension is dynamic
    tx.ctx.batching_nodes_made += 1
    chunk_size = transform.options.get("chunk_size")
    if chunk_size is None:
        return _flat_vmap(tx, transform, args, dims, batch_size, kwargs)
    if type(batch_size) is not int or batch_size == 0:
        raise Unsupported("torch.func.vmap with chunk_size over a dynamic or empty batch")
    return _chunked_vmap(tx, transform, args, dims, batch_size, chunk_size, leaves, kwargs)


def _map_batched(value: Value, dim: Any, visit: Any) -> Value:
    """`value` with each tensor `dim` (an in_dims entry: None, an int, or a tuple, list
    or dict prefix of value's structure) batches replaced by visit(tensor, its dim),
    in torch's pytree order."""
    if dim is None:
        return value
    if type(dim) is int:

        def batched(tensor: TensorValue) -> Value:
            rank = tensor.example.dim()
            if not -rank <= dim < rank:
                raise Unsupported(f"torch.func.vmap: in_dim {dim} of a {rank}-d tensor")
            return visit(tensor, dim % rank)

        _tensors_of(value, "a batched argument of torch.func.vmap")
        return _map_tensors(value, batched)
    if type(dim) is tuple and isinstance(value, TupleValue) and value.cls is tuple:
        if len(dim) == len(value.items):
            items = [_map_batched(v, d, visit) for v, d in zip(value.items, dim, strict=True)]
            return TupleValue(items, value.cls)
    if type(dim) is list and isinstance(value, ListValue) and len(dim) == len(value.items):
        return ListValue([_map_batched(v, d, visit) for v, d in zip(value.items, dim, strict=True)])
    if type(dim) is dict and isinstance(value, DictValue) and value.cls is dict:
        # NOTE: torch pairs a dict's dims with its items by position (pytree order), not
        # by key: keys in another order are left to eager
        if list(dim) == list(value.items):
            return DictValue(
                {key: _map_batched(item, dim[key], visit) for key, item in value.items.items()}
            )
    raise Unsupported("torch.func.vmap: in_dims whose structure does not match the argument's")


def _flat_vmap(
    tx: Translator,
    transform: InlinedTransform,
    args: list[Value],
    dims: tuple[Any, ...],
    batch_size: Any,
    kwargs: dict[str, Value],
    load: bool = True,
) -> Value:
    """One vmap level of `batch_size` around f: batch dims added, f traced, removed."""
    from dynamo_capture.calls import call

    out_dims = transform.options.get("out_dims", 0)
    randomness = transform.options.get("randomness", "error")
    before = set(tx.ctx.graph.nodes)  # tensors made before the level: never batched by it
    level = _open_vmap_level(tx, batch_size, randomness, load)
    batched = [
        _map_batched(arg, dim, lambda t, d: _tensor(tx, _add_batch_dim, t, d, level))
        for arg, dim in zip(args, dims, strict=True)
    ]
    output = call(tx, transform.function, batched, kwargs)
    outputs = _tensors_of(output, "the output of torch.func.vmap's function")
    out_flat = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(outputs)
    if len(out_flat) != len(outputs):
        raise Unsupported("torch.func.vmap: out_dims that do not match the outputs")
    removed = {}
    for tensor, dim in zip(outputs, out_flat, strict=True):
        if dim is not None:
            removed[id(tensor)] = _tensor(
                tx,
                _remove_batch_dim,
                tensor,
                level,
                PythonValue(batch_size),
                dim % (tensor.example.dim() + 1),
            )
        elif _made_before_level(tensor, before):
            # NOTE: an out_dim of None returns the tensor as it is; torch.compile records
            # the batched-ness query it makes. A tensor the level may have batched is
            # left to eager (torch raises for a batched one)
            _effect(tx, torch._C._functorch.is_batchedtensor, tensor.node)
            removed[id(tensor)] = tensor
        else:
            raise Unsupported("torch.func.vmap: an out_dim of None for an output it may batch")
    _close_vmap_level(tx)
    return _map_tensors(output, lambda t: removed[id(t)])


def _made_before_level(tensor: TensorValue, before: set[torch.fx.Node]) -> bool:
    """The tensor is an input, a constant, or was made before a vmap level opened."""
    return tensor.node.op in ("placeholder", "get_attr") or tensor.node in before


def _chunked_vmap(
    tx: Translator,
    transform: InlinedTransform,
    args: list[Value],
    dims: tuple[Any, ...],
    batch_size: int,
    chunk_size: int,
    leaves: list[tuple[TensorValue, int]],
    kwargs: dict[str, Value],
) -> Value:
    """vmap with chunk_size: torch's `_get_chunked_inputs` and `_chunked_vmap`."""
    from dynamo_capture.methods import call_method

    out_dims = transform.options.get("out_dims", 0)
    if out_dims is None or (isinstance(out_dims, tuple) and None in out_dims):
        raise Unsupported("torch.func.vmap with chunk_size and an out_dim of None")

    chunk_sizes = [chunk_size] * (batch_size // chunk_size)
    if batch_size % chunk_size:
        chunk_sizes.append(batch_size % chunk_size)
    split_indices = tuple(itertools.accumulate(chunk_sizes))
    _effect(tx, _lazy_load_decompositions)
    pieces = []
    for tensor, dim in leaves:
        split = call_method(
            tx, tensor, "tensor_split", [PythonValue(split_indices)], {"dim": PythonValue(dim)}
        )
        pieces.append([_item(tx, split, index) for index in range(len(split_indices) + 1)])
    sizes = [*chunk_sizes, batch_size - split_indices[-1]]
    outputs: list[Value] = []
    for index, size in enumerate(sizes):
        if size == 0:
            continue  # torch skips an empty chunk
        chunk = iter(piece[index] for piece in pieces)
        chunk_args = [
            _map_batched(arg, dim, lambda t, d, chunk=chunk: next(chunk))
            for arg, dim in zip(args, dims, strict=True)
        ]
        outputs.append(_flat_vmap(tx, transform, chunk_args, dims, size, kwargs, load=False))
    flat = [_tensors_of(output, "the output of torch.func.vmap's function") for output in outputs]
    out_flat = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(flat[0])
    joined = [
        _tensor(tx, torch.cat, ListValue([chunks[position] for chunks in flat]), dim=out_dim)
        for position, out_dim in enumerate(out_flat)
    ]
    result = iter(joined)
    return _map_tensors(outputs[0], lambda _: next(result))


# ----- torch.func.vjp ------------------------------------------------------------------
class Pullback:
    """The function `torch.func.vjp(f, *primals)` returns, in captured code: called there,
    an `_autograd_vjp` node over f's outputs and the differentiated primals; anywhere
    else (returned from the frame) Unsupported."""

    __slots__ = ("inputs", "outputs", "primals", "structure")

    def __init__(
        self,
        outputs: list[TensorValue],
        inputs: list[TensorValue],
        structure: Any,
        primals: list[Value],
    ):
        self.outputs, self.inputs, self.structure = outputs, inputs, structure
        self.primals = primals  # the wrapped primals: their structure is the result's


def call_vjp(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`torch.func.vjp(f, *primals, has_aux=...)` traced as torch.compile traces it."""
    from dynamo_capture.calls import call
    from dynamo_capture.operations import NotConstant, as_constant

    if set(kwargs) - {"has_aux"} or len(args) < 2:
        raise Unsupported("torch.func.vjp with arguments other than f, *primals, has_aux")
    try:
        has_aux = as_constant(kwargs.get("has_aux", PythonValue(False)))
    except NotConstant:
        raise Unsupported("torch.func.vjp with has_aux known only when it runs") from None
    from dynamo_capture.operations import realize

    primals = [realize(tx, p) for p in args[1:]]
    if not isinstance(has_aux, bool) or not all(_holds_tensors(p) for p in primals):
        raise Unsupported("torch.func.vjp of primals other than tensors (or containers of them)")
    level, opened = _open_grad_level(tx)
    wrapped = _wrap_and_require_grad(tx, primals, tuple(range(len(primals))), level)
    output, aux = _split_aux(call(tx, args[0], wrapped, {}), has_aux, "vjp")
    if aux is not None:
        aux = _unwrap_aux(tx, aux, "vjp", level)
    outputs = _tensors_of(output, "the output of torch.func.vjp's function")
    if not all(o.example.is_floating_point() or o.example.is_complex() for o in outputs):
        raise Unsupported("torch.func.vjp: an output that is not floating point (eager raises)")
    results = _map_tensors(output, lambda t: _tensor(tx, _unwrap_for_grad, t, level))
    _close_grad_level(tx, opened)
    inputs = [t for p in wrapped for t in _tensors_of(p, "a primal")]
    pullback = PythonValue(Pullback(outputs, inputs, _structure(output), wrapped))
    return TupleValue([results, pullback, *([aux] if aux is not None else [])])


def call_pullback(
    tx: Translator, pullback: Pullback, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    from dynamo_capture.operations import NotConstant, as_constant

    names = ("cotangents", "retain_graph", "create_graph")
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    if set(bound) - set(names) or "cotangents" not in bound or len(args) > len(names):
        raise Unsupported("the function torch.func.vjp returned, called with other arguments")
    try:
        retain_graph = as_constant(bound.get("retain_graph", PythonValue(True)))
        create_graph = as_constant(bound.get("create_graph", PythonValue(None)))
    except NotConstant:
        raise Unsupported("a vjp function's options known only when it runs") from None
    if create_graph is None:
        create_graph = torch.is_grad_enabled()
    cotangents = bound["cotangents"]
    if _structure(cotangents) != pullback.structure:
        raise Unsupported("cotangents of another structure than the vjp function's outputs")
    flat = _tensors_of(cotangents, "the cotangents")
    grads = _tensor(
        tx,
        _autograd_vjp,
        list(pullback.outputs),
        list(pullback.inputs),
        flat,
        retain_graph=bool(retain_graph),
        create_graph=bool(create_graph),
    )
    flat = iter([_item(tx, grads, index) for index in range(len(pullback.inputs))])
    # one gradient a primal, in the primal's structure (a dict of tensors gives a dict)
    return TupleValue([_map_tensors(primal, lambda _: next(flat)) for primal in pullback.primals])


def _structure(value: Value) -> Any:
    """The nesting of tensors in `value` (None for a tensor), to compare cotangents with."""
    if isinstance(value, TensorValue):
        return None
    if isinstance(value, TupleValue | ListValue):
        kind = value.cls if isinstance(value, TupleValue) else list
        return (kind, tuple(_structure(item) for item in value.items))
    raise Unsupported(f"a {type(value).__name__} where torch.func.vjp takes tensors")


# ----- torch.func.jvp ------------------------------------------------------------------
def _jvp_increment_nesting() -> int:
    return torch._C._functorch._jvp_increment_nesting()


def _enter_dual_level() -> None:
    torch.autograd.forward_ad.enter_dual_level()


def _exit_dual_level() -> None:
    torch.autograd.forward_ad.exit_dual_level()


def _make_dual(primal: torch.Tensor, tangent: torch.Tensor) -> torch.Tensor:
    return torch.autograd.forward_ad.make_dual(primal, tangent)


def _unpack_dual(dual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The primal and tangent of f's output; zeros where the output has no tangent (it
    does not depend on the primals), as torch.func.jvp gives."""
    primal, tangent = torch.autograd.forward_ad.unpack_dual(dual)
    return primal, torch.zeros_like(primal) if tangent is None else tangent


def _unpack_dual_example(dual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _same_metadata(dual), _same_metadata(dual)


_jvp_increment_nesting.__ember_example__ = _no_result  # type: ignore[attr-defined]
_make_dual.__ember_example__ = _same_metadata  # type: ignore[attr-defined]
_unpack_dual.__ember_example__ = _unpack_dual_example  # type: ignore[attr-defined]


def _open_jvp_level(tx: Translator) -> tuple[int, tuple[bool, bool]]:
    """The calls torch.func.jvp makes on entry: a jvp level, forward grad on, a dual level
    (only in the outermost jvp: an inner one shares it, as eagerly)."""
    fwd_grad_was_enabled = torch._C._is_fwd_grad_enabled()
    outermost = tx.ctx.jvp_nesting == 0
    tx.ctx.functorch_level += 1
    tx.ctx.jvp_nesting += 1
    tx.ctx.call("call_function", _jvp_increment_nesting, (), {}, allow_python_result=True)
    _effect(tx, torch._C._set_fwd_grad_enabled, True)
    if outermost:
        _effect(tx, _enter_dual_level)
    return tx.ctx.functorch_level, (fwd_grad_was_enabled, outermost)


def _close_jvp_level(tx: Translator, opened: tuple[bool, bool]) -> None:
    fwd_grad_was_enabled, outermost = opened
    if outermost:
        _effect(tx, _exit_dual_level)
    _effect(tx, torch._C._set_fwd_grad_enabled, fwd_grad_was_enabled)
    _effect(tx, torch._C._functorch._jvp_decrement_nesting)
    tx.ctx.jvp_nesting -= 1
    tx.ctx.functorch_level -= 1


def _dual(tx: Translator, primal: Value, tangent: Value) -> Value:
    _effect(tx, torch.autograd.forward_ad._maybe_load_decompositions)  # each make_dual's
    return _tensor(tx, _make_dual, primal, tangent)


def call_jvp(
    tx: Translator, function: Value, primals: Value, tangents: Value, has_aux: bool
) -> Value | None:
    """`torch.func.jvp(f, primals, tangents)` traced into the graph as torch.compile traces
    it (functorch's jvp level, a forward-AD dual level, duals made of each primal and
    tangent, f traced on them, each output unpacked; a jvp inside another shares its
    dual level, as eagerly); None where it is not traced so (primals or tangents that
    are not a tuple of tensors)."""
    from dynamo_capture.calls import call

    if not tx.ctx.transform_nodes:
        return None
    if not (isinstance(primals, TupleValue) and isinstance(tangents, TupleValue)):
        return None
    pairs = list(zip(primals.items, tangents.items, strict=False))
    if (
        not pairs
        or len(primals.items) != len(tangents.items)
        or not all(isinstance(p, TensorValue) and isinstance(t, TensorValue) for p, t in pairs)
    ):
        return None
    level, opened = _open_jvp_level(tx)
    duals = [_dual(tx, primal, tangent) for primal, tangent in pairs]
    output, aux = _split_aux(call(tx, function, duals, {}), has_aux, "jvp")
    if aux is not None:
        aux = _unwrap_aux(tx, aux, "jvp", level)
    outputs = _tensors_of(output, "the output of torch.func.jvp's function")
    primal_of: dict[int, Value] = {}
    tangent_of: dict[int, Value] = {}
    for out in outputs:
        unpacked = _tensor(tx, _unpack_dual, out)
        primal_of[id(out)] = _tensor(tx, _unwrap_for_grad, _item(tx, unpacked, 0), level)
        tangent_of[id(out)] = _tensor(tx, _unwrap_for_grad, _item(tx, unpacked, 1), level)
    _close_jvp_level(tx, opened)
    result = [
        _map_tensors(output, lambda t: primal_of[id(t)]),
        _map_tensors(output, lambda t: tangent_of[id(t)]),
    ]
    return TupleValue([*result, *([aux] if aux is not None else [])])


# ----- torch.func.jacrev ---------------------------------------------------------------
def call_jacrev(tx: Translator, transform: InlinedTransform, args: list[Value]) -> Value | None:
    """`torch.func.jacrev(f, argnums, has_aux)(*args)` of one tensor output traced as
    torch.compile traces it: vjp of f, an identity basis over the output, vmap of the
    pullback over it, the rows of each differentiated argument viewed as its Jacobian
    (a tuple of them for a tuple of argnums; with has_aux, `(jacobian, aux)`, aux's
    tensors unwrapped). None for other forms (chunk_size, arguments that are not
    tensors): the opaque node is used then."""
    from dynamo_capture.calls import call

    chunked = transform.options.get("chunk_size") is not None
    numbers = _jacobian_argnums(transform, args, unsupported_option=chunked, containers=True)
    if numbers is None:
        return None
    argnums = transform.options.get("argnums", 0)
    has_aux = transform.options.get("has_aux", False)
    level, opened = _open_grad_level(tx)
    wrapped = _wrap_and_require_grad(tx, args, numbers, level)
    output, aux = _split_aux(call(tx, transform.function, wrapped, {}), has_aux, "jacrev")
    if aux is not None:
        aux = _unwrap_aux(tx, aux, "jacrev", level)
    if not isinstance(output, TensorValue):
        raise Unsupported("torch.func.jacrev of a function not returning one tensor")
    if not (output.example.is_floating_point() or output.example.is_complex()):
        raise Unsupported("torch.func.jacrev: an output that is not floating point (eager raises)")
    result = _tensor(tx, _unwrap_for_grad, output, level)
    _close_grad_level(tx, opened)
    size = output.example.numel()
    basis = _identity_basis(tx, result, size, output.example.shape)
    # one Jacobian a differentiated tensor (in pytree order), in its argument's structure
    primals = [t for n in numbers for t in _tensors_of(wrapped[n], "a differentiated argument")]
    rows = _vmap_of_pullback(tx, output, primals, basis, size)
    firsts = [_item(tx, _tensor(tx, torch.split, row, [size], dim=0), 0) for row in rows]
    flat = iter(
        tx.ctx.call(
            "call_method", "view", (first, (*output.example.shape, *primal.example.shape)), {}
        )
        for first, primal in zip(firsts, primals, strict=True)
    )
    jacobians = [_map_tensors(args[n], lambda _, flat=flat: next(flat)) for n in numbers]
    jacobian = jacobians[0] if type(argnums) is int else TupleValue(jacobians)
    return TupleValue([jacobian, aux]) if aux is not None else jacobian


def _vmap_of_pullback(
    tx: Translator, output: TensorValue, primals: list[Value], basis: Value, size: Any
) -> list[Value]:
    """vmap(vjp_fn)(basis): the pullback's autograd node run once per basis row; the
    rows of each primal."""
    level = _open_vmap_level(tx, size, "error")
    batched = _tensor(tx, _add_batch_dim, basis, 0, level)
    grads = _tensor(
        tx,
        _autograd_vjp,
        [output],
        list(primals),
        [batched],
        retain_graph=True,
        create_graph=torch.is_grad_enabled(),
    )
    batched_grads = [_item(tx, grads, index) for index in range(len(primals))]
    rows = [
        _tensor(tx, _remove_batch_dim, grad, level, PythonValue(size), 0) for grad in batched_grads
    ]
    _close_vmap_level(tx)
    return rows


# ----- torch.func.jacfwd ---------------------------------------------------------------
def call_jacfwd(tx: Translator, transform: InlinedTransform, args: list[Value]) -> Value | None:
    """`torch.func.jacfwd(f, argnums, has_aux)(*args)` of one tensor output traced as
    torch.compile traces it: an identity basis over the differentiated inputs (one
    block per input), vmap over it of jvp of f, the columns moved last, split per input
    and unflattened to its shape (a tuple for a tuple of argnums; with has_aux,
    `(jacobian, aux)`, aux's tensors unwrapped and their first batch row taken). None
    for other forms (randomness other than "error", arguments that are not tensors)."""
    from dynamo_capture.calls import call

    random = transform.options.get("randomness", "error") != "error"
    numbers = _jacobian_argnums(transform, args, unsupported_option=random, containers=True)
    if numbers is None:
        return None
    argnums = transform.options.get("argnums", 0)
    has_aux = transform.options.get("has_aux", False)
    # the differentiated tensors, in pytree order (an argument may be a dict of them)
    primals = [t for n in numbers for t in _tensors_of(args[n], "a differentiated argument")]
    shapes = [tuple(p.example.shape) for p in primals]  # type: ignore[attr-defined]
    sizes = [p.example.numel() for p in primals]  # type: ignore[attr-defined]
    size = sum(sizes)
    bases = _block_identity_basis(tx, primals, sizes, shapes)
    vmap_level = _open_vmap_level(tx, size, "error")
    tangents = [_tensor(tx, _add_batch_dim, basis, 0, vmap_level) for basis in bases]
    level, opened = _open_jvp_level(tx)
    duals = iter([_dual(tx, p, t) for p, t in zip(primals, tangents, strict=True)])
    wrapped = [_map_tensors(arg, lambda t: _tensor(tx, _wrap_for_grad, t, level)) for arg in args]
    for number in numbers:
        # the primal's own wrapper is made and left unused, as in torch
        wrapped[number] = _map_tensors(args[number], lambda _: next(duals))
    output, aux = _split_aux(call(tx, transform.function, wrapped, {}), has_aux, "jacfwd")
    if aux is not None:
        aux = _unwrap_aux(tx, aux, "jacfwd", level)
    outputs = _tensors_of(output, "the output of torch.func.jacfwd's function")
    if not outputs:
        raise Unsupported("torch.func.jacfwd of a function not returning tensors")
    unpacked = [_tensor(tx, _unpack_dual, out) for out in outputs]
    for pair in unpacked:
        _tensor(tx, _unwrap_for_grad, _item(tx, pair, 0), level)
    tangents_out = [_tensor(tx, _unwrap_for_grad, _item(tx, pair, 1), level) for pair in unpacked]
    _close_jvp_level(tx, opened)
    batch_size = PythonValue(size)
    all_columns = [
        _tensor(tx, _remove_batch_dim, tangent_out, vmap_level, batch_size, 0)
        for tangent_out in tangents_out
    ]
    if aux is not None:
        batch = PythonValue(size)
        aux = _map_tensors(aux, lambda t: _tensor(tx, _remove_batch_dim, t, vmap_level, batch, 0))
    _close_vmap_level(tx)
    if aux is not None:  # each aux tensor is the same for every basis row: the first
        import operator

        aux = _map_tensors(aux, lambda t: _tensor(tx, operator.getitem, t, 0))
    per_output = []
    for columns in all_columns:
        moved = tx.ctx.call("call_method", "movedim", (columns, 0, -1), {})
        chunks = _tensor(tx, torch.split, moved, sizes, dim=-1)
        pieces = [_item(tx, chunks, index) for index in range(len(primals))]
        flat = iter(
            [
                tx.ctx.call("call_method", "unflatten", (piece, -1, shape), {})
                for piece, shape in zip(pieces, shapes, strict=True)
            ]
        )
        jacobians = [_map_tensors(args[n], lambda _, flat=flat: next(flat)) for n in numbers]
        per_output.append(jacobians[0] if type(argnums) is int else TupleValue(jacobians))
    each_output = iter(per_output)
    jacobian = _map_tensors(output, lambda _: next(each_output))
    return TupleValue([jacobian, aux]) if aux is not None else jacobian


def _block_identity_basis(
    tx: Translator, primals: list[Value], sizes: list[Any], shapes: list[Any]
) -> list[Value]:
    """jacfwd's basis over several inputs: one identity block per input, the rows of all
    inputs together (a single input's is `_identity_basis`)."""
    if len(primals) == 1:
        return [_identity_basis(tx, primals[0], sizes[0], shapes[0])]
    total = sum(sizes)
    blocks = [
        tx.ctx.call("call_method", "new_zeros", (p, total, n), {})
        for p, n in zip(primals, sizes, strict=True)
    ]
    offset = 0
    for block, n in zip(blocks, sizes, strict=True):
        diagonal = tx.ctx.call("call_method", "diagonal", (block, -offset), {})
        tx.ctx.call("call_method", "fill_", (diagonal, 1), {})
        offset += n
    return [
        tx.ctx.call("call_method", "view", (block, total, *shape), {})
        for block, shape in zip(blocks, shapes, strict=True)
    ]


def _identity_basis(tx: Translator, like: Value, size: Any, shape: Any) -> Value:
    """An identity matrix of `size` rows, each viewed as `shape` (jacrev's and jacfwd's)."""
    basis = tx.ctx.call("call_method", "new_zeros", (like, size, size), {})
    diagonal = tx.ctx.call("call_method", "diagonal", (basis, 0), {})
    tx.ctx.call("call_method", "fill_", (diagonal, 1), {})
    return tx.ctx.call("call_method", "view", (basis, size, *shape), {})


def call_hessian(tx: Translator, transform: InlinedTransform, args: list[Value]) -> Value | None:
    """`torch.func.hessian(f, argnums=i)`: jacfwd of jacrev of f, as torch defines it."""
    argnums = transform.options.get("argnums", 0)
    numbers = argnums if isinstance(argnums, tuple) else (argnums,)
    if not numbers or not all(type(n) is int for n in numbers):
        return None
    inner = InlinedTransform("jacrev", transform.function, {"argnums": argnums}, None)
    outer = InlinedTransform("jacfwd", PythonValue(inner), {"argnums": argnums}, None)
    return call_jacfwd(tx, outer, args)
