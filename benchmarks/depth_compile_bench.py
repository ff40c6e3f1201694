"""Cold compile time against depth: GPT-2 (random weights, small width) of 2 to 24 layers.

    python benchmarks/depth_compile_bench.py                       # training step, CPU
    python benchmarks/depth_compile_bench.py --depths 2 24 --repeat 3 --inference
    python benchmarks/depth_compile_bench.py --llama --extra-path /tmp/tfold --amp

`--llama` times a Llama model (`LlamaModel`, 4 heads, 2 KV heads) instead of GPT-2;
`--extra-path` puts a folder first on the children's PYTHONPATH (another transformers
version: 5.17's rotary embedding runs under `no_grad` with autocast off, so the graph
switches modes outside its layers); `--amp` runs the step under CPU autocast (bfloat16,
outputs and gradients compared with rtol = atol = 2e-2).

The model is built with `use_cache=False` (a training step keeps no KV cache): each
block then takes only tensors, and capture replays the first block's nodes for the
others (dynamo_capture.region_reuse); with a cache, each block writes its own layer of
it and is traced.

`--decode` times a decode step instead (no_grad, one token at position 8): a stack of
GPT-style blocks sharing one KV cache tensor `[layers, 2, batch, 16, width]`, each
block writing and reading its own slice at its index (`cache[self.index, 0, :, p] = k`),
as static caches holding all layers in one tensor do. The blocks' graphs differ only
in that index; ember lifts it as an input of the region, so one is compiled.

Each run is a fresh process with empty caches (ember's and torch's), the rows taking
turns round by round; the table gives the median and the least of `--repeat` runs
(the least is the steadiest on a shared machine); "compile CPU s" is the same in CPU
seconds of the process and its children (the C++ compiler), steadier under load. "compile s" is the first call (capture, compile, run; forward and backward for a training step)
less one eager step; "step ms" is the median of 30 later calls (eager: of 10), on one
CPU thread by default (steady on a shared machine); for ember, "step / whole-graph
step" times the whole-graph compile in the same process, in turns. Compilers:
- ember: the default, the calls of identical blocks compiled once (ember.regions);
- ember whole: options={"regional": False}, the whole graph as one;
- torch: torch.compile (inductor), with nothing marked by hand.
Every compiled output (and gradient) is checked against eager with assert_close.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["packages/ember/src", "guards/src", "dynamo_capture/src", "prim_decomp/src"]
SOURCES += ["aot_autograd/src", "inductor_codegen/src"]
COMPILERS = ("ember", "ember whole", "torch")

CHILD = """
import json, resource, statistics, sys, time, warnings
warnings.filterwarnings("ignore")
import torch, transformers
transformers.logging.set_verbosity_error()
compiler, depth, train, width, amp = {compiler!r}, {depth}, {train}, {width}, {amp}
tolerance = {{"rtol": 2e-2, "atol": 2e-2}} if amp else {{}}
torch.set_num_threads({threads})
torch.manual_seed(0)
if {decode}:
    class Block(torch.nn.Module):
        def __init__(self, index):
            super().__init__()
            self.index = index
            self.ln_1, self.ln_2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
            self.mlp = torch.nn.Sequential(
                torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
            )
        def forward(self, x, cache, position):
            q, k, v = self.qkv(self.ln_1(x)).split(width, dim=-1)
            cache[self.index, 0, :, position] = k[:, 0]
            cache[self.index, 1, :, position] = v[:, 0]
            keys = cache[self.index, 0, :, : position + 1]
            values = cache[self.index, 1, :, : position + 1]
            weights = torch.softmax(q @ keys.transpose(-1, -2) / width**0.5, dim=-1)
            x = x + self.proj(weights @ values)
            return x + self.mlp(self.ln_2(x))
    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(1000, width)
            self.blocks = torch.nn.ModuleList(Block(i) for i in range(depth))
            self.head = torch.nn.Linear(width, 1000)
        def forward(self, ids, cache, position):
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x, cache, position)
            return self.head(x)
    model = Decoder().eval()
    ids = torch.randint(0, 1000, (4, 1))
    prefilled = torch.randn(depth, 2, 4, 16, width)
    caches = []
    def step(fn):
        cache = prefilled.clone()
        with torch.no_grad():
            out = fn(ids, cache, 8)
        caches.append(cache)
        return out
elif {llama}:
    config = transformers.LlamaConfig(
        num_hidden_layers=depth, hidden_size=width, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=2 * width, vocab_size=1000, max_position_embeddings=256, use_cache=False,
    )
    model = transformers.LlamaModel(config).train(train)
    ids = torch.randint(0, 1000, (4, 64))
    def step(fn):
        with torch.set_grad_enabled(train), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            out = fn(ids).last_hidden_state
        if train:
            out.float().square().mean().backward()
        return out
else:
    config = transformers.GPT2Config(
        n_layer=depth, n_embd=width, n_head=4, n_positions=256, vocab_size=1000,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
    )
    model = transformers.GPT2Model(config).train(train)
    ids = torch.randint(0, 1000, (4, 64))
    def step(fn):
        with torch.set_grad_enabled(train):
            out = fn(ids).last_hidden_state
            if train:
                out.square().mean().backward()
        return out
