"""What capture made for one frame, as plain data: a later process installs it without capturing.

    record = entry_record(frame, guard_set)        # after a compile (None: not portable)
    entry = install_entry(record, target, L, backend)
    # None: the record does not apply to this call (its guards fail, a function it
    # names changed): capture as usual. Else a CompiledEntry whose guards passed on L.

A record holds the frame's guards (each guard's fields), the captured graph (its
nodes, each node's fake value as metadata, the module calls it was made in), where
each graph input is read, the entry's output expression, replays and constants.
Installing rebuilds the guards and checks them on the call's locals, rebuilds the
graph, hands it to the backend (whose own caches then skip tracing and lowering)
and generates the entry function as `compile_entry` does.

Objects are named so a later process finds the same thing:

    plain values        None, bool, int, float, str, bytes, tuples, lists, slices,
                        dtype, device, layout, memory_format, torch.Size
    modules             by name
    functions, classes  by module and qualified name, resolved by import, with a
                        fingerprint checked when resolved: a function's code (every
                        nested code object), defaults and no closure; a class's MRO
    ATen operators      by name
    code objects        a function's code made in the frame: by its place among the
                        frame code's constants (the frame's code is in the key)
    module globals      a module's namespace (a made function's globals), by name
    nn.Module objects   the object at the guard's own source in the call installing
                        the record (an NN_MODULE guard), as capture guards what it
                        reads of them (attributes, hooks, parameters)

A frame whose capture stopped at a graph break keeps the guards of that capture and
the break (`break_record`): installing makes the split, branch or eager entry again
from them and the frame's code, as right after that capture. A break inside an inlined
call keeps the call: its function by name (or by the source the frame read it from)
with its fingerprint, its receiver by source with its class, found again there after
the guards passed (`_callee_record`); a function made in the frame by its code's place
among the frame code's constants.

A graph with symbolic sizes keeps its ShapeEnv (`shape_env_record`: symbols with their
ranges and sources, replacements, relations; expressions as `guards.sym_exprs.expr_data`)
and its sizes as expressions; installing restores the ShapeEnv with the call's sizes as
hints (after its shape guard passed) and rebuilds the fakes over it.

Anything else (an object identified by its id, a closure, a tensor constant, a
symbolic float, a break inside a call on an object capture made) makes the record not portable: the
frame is captured in every process, as before.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib
import json
import os
import sys
import types
import weakref
from typing import Any

import torch
import torch.fx
from torch.fx.immutable_collections import immutable_list

from dynamo_capture.calls import MODULE_CALLS
from dynamo_capture.graph_printouts import TorchStyleCodeGen
from dynamo_capture.resume import END, UNBOUND
from guards import (
    AttributeIdGuard,
    CompiledGuards,
    GuardSet,
    MappingItemGuard,
    NameAbsentGuard,
    artifact_enabled,
    artifact_logger,
)
from guards.fake_tensor import FakeTensor, FakeTensorMode
from guards.guard_kinds import Guard, IdGuard, ModuleStructureGuard, NNModuleGuard
from guards.sources import HeldObjectSource, Source
from guards.sym_exprs import expr_data, expr_of_data
from guards.symbolic_guards import ShapeCheck, ShapeGuard
from guards.tensor_guards import TensorMatchGuard, held
from guards.tensor_subclasses import is_traceable_subclass

__all__ = [
    "CaptureCache",
    "NotPortable",
    "frame_fingerprint",
    "code_digest",
    "decode_value",
    "encode_value",
    "entry_record",
    "install_parts",
]

RECORD_SCHEMA = "5"
_log = artifact_logger("cache")
_SOURCE_MODULES = ("guards.", "dynamo_capture.")


class NotPortable(Exception):
    """Something of a capture that a later process cannot find again by name."""


class Stale(Exception):
    """A record naming something that is not what it was when stored."""


# ----------------------------------------------------------------- fingerprints


def code_digest(code: types.CodeType) -> str:
    """A digest of everything in `code` that decides what it does (nested code included)."""
    digest = hashlib.sha256()
    _hash_code(code, digest)
    return digest.hexdigest()[:32]


def _hash_code(code: types.CodeType, digest: Any) -> None:
    digest.update(code.co_code)
    digest.update(
        repr(
            (
                code.co_qualname, code.co_names, code.co_varnames, code.co_freevars,
                code.co_cellvars, code.co_flags, code.co_argcount, code.co_posonlyargcount,
                code.co_kwonlyargcount, code.co_exceptiontable,
            )
        ).encode()
    )  # fmt: skip
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            _hash_code(constant, digest)
        else:
            digest.update(f"{_constant_text(constant)}\0".encode())


def _constant_text(constant: Any) -> str:
    """A code constant as text the same in every process: a frozenset's items sorted (its
    repr follows string hashing, which differs between processes)."""
    if isinstance(constant, frozenset):
        return "frozenset:" + repr(sorted(_constant_text(item) for item in constant))
    if isinstance(constant, tuple):
        return "tuple:" + repr([_constant_text(item) for item in constant])
    text = f"{type(constant).__name__}:{constant!r}"
    if " at 0x" in text:  # an object a generated code holds (a split part's route)
        raise NotPortable(f"a code constant known by its address ({text:.60})")
    return text


def _fingerprint(obj: Any, visiting: tuple = ()) -> str:
    global _fingerprinting
    _fingerprinting += 1
    try:
        return _fingerprint_of(obj, visiting)
    finally:
        _fingerprinting -= 1


def _fingerprint_of(obj: Any, visiting: tuple) -> str:
    if isinstance(obj, types.FunctionType):
        if obj in visiting:  # a closure reaching back to a function around it
            return f"cycle:{visiting.index(obj)}"
        visiting = (*visiting, obj)
        parts = [code_digest(obj.__code__), obj.__globals__.get("__name__")]
        parts.append(encode_value(obj.__defaults__))
        parts.append(encode_value(tuple(sorted((obj.__kwdefaults__ or {}).items()))))
        parts.append([_cell_fingerprint(cell, visiting) for cell in obj.__closure__ or ()])
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]
    if isinstance(obj, type):
        if _tables is None:  # memoized only while one record is made or installed
            return _class_fingerprint(obj)
        found = _class_fingerprints.get(obj)
        if found is None:
            found = _class_fingerprints[obj] = _class_fingerprint(obj)
        return found
    return ""


# Fingerprints of the classes named while one record is made or installed.
_class_fingerprints: dict[type, str] = {}


# Modules whose classes change only with a version in the key (Python's, torch's, Ember's).
_VERSIONED = ("builtins", "torch", "typing", "abc", "enum", "collections", "types", "functools")
_VERSIONED += ("guards", "dynamo_capture", "aot_autograd", "inductor_codegen", "prim_decomp")


def _class_fingerprint(cls: type) -> str:
    """The classes of `cls`'s MRO by name and, for classes outside Python's, torch's and
    Ember's modules, what their bodies define: each function's code (a method edited
    between processes), the kind of every other attribute."""
    digest = hashlib.sha256()
    for base in cls.__mro__:
        digest.update(f"{base.__module__}.{base.__qualname__}\0".encode())
        if base.__module__.split(".")[0] in _VERSIONED:
            continue
        for name, value in sorted(vars(base).items(), key=lambda item: item[0]):
            function = getattr(value, "__func__", value)  # staticmethod, classmethod
            if isinstance(value, property):
                function = value.fget
            if isinstance(function, types.FunctionType):
                digest.update(f"{name}:{code_digest(function.__code__)}\0".encode())
            else:
                digest.update(f"{name}:{type(value).__qualname__}\0".encode())
    return digest.hexdigest()[:32]


def _cell_fingerprint(cell: types.CellType, visiting: tuple) -> Any:
    """A closure cell's contents: a value as `encode_value` gives it, a function (the one
    a decorator wraps) by its own fingerprint, a method bound to a plain object by its
    function's fingerprint and the object's class and attributes."""
    try:
        contents = cell.cell_contents
    except ValueError:
        return ["empty"]
    if isinstance(contents, types.FunctionType):
        return ["function", _fingerprint(contents, visiting)]
    if isinstance(contents, types.MethodType) and isinstance(contents.__func__, types.FunctionType):
        # a bound method of a plain object: `torch.no_grad()`'s decorator keeps
        # `ctx.clone` of the instance it was made from; its function and the object
        # (class and plain attributes) decide what it does
        return [
            "method",
            _fingerprint(contents.__func__, visiting),
            _identity_fingerprint(contents.__self__),
        ]
    return encode_value(contents)


def _identity_fingerprint(obj: Any) -> list:
    """What an object an ID_MATCH guard held must be for the object at the guard's source in
    a later process to stand for it: a code object, function, module namespace or enum
    member equal in everything that decides what it does."""
    global _fingerprinting
    _fingerprinting += 1
    try:
        return _identity_fingerprint_of(obj)
    finally:
        _fingerprinting -= 1


class _Plain:
    pass


_PLAIN_SIZE = _Plain.__basicsize__  # an instance of a class statement's class, no slots


def _identity_fingerprint_of(obj: Any) -> list:
    if isinstance(obj, types.CodeType):
        return ["code", code_digest(obj)]
    if isinstance(obj, types.FunctionType):
        return ["function", _fingerprint(obj)]
    if isinstance(obj, dict):
        return ["namespace", _namespace_name(obj)]
    if isinstance(obj, property):
        return ["property", [_accessor(f) for f in (obj.fget, obj.fset, obj.fdel)]]
    if isinstance(obj, staticmethod | classmethod):
        return [type(obj).__name__, _accessor(obj.__func__)]
    if isinstance(obj, types.MethodType):
        # NOTE: a bound method forwards `__dict__` to its function: without this branch
        # every method of a function with no attributes read as the same plain object
        return ["method", _accessor(obj.__func__), _identity_fingerprint_of(obj.__self__)]
    if type(obj).__basicsize__ > _PLAIN_SIZE:
        # a C class or a subclass of one (functools.partial, list, Exception) keeps
        # state outside `__dict__`, which alone would not tell two of them apart
        raise NotPortable(f"an id guard on a {type(obj).__name__}")
    state = getattr(obj, "__dict__", None)
    if type(state) is dict and not hasattr(type(obj), "__slots__"):
        # a plain object (a sentinel): its class and its attributes, plain values only
        return ["object", _named(type(obj)), encode_value(tuple(sorted(state.items())))]
    raise NotPortable(f"an id guard on a {type(obj).__name__}")


def _accessor(function: Any) -> Any:
    if function is None or not isinstance(function, types.FunctionType):
        return encode_value(function)
    return ["function", _fingerprint(function)]


def _named(obj: Any) -> list:
    """["named", module, qualified name, fingerprint] of an object found again by import
    (while a record is made: a reference to it in the record's table of names)."""
    tables = _tables
    if tables is None or _fingerprinting:
        return _named_entry(obj)
    index = tables.name_index.get(id(obj))
    if index is None:
        entry = _named_entry(obj)
        index = tables.name_index[id(obj)] = len(tables.names)
        tables.names.append(entry)
    return ["name", index]


def _named_entry(obj: Any) -> list:
    owner = getattr(obj, "__objclass__", None)
    modules = [getattr(obj, "__module__", None), getattr(owner, "__module__", None)]
    for name in (getattr(obj, "__qualname__", None), getattr(obj, "__name__", None)):
        if not isinstance(name, str) or "<" in name:
            continue
        for module in modules:
            if isinstance(module, str) and _resolve(module, name) is obj:
                return ["named", module, name, _fingerprint(obj)]
    if isinstance(obj, type) and obj.__module__ == "builtins":  # the interpreter's own types
        for name, value in vars(types).items():
            if value is obj:
                return ["named", "types", name, _fingerprint(obj)]
    raise NotPortable(f"{obj!r} has no module and name to find it by")


def _resolve(module: str, name: str) -> Any:
    found: Any = sys.modules.get(module)
    if found is None:
        try:
            found = importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a module that cannot be imported names nothing
            return None
    for part in name.split("."):
        found = getattr(found, part, None)
    return found


# ----------------------------------------------------------------- values

# Objects found by name while one record is installed (each is checked once a record).
_named_found: dict[tuple[str, str, str], Any] = {}


class _Tables:
    """Sources and named objects of one record, each written once and referred to by
    index (a guard set names the same module paths and classes hundreds of times)."""

    def __init__(
        self,
        sources: list | None = None,
        names: list | None = None,
        frame_code: types.CodeType | None = None,
    ) -> None:
        self.sources: list = [] if sources is None else sources
        self.names: list = [] if names is None else names
        # the frame's code: a code object among its constants is named by its place there
        self.frame_code = frame_code
        self.source_index: dict[Source, int] = {}
        self.name_index: dict[int, int] = {}
        self.decoded: dict[int, Source] = {}


_tables: _Tables | None = None  # while one record is made or installed
_fingerprinting = 0  # > 0 inside a fingerprint: names written whole, never as table indexes

_TORCH_ENUMS = (torch.layout, torch.memory_format, torch.qscheme)


def encode_value(value: Any, nodes: bool = False) -> Any:
    """`value` as JSON data (`nodes`: FX nodes as their names); NotPortable otherwise."""
    kind = type(value)
    if value is None:
        return ["none"]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        return ["int", str(value)]
    if kind is float:
        return ["float", repr(value)]
    if kind is str:
        return ["str", value]
    if kind is bytes:
        return ["bytes", value.hex()]
    if value is Ellipsis:
        return ["ellipsis"]
    if value is END or value is UNBOUND:  # the markers of split parts' results
        return ["marker", "end" if value is END else "unbound"]
    if kind is tuple:
        return ["tuple", [encode_value(v, nodes) for v in value]]
    if kind is list or (nodes and kind is immutable_list):  # FX keeps a node's lists so
        return ["list", [encode_value(v, nodes) for v in value]]
    if kind is slice:
        return ["slice", [encode_value(v, nodes) for v in (value.start, value.stop, value.step)]]
    if kind is torch.Size:
        return ["size", [int(v) for v in value]]
    if kind is torch.dtype:
        return ["dtype", str(value).removeprefix("torch.")]
    if kind is torch.device:
        return ["device", str(value)]
    if isinstance(value, _TORCH_ENUMS):
        return ["torch", str(value).removeprefix("torch.")]
    if nodes and isinstance(value, torch.fx.Node):
        return ["node", value.name]
    if isinstance(value, torch._ops.OpOverload):
        return ["op", value._schema.name, value._overloadname]
    if isinstance(value, torch._ops.OpOverloadPacket):
        return ["op_packet", value._qualified_op_name]
    if isinstance(value, enum.Enum):
        return ["enum", _named(kind), value.name, encode_value(value.value)]
    if kind is types.CodeType:  # a function's code made in the frame (its MAKE_FUNCTION)
        if _tables is None or _tables.frame_code is None:
            raise NotPortable(f"a code object outside a frame's record ({value.co_name})")
        return ["code", _code_path(_tables.frame_code, value)]
    if kind is dict and "__name__" in value:  # a module's globals (a made function's)
        return ["namespace", _namespace_name(value)]
    if value is os.environ:  # the process's environment (MappingItemGuard reads its items)
        return ["environ"]
    if isinstance(value, types.ModuleType):
        if sys.modules.get(value.__name__) is not value:
            raise NotPortable(f"module {value.__name__} is not the one imported under its name")
        return ["module", value.__name__]
    if isinstance(value, type | types.FunctionType | types.BuiltinFunctionType) or callable(value):
        return _named(value)
    raise NotPortable(f"a {kind.__name__} ({value!r:.60})")


def decode_value(data: Any, nodes: dict[str, torch.fx.Node] | None = None) -> Any:
    """The value `encode_value` gave `data` for; Stale when a named object changed."""
    tag = data[0]
    if tag == "none":
        return None
    if tag in ("bool", "str"):
        return data[1]
    if tag == "int":
        return int(data[1])
    if tag == "float":
        return float(data[1])
    if tag == "bytes":
        return bytes.fromhex(data[1])
    if tag == "ellipsis":
        return Ellipsis
    if tag == "marker":
        return {"end": END, "unbound": UNBOUND}[data[1]]
    if tag == "tuple":
        return tuple(decode_value(v, nodes) for v in data[1])
    if tag == "list":
        return [decode_value(v, nodes) for v in data[1]]
    if tag == "slice":
        return slice(*(decode_value(v, nodes) for v in data[1]))
    if tag == "size":
        return torch.Size(data[1])
    if tag in ("dtype", "torch"):
        found = getattr(torch, data[1])
        if not isinstance(found, (torch.dtype, *_TORCH_ENUMS)):
            raise ValueError(f"torch.{data[1]} is not a dtype, layout or memory format")
        return found
    if tag == "device":
        return torch.device(data[1])
    if tag == "node":
        if nodes is None:
            raise ValueError("a graph node outside a graph")
        return nodes[data[1]]
    if tag in ("op", "op_packet"):
        namespace, name = data[1].split("::")
        packet = getattr(getattr(torch.ops, namespace), name)
        return packet if tag == "op_packet" else getattr(packet, data[2] or "default")
    if tag == "enum":
        member = getattr(decode_value(data[1]), data[2], None)
        if not isinstance(member, enum.Enum) or encode_value(member.value) != data[3]:
            raise Stale(f"enum member {data[2]} changed")
        return member
    if tag == "module":
        return importlib.import_module(data[1])
    if tag == "environ":
        return os.environ
    if tag == "namespace":
        return _namespace_of(data[1])
    if tag == "code":
        if _tables is None or _tables.frame_code is None:
            raise ValueError("a code object outside a frame's record")
        return _code_at(_tables.frame_code, data[1])
    if tag == "name":
        if _tables is None:
            raise ValueError("a name reference outside a record")
        return decode_value(_tables.names[data[1]])
    if tag == "named":
        key = (data[1], data[2], data[3])
        if _tables is not None and key in _named_found:
            return _named_found[key]
        found = _resolve(data[1], data[2])
        if found is None:
            raise Stale(f"{data[1]}.{data[2]} is not there")
        try:
            fingerprint = _fingerprint(found)
        except NotPortable as error:
            raise Stale(str(error)) from error
        if fingerprint != data[3]:
            raise Stale(f"{data[1]}.{data[2]} changed")
        if _tables is not None:
            _named_found[key] = found
        return found
    raise ValueError(f"unknown value tag {tag!r}")


# ----------------------------------------------------------------- sources


def encode_source(source: Source) -> Any:
    """A source as data (while a record is made: a reference into its table of sources)."""
    tables = _tables
    if tables is None:
        return _source_entry(source)
    index = tables.source_index.get(source)
    if index is None:
        entry = _source_entry(source)
        index = tables.source_index[source] = len(tables.sources)
        tables.sources.append(entry)
    return ["ref", index]


def _source_entry(source: Source) -> Any:
    cls = type(source)
    if not cls.__module__.startswith(_SOURCE_MODULES) or isinstance(source, HeldObjectSource):
        raise NotPortable(f"a {cls.__name__} source")
    fields = {}
    for f in dataclasses.fields(source):
        if not f.init:
            continue
        value = getattr(source, f.name)
        fields[f.name] = (
            ["source", encode_source(value)] if isinstance(value, Source) else encode_value(value)
        )
    return [cls.__module__, cls.__qualname__, fields]


@functools.lru_cache(maxsize=256)
def _own_class(module: str, name: str, base: type) -> type:
    """A source or guard class of guards / dynamo_capture, by module and name."""
    cls = _resolve(module, name) if module.startswith(_SOURCE_MODULES) else None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{module}.{name} is not a {base.__name__} class")
    return cls


def decode_source(data: Any) -> Source:
    if data[0] == "ref":
        if _tables is None:
            raise ValueError("a source reference outside a record")
        index = data[1]
        found = _tables.decoded.get(index)
        if found is None:
            found = _tables.decoded[index] = decode_source(_tables.sources[index])
        return found
    module, name, fields = data
    cls = _own_class(module, name, Source)
    values = {
        key: decode_source(value[1]) if value[0] == "source" else decode_value(value)
        for key, value in fields.items()
    }
    return cls(**values)


def _encode_field(value: Any) -> Any:
    if isinstance(value, Source):
        return ["source", encode_source(value)]
    if isinstance(value, tuple) and value and all(isinstance(v, Source) for v in value):
        return ["sources", [encode_source(v) for v in value]]
    return encode_value(value)


def _decode_field(data: Any) -> Any:
    if data[0] == "source":
        return decode_source(data[1])
    if data[0] == "sources":
        return tuple(decode_source(v) for v in data[1])
    return decode_value(data)


# ----------------------------------------------------------------- guards

# Guards holding an object rather than reading it from the frame: their factory's arguments.
_HELD_FIELDS = {"source", "object_id", "owner", "expected", "code", "namespace", "mapping"}


def _namespace_name(namespace: dict) -> list:
    if namespace is __builtins__ or namespace is vars(__import__("builtins")):
        return ["builtins"]
    name = namespace.get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    if module is None or vars(module) is not namespace:
        raise NotPortable("a namespace that is not a module's globals")
    return ["module", name]


def _namespace_of(data: list) -> dict:
    if data[0] == "builtins":
        return vars(importlib.import_module("builtins"))
    return vars(importlib.import_module(data[1]))


def encode_guard(guard: Guard) -> Any:
    """One guard as data: its class and its fields (held objects named)."""
    cls = type(guard)
    if cls is AttributeIdGuard:
        try:
            expected = encode_value(guard.expected)
        except NotPortable:  # found again on its owner, as the guard reads it
            expected = ["by_owner", _identity_fingerprint(guard.expected)]
        fields = {
            "owner": encode_value(guard.owner),
            "attr": ["str", guard.attr],
            "expected": expected,
            "bound": ["bool", guard.bound],
        }
    elif cls is NameAbsentGuard:
        fields = {"namespace": _namespace_name(guard.namespace), "name": ["str", guard.name]}
    elif cls is MappingItemGuard:
        fields = {
            "mapping": encode_value(guard.mapping),
            "description": ["str", guard.source.description],
            "key": ["str", guard.key],
            "expected": encode_value(guard.expected),
            "presence_only": ["bool", guard.presence_only],
        }
    elif cls is NNModuleGuard:
        fields = {"source": _encode_field(guard.source), "training": ["bool", guard.training]}
    elif cls is ModuleStructureGuard:  # its module (for a module tree) read again at install
        fields = _plain_fields(guard, skip={"ref"})
    elif cls is IdGuard:
        value = guard.ref()
        if value is None and guard.type_name != "NoneType":
            raise NotPortable("an id guard whose object is gone")
        try:
            encoded = encode_value(value)
        except NotPortable:
            encoded = ["by_source", _identity_fingerprint(value)]
        fields = {"source": _encode_field(guard.source), "value": encoded}
    elif cls is ShapeGuard:
        fields = _shape_guard_fields(guard)
    elif cls is TensorMatchGuard:
        fields = _plain_fields(guard, skip={"example", "trust_requested"})
        fields["trust_requested"] = ["bool", guard.trust_requested]
    else:
        if isinstance(guard, _HELD_KINDS):  # a subclass of a kind holding an object
            raise NotPortable(f"a {cls.__name__}")
        if any(isinstance(getattr(guard, f.name), HeldObjectSource) for f in _init_fields(guard)):
            raise NotPortable(f"a {cls.__name__} holding an object")
        fields = _plain_fields(guard)
    return [cls.__module__, cls.__qualname__, fields]


def _shape_guard_fields(guard: ShapeGuard) -> dict[str, Any]:
    """The shape guard's sources, symbol bindings and checks (expressions as data)."""
    try:
        symbols = [[expr_data(symbol), index] for symbol, index in guard.symbols]
        checks = [[check.kind, check.index, expr_data(check.expr)] for check in guard.shape_checks]
    except ValueError as error:
        raise NotPortable(str(error)) from error
    return {
        "source": _encode_field(guard.source),
        "property_sources": _encode_field(guard.property_sources),
        "symbols": ["shape", symbols],
        "shape_checks": ["shape", checks],
    }


def _shape_guard_of(fields: dict[str, Any]) -> ShapeGuard:
    symbols = tuple((expr_of_data(symbol), int(index)) for symbol, index in fields["symbols"][1])
    checks = tuple(
        ShapeCheck(str(kind), None if index is None else int(index), expr_of_data(expr))
        for kind, index, expr in fields["shape_checks"][1]
    )
    sources = _decode_field(fields["property_sources"])
    return ShapeGuard(_decode_field(fields["source"]), sources, symbols, checks)


_HELD_KINDS = (AttributeIdGuard, NameAbsentGuard, MappingItemGuard, IdGuard, TensorMatchGuard)


def _init_fields(guard: Guard) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(guard) if f.init]


