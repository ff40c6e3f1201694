"""The `guards` profile: programs compiled once and called 4-8 times, one thing they read
changed between calls.

A guard is sound when a compiled entry runs only on calls where everything capture
read is as it was. Here a program reads a handful of things (`Read`s) the way real code
does: it branches on them, uses them as scalars, sizes and indices, iterates them, calls
them. Each is drawn from `MUTATORS`, a table keyed by what changes: an input's dtype,
requires_grad, layout or storage offset, two inputs aliasing, a scalar or container
argument, None against a tensor, a module-level global, a module's training flag, a
submodule or parameter, a closure cell, an object's attribute, the grad mode, autocast,
default dtype or deterministic flag around the call, the random seed, an optimizer-like
object's hyperparameter. Call 0 sets every read's first value; before each later call
the harness changes one read, chosen at random, to another of its values. The oracle
(oracle.py `run_call`) runs `set_state(call)` and `call_context(call)` of the rendered
program around each call, eager and compiled alike, and compares outputs, inputs after
the call, grads and `outside_state()` (the objects the program reads and writes).

    program = generate(seed=3)          # a GuardProgram
    source = render(program, "inductor")

A rendered program (shortened):

    CALLS = [{"x0.dtype": torch.float32, ..., "i1": 2, "G2": Fn("sin")},
             {"x0.dtype": torch.float32, ..., "i1": 5, "G2": Fn("sin")}, ...]

    def program(x0, i1):
        v = x0 * 1.5
        v = v.roll(i1, -1)
        v = G2(v)
        return (v,)

`set_state` applies only what changed since the call before (a module stays the same
object while its training flag flips), except the random seed, set before each call.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from program import HELPERS, MAIN

CALLS_RANGE = (4, 8)  # calls per program
READS_RANGE = (2, 5)  # reads per program
STEADY_RATE = 0.3  # a later call that changes nothing


@dataclass(frozen=True)
class Read:
    """One thing the program reads: its key in CALLS, the values it takes, how it is
    set between calls, the arguments it adds and the statement reading it."""

    mutator: str  # key of MUTATORS
    key: str  # its entry in each call's state ("x0.dtype", "i1", "G2", "MOD3.training")
    choices: tuple  # values it may take (rendered with repr)
    use: str  # program statement(s) reading it (`v` in, `v` out; extra results `r<k>`)
    outputs: tuple[str, ...] = ()  # extra names returned
    parameters: tuple[tuple[str, str], ...] = ()  # (parameter, make_inputs expression)
    definitions: tuple[str, ...] = ()  # module-level code
    setter: str = ""  # expression of a function applying a new value ("" for x0 and ctx)
    state: tuple[tuple[str, str], ...] = ()  # (name, expression) shown by outside_state()
    cell: str = ""  # a closure cell of the program, set by its own setter


@dataclass(frozen=True)
class GuardProgram:
    """A `guards` program: its reads and each call's values of them."""

    seed: int
    shape: tuple[int, ...]  # x0's shape (fixed across calls)
    reads: tuple[Read, ...]
    calls: tuple[dict, ...]  # one {key: value} per call
    grad: bool = True
    dynamic: bool | None = None

    def replace(self, **changes) -> GuardProgram:
        return dataclasses.replace(self, **changes)


# ---------------------------------------------------------------- helpers in the program

