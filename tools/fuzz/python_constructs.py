"""The Python constructs of the `python` profile (generator.PROFILES): what capture
interprets beyond tensor ops, each a generator writing a short, readable block.

    try_except        try/except/else/finally; a FuzzError raised on a size, or an error
                      torch raises on shapes (RuntimeError, IndexError), caught
    frame_list        a list built and mutated in the frame: append, insert, pop, unpacking
    frame_dict        a dict updated and iterated (items, sorted keys, a comprehension)
    int_set           a set of ints (dims) built, changed and read
    outside_state     LOG / TABLE / SCALER, module-level state, written by the program
    closure           nested functions over the frame's values, nonlocal counters, lambdas
    range_loop        for over a range with continue / break (on an index or a value)
    tensor_loop       for over a list of tensors (enumerate, zip) with continue / break
    value_branch      if on a tensor's value (a graph break), a while loop on a value
    item_reads        .item() and .tolist() read into Python numbers and lists
    cond              torch.cond on a tensor or size predicate
    while_loop        torch.while_loop with a counter and a carried tensor
    user_class        a user class's constructor, method, property, classmethod, super()
    inplace_helper    in-place ops on inputs and views, through helpers and loops
    breaking_call     helpers that break the graph (print, .item()) or raise FuzzError

A construct returns a `Construct` (its text, the tensors and Python values it defines,
the module-level definitions it uses, see user_code.py) or None when no variable fits.
generator.py keeps it only when the whole program so far, rendered and run eagerly at
every call, runs (the constructs' names live in nested scopes and loops, so they are
checked in the program itself, not statement by statement). Conditions that raise are
on sizes, indices and constants, never on values, so eager decides them the same way
on every machine; branches on values are plain `if`s and loops that compiled code must
take as eager does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from scope import Scope, both, floating, ranked


@dataclass(frozen=True)
class Construct:
    """A block of Python: its text, the tensor variables and Python values (outputs
    candidates) it defines, and the user_code definitions it needs."""

    text: str
    tensors: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    definitions: tuple[str, ...] = ()


def _block(lines: list[tuple[int, str]]) -> str:
    return "\n".join("    " * depth + line for depth, line in lines)


def _local(scope: Scope, stem: str) -> str:
    """A fresh name for a helper local (`items7`, `fn8`): never read by other statements."""
    scope.counter += 1
    return f"{stem}{scope.counter}"


def _value_name(scope: Scope) -> str:
    """A fresh name for a Python value the program may return (`n9`)."""
    return _local(scope, "n")


def _nonbool(t):
    return t.dtype != torch.bool


def _size_test(scope: Scope, name: str) -> str:
    """A condition on sizes alone (data-independent; may differ between calls)."""
    t = scope.value(name)
    choices = [f"{name}.dim() >= 2", f"{name}.numel() > 6", f"{name}.numel() % 2 == 0"]
    if t.dim():
        choices += [f"{name}.shape[0] > 2", f"{name}.shape[-1] % 2 == 1"]
    return scope.rng.choice(choices)


def _simple(scope: Scope, name: str) -> str:
    """A pointwise expression of `name` keeping its shape (its dtype may promote)."""
    t = scope.value(name)
    if t.dtype == torch.bool:
        return scope.rng.choice([f"~{name}", f"{name} & {name}", f"{name}.logical_not()"])
    if floating(t):
        return scope.rng.choice(
            [f"{name} * 2", f"torch.tanh({name})", f"{name}.relu() - 1", f"{name}.sin()",
             f"{name} / 2 + 0.5", f"{name}.abs()", f"torch.sigmoid({name})"]
        )  # fmt: skip
    return scope.rng.choice([f"{name} * 2", f"{name} - 1", f"{name}.abs()", f"{name} % 3"])


# ---------------------------------------------------------------- exceptions


def try_except(scope: Scope) -> Construct | None:
    name = scope.pick(_nonbool)
    if name is None:
        return None
    rng, out = scope.rng, scope.new_name()
    definitions = ["FuzzError"]
    kind = rng.choice(["user", "user", "runtime", "index", "helper", "loop"])
    if kind == "loop":
        return _try_in_loop(scope, name, out)
    if kind == "helper":  # raised in a callee, caught in the frame
        body = [(1, f"{out} = checked_sum({name}, {rng.choice([4, 8, 20])}) + {name}")]
        definitions.append("checked_sum")
        caught = "FuzzError as error"
    elif kind == "user":
        message = rng.choice(['"too wide"', f'f"rank {{{name}.dim()}}"'])
        body = [
            (1, f"{out} = {_simple(scope, name)}"),
            (1, f"if {_size_test(scope, name)}:"),
            (2, f"raise FuzzError({message})"),
            (1, f"{out} = {out} + 1"),
        ]
        caught = "FuzzError as error" if rng.random() < 0.7 else "Exception as error"
    elif kind == "runtime":  # a shape error torch raises, depending on the call's sizes
        other = scope.pick(both(_nonbool, ranked(1))) or name
        body = [(1, f"{out} = {name} @ {other}.mT" if scope.value(other).dim() >= 2 else
                 f"{out} = {name} @ {other}")]  # fmt: skip
        caught = "RuntimeError as error"
    else:
        body = [(1, f"{out} = {name}.reshape(-1)[{rng.choice([2, 5, 9])}] * {name}")]
        caught = "IndexError as error"
    lines = [(0, "try:"), *body, (0, f"except {caught}:"), (1, f"{out} = {_simple(scope, name)}")]
    if rng.random() < 0.5:
        # torch's messages are its own (compiled code may word them otherwise): their type
        # is logged; the program's own messages are its data.
        logged = "str(error)" if kind in ("user", "helper") else "type(error).__name__"
        lines.append((1, f"LOG.append({logged})"))
        definitions.append("LOG")
    if rng.random() < 0.3:
        lines += [(0, "else:"), (1, f"{out} = {out} * 3")]
    if rng.random() < 0.5:
        lines += [(0, "finally:"), (1, 'TABLE["hits"] += 1')]
        definitions.append("TABLE")
    return Construct(_block(lines), (out,), (), tuple(definitions))


def _try_in_loop(scope: Scope, name: str, out: str) -> Construct:
    """A try statement in a loop body: the handler continues or breaks, the finally counts."""
    rng = scope.rng
    lines = [
        (0, f"{out} = {name} * 1"),
        (0, "for i in range(3):"),
        (1, "try:"),
        (2, f"if i == {rng.choice([0, 1, 2])}:"),
        (3, 'raise FuzzError(f"step {i}")'),
        (2, f"{out} = {out} * 2 - i"),
        (1, "except FuzzError as error:"),
        (2, "LOG.append(str(error))"),
        (2, "continue" if rng.random() < 0.5 else "break"),
        (1, "finally:"),
        (2, 'TABLE["hits"] += 1'),
        (1, f"{out} = {out} + 1"),
    ]
    return Construct(_block(lines), (out,), (), ("FuzzError", "LOG", "TABLE"))


# ---------------------------------------------------------------- containers


def frame_list(scope: Scope) -> Construct | None:
    name = scope.pick(_nonbool)
    if name is None:
        return None
    rng, items, out = scope.rng, _local(scope, "items"), None
    lines = [(0, f"{items} = [{name}, {_simple(scope, name)}]")]
    length = 2
    for _ in range(rng.randint(2, 4)):
        op = rng.choice(["append", "insert", "pop", "extend", "index", "reverse", "slice", "del"])
        if op == "append":
            lines.append((0, f"{items}.append({_simple(scope, name)})"))
            length += 1
        elif op == "insert":
            lines.append((0, f"{items}.insert({rng.randrange(length + 1)}, {name} + {length})"))
            length += 1
        elif op == "extend":
            lines.append((0, f"{items} += [{name}.neg()] * 2"))
            length += 2
        elif op == "pop" and length > 2:
            lines.append((0, f"{items}.pop({rng.choice(['', '0', '-2'])})"))
            length -= 1
        elif op == "index":
            lines.append((0, f"{items}[{rng.randrange(length)}] = {name} * {length}"))
        elif op == "reverse":
            lines.append((0, f"{items}.reverse()"))
        elif op == "slice":
            lines.append((0, f"{items}[1:] = [t + 1 for t in {items}[1:]]"))
        elif op == "del" and length > 2:
            lines.append((0, f"del {items}[{rng.randrange(length)}]"))
            length -= 1
    out = scope.new_name()
    if rng.random() < 0.5:
        lines.append((0, f"first, *rest = {items}"))
        lines.append((0, f"{out} = first + sum(rest[1:], rest[0]) * len(rest)"))
    else:
        lines.append((0, f"{out} = {items}[-1] - {items}[0] * len({items})"))
    values = ()
    if rng.random() < 0.3:
        count = _value_name(scope)
        lines.append((0, f"{count} = len({items})"))
        values = (count,)
    return Construct(_block(lines), (out,), values)


def frame_dict(scope: Scope) -> Construct | None:
    name = scope.pick(_nonbool)
    if name is None:
        return None
    rng, parts, out = scope.rng, _local(scope, "parts"), scope.new_name()
    lines = [(0, f'{parts} = {{"a": {name}}}')]
    lines.append((0, f"{parts}.update(b={_simple(scope, name)}, c={name} + 1)"))
    if rng.random() < 0.5:
        lines.append((0, f'{parts}["d"] = {parts}.pop("a") * 2'))
    if rng.random() < 0.4:
        lines.append((0, f'{parts}.setdefault("e", {name} - 1)'))
    style = rng.choice(["items", "sorted", "comprehension"])
    if style == "comprehension":
        lines.append((0, f"{out} = sum({{k: v.sum() for k, v in {parts}.items()}}.values())"))
        return Construct(_block(lines), (out,))
    lines.append((0, f"{out} = {name} * 0"))
    loop = (
        f"for key, value in {parts}.items():"
        if style == "items"
        else f"for key in sorted({parts}):"
    )
    value = "value" if style == "items" else f"{parts}[key]"
    lines += [
        (0, loop),
        (1, f'{out} = {out} + {value} if key != "{rng.choice("bcd")}" else {out} - {value}'),
    ]
    return Construct(_block(lines), (out,))


def int_set(scope: Scope) -> Construct | None:
    name = scope.pick(ranked(1))
    if name is None:
        return None
    rng, dims, out = scope.rng, _local(scope, "dims"), scope.new_name()
    lines = [(0, f"{dims} = {{0, {name}.dim() - 1}}")]
    if rng.random() < 0.5:
        lines.append((0, f"{dims}.add({name}.dim() // 2)"))
    if rng.random() < 0.5:
        lines.append((0, f"{dims}.discard(0)" if rng.random() < 0.5 else f"{dims} |= {{0}}"))
    lines.append((0, f"if len({dims}) > 1 and {name}.dim() - 1 in {dims}:"))
    lines.append((1, f"{dims}.remove({name}.dim() - 1)"))
    op = rng.choice(["sum", "amax", "flip"]) if _nonbool(scope.value(name)) else "flip"
    if op == "flip":
        lines.append((0, f"{out} = {name}.flip(sorted({dims}))"))
    else:
        lines.append((0, f"{out} = {name}.{op}(tuple(sorted({dims})), keepdim=True)"))
    return Construct(_block(lines), (out,))


def outside_state(scope: Scope) -> Construct | None:
    name = scope.pick(_nonbool)
    if name is None:
        return None
    rng = scope.rng
    choices = {
        "log_sum": ([(0, f"LOG.append({name}.sum())")], "LOG"),
        "log_size": ([(0, f"LOG.append({name}.shape)")], "LOG"),
        "log_list": ([(0, f"LOG.extend({name}.reshape(-1)[:3].tolist())")], "LOG"),
        "log_view": ([(0, f"LOG.append({name}[..., :1])")], "LOG"),
        "table_set": ([(0, f'TABLE["last"] = {name}.amax() if {name}.numel() else 0')], "TABLE"),
        "table_hits": ([(0, 'TABLE["hits"] += 1')], "TABLE"),
        "table_list": ([(0, f'TABLE.setdefault("dims", []).append({name}.dim())')], "TABLE"),
        "scaler": ([(0, f"SCALER.factor = {name}.shape[-1] if {name}.dim() else 2")], "SCALER"),
        "scaler_apply": ([], "SCALER"),
        "scaler_tensor": ([(0, f"SCALER.factor = {name}.reshape(-1)[:1].sum()")], "SCALER"),
        "global": ([(0, "global COUNT"), (0, f"COUNT += {name}.dim() + 1")], "COUNT"),
        "log_helper": ([(0, f"append_sum(LOG, {name})")], "LOG"),
    }
    key = rng.choice(sorted(choices))
    lines, state = choices[key]
    out = scope.new_name()
    reads = {
        "LOG": f"{out} = {name} * len(LOG)",
        "TABLE": f'{out} = {name} + TABLE["hits"] + len(TABLE)',
        "SCALER": f"{out} = SCALER.apply({name}) + SCALER.calls",
        "COUNT": f"{out} = {name} * COUNT",
    }
    lines = [*lines, (0, reads[state])]
    used = (state, "append_sum") if key == "log_helper" else (state,)
    return Construct(_block(lines), (out,), (), used)


# ---------------------------------------------------------------- functions


def closure(scope: Scope) -> Construct | None:
    name = scope.pick(_nonbool)
    if name is None:
        return None
    rng, out = scope.rng, scope.new_name()
    other = scope.pick(lambda t: t.numel() > 0 and _nonbool(t)) or name
    kind = rng.choice(["nested", "nonlocal", "lambda", "factory", "generator"])
    fn = _local(scope, "fn")
    if kind == "nested":
        size = _local(scope, "size")
        lines = [
            (0, f"{size} = {name}.shape[-1] if {name}.dim() else 1"),
            (0, f"def {fn}(t):"),
            (1, f"return t * {size} + {other}.sum()"),
            (0, f"{out} = {fn}({name}) - {fn}({name}.neg())"),
        ]
    elif kind == "nonlocal":
        count = _local(scope, "count")
        lines = [
            (0, f"{count} = 0"),
            (0, f"def {fn}(t):"),
            (1, f"nonlocal {count}"),
            (1, f"{count} += 1"),
            (1, f"return t + {count}"),
            (0, f"{out} = {fn}({fn}({name})) * {count}"),
        ]
    elif kind == "lambda":
        lines = [
            (0, f"{fn} = lambda t, s=2: (t - 1) * s"),
            (0, f"{out} = {fn}({name}) + {fn}({name}, s=3)"),
        ]
        if rng.random() < 0.5:
            lines.insert(1, (0, f"{fn} = (lambda g: lambda t: g(t) + {other}.amax())({fn})"))
            lines[-1] = (0, f"{out} = {fn}({name})")
    elif kind == "generator":
        lines = [
            (0, f"def {fn}(t):"),
            (1, "for k in range(3):"),
            (2, "yield t * k"),
            (0, f"{out} = sum({fn}({name}), {name} * 0)"),
        ]
        if rng.random() < 0.5:
            lines[-1] = (0, f"{out} = next(item for item in {fn}({name}) if item.numel() > 1)")
    else:
        make = _local(scope, "make")
        lines = [
            (0, f"def {make}(k):"),
            (1, "def inner(t):"),
            (2, "return t * k"),
            (1, "return inner"),
            (0, f"{fn} = [{make}(k) for k in range(1, 4)]"),
            (0, f"{out} = {fn}[0]({name}) + {fn}[-1]({name})"),
        ]
    return Construct(_block(lines), (out,))


def user_class(scope: Scope) -> Construct | None:
    name = scope.pick(_nonbool)
    if name is None:
        return None
    rng, obj, out = scope.rng, _local(scope, "scaler"), scope.new_name()
    cls = rng.choice(["Scaler", "Shifted"])
    make = rng.choice([f"{cls}({name}.dim() + 1)", f"{cls}.unit()", f"{cls}(2)"])
    lines = [(0, f"{obj} = {make}")]
    lines.append((0, f"{out} = {obj}.apply({name}) + {obj}.double"))
    if rng.random() < 0.6:
        lines.append((0, f"{obj}.factor += {rng.choice(['1', f'{name}.dim()'])}"))
        lines.append((0, f"{out} = {obj}.apply({out})"))
    values = ()
    if rng.random() < 0.4:
        calls = _value_name(scope)
        lines.append((0, f"{calls} = ({obj}.calls, {obj}.factor)"))
        values = (calls,)
    return Construct(_block(lines), (out,), values, (cls,))


def breaking_call(scope: Scope) -> Construct | None:
    name = scope.pick(_nonbool)
    if name is None:
        return None
    rng, out = scope.rng, scope.new_name()
    helper = rng.choice(["printing_helper", "item_helper", "checked_sum"])
    if helper == "checked_sum":
        limit = rng.choice([4, 8, 20, 60])
        text = f"{out} = checked_sum({name}, {limit}) + {_simple(scope, name)}"
    else:
        text = f"{out} = {helper}({_simple(scope, name)}) * 2"
    return Construct(text, (out,), (), (helper,))


# ---------------------------------------------------------------- loops and branches


def range_loop(scope: Scope) -> Construct | None:
    name = scope.pick(_nonbool)
    if name is None:
        return None
    rng, out = scope.rng, scope.new_name()
    count = rng.choice(["3", "4", f"min({name}.shape[0], 4) if {name}.dim() else 2"])
    lines = [(0, f"{out} = {name} * 1"), (0, f"for i in range({count}):")]
    if rng.random() < 0.6:
        lines += [(1, f"if i == {rng.choice([0, 1])}:"), (2, "continue")]
    lines.append((1, f"{out} = {out} * 0.5 + i" if rng.random() < 0.5 else f"{out} = {out} - i"))
    stop = rng.choice(["index", "value", "none"])
    if stop == "index":
        lines += [(1, f"if i >= {rng.choice([1, 2])}:"), (2, "break")]
    elif stop == "value":  # a data-dependent break: a graph break inside the loop
        lines += [(1, f"if {out}.sum() < {rng.choice([-2, 0, 3])}:"), (2, "break")]
    return Construct(_block(lines), (out,))


def tensor_loop(scope: Scope) -> Construct | None:
    name = scope.pick(_nonbool)
    if name is None:
        return None
    rng, out = scope.rng, scope.new_name()
    others = [scope.pick() or name for _ in range(2)]
    listed = ", ".join([name, *others, f"{name} * 2"])
    style = rng.choice(["plain", "enumerate", "zip"])
    lines = [(0, f"{out} = {name}.sum() * 0")]
    if style == "plain":
        lines.append((0, f"for t in [{listed}]:"))
        step = "t.sum()"
    elif style == "enumerate":
        lines.append((0, f"for j, t in enumerate([{listed}]):"))
        step = "t.sum() * j"
    else:
        lines.append((0, f"for t, w in zip([{listed}], (1, -1, 2)):"))
        step = "t.sum() * w"
    lines += [(1, "if t.dim() == 0 or t.dtype == torch.bool:"), (2, "continue")]
    lines.append((1, f"{out} = {out} + {step}"))
    if rng.random() < 0.6:
        cond = rng.choice(["t.numel() > 6", f"{out} > 4", "t.dim() >= 3"])
        lines += [(1, f"if {cond}:"), (2, "break")]
    return Construct(_block(lines), (out,))


def value_branch(scope: Scope) -> Construct | None:
    name = scope.pick(both(_nonbool, lambda t: t.numel() > 0))
    if name is None:
        return None
    rng, out = scope.rng, scope.new_name()
    if rng.random() < 0.6:
        cond = rng.choice([f"{name}.sum() > 0", f"{name}.amax() > 1", f"({name} < 0).any()"])
        lines = [
            (0, f"if {cond}:"),
            (1, f"{out} = {_simple(scope, name)}"),
            (0, "else:"),
            (1, f"{out} = {_simple(scope, name)}"),
        ]
        definitions = ()
        if rng.random() < 0.4:
            lines.insert(2, (1, 'LOG.append("then")'))
            definitions = ("LOG",)
        return Construct(_block(lines), (out,), (), definitions)
    steps = _local(scope, "steps")
    lines = [
        (0, f"{out} = {name} * 1.0"),
        (0, f"{steps} = 0"),
        (0, f"while {out}.abs().sum() > 1 and {steps} < 3:"),
        (1, f"{out} = {out} * 0.5"),
        (1, f"{steps} += 1"),
    ]
    value = _value_name(scope)
    lines.append((0, f"{value} = {steps}"))
    return Construct(_block(lines), (out,), (value,))


def item_reads(scope: Scope) -> Construct | None:
    name = scope.pick(lambda t: t.numel() > 0)
    if name is None:
        return None
    rng, out, value = scope.rng, scope.new_name(), _value_name(scope)
    if rng.random() < 0.5:
        lines = [
            (0, f"{value} = {name}.float().sum().item()"),
            (0, f"{out} = {name} * {value}" if _nonbool(scope.value(name)) else
             f"{out} = {name}.float() * {value}"),
        ]  # fmt: skip
    else:
        lines = [
            (0, f"{value} = {name}.reshape(-1)[:4].tolist()"),
            (0, f"{out} = {name}.float() + sum({value}) / len({value})"),
        ]
    return Construct(_block(lines), (out,), (value,))


# ---------------------------------------------------------------- control flow operators


def cond(scope: Scope) -> Construct | None:
    name = scope.pick(both(floating, lambda t: t.numel() > 0))
    if name is None:
        return None
    rng, out = scope.rng, scope.new_name()
    then, other = _local(scope, "then"), _local(scope, "otherwise")
    pred = rng.choice([f"{name}.sum() > 0", f"{name}.shape[0] > 2" if scope.value(name).dim()
                       else f"{name} > 0"])  # fmt: skip
    lines = [
        (0, f"def {then}(t):"),
        (1, "return t.sin() + 1"),
        (0, f"def {other}(t):"),
        (1, "return t.cos() * 2"),
        (0, f"{out} = torch.cond({pred}, {then}, {other}, ({name},))"),
    ]
    return Construct(_block(lines), (out,))


def while_loop(scope: Scope) -> Construct | None:
    name = scope.pick(floating)
    if name is None:
        return None
    rng, out, count = scope.rng, scope.new_name(), scope.new_name()
    test, body = _local(scope, "test"), _local(scope, "body")
    limit = rng.choice([2, 3])
    lines = [
        (0, f"def {test}(i, t):"),
        (1, f"return i < {limit}"),
        (0, f"def {body}(i, t):"),
        (1, "return i + 1, t * 0.5 + 1"),
        (0, f"{count}, {out} = torch.while_loop({test}, {body}, (torch.tensor(0), {name}))"),
    ]
    return Construct(_block(lines), (out, count))


def inplace_helper(scope: Scope) -> Construct | None:
    inputs = [n for n in scope.names if n in scope.inputs and _nonbool(scope.value(n))]
    name = scope.rng.choice(inputs) if inputs else scope.pick(_nonbool)
    if name is None:
        return None
    rng = scope.rng
    t = scope.value(name)
    view = rng.choice(["", "[1:]", ".view(-1)", "[..., ::2]"] if t.dim() else [""])
    if rng.random() < 0.5:
        fn = _local(scope, "bump")
        lines = [
            (0, f"def {fn}(t):"),
            (1, rng.choice(["t.mul_(2)", "t.add_(1)", "t.clamp_(max=1)"])),
            (1, "return t"),
            (0, f"{scope.new_name()} = {fn}({name}{view})"),
        ]
        out = lines[-1][1].split(" = ")[0]
        return Construct(_block(lines), (out,))
    other = scope.pick(both(_nonbool, lambda u: u.shape == t.shape)) or name
    lines = [
        (0, f"for t in ({name}{view}, {other}):"),
        (1, rng.choice(["t.add_(1)", "t.mul_(-1)", "t.abs_()"])),
    ]
    return Construct(_block(lines))


CONSTRUCTS = {
    "try_except": (try_except, 3),
    "frame_list": (frame_list, 2),
    "frame_dict": (frame_dict, 2),
    "int_set": (int_set, 1),
    "outside_state": (outside_state, 3),
    "closure": (closure, 2),
    "user_class": (user_class, 2),
    "breaking_call": (breaking_call, 2),
    "range_loop": (range_loop, 2),
    "tensor_loop": (tensor_loop, 2),
    "value_branch": (value_branch, 2),
    "item_reads": (item_reads, 2),
    "cond": (cond, 1),
    "while_loop": (while_loop, 1),
    "inplace_helper": (inplace_helper, 2),
}

__all__ = ["CONSTRUCTS", "Construct"]
