"""Guard check with and without stable reads (guards/stable_reads.py), hot and in situ.

For each model of benchmarks/models.py named on the command line (default: llama,
bert, gpt2; tiny configs, eval), this compiles the model twice with
`ember.compile(model, backend="eager")`, once under `use_stable_reads(False)` (one
function checking every guard, as before) and once with stable reads, and times
the entry's guard function:

- "in situ": the check as the real call path runs it (wrapped around the entry's
  check, calls of the two compiled models interleaved), after the model's own ops
  left the caches cold: the median over the calls;
- "hot": the check alone in a loop on the frame of one call (best of 7 runs);
- "full + snapshot": the stable-reads variant's full check, which runs after a
  watched dict was written (best of 7 runs);
- "fast calls": the share of checks that took the fast body.

Times are the thread's CPU time (`time.thread_time`), which waiting for a core on
a shared machine does not inflate. Needs `transformers`, and every package's src
folder on PYTHONPATH.

    python benchmarks/stable_reads_bench.py [llama bert gpt2 ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

CLOCK = time.thread_time
CALLS = 150


def _state(check):
    found = [v for k, v in check.__globals__.items() if k.startswith("___stable_reads")]
    return found[0] if found else None


def _best(function, args, number: int = 500) -> float:
    best = float("inf")
    for _ in range(7):
        start = CLOCK()
        for _ in range(number):
            function(*args)
        best = min(best, (CLOCK() - start) / number)
    return best * 1e6


def _compile(model, inputs, stable: bool):
    import ember
    from guards import use_stable_reads

    with use_stable_reads(stable):
        compiled = ember.compile(model, backend="eager")
        compiled(*inputs)
    runner = compiled.__dict__["_ember_compiled"]
    guards = runner.entries[0].guards
    check = guards.check
    times: list[float] = []
    counts = {"full": 0}
    if "guard_check_full" in check.__globals__:
        full = check.__globals__["guard_check_full"]

        def counted(L, G, full=full):  # noqa: N803
            counts["full"] += 1
            return full(L, G)

        check.__globals__["guard_check_full"] = counted

    def timed(L, G):  # noqa: N803
        start = CLOCK()
        result = check(L, G)
        times.append(CLOCK() - start)
        return result

    guards.check = timed
    frame = (runner.frame.bind(inputs, {}), runner.frame.globals)
    return compiled, guards, check, times, counts, frame


def model_rows(name: str) -> list[str]:
    from models import MODELS

    case = MODELS[name]()
    model = case.model.eval()
    variants = {stable: _compile(model, case.inputs, stable) for stable in (False, True)}
    for _ in range(20):
        for compiled, *_ in variants.values():
            compiled(*case.inputs)
    for _, _, _, times, counts, _ in variants.values():
        times.clear()
        counts["full"] = 0
    for _ in range(CALLS):
        for compiled, *_ in variants.values():
            compiled(*case.inputs)
    rows = []
    for stable, (_, guards, check, times, counts, frame) in variants.items():
        assert check(*frame), guards.why_failed(*frame)
        times.sort()
        in_situ = times[len(times) // 2] * 1e6
        hot = _best(check, frame)
        full, fast = "", ""
        if stable:
            state = _state(check)
            fast = f"{100 * (1 - counts['full'] / max(len(times), 1)):.0f}%"
            full_check = check.__globals__["guard_check_full"]
            if state is not None:
                from guards import stable_reads

                give_up, stable_reads.GIVE_UP_AFTER = stable_reads.GIVE_UP_AFTER, 1 << 62
                try:  # NOTE: full checks back to back would otherwise stop the snapshots
                    full = f"{_best(full_check, frame, 100):.1f}"
                finally:
                    stable_reads.GIVE_UP_AFTER = give_up
        label = "stable reads" if stable else "one function"
        rows.append(
            f"| {name} | {label} | {len(guards)} | {in_situ:.1f} | {hot:.1f} | {full} | {fast} |"
        )
    return rows


def main() -> None:
    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).parent))
    names = sys.argv[1:] or ["llama", "bert", "gpt2"]
    print(f"torch {torch.__version__}; guard check in microseconds of thread CPU time\n")
    print(
        "| model | guard function | guards | in situ (median) | hot | full + snapshot | fast calls |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in names:
        for row in model_rows(name):
            print(row)


if __name__ == "__main__":
    main()