PRELUDE = r'''
import contextlib
import types
from typing import NamedTuple


class T(NamedTuple):
    """A tensor the harness builds: shape, dtype and the seed of its grid values."""

    shape: tuple
    dtype: torch.dtype
    seed: int


ABSENT = "<absent>"  # an attribute deleted


class Fn(NamedTuple):
    """A function of FUNCTIONS, by name."""

    name: str


def _double(x):
    return x * 2


def _scaler(factor):
    """Functions of one code object, told apart by their closure cell."""
    return lambda x: x * factor


FUNCTIONS = {
    "sin": torch.sin, "tanh": torch.tanh, "relu": F.relu, "double": _double,
    "shifted": lambda x: x + 0.75, "abs": torch.abs, "times3": _scaler(3), "times5": _scaler(5),
}
SUBMODULES = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "identity": torch.nn.Identity}


def _build(value):
    """A value of CALLS as the program sees it: tensors built, functions looked up."""
    if isinstance(value, T):
        g = torch.Generator().manual_seed(value.seed)
        return _tensor(value.shape, value.dtype, g, "grid")
    if isinstance(value, Fn):
        return FUNCTIONS[value.name]
    if isinstance(value, list):
        return [_build(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_build(item) for item in value)
    if isinstance(value, dict):
        return {key: _build(item) for key, item in value.items()}
    return value


def _input(shape, s, g):
    """x0 of one call: its dtype, layout, storage offset and requires_grad from `s`."""
    dtype, layout, offset = s["x0.dtype"], s["x0.layout"], s["x0.offset"]
    alloc = [s.get("x0.size", shape[0]), *shape[1:]]
    if layout == "transposed":
        alloc[-2], alloc[-1] = alloc[-1], alloc[-2]
    elif layout == "sliced":
        alloc[-1] = 2 * alloc[-1]
    numel = 1
    for size in alloc:
        numel *= size
    base = _tensor((offset + numel,), dtype, g, "grid")[offset:].view(alloc)
    if layout == "transposed":
        base = base.transpose(-1, -2)
    elif layout == "sliced":
        base = base[..., ::2]
    elif layout == "channels_last":
        base = base.contiguous(memory_format=torch.channels_last)
    if offset and layout == "channels_last":  # keep the offset the layout copy dropped
        flat = _tensor((offset + numel,), dtype, g, "grid")
        base = flat.as_strided(base.shape, base.stride(), offset).copy_(base)
    return base.detach().requires_grad_(s["x0.requires_grad"])


def _alias(a, how):
    """The second of two inputs: `a` itself, a view of it, or a separate copy."""
    return {"same": lambda: a, "view": lambda: a.view(a.shape), "separate": a.clone}[how]()


class Noisy(torch.nn.Module):
    """A submodule reading its own training flag (`model.sub.eval()` alone)."""

    def forward(self, x):
        return x * 2 - 1 if self.training else x


class Block(torch.nn.Module):
    """A module whose forward reads its training flag, submodules and a parameter."""

    def __init__(self, n):
        super().__init__()
        self.act = torch.nn.ReLU()
        self.sub = Noisy()
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, n))
        self.register_buffer("steps", torch.zeros(()))
        self.gain = 1.0

    def forward(self, x):
        x = self.sub(self.act(x) * self.scale * self.gain)
        if self.training:
            self.steps += 1
            x = x + 0.5
        return x


LIB = types.ModuleType("fuzz_lib")  # a library: its functions read its own globals
exec(
    "FACTOR = 2\nENABLED = True\n"
    "def scale(x):\n    return x * FACTOR if ENABLED else x - FACTOR\n",
    LIB.__dict__,
)
lib_scale = LIB.scale  # the program calls it by this name, never naming LIB


def _make_helper():
    factor = 2

    def helper(x):
        return x * factor

    def set_factor(value):
        nonlocal factor
        factor = value

    return helper, set_factor


cell_helper, _set_helper_factor = _make_helper()


def defaults_helper(x, k=2, *, shift=0.5):
    return x * k + shift


class Scaled:
    """Read through the class: a class attribute and a method, replaced on the class."""

    factor = 2

    def transform(self, x):
        return x + self.factor


def _transform_double(self, x):
    return x * 2 * self.factor


def _transform_sin(self, x):
    return torch.sin(x) + self.factor


TRANSFORMS = {"add": Scaled.transform, "double": _transform_double, "sin": _transform_sin}
SCALED = Scaled()


def _set_defaults(fn, k, shift):
    fn.__defaults__ = (k,)
    fn.__kwdefaults__ = {"shift": shift}


SETTINGS = types.ModuleType("fuzz_settings")  # a settings module the program reads
SETTINGS.USE_FAST, SETTINGS.LEVEL = False, 1


class Config:
    """An object whose attributes the program reads."""

    def __init__(self):
        self.eps, self.mode, self.n = 0.5, "add", 2


class SGDLike:
    """An optimizer-like object: param_groups of params and hyperparameters."""

    def __init__(self, params, lr, momentum):
        self.param_groups = [{"params": list(params), "lr": lr, "momentum": momentum}]


def _set_attribute(obj, name, value):
    """Set an attribute, or delete it where the value is ABSENT."""
    if value == ABSENT:
        if hasattr(obj, name):
            delattr(obj, name)
    else:
        setattr(obj, name, value)


def _replace_items(items, value):
    items[:] = value


def _replace_entries(entries, value):
    entries.clear()
    entries.update(value)


def _copy_values(tensor, value):
    with torch.no_grad():
        tensor.copy_(value)


def _add_one(module, args, output):
    return output + 1


def _set_hook(module, value):
    """A forward hook adding 1 registered (True) or removed (False)."""
    handle = module.__dict__.pop("_fuzz_hook", None)
    if handle is not None:
        handle.remove()
    if value:
        module.__dict__["_fuzz_hook"] = module.register_forward_hook(_add_one)


def _set_param(module, name, value):
    setattr(module, name, torch.nn.Parameter(value))


def _set_group(optimizer, name, value):
    optimizer.param_groups[0][name] = value


@contextlib.contextmanager
def _call_context(s):
    """Grad mode, autocast, default dtype and deterministic flag of one call."""
    with contextlib.ExitStack() as stack:
        grad = s.get("ctx.grad", "enabled")
        if grad == "no_grad":
            stack.enter_context(torch.no_grad())
        elif grad == "inference":
            stack.enter_context(torch.inference_mode())
        if s.get("ctx.autocast") is not None:
            stack.enter_context(torch.autocast("cpu", dtype=s["ctx.autocast"]))
        if "ctx.default_dtype" in s:
            stack.callback(torch.set_default_dtype, torch.get_default_dtype())
            torch.set_default_dtype(s["ctx.default_dtype"])
        if "ctx.cudnn_benchmark" in s:
            stack.callback(setattr, torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)
            torch.backends.cudnn.benchmark = s["ctx.cudnn_benchmark"]
        if "ctx.deterministic" in s:
            stack.callback(torch.use_deterministic_algorithms, torch.are_deterministic_algorithms_enabled())
            torch.use_deterministic_algorithms(s["ctx.deterministic"])
        yield
'''

