"""Generate ONE straight-line Python function that checks a list of guards.

    ___type_0 = torch.Tensor                      # constants: globals of the function
    def guard_check(L, G):
        try:
            x = L['x']
            if not (type(x) is ___type_0 and x.shape == (8, 16)):
                return False
            ...
            return True
        except Exception:
            return False

Every value is fetched once into a local, just before its first use, and
nested sources reuse their base's local (`L['self']._modules['fc']` is read once
for all its parameters). Constants live in the function's own globals (a
specialized global load; keyword defaults would cost a dict lookup each per
call). Checks are ordered by rank (cheap and likely-to-fail first); an
exception while fetching or checking means the guard failed. Guards implied by
others are left out (guard_pruning.py). An attribute of an object whose exact
type was checked earlier in the function, and whose class overrides
`__getattribute__` with a known forwarding override, is read with
`object.__getattribute__` when the override provably forwards
(attribute_access.py). Where dict version tags are available and some chains can be
read once and reused (stable_reads.py), two functions are generated: the full check
above as `guard_check_full`, which snapshots the values it pinned when it passes,
and `guard_check`, whose fast body binds those values from the snapshot, reads
again only the links that change without a dict write, and leaves out the guards
that cannot have changed; it runs while the snapshot stands, else the full check.
The source is registered with linecache, so tracebacks
and pdb show it; while the `guards` log is on it is also written to a private
file under the cache root, with guarded string and bytes values elided.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import keyword
import linecache
import re
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guards.attribute_access import (
    MODULE_ATTRIBUTE_DICTS,
    PlainReadPlan,
    is_plain_module_class,
    plain_read_plan,
)
from guards.cache_root import cache_folder, write_private
from guards.guard_kinds import Guard, IdGuard, NNModuleGuard, TypeGuard
from guards.logs import artifact_enabled
from guards.sources import (
    AttrSource,
    HasAttrSource,
    ModuleGlobalSource,
    NNModuleSource,
    Source,
)
from guards.stable_reads import (
    StablePlan,
    StableReads,
    plan_stable_reads,
    stable_reads_enabled,
)

__all__ = ["GeneratedGuardFunction", "generate_guard_function"]

FUNCTION_NAME = "guard_check"
FULL_NAME = "guard_check_full"


@dataclass(frozen=True, slots=True)
class GeneratedGuardFunction:
    """The generated check, its source text and the file it lives in."""

    check: Any
    source: str
    filename: str


class _Code:
    """Collects constants and source bindings while guards emit their checks."""

    def __init__(self) -> None:
        self.constants: dict[str, Any] = {}
        self._by_id: dict[tuple[int, str], str] = {}
        self.names: dict[Source, str] = {}
        self._used: set[str] = {"L", "G", *dir(builtins)}
        self._bound: set[str] = set()
        self._known_types: dict[str, type] = {}  # exact types checked so far
        self._expected_types: dict[str, type] = {}  # exact types some guard will check
        # The fast body's bindings of pinned sources (stable_reads.py): source -> its value
        # in the snapshot (an expression), and those read again and compared with it.
        self._pinned: dict[Source, str] = {}
        self._checked: set[Source] = set()

    def start_body(self, pinned: dict[Source, str], checked: set[Source]) -> None:
        """Forget what the previous body bound: the next one binds its own locals."""
        self._bound = set()
        self._known_types = {}
        self._pinned, self._checked = pinned, checked

    def const(self, value: Any, hint: str = "c") -> str:
        key = (id(value), hint)
        name = self._by_id.get(key)
        if name is None:
            name = f"___{hint}_{len(self.constants)}"
            self.constants[name] = value
            self._by_id[key] = name
        return name

    def name_of(self, source: Source) -> str:
        """The local that will hold `source`'s value (bases get theirs too)."""
        name = self.names.get(source)
        if name is None:
            if isinstance(source, NNModuleSource):
                name = self.name_of(source.source)
            else:
                if source.base is not None:
                    self.name_of(source.base)
                name = self._fresh(source)
            self.names[source] = name
        return name

    def bind(self, source: Source, lines: list[str]) -> str:
        """Emit the binding of `source`'s local (and its bases') unless already done."""
        name = self.name_of(source)
        if name in self._bound:
            return name
        base = source.base
        if isinstance(source, NNModuleSource):
            return self.bind(source.source, lines)
        snapshot = self._pinned.get(source)
        if snapshot is not None and source not in self._checked:
            lines.append(f"{name} = {snapshot}")
            self._bound.add(name)
            return name
        expr = self._module_global(source)
        if expr is None:
            base_name = self.bind(base, lines) if base is not None else ""
            expr = self._imports_bound(source.reconstruct(base_name))
            if isinstance(source, AttrSource):
                expr = self._plain_read(base_name, source.member, expr, lines)
            elif isinstance(source, HasAttrSource):
                expr = self._plain_has(base_name, source.member, expr, lines)
        lines.append(f"{name} = {expr}")
        if snapshot is not None:  # a checked read: another object than the snapshot's
            lines.append(f"if {name} is not {snapshot}:")
            lines.append(f"    return {FULL_NAME}(L, G)")
        self._bound.add(name)
        return name

    # ------------------------------------------------------------------ known types, plain reads

    def expect(self, guard: Guard) -> None:
        """Record the exact type `guard` pins its value to, checked or not (yet)."""
        obj = guard.ref() if isinstance(guard, IdGuard | NNModuleGuard) else None
        if obj is not None:
            self._expected_types.setdefault(self.name_of(guard.source), type(obj))

    def checked(self, guard: Guard) -> None:
        """Record what a guard whose check was just emitted says about its value's exact type."""
        known: type | None = None
        if isinstance(guard, TypeGuard):
            known = guard.expected_type
        elif isinstance(guard, IdGuard | NNModuleGuard):
            obj = guard.ref()
            known = None if obj is None else type(obj)
        if known is not None:
            self._known_types.setdefault(self.name_of(guard.source), known)

    def _plain_read(self, obj: str, member: str, slow: str, lines: list[str]) -> str:
        """`obj.member` through object.__getattribute__ where the class's override forwards."""
        cls = self._known_types.get(obj)
        plan = None if cls is None else plain_read_plan(cls)
        if plan is None:
            return slow
        plain = self._plain_object(obj, plan, lines)
        oga = self.const(object.__getattribute__, "object_getattribute")
        key = repr(member)
        if plan.key_map and member != plan.key_map:
            key = f"{plain}_map.get({member!r}, {member!r})"
        return f"{oga}({obj}, {key}) if {plain} else {slow}"

    def _plain_has(self, obj: str, member: str, slow: str, lines: list[str]) -> str:
        """`hasattr(obj, member)` as an instance-dict test where the override forwards.

        Exact: with no `__getattr__` anywhere and no class attribute of that name, a
        forwarded read finds the name only in the instance dict; a class that has it
        (now) takes the slow path.
        """
        module_cls = self._known_types.get(obj) or self._expected_types.get(obj)
        if module_cls is not None and is_plain_module_class(module_cls):
            return self._module_has(obj, module_cls, member, slow, lines)
        cls = self._known_types.get(obj)
        plan = None if cls is None else plain_read_plan(cls)
        if plan is None:
            return slow
        plain = self._plain_object(obj, plan, lines)
        key = repr(member)
        if plan.key_map and member != plan.key_map:
            key = f"{plain}_map.get({member!r}, {member!r})"
        in_class = f"hasattr({self.const(plan.cls, 'type')}, {key})"
        fast = f"({slow} if {in_class} else {key} in {obj}___dict)"
        return f"{fast} if {plain} else {slow}"

    def _module_has(self, obj: str, cls: type, member: str, slow: str, lines: list[str]) -> str:
        """`hasattr(module, member)` as dict tests, where nn.Module's own lookup applies."""
        klass = self.const(cls, "type")
        plain = f"{klass}___module"
        if plain not in self._bound:
            module_getattr = self.const(cls.__getattr__, "module_getattr")
            oga = self.const(object.__getattribute__, "object_getattribute")
            lines.append(
                f"{plain} = {klass}.__getattribute__ is {oga} "
                f"and {klass}.__getattr__ is {module_getattr}"
            )
            self._bound.add(plain)
        found = f"{member!r} in {obj}.__dict__"
        found += "".join(
            f" or {member!r} in {obj}.__dict__.get({table!r}, ())"
            for table in MODULE_ATTRIBUTE_DICTS
        )
        test = f"{plain} and not hasattr({klass}, {member!r})"
        if self._known_types.get(obj) is not cls:
            test = f"type({obj}) is {klass} and {test}"
        return f"({found}) if {test} else {slow}"

    def _plain_object(self, obj: str, plan: PlainReadPlan, lines: list[str]) -> str:
        """Bind (once) a local saying whether `obj`'s override forwards now; return its name."""
        plain = f"{obj}___plain"
        self._used.update((plain, f"{obj}___dict", f"{plain}_map"))
        if plain in self._bound:
            return plain
        oga = self.const(object.__getattribute__, "object_getattribute")
        test = [self._plain_class(plan, lines)]
        lines.append(f"{obj}___dict = {oga}({obj}, '__dict__')")
        test.append(f"type({obj}___dict) is {self.const(dict, 'type')}")
        test += [condition.format(dict=f"{obj}___dict") for condition in plan.conditions]
        lines.append(f"{plain} = {' and '.join(test)}")
        if plan.key_map:
            lines.append(f"{plain}_map = {oga}({obj}, {plan.key_map!r}) if {plain} else None")
            lines.append(f"{plain} = {plain} and type({plain}_map) is {self.const(dict, 'type')}")
        self._bound.add(plain)
        return plain

    def _plain_class(self, plan: PlainReadPlan, lines: list[str]) -> str:
        """Bind (once per class) a local: the class still resolves `__getattribute__` as planned."""
        cls = self.const(plan.cls, "type")
        ok = f"{cls}___plain"
        if ok in self._bound:
            return ok
        checks = [
            f"{cls}.__mro__ is {self.const(plan.classes, 'mro')}",
            f"not hasattr({cls}, '__getattr__')",
        ]
        for klass, function in zip(plan.classes, plan.resolved, strict=False):
            found = f"{self.const(klass, 'type')}.__dict__.get('__getattribute__')"
            expected = "None" if function is None else self.const(function, "getattribute")
            checks.append(f"{found} is {expected}")
        lines.append(f"{ok} = {' and '.join(checks)}")
        self._bound.add(ok)
        return ok

    def _module_global(self, source: Source) -> str | None:
        """`___module_globals_N['name']` for a global of an imported module, else None."""
        if not isinstance(source, ModuleGlobalSource):
            return None
        module = sys.modules.get(source.module_name)
        if module is None:
            return None
        return f"{self.const(vars(module), 'module_globals')}[{source.global_name!r}]"

    def _imports_bound(self, expr: str) -> str:
        """`expr` with its leading `__import__('m')` as a constant, where `m` is imported.

        # NOTE: a source's text starts with `__import__('m')` where it reads through a
        # module (`__import__('builtins').object.__getattribute__(x, 'a')`), so that it
        # runs in any namespace; the call costs about 0.7 us, more than the read it leads
        # to. As for module globals (`_module_global`), the module is bound at codegen.
        """
        match = _IMPORT_CALL.match(expr)
        module = None if match is None else sys.modules.get(match.group(1))
        if module is None:
            return expr
        return self.const(module, "module") + expr[match.end() :]

    def _fresh(self, source: Source) -> str:
        stem = re.sub(r"\W+", "_", source.name).strip("_") or "v"
        if stem[0].isdigit() or keyword.iskeyword(stem):
            stem = "v_" + stem  # `__class__` would give the keyword `class`
        stem = stem[:40]
        name, count = stem, 1
        while name in self._used:
            count += 1
            name = f"{stem}_{count}"
        self._used.add(name)
        return name


