"""Warm start: compiled graphs kept on disk (and on a remote), keyed by everything they depend on.

    compiled = ember.compile(model)   # the inductor backend, warm start on by default
    compiled(x)                       # a later process: capture, then a cache hit
                                      # replaces tracing, partitioning, lowering, building

What is stored, per captured graph and grad mode: the run-time description of the
AOT program (outputs, aliases, mutations; with symbolic sizes each symbol's source and
each output size's expression), and for the forward and backward graphs the generated
wrapper, its constants and its kernels (C++ ones from the kernel library cache, Triton
ones from their source, compiled through Triton's cache). The backward is compiled at
its first use, not with the forward, and is an entry of its own (`lookup_backward`
with no tangent absent), as is each backward compiled for calls that leave some
tangents None: a training step that always leaves some None compiles one backward.
A backward compiled against the layouts its forward saves (`aot_autograd.saved_layouts`)
is stored with the strides its gradients are returned in, and wrapped again when loaded.
A hit runs the very code the cold compile made: the same outputs, bit for bit.

The key is an ordered list of named parts, each hashed (logged under
`EMBER_LOGS=cache`):

    schema      the record layout
    graph       the captured graph's code, and every function it calls, by module and name
                (and the checkpoint region of each node, which its code does not show)
    attributes  the graph's parameters and buffers (metadata: they are inputs) and
                constants (their bytes: they are compiled in)
    inputs      dtype, shape, strides, offset, device and requires_grad of each input,
                which inputs share memory, and the value of each number; a symbolic
                size as its expression over the symbols, never its example value
    shapes      with symbolic sizes, what capture's ShapeEnv assumed (each symbol's
                sources and range, every check of the frame's shape guard): equal text,
                so an entry serves exactly the sizes the cold compile's guards accepted
    state       default dtype, deterministic algorithms, matmul precision, threads
    options     the compile options that change what is compiled
    versions    Python, torch, triton, each Ember stage's version and source digest
    toolchain   the C++ compiler's identity, its flags and the host CPU
    environment EMBER_* variables (but the cache's own) and TRITON_* ones (but the
                folders of Triton's caches, which ember may set itself)
    devices     each GPU's name, compute capability and CUDA version
    variant     grad mode, which inputs require grad, autocast (the AOT compile's own key)

With symbolic sizes, what tracing and compiling assumed of the sizes beyond the
frame's guards (`aot_autograd.symbolic.ShapeAssumptions`) is stored with the entry and
checked at every call of a loaded compile; a call that breaks it runs a static compile.

What capture read (globals, closure values, config) is in the graph it hands over,
so it is in the key. Capture itself is skipped in a later process where a kept
capture record's guards pass (`ember.warm_capture`); the rebuilt graph then reaches
this cache as a captured one would. A graph that cannot be named across
processes is not stored and compiles as before: a custom decomposition table, a
function without a module and name, a submodule call, a non-tensor attribute, a
tensor subclass, a tensor on a device other than the CPU or CUDA, a graph run eagerly
or with Triton matmul templates. Each distinct piece of a graph cut at repeated blocks
(`ember.regions`) is an entry of its own; its inputs that earlier pieces make are
FakeTensor examples, keyed by their metadata like any input.

Files: `<cache root>/warm/<key[:2]>/<key>.json`, written atomically with a checksum
(`guards.cache_root`); a faulty one is removed with one warning and compiled again.
`EMBER_WARM_START=0` or `options={"warm_start": False}` turns warm start off.
"""

from __future__ import annotations

import base64
import collections
import functools
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from aot_autograd.checkpoint_regions import CHECKPOINT_POLICY, CHECKPOINT_REGION
from aot_autograd.symbolic import expression_text, is_symbolic, shape_env_of
from guards import artifact_enabled, artifact_logger
from guards.cache_root import cache_folder, discard, load_record, payload_digest, store_record
from guards.fake_tensor import FakeTensor
from guards.tensor_subclasses import is_traceable_subclass

__all__ = ["STATS", "WarmStartCache", "graph_key", "warm_start_cache"]

