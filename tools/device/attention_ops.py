"""The attention ops in ember's ATen graphs of a transformers model on the GPU (bf16 inference)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_bench  # noqa: E402

import aot_autograd  # noqa: E402
import ember  # noqa: E402

WORDS = ("attention", "bmm", "softmax", "mm", "baddbmm")

for name in sys.argv[1].split(","):
    torch.manual_seed(0)
    model, inputs = gpu_bench.MODELS[name][0]()
    model = model.to("cuda").eval().to(torch.bfloat16)
    inputs = tuple(x[:2].to("cuda") for x in inputs)
    counts: collections.Counter = collections.Counter()
    plain = aot_autograd.aot_graph

    def spy(gm, example_inputs, counts=counts, plain=plain, **kwargs):
        compiler = kwargs["fw_compiler"]

        def record(graph, graph_inputs):
            for node in graph.graph.nodes:
                if node.op == "call_function" and any(w in str(node.target) for w in WORDS):
                    counts[str(node.target)] += 1
            return compiler(graph, graph_inputs)

        kwargs["fw_compiler"] = record
        return plain(gm, example_inputs, **kwargs)

    aot_autograd.aot_graph = spy
    options = {}
    if "--keep-sdpa" in sys.argv:
        import prim_decomp

        table = prim_decomp.inductor_default
        options["decompositions"] = table.without(
            torch.ops.aten.scaled_dot_product_attention.default
        )
    with torch.no_grad():
        ember.compile(model, backend="inductor", options=options)(*inputs)
    aot_autograd.aot_graph = plain
    print(name, sys.argv[2:], dict(counts))
