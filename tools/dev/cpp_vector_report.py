"""Which generated C++ kernels does the installed compiler leave without a vectorized loop?

Compiles each named model of `benchmarks/models.py` (MODELS) with ember's inductor
backend, in inference and in training (forward and backward), then asks the compiler
for its vectorization report on every generated file (see
`inductor_codegen.codegen.cpp.vector_report`) and lists, per model and mode, the
kernels left scalar, largest first (elements: the product of the constant trip counts
of the deepest loop nest), with the source of the largest ones.

    python tools/dev/cpp_vector_report.py gpt2,bert,t5 --show 3
    CXX=g++-13 python tools/dev/cpp_vector_report.py cnn --modes training

Run from the repository root with every package's `src` on `PYTHONPATH`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

_LOOP = re.compile(r"^(\s*)for \(int64_t \w+ = [^;]+; \w+ < ([^;]+); ")


def loop_elements(body: str) -> int:
    """The most iterations any statement of `body` runs (constant trip counts only)."""
    stack: list[tuple[int, int]] = []
    most = 1
    for line in body.splitlines():
        match = _LOOP.match(line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        bound = match.group(2).strip()
        stack.append((indent, int(bound) if bound.isdigit() else 1))
        product = 1
        for _, trips in stack:
            product *= trips
        most = max(most, product)
    return most


def kernel_sources(source: Path) -> dict[str, str]:
    """The text of each kernel of a generated file."""
    text = source.read_text()
    parts = re.split(r'(?m)^(?=extern "C" void kernel_)', text)[1:]
    return {
        re.match(r'extern "C" void (kernel_\w+)', p).group(1): p.split("\n}\n")[0] + "\n}"
        for p in parts
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", help="comma-separated names of benchmarks/models.py MODELS")
    parser.add_argument("--modes", default="inference,training")
    parser.add_argument("--show", type=int, default=1, help="sources shown per model and mode")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    cache = Path(tempfile.mkdtemp(prefix="ember-vector-report-"))
    os.environ["EMBER_CACHE_DIR"] = str(cache)
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import models

    import ember
    from inductor_codegen.codegen.cpp.build import CompilerConfig
    from inductor_codegen.codegen.cpp.vector_report import kernel_vector_notes

    config = CompilerConfig(cxx=os.environ.get("CXX", "g++"))
    torch.set_num_threads(args.threads)
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            before = set(cache.rglob("*.cpp"))
            case = models.MODELS[name]()
            ember.reset()
            compiled = ember.compile(case.model)
            if mode == "inference":
                case.model.eval()
                with torch.no_grad():
                    compiled(*case.inputs)
            else:
                case.model.train()
                case.loss(compiled(*case.inputs)).backward()
            total, scalar = 0, []
            for source in sorted(set(cache.rglob("*.cpp")) - before):
                bodies = kernel_sources(source)
                for kernel, notes in kernel_vector_notes(source, config).items():
                    total += 1
                    if not notes:
                        scalar.append((loop_elements(bodies[kernel]), kernel, bodies[kernel]))
            scalar.sort(reverse=True)
            sizes = [elements for elements, _, _ in scalar[:8]]
            print(f"== {name} {mode}: {len(scalar)} of {total} kernels without a vectorized loop;"
                  f" largest (elements): {sizes}")  # fmt: skip
            for _, _, body in scalar[: args.show]:
                print(body)
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
