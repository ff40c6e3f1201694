"""Graphs taking traceable tensor subclasses: traced through their `__torch_dispatch__`.

A captured graph whose inputs include tensors of a traceable subclass (its own
`__torch_dispatch__` with `__tensor_flatten__` / `__tensor_unflatten__`, see
`guards.tensor_subclasses`) is compiled as torch.compile compiles it: at the boundary
each subclass input is taken apart into its inner tensors, which are the compiled
graphs' inputs; the graph is traced on subclasses rebuilt over the traced inner
tensors, so every operation on them runs the subclass's `__torch_dispatch__` and the
ATen ops it calls on the inner tensors are what the tracer records (the AtenTracer
hands an op on a subclass on to it); outputs are taken apart likewise, and the run
time rebuilds them with `__tensor_unflatten__` from the inner outputs and the flatten
context.

Gradients are autograd's on the subclass tensors themselves, as eager computes them:
the joint function below rebuilds the subclass inputs as leaves, runs the graph and
`torch.autograd.grad` with tangents of the outputs' own subclasses (rebuilt over
tangent placeholders), and returns the inner tensors of outputs and gradients. That
graph is partitioned like any joint graph, and an autograd.Function over the subclass
tensors runs the compiled forward and backward (`SubclassFunction`): each gradient
comes back as the subclass eager's does (a plain input's gradient may be a subclass).

Outputs that view an intermediate (and gradients that view their tangent) are the
compiled graphs' own view outputs (`trace_program(views_as_outputs=...)`), so outputs
viewing one intermediate share its memory as eager's do.

What this path does not take raises `SubclassProgramError` (the backend then runs the
graph's own operations, eager's): a graph writing an input in place or returning an
input or a view of one, a value read into Python, symbolic sizes, a non-tensor output,
an output made as a leaf requiring grad, a flatten context that cannot be compared. A call whose subclass inputs differ from the
traced ones (class, context, inner metadata) or whose tangent is not of the traced
layout runs the graph's operations eagerly too, or raises at the backward (a tangent).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx

import guards
from aot_autograd.errors import AotAutogradError, DoubleBackwardError
from aot_autograd.runtime import _boxed
from aot_autograd.saved_layouts import (
    mark_saved_outputs,
    outputs_in_traced_strides,
    reported_saved_strides,
    with_saved_strides,
)
from guards.tensor_subclasses import (
    SubclassLayout,
    TensorLayout,
    flatten,
    is_traceable_subclass,
    unflatten,
)

__all__ = [
    "SubclassAotCallable",
    "SubclassProgramError",
    "has_subclass_inputs",
    "holds_subclass_values",
]

_log = guards.artifact_logger("aot_graphs")
_any_autocast_enabled = torch._C._is_any_autocast_enabled
# NOTE: compiled graphs hold the casts autocast made while tracing: they run with autocast
# off, as runtime.py runs them (a second pass would cast again, and cast the ops of a
# region that turned it off)
_autocast_off = torch._C._DisableAutocast


class SubclassProgramError(AotAutogradError):
    """A graph over tensor subclasses this path does not compile (the reason says which);
    its operations run eagerly instead."""


def has_subclass_inputs(values: Sequence[Any]) -> bool:
    """Whether any of `values` is a traceable tensor subclass."""
    return any(is_traceable_subclass(v) for v in values)


def holds_subclass_values(gm: fx.GraphModule) -> bool:
    """Whether a node of `gm` computes a traceable subclass (`TwoTensor(a, b)` in the
    captured code): its graph goes through this path even with plain inputs."""
    return any(
        is_traceable_subclass(v)
        for node in gm.graph.nodes
        for v in pytree.tree_leaves(node.meta.get("val"))
    )


Layout = SubclassLayout | None  # None: a plain tensor (or not a tensor)


def _layout_of(value: Any) -> Layout:
    if not is_traceable_subclass(value):
        return None
    layout = SubclassLayout.of(value)
    try:
        bool(layout == layout)
    except Exception as error:  # noqa: BLE001 - a context holding tensors, say
        raise SubclassProgramError(
            f"the flatten context of {type(value).__qualname__} cannot be compared "
            f"({type(error).__name__}: {error})"
        ) from error
    return layout


def _flat(values: Sequence[Any], layouts: Sequence[Layout]) -> list[Any]:
    flat: list[Any] = []
    for value, layout in zip(values, layouts):
        flat.extend(flatten(value) if layout is not None else [value])
    return flat


def _rebuilt(flat: Sequence[Any], layouts: Sequence[Layout]) -> list[Any]:
    values, at = [], 0
    for layout in layouts:
        if layout is None:
            values.append(flat[at])
            at += 1
        else:
            values.append(unflatten(layout, flat[at : at + layout.num_tensors]))
            at += layout.num_tensors
    return values


@dataclass(slots=True)
class _OutputLayouts:
    """What the traced function returned: its pytree spec and each leaf's layout."""

    spec: Any = None
    layouts: tuple[Layout, ...] = ()
    requires_grad: tuple[bool, ...] = ()

    def record(self, outs: Any) -> list[torch.Tensor]:
        leaves, self.spec = pytree.tree_flatten(outs)
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                raise SubclassProgramError(
                    f"the graph returns a {type(leaf).__name__}, not a tensor"
                )
        self.layouts = tuple(_layout_of(t) for t in leaves)
        self.requires_grad = tuple(t.requires_grad for t in leaves)
        return leaves


