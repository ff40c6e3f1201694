"""Layer norm, RMS norm and cross-entropy training steps on the GPU: achieved bandwidth of
eager, torch.compile and ember, in one run.

    python benchmarks/norm_ce_bench.py [OUT_DIR] [--patterns layer_norm,rms_norm,cross_entropy]
                                       [--hidden 768,1024,2048,4096] [--rows 8192]
                                       [--vocab 50257] [--tokens 4096]
    TRITON_INTERPRET=1 python benchmarks/norm_ce_bench.py --check   # no GPU: tiny sizes

Each pattern is a forward and a backward (`torch.autograd.grad` of a fixed upstream
gradient), in bfloat16:

* layer_norm: `F.layer_norm` over [rows, hidden] with weight and bias; the backward gives
  dx, dweight and dbias. Ember computes dweight and dbias as partials inside the row
  kernel that writes dx (inductor_codegen.column_partials), so dy and x are read once.
* rms_norm: RMS norm as Hugging Face models write it (x * rsqrt(mean(x^2) + eps) * w).
* cross_entropy: `F.cross_entropy` of [tokens, vocab] logits (upcast to float32 as GPT2's
  loss does); ember's forward takes the max and the sum of exponentials in one online
  pass over each row.

Per (pattern, size, backend): device time of the whole step (the sum of its kernel times
from the profiler, so the host's launch work does not count), the least bytes the step
must move (layer norm: x read and y written forward; dy and x read and dx written
backward; cross-entropy: the logits read forward, read again and their gradient written
backward), the GB/s this gives, and the same over the GB/s of one device-to-device copy
of as many bytes (timed the same way). Writes norm_ce_bench.json and norm_ce_bench.md
into OUT_DIR (default $OUT, else the current folder). Exits 0 without a GPU unless
--check is given, which runs each pattern once at tiny sizes through ember's Triton
generator (under TRITON_INTERPRET=1 on the CPU) against eager, and times nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

BF16 = torch.bfloat16


# ---------------------------------------------------------------- patterns


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden: int, device, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden, device=device, dtype=dtype))
        self.eps = 1e-6

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def layer_norm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b)


def cross_entropy(logits, target):
    return F.cross_entropy(logits.float(), target)


class Step:
    """A forward (the function compiled) and its backward: `torch.autograd.grad` of the
    output with `upstream` as its gradient, for the inputs that require grad (and
    `params`). Returns the output and the gradients."""

    def __init__(self, forward, inputs, upstream=None, params=()):
        self.forward = forward
        self.inputs = inputs
        self.upstream = upstream
        self.wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        self.wrt += list(params)

    def __call__(self, forward=None):
        y = (self.forward if forward is None else forward)(*self.inputs)
        return (y, *torch.autograd.grad(y, self.wrt, self.upstream))


def make(pattern: str, size: int, extent: int, device: str, dtype=BF16):
    """(step, least bytes it moves) for one pattern and size: `size` is the hidden size
    (norms) or the vocabulary (cross-entropy), `extent` the rows (norms) or tokens."""
    g = torch.Generator(device=device).manual_seed(0)

    def randn(*shape, grad=False):
        t = torch.randn(*shape, generator=g, device=device).to(dtype)
        return t.requires_grad_(grad)

    if pattern == "layer_norm":
        x, dy = randn(extent, size, grad=True), randn(extent, size)
        w, b = randn(size, grad=True), randn(size, grad=True)
        return Step(layer_norm, (x, w, b), dy), 5 * x.numel() * x.element_size()
    if pattern == "rms_norm":
        x, dy = randn(extent, size, grad=True), randn(extent, size)
        norm = RMSNorm(size, device, dtype)
        with torch.no_grad():
            norm.weight.copy_(randn(size))
        return Step(norm, (x,), dy, norm.parameters()), 5 * x.numel() * x.element_size()
    if pattern == "cross_entropy":
        logits = randn(extent, size, grad=True)
        target = torch.randint(0, size, (extent,), generator=g, device=device)
        return Step(cross_entropy, (logits, target)), 3 * logits.numel() * logits.element_size()
    raise KeyError(pattern)


PATTERNS = ("layer_norm", "rms_norm", "cross_entropy")


def compiled(backend: str, fn):
    if backend == "eager":
        return fn
    if backend == "torch":
        torch._dynamo.reset()
        return torch.compile(fn)
    import ember

    ember.reset()
    return ember.compile(fn, backend="inductor")


def triton_backend(gm, example_inputs):
    """The inductor backend with its graphs compiled to Triton on any device (CPU tensors
    run under TRITON_INTERPRET=1)."""
    from aot_autograd import aot_graph
    from inductor_codegen import compile_graph
    from prim_decomp import inductor_default

    def part(graph, inputs):
        return compile_graph(graph, inputs, options={"device_codegen": "triton"})

    return aot_graph(
        gm,
        example_inputs,
        fw_compiler=part,
        bw_compiler=part,
        inference_compiler=part,
        decompositions=inductor_default,
    )


# ---------------------------------------------------------------- measuring


def run(pattern: str, size: int, extent: int, backends) -> list[dict]:
    from bandwidth_bench import copy_us, device_us

    step, nbytes = make(pattern, size, extent, "cuda")
    copy = copy_us(nbytes)
    expected = step()
    rows = []
    for backend in backends:
        forward = compiled(backend, step.forward)
        got = step(forward)
        error = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, expected))
        us, kernels = device_us(lambda forward=forward: step(forward))
        rows.append(
            {
                "pattern": pattern,
                "size": size,
                "extent": extent,
                "backend": backend,
                "us": us,
                "kernels": len(kernels),
                "bytes": nbytes,
                "gbps": nbytes / us / 1e3,
                "of_copy": copy / us,
                "max_error": error,
            }
        )
        print(
            f"{pattern:14} {size:6} x {extent:6} {backend:6} {us:9.1f} us  "
            f"{nbytes / us / 1e3:7.0f} GB/s  {copy / us:5.0%} of copy  "
            f"{len(kernels)} kernels  max error {error:.2g}",
            flush=True,
        )
    return rows


def table(rows) -> str:
    lines = [
        "| pattern | size | rows | backend | us | kernels | GB/s | of copy | max error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['pattern']} | {r['size']} | {r['extent']} | {r['backend']} | {r['us']:.1f} "
            f"| {r['kernels']} | {r['gbps']:.0f} | {r['of_copy']:.0%} | {r['max_error']:.2g} |"
        )
    return "\n".join(lines) + "\n"


def check() -> None:
    """Each pattern at tiny sizes through ember's Triton generator, against eager in
    float32 from the same inputs (a small column-partial policy, so that 40 rows take the
    path 8192 take on a GPU)."""
    import ember
    from inductor_codegen.column_partials import ColumnPartialPolicy, column_partial_policy

    device = "cuda" if torch.cuda.is_available() else "cpu"
    for pattern, size, extent in (
        ("layer_norm", 96, 40),
        ("rms_norm", 96, 40),
        ("cross_entropy", 5001, 6),
    ):
        step, _ = make(pattern, size, extent, device)
        expected = make(pattern, size, extent, device, torch.float32)[0]()
        ember.reset()
        with column_partial_policy(ColumnPartialPolicy(programs=8, min_rows=2)):
            got = step(ember.compile(step.forward, backend=triton_backend))
        for a, b in zip(got, expected):
            torch.testing.assert_close(a.float(), b.float(), rtol=3e-2, atol=3e-2)
        print(f"{pattern}: ok ({len(got)} results against eager)")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT", "."))
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--hidden", default="768,1024,2048,4096")
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--backends", default="eager,torch,ember")
    parser.add_argument("--check", action="store_true", help="tiny sizes, correctness only")
    args = parser.parse_args(argv)
    if args.check:
        check()
        return
    if not torch.cuda.is_available():
        print("no GPU: nothing to measure (--check runs the patterns at tiny sizes)")
        return
    backends = args.backends.split(",")
    rows = []
    for pattern in args.patterns.split(","):
        if pattern == "cross_entropy":
            rows += run(pattern, args.vocab, args.tokens, backends)
            continue
        for hidden in (int(h) for h in args.hidden.split(",")):
            rows += run(pattern, hidden, args.rows, backends)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name()
    (out / "norm_ce_bench.json").write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    (out / "norm_ce_bench.md").write_text(f"{device}\n\n" + table(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
