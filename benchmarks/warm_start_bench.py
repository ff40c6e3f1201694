"""First-call time of a compiled training step in a new process: cold, warm, remote-warm.

    python benchmarks/warm_start_bench.py                 # gpt2 (2 layers), 3 repeats
    python benchmarks/warm_start_bench.py --models gpt2 mlp --repeat 5
    python benchmarks/warm_start_bench.py --models gpt2-infer   # forward under no_grad
    python benchmarks/warm_start_bench.py --device cuda --models gpt2 gpt2-infer resnet50

`--device cuda` takes the GPU suite's models (`models.GPU_MODELS`, as gpu_bench.py builds
them: a training step under AMP bf16, inference in bf16 under no_grad), timed with a
synchronize at the end of each step. `--suite gpu` runs those models on the CPU (under CPU
autocast bf16), to reproduce on a machine without a GPU what a GPU run shows:
    python benchmarks/warm_start_bench.py --suite gpu --models gpt2 --repeat 1

A model name ending in `-infer` times a forward under `torch.no_grad()` instead of a
training step. Each row is the median over `--repeat` rounds; each round runs fresh processes:
- cold: an empty cache folder (capture, AOT, lowering, C++ builds);
- kernels only: the kernel cache of the cold run, warm start off (what ember did before);
- warm: the cold run's cache, warm start on;
- remote-warm: an empty local cache, entries and kernels from a redis-server
  started here on a free port (skipped without redis-server and redis-py);
- eager: the model not compiled, for the first step's own cost.
Every compiled process's outputs and grads must match the cold run's bit for bit (on the
GPU, where kernels with atomic adds vary between runs, their absolute sums within 1e-3).
"CPU s" is the first call's CPU time (all threads, and the compilers it ran): steadier
than wall time on a machine shared with other jobs. "capture" counts frames installed from a kept
capture record (no bytecode capture).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["packages/ember/src", "guards/src", "dynamo_capture/src", "prim_decomp/src"]
SOURCES += ["aot_autograd/src", "inductor_codegen/src"]

CHILD = """
import hashlib, json, resource, sys, time
sys.path.insert(0, {benchmarks!r})
import torch, ember
from ember import warm_cache
from models import MODELS
case = MODELS[{model!r}]()
compiled = case.model if {eager} else ember.compile(case.model)
def step():
    if {infer}:
        with torch.no_grad():
            return case.loss(compiled(*case.inputs))
    loss = case.loss(compiled(*case.inputs))
    loss.backward()
    return loss
