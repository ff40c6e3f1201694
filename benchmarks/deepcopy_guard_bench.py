"""Cost of DeepcopyContentsGuard per call: the full walk against the fast check.

    python benchmarks/deepcopy_guard_bench.py

Objects: a transformers LlamaConfig (its class answers attribute lookups itself, so
deepcopy's lookups on it are made on every call) and a plain object holding as many
attributes, three of them small dicts and lists. Microseconds a call, best of 5.
"""

from __future__ import annotations

import timeit

from guards import DeepcopyContentsGuard, GuardSet, LocalSource, contents_snapshot
from guards.deepcopy_contents import copied_objects


class Plain:
    def __init__(self, values: dict) -> None:
        self.__dict__.update(values)


def _best_us(fn, number: int = 2000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    import transformers

    config = transformers.LlamaConfig()
    plain = Plain({k: (dict(v) if isinstance(v, dict) else v) for k, v in vars(config).items()})
    print("| object | objects walked | full walk us | generated check, fast path us |")
    print("|---|---|---|---|")
    for name, obj in (("LlamaConfig", config), ("plain object, same attributes", plain)):
        check = GuardSet([DeepcopyContentsGuard.of(LocalSource("c"), obj)]).compile()
        frame = {"c": obj}
        assert check(frame, {}) and check(frame, {})
        items = len(copied_objects(obj))
        full = _best_us(lambda obj=obj: contents_snapshot(obj))
        fast = _best_us(lambda check=check, frame=frame: check(frame, {}))
        print(f"| {name} | {items} | {full:.1f} | {fast:.1f} |")


if __name__ == "__main__":
    main()
