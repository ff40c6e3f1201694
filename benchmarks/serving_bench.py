"""Tokens per second of HF `generate()` with the forward compiled: eager, ember, torch.compile.

    python benchmarks/serving_bench.py                     GPT-2 tiny, CPU
    EMBER_SERVING_MODELS=gpt2,llama EMBER_SERVING_BATCHES=1,8 python benchmarks/serving_bench.py
    EMBER_SERVING_SIZE=full python benchmarks/serving_bench.py   GPT-2 124M, Llama 2048x8 (GPU)
    EMBER_SERVING_VARIANTS=eager,ember,ember-ro,torch.compile,torch.compile-ro \
        EMBER_SERVING_CACHE=static python benchmarks/serving_bench.py

A variant ending in `-ro` compiles with `mode="reduce-overhead"` (CUDA graphs on the
GPU); `ember-copyback` compiles with `options={"reinplace": False}` (the static cache's
new value copied back whole after each call, instead of written in place); `ember-whole`
with `options={"regional": False}` (the whole graph, not its repeated layers compiled
once, which is the CPU default). `EMBER_SERVING_CACHE=static` runs generate() with HF's static cache
(`cache_implementation="static"`: fixed-size key/value buffers, one decode shape)
instead of the default DynamicCache.

On a GPU, transformers compiles the decode step with torch.compile by itself when the
cache is static (its "auto-compile"), whatever `model.forward` is. Every variant here
passes `disable_compile=True` so that "eager" is eager and a compiled variant is its
compiler alone; the variant `hf-auto` leaves transformers' own compile on (what a user
of the static cache gets without compiling anything), `hf-ember` the same with
`CompileConfig(backend="ember")`.

Each variant compiles `model.forward` (`model.forward = compile(model.forward)`), the
way serving code does, and runs `generate()` greedily with a DynamicCache. Columns:
the first call's latency (capture and compile included), then tokens per second over
`EMBER_SERVING_CALLS` more calls (median, and the fastest call's, which load from other
processes disturbs least; the variants take turns, one call each
per round, so that load from other processes falls on all alike), the number of compiled
entries after the first call and after the last (ember; torch.compile's frame count
from its CompileCounter is not available with a real backend, so it is left out), and
whether the tokens equal eager's. Models are built from configs with random weights.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
for package in ("guards", "dynamo_capture", "prim_decomp", "aot_autograd", "inductor_codegen"):
    sys.path.insert(0, str(ROOT / package / "src"))
sys.path.insert(0, str(ROOT / "packages" / "ember" / "src"))

import transformers  # noqa: E402

import ember  # noqa: E402
from ember.api import compiled_callable_of  # noqa: E402

MODELS = os.environ.get("EMBER_SERVING_MODELS", "gpt2").split(",")
BATCHES = [int(b) for b in os.environ.get("EMBER_SERVING_BATCHES", "1").split(",")]
VARIANTS = os.environ.get("EMBER_SERVING_VARIANTS", "eager,ember,torch.compile").split(",")
SIZE = os.environ.get("EMBER_SERVING_SIZE", "tiny")
PROMPT = int(os.environ.get("EMBER_SERVING_PROMPT", "128" if SIZE == "full" else "16"))
NEW_TOKENS = int(os.environ.get("EMBER_SERVING_NEW_TOKENS", "128" if SIZE == "full" else "32"))
CALLS = int(os.environ.get("EMBER_SERVING_CALLS", "4"))
CACHE = os.environ.get("EMBER_SERVING_CACHE", "dynamic")
# layers of the tiny configs (regions need 3 repeated layers: with 2, ember compiles whole)
LAYERS = int(os.environ.get("EMBER_SERVING_LAYERS", "2"))
DEVICE = "cuda" if torch.cuda.is_available() and SIZE == "full" else "cpu"
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32


def build(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "gpt2":
        if SIZE == "full":
            config = transformers.GPT2Config()
        else:
            config = transformers.GPT2Config(
                n_layer=LAYERS, n_head=4, n_embd=128, vocab_size=1000, n_positions=256
            )
        model = transformers.GPT2LMHeadModel(config)
    else:
        if SIZE == "full":
            config = transformers.LlamaConfig(
                hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
            )  # fmt: skip
        else:
            config = transformers.LlamaConfig(
                hidden_size=128, intermediate_size=256, num_hidden_layers=LAYERS,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                max_position_embeddings=256,
            )  # fmt: skip
        model = transformers.LlamaForCausalLM(config)
    return model.to(DEVICE, DTYPE).eval()


def generate(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    extra: dict[str, Any] = {"cache_implementation": "static"} if CACHE == "static" else {}
    if not getattr(model, "_hf_auto_compile", False) and hasattr(
        transformers.GenerationConfig(), "disable_compile"
    ):
        extra["disable_compile"] = True  # no torch.compile of transformers' own
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
            pad_token_id=0, **extra,
        )  # fmt: skip
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return out


def prepare(kind: str, batch: int, variant: str) -> dict[str, Any]:
    """The model with its forward compiled, after its first generate() call (timed)."""
    model = build(kind)
    compiler, _, suffix = variant.partition("-")
    mode = "reduce-overhead" if suffix == "ro" else None
    if compiler == "ember":
        options = {"copyback": {"reinplace": False}, "whole": {"regional": False}}.get(suffix)
        model.forward = ember.compile(model.forward, mode=mode, options=options)
    elif compiler == "torch.compile":
        model.forward = torch.compile(model.forward, mode=mode)
    elif compiler == "hf":  # transformers' own torch.compile of static-cache decode steps
        model._hf_auto_compile = True
        if suffix == "ember":  # hf-ember: with ember's torch.compile backend
            # (the function itself: "ember" names it where the package is installed)
            from ember.torch_backends import ember_inductor

            model.generation_config.compile_config = transformers.CompileConfig(
                backend=ember_inductor
            )
    torch.manual_seed(1)
    ids = torch.randint(1, model.config.vocab_size, (batch, PROMPT), device=DEVICE)
    start = time.perf_counter()
    first = generate(model, ids)
    result = {"model": model, "ids": ids, "first": first, "seconds": []}
    result["first_s"] = time.perf_counter() - start
    result["entries"] = (
        [len(compiled_callable_of(model.forward).entries)] if compiler == "ember" else []
    )
    return result


def main() -> None:
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    print(
        f"device {DEVICE}, {DTYPE}, {CACHE} cache, {LAYERS} layers (tiny), "
        f"{torch.get_num_threads()} threads, "
        f"prompt {PROMPT} + "
        f"{NEW_TOKENS} new tokens, {CALLS} timed rounds after the first call"
    )
    print(
        f"{'model':6s} {'batch':>5s} {'variant':14s} {'first call s':>12s} "
        f"{'tokens/s':>9s} {'best':>7s} {'entries (1st, last)':>20s} {'tokens = eager':>15s}"
    )
    for kind in MODELS:
        for batch in BATCHES:
            runs = {}
            for variant in VARIANTS:
                if variant.startswith(("torch.compile", "hf")):
                    torch._dynamo.reset()
                try:
                    runs[variant] = prepare(kind, batch, variant)
                except Exception as error:  # a variant that fails is reported, not fatal
                    print(f"{kind:6s} {batch:5d} {variant:14s} failed: {type(error).__name__}: "
                          f"{(str(error).splitlines() or [''])[0][:120]}", flush=True)  # fmt: skip
            # rounds: each variant once per round, so that load falls on all alike
            for _ in range(CALLS):
                for variant, run in list(runs.items()):
                    start = time.perf_counter()
                    try:
                        run["out"] = generate(run["model"], run["ids"])
                    except Exception as error:
                        print(f"{kind:6s} {batch:5d} {variant:14s} failed: "
                              f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:120]}")  # fmt: skip
                        del runs[variant]
                        continue
                    run["seconds"].append(time.perf_counter() - start)
            reference = runs["eager"]["out"] if "eager" in runs else None
            for variant, run in runs.items():
                if variant.startswith("ember"):
                    run["entries"].append(len(compiled_callable_of(run["model"].forward).entries))
                same = torch.equal(run["first"], run["out"]) and (
                    reference is None or torch.equal(run["out"], reference)
                )
                tokens_per_s = batch * NEW_TOKENS / statistics.median(run["seconds"])
                best = batch * NEW_TOKENS / min(run["seconds"])
                entries = ", ".join(map(str, run["entries"])) or "-"
                print(
                    f"{kind:6s} {batch:5d} {variant:14s} {run['first_s']:12.2f} "
                    f"{tokens_per_s:9.1f} {best:7.1f} {entries:>20s} {str(same):>15s}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