@dataclass(slots=True)
class _Compiled:
    """The compiled graphs of one grad mode and the layouts they were traced for."""

    forward: Callable[[list], Any]  # boxed: takes one list of the inner inputs
    outputs: _OutputLayouts
    num_flat_outputs: int
    grad_inputs: tuple[int, ...] = ()
    grad_layouts: tuple[Layout | str, ...] = ()  # "none": autograd gave no gradient
    differentiable: tuple[int, ...] = ()  # output leaves taking a tangent
    tangent_layouts: tuple[TensorLayout, ...] = ()  # each inner tangent as traced
    # each saved value as the backward graph takes it (None: not a tensor of static size)
    saved_layouts: tuple[TensorLayout | None, ...] = ()
    backward_graph: fx.GraphModule | None = None
    backward_restrided: bool = False
    _backward_compiled: Callable[..., Any] | None = None


@dataclass(slots=True)
class SubclassAotCallable:
    """`flat_fn` (a captured graph over subclass and plain tensors), compiled per grad
    mode and per which inputs require grad, for inputs of the layouts of
    `example_inputs`."""

    flat_fn: Callable
    example_inputs: Sequence[Any]
    fw_compiler: Callable
    bw_compiler: Callable | None = None
    inference_compiler: Callable | None = None
    decompositions: Mapping | None = None
    partition_fn: Callable | None = None
    graphs: dict[str, fx.GraphModule] = field(default_factory=dict)
    layouts: tuple[Layout, ...] = ()
    _cache: dict[tuple, _Compiled] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if _symbolic(self.example_inputs):
            raise SubclassProgramError("symbolic sizes with tensor subclass inputs")
        self.layouts = tuple(_layout_of(v) for v in self.example_inputs)

    def __call__(self, *args: Any) -> Any:
        if tuple(_layout_of(a) for a in args) != self.layouts:
            _log.info("tensor subclass inputs unlike the traced ones: running eagerly")
            return self.flat_fn(*args)
        requires_grad = tuple(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        training = torch.is_grad_enabled() and any(requires_grad)
        key = (training, requires_grad if training else ())
        if _any_autocast_enabled():  # a graph traced under autocast holds its casts
            from aot_autograd.api import autocast_state

            key = (*key, autocast_state())
        compiled = self._cache.get(key)
        if compiled is None:
            try:
                compiled = self._cache[key] = self._compile(training, requires_grad)
            except SubclassProgramError:
                raise
            except Exception as error:
                # NOTE: nothing ran for the caller yet; the graph's own operations (eager's)
                # give eager's result, or eager's error
                raise SubclassProgramError(
                    f"tracing through the subclasses failed ({type(error).__name__}: {error})"
                ) from error
        if compiled.backward_graph is None:
            return self._inference_call(compiled, args)
        return self._training_call(compiled, args)

    # -- compiling ---------------------------------------------------------------------
    def _examples(self, requires_grad: Sequence[bool]) -> list[Any]:
        examples = []
        for value, flag in zip(self.example_inputs, requires_grad):
            if isinstance(value, torch.Tensor):
                value = value.detach()
                if flag:
                    value.requires_grad_(True)
            examples.append(value)
        return examples

    def _compile(self, training: bool, requires_grad: Sequence[bool]) -> _Compiled:
        from aot_autograd.api import _placeholder_values
        from aot_autograd.program import trace_program

        examples = self._examples(requires_grad)
        flat_examples = _flat(examples, self.layouts)
        outputs = _OutputLayouts()
        if training:
            compiled = self._compile_training(examples, flat_examples, requires_grad, outputs)
            if compiled is not None:
                return compiled
            outputs = _OutputLayouts()  # no output requires grad: the inference graph
        start = time.perf_counter()

        def inference(*flat: Any) -> list[Any]:
            outs = self.flat_fn(*_rebuilt(flat, self.layouts))
            return _flat(outputs.record(outs), outputs.layouts)

        program = trace_program(
            inference,
            flat_examples,
            decompositions=self.decompositions,
            joint=False,
            views_as_outputs=True,
        )
        _check_plain(program)
        if torch.is_grad_enabled() and any(outputs.requires_grad):
            raise SubclassProgramError("an output requires grad where no input does")
        gm = self.graphs["inference"] = program.graph_module
        _log_graph("inference graph (tensor subclasses taken apart)", gm, start)
        compiler = self.inference_compiler or self.fw_compiler
        run = compiler(gm, _placeholder_values(gm))
        return _Compiled(_boxed(run), outputs, program.num_forward_outputs)

    def _compile_training(
        self,
        examples: list[Any],
        flat_examples: list[Any],
        requires_grad: Sequence[bool],
        outputs: _OutputLayouts,
    ) -> _Compiled | None:
        from aot_autograd.api import _placeholder_values
        from aot_autograd.partitioners import default_partition
        from aot_autograd.program import trace_program

        grad_inputs = tuple(i for i, flag in enumerate(requires_grad) if flag)
        # the outputs' layouts and which require grad, on fakes: the tangents the joint takes
        mode = guards.fake_mode_of(flat_examples) or guards.FakeTensorMode()
        with mode, torch.enable_grad():
            fake_inputs = _rebuilt([_fake_of(mode, t) for t in flat_examples], self.layouts)
            for i in grad_inputs:
                fake_inputs[i].requires_grad_(True)
            leaves = outputs.record(self.flat_fn(*fake_inputs))
            _check_no_leaf_outputs(leaves)
            differentiable = tuple(i for i, t in enumerate(leaves) if t.requires_grad)
            tangent_layouts = [outputs.layouts[i] for i in differentiable]
            tangent_examples = [
                torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                for t in _flat([leaves[i].detach() for i in differentiable], tangent_layouts)
            ]
        del fake_inputs, leaves
        if not differentiable:
            return None
        num_primals = len(flat_examples)
        grad_layouts: list[Layout | str] = []
        joint_outputs = _OutputLayouts()

        def joint(*flat: Any) -> list[Any]:
            inputs = _rebuilt(flat[:num_primals], self.layouts)
            for i in grad_inputs:
                inputs[i].requires_grad_(True)
            with torch.enable_grad():
                leaves = joint_outputs.record(self.flat_fn(*inputs))
            if joint_outputs.layouts != outputs.layouts:
                raise SubclassProgramError("the joint trace's outputs differ from the forward's")
            tangents = _rebuilt(flat[num_primals:], tangent_layouts)
            grads = torch.autograd.grad(
                [leaves[i] for i in differentiable],
                [inputs[i] for i in grad_inputs],
                tangents,
                allow_unused=True,
            )
            grad_layouts.clear()
            grad_layouts.extend("none" if g is None else _layout_of(g) for g in grads)
            present = [g for g in grads if g is not None]
            present_layouts = [layout for layout in grad_layouts if layout != "none"]
            return [*_flat(leaves, outputs.layouts), *_flat(present, present_layouts)]

        start = time.perf_counter()
        program = trace_program(
            joint,
            [*flat_examples, *tangent_examples],
            decompositions=self.decompositions,
            joint=False,
            # a gradient viewing its tangent (`t()`'s) is the graph's output, as eager's
            # is a view of the gradient it is given
            views_as_outputs=frozenset(range(num_primals, num_primals + len(tangent_examples))),
        )
        num_flat_outputs = sum(
            1 if layout is None else layout.num_tensors for layout in outputs.layouts
        )
        _check_plain(program, num_flat_outputs)
        gm = self.graphs["joint"] = program.graph_module
        _name_tangents(gm, num_primals)
        _log_graph("joint graph (tensor subclasses taken apart)", gm, start)
        start = time.perf_counter()
        partition = self.partition_fn or default_partition
        forward, backward = partition(gm, num_forward_outputs=num_flat_outputs)
        self.graphs["forward"], self.graphs["backward"] = forward, backward
        _log_graph("forward graph", forward, start)
        _log_graph("backward graph", backward, start)
        # the backward against the layouts the compiled forward saves (see saved_layouts)
        mark_saved_outputs(forward, num_flat_outputs)
        compiled_forward = self.fw_compiler(forward, _placeholder_values(forward))
        reported = reported_saved_strides(compiled_forward, num_flat_outputs, backward)
        restrided = with_saved_strides(backward, reported)
        if restrided is not None:
            backward = self.graphs["backward"] = restrided
        saved = [n.meta.get("val") for n in backward.graph.nodes if n.op == "placeholder"]
        saved = saved[: len(saved) - len(tangent_examples)]
        return _Compiled(
            _boxed(compiled_forward),
            outputs,
            num_flat_outputs,
            grad_inputs=grad_inputs,
            grad_layouts=tuple(grad_layouts),
            differentiable=differentiable,
            tangent_layouts=tuple(TensorLayout.of(t) for t in tangent_examples),
            saved_layouts=tuple(_static_layout(v) for v in saved),
            backward_graph=backward,
            backward_restrided=restrided is not None,
        )

    def compiled_backward(self, compiled: _Compiled) -> Callable[..., Any]:
        """The backward graph compiled (at the first backward)."""
        from aot_autograd.api import _placeholder_values

        if compiled._backward_compiled is None:
            compiler = self.bw_compiler or self.fw_compiler
            if compiled.backward_restrided:  # gradients in the traced strides all the same
                compiler = outputs_in_traced_strides(compiler)
            graph = compiled.backward_graph
            compiled._backward_compiled = _boxed(compiler(graph, _placeholder_values(graph)))
        return compiled._backward_compiled

    # -- calls -------------------------------------------------------------------------
    def _inference_call(self, compiled: _Compiled, args: Sequence[Any]) -> Any:
        flat = _flat(args, self.layouts)
        with torch.no_grad(), _autocast_off():
            flat_outs = list(compiled.forward(flat))
        return _outputs_of(compiled.outputs, flat_outs)

    def _training_call(self, compiled: _Compiled, args: Sequence[Any]) -> Any:
        leaves = SubclassFunction.apply(self, compiled, *args)
        return pytree.tree_unflatten(list(leaves), compiled.outputs.spec)


class SubclassFunction(torch.autograd.Function):
    """The compiled forward and backward over subclass tensors: autograd sees the
    subclass inputs and outputs, the compiled graphs their inner tensors."""

    @staticmethod
    def forward(ctx: Any, owner: SubclassAotCallable, compiled: _Compiled, *args: Any) -> Any:
        flat = _flat(args, owner.layouts)
        with _autocast_off():
            results = list(compiled.forward(flat))
        flat_outs = results[: compiled.num_flat_outputs]
        ctx.saved = results[compiled.num_flat_outputs :]
        ctx.owner, ctx.compiled = owner, compiled
        ctx.num_args = len(args)
        leaves = _leaves_of(compiled.outputs, flat_outs)
        differentiable = set(compiled.differentiable)
        ctx.mark_non_differentiable(*(t for i, t in enumerate(leaves) if i not in differentiable))
        return tuple(leaves)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        if torch.is_grad_enabled():
            # NOTE: create_graph=True: the compiled backward's results would not carry their
            # own graph (what eager's carry through the saved values), so a grad of them
            # would miss terms; refused at once
            raise DoubleBackwardError(
                "a backward with create_graph=True through a compiled graph over tensor "
                "subclasses is not supported; compute higher-order grads eagerly"
            )
        compiled: _Compiled = ctx.compiled
        tangents = []
        for i in compiled.differentiable:
            tangents.extend(_tangent_parts(grad_outputs[i], compiled.outputs.layouts[i], i))
        if len(tangents) != len(compiled.tangent_layouts):
            raise SubclassProgramError("the gradients' inner tensors differ from the traced")
        tangents = [_in_layout(t, layout) for t, layout in zip(tangents, compiled.tangent_layouts)]
        backward = ctx.owner.compiled_backward(compiled)
        saved = [
            t if layout is None else _in_layout(t, layout)
            for t, layout in zip(ctx.saved, compiled.saved_layouts, strict=True)
        ]  # (a saved value the compiled forward gave in other strides: copied to the traced)
        with _autocast_off():
            flat_grads = list(backward([*saved, *tangents]))
        grads: list[Any] = [None] * ctx.num_args
        at = 0
        for index, layout in zip(compiled.grad_inputs, compiled.grad_layouts):
            if layout == "none":
                continue
            if layout is None:
                grads[index] = flat_grads[at]
                at += 1
            else:
                grads[index] = unflatten(layout, flat_grads[at : at + layout.num_tensors])
                at += layout.num_tensors
        return (None, None, *grads)


def _static_layout(value: Any) -> TensorLayout | None:
    if not isinstance(value, torch.Tensor):
        return None
    if not all(type(s) is int for s in (*value.shape, *value.stride())):
        return None
    return TensorLayout.of(value)


def _tangent_parts(grad: Any, layout: Layout, index: int) -> list[torch.Tensor]:
    """The inner tensors of output `index`'s gradient, which must be of the output's own
    class and flatten context (its inner tensors' strides may differ: see _in_layout)."""
    if grad is None:
        raise SubclassProgramError(f"the gradient of output {index} is None")
    if layout is None and not is_traceable_subclass(grad):
        return [grad]
    if layout is not None and type(grad) is layout.cls:
        got = SubclassLayout.of(grad)
        if got.ctx == layout.ctx and got.size == layout.size:
            return flatten(grad)
    kind = "a plain tensor" if layout is None else layout.describe()
    raise SubclassProgramError(
        f"the gradient of output {index} is a {type(grad).__qualname__} where the compiled "
        f"backward was traced for {kind} (as the output itself); pass a gradient of the "
        "output's own kind"
    )


def _in_layout(t: torch.Tensor, layout: TensorLayout) -> torch.Tensor:
    """`t` with the traced strides: a tangent (a gradient of `sum()` comes expanded), or a
    saved value the compiled forward laid out otherwise. Dims of size 1 are left as they are."""
    if t.dtype != layout.dtype or tuple(t.shape) != layout.size or t.device != layout.device:
        raise SubclassProgramError(
            f"a gradient's inner tensor is {t.dtype} {tuple(t.shape)} on {t.device}, the traced "
            f"one {layout.dtype} {layout.size} on {layout.device}"
        )
    if all(n == 1 or a == b for n, a, b in zip(layout.size, t.stride(), layout.stride)):
        return t
    copy = torch.empty_strided(layout.size, layout.stride, dtype=t.dtype, device=t.device)
    return copy.copy_(t)


def _leaves_of(outputs: _OutputLayouts, flat_outs: Sequence[Any]) -> list[Any]:
    return _rebuilt(flat_outs, outputs.layouts)


def _outputs_of(outputs: _OutputLayouts, flat_outs: Sequence[Any]) -> Any:
    return pytree.tree_unflatten(_leaves_of(outputs, flat_outs), outputs.spec)


def _check_no_leaf_outputs(leaves: Sequence[torch.Tensor]) -> None:
    """An output made as a leaf requiring grad (`TwoTensor(a, b, requires_grad=True)` in
    the graph) is eager's leaf; out of an autograd.Function it would not be one."""
    if any(t.requires_grad and t.grad_fn is None for t in leaves):
        raise SubclassProgramError("an output is a leaf that requires grad")


def _fake_of(mode: Any, value: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    if guards.is_fake(value):
        return value.detach()
    return mode.from_real(value.detach())


def _symbolic(values: Sequence[Any]) -> bool:
    for value in values:
        if isinstance(value, torch.SymInt | torch.SymFloat):
            return True
        if isinstance(value, torch.Tensor) and not is_traceable_subclass(value):
            if any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride())):
                return True
    return False