SCHEMA = "5"
# The "backward" of a training entry whose full backward is an entry of its own.
_APART = "apart"
STAGES = ("guards", "dynamo_capture", "prim_decomp", "aot_autograd", "inductor_codegen", "ember")
_OWN_VARIABLES = ("EMBER_CACHE_DIR", "EMBER_LOGS", "EMBER_REMOTE_CACHE", "EMBER_CACHE_SIZE")
# Where Triton keeps its caches: no part of what it compiles (TRITON_CACHE_DIR is set by
# ember itself to a folder under the cache root where the user has not set it)
_TRITON_FOLDERS = ("TRITON_CACHE_DIR", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR", "TRITON_HOME")
_log = artifact_logger("cache")
# hits, remote_hits, misses, stored, not_storable: counted for this process (tests, reports);
# full_backward_hits, full_backward_stored: a training entry's backward, compiled at its first use
STATS: collections.Counter[str] = collections.Counter()


class NotStorable(Exception):
    """Something the key cannot name soundly: the graph is compiled, not stored."""


# ----------------------------------------------------------------- the key


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# Modules whose functions a graph may call and still be stored: their code is in the key
# (the torch version, Ember's sources) or never changes (the standard library's operators).
_NAMED_MODULES = ("torch", "operator", "_operator", "math", "builtins", *STAGES)
# Argument values a graph's code prints as themselves (anything else FX would make a global).
_PRINTED = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.layout)
_PRINTED += (torch.memory_format, type(Ellipsis), torch.fx.Node)


def _qualified(target: Any) -> str:
    """`module.name` of a function the graph calls, checked to lead back to it.

    Only functions of torch, Ember and Python's operator modules: a function of the
    user's put in the graph whole (allow_in_graph) may change its body under the same
    name, and its body is not in the key.
    """
    if isinstance(target, str):
        return target
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return f"op:{target}"
    module = getattr(target, "__module__", None) or ""
    if module.split(".")[0] not in _NAMED_MODULES:
        raise NotStorable(f"the graph calls {target!r}, a function outside torch and Ember")
    for name in (getattr(target, "__qualname__", None), getattr(target, "__name__", None)):
        if not name or "<" in name:
            continue
        found: Any = sys.modules.get(module)
        for part in name.split("."):
            found = getattr(found, part, None)
        if found is target:
            return f"{module}.{name}"
    raise NotStorable(f"the graph calls {target!r}, which has no module and name to find it by")


