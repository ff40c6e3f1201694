"""The Triton kernels ember generates for a benchmark model, on a machine without a GPU.

    python tools/dev/triton_kernels.py llama train [--top 12] [--batch 2]

Builds `benchmarks/gpu_bench.py`'s model on the CPU (bf16 for `infer`, float32 under
bf16 autocast for `train`), compiles its graphs with the Triton generator (kernels
written and printed, not run: the graphs themselves run eagerly), and prints the
largest kernels by the elements they store, each with its launch size, so that
their index math and tiling can be read.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402


def kernels_of(name: str, mode: str, batch: int) -> list[str]:
    import gpu_bench

    import ember
    from aot_autograd import aot_graph
    from aot_autograd.partitioners import min_cut_rematerialization_partition
    from ember.backends import _gpu_table
    from inductor_codegen import compile_graph

    sources: list[str] = []

    def compile_only(graph, inputs):
        compiled = compile_graph(graph, inputs, options={"device_codegen": "triton"})
        sources.extend(compiled.artifact("codegen").split("@triton.jit")[1:])
        return graph

    def backend(gm, example_inputs):
        return aot_graph(
            gm,
            example_inputs,
            fw_compiler=compile_only,
            decompositions=_gpu_table(),
            partition_fn=min_cut_rematerialization_partition,
        )

    torch.manual_seed(0)
    model, inputs = gpu_bench.MODELS[name][0]()
    inputs = tuple(x[:batch] if x.dim() > 1 else x for x in inputs)
    if mode == "infer":
        model = model.eval().to(torch.bfloat16)
        inputs = tuple(x.to(torch.bfloat16) if x.is_floating_point() else x for x in inputs)
    compiled = ember.compile(model, backend=backend)
    if mode == "infer":
        with torch.no_grad():
            compiled(*inputs)
    else:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = gpu_bench.first_tensor(compiled(*inputs))
            loss = out.float().sin().mean()
        loss.backward()
    return sources


def size(source: str) -> int:
    numbers = [int(n) for n in re.findall(r"[xy]numel = (\d+)", source)]
    rows = [int(n) for n in re.findall(r"r\d+index < (\d+)", source)]
    total = 1
    for n in numbers:
        total *= n
    return total * max(rows, default=1)


def main(argv: list[str]) -> None:
    name, mode = argv[0], argv[1]
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 12
    batch = int(argv[argv.index("--batch") + 1]) if "--batch" in argv else 2
    sources = kernels_of(name, mode, batch)
    print(f"{len(sources)} kernels; the {top} largest by elements stored:")
    for source in sorted(sources, key=size, reverse=True)[:top]:
        print(f"---- {size(source)} elements")
        print(source.strip())


if __name__ == "__main__":
    main(sys.argv[1:])
