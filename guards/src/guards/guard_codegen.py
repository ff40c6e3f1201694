"""Generate ONE straight-line Python function that checks a list of guards.

    def guard_check(L, G, *, ___type_0=torch.Tensor, ...):
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
for all its parameters). Constants are bound as keyword-only defaults, which
are plain local loads. Checks are ordered by rank (cheap and likely-to-fail
first); an exception while fetching or checking means the guard failed.
The source is written to a real file and registered with linecache, so
tracebacks and pdb show it.
"""

from __future__ import annotations

import builtins
import hashlib
import linecache
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from guards.guard_kinds import Guard
from guards.sources import ModuleGlobalSource, NNModuleSource, Source

__all__ = ["GeneratedGuardFunction", "generate_guard_function"]

FUNCTION_NAME = "guard_check"


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
        expr = self._module_global(source)
        if expr is None:
            expr = source.reconstruct(self.bind(base, lines) if base is not None else "")
        lines.append(f"{name} = {expr}")
        self._bound.add(name)
        return name

    def _module_global(self, source: Source) -> str | None:
        """`___module_globals_N['name']` for a global of an imported module, else None."""
        if not isinstance(source, ModuleGlobalSource):
            return None
        module = sys.modules.get(source.module_name)
        if module is None:
            return None
        return f"{self.const(vars(module), 'module_globals')}[{source.global_name!r}]"

    def _fresh(self, source: Source) -> str:
        stem = re.sub(r"\W+", "_", source.name).strip("_") or "v"
        if stem[0].isdigit():
            stem = "v_" + stem
        stem = stem[:40]
        name, count = stem, 1
        while name in self._used:
            count += 1
            name = f"{stem}_{count}"
        self._used.add(name)
        return name


def _write(source: str) -> str:
    """Write the generated source to a content-named file; return its path."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), "ember_guards")
    path = os.path.join(folder, f"guard_{digest}.py")
    try:
        if not os.path.exists(path):
            os.makedirs(folder, exist_ok=True)
            temporary = f"{path}.{os.getpid()}.tmp"
            with open(temporary, "w") as handle:
                handle.write(source)
            os.replace(temporary, path)
    except OSError:
        pass  # NOTE: the linecache entry below still serves tracebacks without the file.
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    return path


def generate_guard_function(guards: list[Guard], header: str = "") -> GeneratedGuardFunction:
    """Compile `guards` (already in check order) into one function `check(L, G) -> bool`."""
    code = _Code()
    atoms: list[tuple[int, int, Guard, str]] = []
    for order, guard in enumerate(guards):
        names = tuple(code.name_of(source) for source in guard.sources())
        for rank, expr in guard.emit(names, code):
            atoms.append((rank, order, guard, expr))
    atoms.sort(key=lambda atom: (atom[0], atom[1]))
    body: list[str] = []
    previous: Guard | None = None
    for _, _, guard, expr in atoms:
        for source in guard.sources():
            code.bind(source, body)
        if guard is not previous:
            body.append(f"# {guard.describe()}")
        previous = guard
        body.append(f"if not ({expr}):")
        body.append("    return False")
    body.append("return True")
    defaults = "".join(f", {name}={name}" for name in code.constants)
    star = ", *" if defaults else ""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"# {name} = {_short_repr(value)}" for name, value in code.constants.items()]
    lines.append(f"def {FUNCTION_NAME}(L, G{star}{defaults}):")
    lines.append("    try:")
    lines += [f"        {line}" for line in body]
    lines.append("    except Exception:")
    lines.append("        return False")
    source = "\n".join(lines) + "\n"
    filename = _write(source)
    namespace: dict[str, Any] = dict(code.constants)
    exec(compile(source, filename, "exec"), namespace)
    return GeneratedGuardFunction(namespace[FUNCTION_NAME], source, filename)


def _short_repr(value: Any) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 100 else text[:97] + "..."
