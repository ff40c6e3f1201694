"""GPU model suite: eager vs torch.compile vs ember.compile(backend="inductor"), in one run.

    python benchmarks/gpu_bench.py [OUT_DIR] [--models resnet50,gpt2] [--modes infer,train]
                                   [--backends torch,ember,ember_nosplit] [--budget SECONDS]
                                   [--bn-kernels]

Models (random weights from configs, no downloads): torchvision resnet50,
mobilenet_v3_large, vit_b_16; transformers BERT-base, GPT2, a Llama-style
decoder, T5-small; plus two memory-bound kernels (pointwise chain, transpose)
and an MLP for the matmul templates (backend "ember_autotune": ember with
max_autotune, no CUDA graphs). Modes: bf16 inference ("infer", no_grad) and
AMP bf16 training ("train": float32 weights, autocast forward, backward).

Per (model, mode, backend): time of a call after warm-up (CUDA events), the
median of 5 rounds (EMBER_BENCH_ROUNDS) that each time every backend in turn,
so the host's drift falls on all alike; speedup over eager, first-call time (capture + compile, cold
in-process caches), peak memory, and the error against eager (inference:
max |out - eager| / max |eager|; training: the same over the gradients).

Accuracy (benchmarks/accuracy.py): every compiled row is checked against eager
in float32 (float32 weights and inputs, autocast off): inference by its
outputs, training by its loss and the global norm of all gradients. A row fails
(FAIL in the table, `"<backend>_accuracy": "FAIL"` in the JSON) when its error
exceeds 3x eager-bf16's error against the same float32 reference + 2e-3.
For ember's Triton kernels it times the kernels that move the most bytes
alone and reports achieved GB/s (bytes of the kernel's tensor arguments /
kernel time) next to the device-to-device copy bandwidth. Backend
"ember_nosplit" is ember with split reductions off (`lowering.split`); "ember_whole" is ember
with regional compile off (repeated blocks fused into one whole graph).
`--bn-kernels` first times batch norm's training reductions alone on
resnet50's shapes (bf16, channels-last): ember split and unsplit, and
torch.compile, GB/s of the inputs read once (bn_kernels.md).

Writes gpu_bench.json and gpu_bench.md into OUT_DIR (default: $OUT, else the
current folder), after every model, so a run cut short keeps what it
measured. `--budget` skips the models left once that many seconds passed.
A backend that breaks the CUDA context (an illegal memory access) ends its
row; the run goes on in a fresh process. Exits 0 without a GPU.
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
from models import GPU_MODELS, GPU_MODES

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accuracy  # noqa: E402

REPEATS = int(os.environ.get("EMBER_BENCH_REPEATS", "20"))
ROUNDS = int(os.environ.get("EMBER_BENCH_ROUNDS", "5"))
BACKENDS = ("torch", "ember")
MODES = GPU_MODES


# ---------------------------------------------------------------- models

# The suite is defined in models.py (GPU_MODELS), beside the CPU suite.
MODELS = GPU_MODELS


# ---------------------------------------------------------------- measuring


def cuda_time(fn, repeats=REPEATS) -> float:
    """Median seconds of one call (after three warm-up calls)."""
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


def back_to_back_time(fn, repeats=REPEATS) -> float:
    """Seconds per call of `repeats` calls issued back to back, one sync at the end: the
    host prepares a call while the GPU runs the one before (cuda_time syncs each call,
    so a call's host time before its first launch shows there, not here)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def first_call(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def copy_bandwidth() -> float:
    from triton.testing import do_bench

    src = torch.randn(2**29, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), return_mode="median")
    return 2 * src.numel() * src.element_size() / (ms / 1000) / 1e9


