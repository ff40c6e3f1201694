"""GPU models in bf16 inference: eager vs torch.compile vs ember.compile(backend="inductor").

    python benchmarks/gpu_bench.py                  every model
    python benchmarks/gpu_bench.py mlp block        only these
    EMBER_BENCH_JSON=out.json python benchmarks/gpu_bench.py

Per model: the median time of a call after warm-up (CUDA events), the speedup
over eager, the first-call time (capture + compile, cold in-process caches),
peak memory, and whether ember's result matched eager. For ember's Triton
kernels it also reports achieved bandwidth (bytes of the kernel's tensor
arguments / kernel time) of the kernels that take the most time, next to the
measured device-to-device copy bandwidth. Skips (exit 0) without a GPU.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = torch.bfloat16
REPEATS = int(os.environ.get("EMBER_BENCH_REPEATS", "30"))


class TransformerBlock(nn.Module):
    def __init__(self, dim=1024, heads=16):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, -1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))


class Pointwise(nn.Module):
    """A memory-bound chain: layer norm + softmax + gelu over a large activation."""

    def forward(self, x):
        y = F.layer_norm(x, x.shape[-1:])
        return F.gelu(torch.softmax(y * 0.5, -1) + x)


class Transpose(nn.Module):
    def forward(self, x):
        return (x.transpose(1, 2) * 2).relu().contiguous()


def cases():
    yield "pointwise", lambda: (Pointwise(), (torch.randn(8192, 4096),))
    yield "transpose", lambda: (Transpose(), (torch.randn(32, 1024, 2048),))
    yield (
        "mlp",
        lambda: (
            nn.Sequential(
                nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 2048), nn.LayerNorm(2048)
            ),
            (torch.randn(8192, 2048),),
        ),
    )
    yield "block", lambda: (TransformerBlock(), (torch.randn(16, 512, 1024),))

    def resnet50():
        import torchvision

        return torchvision.models.resnet50(), (torch.randn(32, 3, 224, 224),)

    yield "resnet50", resnet50

    def gpt2():
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(n_layer=4, use_cache=False)
        return GPT2LMHeadModel(config), (torch.randint(0, config.vocab_size, (8, 512)),)

    yield "gpt2_4layer", gpt2


def cuda_time(fn, repeats=REPEATS) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return statistics.median(times)


def first_call(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def copy_bandwidth() -> float:
    from triton.testing import do_bench

    src = torch.empty(2**29, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / (ms / 1000) / 1e9


def kernel_bandwidth(fn, top: int = 6) -> list[dict]:
    """Time each Triton kernel of one call of `fn` alone; bytes = its tensor arguments."""
    from triton.testing import do_bench

    from inductor_codegen.triton.runtime import TritonKernel

    calls = {}
    original = TritonKernel.__call__

    def record(self, *args):
        calls[self.source.name] = (self, args)
        return original(self, *args)

    TritonKernel.__call__ = record
    try:
        fn()
    finally:
        TritonKernel.__call__ = original
    rows = []
    for name, (kernel, args) in calls.items():
        seen, nbytes = set(), 0
        for a in args:
            if isinstance(a, torch.Tensor) and a.data_ptr() not in seen:
                seen.add(a.data_ptr())
                nbytes += min(a.numel(), a.untyped_storage().nbytes() // a.element_size()) * (
                    a.element_size()
                )
        ms = do_bench(lambda k=kernel, a=args: k(*a), warmup=5, rep=30)
        rows.append(
            {"kernel": name, "us": ms * 1000, "MB": nbytes / 1e6, "GBps": nbytes / ms / 1e6}
        )
    rows.sort(key=lambda r: -r["us"])
    return rows[:top]


def first_tensor(out):
    if hasattr(out, "logits"):
        return out.logits
    return out[0] if isinstance(out, (tuple, list)) else out


def run_case(name, make) -> dict:
    import ember

    torch.manual_seed(0)
    model, inputs = make()
    model = model.to("cuda").eval()
    model = model.to(DTYPE)
    inputs = tuple(x.to("cuda", DTYPE if x.is_floating_point() else x.dtype) for x in inputs)
    row = {"model": name}

    def runner(m):
        def call():
            with torch.no_grad():
                return m(*inputs)

        return call

    eager = runner(model)
    expected = eager()
    row["eager_ms"] = cuda_time(eager) * 1000
    for label, compiled in (
        ("torch", lambda: torch.compile(model)),
        ("ember", lambda: ember.compile(model, backend="inductor")),
        ("torch_ro", lambda: torch.compile(model, mode="reduce-overhead")),
        ("ember_ma", lambda: ember.compile(model, mode="max-autotune")),
    ):
        try:
            torch._dynamo.reset()
            torch.cuda.reset_peak_memory_stats()
            call = runner(compiled())
            row[f"{label}_first_s"] = first_call(call)
            row[f"{label}_ms"] = cuda_time(call) * 1000
            row[f"{label}_speedup"] = row["eager_ms"] / row[f"{label}_ms"]
            row[f"{label}_peak_GB"] = torch.cuda.max_memory_allocated() / 1e9
            ref, got = first_tensor(expected), first_tensor(call())
            row[f"{label}_max_abs_err"] = float((got.float() - ref.float()).abs().max())
            if label == "ember":
                row["ember_kernels"] = kernel_bandwidth(call)
        except Exception as error:  # a failing backend is reported, the run goes on
            row[f"{label}_error"] = f"{type(error).__name__}: {str(error)[:300]}"
    return row


def forward_gpu_options() -> None:
    """Route ember's max_autotune and triton.cudagraphs options to compile_graph's names."""
    from dataclasses import replace

    from ember.config import OPTIONS

    for name, codegen_name in (
        ("max_autotune", "max_autotune"),
        ("triton.cudagraphs", "cudagraphs"),
    ):
        if OPTIONS[name].codegen_name is None:
            OPTIONS[name] = replace(OPTIONS[name], codegen_name=codegen_name)


def main(argv) -> int:
    if not torch.cuda.is_available():
        print("gpu_bench: no CUDA device; skipped")
        return 0
    forward_gpu_options()
    wanted = set(argv)
    result = {"device": torch.cuda.get_device_name(), "copy_GBps": copy_bandwidth(), "models": []}
    print(f"device {result['device']}; copy bandwidth {result['copy_GBps']:.0f} GB/s", flush=True)
    for name, make in cases():
        if wanted and name not in wanted:
            continue
        try:
            row = run_case(name, make)
        except Exception as error:
            row = {"model": name, "error": f"{type(error).__name__}: {str(error)[:300]}"}
        result["models"].append(row)
        print(json.dumps(row), flush=True)
        if os.environ.get("EMBER_BENCH_JSON"):
            with open(os.environ["EMBER_BENCH_JSON"], "w") as f:
                json.dump(result, f, indent=1)
    labels = ("torch", "ember", "torch_ro", "ember_ma")
    print(
        "\n| model | eager ms | " + " | ".join(f"{x} speedup | {x} first s" for x in labels) + " |"
    )
    print("|---" * (2 + 2 * len(labels)) + "|")
    nan = float("nan")
    for r in result["models"]:
        cells = [
            f"{r.get(x + '_speedup', nan):.2f} | {r.get(x + '_first_s', nan):.1f}" for x in labels
        ]
        print(f"| {r['model']} | {r.get('eager_ms', nan):.2f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