def _plain_fields(guard: Guard, skip: set[str] = frozenset()) -> dict[str, Any]:
    fields = {}
    for f in _init_fields(guard):
        if f.name in skip:
            continue
        value = getattr(guard, f.name)
        if callable(value) and not isinstance(value, type):
            raise NotPortable(f"a {type(guard).__name__} holding {f.name}")
        fields[f.name] = _encode_field(value)
    return fields


def decode_guard(data: Any, read: Any) -> Guard:
    """The guard `encode_guard` gave `data` for; `read(source)` reads a source of this call."""
    module, name, fields = data
    cls = _own_class(module, name, Guard)
    if cls is AttributeIdGuard:
        owner, attr, bound = decode_value(fields["owner"]), fields["attr"][1], fields["bound"][1]
        if fields["expected"][0] != "by_owner":
            expected = decode_value(fields["expected"])
        else:
            try:
                expected = getattr(owner, attr)
                expected = expected.__func__ if bound else expected
                fingerprint = _identity_fingerprint(expected)
            except (AttributeError, NotPortable) as error:
                raise Stale(f"{attr} of {owner!r}: {error}") from error
            if fingerprint != fields["expected"][1]:
                raise Stale(f"{attr} of {owner!r} is not what it was")
        return AttributeIdGuard.of(owner, attr, expected, bound=bound)
    if cls is NameAbsentGuard:
        return NameAbsentGuard.of(_namespace_of(fields["namespace"]), fields["name"][1])
    if cls is MappingItemGuard:
        guard = MappingItemGuard.of(
            decode_value(fields["mapping"]), fields["description"][1], fields["key"][1],
            presence_only=fields["presence_only"][1],
        )  # fmt: skip
        return dataclasses.replace(guard, expected=decode_value(fields["expected"]))
    if cls is NNModuleGuard:
        source = decode_source(fields["source"][1])
        module = read(source)
        if not isinstance(module, torch.nn.Module):
            raise Stale(f"{source.name} is not a module")
        return NNModuleGuard(source, id(module), fields["training"][1], weakref.ref(module))
    if cls is ModuleStructureGuard:
        guard = cls(**{key: _decode_field(value) for key, value in fields.items()})
        module = read(guard.source)
        if guard.failure(module) is not None:
            raise Stale(f"{guard.source.name} is not a {guard.expected_type.__name__}")
        return ModuleStructureGuard.of(guard.source, module)
    if cls is IdGuard:
        source = decode_source(fields["source"][1])
        if fields["value"][0] != "by_source":
            return IdGuard.of(source, decode_value(fields["value"]))
        value = read(source)
        try:
            fingerprint = _identity_fingerprint(value)
        except NotPortable as error:
            raise Stale(f"{source.name}: {error}") from error
        if fingerprint != fields["value"][1]:
            raise Stale(f"{source.name} is not what it was")
        return IdGuard.of(source, value)
    if cls is ShapeGuard:
        return _shape_guard_of(fields)
    values = {key: _decode_field(value) for key, value in fields.items()}
    if cls is TensorMatchGuard:
        guard = cls(**values)
        if guard.trust_identity:  # the identity check trusts the tensor seen at install
            tensor = read(guard.source)
            if isinstance(tensor, torch.Tensor) and guard.failure(tensor) is None:
                guard = dataclasses.replace(guard, example=held(tensor))
        return guard
    return cls(**values)


