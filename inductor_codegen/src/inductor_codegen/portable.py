"""A compiled graph as plain data, and the graph loaded back from it without lowering.

    record, tensors = dump_compiled_graph(compiled)   # None when it cannot be stored
    compiled = load_compiled_graph(record, tensors, cache_dir=None)

`record` is JSON-able: the wrapper's text, its kernels' sources and parameters,
and a recipe for each object of the wrapper's module namespace; `tensors` are the
constants (loaded with `torch.load(weights_only=True)` by the caller). Loading runs
the wrapper's text again over a namespace rebuilt from the recipes, and gets each
kernel from its cache, so the loaded graph runs the very code the compile made:
the same outputs, bit for bit.

- C++ (`language` "C++"): each kernel from the kernel library cache (compiled when
  the cache lacks it).
- Triton (`language` "Triton"): each kernel's module from the Triton kernel module
  cache (written again from its source when absent), compiled by Triton through its
  own cache; the device options (autotuning, CUDA graphs) as the compile had them.
  A graph with matmul templates is not stored.

A namespace object with no recipe (anything but tensors, ATen operators, functions
found again by module and name, devices, dtypes, plain numbers and the run-time
helpers) makes the graph not storable: the caller compiles instead.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

from guards.cache_root import payload_digest, read_private, store_record, write_private
from inductor_codegen.codegen.cpp.build import (
    CompilerConfig,
    KernelLibrary,
    cache_key_parts,
    wrapper_namespace,
)
from inductor_codegen.codegen.kernel import KernelArg, KernelSource
from inductor_codegen.codegen.wrapper import plain_spec
from inductor_codegen.pipeline import Artifact, CompiledGraph, PortableGraph, write_wrapper
from inductor_codegen.runtime import IndexCheck, IndexStatus

__all__ = [
    "PortableGraph",
    "dump_compiled_graph",
    "install_kernel_library",
    "kernel_libraries",
    "kernel_keys",
    "load_compiled_graph",
    "toolchain_identity",
]

RECORD_VERSION = 2
_PLAIN = (bool, int, float, str, type(None))


class NotPortable(Exception):
    """An object of a compiled graph that has no recipe."""


def _global_recipe(value: Any) -> list:
    module = getattr(value, "__module__", None)
    for name in (getattr(value, "__qualname__", None), getattr(value, "__name__", None)):
        if not module or not name or "<" in name:
            continue
        try:
            found: Any = importlib.import_module(module)
            for part in name.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError):
            continue
        if found is value:
            return ["global", module, name]
    raise NotPortable(f"{value!r} cannot be found again by its module and name")


def _aten_builtin_recipe(key: str, value: Any) -> list:
    """`torch.ops.aten.<name>.<overload>._op`, bound by the wrapper as `aten_<name>_<overload>`."""
    rest = key[len("aten_") :]
    for i, char in enumerate(rest):
        if char != "_":
            continue
        name, overload = rest[:i], rest[i + 1 :]
        packet = getattr(torch.ops.aten, name, None)
        if packet is None or overload not in packet.overloads():
            continue
        if getattr(packet, overload)._op is value:
            return ["aten_builtin", name, overload]
    raise NotPortable(f"{key} is not an ATen operator's callable")


def _recipe(key: str, value: Any, tensors: list[torch.Tensor]) -> list:
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            raise NotPortable(f"{key} is a {type(value).__name__} on {value.device}")
        tensors.append(value)
        return ["tensor", len(tensors) - 1]
    if isinstance(value, torch._ops.OpOverload):
        namespace, _, name = value._schema.name.partition("::")
        return ["op", namespace, name, value._overloadname]
    if isinstance(value, torch.device):
        return ["device", str(value)]
    if isinstance(value, torch.dtype):
        return ["dtype", str(value).removeprefix("torch.")]
    if isinstance(value, IndexStatus):
        return ["index_status"]
    if isinstance(value, tuple) and all(isinstance(c, IndexCheck) for c in value):
        return ["checks", [[c.op, c.dim] for c in value]]
    if isinstance(value, _PLAIN):
        return ["plain", value]
    if key.startswith("aten_") and type(value).__name__ == "builtin_function_or_method":
        if getattr(value, "__module__", "") == "torch._ops.aten":
            return _aten_builtin_recipe(key, value)
    if callable(value):
        return _global_recipe(value)
    raise NotPortable(f"{key} is a {type(value).__name__}")


def _rebuild(recipe: list, tensors: list[torch.Tensor]) -> Any:
    kind = recipe[0]
    if kind == "tensor":
        return tensors[recipe[1]]
    if kind == "op":
        _, namespace, name, overload = recipe
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    if kind == "aten_builtin":
        return getattr(getattr(torch.ops.aten, recipe[1]), recipe[2])._op
    if kind == "device":
        return torch.device(recipe[1])
    if kind == "dtype":
        dtype = getattr(torch, recipe[1])
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{recipe[1]} is not a dtype")
        return dtype
    if kind == "index_status":
        return IndexStatus()
    if kind == "checks":
        return tuple(IndexCheck(op, int(dim)) for op, dim in recipe[1])
    if kind == "plain":
        return recipe[1]
    if kind == "global":
        found: Any = importlib.import_module(recipe[1])
        for part in recipe[2].split("."):
            found = getattr(found, part)
        return found
    raise ValueError(f"unknown recipe {kind!r}")


def dump_compiled_graph(compiled: Any) -> tuple[dict[str, Any], list[torch.Tensor]] | None:
    """(record, constant tensors) of a compiled CPU graph; None when it cannot be stored."""
    portable = getattr(compiled, "portable", None)
    if not isinstance(portable, PortableGraph):
        return None
    tensors: list[torch.Tensor] = []
    try:
        namespace = {key: _recipe(key, v, tensors) for key, v in portable.namespace.items()}
        spec = None
        if portable.output_spec is not None:
            spec = pytree.treespec_dumps(portable.output_spec)
    except (NotPortable, TypeError, NotImplementedError):
        return None
    if portable.language == "Triton":
        try:
            kernels = [_triton_kernel_record(k) for k in portable.kernels]
        except NotPortable:
            return None
        options = dataclasses.asdict(portable.device_options)
    else:
        kernels = [
            {
                "name": k.name,
                "source": k.source,
                "args": [[a.kind, a.name, a.ctype] for a in k.args],
                "checks": [[c.op, c.dim] for c in k.checks],
            }
            for k in portable.kernels
        ]
        options = None
    record = {
        "version": RECORD_VERSION,
        "language": portable.language,
        "device": portable.device,
        "device_options": options,
        "wrapper": portable.wrapper_text,
        "kernel_text": portable.kernel_text,
        "namespace": namespace,
        "kernels": kernels,
        "output_spec": spec,
        "cxx": portable.cxx,
        "cxx_flags": list(portable.cxx_flags) if portable.cxx_flags is not None else None,
        "kernel_count": portable.kernel_count,
        "fallbacks": dict(portable.fallbacks),
        "inputs_written_in_place": sorted(portable.inputs_written_in_place),
    }
    return record, tensors


# Triton kernel fields that hold tuples of records (every other field is plain data).
_TRITON_TUPLES = frozenset({"args", "groups"})


def _triton_kernel_record(kernel: Any) -> dict[str, Any]:
    """Every field of a TritonKernelSource, by name (a field of another kind: NotPortable)."""
    record = {}
    for field in dataclasses.fields(kernel):
        value = getattr(kernel, field.name)
        if field.name in _TRITON_TUPLES:
            value = [[getattr(item, f.name) for f in dataclasses.fields(item)] for item in value]
            if not all(isinstance(v, _PLAIN) for item in value for v in item):
                raise NotPortable(f"kernel {kernel.name}'s {field.name}")
        elif not isinstance(value, _PLAIN):
            raise NotPortable(f"kernel {kernel.name}'s {field.name} is a {type(value).__name__}")
        record[field.name] = value
    return record


def _triton_kernels(record: dict[str, Any]) -> dict[str, Any]:
    from inductor_codegen.codegen.triton.kernel import GroupMeta, TritonKernelSource

    classes = {"args": KernelArg, "groups": GroupMeta}
    names = {f.name for f in dataclasses.fields(TritonKernelSource)}
    kernels = {}
    for kernel in record["kernels"]:
        if set(kernel) != names:
            raise ValueError(f"kernel fields {sorted(kernel)}, not {sorted(names)}")
        fields = {
            name: tuple(classes[name](*item) for item in value) if name in classes else value
            for name, value in kernel.items()
        }
        kernels[kernel["name"]] = TritonKernelSource(**fields)
    return kernels


def _kernels(record: dict[str, Any]) -> list[KernelSource]:
    if record.get("language") == "Triton":
        return []  # no kernel libraries: Triton keeps its own cache
    return [
        KernelSource(
            k["name"],
            k["source"],
            tuple(KernelArg(*a) for a in k["args"]),
            tuple(IndexCheck(op, int(dim)) for op, dim in k["checks"]),
        )
        for k in record["kernels"]
    ]


def _library(record: dict[str, Any], cache_dir: Any) -> KernelLibrary:
    flags = record["cxx_flags"]
    config = CompilerConfig(record["cxx"], tuple(flags)) if flags else CompilerConfig(record["cxx"])
    return KernelLibrary(cache_dir, config)


def kernel_keys(record: dict[str, Any], cache_dir: Any = None) -> list[str]:
    """The kernel library cache keys of a record's kernels (none for Triton)."""
    if record.get("language") == "Triton":
        return []
    library = _library(record, cache_dir)
    return [library.key(k) for k in _kernels(record)]