_IMPORT_CALL = re.compile(r"__import__\('([\w.]+)'\)")

# A string or bytes literal (with its prefix), in code or in a comment.
_LITERAL = re.compile(r"""(?<![\w'"])[rRbBuU]{0,2}(?:'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")""")


def _elide_literal(match: re.Match) -> str:
    """A guarded string/bytes value -> `'...'`; a subscript key (`L['x']`, a source) stays."""
    text, start, end = match.string, match.start(), match.end()
    before = text[max(start - 2, 0) : start]
    subscript = (
        len(before) == 2 and before[1] == "[" and (before[0].isalnum() or before[0] in "_])")
    )
    if subscript and text[end : end + 1] == "]":
        return match.group()
    if text[max(start - 8, 0) : start].endswith(("<class ", "<module ")):  # a type's repr
        return match.group()
    return "b'...'" if match.group()[:2].lower() in ("b'", 'b"') else "'...'"


def elide_values(source: str) -> str:
    """`source` with every guarded string or bytes value replaced by `'...'`, line for line."""
    return _LITERAL.sub(_elide_literal, source)


def _write(source: str) -> str:
    """Register the generated source with linecache under a content name; return that name.

    The source is written to a file (under the cache root, values that are
    strings or bytes elided: a guarded global may be a token) only while the
    `guards` log artifact is on; otherwise it lives in linecache alone, which
    is all tracebacks and pdb need.
    """
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    path = f"<ember guard_{digest}>"
    if artifact_enabled("guards"):
        try:
            folder = cache_folder("guards")
            path = str(folder / f"guard_{digest}.py")
            write_private(Path(path), elide_values(source).encode())
        except OSError:
            pass  # NOTE: the linecache entry below still serves tracebacks without the file.
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    return path


