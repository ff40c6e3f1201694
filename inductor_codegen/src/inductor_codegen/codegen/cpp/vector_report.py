"""Which generated kernels the C++ compiler vectorized, from its own report.

A generated file is compiled again (object only) with gcc's `-fopt-info-vec-optimized`
and `-fopt-info-loop-optimized`; each note names a source line, hence a kernel. A
kernel counts as vectorized when one of its loops is ("loop vectorized") or when a
loop of it became library calls only (a copy or a fill turned into memcpy/memset,
which are vector code). Basic-block (SLP) notes do not count: gcc reports one for
the OpenMP argument block of nearly every parallel kernel. Identical code folding is
off for the report: two kernels of one body would otherwise be compiled (and
reported) once.

    reports = kernel_vector_notes(path_to_generated_cpp)
    scalar = [name for name, notes in reports.items() if not notes]
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from inductor_codegen.codegen.cpp.build import CompilerConfig

__all__ = ["kernel_vector_notes"]

_KERNEL = re.compile(r'^extern "C" void (kernel_\w+)')
_NOTE = re.compile(r"^[^:]+:(\d+):\d+: optimized: (.*)$")
_LIBRARY_ONLY = re.compile(r"split to 0 loops and \d+ library calls")


def _counts(message: str) -> bool:
    return "loop vectorized" in message or _LIBRARY_ONLY.search(message) is not None


def kernel_vector_notes(source: Path, config: CompilerConfig | None = None) -> dict[str, list]:
    """For each kernel of the generated file `source`, the compiler's notes that one of
    its loops is vectorized (empty: the compiler left every loop of it scalar)."""
    config = config or CompilerConfig()
    flags = [f for f in config.flags if f not in ("-shared", "-w")]
    with tempfile.TemporaryDirectory() as scratch:
        report = subprocess.run(
            [config.cxx, *flags, "-c", str(source), "-o", str(Path(scratch) / "kernel.o"),
             "-fno-ipa-icf", "-fopt-info-vec-optimized", "-fopt-info-loop-optimized"],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
    notes = []
    for line in report.splitlines():
        match = _NOTE.match(line)
        if match and _counts(match.group(2)):
            notes.append((int(match.group(1)), line))
    lines = Path(source).read_text().splitlines()
    starts = [(i + 1, m.group(1)) for i, text in enumerate(lines) if (m := _KERNEL.match(text))]
    ends = [start for start, _ in starts[1:]] + [len(lines) + 1]
    return {
        name: [note for number, note in notes if start <= number < end]
        for (start, name), end in zip(starts, ends)
    }