def load_compiled_graph(
    record: dict[str, Any], tensors: list[torch.Tensor], *, cache_dir: Any = None
) -> CompiledGraph:
    """The CompiledGraph a record describes; ValueError when the record is not one."""
    start = time.perf_counter()
    if record.get("version") != RECORD_VERSION:
        raise ValueError(f"record version {record.get('version')!r}, not {RECORD_VERSION}")
    if record["language"] == "Triton":
        return _load_triton_graph(record, tensors, cache_dir, start)
    kernels = _kernels(record)
    functions = _library(record, cache_dir).build(kernels) if kernels else {}
    objects = {key: _rebuild(recipe, tensors) for key, recipe in record["namespace"].items()}
    namespace = wrapper_namespace(objects, functions)
    text = record["wrapper"]
    path = write_wrapper(text, record["kernel_text"], cache_dir, "C++")
    exec(compile(text, str(path), "exec"), namespace)
    return _loaded(record, namespace, path, start)


def _loaded(record: dict[str, Any], namespace: dict, path: Path, start: float) -> CompiledGraph:
    unflatten = None
    if record["output_spec"] is not None:
        spec = pytree.treespec_loads(record["output_spec"])
        if not plain_spec(spec):
            unflatten = lambda flat: pytree.tree_unflatten(flat, spec)  # noqa: E731
    seconds = time.perf_counter() - start
    return CompiledGraph(
        namespace["call"],
        artifacts=[Artifact("load", f"loaded from the warm-start cache: {path}", seconds)],
        fallbacks=Counter(record["fallbacks"]),
        kernel_count=int(record["kernel_count"]),
        wrapper_path=path,
        unflatten=unflatten,
        # (A record without the key came from a wrapper that writes no input itself.)
        inputs_written_in_place=frozenset(record.get("inputs_written_in_place", ())),
    )


