"""Memory-bound fused patterns on the GPU: achieved bandwidth of eager, torch.compile and
ember against a device-to-device copy of the same number of bytes, in one run.

    python benchmarks/bandwidth_bench.py [OUT_DIR] [--patterns layer_norm,softmax]
                                         [--sizes model,large] [--sweep model]

Each pattern is a piece of a transformer step that a compiler should turn into one or
two kernels moving each byte once: bias + GELU, residual add + layer norm, layer norm,
RMS norm, masked softmax, layer norm's backward (row and column reductions), a bias
gradient (column sum), log-sum-exp over a vocabulary. Sizes: "model" (the activation
of a GPT2-sized batch: 8192 rows) and "large" (8x the rows, far past the L2 cache).

Per (pattern, size, backend): device time per call (the sum of the call's kernel times
from the profiler, so the host's launch work does not count), the least bytes the
pattern must move (its inputs read once and its outputs written once), the GB/s this
gives, and the same over the GB/s of one copy moving as many bytes (timed the same
way). `--sweep SIZES` times each ember kernel at those sizes under every autotuning
candidate and a wider grid of block sizes and warps, to show what the launch heuristics leave. Writes
bandwidth_bench.json and bandwidth_bench.md into OUT_DIR (default $OUT, else the
current folder). Exits 0 without a GPU.
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
CALLS = 20


# ---------------------------------------------------------------- patterns


def gelu_bias(x, b):
    return F.gelu(x + b, approximate="tanh")


def residual_layer_norm(x, residual, w, b):
    y = x + residual
    return y, F.layer_norm(y, y.shape[-1:], w, b)


def layer_norm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b)


def rms_norm(x, w):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(x.dtype)


def masked_softmax(scores, mask):
    return torch.softmax(scores.float() * 0.125 + mask, -1).to(scores.dtype)


def layer_norm_backward(x, dy, w, mean, rstd):
    xhat = (x.float() - mean) * rstd
    g = dy.float() * w
    n = x.shape[-1]
    dx = rstd / n * (n * g - g.sum(-1, keepdim=True) - xhat * (g * xhat).sum(-1, keepdim=True))
    dw = (dy.float() * xhat).sum(0)
    db = dy.float().sum(0)
    return dx.to(x.dtype), dw, db


def bias_grad(dy):
    return dy.float().sum(0)


def logsumexp(logits):
    return torch.logsumexp(logits.float(), -1)


def _rows(size: str) -> int:
    return 8192 if size == "model" else 65536


def _inputs(name: str, size: str, device: str = "cuda") -> tuple:
    rows = _rows(size) if size in ("model", "large") else int(size)
    g = torch.Generator(device=device).manual_seed(0)

    def randn(*shape, dtype=BF16):
        return torch.randn(*shape, generator=g, device=device, dtype=dtype)

    if name == "gelu_bias":
        return randn(rows, 3072), randn(3072)
    if name == "residual_layer_norm":
        return randn(rows, 768), randn(rows, 768), randn(768), randn(768)
    if name == "layer_norm":
        return randn(rows, 768), randn(768), randn(768)
    if name == "layer_norm_1024":
        return randn(rows, 1024), randn(1024), randn(1024)
    if name == "rms_norm":
        return randn(rows, 1024), randn(1024)
    if name == "masked_softmax":
        # attention scores: 12 heads of 512 queries for every 512 of `rows` tokens
        n = rows * 12
        return randn(n, 512), randn(n, 512, dtype=torch.float32)
    if name == "layer_norm_backward":
        x = randn(rows, 768)
        mean = x.float().mean(-1, keepdim=True)
        rstd = torch.rsqrt(x.float().var(-1, keepdim=True, unbiased=False) + 1e-5)
        return x, randn(rows, 768), randn(768, dtype=torch.float32), mean, rstd
    if name == "bias_grad":
        return (randn(rows * 3, 768),)
    if name == "logsumexp":
        return (randn(rows // 4, 50257),)
    raise KeyError(name)


PATTERNS = {
    "gelu_bias": gelu_bias,
    "residual_layer_norm": residual_layer_norm,
    "layer_norm": layer_norm,
    "layer_norm_1024": layer_norm,
    "rms_norm": rms_norm,
    "masked_softmax": masked_softmax,
    "layer_norm_backward": layer_norm_backward,
    "bias_grad": bias_grad,
    "logsumexp": logsumexp,
}


# ---------------------------------------------------------------- measuring


def _nbytes(values) -> int:
    if isinstance(values, torch.Tensor):
        values = (values,)
    return sum(v.numel() * v.element_size() for v in values)


def device_us(fn, calls: int = CALLS) -> tuple[float, dict[str, float]]:
    """Microseconds of kernel time per call of `fn`, and per kernel name, from the profiler
    (after three warm-up calls)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            kernels[event.name] = (
                kernels.get(event.name, 0.0) + event.time_range.elapsed_us() / calls
            )
    return sum(kernels.values()), kernels