# ----------------------------------------------------------------- graphs


def _size_data(value: Any) -> Any:
    """A size, stride or offset: an int, or a SymInt's expression as data."""
    if isinstance(value, torch.SymInt):
        try:
            return ["expr", expr_data(value.node.expr)]
        except ValueError as error:
            raise NotPortable(str(error)) from error
    return ["int", str(int(value))]


def _size_of(data: Any, env: Any) -> Any:
    if data[0] == "int":
        return int(data[1])
    if env is None:
        raise ValueError("a symbolic size in a record without a ShapeEnv")
    expr = expr_of_data(data[1])
    return env.create_symint(expr, env.hint_of(expr))


def _fake_record(
    value: Any, storages: dict[int, int], sizes: list[Any], symbolic: bool = False
) -> Any:
    """A node's value as data. In a graph with symbolic sizes (`symbolic`) a fake is its
    sizes as expressions and the index of its storage: fakes sharing one are rebuilt as
    views of the first (`sizes` holds each storage's dtype)."""
    if isinstance(value, FakeTensor) and symbolic:
        meta = value.meta
        storage = meta.untyped_storage()
        index = storages.setdefault(storage._cdata, len(storages))
        if index == len(sizes):
            sizes.append(value.dtype)
        elif sizes[index] != value.dtype:
            raise NotPortable("a view of another dtype of a value with symbolic sizes")
        return [
            "symfake", str(value.dtype).removeprefix("torch."),
            [_size_data(d) for d in meta.shape], [_size_data(d) for d in meta.stride()],
            _size_data(meta.storage_offset()), str(value.device), value.requires_grad,
            value.is_parameter, index,
        ]  # fmt: skip
    if isinstance(value, torch.SymInt) and symbolic:
        return ["symint", _size_data(value)]
    if isinstance(value, FakeTensor) and _has_symbolic_size(value.meta):
        raise NotPortable("a symbolic size in a graph without a ShapeEnv")
    if isinstance(value, torch.SymInt):
        raise NotPortable("a symbolic size in a graph without a ShapeEnv")
    if isinstance(value, FakeTensor):
        meta = value.meta
        storage = meta.untyped_storage()
        index = storages.setdefault(storage._cdata, len(storages))
        if index == len(sizes):
            sizes.append(storage.nbytes())
        return [
            "fake", str(value.dtype).removeprefix("torch."), list(value.shape),
            list(value.stride()), value.storage_offset(), str(value.device),
            value.requires_grad, value.is_parameter, index,
        ]  # fmt: skip
    if is_traceable_subclass(value):
        raise NotPortable(f"a value of tensor subclass {type(value).__qualname__}")
    if isinstance(value, torch.Tensor):
        raise NotPortable("a node value that is a real tensor")
    if isinstance(value, torch.SymFloat | torch.SymBool):
        raise NotPortable("a symbolic float or condition")
    if isinstance(value, tuple | list):
        items = [_fake_record(v, storages, sizes, symbolic) for v in value]
        return [type(value).__name__, items]
    return ["value", encode_value(value)]