ABSENT = "<absent>"  # a value of CALLS: the attribute deleted (PRELUDE's ABSENT)
X0_DEFAULTS = {
    "x0.dtype": torch.float32,
    "x0.layout": "contiguous",
    "x0.offset": 0,
    "x0.requires_grad": False,
}  # x0's first dim is SHAPE's unless a `size` read changes it ("x0.size")


# ---------------------------------------------------------------- the mutators


@dataclass(frozen=True)
class Mutator:
    """A kind of thing a program reads, and how one is drawn (`draw(rng, k, shape)`)."""

    name: str
    weight: float
    draw: Callable[[random.Random, int, tuple], Read]


# Now and then a read comes after a graph break: a resumed function guards it.
GRAPH_BREAK_RATE = 0.25
GRAPH_BREAK = "torch._dynamo.graph_break()\n"


def _uses(rng: random.Random, k: int, uses: list[str]) -> tuple[str, tuple[str, ...]]:
    use = rng.choice(uses).replace("{k}", str(k))
    if rng.random() < GRAPH_BREAK_RATE:
        use = GRAPH_BREAK + use
    outputs = (f"r{k}",) if f"r{k} = " in use else ()
    return use, outputs


def _x0(name: str, choices: tuple, uses: list[str]):
    def draw(rng, k, shape):
        use, outputs = _uses(rng, k, uses)
        return Read(name, f"x0.{name}", choices, use, outputs)

    return draw


def _layouts(rng, k, shape):
    choices = ("contiguous", "transposed", "sliced") + (
        ("channels_last",) if len(shape) == 4 else ()
    )
    uses = [
        "if x0.is_contiguous():\n    v = v + 1\nelse:\n    v = v * 2",
        "v = v * x0.stride(-1)",
        "r{k} = x0.stride()",
        "v = v + x0.is_contiguous(memory_format=torch.channels_last)",
        "v = x0.contiguous().view(-1).view(v.shape) + v",
        "r{k} = x0.t() if x0.dim() == 2 else x0.transpose(1, 2)",
    ]
    use, outputs = _uses(rng, k, uses)
    return Read("layout", "x0.layout", choices, use, outputs)


def _alias_draw(rng, k, shape):
    n = shape[-1]
    uses = [
        "a{k}.add_(1)\nv = v * b{k}",
        "b{k}.mul_(2)\nv = v + a{k}",
        "a{k}[0] = 5\nv = v + b{k}.sum()",
    ]
    use, outputs = _uses(rng, k, uses)
    parameters = (
        (f"a{k}", f'_tensor(({n},), torch.float32, g, "grid")'),
        (f"b{k}", f'_alias(a{k}, s["alias{k}"])'),
    )
    return Read("alias", f"alias{k}", ("separate", "same", "view"), use, outputs, parameters)


def _argument(name, prefix, choices, uses):
    def draw(rng, k, shape):
        n = shape[-1]
        values = tuple(_instantiate(c, n, k) for c in choices)
        use, outputs = _uses(rng, k, [u.replace("{p}", f"{prefix}{k}") for u in uses])
        parameters = ((f"{prefix}{k}", f'_build(s["{prefix}{k}"])'),)
        return Read(name, f"{prefix}{k}", values, use, outputs, parameters)

    return draw


def _instantiate(choice, n, k):
    """A choice with `"tensor"` / `"tensor64"` / `"scalar_tensor"` placeholders made `T`s."""
    if choice == "tensor":
        return ("T", (n,), "float32", 10 * k + 1)
    if choice == "tensor64":
        return ("T", (n,), "float64", 10 * k + 2)
    if choice == "scalar_tensor":
        return ("T", (), "float32", 10 * k + 3)
    if isinstance(choice, list):
        return [_instantiate(c, n, k) for c in choice]
    if isinstance(choice, tuple) and choice[:1] != ("fn",):
        return tuple(_instantiate(c, n, k) for c in choice)
    if isinstance(choice, dict):
        return {key: _instantiate(c, n, k) for key, c in choice.items()}
    return choice


def _global(name, choices, uses, in_place=""):
    """A module-level global: rebound between calls, or (`in_place`: the function that
    updates it) the same object changed in place: a list's items, a dict's entries, a
    tensor's values."""

    def draw(rng, k, shape):
        values = tuple(_instantiate(c, shape[-1], k) for c in choices)
        use, outputs = _uses(rng, k, [u.replace("{p}", f"G{k}") for u in uses])
        setter = f"lambda value: globals().update(G{k}=value)"
        definitions = (f"G{k} = None",)
        if in_place:
            setter = f"lambda value: {in_place}(G{k}, value)"
            first = {"_replace_items": "[]", "_replace_entries": "{}"}.get(in_place)
            definitions = (f"G{k} = {first or f'torch.zeros({shape[-1]})'}",)
        state = ((f"G{k}", f"G{k}"),) if in_place or "list" in name else ()
        return Read(name, f"G{k}", values, use, outputs, (), definitions, setter, state)

    return draw


def _object_read(kind, k, use, outputs, rng, setter, definitions, state, key, values):
    """A read of an object: a module-level global, or an argument (`f(model, x)`)."""
    name = {"module": "MOD", "config": "CFG", "optimizer": "OPT"}[kind] + str(k)
    parameters = ()
    if rng.random() < 0.5:  # passed as an argument under its own parameter name
        parameters = ((f"o{k}", name),)
    use = use.replace("{o}", f"o{k}" if parameters else name)
    key, setter = key.replace("{o}", name), setter.replace("{o}", name)
    return Read(kind, key, values, use, outputs, parameters, definitions, setter, state)


