"""Shrinking a mismatching program to a small reproducer (delta debugging).

`shrink(program, backend, target)` tries smaller variants of the program, one
reduction at a time, and keeps a variant whenever the same mismatch
(`Mismatch.signature()`: kind, check, backend and, for exceptions, the
start of the message) still reproduces, until a
whole round of reductions changes nothing or the budget is spent. Reductions,
in the order `REDUCTIONS` tries them:

    split_statements  make each top-level statement of a block of several its own
    drop_outputs      return fewer values
    drop_statements   delete chunks of statements (halves, quarters, ... single ones)
    simplify          replace `v = expr` by `v = <a variable expr reads>`
    inline_aliases    drop `a = b`, reading `b` where `a` was read
    drop_regions      run a `with` block's statements outside the block
    unwrap_blocks     replace a try statement or an if by one of its bodies
    drop_lines        delete one line (with the lines it holds) of a compound statement
    drop_definitions  delete module-level user code (user_code.py) no statement names
    drop_calls        keep only the first, or only the last, call
    drop_grad         compare values only
    drop_inputs       delete inputs no statement reads
    plain_inputs      contiguous layout, grid values, no requires_grad
    small_dims        each call's dim sizes made smaller (1, 2, n - 1)
"""

from __future__ import annotations

import ast
import re
import textwrap
import time
from collections.abc import Callable, Iterator

import guard_programs
from oracle import Mismatch, check_source, quiet
from program import Program, render
from user_code import DEFINITIONS

# Variables: inputs (x0), tensors (v1) and Python values a program returns (n2).
NAME = re.compile(r"\b([vxn]\d+)\b")


def assigned(statement: str) -> set[str]:
    """The variables a statement binds, in blocks too (regions, branches, loops, unpacking)."""
    try:
        tree = ast.parse(statement)
    except SyntaxError:
        return set()
    return {
        n.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and NAME.fullmatch(n.id)
    }


def reproduces(program: Program, backend: str, target: Mismatch) -> bool:
    """Whether `program` still shows a mismatch of `target`'s signature."""
    try:
        with quiet():
            found = check_source(render_any(program, backend), backend)
    except Exception:  # a variant the oracle cannot even run is not a reproducer
        return False
    return any(m.signature() == target.signature() for m in found)


def render_any(program, backend: str, header: str = "") -> str:
    """A `Program` or a `guard_programs.GuardProgram` as its runnable source."""
    if isinstance(program, guard_programs.GuardProgram):
        return guard_programs.render(program, backend, header)
    return render(program, backend, header)


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
            defined = {name for s in kept for name in assigned(s)}
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


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def _top_level(statement: str) -> list[str]:
    """The top-level statements of a statement's text, each as written."""
    try:
        tree = ast.parse(statement)
    except SyntaxError:
        return [statement]
    lines = statement.splitlines()
    return ["\n".join(lines[n.lineno - 1 : n.end_lineno]) for n in tree.body]


def _with_statement(program: Program, i: int, replacement: tuple[str, ...]) -> Program:
    return program.replace(
        statements=program.statements[:i] + replacement + program.statements[i + 1 :]
    )


def split_statements(program: Program) -> Iterator[Program]:
    """A block of several top-level statements (a construct's lines) made one statement
    each, so that the other reductions see them one by one."""
    for i, statement in enumerate(program.statements):
        parts = _top_level(statement)
        if len(parts) > 1:
            yield _with_statement(program, i, tuple(parts))


def unwrap_blocks(program: Program) -> Iterator[Program]:
    """A try statement replaced by its body (then by its handler's, its finally's), an if
    by either branch."""
    for i, statement in enumerate(program.statements):
        try:
            node = ast.parse(statement).body
        except SyntaxError:
            continue
        if len(node) != 1 or not isinstance(node[0], (ast.Try, ast.If)):
            continue
        node = node[0]
        if isinstance(node, ast.Try):
            bodies = [node.body + node.orelse, *(h.body for h in node.handlers), node.finalbody]
        else:
            bodies = [node.body, node.orelse]
        for body in bodies:
            if body:
                yield _with_statement(program, i, tuple(ast.unparse(s) for s in body))


def drop_lines(program: Program) -> Iterator[Program]:
    """One line of a compound statement deleted, with the lines it holds (those indented
    deeper below it), where the rest still parses."""
    for i, statement in enumerate(program.statements):
        lines = statement.splitlines()
        for j in range(len(lines) - 1, 0, -1):
            depth = len(lines[j]) - len(lines[j].lstrip())
            end = j + 1
            while end < len(lines) and len(lines[end]) - len(lines[end].lstrip()) > depth:
                end += 1
            kept = "\n".join(lines[:j] + lines[end:])
            if _parses(textwrap.dedent(kept)):
                yield _with_statement(program, i, (kept,))


def drop_definitions(program: Program) -> Iterator[Program]:
    """Module-level user code no statement names (what it needs stays: user_code.closure)."""
    text = "\n".join(program.statements)
    for name in program.definitions:
        if not re.search(rf"\b{name}\b", text) and not DEFINITIONS[name].shown:
            yield program.replace(definitions=tuple(d for d in program.definitions if d != name))
    state = [d for d in program.definitions if DEFINITIONS[d].shown]
    for name in state:  # outside state no statement writes is still compared: try without
        if not re.search(rf"\b{name}\b", text):
            yield program.replace(definitions=tuple(d for d in program.definitions if d != name))


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
    "split_statements": split_statements,
    "drop_outputs": drop_outputs,
    "drop_statements": drop_statements,
    "simplify": simplify,
    "inline_aliases": inline_aliases,
    "drop_regions": drop_regions,
    "unwrap_blocks": unwrap_blocks,
    "drop_lines": drop_lines,
    "drop_definitions": drop_definitions,
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
    reductions = REDUCTIONS
    if isinstance(program, guard_programs.GuardProgram):  # the guards profile's own
        reductions = guard_programs.REDUCTIONS
    while changed and time.monotonic() < deadline:
        changed = False
        for reduction in reductions.values():
            for candidate in reduction(program):
                if time.monotonic() >= deadline:
                    return program, tries
                tries += 1
                if reproduces(candidate, backend, target):
                    program, changed = candidate, True
                    break  # regenerate this reduction's candidates from the smaller program
    return program, tries