def _load_triton_graph(
    record: dict[str, Any], tensors: list[torch.Tensor], cache_dir: Any, start: float
) -> CompiledGraph:
    from inductor_codegen.codegen.triton.compile import load_triton_graph, maybe_cudagraphs
    from inductor_codegen.codegen.triton.options import TritonOptions

    options = TritonOptions(**record["device_options"])
    device = torch.device(record["device"])
    objects = {key: _rebuild(recipe, tensors) for key, recipe in record["namespace"].items()}
    namespace, path = load_triton_graph(
        record["wrapper"], record["kernel_text"], objects, _triton_kernels(record), device,
        options, cache_dir=cache_dir,
    )  # fmt: skip
    return maybe_cudagraphs(_loaded(record, namespace, path, start), options)


def toolchain_identity(cxx: str | None = None, cxx_flags: tuple[str, ...] | None = None) -> str:
    """The compiler, its flags and (for `-march=native`) the host CPU kernels are built for."""
    cxx = cxx or os.environ.get("CXX", "g++")
    config = CompilerConfig(cxx, tuple(cxx_flags)) if cxx_flags else CompilerConfig(cxx)
    return repr(cache_key_parts("", config))


def kernel_libraries(record: dict[str, Any], cache_dir: Any = None) -> dict[str, Path]:
    """Kernel key -> the checked library file holding it, for the record's kernels in the cache."""
    if record.get("language") == "Triton":
        return {}
    library = _library(record, cache_dir)
    found = {}
    for kernel in _kernels(record):
        key = library.key(kernel)
        path = library._library_path(key)
        if path is not None:
            found[key] = path
    return found