def _module(rng, k, shape):
    n = shape[-1]
    which = rng.choice(
        [
            "training",
            "act",
            "scale",
            "scale.requires_grad",
            "scale.values",
            "gain",
            "hook",
            "sub.training",
            "scale.grad",
        ]
    )
    tensors = tuple(("T", (n,), "float32", 100 * k + i) for i in range(3))
    values = {
        "training": (True, False),
        "act": ("relu", "tanh", "identity"),
        "scale": tensors,
        "scale.requires_grad": (True, False),
        "scale.values": tensors,
        "gain": (1.0, 2, 0.5),
        "hook": (False, True),
        "sub.training": (True, False),
        "scale.grad": (None, *tensors[:2]),
    }[which]
    setter = {
        "training": "lambda value: {o}.train(value)",
        "act": "lambda value: setattr({o}, 'act', SUBMODULES[value]())",
        "scale": "lambda value: _set_param({o}, 'scale', value)",
        "scale.requires_grad": "lambda value: {o}.scale.requires_grad_(value)",
        "scale.values": "lambda value: _copy_values({o}.scale, value)",
        "gain": "lambda value: setattr({o}, 'gain', value)",
        "hook": "lambda value: _set_hook({o}, value)",
        "sub.training": "lambda value: {o}.sub.train(value)",
        "scale.grad": "lambda value: setattr({o}.scale, 'grad', value)",
    }[which]
    uses = ["v = {o}(v)", "v = {o}(v) + {o}.scale", "v = {o}.act(v) * 2 + {o}(v)"]
    if which == "training":
        uses.append("if {o}.training:\n    v = v * 3\nv = {o}(v)")
    if which == "scale.grad":
        uses.append("if {o}.scale.grad is not None:\n    v = v + {o}.scale.grad\nv = {o}(v)")
        uses.append("r{k} = {o}.scale.grad is None")
    use, outputs = _uses(rng, k, uses)
    name = f"MOD{k}"
    definitions = (f"{name} = Block({n})",)
    state = ((name, f"{{'training': {name}.training, **{name}.state_dict(keep_vars=False)}}"),)
    return _object_read("module", k, use, outputs, rng, setter, definitions, state,
                        f"{{o}}.{which}", values)  # fmt: skip


def _config(rng, k, shape):
    which = rng.choice(["eps", "mode", "n", "extra"])
    values = {"eps": (0.5, 1e-3, 2.0), "mode": ("add", "mul", "skip"), "n": (1, 2, 3),
              "extra": (ABSENT, 1.5, None, 2)}[which]  # fmt: skip
    uses = {
        "eps": ["v = v + {o}.eps", "v = v / ({o}.eps + v.abs())", "if {o}.eps > 1:\n    v = v - 1"],
        "mode": ['if {o}.mode == "mul":\n    v = v * 2\nelif {o}.mode == "add":\n    v = v + 2',
                 'r{k} = {o}.mode.upper()'],
        "n": ["r{k} = v[..., : {o}.n]", "v = v.roll({o}.n, -1)", "for _ in range({o}.n):\n    v = v * 0.5"],
        "extra": ['if hasattr({o}, "extra") and {o}.extra is not None:\n    v = v + {o}.extra',
                  'r{k} = getattr({o}, "extra", -1)', 'r{k} = "extra" in vars({o})'],
    }[which]  # fmt: skip
    use, outputs = _uses(rng, k, uses)
    setter = f"lambda value: _set_attribute({{o}}, '{which}', value)"
    name = f"CFG{k}"
    state = ((name, f"vars({name})"),)
    return _object_read("config", k, use, outputs, rng, setter, (f"{name} = Config()",), state,
                        f"{{o}}.{which}", values)  # fmt: skip


def _optimizer(rng, k, shape):
    n = shape[-1]
    which = rng.choice(["lr", "momentum"])
    values = {"lr": (0.1, 0.01, 0.5), "momentum": (0.0, 0.9, 0.5)}[which]
    step = (
        'for group in {o}.param_groups:\n    for p in group["params"]:\n'
        '        if group["momentum"] > 0:\n            p.mul_(group["momentum"])\n'
        '        p.add_(v.detach().reshape(-1, v.shape[-1]).sum(0), alpha=-group["lr"])\n'
    )
    uses = [step + 'v = v + {o}.param_groups[0]["params"][0]',
            step + 'r{k} = {o}.param_groups[0]["lr"] * 2']  # fmt: skip
    use, outputs = _uses(rng, k, uses)
    name = f"OPT{k}"
    definitions = (f"{name} = SGDLike([torch.zeros({n})], lr=0.1, momentum=0.0)",)
    setter = f"lambda value: _set_group({{o}}, '{which}', value)"
    state = ((name, f"{name}.param_groups"),)
    return _object_read("optimizer", k, use, outputs, rng, setter, definitions, state,
                        f"{{o}}.{which}", values)  # fmt: skip


