"""An import-linter contract that forbids submodules of an external package.

import-linter treats an external package (torch) as one squashed node, so its
built-in `forbidden` contract can forbid `torch` but not `torch._dynamo`. This
contract reads each import of the external package from the source itself:
`import torch._dynamo`, `from torch import _dynamo`, `from torch._inductor.x import y`,
`importlib.import_module("torch._refs")`, and attribute chains such as
`torch.compile(...)` or `torch._prims.foo` reached through a plain `import torch`.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from importlinter import Contract, ContractCheck, fields, output


def _module_file(name: str) -> Path | None:
    """The source file of a first-party module, found on sys.path without importing it."""
    relative = Path(*name.split("."))
    for entry in sys.path:
        base = Path(entry or ".") / relative
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _dotted(node: ast.AST) -> str | None:
    """`torch._dynamo.config` for an Attribute chain rooted at a Name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _names_used(tree: ast.AST) -> list[tuple[int, str]]:
    """Every (line, dotted module path) the code imports or reaches by attribute."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted:
                found.append((node.lineno, dotted))
        elif isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            callee = _dotted(node.func) or ""
            if callee.endswith("import_module") and isinstance(first, ast.Constant):
                if isinstance(first.value, str):
                    found.append((node.lineno, first.value))
    return found


def _is_within(name: str, forbidden: str) -> bool:
    return name == forbidden or name.startswith(forbidden + ".")


class ForbiddenSubmodulesContract(Contract):
    """Source packages must not use the listed submodules of external packages.

    Configuration:
        - source_modules: first-party packages to check.
        - forbidden_modules: dotted names, e.g. `torch._dynamo`, `torch.compile`.
    """

    type_name = "forbidden_submodules"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    forbidden_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:
        forbidden = [str(name) for name in self.forbidden_modules]  # type: ignore[attr-defined]
        violations = []
        for source in self.source_modules:  # type: ignore[attr-defined]
            modules = {source.name} | set(graph.find_descendants(source.name))
            for module in sorted(modules):
                path = _module_file(module)
                if path is None:
                    continue
                tree = ast.parse(path.read_text(), filename=str(path))
                for line, name in _names_used(tree):
                    hit = next((f for f in forbidden if _is_within(name, f)), None)
                    if hit:
                        violations.append(
                            {"module": module, "line": line, "name": name, "forbidden": hit}
                        )
        unique = {(v["module"], v["line"], v["forbidden"]): v for v in violations}
        return ContractCheck(kept=not unique, metadata={"violations": list(unique.values())})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for violation in check.metadata["violations"]:
            output.print_error(
                f"{violation['module']}:{violation['line']} uses {violation['name']} "
                f"(forbidden: {violation['forbidden']}; see docs/ARCHITECTURE.md, 'Layers')"
            )
