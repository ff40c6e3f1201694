"""`Optimizer.step` compiled as torch.compile compiles it.

torch wraps every optimizer's `step` twice: `Optimizer.profile_hook_step` (a profiler
range, the step pre- and post-hooks) around `_use_grad_for_differentiable` (grad mode
set to the optimizer's `differentiable`, with torch's graph-break marker before and
after the step). torch.compile breaks at those markers and compiles the step's own
body as a frame of its own; ember does the same:

    call reaching          the eager statement                 compiled
    opt.step()             torch's wrappers (hooks, grad       the step's body, one
    (a bound step of a     mode, the no-op markers)            frame (`StateInitialisingStep`)
    torch.optim.Optimizer,
    user subclasses too)

The wrappers run eagerly; the closure cell through which the innermost wrapper calls
the body is shadowed, for the eager statement only, by the compiled body
(break_callees.Shadow). Before the compiled body runs, the optimizer's state is
initialised eagerly where it is missing, by the optimizer's own `_init_group` for each
param group (what torch.compile's OptimizerVariable does while tracing): the body then
finds every state it reads, and reads it through sources keyed by the parameters
(`state[param]`, sources.TensorKeySource). The guards of that capture (the state dicts'
keys, the param groups, each `param.grad` being None or not) compile the body again
where they change.

A step called with a closure initialises nothing ahead (the closure may make the
gradients that decide which states exist), nor does a step or an `_init_group` of the
user's (a user's step may not call `_init_group`; a user's `_init_group` may do more
than create states): the body then breaks at a missing state, its frame run eagerly.
Optimizers without `_init_group` (LBFGS, user optimizers) are traced as they are.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "StateInitialisingStep",
    "initialise_state",
    "optimizer_step_cell",
    "unpatched_init_group",
]


def _wrapper_codes() -> frozenset[types.CodeType]:
    """The code objects of torch's two wrappers around `step` (one code each, shared
    by every wrapped function)."""
    from torch.optim.optimizer import Optimizer, _use_grad_for_differentiable

    def body() -> None:
        return None

    return frozenset(
        {
            Optimizer.profile_hook_step(body).__code__,
            _use_grad_for_differentiable(body).__code__,
        }
    )


_WRAPPER_CODES = _wrapper_codes()


def _wrapped_cell(function: types.FunctionType) -> Any:
    """The closure cell `func` through which one of torch's step wrappers calls what it
    wraps."""
    names = function.__code__.co_freevars
    cells = dict(zip(names, function.__closure__ or (), strict=True))
    return cells.get("func")


def optimizer_step_cell(function: Any) -> tuple[Any, types.FunctionType] | None:
    """For torch's wrapper around an optimizer's `step` (either of the two, or an lr
    scheduler's around them): the cell of the innermost wrapper and the step's body it
    holds; None for anything else."""
    if getattr(function, "_wrapped_by_lr_sched", False) is True:
        # an lr scheduler's own wrapper of the optimizer's bound step (it counts the
        # optimizer's steps), around torch's two: it runs eagerly too
        cell = _wrapped_cell(function) if isinstance(function, types.FunctionType) else None
        function = getattr(cell, "cell_contents", None)
    if not isinstance(function, types.FunctionType) or function.__code__ not in _WRAPPER_CODES:
        return None
    cell = None
    while isinstance(function, types.FunctionType) and function.__code__ in _WRAPPER_CODES:
        cell = _wrapped_cell(function)
        if cell is None:
            return None
        try:
            function = cell.cell_contents
        except ValueError:  # an empty cell
            return None
    if not isinstance(function, types.FunctionType):
        return None  # a wrapper routed already (a StateInitialisingStep)
    return cell, function


def _list_arguments(init_group: types.FunctionType) -> int | None:
    """How many lists `_init_group(self, group, *lists)` fills (torch's optimizers: the
    params with gradients, the gradients, then one list per state); None for another
    signature (it is then not called ahead)."""
    parameters = list(inspect.signature(init_group).parameters.values())[2:]
    plain = inspect.Parameter.POSITIONAL_OR_KEYWORD
    if any(p.kind is not plain or p.default is not inspect.Parameter.empty for p in parameters):
        return None
    return len(parameters)


def _torch_optimizer_code(function: Any) -> bool:
    """Whether `function` is torch.optim's own (an optimizer's step or _init_group, or
    torch.compile's patch of one, which keeps its module)."""
    from dynamo_capture.torch_calls import OPTIMIZER_MODULES

    return isinstance(function, types.FunctionType) and function.__module__ in OPTIMIZER_MODULES


def initialise_state(optimizer: torch.optim.Optimizer, body: Any) -> None:
    """Run `optimizer._init_group` eagerly for each param group holding a parameter with
    a gradient and no state, with fresh lists (discarded): the states it creates are
    those the step `body` creates first thing. Only where both are torch.optim's own: a
    user's step may not call `_init_group`, and a user's `_init_group` may do more."""
    init_group = getattr(type(optimizer), "_init_group", None)
    if not (_torch_optimizer_code(init_group) and _torch_optimizer_code(body)):
        return
    count = _list_arguments(init_group)
    if count is None:
        return
    state = optimizer.state
    for group in optimizer.param_groups:
        params = group.get("params", ())
        if any(p.grad is not None and not state.get(p) for p in params):  # none or empty
            init_group(optimizer, group, *([] for _ in range(count)))


class StateInitialisingStep:
    """The step's body as torch's innermost wrapper calls it (`func(self, *args,
    **kwargs)`): the optimizer's missing states initialised eagerly, then the compiled
    body. A call with a closure initialises nothing ahead."""

    def __init__(self, compiled: Callable[..., Any], body: Callable[..., Any]) -> None:
        self.compiled = compiled
        self.body = body

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        optimizer = args[0] if args else None
        if not isinstance(optimizer, torch.optim.Optimizer):
            return self.compiled(*args, **kwargs)
        if any(group.get("capturable") for group in optimizer.param_groups):
            # NOTE: a capturable step checks its devices only when not compiling (it raises
            # eagerly on the CPU); compiled, the check would be skipped: the body runs
            # eagerly
            return self.body(*args, **kwargs)
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        if closure is None:
            initialise_state(optimizer, self.body)
        return self.compiled(*args, **kwargs)


def unpatched_init_group(function: Any, receiver: Any) -> types.FunctionType | None:
    """The optimizer's own `_init_group` where `function` is torch.compile's patch of it
    (torch's disable wrapper, installed on torch.optim's classes once torch.compile has
    run in the process; torch.compile never calls the patch while tracing, it runs
    `_init_group` itself) called on `receiver`, an optimizer: traced as it is. None for
    anything else."""
    if not isinstance(receiver, torch.optim.Optimizer):
        return None
    original = getattr(function, "__wrapped__", None)
    patched = inspect.getattr_static(type(receiver), "_init_group", None)
    if patched is not function or not isinstance(original, types.FunctionType):
        return None
    return original if original.__name__ == "_init_group" else None