def copy_us(nbytes: int) -> float:
    """Device microseconds of one copy reading and writing `nbytes` in all."""
    src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    us, _ = device_us(lambda: dst.copy_(src))
    return us


def compiled(backend: str, fn):
    if backend == "eager":
        return fn
    if backend == "torch":
        torch._dynamo.reset()
        return torch.compile(fn)
    import ember

    ember.reset()
    return ember.compile(fn, backend="inductor")


def _grid(source) -> list:
    """Every autotuning candidate, and for reductions a wider grid of blocks and warps."""
    from inductor_codegen.codegen.triton.heuristics import (
        LaunchConfig,
        autotune_configs,
        next_power_of_2,
    )

    configs = autotune_configs(source)
    if source.groups and not source.ynumel:
        persistent = all(g.persistent for g in source.groups)
        for xblock in (1, 2, 4, 8, 16) if persistent else (1, 4, 16, 64):
            for rblock in (None,) if persistent else (128, 512, 2048):
                rblocks = tuple(
                    next_power_of_2(g.numel) if g.persistent else rblock for g in source.groups
                )
                if xblock * max(rblocks) > 16384:
                    continue
                for warps in (1, 2, 4, 8, 16) if persistent else (4, 8):
                    configs.append(LaunchConfig(xblock, rblocks, warps))
    return list(dict.fromkeys(configs))


def sweep(fn, inputs) -> list[dict]:
    """Each ember kernel of one call under every configuration of `_grid`."""
    from gpu_bench import config_times, recorded_kernels

    rows = []
    for kernel, args, nbytes, _ in recorded_kernels(lambda: fn(*inputs)).values():
        timings = config_times(kernel, args, _grid(kernel.source))
        if kernel.config not in timings:
            continue
        ranked = sorted(timings, key=timings.get)
        rows.append(
            {
                "kernel": kernel.source.name,
                "MB": nbytes / 1e6,
                "default": kernel.config.describe(),
                "default_us": timings[kernel.config] * 1000,
                "best": [(c.describe(), timings[c] * 1000) for c in ranked[:5]],
                "source": kernel.source.source,
            }
        )
    return rows


