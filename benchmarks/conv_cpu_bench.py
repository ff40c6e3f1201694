"""The conv-BN-ReLU CNN on the CPU: eager vs torch.compile vs ember, min of interleaved rounds.

    python benchmarks/conv_cpu_bench.py                      batch 8 and 32, both modes
    EMBER_BENCH_BATCHES=8 EMBER_BENCH_MODES=inference python benchmarks/conv_cpu_bench.py
    EMBER_BENCH_ROUNDS=200 EMBER_BENCH_THREADS=2 python benchmarks/conv_cpu_bench.py
    python benchmarks/conv_cpu_bench.py convolutions   the CNN's three convolutions alone
    python benchmarks/conv_cpu_bench.py fold           inference, ember folded against not

The model is the model suite's `cnn` (benchmarks/models.py: three conv (no bias) +
BatchNorm2d + ReLU + MaxPool2d(2) blocks of 16, 32 and 64 channels, adaptive average pool,
Linear) on 32x32 images. Inference runs under torch.no_grad() in eval mode ("ember folded" is ember with
`options={"fold_convolutions": True}`, folding each batch norm into its convolution;
plain "ember" is the default, which does not fold); training is forward, loss, backward in
train mode. Every variant is called once per round, the order reversed every other round,
and the table gives the **minimum** and the median over the rounds: on a shared machine
the minimum is the least disturbed call. Each compiled variant is checked against eager
first (rtol = atol = 1e-3). Threads: EMBER_BENCH_THREADS (default 2), set with
torch.set_num_threads; set OMP_NUM_THREADS alike for ember's OpenMP kernels.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from models import MODELS  # noqa: E402

import ember  # noqa: E402

ROUNDS = int(os.environ.get("EMBER_BENCH_ROUNDS", "100"))
THREADS = int(os.environ.get("EMBER_BENCH_THREADS", "2"))


def interleaved(steps: dict, rounds: int) -> dict:
    """(min, median) seconds per call of each step over `rounds` interleaved rounds."""
    for step in steps.values():
        for _ in range(5):
            step()
    times: dict = {label: [] for label in steps}
    order = list(steps.items())
    for index in range(rounds):
        for label, step in order if index % 2 == 0 else reversed(order):
            start = time.perf_counter()
            step()
            times[label].append(time.perf_counter() - start)
    return {k: (min(v), statistics.median(v)) for k, v in times.items()}


def make_step(model, x, training: bool):
    if not training:

        def infer():
            with torch.no_grad():
                return model(x)

        return infer

    def train():
        loss = model(x).square().mean()
        loss.backward()
        for p in model.parameters():
            p.grad = None
        return loss.detach()

    return train


def fold_ab() -> None:
    """Inference, ember with and without `fold_convolutions`, nothing else interleaved."""
    print("| batch | folded us (min / median) | not folded us |")
    print("|---:|---:|---:|")
    for batch in [int(b) for b in os.environ.get("EMBER_BENCH_BATCHES", "8,32").split(",")]:
        model = MODELS["cnn"]().model.eval()
        x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(1))
        steps = {
            "folded": make_step(
                ember.compile(model, backend="inductor", options={"fold_convolutions": True}),
                x,
                False,
            ),
            "not folded": make_step(
                ember.compile(model, backend="inductor", options={"fold_convolutions": False}),
                x,
                False,
            ),
        }
        times = interleaved(steps, ROUNDS)
        a, b = times["folded"], times["not folded"]
        print(
            f"| {batch} | {a[0] * 1e6:.0f} / {a[1] * 1e6:.0f} | {b[0] * 1e6:.0f} / {b[1] * 1e6:.0f} |"
        )


def run(batch: int, training: bool) -> dict:
    model = MODELS["cnn"]().model.train(training)
    x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    steps = {"eager": make_step(model, x, training)}
    compiled = {
        "torch.compile": torch.compile(model, backend="inductor"),
        "ember": ember.compile(model, backend="inductor"),
    }
    if not training:  # the same with folding: what the fold gains
        compiled["ember folded"] = ember.compile(
            model, backend="inductor", options={"fold_convolutions": True}
        )
    # Running statistics move in training mode: compare on copies of the buffers' state.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    expected = steps["eager"]()
    for label, fn in compiled.items():
        model.load_state_dict(state)
        step = make_step(fn, x, training)
        start = time.perf_counter()
        got = step()
        first = time.perf_counter() - start
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
        print(f"  {label} first call {first:.1f} s, matches eager", flush=True)
        steps[label] = step
    result = interleaved(steps, ROUNDS)
    return {label: (lo * 1e3, mid * 1e3) for label, (lo, mid) in result.items()}


def _convolution_steps(x, w, b) -> dict:
    conv = torch.ops.aten.convolution.default
    pointwise = torch.ops.mkldnn._convolution_pointwise.default
    ones = [1, 1]
    xc = x.contiguous(memory_format=torch.channels_last)
    wc = w.contiguous(memory_format=torch.channels_last)
    packed = torch.ops.mkldnn._reorder_convolution_weight(w, ones, ones, ones, 1, list(x.shape))
    return {
        "nchw": lambda: conv(x, w, None, ones, ones, ones, False, [0, 0], 1),
        "cl": lambda: conv(xc, wc, None, ones, ones, ones, False, [0, 0], 1),
        "bias": lambda: conv(xc, wc, b, ones, ones, ones, False, [0, 0], 1),
        "plain": lambda: pointwise(xc, wc, b, ones, ones, ones, 1, "none", [], ""),
        "packed": lambda: pointwise(xc, packed, b, ones, ones, ones, 1, "none", [], ""),
    }


def convolutions() -> None:
    """The CNN's three convolutions alone, microseconds (min of interleaved rounds): NCHW,
    channels-last (what ember's training graphs run), channels-last with a bias,
    `mkldnn._convolution_pointwise` on the plain weight, and on a prepacked one (what
    ember's inference graphs run after folding)."""
    print("| batch | layer | NCHW | channels-last | + bias | pointwise, plain weight "
          "| pointwise, prepacked |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|")
    for batch in [int(b) for b in os.environ.get("EMBER_BENCH_BATCHES", "8,32").split(",")]:
        for cin, cout, size in ((3, 16, 32), (16, 32, 16), (32, 64, 8)):
            x = torch.randn(batch, cin, size, size)
            w, b = torch.randn(cout, cin, 3, 3), torch.randn(cout)
            steps = _convolution_steps(x, w, b)
            with torch.no_grad():
                best = {k: lo * 1e6 for k, (lo, _) in interleaved(steps, ROUNDS).items()}
            cells = " | ".join(f"{best[k]:.0f}" for k in steps)
            print(f"| {batch} | {cin}->{cout}, {size}x{size} | {cells} |", flush=True)


def main() -> int:
    torch.set_num_threads(THREADS)
    if sys.argv[1:] == ["convolutions"]:
        convolutions()
        return 0
    if sys.argv[1:] == ["fold"]:
        fold_ab()
        return 0
    os.environ.setdefault("EMBER_CACHE_DIR", tempfile.mkdtemp(prefix="ember-bench-"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="torch-bench-"))
    batches = [int(b) for b in os.environ.get("EMBER_BENCH_BATCHES", "8,32").split(",")]
    modes = os.environ.get("EMBER_BENCH_MODES", "inference,training").split(",")
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, rounds {ROUNDS}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    lines = [
        "| mode | batch | eager ms (min / median) | torch.compile ms | ember ms "
        "| ember folded ms | torch.compile speedup (min) | ember speedup (min) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in modes:
        for batch in batches:
            print(f"{mode}, batch {batch}", flush=True)
            r = run(batch, training=mode == "training")
            eager, torch_, ember_ = r["eager"], r["torch.compile"], r["ember"]
            folded = r.get("ember folded")
            folded = f"{folded[0]:.3f} / {folded[1]:.3f}" if folded else "-"
            lines.append(
                f"| {mode} | {batch} | {eager[0]:.3f} / {eager[1]:.3f} "
                f"| {torch_[0]:.3f} / {torch_[1]:.3f} | {ember_[0]:.3f} / {ember_[1]:.3f} "
                f"| {folded} "
                f"| {eager[0] / torch_[0]:.2f}x | {eager[0] / ember_[0]:.2f}x |"
            )
            print(lines[-1], flush=True)
    print()
    print("\n".join(lines))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