def _has_symbolic_size(meta: torch.Tensor) -> bool:
    values = (*meta.shape, *meta.stride(), meta.storage_offset())
    return any(isinstance(v, torch.SymInt) for v in values)


def _fake_of(
    data: Any, mode: FakeTensorMode, storages: list[torch.UntypedStorage], shared: dict
) -> Any:
    if data[0] == "symfake":
        _, dtype, shape, stride, offset, device, requires_grad, parameter, index = data
        env = mode.shape_env
        sizes = [_size_of(d, env) for d in shape]
        strides = [_size_of(d, env) for d in stride]
        start = _size_of(offset, env)
        base = shared.get(index)
        if base is None:  # the first value on this storage: a fresh one (symbolic_fakes)
            base = shared[index] = torch.empty_strided(
                sizes, strides, dtype=getattr(torch, dtype), device="meta"
            )
            meta = base
            if not (isinstance(start, int) and start == 0):
                meta = base.as_strided(sizes, strides, start)
        else:  # a view of an earlier value's memory, as in the capture
            meta = base.as_strided(sizes, strides, start)
        return FakeTensor(mode, meta, torch.device(device), requires_grad, parameter)
    if data[0] == "symint":
        return _size_of(data[1], mode.shape_env)
    if data[0] == "fake":
        _, dtype, shape, stride, offset, device, requires_grad, parameter, index = data
        meta = torch.empty(0, dtype=getattr(torch, dtype), device="meta")
        meta.set_(storages[index], offset, shape, stride)
        return FakeTensor(mode, meta, torch.device(device), requires_grad, parameter)
    if data[0] in ("tuple", "list"):
        items = [_fake_of(v, mode, storages, shared) for v in data[1]]
        return tuple(items) if data[0] == "tuple" else items
    return decode_value(data[1])


