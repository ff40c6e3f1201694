"""What the run time needs of a traced program, as plain data, and a cache hook for it.

    record = program_record(program)         # None: an output it cannot describe
    program = program_from_record(record)    # graph_module is None: nothing to trace

`aot_graph(..., cache=cache)` asks `cache.lookup(variant)` before tracing a grad
mode's graphs; a hit (`CompiledParts`: the program and its compiled graphs) is
wrapped in the run time as a fresh compile would be, with no tracing, partitioning
or compiling. After a miss, `cache.store(variant, parts)` gets what was compiled. A cache
with `lookup_backward` / `store_backward` (`SpecializedBackwardCache`) also keeps the
backward graphs compiled later for calls that leave some tangents None.
`variant` names what the graphs were made for: grad mode, which inputs require
grad, the autocast state. The cache decides what it can keep (a compiled graph it
cannot serialize is simply not stored).

Symbolic sizes: the program's symbols are written by name with their sympy
assumptions, where each comes from (`SymbolSource`), and each symbolic size of an
output as its expression; `CompiledParts.assumptions` (what tracing and compiling
assumed of the sizes beyond the caller's guards, `ShapeAssumptions`) is written by
`assumptions_record` and checked again at every call of a loaded compile.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

import sympy
import torch
import torch.utils._pytree as pytree

from aot_autograd.program import OutputSpec, TracedProgram
from aot_autograd.symbolic import ShapeAssumptions, SymbolSource, expression_of, expression_text
from aot_autograd.value_assertions import ValueAssertion

__all__ = [
    "BACKWARD_STORED_APART",
    "CompiledGraphCache",
    "CompiledParts",
    "SpecializedBackwardCache",
    "assumptions_from_record",
    "assumptions_record",
    "program_from_record",
    "program_record",
]

_PLAIN = (bool, int, float, str, type(None))


# `CompiledParts.backward` of a training compile whose full backward is compiled at its
# first use (`runtime.DeferredBackward`) and so stored apart from the forward, as
# `store_backward(variant, frozenset(), compiled)`: a cache returning the parts from a
# serialized entry gives this instead; aot_graph then asks `lookup_backward` at the
# first full backward (tracing and compiling it again on a miss).
BACKWARD_STORED_APART = "backward stored apart"


@dataclass(frozen=True, slots=True)
class CompiledParts:
    """One grad mode's compiled graphs: `backward` and `dependencies` only when training;
    `assumptions` only with symbolic sizes."""

    program: TracedProgram
    forward: Any
    backward: Any = None
    dependencies: tuple[frozenset[int], ...] | None = None
    # Per saved value, the static strides the backward was compiled for (or None).
    saved_strides: tuple[tuple[int, ...] | None, ...] = ()
    assumptions: ShapeAssumptions | None = None


class CompiledGraphCache(Protocol):
    def lookup(self, variant: tuple) -> CompiledParts | None: ...

    def store(self, variant: tuple, parts: CompiledParts) -> None: ...


class SpecializedBackwardCache(Protocol):
    """Optional methods of a cache: the backward graphs compiled for calls that leave some
    tangents None (`absent`, their numbers), one per set. `lookup_backward` returns None
    for a miss, else a 1-tuple of the compiled graph (None: the full backward runs)."""

    def lookup_backward(self, variant: tuple, absent: frozenset[int]) -> tuple[Any] | None: ...

    def store_backward(self, variant: tuple, absent: frozenset[int], compiled: Any) -> None: ...


def _size(value: Any) -> int | list:
    """An int, or a symbolic size as ["expr", its expression's text]."""
    if type(value) is int:
        return value
    if isinstance(value, torch.SymInt):
        constant = value.node.maybe_as_int()
        return constant if constant is not None else ["expr", expression_text(value.node.expr)]
    raise TypeError(f"a size of type {type(value).__name__}")


def _size_of(value: Any) -> Any:
    if isinstance(value, list):
        if len(value) != 2 or value[0] != "expr":
            raise ValueError(f"{value!r} is not a size")
        return expression_of(value[1])
    return int(value)


def _geometry(geometry: tuple | None) -> list | None:
    if geometry is None:
        return None
    size, stride, offset, dtype = geometry
    sizes = [[_size(v) for v in size], [_size(v) for v in stride], _size(offset)]
    return [*sizes, str(dtype).removeprefix("torch.")]


def _source(source: SymbolSource) -> list:
    return [expression_text(source.symbol), source.index, source.kind, source.dim]


def _source_of(record: list) -> SymbolSource:
    text, index, kind, dim = record
    symbol = expression_of(text)
    if not isinstance(symbol, sympy.Symbol) or kind not in ("int", "item", "size", "stride"):
        raise ValueError(f"{record!r} is not a symbol source")
    return SymbolSource(symbol, int(index), kind, int(dim))


def _output(spec: OutputSpec) -> list:
    if spec.kind == "constant" and not isinstance(spec.value, _PLAIN):
        raise TypeError(f"constant output of type {type(spec.value).__name__}")
    flags = [bool(spec.requires_grad), bool(spec.conj), bool(spec.neg)]
    base_stride = None if spec.base_stride is None else [_size(v) for v in spec.base_stride]
    record = [spec.kind, spec.index, _geometry(spec.geometry), spec.value, *flags, base_stride]
    # (last, and only where set: a record written before the field reads as without it)
    return [*record, True] if spec.written_since_made else record


# Every field of the two records, as the record below writes them: a field added to
# either and not written here would be lost on a warm load (a silent difference), so a
# program or output with any other field is not stored at all.
_PROGRAM_FIELDS = frozenset(
    {
        "graph_module", "num_inputs", "outputs", "out_spec", "num_forward_outputs",
        "mutated_inputs", "num_value_checks", "differentiable", "grad_inputs", "joint",
        "symbol_sources", "missing_derivatives", "grad_free_inputs", "value_assertions",
        "metadata_mutations", "saved_input_readers", "inference_outputs",
        "backward_assertions",
    }
)  # fmt: skip
_OUTPUT_FIELDS = frozenset(
    {
        "kind", "index", "geometry", "value", "requires_grad", "conj", "neg", "base_stride",
        "written_since_made",
    }
)  # fmt: skip


def _fields_known() -> bool:
    return {f.name for f in dataclasses.fields(TracedProgram)} == _PROGRAM_FIELDS and {
        f.name for f in dataclasses.fields(OutputSpec)
    } == _OUTPUT_FIELDS


def program_record(program: TracedProgram) -> dict[str, Any] | None:
    """`program` less its graph, as JSON-able data; None when that cannot be done soundly."""
    if not _fields_known() or program.metadata_mutations:
        return None  # (an input restrided in place is not stored: compiled again)
    try:
        return {
            "num_inputs": program.num_inputs,
            "outputs": [_output(spec) for spec in program.outputs],
            "out_spec": pytree.treespec_dumps(program.out_spec),
            "num_forward_outputs": program.num_forward_outputs,
            "mutated_inputs": list(program.mutated_inputs),
            "num_value_checks": program.num_value_checks,
            "differentiable": list(program.differentiable),
            "grad_inputs": list(program.grad_inputs),
            "joint": program.joint,
            "missing_derivatives": [
                [int(i), str(m)] for i, m in program.missing_derivatives.items()
            ],
            "grad_free_inputs": list(program.grad_free_inputs),
            "value_assertions": [
                [int(k), a.error, a.message] for k, a in program.value_assertions.items()
            ],
            "symbol_sources": [_source(source) for source in program.symbol_sources],
            "saved_input_readers": [
                [int(i), sorted(int(j) for j in readers)]
                for i, readers in program.saved_input_readers
            ],
            "inference_outputs": list(program.inference_outputs),
            "backward_assertions": [[a.error, a.message] for a in program.backward_assertions],
        }
    except (TypeError, NotImplementedError, ValueError):
        return None


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{name!r} is not a dtype")
    return dtype


def program_from_record(record: dict[str, Any]) -> TracedProgram:
    """The TracedProgram (with `graph_module` None) `program_record` described."""
    outputs = []
    for entry in record["outputs"]:
        kind, index, geometry, value, requires_grad, conj, neg, base_stride, *rest = entry
        if geometry is not None:
            size, stride, offset, dtype = geometry
            size, stride = tuple(map(_size_of, size)), tuple(map(_size_of, stride))
            geometry = (size, stride, _size_of(offset), _dtype(dtype))
        flags = {"requires_grad": bool(requires_grad), "conj": bool(conj), "neg": bool(neg)}
        if base_stride is not None:
            flags["base_stride"] = tuple(map(_size_of, base_stride))
        if rest:
            flags["written_since_made"] = bool(rest[0])
        outputs.append(OutputSpec(kind, index, geometry, value, **flags))
    return TracedProgram(
        graph_module=None,  # type: ignore[arg-type]
        num_inputs=int(record["num_inputs"]),
        outputs=tuple(outputs),
        out_spec=pytree.treespec_loads(record["out_spec"]),
        num_forward_outputs=int(record["num_forward_outputs"]),
        mutated_inputs=tuple(record["mutated_inputs"]),
        num_value_checks=int(record["num_value_checks"]),
        differentiable=tuple(bool(d) for d in record["differentiable"]),
        grad_inputs=tuple(record["grad_inputs"]),
        joint=bool(record["joint"]),
        missing_derivatives={int(i): str(m) for i, m in record["missing_derivatives"]},
        grad_free_inputs=tuple(int(i) for i in record.get("grad_free_inputs", ())),
        value_assertions={
            int(k): ValueAssertion(str(error), str(message))
            for k, error, message in record["value_assertions"]
        },
        symbol_sources=tuple(_source_of(source) for source in record["symbol_sources"]),
        saved_input_readers=tuple(
            (int(i), frozenset(int(j) for j in readers))
            for i, readers in record.get("saved_input_readers", ())
        ),
        inference_outputs=tuple(int(i) for i in record.get("inference_outputs", ())),
        backward_assertions=tuple(
            ValueAssertion(str(error), str(message))
            for error, message in record.get("backward_assertions", ())
        ),
    )


def assumptions_record(assumptions: ShapeAssumptions | None) -> dict[str, Any] | None:
    """What tracing assumed of the symbolic sizes, as JSON-able data (None: static sizes)."""
    if assumptions is None:
        return None
    return {
        "sources": [_source(source) for source in assumptions.sources],
        "conditions": [expression_text(c) for c in assumptions.conditions],
    }


def assumptions_from_record(record: dict[str, Any] | None) -> ShapeAssumptions | None:
    """The ShapeAssumptions `assumptions_record` described."""
    if record is None:
        return None
    sources = tuple(_source_of(source) for source in record["sources"])
    conditions = tuple(expression_of(text) for text in record["conditions"])
    return ShapeAssumptions.of(sources, conditions)
