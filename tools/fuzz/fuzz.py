"""Differential fuzzer: random programs under ember's backends against eager PyTorch.

    python tools/fuzz/fuzz.py --seconds 300 --backend inductor
    python tools/fuzz/fuzz.py --seed 100 --count 50 --backend aot_eager,inductor
    python tools/fuzz/fuzz.py --seeds 56,319 --backend inductor
    python tools/fuzz/fuzz.py --replay tools/fuzz/found/silent-inductor-seed12-value.py
    nox -s fuzz -- --seconds 300 --seed 0

Program S is generated from seed S alone, so `--seed S --count N` reruns exactly
programs S..S+N-1; `--seconds N` runs S, S+1, ... until the time is up. Each
mismatch is shrunk (shrink.py) and saved as a runnable reproducer under --out.
Exit code 1 when a silent mismatch (a wrong result) was found. See README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import guard_programs  # noqa: E402
from generator import DEFAULT_PROFILE, PROFILES, generate  # noqa: E402
from oracle import DEVICE, KINDS, Mismatch, check_source, quiet  # noqa: E402
from program import Program  # noqa: E402
from scope import MAX_VALUE_BYTES, ValueTooLarge  # noqa: E402
from shrink import render_any as render  # noqa: E402
from shrink import shrink  # noqa: E402

# Profiles: the op tables of generator.PROFILES, and `guards` (guard_programs.py: one
# compiled program called 4-8 times, one thing it reads changed between calls).
PROFILE_NAMES = (*sorted(PROFILES), "guards")

BACKENDS = ("eager", "aot_eager", "inductor")
UNSHRUNK_KINDS = ("precision",)  # saved as generated: numerics, not bugs (oracle.py)


@dataclass
class Summary:
    """What a run found: programs run, mismatching programs by (backend, kind), reproducers."""

    programs: int = 0
    seeds: list = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # (backend, kind) -> programs
    reproducers: list = field(default_factory=list)  # dicts: kind, backend, seed, path, mismatch
    crashes: list = field(default_factory=list)  # seeds whose generation or oracle itself failed
    skipped: list = field(default_factory=list)  # seeds whose program makes a too large value

    def silent(self) -> list[dict]:
        return [r for r in self.reproducers if r["kind"] == "silent"]

    def report(self) -> str:
        lines = [f"programs run: {self.programs} (seeds {_span(self.seeds)})"]
        backends = sorted({backend for backend, _ in self.counts})
        lines.append("mismatching programs by backend and kind:")
        for backend in backends:
            cells = ", ".join(f"{kind} {self.counts[backend, kind]}" for kind in KINDS)
            lines.append(f"  {backend}: {cells}")
        if not backends:
            lines.append("  none")
        for r in self.reproducers:
            lines.append(f"  {r['kind']:<13} {r['backend']:<9} seed {r['seed']:<6} {r['path']}")
            lines.append(f"      {r['mismatch']}")
        if self.crashes:
            lines.append(f"fuzzer crashes (seeds): {self.crashes}")
        if self.skipped:
            lines.append(f"skipped (a value over {MAX_VALUE_BYTES >> 20} MiB): {self.skipped}")
        return "\n".join(lines)


def _span(seeds: list) -> str:
    return f"{seeds[0]}..{seeds[-1]}" if seeds else "none"


@dataclass
class Options:
    backends: tuple = BACKENDS
    out: Path = HERE / "found"
    shrink: bool = True
    shrink_budget_s: float = 120.0
    shrinks_per_signature: int = 2  # later mismatches of a known signature are saved unshrunk
    verbose: bool = True
    profile: str = DEFAULT_PROFILE  # generator.PROFILES
    dynamic: bool | None = None  # ember.compile(dynamic=...)


def check_program(program: Program, backend: str) -> list[Mismatch]:
    """The oracle's mismatches for one program and backend."""
    with quiet():
        return check_source(render(program, backend), backend)


def save_reproducer(
    program: Program, backend: str, mismatch: Mismatch, out: Path, note: str
) -> Path:
    """Write `program` as a runnable file named after the mismatch; its docstring says what differs."""
    out.mkdir(parents=True, exist_ok=True)
    name = f"{mismatch.kind}-{backend}-seed{program.seed}-{mismatch.check}.py"
    header = (
        f"Fuzzer reproducer (seed {program.seed}, backend {backend}, {note}).\n\n"
        f"{mismatch.describe()}\n\nRun: python {name}  (prints every mismatch)"
    )
    path = out / name
    path.write_text(render(program, backend, header=header.replace('"""', "'''")))
    return path


def fuzz_one(seed: int, options: Options, summary: Summary, shrunk: Counter) -> None:
    """Generate program `seed`, check it under each backend, shrink and save what differs.
    A seed whose program would make a value over MAX_VALUE_BYTES is recorded as skipped."""
    try:
        if options.profile == "guards":
            program = guard_programs.generate(seed).replace(dynamic=options.dynamic)
        else:
            program = generate(seed, profile=options.profile).replace(dynamic=options.dynamic)
    except ValueTooLarge as error:
        summary.skipped.append(seed)
        if options.verbose:
            print(f"  seed {seed}: skipped: {error}")
        return
    summary.programs += 1
    summary.seeds.append(seed)
    for backend in options.backends:
        mismatches = check_program(program, backend)
        for kind in {m.kind for m in mismatches}:
            summary.counts[backend, kind] += 1
        seen = set()
        for mismatch in mismatches:
            if mismatch.signature() in seen:
                continue
            seen.add(mismatch.signature())
            _record(program, backend, mismatch, options, summary, shrunk)


