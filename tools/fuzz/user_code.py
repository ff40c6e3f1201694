"""Module-level user code a program of the `python` profile may use: its own exception
class, user classes, helpers that break the graph, and state living outside the frame.

A program names the definitions it uses (`Program.definitions`); `render_definitions`
writes them above `make_inputs`, each once and in the order of `DEFINITIONS`, followed
by the two functions the oracle calls around each call of the program:

    LOG = []                                  # an outside list the program appends to

    def reset_state():                        # called before each call, eager and compiled
        LOG.clear()

    def outside_state():                      # compared with eager's after each call
        return {"LOG": LOG}

The state is reset in place before every call (its identity never changes, so a guard on
it holds; a guard on its contents sees them as at import), so each call starts from the
same state in eager and compiled code, and generation (which runs each call from a fresh
state too) knows what the program does at every call.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Definition:
    """A piece of module-level user code: its text, what it needs, and, for outside state,
    how `reset_state` puts it back and how `outside_state` shows it."""

    text: str
    needs: tuple[str, ...] = ()
    reset: str = ""  # statements restoring the state as at import (state only)
    shown: str = ""  # the expression outside_state() reports (state only)


DEFINITIONS: dict[str, Definition] = {
    "FuzzError": Definition(
        '''class FuzzError(Exception):
    """The program's own exception (raised on sizes, never on values)."""'''
    ),
    "Scaler": Definition(
        '''class Scaler:
    """A user class: state, a method writing its own attribute, properties."""

    def __init__(self, factor):
        self.factor = factor
        self.calls = 0

    @property
    def double(self):
        return self.factor * 2

    @classmethod
    def unit(cls):
        return cls(1)

    def apply(self, t):
        self.calls += 1
        return t * self.factor'''
    ),
    "Shifted": Definition(
        '''class Shifted(Scaler):
    """A subclass calling its base through super()."""

    def apply(self, t):
        return super().apply(t) + self.calls''',
        needs=("Scaler",),
    ),
    "SINK": Definition("import io\n\nSINK = io.StringIO()  # where helpers print (not compared)"),
    "printing_helper": Definition(
        '''def printing_helper(t):
    """Breaks the graph: print is not traced."""
    print("helper", tuple(t.shape), file=SINK)
    return t + 1''',
        needs=("SINK",),
    ),
    "item_helper": Definition(
        '''def item_helper(t):
    """Breaks the graph: a value read into Python and used as a number."""
    top = t.float().abs().amax().item() if t.numel() else 0.0
    return t * (1.0 if top > 2 else 0.5)'''
    ),
    "checked_sum": Definition(
        '''def checked_sum(t, limit):
    """Raises FuzzError when `t` has more than `limit` elements (a size, not a value)."""
    if t.numel() > limit:
        raise FuzzError(f"{t.numel()} elements over {limit}")
    return t.sum()''',
        needs=("FuzzError",),
    ),
    "append_sum": Definition(
        '''def append_sum(log, t):
    """Writes to a list it is given (the caller's outside state)."""
    log.append(t.sum())
    return log'''
    ),
    "LOG": Definition(
        "LOG = []  # an outside list the program appends to",
        reset="LOG.clear()",
        shown="LOG",
    ),
    "TABLE": Definition(
        'TABLE = {"hits": 0}  # an outside dict the program updates',
        reset='TABLE.clear()\nTABLE["hits"] = 0',
        shown="TABLE",
    ),
    "COUNT": Definition(
        "COUNT = 0  # an outside int the program rebinds (`global COUNT`)",
        reset='globals()["COUNT"] = 0',
        shown="COUNT",
    ),
    "SCALER": Definition(
        "SCALER = Scaler(3)  # an outside object the program mutates",
        needs=("Scaler",),
        reset="SCALER.__init__(3)",
        shown="vars(SCALER)",
    ),
}


def closure(names) -> list[str]:
    """`names` and every definition they need, in the order of DEFINITIONS."""
    wanted: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name not in DEFINITIONS:
            raise KeyError(f"unknown user definition {name!r}; choose from {sorted(DEFINITIONS)}")
        if name not in wanted:
            wanted.add(name)
            pending += DEFINITIONS[name].needs
    return [name for name in DEFINITIONS if name in wanted]


def render_definitions(names) -> str:
    """The module-level code of `names` (and what they need), with `reset_state` and
    `outside_state` over the outside state among them; "" when `names` is empty."""
    chosen = closure(names)
    if not chosen:
        return ""
    parts = [DEFINITIONS[name].text for name in chosen]
    state = [name for name in chosen if DEFINITIONS[name].shown]
    resets = [line for name in state for line in DEFINITIONS[name].reset.splitlines()]
    parts.append(
        "def reset_state():\n"
        '    """The outside state as at import (run before each call)."""\n'
        + "".join(f"    {line}\n" for line in resets)
        + ("" if resets else "    pass\n")
    )
    shown = ", ".join(f'"{name}": {DEFINITIONS[name].shown}' for name in state)
    parts.append(
        "def outside_state():\n"
        '    """What the program may have changed outside its frame (compared with eager)."""\n'
        f"    return {{{shown}}}"
    )
    return "\n\n\n".join(parts) + "\n"


__all__ = ["DEFINITIONS", "Definition", "closure", "render_definitions"]