def _closure(rng, k, shape):
    uses = ["v = v * cell{k}", "if cell{k} > 1:\n    v = v + cell{k}\nelse:\n    v = v - 1",
            "r{k} = cell{k} * 2", "v = v.roll(int(cell{k}), -1)"]  # fmt: skip
    use, outputs = _uses(rng, k, uses)
    return Read("closure", f"cell{k}", (1, 2, 0.5, 3), use, outputs, cell=f"cell{k}")


def _context(mutator, name, choices, uses):
    def draw(rng, k, shape):
        use, outputs = _uses(rng, k, uses)
        return Read(mutator, f"ctx.{name}", choices, use, outputs)

    return draw


def _size(rng, k, shape):
    uses = ["v = v * x0.shape[0]", "r{k} = v.sum(0)", "if x0.shape[0] > 3:\n    v = v + 1",
            "r{k} = v.reshape(-1)[: x0.shape[0]]", "r{k} = x0.shape[0] == 1",
            "r{k} = torch.arange(x0.shape[0]) * 2", "v = v - v.mean(0)"]  # fmt: skip
    use, outputs = _uses(rng, k, uses)
    return Read("size", "x0.size", (shape[0], 1, shape[0] + 1, shape[0] + 3), use, outputs)


def _index(rng, k, shape):
    """An index argument whose dtype changes: int64 or int32 positions, or a bool mask."""
    n = shape[-1]
    values = tuple(("T", (n,), dtype, 10 * k + i) for i, dtype in enumerate(
        ("int64", "int32", "bool", "int64")))  # fmt: skip
    uses = ["r{k} = v[..., j{k}]", "v = v + v[..., j{k}].sum()", "r{k} = x0[..., j{k}] * 2"]
    use, outputs = _uses(rng, k, uses)
    return Read("index", f"j{k}", values, use, outputs, ((f"j{k}", f'_build(s["j{k}"])'),))


def _settings(rng, k, shape):
    which = rng.choice(["USE_FAST", "LEVEL"])
    values = {"USE_FAST": (False, True), "LEVEL": (1, 2, 0)}[which]
    uses = {"USE_FAST": ["if SETTINGS.USE_FAST:\n    v = v.relu()\nelse:\n    v = v.abs()",
                         "r{k} = SETTINGS.USE_FAST"],
            "LEVEL": ["v = v * SETTINGS.LEVEL", "for _ in range(SETTINGS.LEVEL):\n    v = v + 1"]}[which]  # fmt: skip
    use, outputs = _uses(rng, k, uses)
    setter = f"lambda value: setattr(SETTINGS, '{which}', value)"
    return Read("settings", f"SETTINGS.{which}", values, use, outputs, setter=setter)


def _library(rng, k, shape):
    """A library function reading its own module's globals, changed between calls."""
    which = rng.choice(["FACTOR", "ENABLED"])
    values = {"FACTOR": (2, 3, 0.5), "ENABLED": (True, False)}[which]
    uses = ["v = lib_scale(v)", "r{k} = lib_scale(v.sum())", "v = lib_scale(lib_scale(v))"]
    use, outputs = _uses(rng, k, uses)
    setter = f"lambda value: setattr(LIB, '{which}', value)"
    return Read("library", f"LIB.{which}", values, use, outputs, setter=setter)


def _helper_function(rng, k, shape):
    """A helper's closure cell, its defaults, or a class's attribute or method."""
    which = rng.choice(["cell", "defaults", "class_attr", "method"])
    values = {"cell": (2, 3, 0.5), "defaults": ((2, 0.5), (3, 0.5), (2, -1.0)),
              "class_attr": (2, 5, -1), "method": ("add", "double", "sin")}[which]  # fmt: skip
    uses = {
        "cell": ["v = cell_helper(v)", "r{k} = cell_helper(v).sum()"],
        "defaults": ["v = defaults_helper(v)", "v = defaults_helper(v, 3)", "r{k} = defaults_helper(v, shift=1)"],
        "class_attr": ["v = SCALED.transform(v)", "v = v * SCALED.factor", "r{k} = Scaled.factor * 2"],
        "method": ["v = SCALED.transform(v)", "r{k} = SCALED.transform(v.sum())"],
    }[which]  # fmt: skip
    use, outputs = _uses(rng, k, uses)
    setter = {
        "cell": "_set_helper_factor",
        "defaults": "lambda value: _set_defaults(defaults_helper, *value)",
        "class_attr": "lambda value: setattr(Scaled, 'factor', value)",
        "method": "lambda value: setattr(Scaled, 'transform', TRANSFORMS[value])",
    }[which]
    return Read("helper", f"helper.{which}", values, use, outputs, setter=setter)


def _seed(rng, k, shape):
    uses = ["v = v + torch.rand(v.shape[-1])", "r{k} = torch.randn(3)",
            "v = F.dropout(v, 0.5, training=True)"]  # fmt: skip
    use, outputs = _uses(rng, k, uses)
    return Read("seed", "seed", (0, 1, 7), use, outputs, setter="torch.manual_seed")


