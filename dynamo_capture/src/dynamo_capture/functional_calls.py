"""torch.func.functional_call inside captured code: the module traced on the given tensors.

    torch.func.functional_call(model, {"weight": w, "bias": b}, (x,))

traces `model(x)` as any module call, except that reading a parameter or buffer the
dict names (through the module's attribute, `self.weight`) gives the dict's value
instead of the module's tensor, as torch swaps them in eagerly. Tied names (one tensor
under several names) all take the value given for one of them, as tie_weights=True.

Any other route to a replaced tensor (`module.parameters()`, `self._parameters`, a
list such as nn.RNN's `_flat_weights`) would see the module's own tensor: capture
refuses such a read (Unsupported) rather than give a wrong result. Names the module
has no parameter or buffer for, strict=True, and dicts with keys that are not
constants are Unsupported too (torch's own code then runs eagerly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.operations import NotConstant, as_constant, dict_items, sequence_items
from dynamo_capture.values import DictValue, PythonValue, TupleValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = ["FUNCTIONAL_CALLS", "call_functional", "replaced_member"]

FUNCTIONAL_CALLS = (torch.func.functional_call,)
_NAMES = ("module", "parameter_and_buffer_dicts", "args", "kwargs")


def replaced_member(tx: Translator, module: Any, name: str) -> Value | None:
    """The value functional_call gives `module.<name>` now, if it replaces it."""
    return tx.ctx.replaced_members.get((id(module), name))


def call_functional(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.calls import call

    bound = dict(zip(_NAMES, args, strict=False))
    options = {k: v for k, v in kwargs.items() if k not in _NAMES}
    bound.update({k: v for k, v in kwargs.items() if k in _NAMES})
    if len(args) > len(_NAMES) or set(options) - {"tie_weights", "strict"}:
        raise Unsupported("torch.func.functional_call with arguments it does not take")
    try:
        tie_weights = as_constant(options.get("tie_weights", PythonValue(True)))
        strict = as_constant(options.get("strict", PythonValue(False)))
    except NotConstant:
        raise Unsupported(
            "torch.func.functional_call with options known only when it runs"
        ) from None
    if strict is not False or not isinstance(tie_weights, bool):
        raise Unsupported("torch.func.functional_call with strict=True")
    module_value = bound.get("module")
    if not isinstance(module_value, PythonValue) or not isinstance(
        module_value.obj, torch.nn.Module
    ):
        raise Unsupported("torch.func.functional_call of something other than a module")
    replacements = _replacements(tx, bound.get("parameter_and_buffer_dicts"))
    members = _members(module_value.obj, replacements, tie_weights)
    call_args = _call_arguments(tx, bound.get("args"))
    call_kwargs = _call_keywords(tx, bound.get("kwargs"))
    saved = (dict(tx.ctx.replaced_members), set(tx.ctx.replaced_tensors))
    for (owner, name, tensor), value in members.items():
        tx.ctx.replaced_members[(id(owner), name)] = value
        tx.ctx.replaced_tensors.add(id(tensor))
    try:
        return call(tx, module_value, call_args, call_kwargs)
    finally:
        tx.ctx.replaced_members, tx.ctx.replaced_tensors = saved


def _replacements(tx: Translator, given: Value | None) -> dict[str, Value]:
    if given is None:
        raise Unsupported("torch.func.functional_call without its parameter_and_buffer_dicts")
    dicts = [given] if _is_dict(given) else sequence_items(tx, given)
    merged: dict[str, Value] = {}
    for one in dicts:
        if not _is_dict(one):
            raise Unsupported("torch.func.functional_call with a parameter dict of another kind")
        for key, value in dict_items(tx, one).items():
            if not isinstance(key, str):
                raise Unsupported("torch.func.functional_call with a key that is not a str")
            if key in merged:  # torch raises: the same key in two dicts
                raise Unsupported(f"torch.func.functional_call given {key!r} twice")
            merged[key] = value
    return merged


def _is_dict(value: Value) -> bool:
    return isinstance(value, DictValue) or (
        isinstance(value, PythonValue) and isinstance(value.obj, dict)
    )


def _members(
    module: torch.nn.Module, replacements: dict[str, Value], tie_weights: bool
) -> dict[tuple[Any, str, torch.Tensor], Value]:
    """(owner module, member name, the tensor it replaces) -> the value that replaces it."""
    names_of: dict[int, list[str]] = {}  # id(tensor) -> every name it has (tied names)
    named = [
        *module.named_parameters(remove_duplicate=False),
        *module.named_buffers(remove_duplicate=False),
    ]
    for name, tensor in named:
        names_of.setdefault(id(tensor), []).append(name)
    by_name = dict(named)
    members: dict[tuple[Any, str, torch.Tensor], Value] = {}
    for key, value in replacements.items():
        if key not in by_name:
            raise Unsupported(
                f"torch.func.functional_call: {key!r} is not a parameter or buffer of the module"
            )
        tied = names_of[id(by_name[key])] if tie_weights else [key]
        for name in tied:
            if name != key and name in replacements and replacements[name] is not value:
                raise Unsupported(f"torch.func.functional_call given tied {key!r} and {name!r}")
            owner_path, _, member = name.rpartition(".")
            owner = module.get_submodule(owner_path)
            members[(owner, member, by_name[name])] = value
    return members


def _call_arguments(tx: Translator, given: Value | None) -> list[Value]:
    if given is None:
        return []
    if isinstance(given, TupleValue) and given.cls is tuple:
        return list(given.items)
    if isinstance(given, PythonValue) and type(given.obj) is tuple:
        return sequence_items(tx, given)
    return [given]  # one argument, as torch takes it


def _call_keywords(tx: Translator, given: Value | None) -> dict[str, Value]:
    if given is None or (isinstance(given, PythonValue) and given.obj is None):
        return {}
    if not _is_dict(given):
        raise Unsupported("torch.func.functional_call with kwargs that are not a dict")
    return dict(dict_items(tx, given))