def graph_record(gm: torch.fx.GraphModule, symbolic: bool = False) -> dict[str, Any]:
    """The captured graph as data: nodes, their fake values and module calls."""
    if list(gm.named_parameters()) or list(gm.named_buffers()) or list(gm.named_children()):
        raise NotPortable("the graph holds tensors or submodules")
    storages: dict[int, int] = {}
    sizes: list[int] = []
    nodes = []
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module"):
            raise NotPortable(f"a {node.op} node")
        target = node.target if isinstance(node.target, str) else encode_value(node.target)
        extra = set(node.meta) - {
            "val", "example_value", MODULE_CALLS, "stack_trace", "source_fn_stack"
        }  # fmt: skip
        if "example_value" in node.meta and node.meta["example_value"] is not node.meta.get("val"):
            raise NotPortable("an example value other than the node's value")
        if extra:
            raise NotPortable(f"node metadata {sorted(extra)}")
        calls = [
            [call, where, encode_value(cls)] for call, where, cls in node.meta.get(MODULE_CALLS, ())
        ]
        value = None
        if "val" in node.meta:
            value = _fake_record(node.meta["val"], storages, sizes, symbolic)
        nodes.append(
            [
                node.name, node.op, target, encode_value(node.args, nodes=True),
                encode_value(dict_items(node.kwargs), nodes=True), value, calls,
                node.meta.get("stack_trace"),
            ]
        )  # fmt: skip
    storage_sizes = [] if symbolic else sizes  # symbolic: one dtype a storage, not kept
    return {
        "class": type(gm).__name__, "frame": gm.meta.get("frame"), "nodes": nodes,
        "storages": storage_sizes, "code": gm.code,
    }  # fmt: skip


def dict_items(mapping: dict) -> tuple:
    return tuple((key, value) for key, value in mapping.items())


def graph_of(
    record: dict[str, Any], shape_env: Any = None
) -> tuple[torch.fx.GraphModule, FakeTensorMode]:
    """The GraphModule `graph_record` described (its symbolic sizes over `shape_env`);
    ValueError when it comes out otherwise."""
    mode = FakeTensorMode(shape_env=shape_env)
    storages = [torch.UntypedStorage(size, device="meta") for size in record["storages"]]
    shared: dict[int, torch.Tensor] = {}
    graph = torch.fx.Graph()
    graph.set_codegen(TorchStyleCodeGen())  # printed as capture's graphs print
    nodes: dict[str, torch.fx.Node] = {}
    for name, op, target, args, kwargs, value, calls, trace in record["nodes"]:
        if not isinstance(target, str):
            target = decode_value(target)
        node = graph.create_node(
            op, target, decode_value(args, nodes), dict(decode_value(kwargs, nodes)), name=name
        )
        if node.name != name:
            raise ValueError(f"node {name} came out as {node.name}")
        if value is not None:
            node.meta["val"] = node.meta["example_value"] = _fake_of(value, mode, storages, shared)
        if calls:
            node.meta[MODULE_CALLS] = tuple(
                (int(call), where, decode_value(cls)) for call, where, cls in calls
            )
        if trace is not None:
            node.meta["stack_trace"] = trace
        nodes[name] = node
    gm = torch.fx.GraphModule(torch.nn.Module(), graph, class_name=record["class"])
    if record.get("frame") is not None:
        gm.meta["frame"] = record["frame"]
    if gm.code != record["code"]:
        raise ValueError("the rebuilt graph's code differs from the captured graph's")
    return gm, mode


