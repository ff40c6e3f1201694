"""The check the guard-set tests share: the generated function against the reference."""

from __future__ import annotations

from typing import Any

from guards import GuardSet


def check_both(guards: GuardSet, L: dict[str, Any], G: dict[str, Any] | None = None):  # noqa: N803
    """Run the generated check and the reference; they must agree. Returns (ok, why)."""
    G = {} if G is None else G  # noqa: N806
    compiled = guards.compile()
    ok = compiled(L, G)
    why = compiled.why_failed(L, G)
    assert ok == (why is None), (ok, why, compiled.source)
    assert guards.why_failed(L, G) == why
    return ok, why