def _record(program, backend, mismatch, options, summary, shrunk) -> None:
    small, note = program, "not shrunk"
    wanted = options.shrink and mismatch.kind not in UNSHRUNK_KINDS
    if wanted and shrunk[mismatch.signature()] < options.shrinks_per_signature:
        shrunk[mismatch.signature()] += 1
        small, tries = shrink(program, backend, mismatch, options.shrink_budget_s)
        note = f"shrunk in {tries} tries"
        again = [m for m in check_program(small, backend) if m.signature() == mismatch.signature()]
        mismatch = again[0] if again else mismatch
    path = save_reproducer(small, backend, mismatch, options.out, note)
    summary.reproducers.append(
        {"kind": mismatch.kind, "backend": backend, "seed": program.seed, "path": str(path),
         "mismatch": mismatch.describe()[:300]}
    )  # fmt: skip
    if options.verbose:
        print(f"  seed {program.seed} {backend}: {mismatch.describe()[:200]}\n    -> {path}")


def run(seeds, options: Options, seconds: float | None = None) -> Summary:
    """Fuzz the given seeds in order (stopping after `seconds` when set)."""
    summary, shrunk = Summary(), Counter()
    began = time.monotonic()
    for seed in seeds:
        if seconds is not None and time.monotonic() - began > seconds:
            break
        try:
            fuzz_one(seed, options, summary, shrunk)
        except Exception as error:  # a fuzzer bug must not end the run: report it
            summary.crashes.append(seed)
            print(f"  seed {seed}: fuzzer crashed: {type(error).__name__}: {error}")
        if options.verbose and summary.programs % 25 == 0:
            print(f"[{time.monotonic() - began:.0f}s] {summary.programs} programs", flush=True)
    return summary


def replay(path: Path, backends) -> int:
    """Print the mismatches of a saved reproducer under each backend."""
    source = path.read_text()
    found = 0
    for backend in backends:
        with quiet():
            mismatches = check_source(source, backend)
        for m in mismatches:
            print(m.describe())
        found += len(mismatches)
        print(f"{backend}: {len(mismatches)} mismatches")
    return 1 if found else 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, help="run fresh seeds until this many seconds")
    parser.add_argument("--count", type=int, help="run exactly this many programs")
    parser.add_argument("--seeds", help="run exactly these programs (a comma list of seeds)")
    parser.add_argument("--seed", type=int, help="first program's seed (default: from the clock)")
    parser.add_argument("--backend", default="all", help=f"comma list of {BACKENDS} or 'all'")
    parser.add_argument("--out", type=Path, default=HERE / "found", help="reproducer folder")
    parser.add_argument("--no-shrink", action="store_true", help="save reproducers unshrunk")
    parser.add_argument("--shrink-budget", type=float, default=120.0, help="seconds per shrink")
    parser.add_argument("--shrinks-per-signature", type=int, default=2)
    parser.add_argument("--replay", type=Path, help="check one saved reproducer and exit")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--profile", default=DEFAULT_PROFILE, choices=PROFILE_NAMES,
        help="generator tables: base (the ops of earlier runs), full (regions, branches, ...), "
        "wide (full with larger sizes, more layouts, nn/scatter/sort ops), python (full with "
        "Python constructs: try/except, containers, closures, loops, classes, outside state), "
        "guards (one program called 4-8 times, one thing it reads changed between calls)",
    )  # fmt: skip
    parser.add_argument(
        "--dynamic", default="auto", choices=("auto", "true", "false"),
        help="ember.compile(dynamic=): auto (None: specialize, then dynamic on a change), true, false",
    )  # fmt: skip
    parser.add_argument(
        "--device", default="cpu", help="where inputs live: cpu, or cuda (Triton kernels)"
    )
    return parser.parse_args(argv)


def backends_of(text: str) -> tuple[str, ...]:
    chosen = BACKENDS if text == "all" else tuple(text.split(","))
    unknown = [b for b in chosen if b not in BACKENDS]
    if unknown:
        raise SystemExit(f"unknown backend(s) {unknown}; choose from {BACKENDS} or 'all'")
    return chosen


def main(argv: list[str]) -> int:
    args = parse(argv)
    backends = backends_of(args.backend)
    DEVICE["name"] = args.device
    if args.replay:
        return replay(args.replay, backends)
    first = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    options = Options(
        backends=backends,
        out=args.out,
        shrink=not args.no_shrink,
        shrink_budget_s=args.shrink_budget,
        shrinks_per_signature=args.shrinks_per_signature,
        verbose=not args.quiet,
        profile=args.profile,
        dynamic={"auto": None, "true": True, "false": False}[args.dynamic],
    )
    if args.seeds:
        seeds, seconds = [int(s) for s in args.seeds.split(",")], args.seconds
        first = seeds[0]
    elif args.count is not None:
        seeds, seconds = range(first, first + args.count), args.seconds
    else:
        seeds, seconds = _forever(first), args.seconds if args.seconds is not None else 60.0
    print(
        f"fuzzing from seed {first}, backends {', '.join(backends)}, profile {args.profile}, "
        f"dynamic {args.dynamic}, out {args.out}"
    )
    summary = run(seeds, options, seconds)
    print(summary.report())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(
        json.dumps(
            {"programs": summary.programs, "first_seed": first, "backends": backends,
             "profile": args.profile, "dynamic": args.dynamic,
             "counts": {f"{b}/{k}": n for (b, k), n in sorted(summary.counts.items())},
             "reproducers": summary.reproducers, "crashes": summary.crashes,
             "skipped": summary.skipped},
            indent=1,
        )
    )  # fmt: skip
    return 1 if summary.silent() else 0


def _forever(first: int):
    seed = first
    while True:
        yield seed
        seed += 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
