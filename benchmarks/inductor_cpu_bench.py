"""inductor_codegen on the CPU: speedup over eager and compile time, next to torch.compile.

    python benchmarks/inductor_cpu_bench.py            inference and training, all models
    python benchmarks/inductor_cpu_bench.py mlp cnn    only these models

Graphs for ember come from make_fx with prim_decomp's inductor_default table
(the stand-in for capture + aot_autograd); "trace" is that time, "compile" is
inductor_codegen.compile_graph from a cold kernel cache. torch.compile's time
is its first call (dynamo + aot + inductor) with a cold cache. Training runs
the forward and the gradients of a mean-square loss. Threads: 2.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
for folder in ("guards/src", "prim_decomp/src", "inductor_codegen/src", "inductor_codegen/tests"):
    sys.path.insert(0, str(ROOT / folder))

from models import model_cases  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from inductor_codegen import compile_graph  # noqa: E402
from prim_decomp import inductor_default  # noqa: E402

TABLE = dict(inductor_default)

SCALE = int(os.environ.get("EMBER_BENCH_SCALE", "4"))
REPEATS = 30


def timeit(*fns, repeats=REPEATS) -> list[float]:
    """Best time of each function over `repeats` rounds, run in turn within each round.

    Interleaving and taking the minimum keep the comparison fair when other
    processes share the machine.
    """
    for fn in fns:
        for _ in range(3):
            fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - start)
    return best


def inference_fns(model, x):
    def eager():
        with torch.no_grad():
            return model(x)

    return eager


def ember_inference(model, x, cache_dir):
    start = time.perf_counter()
    with torch.no_grad():
        gm = make_fx(lambda inp: model(inp), decomposition_table=TABLE)(x)
    traced = time.perf_counter() - start
    start = time.perf_counter()
    compiled = compile_graph(gm, [x], options={"cache_dir": cache_dir})
    compiled_s = time.perf_counter() - start
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-3, atol=1e-3)
    return (lambda: compiled(x)), traced, compiled_s


def torch_inference(model, x):
    torch._dynamo.reset()
    fn = torch.compile(model, backend="inductor")
    start = time.perf_counter()
    with torch.no_grad():
        fn(x)
    compiled_s = time.perf_counter() - start

    def run():
        with torch.no_grad():
            return fn(x)

    return run, compiled_s


def training_step(model):
    names = [n for n, _ in model.named_parameters()]

    def step(inp, *weights):
        out = torch.func.functional_call(model, dict(zip(names, weights)), (inp,))
        loss = (out**2).mean()
        return (loss, *torch.autograd.grad(loss, weights))

    return step


def ember_training(model, x, cache_dir):
    params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    step = training_step(model)
    start = time.perf_counter()
    gm = make_fx(step, decomposition_table=TABLE)(x, *params)
    traced = time.perf_counter() - start
    start = time.perf_counter()
    compiled = compile_graph(gm, [x, *params], options={"cache_dir": cache_dir})
    compiled_s = time.perf_counter() - start
    torch.testing.assert_close(compiled(x, *params), step(x, *params), rtol=1e-3, atol=1e-3)
    return (lambda: compiled(x, *params)), traced, compiled_s


def eager_training(model, x):
    params = list(model.parameters())

    def run():
        loss = (model(x) ** 2).mean()
        return torch.autograd.grad(loss, params)

    return run


def torch_training(model, x):
    torch._dynamo.reset()
    compiled_model = torch.compile(model, backend="inductor")
    params = list(model.parameters())

    def run():
        loss = (compiled_model(x) ** 2).mean()
        return torch.autograd.grad(loss, params)

    start = time.perf_counter()
    run()
    return run, time.perf_counter() - start


def main(argv: list[str]) -> int:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / "torchinductor")
        import torch._inductor.config as inductor_config

        inductor_config.fx_graph_cache = False
        for name, model, x in model_cases(SCALE):
            if argv and name not in argv:
                continue
            cache = Path(tmp) / f"ember_{name}"
            eager = inference_fns(model, x)
            ember_fn, traced, ember_s = ember_inference(model, x, cache / "inference")
            torch_fn, torch_s = torch_inference(model, x)
            t_eager, t_ember, t_torch = timeit(eager, ember_fn, torch_fn)
            rows.append((name, "inference", t_eager, t_ember, t_torch, traced, ember_s, torch_s))
            model.train(False)
            for p in model.parameters():
                p.requires_grad_(True)
            ember_fn, traced, ember_s = ember_training(model, x, cache / "training")
            torch_fn, torch_s = torch_training(model, x)
            eager_fn = eager_training(model, x)
            t_eager, t_ember, t_torch = timeit(eager_fn, ember_fn, torch_fn)
            rows.append((name, "training", t_eager, t_ember, t_torch, traced, ember_s, torch_s))
    header = (
        f"{'model':<12} {'mode':<10} {'eager ms':>9} {'ember x':>8} {'torch x':>8} "
        f"{'trace s':>8} {'ember s':>8} {'torch s':>8}"
    )
    print(
        f"inductor_codegen CPU benchmark (scale {SCALE}, 2 threads, cold caches, best of {REPEATS})"
    )
    print(header)
    speedups = {"ember": [], "torch": []}
    for name, mode, te, tm, tt, traced, ember_s, torch_s in rows:
        speedups["ember"].append(te / tm)
        speedups["torch"].append(te / tt)
        print(
            f"{name:<12} {mode:<10} {te * 1e3:9.3f} {te / tm:8.2f} {te / tt:8.2f} "
            f"{traced:8.2f} {ember_s:8.2f} {torch_s:8.2f}"
        )
    if rows:
        print(
            f"geomean speedup: ember {statistics.geometric_mean(speedups['ember']):.2f}x, "
            f"torch.compile {statistics.geometric_mean(speedups['torch']):.2f}x; "
            f"compile total: ember {sum(r[6] for r in rows):.1f}s (+ trace "
            f"{sum(r[5] for r in rows):.1f}s), torch.compile {sum(r[7] for r in rows):.1f}s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