def cpu_seconds():
    return sum(sum(resource.getrusage(who)[:2]) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
start, cpu = time.perf_counter(), cpu_seconds()
loss = step()
first = time.perf_counter() - start
first_cpu = cpu_seconds() - cpu
case.model.zero_grad()
start = time.perf_counter()
step()
later = time.perf_counter() - start
data = loss.detach().numpy().tobytes()
data += b"".join(p.grad.numpy().tobytes() for p in case.model.parameters() if p.grad is not None)
print(json.dumps({{"first": first, "first_cpu": first_cpu, "later": later, "digest": hashlib.sha256(data).hexdigest(),
                  "stats": dict(warm_cache.STATS)}}))
"""

CHILD_GPU = """
import hashlib, json, resource, sys, time
sys.path.insert(0, {benchmarks!r})
import torch, ember
from ember import warm_cache
from models import GPU_MODELS
from gpu_bench import make_step
torch.manual_seed(0)
model, inputs = GPU_MODELS[{model!r}][0]()
for m in model.modules():
    if isinstance(m, torch.nn.Dropout):
        m.p = 0.0
mode = "infer" if {infer} else "train"
floating = torch.bfloat16 if {infer} else torch.float32
model = model.to({device!r})
model = model.eval().to(floating) if {infer} else model.train()
inputs = tuple(x.to({device!r}, floating if x.is_floating_point() else x.dtype) for x in inputs)
compiled = model if {eager} else ember.compile(model)
run = make_step(compiled, inputs, mode)
def step():
    out = run()
    if {device!r} == "cuda":
        torch.cuda.synchronize()
    return out
def cpu_seconds():
    return sum(sum(resource.getrusage(who)[:2]) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
if {device!r} == "cuda":
    torch.cuda.synchronize()
start, cpu = time.perf_counter(), cpu_seconds()
result = step()
first = time.perf_counter() - start
first_cpu = cpu_seconds() - cpu
start = time.perf_counter()
step()
later = time.perf_counter() - start
data = b"".join(t.detach().float().cpu().numpy().tobytes() for t in result)
total = sum(float(t.detach().double().abs().sum()) for t in result)
print(json.dumps({{"first": first, "first_cpu": first_cpu, "later": later, "digest": hashlib.sha256(data).hexdigest(),
                  "total": total,
                  "stats": dict(warm_cache.STATS)}}))
"""

DEVICE = {"name": "cpu", "suite": "cpu"}


def child(model: str, cache: Path, eager: bool = False, **variables: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [*(str(ROOT / s) for s in SOURCES), env.get("PYTHONPATH", "")]
    )
    env["EMBER_CACHE_DIR"] = str(cache)
    env.update(variables)
    name, infer = model.removesuffix("-infer"), model.endswith("-infer")
    template = CHILD_GPU if DEVICE["suite"] == "gpu" else CHILD
    code = template.format(
        benchmarks=str(ROOT / "benchmarks"), model=name, eager=eager, infer=infer,
        device=DEVICE["name"],
    )  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        run = ", ".join(f"{k}={v}" for k, v in variables.items()) or "default"
        raise RuntimeError(f"{model} ({cache.name}, {run}, eager={eager}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(folder: Path) -> tuple[subprocess.Popen, str] | None:
    server = shutil.which("redis-server")
    try:
        import redis
    except ImportError:
        return None
    if server is None:
        return None
    port = _free_port()
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(100):
        try:
            client.ping()
            return process, f"redis://127.0.0.1:{port}/0"
        except redis.ConnectionError:
            time.sleep(0.05)
    process.terminate()
    return None


def one_round(model: str, folder: Path, remote: str | None) -> dict[str, dict]:
    rows = {}
    rows["cold"] = child(model, folder / "a")
    eager = child(model, folder / "e", eager=True)
    rows["kernels only"] = child(model, folder / "a", EMBER_WARM_START="0")
    rows["warm"] = child(model, folder / "a")
    if remote is not None:
        child(model, folder / "b", EMBER_REMOTE_CACHE=remote)  # publishes
        rows["remote-warm"] = child(model, folder / "c", EMBER_REMOTE_CACHE=remote)
    for name, row in rows.items():
        if DEVICE["name"] == "cuda":  # GPU kernels with atomics (embedding backward) vary
            cold = rows["cold"]["total"]
            if abs(row["total"] - cold) > 1e-3 * abs(cold):
                raise AssertionError(
                    f"{model}: the {name} run's outputs differ from the cold run's"
                )
        elif row["digest"] != rows["cold"]["digest"]:
            raise AssertionError(f"{model}: the {name} run's outputs differ from the cold run's")
    rows["eager"] = eager  # not compiled: the first step's own cost (allocations, thread pools)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["gpt2"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--suite", choices=("cpu", "gpu"), help="the models: gpu with --device cuda by default"
    )
    args = parser.parse_args()
    DEVICE["name"] = args.device
    DEVICE["suite"] = args.suite or ("gpu" if args.device == "cuda" else "cpu")
    with tempfile.TemporaryDirectory(prefix="ember-warm-bench-") as tmp:
        base = Path(tmp)
        redis = start_redis(base)
        remote = redis[1] if redis else None
        if remote is None:
            print("(no redis-server or redis-py: the remote-warm row is skipped)")
        try:
            print(
                f"{'model':<12}{'run':<14}{'first call s':>13}{'x cold':>8}{'CPU s':>8}"
                f"{'x cold':>8}{'later s':>9}  hits"
            )
            for model in args.models:
                rounds = []
                for i in range(args.repeat):
                    if redis is not None:
                        import redis as redis_py

                        redis_py.Redis.from_url(remote).flushdb()
                    rounds.append(one_round(model, base / f"{model}{i}", remote))
                cold = statistics.median(r["cold"]["first"] for r in rounds)
                cold_cpu = statistics.median(r["cold"]["first_cpu"] for r in rounds)
                for name in rounds[0]:
                    first = statistics.median(r[name]["first"] for r in rounds)
                    cpu = statistics.median(r[name]["first_cpu"] for r in rounds)
                    later = statistics.median(r[name]["later"] for r in rounds)
                    stats = rounds[0][name]["stats"]
                    hits = f"{stats.get('hits', 0)} ({stats.get('remote_hits', 0)} remote)"
                    hits += f", capture {stats.get('capture_hits', 0)}"
                    print(
                        f"{model:<12}{name:<14}{first:>13.3f}{first / cold:>8.2f}{cpu:>8.3f}"
                        f"{cpu / cold_cpu:>8.2f}{later:>9.3f}  {hits}"
                    )
        finally:
            if redis is not None:
                redis[0].terminate()
                redis[0].wait(timeout=10)


if __name__ == "__main__":
    main()
