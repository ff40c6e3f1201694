"""Dynamic shapes over 20 sequence lengths of a small GPT2: recompiles and compile time.

End to end: `ember.compile(model, backend=B, dynamic=D)` and
`torch.compile(model, backend=B, dynamic=D)` on the same sweep of 20 sequence
lengths, fed in turn, for B in eager / aot_eager / inductor. For each: the number
of graphs compiled, the compile time (the first sweep minus the best of three
warm sweeps, from cold kernel caches), the warm time per call, and whether every
output equals eager's.

- dynamic=False: every new length compiles again;
- dynamic=None (the default): the first length compiles static; the recompile
  caused by the size change makes the sequence dim symbolic (automatic dynamic),
  so the later lengths reuse one graph;
- dynamic=True: symbolic from the first call.

A backend that cannot take symbolic graphs is handed static ones (correct, but it
compiles per size): the "graphs" column shows it.

    python benchmarks/dynamic_shapes_bench.py            # all backends
    EMBER_BENCH_BACKENDS=inductor python benchmarks/dynamic_shapes_bench.py
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings

import torch

LENGTHS = [5 + 7 * i for i in range(20)]
BATCH = 2


def build_model() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=256,
        bos_token_id=0, eos_token_id=0, use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return GPT2Model(config).eval()


def _inputs() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(0, 1000, (BATCH, n), generator=generator) for n in LENGTHS]


def sweep(compiled, model, inputs) -> dict:
    """Compile seconds, warm ms per call and agreement with eager for one compiled model."""
    with torch.no_grad():
        expected = [model(input_ids=ids).last_hidden_state for ids in inputs]
        start = time.perf_counter()
        got = [compiled(input_ids=ids).last_hidden_state for ids in inputs]
        first = time.perf_counter() - start
        warm = float("inf")
        for _ in range(3):  # the best of three warm sweeps: load from other processes varies
            start = time.perf_counter()
            for ids in inputs:
                compiled(input_ids=ids)
            warm = min(warm, time.perf_counter() - start)
    matches = True
    for a, b in zip(got, expected):
        try:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        except AssertionError:
            matches = False
    return {
        "compile_s": first - warm,
        "warm_ms": warm / len(inputs) * 1e3,
        "matches": matches,
    }


def ember_row(model, backend: str, dynamic) -> dict:
    import ember
    from ember.api import compiled_callable_of

    ember.reset()
    os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-dyn-bench-")  # cold per row
    compiled = ember.compile(model, backend=backend, dynamic=dynamic)
    row = sweep(compiled, model, _inputs())
    runner = compiled_callable_of(compiled)
    row["graphs"] = len(runner.entries)
    return row


def torch_row(model, backend: str, dynamic) -> dict:
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    row = sweep(compiled, model, _inputs())
    row["graphs"] = int(counters["stats"]["unique_graphs"])
    return row


def main() -> None:
    warnings.simplefilter("ignore")
    # cold kernel caches: ember gets a fresh one per row; torch one per run (its later
    # rows may reuse kernels its earlier rows built, which can only favour torch)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="torch-dyn-bench-"))
    torch.set_num_threads(2)
    model = build_model()
    backends = os.environ.get("EMBER_BENCH_BACKENDS", "eager,aot_eager,inductor").split(",")
    print(
        f"GPT2 (2 layers, 64 wide), batch {BATCH}, {len(LENGTHS)} sequence lengths {LENGTHS[0]}.."
    )
    header = f"{'compiler':<10}{'backend':<11}{'dynamic':<9}{'graphs':>7}{'compile s':>11}"
    print(header + f"{'warm ms':>9}  matches eager")
    for backend in backends:
        for name, row_of in (("ember", ember_row), ("torch", torch_row)):
            for dynamic in (False, None, True):
                if name == "torch" and dynamic is False and backend == "inductor":
                    continue  # 20 static inductor compiles: minutes, and nothing new to learn
                row = row_of(model, backend, dynamic)
                print(
                    f"{name:<10}{backend:<11}{str(dynamic):<9}{row['graphs']:>7}"
                    f"{row['compile_s']:>11.2f}{row['warm_ms']:>9.2f}  "
                    f"{'yes' if row['matches'] else 'NO'}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