@functools.cache
def copy_us(nbytes: int) -> float:
    """Microseconds (median, L2 flushed) of a device-to-device copy moving `nbytes` in all
    (half read, half written): the reference a kernel of as many bytes is held to, since
    a short kernel pays the same launch and ramp that a short copy does."""
    from triton.testing import do_bench

    src = torch.empty(max(nbytes // 4, 1), dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    return 1000 * do_bench(lambda: dst.copy_(src), warmup=5, rep=20, return_mode="median")


def _tensor_bytes(args) -> int:
    seen, total = set(), 0
    for a in args:
        if isinstance(a, torch.Tensor) and a.data_ptr() not in seen:
            seen.add(a.data_ptr())
            elements = min(a.numel(), a.untyped_storage().nbytes() // a.element_size())
            total += elements * a.element_size()
    return total


def recorded_kernels(fn) -> dict[str, tuple]:
    """The ember Triton kernels that one call of `fn` launches: name -> [kernel, the
    arguments of its first launch, bytes of its tensor arguments, launches]."""
    from inductor_codegen.codegen.triton.runtime import TritonKernel

    calls = {}
    original = TritonKernel.__call__

    def seen(kernel, args):
        entry = calls.setdefault(kernel.source.name, [kernel, args, _tensor_bytes(args), 0])
        entry[3] += 1

    def record(self, *args):
        seen(self, args)
        return original(self, *args)

    # Wrappers launch most kernels through `kernel.launch(stream, ...)`, bound per
    # kernel after its first call; the rest (and first calls) through `kernel(...)`.
    launches = {}
    for kernel in gc.get_objects():
        if type(kernel) is TritonKernel and "launch" in vars(kernel):
            launches[kernel] = kernel.launch

            def recording(stream, *args, kernel=kernel, launch=kernel.launch):
                seen(kernel, args)
                return launch(stream, *args)

            kernel.launch = recording
    TritonKernel.__call__ = record
    try:
        fn()
    finally:
        TritonKernel.__call__ = original
        for kernel, launch in launches.items():
            kernel.launch = launch
    return calls


def config_times(kernel, args, configs) -> dict:
    """Milliseconds (median) of one launch of `kernel` on `args` under each configuration;
    those that do not compile or fit are left out."""
    from triton.testing import do_bench

    timings = {}
    for config in configs:
        try:
            timings[config] = do_bench(
                lambda c=config: kernel._launch(c, args), warmup=5, rep=25, return_mode="median"
            )
        except Exception:  # a configuration that does not compile or fit
            continue
    return timings


def kernel_bandwidth(fn, top: int = 8, sources: bool = False) -> list[dict]:
    """The ember Triton kernels of one call that move the most bytes, each timed alone
    (with their launch configuration, and their source if `sources`)."""
    from triton.testing import do_bench

    calls = recorded_kernels(fn)
    rows = []
    for name, (kernel, args, nbytes, _) in sorted(calls.items(), key=lambda c: -c[1][2])[:top]:
        ms = do_bench(lambda k=kernel, a=args: k(*a), warmup=5, rep=20, return_mode="median")
        row = {"kernel": name, "us": ms * 1000, "MB": nbytes / 1e6, "GBps": nbytes / ms / 1e6}
        row["copy_us"] = copy_us(nbytes)
        config = getattr(kernel, "config", None)
        row["config"] = config.describe() if config is not None else ""
        if sources:
            row["source"] = kernel.source.source
        rows.append(row)
    return rows


def first_tensor(out):
    if hasattr(out, "logits"):
        return out.logits
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    return out[0] if isinstance(out, (tuple, list)) else out


def relative_error(got, want) -> float:
    got, want = [t.float() for t in got], [t.float() for t in want]
    scale = max(float(w.abs().max()) for w in want) or 1.0
    return max(float((g - w).abs().max()) for g, w in zip(got, want)) / scale


# ---------------------------------------------------------------- one (model, mode)


def make_step(model, inputs, mode, amp=True):
    """A function running one inference call or one training step (AMP bf16 unless `amp` is
    False); returns what to compare: the outputs, or the gradients (the step's loss is kept
    as the function's `loss` attribute)."""
    if mode == "infer":

        def infer():
            with torch.no_grad():
                return [first_tensor(model(*inputs))]

        return infer
    params = [p for p in model.parameters() if p.requires_grad]

    def train():
        for p in params:
            p.grad = None
        with torch.autocast(inputs[0].device.type, dtype=torch.bfloat16, enabled=amp):
            out = first_tensor(model(*inputs))
            loss = out.float().sin().mean()
        loss.backward()
        train.loss = loss.detach()
        return [p.grad for p in params if p.grad is not None]

    return train


def accuracy_metrics(step, mode):
    """What the accuracy rule compares of one call: the outputs, or (loss, gradient norm)."""
    result = step()
    if mode == "infer":
        return [t.detach().clone() for t in result]
    return float(step.loss), accuracy.global_grad_norm(result)


def accuracy_errors(metrics, reference, mode) -> dict:
    if mode == "infer":
        return {"outputs": accuracy.tensors_error(metrics, reference)}
    return accuracy.training_errors(*metrics, reference)


def float32_reference(model, inputs, mode):
    """The accuracy reference: eager with float32 weights and inputs, autocast off."""
    inputs = tuple(x.float() if x.is_floating_point() else x for x in inputs)
    model = model.float().train(mode != "infer")
    return accuracy_metrics(make_step(model, inputs, mode, amp=False), mode)


def compiled_model(backend, model):
    import ember

    if backend == "ember_nosplit":
        backend = "ember"
    if backend == "torch":
        torch._dynamo.reset()
        return torch.compile(model)
    ember.reset()
    if backend == "ember_autotune":
        return ember.compile(model, backend="inductor", mode="max-autotune-no-cudagraphs")
    if backend == "ember_whole":
        return ember.compile(model, backend="inductor", options={"regional": False})
    return ember.compile(model, backend="inductor")


def run_case(name, make, mode, backends) -> dict:
    """One (model, mode): every backend compiled and checked, then all timed in
    interleaved rounds (see `timed_rounds`)."""
    torch.manual_seed(0)
    model, inputs = make()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    model = model.to("cuda")
    reference = float32_reference(model, tuple(x.to("cuda") for x in inputs), mode)
    floating = torch.bfloat16 if mode == "infer" else torch.float32
    if mode == "infer":
        model = model.eval().to(floating)
    else:
        model = model.train()
    inputs = tuple(x.to("cuda", floating if x.is_floating_point() else x.dtype) for x in inputs)
    row = {"model": name, "mode": mode}
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    eager = make_step(model, inputs, mode)
    expected = [t.detach().clone() for t in eager()]
    eager_errors = accuracy_errors(accuracy_metrics(eager, mode), reference, mode)
    accuracy.record(row, "eager", eager_errors, eager_errors)
    for _ in range(3):
        eager()
    row["eager_peak_GB"] = torch.cuda.max_memory_allocated() / 1e9
    row["eager_call_peak_GB"] = (torch.cuda.max_memory_allocated() - start) / 1e9
    steps = {"eager": eager}
    for backend in backends:
        try:
            # NOTE: each backend's window starts with the same tensors alive (the model,
            # its inputs, `expected`): the previous backend's outputs and metrics are
            # gone, else they would count in this backend's peak (one logits tensor of
            # an LM: 0.41 GB for GPT2, a whole output of `transpose`).
            metrics = errors = None
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
            step = make_step(compiled_model(backend, model), inputs, mode)
            if backend == "ember_nosplit":
                step = _without_splits(step)
            row[f"{backend}_compile_s"] = first_call(step)
            for _ in range(3):
                step()
            row[f"{backend}_peak_GB"] = torch.cuda.max_memory_allocated() / 1e9
            # the peak above what was allocated when the window opened
            row[f"{backend}_call_peak_GB"] = (torch.cuda.max_memory_allocated() - start) / 1e9
            metrics = accuracy_metrics(step, mode)
            row[f"{backend}_rel_err"] = relative_error(
                metrics if mode == "infer" else step(), expected
            )
            errors = accuracy_errors(metrics, reference, mode)
            accuracy.record(row, backend, errors, eager_errors)
            if backend == "ember":
                row["ember_kernels"] = kernel_bandwidth(step, sources=True)
            steps[backend] = step
        except Exception as error:  # a failing backend is reported, the run goes on
            row[f"{backend}_error"] = f"{type(error).__name__}: {str(error)[:400]}"
            print(f"  {name} {mode} {backend}: {_cell(row, backend)}", flush=True)
            if "CUDA error" in row[f"{backend}_error"]:
                row["context_lost"] = backend  # the CUDA context is gone: a fresh process goes on
                return row
    timed_rounds(row, steps)
    for backend in backends:
        if backend in steps:
            row[f"{backend}_speedup"] = row["eager_ms"] / row[f"{backend}_ms"]
            print(f"  {name} {mode} {backend}: {_cell(row, backend)}", flush=True)
    return row


def timed_rounds(row, steps, rounds=ROUNDS) -> None:
    """`<backend>_ms` (each call synchronized) and `<backend>_b2b_ms` (back to back) for
    every step: the median over `rounds` rounds, each timing every backend in turn.

    On a host-bound model a call's time follows the host's speed, which drifts
    between seconds on a shared machine (the same ember variant took 17.5-25.9 ms
    per ResNet50 training step within one process); timing the backends in turn,
    round after round, puts a slow stretch on all of them alike. `<backend>_ms_rounds`
    keeps every round's time."""
    synced = {backend: [] for backend in steps}
    overlapped = {backend: [] for backend in steps}
    for _ in range(rounds):
        for backend, step in steps.items():
            synced[backend].append(cuda_time(step) * 1000)
            overlapped[backend].append(back_to_back_time(step) * 1000)
    for backend in steps:
        row[f"{backend}_ms"] = statistics.median(synced[backend])
        row[f"{backend}_b2b_ms"] = statistics.median(overlapped[backend])
        row[f"{backend}_ms_rounds"] = [round(t, 3) for t in synced[backend]]


def _without_splits(step):
    """`step` compiling (on its first calls) with split reductions off: ember before them."""
    from inductor_codegen.lowering.split import SplitPolicy, split_reductions

    def run():
        with split_reductions(SplitPolicy(enabled=False)):
            result = step()
        run.loss = getattr(step, "loss", None)  # a training step's loss, for the accuracy rule
        return result

    return run


# ---------------------------------------------------------------- batch-norm reductions

# resnet50's batch-norm inputs at batch 32 (N, C, H, W): the first and the largest
# stages, and one whose 1024 channels are at the limit of splitting
BN_SHAPES = ((32, 64, 112, 112), (32, 256, 56, 56), (32, 1024, 14, 14))


def bn_forward_stats(x):
    """Batch norm's training statistics, as its decomposition computes them."""
    return torch.var_mean(x.float(), dim=(0, 2, 3), correction=0, keepdim=True)


def bn_backward_sums(grad, x, mean):
    """The two per-channel sums of batch norm's backward."""
    g = grad.float()
    return g.sum((0, 2, 3)), (g * (x.float() - mean)).sum((0, 2, 3))


BN_VARIANTS = ("split", "tuned", "nosplit")


def bn_reduction_rows(
    shapes=BN_SHAPES, device="cuda", timer=None, policy=None, variants=BN_VARIANTS
) -> list[dict]:
    """Per shape, layout and pass: time and GB/s (bytes of the inputs read once) of ember's
    kernels with split reductions ("split"; "tuned": with max_autotune) and without
    ("nosplit"), and of torch.compile's, on bf16 data. On a GPU each call is timed
    end to end ("_ms") and replayed in a CUDA graph ("_graph_ms", no host time), and
    ember's kernels are timed alone ("_kernels")."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from inductor_codegen import compile_graph
    from inductor_codegen.lowering.split import SplitPolicy, split_reductions
    from prim_decomp import inductor_default

    timer = timer or _bench_ms
    gpu = device == "cuda"
    chosen = {
        "split": (policy or SplitPolicy(), {}),
        "tuned": (policy or SplitPolicy(), {"max_autotune": True}),
        "nosplit": (SplitPolicy(enabled=False), {}),
    }
    rows = []
    layouts = (("NCHW", torch.contiguous_format), ("NHWC", torch.channels_last))
    for shape, (layout, memory_format) in itertools.product(shapes, layouts):
        x = torch.randn(shape, device=device).to(torch.bfloat16)
        x = x.contiguous(memory_format=memory_format)
        grad = torch.randn_like(x).contiguous(memory_format=memory_format)
        mean = bn_forward_stats(x)[1]
        cases = (
            ("forward", bn_forward_stats, (x,)),
            ("backward", bn_backward_sums, (grad, x, mean)),
        )
        for name, fn, args in cases:
            gm = make_fx(fn, decomposition_table=dict(inductor_default))(*args)
            nbytes = sum(a.numel() * a.element_size() for a in args)
            row = {"shape": "x".join(map(str, shape)), "layout": layout, "pass": name}
            row["MB"] = nbytes / 1e6
            expected = fn(*args)
            for label in variants:
                split_policy, extra = chosen[label]
                options = dict(extra) if gpu else {"device_codegen": "triton"}
                with split_reductions(split_policy):
                    compiled = compile_graph(gm, list(args), options=options)
                got = compiled(*args)
                call = lambda c=compiled, a=args: c(*a)  # noqa: E731
                row[f"{label}_err"] = relative_error(list(got), list(expected))
                row[f"{label}_kernel_count"] = compiled.kernel_count
                _time_variant(row, label, call, nbytes, timer, gpu)
            if gpu:
                torch._dynamo.reset()
                reference = torch.compile(fn)
                _time_variant(row, "torch", lambda r=reference, a=args: r(*a), nbytes, timer, gpu)
            rows.append(row)
            print(f"  bn {row['shape']} {layout} {name}: " + _bn_cell(row), flush=True)
    return rows


def _time_variant(row, label, call, nbytes, timer, gpu) -> None:
    row[f"{label}_ms"] = timer(call)
    best = row[f"{label}_ms"]
    if gpu:
        try:
            from triton.testing import do_bench_cudagraph

            row[f"{label}_graph_ms"] = do_bench_cudagraph(call, rep=50, return_mode="median")
            best = row[f"{label}_graph_ms"]
        except Exception as error:  # a call that cannot be captured: end-to-end time only
            row[f"{label}_graph_error"] = f"{type(error).__name__}: {str(error)[:200]}"
        if label != "torch" and label != "nosplit":
            row[f"{label}_kernels"] = kernel_bandwidth(call, top=4)
    row[f"{label}_GBps"] = nbytes / best / 1e6


def _bench_ms(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=10, rep=50, return_mode="median")


def _bn_cell(row) -> str:
    parts = []
    for label in (*BN_VARIANTS, "torch"):
        if f"{label}_ms" in row:
            best = row.get(f"{label}_graph_ms", row[f"{label}_ms"])
            parts.append(f"{label} {best * 1000:.0f} us ({row[f'{label}_GBps']:.0f} GB/s)")
    return ", ".join(parts)


def bn_markdown(rows, copy_gbps) -> str:
    """Times in us (CUDA-graph replay where it ran, else end to end), GB/s of the inputs
    read once; then ember's split kernels timed alone."""
    labels = [label for label in (*BN_VARIANTS, "torch") if rows and f"{label}_ms" in rows[0]]
    head = ["shape", "layout", "pass", "MB"]
    for label in labels:
        head += [f"{label} us", f"{label} GB/s"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|" + "---:|" * (len(head) - 3)]
    for r in rows:
        cells = [r["shape"], r["layout"], r["pass"], f"{r['MB']:.1f}"]
        for label in labels:
            best = r.get(f"{label}_graph_ms", r.get(f"{label}_ms", math.nan))
            cells += [f"{best * 1000:.0f}", f"{r.get(f'{label}_GBps', math.nan):.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| shape | layout | pass | variant | kernel | config | us | MB | GB/s | % copy |"]
    lines.append("|---|---|---|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        for label in labels:
            for k in r.get(f"{label}_kernels", []):
                cells = [r["shape"], r["layout"], r["pass"], label, k["kernel"], k["config"]]
                cells += [f"{k['us']:.1f}", f"{k['MB']:.1f}", f"{k['GBps']:.0f}"]
                cells.append(f"{100 * k['GBps'] / copy_gbps:.0f}%")
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- report


def _cell(row, backend) -> str:
    if f"{backend}_error" in row:
        return "error: " + row[f"{backend}_error"][:120]
    return (
        f"{row.get(f'{backend}_speedup', math.nan):.2f}x, "
        f"compile {row.get(f'{backend}_compile_s', math.nan):.1f} s, "
        f"accuracy {accuracy.cell(row, backend)}"
    )


def geomean(values) -> float:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def markdown(result) -> str:
    backends = result["backends"]
    nan = math.nan
    head = ["model", "mode", "eager ms"]
    head += [f"{b} x" for b in backends] + [f"{b} compile s" for b in backends]
    head += ["eager peak GB"] + [f"{b} peak GB" for b in backends]
    head += [f"{b} err" for b in backends]
    head += ["eager err vs fp32"] + [f"{b} accuracy" for b in backends]
    lines = [
        f"Device: {result['device']}; copy bandwidth {result['copy_GBps']:.0f} GB/s "
        f"(read + write); torch {result['torch']}, triton {result['triton']}.",
        "",
        "| " + " | ".join(head) + " |",
        "|---|---|" + "---:|" * (len(head) - 2),
    ]
    for r in result["rows"]:
        cells = [r["model"], r["mode"], f"{r.get('eager_ms', nan):.2f}"]
        cells += [
            "error" if f"{b}_error" in r else f"{r.get(f'{b}_speedup', nan):.2f}x" for b in backends
        ]
        cells += [f"{r.get(f'{b}_compile_s', nan):.1f}" for b in backends]
        cells += [f"{r.get('eager_peak_GB', nan):.2f}"]
        cells += [f"{r.get(f'{b}_peak_GB', nan):.2f}" for b in backends]
        cells += [f"{r.get(f'{b}_rel_err', nan):.1e}" for b in backends]
        cells += [accuracy.cell(r, "eager")] + [accuracy.cell(r, b) for b in backends]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for mode in MODES:
        rows = [r for r in result["rows"] if r["mode"] == mode and r["model"] not in EXTRA]
        if not rows:
            continue
        parts = []
        for b in backends:
            speed = geomean(r.get(f"{b}_speedup") for r in rows)
            compile_s = sum(r.get(f"{b}_compile_s", 0.0) for r in rows)
            parts.append(f"{b} geomean {speed:.2f}x, compile {compile_s:.0f} s")
        lines.append(f"- {mode} ({len(rows)} models): " + "; ".join(parts))
    failing = [
        f"{r['model']} {r['mode']} {b}"
        for r in result["rows"]
        for b in backends
        if r.get(f"{b}_accuracy") == "FAIL"
    ]
    lines.append("- accuracy: " + ("FAIL " + ", ".join(failing) if failing else "every row ok"))
    lines.append("")
    lines.append("Milliseconds per call, each call synchronized / calls back to back:")
    lines.append("")
    lines.append("| model | mode | eager | " + " | ".join(backends) + " |")
    lines.append("|---|---|" + "---:|" * (len(backends) + 1))
    for r in result["rows"]:
        cells = [r["model"], r["mode"]]
        for b in ["eager", *backends]:
            cells.append(f"{r.get(f'{b}_ms', nan):.2f} / {r.get(f'{b}_b2b_ms', nan):.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "| model | mode | kernel | us | MB | GB/s | % of copy | copy of as many bytes, us "
        "| % of that copy |"
    )
    lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        for k in r.get("ember_kernels", [])[:3]:
            share = 100 * k["GBps"] / result["copy_GBps"]
            same = k.get("copy_us", math.nan)
            lines.append(
                f"| {r['model']} | {r['mode']} | {k['kernel']} | {k['us']:.1f} | {k['MB']:.1f} | "
                f"{k['GBps']:.0f} | {share:.0f}% | {same:.1f} | {100 * same / k['us']:.0f}% |"
            )
    return "\n".join(lines) + "\n"


EXTRA = ("pointwise", "transpose", "mlp")


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT", "."))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--budget", type=float, default=float("inf"))
    parser.add_argument(
        "--bn-kernels",
        action="store_true",
        help="first time batch norm's training reductions (split and unsplit) alone",
    )
    parser.add_argument("--bn-variants", default=",".join(BN_VARIANTS))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_bench: no CUDA device; skipped")
        return 0
    import triton

    # A run restarted after a lost CUDA context keeps its start time and its rows.
    began = float(os.environ.setdefault("EMBER_BENCH_STARTED", str(time.time())))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    backends = args.backends.split(",")
    resumed = os.environ.get("EMBER_BENCH_RESUME") == "1" and (out / "gpu_bench.json").exists()
    if resumed:
        result = json.loads((out / "gpu_bench.json").read_text())
    else:
        result = {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "copy_GBps": copy_bandwidth(),
            "backends": backends,
            "rows": [],
            "skipped": [],
        }
    print(f"device {result['device']}; copy {result['copy_GBps']:.0f} GB/s", flush=True)
    if args.bn_kernels and "bn_kernels" not in result:
        result["bn_kernels"] = bn_reduction_rows(variants=args.bn_variants.split(","))
        (out / "gpu_bench.json").write_text(json.dumps(result, indent=1))
        (out / "bn_kernels.md").write_text(bn_markdown(result["bn_kernels"], result["copy_GBps"]))
    done = {(r["model"], r["mode"]) for r in result["rows"]}
    modes = args.modes.split(",")
    for mode in MODES:
        if mode not in modes:
            continue
        for name in args.models.split(","):
            make, model_modes = MODELS[name]
            if mode not in model_modes or (name, mode) in done:
                continue
            if time.time() - began > args.budget:
                result["skipped"].append(f"{name} {mode}")
                continue
            try:
                row = run_case(name, make, mode, backends)
            except Exception as error:
                row = {"model": name, "mode": mode, "error": f"{type(error).__name__}: {error}"}
                if "CUDA error" in str(error):
                    row["context_lost"] = "eager"
            result["rows"].append(row)
            (out / "gpu_bench.json").write_text(json.dumps(result, indent=1))
            (out / "gpu_bench.md").write_text(markdown(result))
            if "context_lost" in row:
                print(
                    f"  CUDA context lost in {name} {mode}; going on in a new process", flush=True
                )
                os.environ["EMBER_BENCH_RESUME"] = "1"
                os.execv(sys.executable, [sys.executable, __file__, *argv])
    print(markdown(result))
    if "bn_kernels" in result:
        print(bn_markdown(result["bn_kernels"], result["copy_GBps"]))
    if result["skipped"]:
        print("skipped (budget):", ", ".join(result["skipped"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