def _check_printed(value: Any) -> None:
    """`value` (a node's argument) appears in the graph's code as itself."""
    if isinstance(value, list | tuple):
        for item in value:
            _check_printed(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_printed(key)
            _check_printed(item)
    elif isinstance(value, slice):
        _check_printed((value.start, value.stop, value.step))
    elif not isinstance(value, _PRINTED):
        raise NotStorable(f"the graph passes a {type(value).__name__} that its code only names")


def _tensor_metadata(t: torch.Tensor) -> list:
    # A FakeTensor example stands for a plain tensor made by the compiled code before
    # it (an input of a piece cut out of a larger graph: ember.regions); its metadata
    # is all the compile read of it.
    if type(t) not in (torch.Tensor, torch.nn.Parameter, FakeTensor):
        raise NotStorable(f"a {type(t).__name__} (a tensor subclass)")
    if t.device.type not in ("cpu", "cuda"):
        raise NotStorable(f"a tensor on {t.device} (only CPU and CUDA graphs are stored)")
    return [
        str(t.dtype),
        [_size_text(s) for s in t.shape],
        [_size_text(s) for s in t.stride()],
        _size_text(t.storage_offset()),
        str(t.device),
        str(t.layout),
        t.requires_grad,
        isinstance(t, torch.nn.Parameter),
    ]


def _size_text(value: Any) -> int | str:
    """An int, or a symbolic size as its expression over the size symbols (not its hint)."""
    if isinstance(value, torch.SymInt | torch.SymFloat):
        constant = value.node.maybe_as_int() if isinstance(value, torch.SymInt) else None
        return constant if constant is not None else f"sym:{value.node.expr}"
    return value


def _tensor_bytes(t: torch.Tensor) -> str:
    t = t.detach()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if not t.numel():
        return hashlib.sha256(b"").hexdigest()
    data = t.cpu().reshape(-1).contiguous().view(torch.uint8)
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()


def _memory_sharing(tensors: list[torch.Tensor]) -> list[int]:
    """For each tensor, the index of the first one sharing its storage."""
    first: dict[int, int] = {}
    pattern = []
    for i, t in enumerate(tensors):
        try:
            pointer = t.untyped_storage().data_ptr()
        except RuntimeError:
            pointer = -i - 1
        pattern.append(first.setdefault(pointer, i) if pointer else i)
    return pattern


def _graph_part(gm: torch.fx.GraphModule) -> str:
    targets = []
    # NOTE: a number node's constant value shows in no code: a float input capture
    # specialized is read with `.item()` and its value lives in the read's meta["val"]
    # (`item = s.item()` for every value), which the traced graph holds as a constant
    numbers = []
    # NOTE: checkpoint regions show in no code either, and decide what the backward
    # recomputes: each tagged node's region, numbered in graph order
    regions: dict[Any, int] = {}
    tagged = []
    for node in gm.graph.nodes:
        if node.meta.get(CHECKPOINT_POLICY) is not None:
            raise NotStorable("the graph has a selective checkpoint's policy function")
        region = node.meta.get(CHECKPOINT_REGION)
        if region is not None:
            tagged.append([node.name, regions.setdefault(region, len(regions))])
        if node.op == "call_module":
            raise NotStorable("the graph calls a submodule")
        if node.op in ("call_function", "call_method"):
            targets.append(_qualified(node.target))
            _check_printed((node.args, node.kwargs))
        value = node.meta.get("val")
        if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
            expr = value.node.expr
            if not expr.free_symbols:
                text = repr(float(expr)) if expr.is_Number else str(expr)  # every digit
                numbers.append([node.name, type(value).__name__, text])
    return json.dumps([gm.code, targets, numbers, tagged])


def _attributes_part(gm: torch.fx.GraphModule) -> tuple[str, list[torch.Tensor]]:
    parameters = {id(p) for p in gm.parameters()} | {id(b) for b in gm.buffers()}
    attributes, tensors = [], []
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value: Any = gm
        for part in str(node.target).split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor):
            raise NotStorable(f"the graph reads {node.target}, a {type(value).__name__}")
        entry = [str(node.target), _tensor_metadata(value)]
        if id(value) not in parameters:
            entry.append(_tensor_bytes(value))  # a constant: compiled into the code
        attributes.append(entry)
        tensors.append(value)
    # Every parameter and buffer is an input of the AOT program, read or not.
    for kind, named in (("p", gm.named_parameters), ("b", gm.named_buffers)):
        for name, value in named(remove_duplicate=False):
            attributes.append([kind, name, _tensor_metadata(value)])
            tensors.append(value)
    return json.dumps(attributes), tensors


def _inputs_part(gm: torch.fx.GraphModule, example_inputs: list, attrs: list) -> str:
    """Each input's metadata: with symbolic sizes, the placeholder's (sizes as expressions
    over the symbols, a size input as its symbol), never the example's sizes."""
    placeholders = [n.meta.get("val") for n in gm.graph.find_nodes(op="placeholder")]
    symbolic = len(placeholders) == len(example_inputs) and is_symbolic(placeholders)
    values = []
    tensors = list(attrs)
    for i, value in enumerate(example_inputs):
        described = placeholders[i] if symbolic else value
        if is_traceable_subclass(value):
            raise NotStorable(f"input {i} is of tensor subclass {type(value).__qualname__}")
        if isinstance(value, torch.Tensor):
            if symbolic and not isinstance(described, torch.Tensor):
                raise NotStorable(f"input {i} is a tensor its placeholder does not describe")
            values.append(["tensor", _tensor_metadata(described)])
            tensors.append(value)
        elif symbolic and isinstance(described, torch.SymInt | torch.SymFloat):
            values.append([type(described).__name__, _size_text(described)])
        elif isinstance(value, bool | int | float) and not isinstance(value, torch.SymInt):
            values.append([type(value).__name__, repr(value)])
        else:
            raise NotStorable(f"an input of type {type(value).__name__}")
    return json.dumps([values, _memory_sharing(tensors)])