# ----------------------------------------------------------------- symbolic sizes


def shape_env_record(env: Any) -> dict[str, Any]:
    """A capture's ShapeEnv as data (guards.shape_env.ShapeEnv.state): the symbols of a
    symbolic graph, their ranges and sources, and what capture found of them."""
    from guards.shape_env import ShapeEnvError

    try:
        state = env.state()
        return {
            "duck_shape": state.duck_shape,
            "specialize_zero_one": state.specialize_zero_one,
            "next_index": state.next_index,
            "symbols": [
                [
                    expr_data(symbol),
                    encode_value(lo),
                    encode_value(hi),
                    [encode_source(source) for source in sources],
                ]
                for symbol, lo, hi, sources in state.symbols
            ],  # fmt: skip
            "replacements": [[expr_data(a), expr_data(b)] for a, b in state.replacements],
            "exact_divisions": [[expr_data(a), expr_data(b)] for a, b in state.exact_divisions],
            "records": [[expr_data(c), str(where)] for c, where in state.records],
            "seen": sorted((expr_data(c) for c in state.seen), key=json.dumps),
            "source_exprs": [[encode_source(s), expr_data(e)] for s, e in state.source_exprs],
        }
    except (ShapeEnvError, ValueError) as error:
        raise NotPortable(str(error)) from error


def shape_env_of(data: dict[str, Any], read: Any) -> Any:
    """The ShapeEnv `shape_env_record` described, each symbol's hint read at its first
    source in this call (whose guards passed)."""
    from guards.shape_env import ShapeEnv, ShapeEnvState

    symbols = tuple(
        (expr_of_data(symbol), decode_value(lo), decode_value(hi),
         tuple(decode_source(s) for s in sources))
        for symbol, lo, hi, sources in data["symbols"]
    )  # fmt: skip
    hints = {symbol: int(read(sources[0])) for symbol, _, _, sources in symbols}
    pairs = [(expr_of_data(a), expr_of_data(b)) for a, b in data["replacements"]]
    divisions = [(expr_of_data(a), expr_of_data(b)) for a, b in data["exact_divisions"]]
    state = ShapeEnvState(
        duck_shape=bool(data["duck_shape"]),
        specialize_zero_one=bool(data["specialize_zero_one"]),
        next_index=int(data["next_index"]),
        symbols=symbols,
        replacements=tuple(pairs),
        exact_divisions=tuple(divisions),
        records=tuple((expr_of_data(c), str(where)) for c, where in data["records"]),
        seen=tuple(expr_of_data(c) for c in data["seen"]),
        source_exprs=tuple((decode_source(s), expr_of_data(e)) for s, e in data["source_exprs"]),
    )
    return ShapeEnv.restore(state, hints)


# ----------------------------------------------------------------- entries


def entry_record(
    guard_set: GuardSet,
    graph_module: torch.fx.GraphModule | None,
    input_sources: list[Source],
    output_exprs: str,
    replays: list[str],
    constants: list[Any],
    shape_env: Any = None,
    frame_code: types.CodeType | None = None,
) -> dict[str, Any]:
    """What `install_parts` needs to make the entry again; NotPortable when it cannot.
    `shape_env`: the ShapeEnv of a graph with symbolic sizes; `frame_code`: the frame's
    code (a code object among its constants is named by its place there)."""
    global _tables
    _tables = _Tables(frame_code=frame_code)
    try:
        symbolic = shape_env is not None and graph_module is not None
        record = _entry_record(
            guard_set, graph_module, input_sources, output_exprs, replays, constants, symbolic
        )
        if symbolic:
            record["shape_env"] = shape_env_record(shape_env)
        record["sources"] = _tables.sources
        record["names"] = _tables.names
        return record
    finally:
        _tables = None
        _class_fingerprints.clear()


def _entry_record(
    guard_set: GuardSet,
    graph_module: torch.fx.GraphModule | None,
    input_sources: list[Source],
    output_exprs: str,
    replays: list[str],
    constants: list[Any],
    symbolic: bool = False,
) -> dict[str, Any]:
    return {
        "schema": RECORD_SCHEMA,
        "guards": [encode_guard(g) for g in guard_set],
        "graph": None if graph_module is None else graph_record(graph_module, symbolic),
        "inputs": [encode_source(s) for s in input_sources],
        "output": output_exprs,
        "replays": list(replays),
        "constants": [encode_value(c) for c in constants],
    }


# ----------------------------------------------------------------- graph breaks

# What of a graph break (errors.Unsupported) decides the entry made of it: where capture
# stopped, the blocks open there, how the statement may be cut. The split plans and
# resume functions are made again from these and the frame's code (optimize._break_entry).
_BREAK_FIELDS = (
    "offset", "call_cut", "plain_args", "stack_nulls", "stop_iteration", "escapes",
    "in_unknown_with", "context_switch", "whole_frame", "outside_context", "rest_eager",
    "data_branch", "branch_jump", "branch_nulls", "checkpoints", "loop_not_resumed", "cannot_resume",
    "rest_from_checkpoint",
)  # fmt: skip


def _break_classes() -> dict[str, type]:
    from dynamo_capture.errors import ContextSwitchCall, NeedsEagerFrame, Unsupported

    return {cls.__name__: cls for cls in (Unsupported, NeedsEagerFrame, ContextSwitchCall)}


def break_record(error: Any, module_frame: bool, code: types.CodeType) -> dict[str, Any]:
    """A graph break as data. `module_frame`: the frame is a module's call, whose entry
    reads nothing of the inlined call the break happened in. `code`: the frame's code."""
    cls = type(error)
    if _break_classes().get(cls.__name__) is not cls:
        raise NotPortable(f"a graph break of kind {cls.__name__}")
    if getattr(error, "partial_methods", None):
        raise NotPortable("a graph break whose frame runs partialmethod functions compiled")
    contexts = [
        [encode_value(spec.factory), encode_value(spec.args), spec.kind] for spec in error.contexts
    ]
    callee = callee_code = None
    if not module_frame:
        callee = _callee_record(error.callee)
        if error.callee_code is not None:
            callee_code = _code_path(code, error.callee_code)
    return {
        "class": cls.__name__,
        "reason": error.reason,
        "where": [[loc.filename, loc.line, loc.function] for loc in error.where],
        "contexts": contexts,
        "fields": {name: encode_value(getattr(error, name)) for name in _BREAK_FIELDS},
        "callee": callee,
        "callee_code": callee_code,
    }