def _body(atoms: list[tuple[tuple[int, int], Guard, str]], code: _Code) -> list[str]:
    """The lines checking `atoms` in order (each binding its sources first), then `return True`."""
    body: list[str] = []
    previous: Guard | None = None
    for _, guard, expr in atoms:
        for source in guard.sources():
            code.bind(source, body)
        if guard is not previous:
            body.append(f"# {guard.describe()}")
        previous = guard
        body.append(f"if not ({expr}):")
        body.append("    return False")
        code.checked(guard)
    body.append("return True")
    return body


def _function(name: str, body: list[str], prologue: Sequence[str] = ()) -> list[str]:
    lines = [f"def {name}(L, G):", *(f"    {line}" for line in prologue), "    try:"]
    lines += [f"        {line}" for line in body]
    lines.append("    except Exception:")
    lines.append("        return False")
    return lines


def _stable_functions(
    atoms: list[tuple[tuple[int, int], Guard, str]],
    code: _Code,
    full_body: list[str],
    plan: StablePlan,
) -> list[str]:
    """The full check (snapshotting its pinned values when it passes) and the fast check
    reading the snapshot while it stands (stable_reads.py)."""
    state = code.const(StableReads(plan), "stable_reads")
    pinned = "".join(f"{code.names[source]}, " for source in plan.pinned)
    full_body = [*full_body[:-1], f"{state}.snapshot(({pinned}))", "return True"]
    full = _function(FULL_NAME, full_body, [f"{state}.begin()"])
    kept = []
    for place, guard, expr in atoms:
        if guard in plan.skipped:
            if not plan.skipped[guard]:
                continue
            # NOTE: a held function read stably is the same object, but its code may be
            # replaced in place (autoreload): that stays checked.
            seen = code.const(guard.expected, "seen")  # type: ignore[attr-defined]
            expr = f"{seen}.__code__ is {code.const(guard.code, 'code')}"  # type: ignore[attr-defined]
        kept.append((place, guard, expr))
    snapshot = {
        source: f"___v[{i}]()" if source in plan.weak else f"___v[{i}]"
        for i, source in enumerate(plan.pinned)
    }
    code.start_body(snapshot, plan.checked)
    # NOTE: every checked read first, whether a kept guard reads it or not: the values
    # pinned past it, and the guards left out on it, stand only while it is the same object.
    fast_body: list[str] = []
    for source in plan.pinned:
        if source in plan.checked:
            code.bind(source, fast_body)
    fast_body += _body(kept, code)
    fast = [
        f"def {FUNCTION_NAME}(L, G):",
        "    try:",
        f"        if {state}.unchanged():",
        f"            ___v = {state}.values",
        *(f"            {line}" for line in fast_body),
        "    except Exception:",
        "        pass",
        f"    return {FULL_NAME}(L, G)",
    ]
    return [*full, *fast]