def _check_plain(program: Any, num_user_outputs: int | None = None) -> None:
    """Refuse what the subclass run time does not reproduce (see the module docstring);
    in a joint graph (`num_user_outputs` set), a gradient that is an input itself (the
    tangent, passed through as autograd passes it) becomes a graph output of it. (Views
    of intermediates are the graph's outputs themselves: `views_as_outputs`.)"""
    if program.mutated_inputs or program.metadata_mutations:
        raise SubclassProgramError("the graph writes an input in place")
    if program.num_value_checks:
        raise SubclassProgramError("the graph reads a tensor value into Python")
    if num_user_outputs is None:
        num_user_outputs = len(program.outputs)
    graph = program.graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    results = list(output.args[0])
    if len(results) != program.num_forward_outputs:
        raise SubclassProgramError("the traced graph has outputs besides the user's")
    ordered = []
    for i, spec in enumerate(program.outputs):
        if spec.kind == "graph":
            ordered.append(results[spec.index])
        elif spec.kind == "input" and i >= num_user_outputs:
            ordered.append(placeholders[spec.index])
        else:
            raise SubclassProgramError(
                f"output {i} of the traced graph is {spec.kind!r} (an input or a view)"
            )
    if ordered != results:
        output.args = (tuple(ordered),)
        program.graph_module.recompile()


def _name_tangents(gm: fx.GraphModule, num_primals: int) -> None:
    """Placeholders after the primals are the tangents (as the partitioners read them)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for k, node in enumerate(placeholders[num_primals:]):
        node._rename(f"tangents_{k + 1}")
        node.target = node.name
    gm.recompile()


def _log_graph(title: str, gm: fx.GraphModule, start: float) -> None:
    from aot_autograd.api import _log as log

    log(title, gm, max(time.perf_counter() - start, 0.0))