def _callee_record(callee: Any) -> dict[str, Any] | None:
    """The inlined call a break happened in (interpreter.Callee): its function by module
    and name (or where the frame's locals hold it) with its fingerprint, its receiver
    where the frame's locals hold it, with its class. The guards of the capture up to the
    break check what was read of both; the split made of the break shadows the call on
    exactly these objects, so a later process must find the same ones."""
    if callee is None:
        return None
    function = None
    if callee.function is not None:
        try:
            function = ["named", _named(callee.function)]
        except NotPortable:
            if callee.function_source is None:
                raise
            function = [
                "read",
                encode_source(callee.function_source),
                _fingerprint(callee.function),
            ]
    receiver = None
    if callee.receiver is not None:
        if callee.receiver_source is None:
            raise NotPortable("a graph break inside a call on an object capture made")
        receiver = [encode_source(callee.receiver_source), _named(type(callee.receiver))]
    return {"function": function, "receiver": receiver}


def _callee_of(data: dict[str, Any] | None, read: Any) -> Any:
    """The interpreter.Callee `_callee_record` described, found in this call's locals;
    Stale when what is there is not what the record names."""
    from dynamo_capture.interpreter import Callee

    if data is None:
        return None
    function = function_source = None
    if data["function"] is not None:
        how = data["function"]
        if how[0] == "named":
            function = decode_value(how[1])
        else:
            function_source = decode_source(how[1])
            function = read(function_source)
            if not isinstance(function, types.FunctionType) or _fingerprint(function) != how[2]:
                raise Stale(f"the function at {function_source.name} changed")
    receiver = receiver_source = None
    if data["receiver"] is not None:
        receiver_source = decode_source(data["receiver"][0])
        receiver = read(receiver_source)
        if type(receiver) is not decode_value(data["receiver"][1]):
            raise Stale(f"{receiver_source.name} is of another class")
    return Callee(function, receiver, function_source, receiver_source)


def _code_path(code: types.CodeType, target: types.CodeType) -> list[int]:
    """Indexes into nested `co_consts` leading from `code` to `target` (a function's code
    made in the frame); NotPortable where it is not a constant of the frame's code."""
    for index, constant in enumerate(code.co_consts):
        if constant is target:
            return [index]
        if isinstance(constant, types.CodeType):
            try:
                return [index, *_code_path(constant, target)]
            except NotPortable:
                continue
    raise NotPortable("a graph break inside a function whose code is not the frame's")


def _code_at(code: types.CodeType, path: list[int]) -> types.CodeType:
    for index in path:
        code = code.co_consts[int(index)]
        if not isinstance(code, types.CodeType):
            raise ValueError("the path to a function's code leads to another constant")
    return code


def decode_break(data: dict[str, Any], read: Any = None, code: Any = None) -> Any:
    """The graph break `break_record` described; `read` evaluates a source on the
    installing call's locals, `code` is the frame's code (for the inlined call's)."""
    from dynamo_capture.errors import UserLocation
    from dynamo_capture.resume import ContextSpec

    where = tuple(UserLocation(str(f), int(line), str(fn)) for f, line, fn in data["where"])
    error = _break_classes()[data["class"]](str(data["reason"]), where)
    error.contexts = tuple(
        ContextSpec(decode_value(factory), decode_value(args), str(kind))
        for factory, args, kind in data["contexts"]
    )
    for name in _BREAK_FIELDS:
        setattr(error, name, decode_value(data["fields"][name]))
    if data.get("callee") is not None:
        error.callee = _callee_of(data["callee"], read)
    if data.get("callee_code") is not None:
        error.callee_code = _code_at(code, data["callee_code"])
    return error


@dataclasses.dataclass
class InstalledParts:
    """A record made live for one call: its guards passed on that call's locals."""

    target: Any  # the FrameTarget
    guard_set: GuardSet
    guards: CompiledGuards
    graph_module: torch.fx.GraphModule | None
    example_inputs: list[Any]
    input_sources: list[Source]
    output_exprs: str
    replays: list[str]
    constants: list[Any]
    graph_break: Any = None  # the Unsupported error of a frame split at a graph break