INT_USES = [
    "v = v * {p}",
    "v = v.roll({p}, -1)",
    "r{k} = v[..., :{p}].sum(-1)",
    "if {p} > 2:\n    v = v + {p}\nelse:\n    v = v - 1",
    "for _ in range({p}):\n    v = v * 0.5 + 1",
    "r{k} = v.new_ones({p}) * {p}",
    "v = v + v.flatten()[{p}]",
]
# Values equal across types (2 == 2.0, 1 == True): what the program makes of their type.
NUMBER_USES = [
    "r{k} = {p} * 3",
    "r{k} = torch.tensor({p})",
    "v = v + torch.full((2,), {p}).sum()",
    "r{k} = type({p}).__name__",
    "r{k} = torch.arange(4) * {p}",
    "r{k} = str({p})",
]
FLOAT_USES = [
    "v = v * {p}",
    "v = v.clamp(max={p})",
    "if {p} > 1:\n    v = v + {p}",
    "v = torch.where(v > {p}, v, {p} - v)",
]
BOOL_USES = [
    "if {p}:\n    v = v.sin()\nelse:\n    v = v.cos()",
    "v = v * 2 if not {p} else v",
    "r{k} = v.sum() if {p} else v.mean()",
]
OPTIONAL_USES = [
    "if {p} is not None:\n    v = v + {p}",
    "v = v * ({p} if {p} is not None else 2)",
]
SEQUENCE_USES = [
    "for item in {p}:\n    v = v + item",
    "v = v * len({p})",
    "v = v + {p}[-1]",
    "r{k} = [item * 2 for item in {p}]",
    "for i, item in enumerate({p}):\n    v = v + i * item",
    "r{k} = isinstance({p}, tuple)",
    "r{k} = [type(item).__name__ for item in {p}]",
]
DICT_USES = [
    'for key, item in {p}.items():\n    if key == "scale":\n        v = v * item\n    else:\n        v = v + item',
    'if "shift" in {p}:\n    v = v + {p}["shift"]', 'v = v * {p}.get("scale", 1)', "r{k} = sorted({p})",
    "r{k} = len({p})",
]  # fmt: skip
FUNCTION_USES = ["v = {p}(v)", "r{k} = {p}(v).sum()", "v = {p}({p}(v))"]
SEQUENCES = (
    [1, 2], [1, 2, 3], [0.5, 2], ["tensor", 3], (1, 2), [2], ["scalar_tensor"], [True, 2],
    [1.0, 2], ["tensor64", 3], [[1, 2], 3], [(2,), 1],
)  # fmt: skip
DICTS = (
    {"scale": 2, "shift": 1}, {"scale": 2}, {"shift": 1.5, "bias": "tensor"},
    {"shift": 1, "scale": 2}, {"scale": 0.5, "extra": True}, {"scale": "tensor64"},
)  # fmt: skip
FUNCTION_NAMES = ("sin", "tanh", "relu", "double", "shifted", "abs", "times3", "times5")
FUNCTION_CHOICES = tuple(("fn", name) for name in FUNCTION_NAMES)

MUTATORS: dict[str, Mutator] = {
    m.name: m
    for m in (
        Mutator("dtype", 3, _x0("dtype", (torch.float32, torch.float64, torch.bfloat16, torch.float16), [
            "if x0.dtype == torch.float64:\n    v = v * 2\nelse:\n    v = v + 1",
            "v = v + torch.ones(v.shape[-1], dtype=x0.dtype)", "r{k} = x0.element_size()",
            "v = v.float() if x0.element_size() < 4 else v", "r{k} = x0.dtype",
        ])),
        Mutator("requires_grad", 3, _x0("requires_grad", (False, True), [
            "if x0.requires_grad:\n    v = v * 3\nelse:\n    v = v - 2", "r{k} = x0.requires_grad",
            "v = v.detach() * 2 if x0.requires_grad else v + 0.25",
        ])),
        Mutator("layout", 3, _layouts),
        Mutator("offset", 2, _x0("offset", (0, 1, 3), [
            "v = v + x0.storage_offset()", "r{k} = x0.storage_offset()",
            "if x0.storage_offset() > 0:\n    v = v - 1",
        ])),
        Mutator("alias", 2, _alias_draw),
        Mutator("int", 3, _argument("int", "i", (1, 2, 3, 5), INT_USES)),
        Mutator("number", 2, _argument("number", "n", (2, 2.0, 1, True, 0, False), NUMBER_USES)),
        Mutator("float", 2, _argument("float", "f", (0.5, 1.5, -2.0, 3.25), FLOAT_USES)),
        Mutator("bool", 2, _argument("bool", "b", (True, False), BOOL_USES)),
        Mutator("optional", 2, _argument("optional", "t", (None, "tensor", "tensor64", "scalar_tensor"), OPTIONAL_USES)),
        Mutator("sequence", 3, _argument("sequence", "l", SEQUENCES, SEQUENCE_USES)),
        Mutator("dict", 3, _argument("dict", "d", DICTS, DICT_USES)),
        Mutator("global_number", 2, _global("global_number", (2, 3, 0.5, -1.25, 2.0, True), [
            "v = v * {p}", "if {p} > 1:\n    v = v + 1", "v = v.roll(int({p}), 0)", *NUMBER_USES,
        ])),
        Mutator("global_tensor", 2, _global("global_tensor", ("tensor", "tensor64", "scalar_tensor"), [
            "v = v + {p}", "v = v * {p}.sum()", "r{k} = {p} * 2",
        ])),
        Mutator("global_list", 2, _global("global_list", SEQUENCES, SEQUENCE_USES)),
        Mutator("global_list_items", 2, _global("global_list_items", SEQUENCES, SEQUENCE_USES, "_replace_items")),
        Mutator("global_dict_entries", 2, _global("global_dict_entries", DICTS, DICT_USES, "_replace_entries")),
        Mutator("global_tensor_values", 2, _global("global_tensor_values", ("tensor", "tensor64"), [
            "v = v + {p}", "v = v * {p}.sum()", "r{k} = {p} * 2",
        ], "_copy_values")),
        Mutator("global_flag", 2, _global("global_flag", (True, False), BOOL_USES)),
        Mutator("global_function", 2, _global("global_function", FUNCTION_CHOICES, FUNCTION_USES)),
        Mutator("module", 4, _module),
        Mutator("closure", 2, _closure),
        Mutator("config", 2, _config),
        Mutator("grad_mode", 2, _context("grad_mode", "grad", ("enabled", "no_grad", "inference"), [
            "if torch.is_grad_enabled():\n    v = v * 2", "v = v * 1.5", "r{k} = torch.is_grad_enabled()",
            "r{k} = torch.is_inference_mode_enabled()",
        ])),
        Mutator("autocast", 2, _context("autocast", "autocast", (None, torch.bfloat16), [
            "v = v @ torch.linspace(-1, 1, v.shape[-1] * v.shape[-1]).view(v.shape[-1], -1)",
            "r{k} = torch.is_autocast_enabled('cpu')",
        ])),
        Mutator("default_dtype", 2, _context("default_dtype", "default_dtype", (torch.float32, torch.float64), [
            "v = v + torch.ones(v.shape[-1])", "v = v * torch.tensor(1.5)",
            "r{k} = torch.arange(0.0, 3.0) * 2", "r{k} = torch.get_default_dtype()",
        ])),
        Mutator("deterministic", 1, _context("deterministic", "deterministic", (False, True), [
            "if torch.are_deterministic_algorithms_enabled():\n    v = v + 1\nelse:\n    v = v - 1",
        ])),
        Mutator("seed", 2, _seed),
        Mutator("library", 2, _library),
        Mutator("helper", 3, _helper_function),
        Mutator("size", 2, _size),
        Mutator("index", 2, _index),
        Mutator("settings", 2, _settings),
        Mutator("torch_flag", 1, _context("torch_flag", "cudnn_benchmark", (False, True), [
            "if torch.backends.cudnn.benchmark:\n    v = v * 2", "r{k} = torch.backends.cudnn.benchmark",
        ])),
        Mutator("optimizer", 2, _optimizer),
    )
}  # fmt: skip