def generate_guard_function(
    guards: list[Guard],
    header: str = "",
    implied: dict[Guard, Guard] | None = None,
    *,
    stable_reads: bool | None = None,
    pins: dict[Source, Any] | None = None,
) -> GeneratedGuardFunction:
    """Compile `guards` (already in check order) into one function `check(L, G) -> bool`.

    The guards in `implied` are left out; the first check of the guard implying
    one moves up to the implied guard's place (see guard_pruning.py). With
    `stable_reads` (default: `use_stable_reads`' setting) and dict version tags available,
    reads that cannot have changed since the last full check are reused and the guards
    on them left out (stable_reads.py).
    """
    implied = implied or {}
    places: dict[Guard, tuple[int, int]] = {}
    for order, guard in enumerate(guards):
        if guard in implied:
            implier = implied[guard]
            places[implier] = min(places.get(implier, (guard.rank, order)), (guard.rank, order))
    code = _Code()
    atoms: list[tuple[tuple[int, int], Guard, str]] = []
    for order, guard in enumerate(guards):
        if guard in implied:
            continue
        names = tuple(code.name_of(source) for source in guard.sources())
        code.expect(guard)
        for index, (rank, expr) in enumerate(guard.emit(names, code)):
            place = (rank, order)
            if index == 0 and guard in places:
                place = min(place, places[guard])
            atoms.append((place, guard, expr))
    atoms.sort(key=lambda atom: atom[0])
    body = _body(atoms, code)
    plan = None
    if stable_reads_enabled() if stable_reads is None else stable_reads:
        plan = plan_stable_reads(list(dict.fromkeys(guard for _, guard, _ in atoms)), pins)
    lines = [f"# {line}" for line in header.splitlines()]
    if plan is None:
        functions = _function(FUNCTION_NAME, body)
    else:
        functions = _stable_functions(atoms, code, body, plan)
    lines += [f"{name} = ...  # {_short_repr(value)}" for name, value in code.constants.items()]
    lines += functions
    source = "\n".join(lines) + "\n"
    filename = _write(source)
    namespace: dict[str, Any] = {"__builtins__": builtins}
    exec(_compiled(source, filename), namespace)
    namespace.update(code.constants)  # NOTE: after exec, which bound each name to `...`
    return GeneratedGuardFunction(namespace[FUNCTION_NAME], source, filename)


@functools.lru_cache(maxsize=32)
def _compiled(source: str, filename: str) -> types.CodeType:
    """The code object of a guard function's source, compiled once per source: the entries
    of one frame (a prefill, a decode step, the symbolic decode steps) often share a guard
    function whole (a model's module tree: thousands of lines, tens of ms to compile)."""
    return compile(source, filename, "exec")


def _short_repr(value: Any) -> str:
    with torch._C.DisableTorchFunctionSubclass():  # no tensor subclass's override runs
        text = repr(value).replace("\n", " ")
    return text if len(text) <= 100 else text[:97] + "..."