def cpu():
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
start, start_cpu = time.perf_counter(), cpu()
expected = step(model)
eager, eager_cpu = time.perf_counter() - start, cpu() - start_cpu
grads = [p.grad.clone() for p in model.parameters()] if train else []
model.zero_grad()
if compiler == "torch":
    compiled = torch.compile(model)
else:
    import ember
    compiled = ember.compile(model, options={{"regional": compiler == "ember"}})
start, start_cpu = time.perf_counter(), cpu()
out = step(compiled)
first, first_cpu = time.perf_counter() - start, cpu() - start_cpu
torch.testing.assert_close(out, expected, **tolerance)
if {decode}:
    torch.testing.assert_close(caches[-1], caches[0])
for grad, parameter in zip(grads, model.parameters()):
    torch.testing.assert_close(parameter.grad, grad, **tolerance)
# the whole-graph compile beside it, timed in turns with it (a shared machine drifts)
whole = None
if compiler == "ember":
    whole = ember.compile(model, options={{"regional": False}})
    step(whole)
times, whole_times = [], []
for _ in range(30):
    start = time.perf_counter()
    step(compiled)
    times.append(time.perf_counter() - start)
    if whole is not None:
        start = time.perf_counter()
        step(whole)
        whole_times.append(time.perf_counter() - start)
eager_times = []
for _ in range(10):
    start = time.perf_counter()
    step(model)
    eager_times.append(time.perf_counter() - start)
print(json.dumps({{"compile": first - eager, "compile_cpu": first_cpu - eager_cpu, "step": statistics.median(times),
                  "eager": statistics.median(eager_times),
                  "whole": statistics.median(whole_times) if whole_times else None}}))
"""


def child(
    compiler: str,
    depth: int,
    train: bool,
    width: int,
    threads: int,
    decode: bool = False,
    *,
    llama: bool = False,
    amp: bool = False,
    extra_path: str | None = None,
) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ)
        paths = [str(ROOT / s) for s in SOURCES]
        env["PYTHONPATH"] = os.pathsep.join(([extra_path] if extra_path else []) + paths)
        env["EMBER_CACHE_DIR"] = str(Path(cache) / "ember")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(cache) / "torch")
        env["TRITON_CACHE_DIR"] = str(Path(cache) / "triton")
        env["OMP_NUM_THREADS"] = str(threads)
        code = CHILD.format(
            compiler=compiler, depth=depth, train=train, width=width, threads=threads,
            decode=decode, llama=llama, amp=amp,
        )  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
        )
    if done.returncode:
        raise RuntimeError(f"{compiler} at depth {depth} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 6, 12, 24])
    parser.add_argument("--compilers", nargs="+", default=list(COMPILERS), choices=COMPILERS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--inference", action="store_true", help="no_grad forward only")
    parser.add_argument(
        "--decode", action="store_true", help="a decode step over one shared KV cache tensor"
    )
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (1: steady times)")
    parser.add_argument("--llama", action="store_true", help="a Llama model in place of GPT-2")
    parser.add_argument("--amp", action="store_true", help="under CPU autocast (bfloat16)")
    parser.add_argument("--extra-path", help="a folder first on the children's PYTHONPATH")
    args = parser.parse_args()
    train = not (args.inference or args.decode)
    what = "decode step" if args.decode else "training step" if train else "inference"
    model = "GPT-style decoder, one KV cache tensor" if args.decode else "GPT-2"
    if args.llama and not args.decode:
        model = "Llama" + (f" ({args.extra_path} first on the path)" if args.extra_path else "")
    what += ", CPU autocast bfloat16" if args.amp else ""
    print(f"{model}, width {args.width}, {what}, "
          f"{args.threads} thread(s), median of {args.repeat} fresh processes")  # fmt: skip
    print("| compiler | layers | compile s (median) | compile s (min) | vs first depth (min) "
          "| compile CPU s (median) | step ms | eager step ms | step / whole-graph step |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    # Rounds outermost: each round runs every row once, so a shared machine's drifting
    # load falls on every row alike.
    rows: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.repeat):
        for compiler in args.compilers:
            for depth in args.depths:
                result = child(
                    compiler, depth, train, args.width, args.threads, args.decode,
                    llama=args.llama, amp=args.amp, extra_path=args.extra_path,
                )  # fmt: skip
                rows.setdefault((compiler, depth), []).append(result)
    for compiler in args.compilers:
        base = None
        for depth in args.depths:
            done = rows[(compiler, depth)]
            median = statistics.median(r["compile"] for r in done)
            least = min(r["compile"] for r in done)
            cpu = statistics.median(r["compile_cpu"] for r in done)
            step_ms = statistics.median(r["step"] for r in done) * 1000
            eager_ms = statistics.median(r["eager"] for r in done) * 1000
            beside = ""
            if done[0]["whole"] is not None:
                beside = f"{statistics.median(r['step'] / r['whole'] for r in done):.3f}"
            base = least if base is None else base
            print(f"| {compiler} | {depth} | {median:.2f} | {least:.2f} | {least / base:.2f}x "
                  f"| {cpu:.2f} | {step_ms:.2f} | {eager_ms:.2f} | {beside} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
