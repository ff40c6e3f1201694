"""Host time per call of compiled models: tiny inputs, so the kernels cost next to nothing.

    python benchmarks/host_overhead_bench.py                     every case
    python benchmarks/host_overhead_bench.py mlp10 mlp100        only these cases
    python benchmarks/host_overhead_bench.py --profile resnet18  also ember's profile split
    EMBER_BENCH_MODES=inference EMBER_BENCH_BACKEND=aot_eager python benchmarks/host_overhead_bench.py

Cases, each on an input small enough that the time is the host's:

- `fn1`: a function of one tensor (`sin(x) + 1` on [4]): the fixed cost of a call;
- `mlp10`, `mlp100`: a Sequential of 10 / 100 Linear(4, 4) + ReLU layers on [2, 4]: the
  cost of guards and argument handling against model depth (20 / 200 parameters);
- `resnet18`, `resnet50`: the module trees of torchvision's models (built here: the
  same modules, parameters, buffers and forward, with 1/8 of the channels so that the
  weights, which a forward reads in full, cost no more than the host) on two 3x16x16
  images: BatchNorm everywhere, whose running statistics a training step updates
  (buffers mutated by the graph and copied back). Batch 2 since training needs more
  than one value per channel after layer4's 1x1 output.

`EMBER_BENCH_VARIANTS=ember,eager` times only those variants. `EMBER_BENCH_DEVICE=cuda`
runs every case on the GPU (each timed round ends with a synchronize; the split times
the host alone) and `EMBER_BENCH_WIDTH=64` gives the ResNets torchvision's channel
counts.

Modes: `inference` (eval mode, under no_grad) and `training` (train mode, forward,
`.sum()`, backward). Variants: eager, torch.compile and ember.compile, both with the
backend `EMBER_BENCH_BACKEND` (default inductor), called in interleaved rounds (each
round runs every variant `EMBER_BENCH_CALLS` times and keeps the mean, so load from
other processes falls on all of them alike); the table gives the median over
`EMBER_BENCH_ROUNDS` rounds (`EMBER_BENCH_STAT=min`: the fastest round, steadier on a
loaded machine), in microseconds per call: wall time, or with `EMBER_BENCH_CLOCK=cpu`
the thread's CPU time, which waiting for a core on a loaded machine does not inflate.

The split of ember's time comes from a separately compiled instance whose layers are
timed with perf_counter_ns (timers cost about 0.1 us each), as in overhead_bench.py:
guard (the capture entry's guard check), capture (the rest of capture's dispatch:
frame binding, the entry's code that reads the graph's inputs, the call into the
backend), aot (aot_autograd around the compiled graphs: the autograd.Function's
forward and backward, saved tensors, copy-back of mutated inputs, output assembly),
kernels (the generated wrappers: allocation, kernel and ATen calls, forward and
backward) and engine (training: autograd's engine and the `.sum()` outside the
compiled backward).

`--profile` adds, per row, cProfile's view of the same calls: each function's own time
(a builtin's own time, such as an ATen op's, is charged to its Python callers) summed by
where the function lives: guards, capture (dynamo_capture and ember), aot-glue
(aot_autograd but its output assembly), aot-outputs (assemble_outputs and the
copy-back of mutated inputs), wrapper (the generated wrappers and inductor_codegen's
runtime), autograd (torch's autograd.Function machinery) and other, in percent of
the profiled time, then the ten functions with the most own time. cProfile slows
Python code far more than C code: read the shares, not the sum.
"""

from __future__ import annotations

import copy
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead_bench  # noqa: E402  (puts every package's src folder on sys.path)

import ember  # noqa: E402

DEVICE = os.environ.get("EMBER_BENCH_DEVICE", "cpu")
WIDTH = int(os.environ.get("EMBER_BENCH_WIDTH", "8"))  # ResNets' channels after the stem
ROUNDS = int(os.environ.get("EMBER_BENCH_ROUNDS", "30"))
# "wall" time, or "cpu": this thread's CPU time, which time spent waiting for a core does
# not inflate (one thread: torch.set_num_threads(1) below; not for the GPU)
CLOCK = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}[
    os.environ.get("EMBER_BENCH_CLOCK", "wall")
]
# "median" of the rounds, or "min": on a machine other jobs load, the least disturbed round
STAT = {"median": statistics.median, "min": min}[os.environ.get("EMBER_BENCH_STAT", "median")]
CALLS = int(os.environ.get("EMBER_BENCH_CALLS", "10"))
BACKEND = os.environ.get("EMBER_BENCH_BACKEND", "inductor")
VARIANTS = tuple(
    v
    for v in ("eager", "torch.compile", "ember")
    if v in os.environ.get("EMBER_BENCH_VARIANTS", "eager,torch.compile,ember").split(",")
)