def triton_binaries(record: dict[str, Any]) -> dict[str, bytes]:
    """The files of Triton's JIT cache holding the record's compiled kernels (`<cache
    folder>/<file>` -> bytes), once the background compiles finished, with the launchers
    Triton built so far; {} for a C++ graph, and for kernels not compiled yet (those
    compiled at their first launch)."""
    if record.get("language") != "Triton":
        return {}
    from inductor_codegen.codegen.triton.jit_cache import kernel_binaries, launcher_binaries
    from inductor_codegen.codegen.triton.runtime import (
        kernel_function_name,
        wait_for_background_compiles,
    )

    wait_for_background_compiles()
    found = kernel_binaries(kernel_function_name(k) for k in _triton_kernels(record).values())
    if found:  # the launchers built for them: host code, compiled with the C compiler
        found.update(launcher_binaries())
    return found


def install_triton_binaries(files: dict[str, bytes], cache_dir: Any = None) -> int:
    """Put Triton cache files fetched from elsewhere (as `triton_binaries` gives them) into
    ember's Triton JIT cache under `cache_dir`; none where the user chose Triton's folder."""
    from inductor_codegen.codegen.triton.jit_cache import (
        install_kernel_binaries,
        use_jit_cache_under,
    )

    folder = use_jit_cache_under(cache_dir)
    return 0 if folder is None else install_kernel_binaries(files, folder)


def triton_binary_present(relative: str, digest: str, cache_dir: Any = None) -> bool:
    """The file `relative` of ember's Triton JIT cache holds bytes of sha256 `digest`."""
    from inductor_codegen.codegen.triton.jit_cache import use_jit_cache_under

    folder = use_jit_cache_under(cache_dir)
    if folder is None or ".." in relative.split("/"):
        return False
    try:
        data = read_private(folder / relative)
    except OSError:
        return False
    return data is not None and payload_digest(data) == digest


def install_kernel_library(kernel_key: str, name: str, data: bytes, cache_dir: Any = None) -> None:
    """Put a library fetched from elsewhere (`name`: its sha256 + `.so`) into the kernel cache."""
    if payload_digest(data) + ".so" != name:
        raise ValueError(f"library {name} does not match its checksum")
    library = KernelLibrary.__new__(KernelLibrary)
    library.root = cache_dir
    lib_dir, index_dir = library._folders()
    path = lib_dir / name
    if read_private(path) != data:
        write_private(path, data)
    store_record(index_dir / kernel_key, {"library": name})