# ---------------------------------------------------------------- generating


def _value_text(value) -> str:
    """The source of a value of CALLS (T and Fn from the placeholders of `_instantiate`)."""
    if isinstance(value, tuple) and value[:1] == ("T",):
        _, shape, dtype, seed = value
        return f"T({shape!r}, torch.{dtype}, {seed})"
    if isinstance(value, tuple) and value[:1] == ("fn",):
        return f"Fn({value[1]!r})"
    if isinstance(value, list):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(_value_text(v) + ", " for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_value_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def schedule(rng: random.Random, reads: tuple[Read, ...], calls: int) -> tuple[dict, ...]:
    """Each call's values: call 0 draws every read's; each later call changes one read
    (or, at STEADY_RATE, nothing)."""
    first = dict(X0_DEFAULTS)
    for read in reads:
        first[read.key] = rng.choice(read.choices)
    states = [first]
    for _ in range(calls - 1):
        state = dict(states[-1])
        # A steady call now and then: the entry's guards pass on what the call before
        # saw, warming any fast path (stable reads), which the next change must not fool.
        if not reads or rng.random() < STEADY_RATE:
            states.append(state)
            continue
        read = rng.choice(reads)
        others = [c for c in read.choices if c != state[read.key]]
        if others:
            state[read.key] = rng.choice(others)
        states.append(state)
    return tuple(states)


def generate(seed: int) -> GuardProgram:
    """The `guards` program of one seed: reads added one at a time, each kept when eager
    runs the program at every call (a fresh schedule for each candidate)."""
    rng = random.Random(seed)
    shape = rng.choice([(4, 6), (3, 5), (2, 3, 4, 5), (5, 8)])
    calls = rng.randint(*CALLS_RANGE)
    wanted = rng.randint(*READS_RANGE)
    names = list(MUTATORS)
    weights = [MUTATORS[n].weight for n in names]
    program = GuardProgram(seed, shape, (), schedule(random.Random(seed), (), calls))
    k = 0
    for _ in range(4 * wanted):
        if len(program.reads) >= wanted:
            break
        k += 1
        mutator = MUTATORS[rng.choices(names, weights)[0]]
        read = mutator.draw(rng, k, shape)
        if any(r.key == read.key for r in program.reads):
            continue
        reads = (*program.reads, read)
        candidate = program.replace(reads=reads, calls=schedule(rng, reads, calls))
        if runs_eagerly(candidate):
            program = candidate
    return program


def runs_eagerly(program: GuardProgram) -> bool:
    """Whether eager runs every call of the program (its state set as the oracle sets it)."""
    import oracle

    try:
        namespace = oracle.load(render(program))
        with oracle.quiet():
            for call in range(len(program.calls)):
                outcome = oracle.run_call(namespace["program"], namespace, call)
                if outcome.error is not None or outcome.backward_error is not None:
                    return False
    except Exception:
        return False
    return True


# ---------------------------------------------------------------- rendering


def _indent(text: str, by: str) -> list[str]:
    return [by + line for line in text.splitlines()]


def render(program: GuardProgram, backend: str = "inductor", header: str = "") -> str:
    """The program as a runnable Python file (see the module docstring)."""
    reads = program.reads
    lines = ['"""' + (header or f"Fuzzed guards program, seed {program.seed}.") + '\n"""', ""]
    lines += ["import torch", "import torch.nn.functional as F", ""]
    lines += [f"GRAD = {program.grad}", f"DYNAMIC = {program.dynamic}", f'BACKEND = "{backend}"']
    lines += [f"SHAPE = {program.shape!r}", HELPERS, PRELUDE, ""]
    for read in reads:
        lines += list(read.definitions)
    lines += ["", "# Each call's state: call 0 sets every value, each later call changes one."]
    lines.append("CALLS = [")
    keys = list(dict.fromkeys([*X0_DEFAULTS, *(r.key for r in reads)]))
    for state in program.calls:
        items = ", ".join(f"{key!r}: {_value_text(state.get(key, X0_DEFAULTS.get(key)))}"
                          for key in keys)  # fmt: skip
        lines.append(f"    {{{items}}},")
    lines += ["]", "DIMS = CALLS  # the oracle counts calls by DIMS", "", ""]
    parameters = ["x0"] + [p for r in reads for p, _ in r.parameters]
    cells = [r.cell for r in reads if r.cell]
    body = ["v = x0 * 1.5"] + [r.use for r in reads]
    returned = ["v"] + [o for r in reads for o in r.outputs]
    function = [f"def program({', '.join(parameters)}):"]
    for statement in body:
        function += _indent(statement, "    ")
    function.append(f"    return ({''.join(name + ', ' for name in returned)})")
    if cells:
        lines.append("def _make_program():")
        lines += [f"    {cell} = None" for cell in cells]
        lines.append("")
        lines += _indent("\n".join(function), "    ")
        for cell in cells:
            lines += ["", f"    def set_{cell}(value):", f"        nonlocal {cell}",
                      f"        {cell} = value"]  # fmt: skip
        setters = ", ".join(f'"{c}": set_{c}' for c in cells)
        lines += ["", f"    return program, {{{setters}}}", "", "",
                  "program, _CELL_SETTERS = _make_program()"]  # fmt: skip
    else:
        lines += function
    lines += ["", ""]
    lines += _render_state(program)
    lines += ["", "", MAIN]
    return "\n".join(lines)


def _render_state(program: GuardProgram) -> list[str]:
    reads = program.reads
    setters = []
    for read in reads:
        if read.cell:
            setters.append(f'    "{read.key}": _CELL_SETTERS["{read.cell}"],')
        elif read.setter:
            setters.append(f'    "{read.key}": {read.setter},')
    lines = ["SETTERS = {", *setters, "}", "_APPLIED = {}", "", ""]
    lines += [
        "def set_state(call):",
        '    """Apply what changed since the call before (the seed: before every call)."""',
        "    s = CALLS[call]",
        "    for key, setter in SETTERS.items():",
        '        if key == "seed" or key not in _APPLIED or _APPLIED[key] != s[key]:',
        "            setter(_build(s[key]))",
        "            _APPLIED[key] = s[key]",
        "",
        "",
        "def call_context(call):",
        "    return _call_context(CALLS[call])",
        "",
        "",
        "def make_inputs(call):",
        "    s = CALLS[call]",
        f"    g = torch.Generator().manual_seed({program.seed} + call)",
        "    x0 = _input(SHAPE, s, g)",
    ]
    arguments = ["x0"]
    for read in reads:
        for parameter, expression in read.parameters:
            lines.append(f"    {parameter} = {expression}")
            arguments.append(parameter)
    lines.append(f"    return [{', '.join(arguments)}]")
    shown = [(name, expr) for r in reads for name, expr in r.state]
    lines += ["", "", "def outside_state():"]
    items = ", ".join(f'"{name}": {expr}' for name, expr in shown)
    lines.append(f"    return {{{items}}}")
    return lines


# ---------------------------------------------------------------- shrinking


def _without(program: GuardProgram, index: int) -> GuardProgram:
    read = program.reads[index]
    calls = tuple({k: v for k, v in state.items() if k != read.key} for state in program.calls)
    if read.key in X0_DEFAULTS:
        calls = tuple({**state, read.key: program.calls[0][read.key]} for state in calls)
    return program.replace(reads=program.reads[:index] + program.reads[index + 1 :], calls=calls)


def drop_reads(program: GuardProgram):
    for i in range(len(program.reads) - 1, -1, -1):
        yield _without(program, i)


def drop_calls(program: GuardProgram):
    """Fewer calls: each one but the first dropped (the state it set goes with it)."""
    for i in range(len(program.calls) - 1, 0, -1):
        if len(program.calls) > 2:
            yield program.replace(calls=program.calls[:i] + program.calls[i + 1 :])


def drop_grad(program: GuardProgram):
    if program.grad:
        yield program.replace(grad=False)


REDUCTIONS = {"drop_reads": drop_reads, "drop_calls": drop_calls, "drop_grad": drop_grad}


__all__ = ["MUTATORS", "GuardProgram", "Mutator", "Read", "generate", "render", "schedule"]