def _shapes_part(gm: torch.fx.GraphModule) -> str:
    """What capture's ShapeEnv assumed of the size symbols (the frame's shape guard checks
    it): each symbol's sources and range, and every check, with no hint. Equal text means
    the guards accept exactly the same sizes, so an entry compiled under them is valid for
    every call that reaches it."""
    env = shape_env_of([n.meta.get("val") for n in gm.graph.find_nodes(op="placeholder")])
    if env is None:
        return "static"
    bindings = [[str(b.symbol), [s.expr for s in b.sources], str(b.range)] for b in env.bindings()]
    floats = [[str(symbol), source.expr] for symbol, source in env.float_bindings()]
    ranges = [[str(symbol), str(r)] for symbol, r in env.ranges().items()]
    checks = [
        [kind, None if source is None else source.expr, expression_text(expr)]
        for kind, source, expr in env.checks()
    ]
    return json.dumps([bindings, floats, ranges, checks])


def _state_part() -> str:
    return json.dumps(
        [
            str(torch.get_default_dtype()),
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.get_float32_matmul_precision(),
            torch.get_num_threads(),
        ]
    )


def _options_part(options: Mapping[str, Any]) -> str:
    if options.get("decompositions") is not None:
        raise NotStorable("a decomposition table of the user's (its rules have no names)")
    if options.get("guard_filter_fn") is not None:
        pass  # capture applies it; the graph is what it is
    kept = {
        name: value
        for name, value in options.items()
        if name not in ("guard_filter_fn", "recompile_limit", "cache_dir", "compile_threads")
        and name != "warm_start"
    }
    return json.dumps({k: repr(v) for k, v in sorted(kept.items())})


