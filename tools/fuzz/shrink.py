"""Shrinking a mismatching program to a small reproducer (delta debugging).

`shrink(program, backend, target)` tries smaller variants of the program, one
reduction at a time, and keeps a variant whenever the same mismatch
(`Mismatch.signature()`: kind, check, backend and, for exceptions, the
start of the message) still reproduces, until a
whole round of reductions changes nothing or the budget is spent. Reductions,
in the order `REDUCTIONS` tries them:

    drop_outputs      return fewer values
    drop_statements   delete chunks of statements (halves, quarters, ... single ones)
    simplify          replace `v = expr` by `v = <a variable expr reads>`
    inline_aliases    drop `a = b`, reading `b` where `a` was read
    drop_regions      run a `with` block's statements outside the block
    drop_calls        keep only the first, or only the last, call
    drop_grad         compare values only
    drop_inputs       delete inputs no statement reads
    plain_inputs      contiguous layout, grid values, no requires_grad
    small_dims        each call's dim sizes made smaller (1, 2, n - 1)
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

from oracle import Mismatch, check_source, quiet
from program import Program, render

NAME = re.compile(r"\b([vx]\d+)\b")
ASSIGNED = re.compile(r"^\s*([vx]\d+) = ", re.MULTILINE)  # in blocks too (regions, branches)


def reproduces(program: Program, backend: str, target: Mismatch) -> bool:
    """Whether `program` still shows a mismatch of `target`'s signature."""
    try:
        with quiet():
            found = check_source(render(program, backend), backend)
    except Exception:  # a variant the oracle cannot even run is not a reproducer
        return False
    return any(m.signature() == target.signature() for m in found)


def drop_outputs(program: Program) -> Iterator[Program]:
    for i in range(len(program.outputs)):
        if len(program.outputs) > 1:
            yield program.replace(outputs=program.outputs[:i] + program.outputs[i + 1 :])


def drop_statements(program: Program) -> Iterator[Program]:
    statements = program.statements
    chunk = max(len(statements) // 2, 1)
    while chunk >= 1:
        for start in range(len(statements) - chunk, -1, -chunk):
            kept = statements[:start] + statements[start + chunk :]
            defined = {name for s in kept for name in ASSIGNED.findall(s)}
            defined |= {spec.name for spec in program.inputs}
            outputs = tuple(o for o in program.outputs if o in defined)
            if outputs:
                yield program.replace(statements=kept, outputs=outputs)
        chunk //= 2


def simplify(program: Program) -> Iterator[Program]:
    for i, statement in enumerate(program.statements):
        if " = " not in statement or "\n" in statement:
            continue
        target, expr = statement.split(" = ", 1)
        for name in dict.fromkeys(NAME.findall(expr)):
            if expr.strip() != name:
                simpler = f"{target} = {name}"
                yield program.replace(
                    statements=program.statements[:i] + (simpler,) + program.statements[i + 1 :]
                )


def inline_aliases(program: Program) -> Iterator[Program]:
    """Drop `a = b` and read `b` wherever `a` was read."""
    for i, statement in enumerate(program.statements):
        target, _, expr = statement.partition(" = ")
        if expr and NAME.fullmatch(expr.strip()):
            pattern, name = re.compile(rf"\b{target}\b"), expr.strip()
            rest = tuple(pattern.sub(name, s) for s in program.statements[i + 1 :])
            outputs = tuple(dict.fromkeys(pattern.sub(name, o) for o in program.outputs))
            yield program.replace(statements=program.statements[:i] + rest, outputs=outputs)


def drop_regions(program: Program) -> Iterator[Program]:
    """Run a `with` block's statements outside it (its region headers dropped)."""
    for i, statement in enumerate(program.statements):
        if statement.startswith("with "):
            body = tuple(
                line.strip()
                for line in statement.splitlines()
                if not line.lstrip().startswith("with ")
            )
            yield program.replace(
                statements=program.statements[:i] + body + program.statements[i + 1 :]
            )


def drop_calls(program: Program) -> Iterator[Program]:
    if len(program.dims) > 1:
        yield program.replace(dims=program.dims[:1])
        yield program.replace(dims=program.dims[-1:])


def drop_grad(program: Program) -> Iterator[Program]:
    if program.grad:
        plain = tuple(spec.replace(requires_grad=False) for spec in program.inputs)
        yield program.replace(grad=False, inputs=plain)


def drop_inputs(program: Program) -> Iterator[Program]:
    text = " ".join(program.statements + program.outputs)
    for i, spec in enumerate(program.inputs):
        if len(program.inputs) > 1 and not re.search(rf"\b{spec.name}\b", text):
            yield program.replace(inputs=program.inputs[:i] + program.inputs[i + 1 :])


def plain_inputs(program: Program) -> Iterator[Program]:
    for i, spec in enumerate(program.inputs):
        for change in ({"layout": "contiguous"}, {"values": "grid"}, {"requires_grad": False}):
            simpler = spec.replace(**change)
            if simpler != spec:
                inputs = program.inputs[:i] + (simpler,) + program.inputs[i + 1 :]
                yield program.replace(inputs=inputs)


def small_dims(program: Program) -> Iterator[Program]:
    for call, sizes in enumerate(program.dims):
        for name, size in sorted(sizes.items()):
            for smaller in sorted({1, 2, size - 1}):
                if 0 < smaller < size:
                    dims = list(program.dims)
                    dims[call] = {**sizes, name: smaller}
                    yield program.replace(dims=tuple(dims))


REDUCTIONS: dict[str, Callable[[Program], Iterator[Program]]] = {
    "drop_outputs": drop_outputs,
    "drop_statements": drop_statements,
    "simplify": simplify,
    "inline_aliases": inline_aliases,
    "drop_regions": drop_regions,
    "drop_calls": drop_calls,
    "drop_grad": drop_grad,
    "drop_inputs": drop_inputs,
    "plain_inputs": plain_inputs,
    "small_dims": small_dims,
}


def shrink(
    program: Program, backend: str, target: Mismatch, budget_s: float = 120.0
) -> tuple[Program, int]:
    """The smallest variant found that reproduces `target`, and how many variants were tried."""
    deadline = time.monotonic() + budget_s
    tries = 0
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for reduction in REDUCTIONS.values():
            for candidate in reduction(program):
                if time.monotonic() >= deadline:
                    return program, tries
                tries += 1
                if reproduces(candidate, backend, target):
                    program, changed = candidate, True
                    break  # regenerate this reduction's candidates from the smaller program
    return program, tries
