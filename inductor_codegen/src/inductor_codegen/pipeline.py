"""The passes every device's driver shares, and what a compiled graph is.

    lower_and_schedule   FX graph -> loop IR buffers -> fused kernels and extern calls
    load_wrapper         the wrapper written to a real file (named by content) and run
    finish               logs, output nesting, the CompiledGraph with its artifacts

`compile.compile_graph` is the driver: it runs these around one device's
codegen (C++ in `codegen.cpp`, Triton in `codegen.triton`).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx

from guards import artifact_enabled, artifact_logger
from guards.cache_root import (
    cache_folder,
    discard,
    payload_digest,
    private_temporary_root,
    read_private,
    write_private,
)
from inductor_codegen.codegen.wrapper import plain_spec
from inductor_codegen.errors import (
    DynamicShapeError,
    MixedDeviceGraphError,
    UnsupportedGraphError,
)
from inductor_codegen.indexing import guarded_facts
from inductor_codegen.ir import TensorValue
from inductor_codegen.lowering import GraphLowering
from inductor_codegen.scheduler import CPU_FUSION_POLICY, FusionPolicy, schedule
from inductor_codegen.symbols import guarded_facts_of, shape_env_of, shape_env_state

__all__ = [
    "PortableGraph",
    "Artifact",
    "CompiledGraph",
    "EagerGraph",
    "PassRecorder",
    "check_one_device",
    "finish",
    "is_symbolic_graph",
    "load_wrapper",
    "lower_and_schedule",
    "write_wrapper",
]

_any_autocast_enabled = torch._C._is_any_autocast_enabled
_autocast_off = torch._C._DisableAutocast


@dataclass(frozen=True, slots=True)
class Artifact:
    """What one pass produced, as text, and how long it took."""

    name: str
    text: str
    seconds: float


class CompiledGraph:
    """The callable compile_graph returns.

    Calling convention: positional arguments, one per graph placeholder,
    `compiled(*inputs)`; or the boxed form `compiled.call_boxed(list_of_inputs)`,
    which empties the list so that inputs can be freed at their last use.
    Returns what the graph returns (the same nesting of tuples and lists).
    The graph's dtypes are explicit, so it runs with autocast off: an autocast
    block around the call does not cast the graph's matmuls a second time.

    `inputs_written_in_place`: the placeholder indices of mutated inputs (paired with
    their new values by the output node's `input_mutation_idxs` meta, as aot_autograd
    sets it) whose new values the call stores into the inputs themselves, so the caller
    does not copy them back (see lowering.reinplace).

    `output_strides`: per flat output, the strides it is returned in (ints), or None
    (not a tensor, or symbolic). A saved output of a forward graph (the output node's
    `saved_output_idxs` meta) may come in a layout the compiler chose (channels-last);
    aot_autograd compiles the backward against these.
    """

    def __init__(
        self,
        call,
        *,
        artifacts,
        fallbacks,
        kernel_count,
        wrapper_path,
        unflatten=None,
        inputs_written_in_place=frozenset(),
        output_strides=None,
    ):
        self._call = call
        self.output_strides: tuple | None = output_strides
        self.inputs_written_in_place: frozenset[int] = frozenset(inputs_written_in_place)
        self.artifacts: list[Artifact] = artifacts
        self.fallbacks: Counter[str] = fallbacks
        self.kernel_count = kernel_count
        self.wrapper_path = wrapper_path
        self._unflatten = unflatten

    def __call__(self, *args):
        return self.call_boxed(list(args))

    def with_folded_weights(self, weights) -> None:
        """Call the wrapper with `weights.arguments(args)` appended to the inputs (the folded
        convolution weights of `frozen_convolutions`, refolded when their sources change)."""
        inner = self._call
        self.folded_weights = weights

        def call(args):
            args.extend(weights.arguments(args))
            return inner(args)

        self._call = call

    def call_boxed(self, args: list):
        if _any_autocast_enabled():
            with _autocast_off():
                result = self._call(args)
        else:
            result = self._call(args)
        if self._unflatten is not None:
            return self._unflatten(result)
        return result

    def as_boxed(self):
        """`call_boxed` as a plain function marked `_boxed_call = True` (torch's convention)."""

        def boxed(args: list):
            return self.call_boxed(args)

        boxed._boxed_call = True
        return boxed

    def artifact(self, name: str) -> str:
        for a in self.artifacts:
            if a.name == name:
                return a.text
        raise KeyError(f"no artifact {name!r}; have {[a.name for a in self.artifacts]}")


class EagerGraph(CompiledGraph):
    """A graph the code generator does not handle, run by the FX interpreter over ATen."""

    def __init__(self, gm: torch.fx.GraphModule, reason: str):
        super().__init__(
            lambda args: gm(*args),
            artifacts=[Artifact("eager_fallback", reason, 0.0)],
            fallbacks=Counter({"<whole graph>": 1}),
            kernel_count=0,
            wrapper_path=None,
        )


class PassRecorder:
    """One `Artifact` per pass of a driver: its name, its text and the seconds it took."""

    def __init__(self) -> None:
        self.artifacts: list[Artifact] = []
        self._last = time.perf_counter()

    def done(self, name: str, text_fn) -> None:
        now = time.perf_counter()
        self.artifacts.append(Artifact(name, text_fn(), now - self._last))
        self._last = now


def lower_and_schedule(
    gm,
    example_inputs,
    lowerings,
    passes: PassRecorder,
    policy: FusionPolicy = CPU_FUSION_POLICY,
    *,
    reinplace: bool = True,
    device: torch.device | None = None,
):
    """The passes every code generator shares: lower the graph to loop IR, then fuse
    with the device's fusion policy.

    `reinplace`: scatters may store mutated inputs' new values into the inputs
    themselves (see lowering.reinplace). `device`: where the kernels run (the CPU
    unless given); a graph with tensors elsewhere runs through ATen (`check_one_device`).

    Records the "lower" artifact; raises UnsupportedGraphError (logged on perf_hints)
    when the graph has to run through ATen whole, and DynamicShapeError when a graph
    with symbolic sizes needs static ones.
    """
    symbolic = is_symbolic_graph(gm, example_inputs)
    placeholders = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    env = shape_env_of([*placeholders, *example_inputs]) if symbolic else None
    before = shape_env_state(env)
    try:
        check_one_device(gm, example_inputs, device or torch.device("cpu"))
        with guarded_facts(guarded_facts_of(env)):
            graph = GraphLowering(gm, example_inputs, lowerings, reinplace=reinplace).run()
        output_buffers = {
            v.view.buffer
            for v in graph.outputs
            if isinstance(v, TensorValue) and v.view is not None
        }
        plan = schedule(graph.buffers, output_buffers, policy)
        if shape_env_state(env) != before:
            # NOTE: int() or bool() on a torch.SymInt decides it by its example value and
            # records a guard; code compiled after that would be right for that value only.
            raise DynamicShapeError(
                "compiling decided a symbolic size by its example value (the shape "
                "environment gained a guard); compile this graph with static sizes"
            )
    except DynamicShapeError as error:
        artifact_logger("perf_hints").info("symbolic graph needs static sizes: %s", error)
        raise
    except UnsupportedGraphError as error:
        if symbolic and not isinstance(error, MixedDeviceGraphError):  # (static sizes: the same)
            artifact_logger("perf_hints").info("symbolic graph needs static sizes: %s", error)
            raise DynamicShapeError(f"{error} (in a graph with symbolic sizes)") from error
        artifact_logger("perf_hints").info("graph runs eagerly: %s", error)
        raise
    passes.done("lower", lambda: describe_lowering(graph))
    return graph, plan


# Ops whose lowering moves a tensor to another device through ATen (a fallback call):
# their result, and an input or constant read by nothing else, may live on another
# device than the kernels.
_DEVICE_COPIES = frozenset({torch.ops.aten._to_copy.default})


def check_one_device(gm: torch.fx.GraphModule, example_inputs, device: torch.device) -> None:
    """Raise MixedDeviceGraphError (an UnsupportedGraphError) where a tensor of the graph
    lives on another device than its kernels run on (`device`).

    The lowering is device-blind: a kernel reads and writes its buffers on `device`.
    A CPU tensor the graph makes beside CUDA inputs (`torch.linspace(...)` without a
    device, the weight of a convolution that eager then refuses) would be computed by a
    Triton kernel into host memory ("Pointer argument cannot be accessed from Triton"),
    or allocated on the GPU and returned there (a later eager op then takes it where
    eager raises). Through ATen each op runs on its own tensors' device, as in eager.
    Allowed: 0-dim CPU inputs and constants of a GPU graph (the wrapper copies them to
    the device, `host_scalars`) and 0-dim CPU values computed from them that the graph
    does not give back, device copies (`_to_copy`, an ATen call) and inputs or constants
    read only by them.
    """
    examples = iter(example_inputs)
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        if node.op == "placeholder":
            value = next(examples, value)
        elif node.op == "get_attr":
            value = getattr(gm, node.target, None)
        elif node.op != "call_function" or node.target in _DEVICE_COPIES:
            continue
        for t in _tensors_of(value):
            if _same_device(t.device, device) or _allowed_elsewhere(node, t, device):
                continue
            raise MixedDeviceGraphError(
                f"node {node.name} ({node.target}) holds a tensor on {t.device} in a graph "
                f"whose kernels run on {device}: the graph runs through ATen, which computes "
                "each op on its tensors' own device as eager does"
            )


def _tensors_of(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors_of(item)]
    return []


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _allowed_elsewhere(node: torch.fx.Node, t: torch.Tensor, device: torch.device) -> bool:
    host_scalar = device.type != "cpu" and t.device.type == "cpu" and t.dim() == 0
    if node.op == "call_function":
        # a number computed from host scalars, read by kernels on the device; given back
        # (an output, a CPU step count's new value) it would come back on the device
        return host_scalar and all(user.op != "output" for user in node.users)
    if host_scalar:
        return True  # copied to the device by the wrapper (see the docstring)
    return all(user.target in _DEVICE_COPIES for user in node.users)


def is_symbolic_graph(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether a placeholder (meta["val"] or example) has a symbolic size or is a SymInt."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, example in zip(placeholders, example_inputs):
        for value in (node.meta.get("val"), example):
            if isinstance(value, torch.SymInt) and value.node.maybe_as_int() is None:
                return True
            if isinstance(value, torch.Tensor) and any(
                isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride())
            ):
                return True
    return False


@dataclass(frozen=True, slots=True)
class PortableGraph:
    """What compile_graph made that a later process needs to run the graph again
    (`inductor_codegen.portable` writes it as data)."""

    wrapper_text: str
    kernel_text: str
    namespace: dict[str, Any]  # the wrapper's own objects and the graph's constants
    kernels: tuple[Any, ...]  # KernelSource (C++) or TritonKernelSource
    output_spec: Any
    cxx: str
    cxx_flags: tuple[str, ...] | None
    kernel_count: int
    fallbacks: dict[str, int]
    language: str = "C++"
    device: str = "cpu"
    device_options: Any = None  # Triton: the TritonOptions it was compiled with
    inputs_written_in_place: frozenset[int] = frozenset()


def write_wrapper(text: str, kernel_text: str, cache_dir, language: str = "C++") -> Path:
    """Write the wrapper (kernels as comments) to `<cache>/wrappers/graph_<checksum>.py`.

    The file serves tracebacks and pdb; the code run is compiled from `text` itself.
    """
    full = (
        text
        + f"\n\n# Kernels ({language}):\n"
        + "".join(f"# {line}\n" for line in kernel_text.splitlines())
    ).encode()
    folder = cache_folder("wrappers", root=cache_dir)
    path = folder / f"graph_{payload_digest(full)[:20]}.py"
    try:
        existing = read_private(path)
    except OSError as error:
        existing = None
        discard(path, str(error))
    if existing == full:
        return path
    if existing is not None:
        discard(path, "its contents do not match its checksum")
    try:
        write_private(path, full)
    except OSError as error:  # the cache filled up or became read-only meanwhile
        root = private_temporary_root(folder.parent, f"failed: {error}")
        path = cache_folder("wrappers", root=root) / path.name
        write_private(path, full)
    return path


def load_wrapper(wrapper, kernel_text: str, namespace: dict, cache_dir, language: str) -> Path:
    """Write the wrapper to a real file (tracebacks, pdb) and run it into `namespace`."""
    path = write_wrapper(wrapper.text, kernel_text, cache_dir, language)
    exec(compile(wrapper.text, str(path), "exec"), namespace)
    return path


def finish(graph, namespace: dict, path: Path, wrapper, kernel_text: str, passes, kernel_count):
    """The CompiledGraph around the loaded wrapper's `call`; logs the code and fallbacks."""
    if artifact_enabled("output_code"):
        artifact_logger("output_code").info(
            "wrapper %s:\n%s\nkernels:\n%s", path, wrapper.text, kernel_text
        )
    if graph.fallbacks:
        artifact_logger("perf_hints").info("ATen fallbacks: %s", dict(graph.fallbacks))
    unflatten = None
    if graph.output_spec is not None and not plain_spec(graph.output_spec):
        import torch.utils._pytree as pytree

        spec = graph.output_spec
        unflatten = lambda flat: pytree.tree_unflatten(flat, spec)  # noqa: E731
    return CompiledGraph(
        namespace["call"],
        artifacts=passes.artifacts,
        fallbacks=graph.fallbacks,
        kernel_count=kernel_count,
        wrapper_path=path,
        unflatten=unflatten,
        inputs_written_in_place=graph.inputs_written_in_place,
        output_strides=graph.output_strides,
    )


def describe_lowering(graph: GraphLowering) -> str:
    lines = [f"inputs: {[getattr(i, 'name', i) for i in graph.inputs]}"]
    for buf in graph.buffers:
        lines.append(f"{buf.name}: {type(buf).__name__} {getattr(buf, 'layout', None)}")
    if graph.fallbacks:
        lines.append(f"fallbacks: {dict(graph.fallbacks)}")
    if graph.inplace_writes:
        lines.append(f"inputs written in place: {sorted(graph.inputs_written_in_place)}")
    return "\n".join(lines)