# -- models ------------------------------------------------------------------------------------


def mlp(depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(4, 4), nn.ReLU()]
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _downsample(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _downsample(inplanes: int, outplanes: int, stride: int) -> nn.Module | None:
    if stride == 1 and inplanes == outplanes:
        return None
    return nn.Sequential(
        nn.Conv2d(inplanes, outplanes, 1, stride, bias=False), nn.BatchNorm2d(outplanes)
    )


class ResNet(nn.Module):
    """torchvision.models.ResNet's module tree and forward (stem, four stages, head), with
    `width` channels after the stem where torchvision has 64."""

    def __init__(self, block: type, layers: list[int], width: int = 8) -> None:
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._stage(block, width, layers[0], 1)
        self.layer2 = self._stage(block, 2 * width, layers[1], 2)
        self.layer3 = self._stage(block, 4 * width, layers[2], 2)
        self.layer4 = self._stage(block, 8 * width, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * width * block.expansion, 1000 // 8)

    def _stage(self, block: type, planes: int, blocks: int, stride: int) -> nn.Sequential:
        stage = [block(self.inplanes, planes, stride)]
        self.inplanes = planes * block.expansion
        stage += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*stage)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def one_tensor(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) + 1


CASES: dict[str, Callable[[], tuple[Callable, torch.Tensor]]] = {
    "fn1": lambda: (one_tensor, torch.randn(4)),
    "mlp10": lambda: (mlp(10), torch.randn(2, 4)),
    "mlp100": lambda: (mlp(100), torch.randn(2, 4)),
    "resnet18": lambda: (ResNet(BasicBlock, [2, 2, 2, 2], WIDTH), torch.randn(2, 3, 16, 16)),
    "resnet50": lambda: (ResNet(Bottleneck, [3, 4, 6, 3], WIDTH), torch.randn(2, 3, 16, 16)),
}


def make_variant(name: str, model: Callable) -> Callable:
    if name == "eager":
        return model
    if name == "torch.compile":
        return torch.compile(model, backend=BACKEND)
    return ember.compile(model, backend=BACKEND)


def prepared(model: Callable, x: torch.Tensor, training: bool) -> tuple[Callable, torch.Tensor]:
    """A fresh copy of the model in the mode's train/eval state, and its input."""
    if isinstance(model, nn.Module):
        model = copy.deepcopy(model).train(training).to(DEVICE)
    x = x.to(DEVICE)
    return model, (x.clone().requires_grad_(True) if training and model is one_tensor else x)


# -- ember's split, by layer and by profile ----------------------------------------------------


def ember_split(model: Callable, x: torch.Tensor, training: bool) -> dict:
    """overhead_bench's layer timers around a separately compiled instance."""
    if not isinstance(model, nn.Module):
        model = _AsModule(model)
    overhead_bench.ROUNDS, overhead_bench.CALLS = ROUNDS, CALLS
    return overhead_bench.ember_split(model, x, training)


class _AsModule(nn.Module):
    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


_PLACES = (
    ("aot-outputs", ("aot_autograd", "assemble"), ("aot_autograd", "copy_back")),
    (
        "aot-outputs",
        ("aot_autograd", "mutat"),
    ),
    ("guards", ("/guards/src/",), ("<ember guards",), ("<ember module_tree",)),
    ("capture", ("dynamo_capture",), ("/ember/src/",), ("<ember resume",)),
    (
        "aot-glue",
        ("aot_autograd",),
    ),
    ("wrapper", ("inductor_codegen",), ("/wrappers/",), ("ember_wrapper",)),
    (
        "autograd",
        ("torch/autograd",),
    ),
)


def _place(function: tuple[str, int, str]) -> str:
    filename, _, name = function
    text = f"{filename}:{name}"
    for place, *patterns in _PLACES:
        for pattern in patterns:
            if all(part in text for part in pattern):
                return place
    return "other"


def profile_split(step: Callable[[], None], calls: int) -> tuple[dict[str, float], list[str]]:
    """Own time by place, in percent, and the top functions (see the module docstring)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        step()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    own: dict[tuple, float] = {}
    for function, (_, _, tottime, _, callers) in stats.items():
        if function[0] == "~" and callers:  # a builtin: charge its Python callers
            total = sum(c[2] for c in callers.values()) or 1.0
            for caller, values in callers.items():
                own[caller] = own.get(caller, 0.0) + tottime * values[2] / total
        else:
            own[function] = own.get(function, 0.0) + tottime
    whole = sum(own.values()) or 1.0
    places: dict[str, float] = {}
    for function, seconds in own.items():
        places[_place(function)] = places.get(_place(function), 0.0) + 100 * seconds / whole
    top = sorted(own.items(), key=lambda item: -item[1])[:10]
    lines = [
        f"  {100 * s / whole:5.1f}%  {s / calls * 1e6:7.1f} us  {Path(f[0]).name}:{f[1]} {f[2]}"
        for f, s in top
    ]
    return places, lines


def step_fn(model: Callable, x: torch.Tensor, training: bool) -> Callable[[], None]:
    return overhead_bench.step_fn(model, x, training)


def interleaved(steps: dict[str, Callable[[], None]]) -> dict[str, float]:
    """Median over rounds of each step's mean microseconds per call, variants interleaved;
    on a GPU each round ends with a synchronize (so the time counts queued kernels too)."""
    sync = torch.cuda.synchronize if DEVICE.startswith("cuda") else lambda: None
    for step in steps.values():
        for _ in range(CALLS):
            step()
    sync()
    times: dict[str, list[float]] = {label: [] for label in steps}
    clock = CLOCK
    for _ in range(ROUNDS):
        for label, step in steps.items():
            start = clock()
            for _ in range(CALLS):
                step()
            sync()
            times[label].append((clock() - start) / CALLS / 1000)
    return {label: STAT(values) for label, values in times.items()}


# -- driver ------------------------------------------------------------------------------------


def run_case(name: str, training: bool, profile: bool) -> dict:
    torch.manual_seed(0)
    model, x = CASES[name]()
    steps = {}
    for variant in VARIANTS:
        copy_of, x_of = prepared(model, x, training)
        steps[variant] = step_fn(make_variant(variant, copy_of), x_of, training)
        steps[variant]()  # compile outside the timed rounds
    row = {"case": name, "mode": "training" if training else "inference"}
    row.update(interleaved(steps))
    if BACKEND == "inductor" and "ember" in steps:
        row["split"] = ember_split(*prepared(model, x, training), training)
    if profile and "ember" in steps:
        row["profile"] = profile_split(steps["ember"], ROUNDS * CALLS)
    return row


def table(rows: list[dict]) -> str:
    keys = ("guard", "capture", "aot", "kernels", "engine")
    header = "| case | mode | " + " | ".join(VARIANTS) + " | ember split: " + " / ".join(keys)
    lines = [header + " |", "|---|---|" + "---:|" * len(VARIANTS) + "---|"]
    for r in rows:
        cells = [f"{r[v]:.1f}" for v in VARIANTS]
        split = r.get("split", {})
        parts = " / ".join(f"{split[k]:.1f}" if k in split else "-" for k in keys)
        lines.append(f"| {r['case']} | {r['mode']} | " + " | ".join(cells) + f" | {parts} |")
    return "\n".join(lines)


def profile_text(row: dict) -> str:
    places, top = row["profile"]
    shares = ", ".join(f"{k} {v:.0f}%" for k, v in sorted(places.items(), key=lambda i: -i[1]))
    return f"{row['case']} {row['mode']}: {shares}\n" + "\n".join(top)


def main(argv: list[str]) -> int:
    profile = "--profile" in argv
    names = [a for a in argv if a in CASES] or list(CASES)
    modes = os.environ.get("EMBER_BENCH_MODES", "inference,training").split(",")
    torch.set_num_threads(1)  # the kernels are tiny: thread start-up would only add noise
    print(
        f"per-call {CLOCK.__name__}, us ({STAT.__name__} of {ROUNDS} rounds of {CALLS} calls); "
        "backend "
        f"{BACKEND}; torch {torch.__version__}, 1 thread",
        flush=True,
    )
    rows = []
    for name in names:
        for mode in modes:
            rows.append(run_case(name, mode == "training", profile))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
            if profile:
                print(profile_text(rows[-1]), flush=True)
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
