"""The variables of a program being generated, and tests that pick among them.

Shared by the op tables (`generator.py`, `wide_ops.py`): a generator asks the scope
for a variable whose eager value passes a test (`scope.pick(both(floating, ranked(2)))`)
and writes an expression over it.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F  # noqa: N812 (programs spell it F)


class Scope:
    """Variables of a program being generated, with their eager values per call."""

    def __init__(self, rng: random.Random, envs: list[dict]):
        self.rng = rng
        self.envs = envs  # one {name: value} per call, executed in order
        self.names: list[str] = [n for n, v in envs[0].items() if isinstance(v, torch.Tensor)]
        self.counter = 0
        self.inputs: set[str] = set(self.names)

    def value(self, name: str) -> torch.Tensor:
        """The variable's value at the first call's sizes."""
        return self.envs[0][name]

    def pick(self, accept=lambda t: True) -> str | None:
        """A random variable whose (first-call) value satisfies `accept`, newest favoured."""
        fits = [n for n in self.names if accept(self.value(n))]
        if not fits:
            return None
        if self.rng.random() < 0.5:
            return fits[-1]
        return self.rng.choice(fits)

    def dim(self, name: str) -> int:
        """A random valid dim of a variable (sometimes negative)."""
        ndim = self.value(name).dim()
        d = self.rng.randrange(max(ndim, 1))
        return d - ndim if self.rng.random() < 0.3 and ndim else d

    def steady_rank(self, name: str) -> bool:
        """Whether the variable has one rank at every call (not after a `squeeze_()` or a branch)."""
        return len({env[name].dim() for env in self.envs}) == 1

    def least_size(self, name: str, d: int) -> int:
        """The variable's smallest size of dim `d` over the calls."""
        return min(env[name].shape[d] for env in self.envs)

    def keep(self, text: str, new_names: list[str]) -> bool:
        """Run `text` at every call; when eager runs it, keep its effects and `new_names`."""
        envs = runs_everywhere(text, self.envs)
        if envs is None:
            return False
        self.envs = envs
        self.names += new_names
        return True

    def new_name(self) -> str:
        self.counter += 1
        return f"v{self.counter}"


def floating(t):
    return t.is_floating_point()


def integral(t):
    return not t.is_floating_point() and t.dtype != torch.bool


def ranked(k):
    return lambda t: t.dim() >= k


def both(*tests):
    return lambda t: all(test(t) for test in tests)


# The largest eager value a program may make. A seed whose statement makes a larger
# one (an `outer` of a 20,000-element selection: 1.6 GB) is not generated: `generate`
# raises ValueTooLarge and the driver records the seed as skipped. The rule only fires
# on such values, so every other seed's program is the one it always was.
MAX_VALUE_BYTES = 256 << 20


class ValueTooLarge(Exception):
    """A statement's eager value exceeds MAX_VALUE_BYTES: the seed's program is skipped."""


def runs_everywhere(statement: str, envs: list[dict]) -> list[dict] | None:
    """Each env after running `statement` there, or None when eager raises at some call.
    Raises ValueTooLarge when a value exceeds MAX_VALUE_BYTES at some call."""
    results = []
    for env in envs:
        trial = dict(env)
        try:
            exec(statement, {"torch": torch, "F": F}, trial)
        except Exception:
            return None
        check_sizes(statement, trial)
        results.append(trial)
    return results


def check_sizes(statement: str, env: dict) -> None:
    for name, value in env.items():
        if isinstance(value, torch.Tensor):
            size = value.numel() * value.element_size()
            if size > MAX_VALUE_BYTES:
                raise ValueTooLarge(
                    f"{name} is {size / 2**20:.0f} MiB (limit {MAX_VALUE_BYTES >> 20} MiB) "
                    f"after: {statement.strip()[:120]}"
                )