def install_parts(
    record: dict[str, Any], target: Any, f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> InstalledParts | None:
    """The live parts of `record` when its guards hold for this call; None when not (or when
    something it names changed). A malformed record raises ValueError / KeyError / TypeError."""
    global _tables
    if record.get("schema") != RECORD_SCHEMA:
        raise ValueError("another record schema")
    if not (isinstance(record["sources"], list) and isinstance(record["names"], list)):
        raise ValueError("the record's tables are not lists")
    _tables = _Tables(record["sources"], record["names"], target.function.__code__)
    try:
        return _install_parts(record, target, f_locals, f_globals)
    finally:
        _tables = None
        _named_found.clear()
        _class_fingerprints.clear()


def _install_parts(
    record: dict[str, Any], target: Any, f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> InstalledParts | None:
    def read(source: Source) -> Any:
        try:
            return eval(source.expr, {}, {"L": f_locals, "G": f_globals})  # noqa: S307
        except Exception as error:  # noqa: BLE001 - a source not there in this call
            raise Stale(f"{source.name} cannot be read: {error}") from error

    try:
        guard_set = GuardSet(decode_guard(g, read) for g in record["guards"])
        constants = [decode_value(c) for c in record["constants"]]
    except Stale as error:
        _log.info("capture record of %s does not apply: %s", target.name, error)
        return None
    guards = guard_set.compile(name=target.name)
    if not guards.check(f_locals, f_globals):
        if artifact_enabled("cache"):
            _log.info(
                "capture record of %s does not apply: %s",
                target.name, guards.why_failed(f_locals, f_globals),
            )  # fmt: skip
        return None
    graph_break = None
    if record.get("break") is not None:
        try:  # after the guards: the inlined call's objects are read where they passed
            graph_break = decode_break(record["break"], read, target.function.__code__)
        except Stale as error:
            _log.info("capture record of %s does not apply: %s", target.name, error)
            return None
    sources = [decode_source(s) for s in record["inputs"]]
    graph_module = None
    if record["graph"] is not None:
        shape_env = None
        if record.get("shape_env") is not None:
            try:
                shape_env = shape_env_of(record["shape_env"], read)
                failure = _assumption_failure(shape_env, read)
            except Stale:
                return None
            if failure is not None:
                _log.info("capture record of %s does not apply: %s", target.name, failure)
                return None
        graph_module, _ = graph_of(record["graph"], shape_env)
    try:
        examples = [read(source) for source in sources]
    except Stale:
        return None
    return InstalledParts(
        target,
        guard_set,
        guards,
        graph_module,
        examples,
        sources,
        record["output"],
        record["replays"],
        constants,
        graph_break,
    )


def _assumption_failure(shape_env: Any, read: Any) -> str | None:
    """Why this call's sizes break what the kept ShapeEnv assumed, or None.

    A record is kept once the backend compiled its graph, and the backend's tracing
    narrows the ShapeEnv it shares with capture (`aot_autograd.symbolic`: a size proven
    equal to its example, `Eq(s0, 33)`, becomes a replacement the graph's sizes are then
    written with). The frame's guards, made before, do not check those assumptions (the
    compiling process checks them at every call of the compiled code), so the restored
    ShapeEnv's own guard is checked here: a call it rejects is captured again."""
    guard = ShapeGuard.of(shape_env)
    if guard is None:
        return None
    return guard.failure(*(read(source) for source in guard.property_sources))


def frame_fingerprint(target: Any) -> str:
    """What the frame itself is, beyond what its guards check: its function's module,
    qualified name, code (every nested code object), defaults and closure contents."""
    function = target.function
    cells = [_cell_fingerprint(cell, ()) for cell in function.__closure__ or ()]
    parts = [
        function.__globals__.get("__name__"),
        function.__qualname__,
        target.name,
        code_digest(function.__code__),
        encode_value(function.__defaults__),
        encode_value(tuple(sorted((function.__kwdefaults__ or {}).items()))),
        cells,
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


class CaptureCache:
    """The `capture_cache` of a CompiledCallable: capture records kept somewhere.

    A subclass says where (`records`, `keep`); this class makes the records of a
    compile and installs them. Only static graphs read by plain sources are kept.
    """

    def records(self, compiled: Any) -> list[dict[str, Any]]:
        """The records kept for `compiled`'s frame (newest first)."""
        raise NotImplementedError

    def keep(self, compiled: Any, record: dict[str, Any]) -> None:
        raise NotImplementedError

    def discard(self, compiled: Any, record: dict[str, Any], reason: str) -> None:
        """A record that could not be installed (malformed, or its graph came out otherwise)."""

    def not_portable(self, compiled: Any, reason: str) -> None:
        """The compile just made cannot be kept (logged by a subclass)."""

    def for_part(self) -> CaptureCache | None:
        """The capture cache of a compiled part of a split frame (None: keep none)."""
        return None

    def store_break(self, compiled: Any, contexts: list[Any], error: Any) -> None:
        """Keep the record of a frame whose capture stopped at `error`: the guards of that
        capture and the break, from which a later process makes the same entry (split
        parts, resume functions, or the frame run eagerly) without capturing."""
        from dynamo_capture.frame_target import _module_call

        global _tables
        _tables = _Tables(frame_code=compiled.frame.function.__code__)
        try:
            if not contexts:
                raise NotPortable("no capture before the break")
            ctx = contexts[0]
            if ctx.unguarded_constants:
                raise NotPortable(
                    f"the result of {ctx.unguarded_constants[0]} (assume_constant_result) "
                    "is a constant no guard checks"
                )
            record = _entry_record(ctx.guards.guard_set, None, [], "", [], [])
            function = compiled.frame.function
            record["break"] = break_record(error, function is _module_call, function.__code__)
            record["sources"] = _tables.sources
            record["names"] = _tables.names
            json.dumps(record)
        except NotPortable as reason:
            self.not_portable(compiled, f"graph break: {reason}")
            return
        finally:
            _tables = None
            _class_fingerprints.clear()
        self.keep(compiled, record)

    def store(self, compiled: Any, frame: Any) -> None:
        """Keep the record of `frame` (a CapturedFrame just compiled) when it is portable."""
        try:
            if frame.ctx.unguarded_constants:  # true in this process only, as documented
                raise NotPortable(
                    f"the result of {frame.ctx.unguarded_constants[0]} (assume_constant_result) "
                    "is a constant no guard checks"
                )
            for source in frame.input_sources:
                if type(source).__module__ == "dynamo_capture.sources":
                    raise NotPortable(f"an input read as {type(source).__name__}")
            record = entry_record(
                frame.ctx.guards.guard_set,
                frame.graph_module if _calls_graph(frame) else None,
                frame.input_sources,
                frame.output_exprs,
                frame.replays,
                frame.constants,
                frame.ctx.shape_env if frame.ctx.symbolic else None,
                compiled.frame.function.__code__,
            )
            text = json.dumps(record, sort_keys=True)
        except NotPortable as error:
            self.not_portable(compiled, str(error))
            return
        self.keep(compiled, record)
        kept = getattr(compiled, "kept_records", None)
        if kept is not None:
            kept.add(record_fingerprint(text))

    def install(
        self, compiled: Any, f_locals: dict[str, Any], f_globals: dict[str, Any], backend: Any
    ) -> Any:
        """A CompiledEntry from the first kept record whose guards pass on these locals."""
        from dynamo_capture.capture import _NO_GRAPH, _call_backend, make_entry
        from dynamo_capture.deferred_compile import DeferredCompile, DeferredParts
        from dynamo_capture.errors import BackendCompilerFailed

        kept = getattr(compiled, "kept_records", None)
        for record in self.records(compiled):
            if kept and record_fingerprint(json.dumps(record, sort_keys=True)) in kept:
                continue  # kept by this process: an entry with its guards missed already
            static = record.get("break") is None and record.get("shape_env") is None
            if compiled.dynamic is True and static and record.get("graph") is not None:
                continue  # a static graph where every size is to be symbolic
            try:
                parts = install_parts(record, compiled.frame, f_locals, f_globals)
            except Exception as error:  # noqa: BLE001 - a faulty record is captured again
                self.discard(compiled, record, f"{type(error).__name__}: {error}")
                continue
            if parts is None:
                continue
            if compiled.dynamic is None:
                observe_sizes(parts.guard_set, compiled._sizes, f_locals, f_globals)
            if parts.graph_break is not None:
                return compiled._break_entry(parts.graph_break, [], f_locals, parts.guards)
            if parts.graph_module is None:
                return make_entry(parts, parts.guards, _NO_GRAPH)
            if compiled.defer_recompiles and compiled.entries and static:
                # as the capture would have made it: compiled at its second call
                example_inputs = tuple(parts.example_inputs)
                deferred = DeferredParts(parts.target, parts.graph_module, example_inputs)
                return make_entry(parts, parts.guards, DeferredCompile(backend, deferred))
            try:
                result = _call_backend(backend, parts)
            except BackendCompilerFailed:
                return None  # capture and compile as usual, which reports it
            return make_entry(parts, parts.guards, result)
        return None


def record_fingerprint(text: str) -> str:
    """A capture record's identity: the digest of its JSON text with sorted keys (as a
    record store writes it, so equal after the round trip)."""
    return hashlib.sha256(text.encode()).hexdigest()


def observe_sizes(guards: GuardSet, history: Any, f_locals: dict, f_globals: dict) -> None:
    """Tell automatic dynamic's `history` the input sizes an installed record stands for,
    as capturing those inputs would have: a later capture at other sizes then makes the
    dims that changed symbolic, as after a capture of this call."""
    from dynamo_capture.output_graph import _is_argument_source
    from guards.guard_kinds import EqualsGuard
    from guards.sources import ParamBufferSource

    for guard in guards:
        source = guard.source
        if isinstance(guard, TensorMatchGuard):
            if guard.tensor_type is torch.nn.Parameter or isinstance(source, ParamBufferSource):
                continue
            tensor = eval(source.expr, {}, {"L": f_locals, "G": f_globals})  # noqa: S307
            history.observe(source, tensor)
        elif isinstance(guard, EqualsGuard) and _is_argument_source(source):
            value = guard.expected
            if type(value) in (int, float) or (
                type(value) is tuple and any(type(v) in (int, float) for v in value)
            ):
                history.observe_value(source, value)


def _calls_graph(frame: Any) -> bool:
    return frame.call_count > 0 or bool(frame.ctx.graph.find_nodes(op="output")[0].args[0])