def _source_digest(module_name: str) -> str:
    module = sys.modules.get(module_name) or importlib.import_module(module_name)
    folder = Path(module.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


@functools.lru_cache(maxsize=1)
def _versions_part() -> str:
    """Python, torch, triton, and each stage's version and source digest (once a process)."""
    parts = [sys.version, platform.machine(), torch.__version__, _version("triton")]
    for stage in STAGES:
        module = importlib.import_module(stage)
        parts.append([stage, getattr(module, "__version__", "?"), _source_digest(stage)])
    return json.dumps(parts)


@functools.lru_cache(maxsize=8)
def _toolchain_part(cxx: str | None, flags: tuple[str, ...] | None) -> str:
    from inductor_codegen.portable import toolchain_identity

    return toolchain_identity(cxx, flags)


def _environment_part() -> str:
    """EMBER_* variables (but the cache's own) and TRITON_* ones (the interpreter, its
    compiler's switches; not the folders of its caches)."""
    variables = {
        name: value
        for name, value in os.environ.items()
        if (name.startswith("EMBER_") and not name.startswith(_OWN_VARIABLES))
        or (name.startswith("TRITON_") and name not in _TRITON_FOLDERS)
    }
    return json.dumps(sorted(variables.items()))


def _devices_part(example_inputs: list, gm: torch.fx.GraphModule) -> str:
    """Each GPU the graph's tensors are on: its name, compute capability and CUDA version."""
    tensors = [t for t in (*example_inputs, *gm.parameters(), *gm.buffers())]
    devices = sorted({str(t.device) for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda})
    described = []
    for name in devices:
        device = torch.device(name)
        described.append(
            [
                name,
                torch.cuda.get_device_name(device),
                list(torch.cuda.get_device_capability(device)),
                torch.version.cuda,
            ]
        )
    return json.dumps(described)


def graph_key(
    gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """The named, hashed key parts of a captured graph; NotStorable when it has none."""
    attributes, attribute_tensors = _attributes_part(gm)
    flags = options.get("cpp.cxx_flags")
    parts = [
        ("schema", SCHEMA),
        ("graph", _graph_part(gm)),
        ("attributes", attributes),
        ("inputs", _inputs_part(gm, example_inputs, attribute_tensors)),
        ("shapes", _shapes_part(gm)),
        ("state", _state_part()),
        ("options", _options_part(options)),
        ("versions", _versions_part()),
        ("toolchain", _toolchain_part(options.get("cpp.cxx"), tuple(flags) if flags else None)),
        ("environment", _environment_part()),
        ("devices", _devices_part(example_inputs, gm)),
    ]
    return [(name, _digest(text)[:16]) for name, text in parts]


# ----------------------------------------------------------------- the store


def _tensors_text(tensors: list[torch.Tensor]) -> str:
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _tensors_of(text: str) -> list[torch.Tensor]:
    tensors = torch.load(io.BytesIO(base64.b64decode(text)), weights_only=True)
    if not isinstance(tensors, list) or not all(isinstance(t, torch.Tensor) for t in tensors):
        raise ValueError("the constants are not a list of tensors")
    return tensors


def _graph_record(compiled: Any) -> dict[str, Any] | None:
    from aot_autograd.saved_layouts import OutputsInStrides
    from inductor_codegen.portable import dump_compiled_graph

    # A backward compiled against the forward's saved layouts returns its gradients in
    # eager's strides through a wrapper: the graph is stored, the strides beside it.
    strides = None
    if isinstance(compiled, OutputsInStrides):
        compiled, strides = compiled.compiled, compiled.strides
    dumped = dump_compiled_graph(compiled)
    if dumped is None:
        return None
    record, tensors = dumped
    graph = {"graph": record, "tensors": _tensors_text(tensors)}
    if strides is not None:
        graph["output_strides"] = [[i, list(stride)] for i, stride in strides]
    return graph


def _load_graph(record: dict[str, Any], cache_dir: Any) -> Any:
    from aot_autograd.saved_layouts import OutputsInStrides
    from inductor_codegen.portable import load_compiled_graph

    tensors = _tensors_of(record["tensors"])
    compiled = load_compiled_graph(record["graph"], tensors, cache_dir=cache_dir)
    strides = record.get("output_strides")
    if strides is not None:
        compiled = OutputsInStrides(compiled, [(i, tuple(stride)) for i, stride in strides])
    return compiled


def entry_folder(cache_dir: Any = None) -> Path:
    """`<cache root>/warm`."""
    return cache_folder("warm", root=cache_dir)


class WarmStartCache:
    """The aot_autograd cache hook of one captured graph (`aot_autograd.portable`)."""

    def __init__(self, parts: list[tuple[str, str]], cache_dir: Any, name: str = "") -> None:
        self.parts = parts
        self.cache_dir = cache_dir
        self.name = name

    def key(self, variant: tuple) -> str:
        text = repr(self.parts) + repr(_variant_text(variant))
        return _digest(text)[:40]

    def path(self, key: str) -> Path:
        return cache_folder("warm", key[:2], root=self.cache_dir) / f"{key}.json"

    def lookup(self, variant: tuple) -> Any:
        from aot_autograd.portable import (
            BACKWARD_STORED_APART,
            CompiledParts,
            assumptions_from_record,
            program_from_record,
        )

        start = time.perf_counter()
        key = self.key(variant)
        path = self.path(key)
        record = load_record(path)
        source = "local"
        if record is None:
            record = self._fetch_remote(key, path)
            source = "remote"
        if record is None:
            STATS["misses"] += 1
            if artifact_enabled("cache"):
                _log.info("warm-start miss %s: key %s, %s", self.name, key, self._why_missed())
            return None
        try:
            if record.get("key") != key or record.get("schema") != SCHEMA:
                raise ValueError("it was stored under another key")
            self._fetch_kernels(record)
            program = program_from_record(record["program"])
            forward = _load_graph(record["forward"], self.cache_dir)
            backward = record["backward"]
            if backward == _APART:  # compiled at its first use, stored as a backward entry
                backward = BACKWARD_STORED_APART
            elif backward is not None:
                backward = _load_graph(backward, self.cache_dir)
            dependencies = record["dependencies"]
            if dependencies is not None:
                dependencies = tuple(frozenset(int(i) for i in d) for d in dependencies)
            saved_strides = tuple(
                None if s is None else tuple(int(i) for i in s) for s in record["saved_strides"]
            )
            assumptions = assumptions_from_record(record["assumptions"])
        except Exception as error:  # noqa: BLE001 - a faulty entry is compiled again
            discard(path, f"it could not be loaded: {type(error).__name__}: {error}")
            if source == "remote":
                from ember.remote_cache import remote_cache

                remote = remote_cache()
                if remote is not None:
                    remote.garbage(f"entry {key} could not be loaded ({error})")
            STATS["misses"] += 1
            return None
        self._touch(path, record)
        STATS["hits"] += 1
        STATS["remote_hits"] += source == "remote"
        _log.info(
            "warm-start hit (%s) %s: %s in %.3fs", source, self.name, key,
            time.perf_counter() - start,
        )  # fmt: skip
        return CompiledParts(program, forward, backward, dependencies, saved_strides, assumptions)

    def store(self, variant: tuple, parts: Any) -> None:
        try:
            record = self._record(variant, parts)
        except Exception as error:  # noqa: BLE001 - storing is an optimization
            _log.info("%s not stored: %s: %s", self.name, type(error).__name__, error)
            return
        if record is None:
            return
        key = record["key"]
        try:
            store_record(self.path(key), record)
        except OSError as error:
            _log.info("%s not stored: %s", self.name, error)
            return
        STATS["stored"] += 1
        try:
            store_record(self._last_stored_path(), {"parts": self.parts})
        except OSError:
            pass
        self._publish(key, record)
        _prune_now_and_then(self.cache_dir)

    # ------------------------------------------------------------ specialized backwards

    def _backward_key(self, variant: tuple, absent: frozenset[int]) -> str:
        return _digest(f"{self.key(variant)} without tangents {sorted(absent)}")[:40]

    def lookup_backward(self, variant: tuple, absent: frozenset[int]) -> tuple[Any] | None:
        """The backward compiled for calls leaving the tangents `absent` None (a 1-tuple;
        None in it: the full backward runs), or None when it is not stored."""
        key = self._backward_key(variant, absent)
        path = self.path(key)
        record = load_record(path)
        if record is None:
            record = self._fetch_remote(key, path)
        if record is None:
            return None
        try:
            if record.get("key") != key or record.get("schema") != SCHEMA:
                raise ValueError("it was stored under another key")
            self._fetch_kernels(record)
            backward = record["backward"]
            compiled = None if backward is None else _load_graph(backward, self.cache_dir)
        except Exception as error:  # noqa: BLE001 - a faulty entry is compiled again
            discard(path, f"it could not be loaded: {type(error).__name__}: {error}")
            return None
        self._touch(path, record)
        # NOTE: the full backward belongs to its forward's entry: counted apart
        STATS["hits" if absent else "full_backward_hits"] += 1
        _log.info("warm-start hit %s without tangents %s: %s", self.name, sorted(absent), key)
        return (compiled,)

    def store_backward(self, variant: tuple, absent: frozenset[int], compiled: Any) -> None:
        backward = None
        if compiled is not None:
            try:
                backward = _graph_record(compiled)
            except Exception as error:  # noqa: BLE001 - storing is an optimization
                _log.info("%s backward not stored: %s: %s", self.name, type(error).__name__, error)
                return
            if backward is None:
                return
        key = self._backward_key(variant, absent)
        record = {"schema": SCHEMA, "key": key, "forward": None, "backward": backward}
        try:
            store_record(self.path(key), record)
        except OSError as error:
            _log.info("%s backward not stored: %s", self.name, error)
            return
        STATS["stored" if absent else "full_backward_stored"] += 1
        self._publish(key, record)

    def _last_stored_path(self) -> Path:
        """Where the key parts of the last entry stored for a graph of this name are kept."""
        return cache_folder("warm", "names", root=self.cache_dir) / _digest(self.name)[:24]

    def _why_missed(self) -> str:
        """Which key parts differ from the last entry stored under this graph's name."""
        last = load_record(self._last_stored_path())
        if not isinstance(last, dict) or not isinstance(last.get("parts"), list):
            return f"nothing stored for {self.name} yet; key parts {self.parts}"
        before = {name: digest for name, digest in last["parts"]}
        changed = [name for name, digest in self.parts if before.get(name) != digest]
        if not changed:
            return "the same key parts as the last entry stored: another grad mode or autocast"
        return f"differs from the last entry stored for {self.name} in: {', '.join(changed)}"

    def _touch(self, path: Path, record: dict) -> None:
        """Mark the entry and its kernel libraries used now (for least-recently-used eviction)."""
        from inductor_codegen.portable import kernel_libraries

        _touch(path)
        for graph in self._graph_records(record):
            for library in kernel_libraries(graph, self.cache_dir).values():
                _touch(library)

    def _record(self, variant: tuple, parts: Any) -> dict | None:
        from aot_autograd.portable import assumptions_record, program_record
        from aot_autograd.runtime import DeferredBackward

        program = program_record(parts.program)
        if program is None:
            _log.info("%s not stored: its outputs cannot be described as data", self.name)
            return None
        forward = _graph_record(parts.forward)
        backward = None
        if isinstance(parts.backward, DeferredBackward):
            backward = _APART  # `store_backward` with no tangent absent, once compiled
        elif parts.backward is not None:
            backward = _graph_record(parts.backward)
        if forward is None or (parts.backward is not None and backward is None):
            _log.info(
                "%s not stored: a graph was not compiled to kernels (run eagerly, or with "
                "matmul templates)", self.name,
            )  # fmt: skip
            return None
        dependencies = None
        if parts.dependencies is not None:
            dependencies = [sorted(d) for d in parts.dependencies]
        strides = [s for s in parts.saved_strides if s is not None]
        if any(type(i) is not int for s in strides for i in s):
            _log.info("%s not stored: a saved value's strides are symbolic", self.name)
            return None
        return {
            "schema": SCHEMA,
            "key": self.key(variant),
            "parts": self.parts,
            "program": program,
            "forward": forward,
            "backward": backward,
            "dependencies": dependencies,
            "saved_strides": [None if s is None else list(s) for s in parts.saved_strides],
            "assumptions": assumptions_record(parts.assumptions),
        }

    # ------------------------------------------------------------ remote

    def _graph_records(self, record: dict) -> list[dict]:
        graphs = (record.get("forward"), record.get("backward"))
        return [g["graph"] for g in graphs if isinstance(g, dict)]

    def _fetch_remote(self, key: str, path: Path) -> dict | None:
        from ember.remote_cache import remote_cache

        remote = remote_cache()
        if remote is None:
            return None
        data = remote.get("entry", key)
        if data is None:
            return None
        try:
            record = open_envelope(data)
            if record.get("key") != key:
                raise ValueError("it is not the entry of this key")
        except ENVELOPE_ERRORS as error:
            remote.garbage(f"entry {key}: {error}")
            return None
        try:
            store_record(path, record)
        except OSError:
            pass
        return record

    def _fetch_kernels(self, record: dict) -> None:
        """Kernel libraries the local cache lacks, from the remote (compiled when absent)."""
        from ember.remote_cache import remote_cache
        from inductor_codegen.portable import install_kernel_library, kernel_keys, kernel_libraries

        remote = remote_cache()
        if remote is None:
            return
        for graph in self._graph_records(record):
            present = kernel_libraries(graph, self.cache_dir)
            for kernel_key in kernel_keys(graph, self.cache_dir):
                if kernel_key in present:
                    continue
                fetched = remote.fetch_kernel(kernel_key)
                if fetched is not None:
                    install_kernel_library(kernel_key, *fetched, cache_dir=self.cache_dir)
        if any(graph.get("language") == "Triton" for graph in self._graph_records(record)):
            self._fetch_triton_binaries(remote, record["key"])

    def _fetch_triton_binaries(self, remote: Any, key: str) -> None:
        """The compiled Triton kernels of an entry, into ember's Triton JIT cache (not into
        a folder the user chose for Triton), so they are not compiled again here."""
        from inductor_codegen.portable import install_triton_binaries, triton_binary_present

        def present(path: str, digest: str) -> bool:
            return triton_binary_present(path, digest, self.cache_dir)

        files = remote.fetch_binaries(key, present)
        if files:
            try:
                install_triton_binaries(files, self.cache_dir)
            except (OSError, ValueError) as error:
                remote.garbage(f"the Triton files of entry {key} could not be installed ({error})")

    def _publish(self, key: str, record: dict) -> None:
        from ember.remote_cache import remote_cache
        from inductor_codegen.portable import kernel_libraries, triton_binaries

        remote = remote_cache()
        if remote is None:
            return
        text = json.dumps(record, sort_keys=True)
        envelope = {"sha256": payload_digest(text.encode()), "payload": text}
        items = {f"entry:{key}": json.dumps(envelope).encode()}
        binaries: dict[str, bytes] = {}
        for graph in self._graph_records(record):
            for kernel_key, library in kernel_libraries(graph, self.cache_dir).items():
                items[f"kernel:{kernel_key}"] = library.name.encode()
                items[f"library:{library.name}"] = library.read_bytes()
            binaries.update(triton_binaries(graph))
        if binaries:
            index = {path: payload_digest(data) for path, data in binaries.items()}
            items[f"triton:{key}"] = json.dumps(index, sort_keys=True).encode()
            items.update({f"binary:{index[path]}": data for path, data in binaries.items()})
        remote.put(items)


def _variant_text(variant: tuple) -> str:
    return repr(tuple(repr(v) for v in variant))


def _touch(path: Path) -> None:
    """Mark `path` used now (least-recently-used eviction reads the modification time)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _prune_now_and_then(cache_dir: Any, every: float = 3600.0) -> None:
    """Keep the cache within its size bound: prune at most once an hour, after a store."""
    stamp = entry_folder(cache_dir) / ".last_prune"
    try:
        if time.time() - os.stat(stamp).st_mtime < every:
            return
    except FileNotFoundError:
        pass
    try:
        from ember.cache import prune, size_bound

        stamp.touch()
        prune(size_bound(), stamp.parent.parent)
    except (OSError, ValueError) as error:
        _log.info("the cache was not pruned: %s", error)


def warm_start_enabled(options: Mapping[str, Any]) -> bool:
    if os.environ.get("EMBER_WARM_START", "1").strip().lower() in ("0", "false", "off", "no"):
        return False
    return options.get("warm_start", True) is not False


def warm_start_cache(
    gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any]
) -> WarmStartCache | None:
    """The cache hook for a captured graph; None when warm start is off or it cannot be stored."""
    if not warm_start_enabled(options):
        return None
    try:
        parts = graph_key(gm, example_inputs, options)
    except NotStorable as error:
        STATS["not_storable"] += 1
        _log.info("graph not stored for warm start: %s", error)
        return None
    frame = gm.meta.get("frame")  # the frame a captured graph came from
    name = getattr(gm, "_ember_name", None) or (f"{frame}_graph" if frame else type(gm).__name__)
    return WarmStartCache(parts, options.get("cache_dir"), name)


# What a malformed envelope from the remote cache raises in `open_envelope`.
ENVELOPE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError)


def open_envelope(data: bytes) -> dict:
    """The record a remote cache's envelope holds (`{"sha256", "payload"}`), its checksum
    checked; raises one of ENVELOPE_ERRORS when the bytes are not such an envelope."""
    envelope = json.loads(data.decode())
    text = envelope["payload"]
    if payload_digest(text.encode()) != envelope["sha256"]:
        raise ValueError("its checksum does not match its contents")
    record = json.loads(text)
    if not isinstance(record, dict):
        raise ValueError("it is not a record")
    return record