def run_pattern(name: str, size: str, backends, do_sweep: list[str]) -> list[dict]:
    inputs = _inputs(name, size)
    fn = PATTERNS[name]
    expected = fn(*inputs)
    nbytes = _nbytes(inputs) + _nbytes(expected)
    copy = copy_us(nbytes)
    rows = []
    for backend in backends:
        row = {"pattern": name, "size": size, "backend": backend, "MB": nbytes / 1e6}
        try:
            call = compiled(backend, fn)
            got = call(*inputs)
            for g, e in zip(
                got if isinstance(got, tuple) else (got,),
                expected if isinstance(expected, tuple) else (expected,),
            ):
                torch.testing.assert_close(g, e, atol=5e-2, rtol=5e-2)
            us, kernels = device_us(lambda c=call: c(*inputs))
        except Exception as error:  # one backend's failure is reported, the run goes on
            row["error"] = f"{type(error).__name__}: {str(error)[:300]}"
            rows.append(row)
            continue
        row.update(
            us=us,
            kernels=len(kernels),
            GBps=nbytes / us / 1e3,
            copy_us=copy,
            of_copy=copy / us,
            per_kernel=kernels,
        )
        if backend == "ember" and size in do_sweep:
            row["sweep"] = sweep(call, inputs)
        rows.append(row)
    return rows


def big_copy_bandwidth() -> float:
    nbytes = 2 * 2**30
    return nbytes / copy_us(nbytes) / 1e3


def table(rows, copy_gbps: float) -> str:
    lines = [
        f"Copy bandwidth (1 GiB read + 1 GiB written): {copy_gbps:.0f} GB/s.",
        "",
        "| pattern | size | MB | copy GB/s | eager GB/s | torch GB/s | ember GB/s | "
        "torch % of copy | ember % of copy | ember kernels |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keyed = {(r["pattern"], r["size"], r["backend"]): r for r in rows}
    for pattern, size in dict.fromkeys((r["pattern"], r["size"]) for r in rows):
        by = {b: keyed.get((pattern, size, b), {}) for b in ("eager", "torch", "ember")}
        cells = [
            format(by[b][key], fmt) if key in by[b] else "-"
            for b, key, fmt in (
                ("eager", "GBps", ".0f"),
                ("torch", "GBps", ".0f"),
                ("ember", "GBps", ".0f"),
                ("torch", "of_copy", ".0%"),
                ("ember", "of_copy", ".0%"),
                ("ember", "kernels", "d"),
            )
        ]
        first = next(r for r in rows if (r["pattern"], r["size"]) == (pattern, size))
        copy = f"{first['MB'] / first['copy_us'] * 1e3:.0f}" if "copy_us" in first else "-"
        lines.append(
            f"| {pattern} | {size} | {first['MB']:.1f} | {copy} | " + " | ".join(cells) + " |"
        )
    sweeps = [r for r in rows if r.get("sweep")]
    if sweeps:
        lines += ["", "| pattern | size | kernel | MB | default | us | best | us |", "|---|"
                  "---|---|---:|---|---:|---|---:|"]  # fmt: skip
        for r in sweeps:
            for k in r["sweep"]:
                best, best_us = k["best"][0]
                lines.append(
                    f"| {r['pattern']} | {r['size']} | {k['kernel']} | {k['MB']:.1f} | "
                    f"{k['default']} | {k['default_us']:.1f} | {best} | {best_us:.1f} |"
                )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT", "."))
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--sizes", default="model,large")
    parser.add_argument("--backends", default="eager,torch,ember")
    parser.add_argument("--sweep", default="", help="sizes to sweep ember's kernels at")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bandwidth_bench: no GPU, nothing to measure")
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    copy_gbps = big_copy_bandwidth()
    rows = []
    for name in args.patterns.split(","):
        for size in args.sizes.split(","):
            rows += run_pattern(name, size, args.backends.split(","), args.sweep.split(","))
            for r in rows[-len(args.backends.split(",")) :]:
                shown = f"{r.get('GBps', 0):6.0f} GB/s {r.get('of_copy', 0):4.0%} of copy"
                print(f"{name:22s} {size:6s} {r['backend']:6s} {r.get('error', shown)}",
                      flush=True)  # fmt: skip
            (out / "bandwidth_bench.json").write_text(json.dumps(rows, indent=1))
            (out / "bandwidth_bench.md").write_text(table(rows, copy_gbps))
    print(table(rows, copy_gbps))


if __name__ == "__main__":
    main(sys.argv[1:])
