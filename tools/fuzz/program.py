"""A fuzzed program as data, and its rendering to a runnable Python file.

A `Program` is a list of statements over named inputs; `render` turns it into
source text that is at once the thing compiled and the saved reproducer:

    import torch
    import torch.nn.functional as F

    DIMS = [{"d0": 3, "d1": 4}, {"d0": 5, "d1": 4}]   # sizes of each call
    GRAD = False                                       # compare input grads too
    DYNAMIC = None                                     # ember.compile(dynamic=...)
    BACKEND = "inductor"

    def make_inputs(call):
        g = torch.Generator().manual_seed(7 + call)
        d0, d1 = DIMS[call]["d0"], DIMS[call]["d1"]
        x0 = _tensor((d1, d0), torch.float32, g, "randn").permute(1, 0)
        return [x0]

    def program(x0):
        v1 = x0.sin()
        v2 = v1.sum(0, keepdim=True)
        return (v2, v1)

Statements see the inputs only through their names; sizes come from the inputs
(`v.shape[0]`), so one program runs at every call's sizes. Shrinking edits the
`Program` (drops statements, makes dims smaller, ...) and renders it again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from user_code import render_definitions

# How an input tensor is laid out in memory: the expression turning a fresh
# tensor `t` of the listed allocation shape into the input.
LAYOUTS = ("contiguous", "permuted", "sliced", "expanded", "offset", "transposed", "padded")

HELPERS = '''
def _tensor(shape, dtype, g, values):
    """A deterministic tensor: "randn" normal values, "grid" small dyadic values (k/4),
    "special" grid values with NaN, inf and -inf mixed in; ints and bools small."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        return torch.randint(-4, 5, shape, generator=g).to(dtype)
    if values == "randn":
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    t = torch.randint(-8, 9, shape, generator=g) / 4
    if values == "special":
        pick = torch.randint(0, 8, shape, generator=g)
        specials = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=t.dtype)
        t = torch.where(pick < 3, specials[pick.clamp(max=2)], t)
    return t.to(dtype)
'''


@dataclass(frozen=True)
class InputSpec:
    """One input: its sizes (dim names or literal ints), dtype, layout and values."""

    name: str
    shape: tuple  # entries: "d0".."d3" (sized per call) or an int (fixed)
    dtype: str  # "float32", "int64", "bool", ...
    layout: str = "contiguous"
    values: str = "grid"  # "grid" | "randn" | "special"
    requires_grad: bool = False

    def replace(self, **changes) -> InputSpec:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Program:
    """A generated program: inputs, statements, outputs, per-call dim sizes."""

    seed: int
    inputs: tuple[InputSpec, ...]
    statements: tuple[str, ...]
    outputs: tuple[str, ...]
    dims: tuple[dict, ...]  # one {"d0": size, ...} per call
    grad: bool = False
    notes: tuple[str, ...] = field(default=())
    dynamic: bool | None = None  # ember.compile(dynamic=...): None specializes first
    # Module-level user code the statements use (user_code.DEFINITIONS: classes, helpers,
    # outside state); rendered above make_inputs.
    definitions: tuple[str, ...] = ()

    def replace(self, **changes) -> Program:
        return dataclasses.replace(self, **changes)


def _size_expr(entry) -> str:
    return str(entry)


def _allocation(spec: InputSpec) -> tuple[str, str]:
    """(allocation shape expression, layout suffix) realizing `spec.layout`."""
    sizes = [_size_expr(s) for s in spec.shape]
    rank = len(sizes)
    if spec.layout == "permuted" and rank >= 2:
        order = list(range(rank))[::-1]
        alloc = [sizes[i] for i in order]
        return ", ".join(alloc), f".permute({', '.join(map(str, order))})"
    if spec.layout == "sliced" and rank >= 1:
        alloc = sizes[:-1] + [f"2 * {sizes[-1]}"]
        return ", ".join(alloc), "[..., ::2]"
    if spec.layout == "expanded" and rank >= 1:
        alloc = ["1"] + sizes[1:]
        return ", ".join(alloc), f".expand({', '.join(sizes)})"
    if spec.layout == "transposed" and rank >= 2:  # the last two dims swapped
        alloc = sizes[:-2] + [sizes[-1], sizes[-2]]
        return ", ".join(alloc), ".transpose(-1, -2)"
    if spec.layout == "padded" and rank >= 1:  # rows padded: an odd row stride
        alloc = sizes[:-1] + [f"{sizes[-1]} + 3"]
        return ", ".join(alloc), f"[..., :{sizes[-1]}]"
    if spec.layout == "offset" and rank >= 1:
        alloc = [f"{sizes[0]} + 1"] + sizes[1:]
        return ", ".join(alloc), "[1:]"
    return ", ".join(sizes), ""


def render_input(spec: InputSpec) -> str:
    """The line of `make_inputs` that builds one input (a leaf when it needs grad)."""
    shape, suffix = _allocation(spec)
    shape = f"({shape},)" if shape else "()"
    expr = f'_tensor({shape}, torch.{spec.dtype}, g, "{spec.values}"){suffix}'
    if spec.requires_grad:
        # detach() keeps the layout and makes a leaf.
        expr = f"{expr}.detach().requires_grad_()"
    return f"    {spec.name} = {expr}"


def render(program: Program, backend: str = "inductor", header: str = "") -> str:
    """The program as a runnable Python file (see the module docstring)."""
    dim_names = sorted({d for spec in program.inputs for d in spec.shape if isinstance(d, str)})
    lines = ['"""' + (header or f"Fuzzed program, seed {program.seed}.") + '\n"""', ""]
    lines += [
        "import torch",
        "import torch.nn.functional as F",
        "",
        f"DIMS = {list(program.dims)!r}",
        f"GRAD = {program.grad}",
        f"DYNAMIC = {program.dynamic}",
    ]
    lines += [f'BACKEND = "{backend}"', HELPERS, ""]
    if program.definitions:
        lines += ["", render_definitions(program.definitions), ""]
    lines += [
        "def make_inputs(call):",
        f"    g = torch.Generator().manual_seed({program.seed} + call)",
    ]
    for name in dim_names:
        lines.append(f'    {name} = DIMS[call]["{name}"]')
    lines += [render_input(spec) for spec in program.inputs]
    lines.append(f"    return [{', '.join(spec.name for spec in program.inputs)}]")
    lines += ["", "", f"def program({', '.join(spec.name for spec in program.inputs)}):"]
    for statement in program.statements:  # a block's lines keep their own indentation
        lines += [f"    {line}" for line in statement.splitlines()]
    lines.append(f"    return ({''.join(name + ', ' for name in program.outputs)})")
    lines += ["", "", MAIN]
    return "\n".join(lines)


# The reproducer's entry point: the full oracle from the repository's tools/fuzz.
MAIN = """if __name__ == "__main__":
    import sys
    from pathlib import Path

    for folder in [Path.cwd(), *Path(__file__).resolve().parents]:
        if (folder / "tools" / "fuzz" / "oracle.py").exists():
            sys.path.insert(0, str(folder / "tools" / "fuzz"))
            break
    import oracle

    sys.exit(oracle.main_for_reproducer(globals(), BACKEND))
"""
