"""Dynamic shapes over 20 sequence lengths of a small GPT2: traces, trace time, guard cost.

Ember side (guards): the model's forward is traced on fakes (FakeTensorMode),
as capture does, and guarded by a GuardSet. Three policies over the same 20
sequence lengths, each length fed in turn:

- static:    every new length fails the guard and is traced again;
- automatic: the first length is traced static; when a size change fails
             the guard, the sequence dim is made dynamic (one symbolic trace
             that the later lengths pass), as `dynamic=None` does;
- dynamic:   the sequence dim is symbolic from the first trace.

torch side: `torch.compile(model, backend="eager", dynamic=None)` on the same
sweep: its number of compiled graphs and its compile time (the first sweep
minus a second, warm sweep), and its warm per-call overhead over eager. torch's
column covers its whole capture (bytecode tracing included), ember's only the
fake trace of the forward, until capture passes symbolic sizes through.

    python benchmarks/dynamic_shapes_bench.py
"""

from __future__ import annotations

import time
import warnings

import torch

from guards import FakeTensorMode, GuardSet, LocalSource, ShapeEnv

LENGTHS = [5 + 7 * i for i in range(20)]
BATCH = 2


def build_model() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=256,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    return GPT2Model(config).eval()


def trace(model: torch.nn.Module, ids: torch.Tensor, dynamic: bool):
    """One fake trace of the forward; returns (compiled guards, seconds)."""
    start = time.perf_counter()
    env = ShapeEnv() if dynamic else None
    mode = FakeTensorMode(shape_env=env)
    source = LocalSource("input_ids")
    fake = mode.from_real(ids, source, dynamic_dims=[1] if dynamic else None)
    with mode, torch.no_grad():
        model(input_ids=fake)
    guards = GuardSet()
    guards.add_tensor(source, fake)
    if env is not None:
        guards.add_shape_env(env)
    compiled = guards.compile()
    return compiled, time.perf_counter() - start


def ember_sweep(model: torch.nn.Module, policy: str) -> tuple[int, float, float]:
    """(traces, total trace seconds, guard microseconds per check) for one policy."""
    entries: list = []
    traces, seconds, dynamic = 0, 0.0, policy == "dynamic"
    frame: dict = {}
    for length in LENGTHS:
        frame = {"input_ids": torch.randint(0, 1000, (BATCH, length))}
        if any(entry(frame, {}) for entry in entries):
            continue
        if entries and policy == "automatic":
            dynamic = True
        compiled, took = trace(model, frame["input_ids"], dynamic)
        entries.append(compiled)
        traces, seconds = traces + 1, seconds + took
    return traces, seconds, guard_microseconds(entries[-1].check, frame)


def guard_microseconds(check, frame: dict, number: int = 5000) -> float:
    """Best mean time of one passing guard check, in microseconds."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(number):
            check(frame, {})
        best = min(best, (time.perf_counter() - start) / number)
    return best * 1e6


def torch_sweep(model: torch.nn.Module) -> tuple[int, float, float]:
    """(graphs compiled, compile seconds, warm per-call overhead) for torch.compile."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager", dynamic=None)
    inputs = [torch.randint(0, 1000, (BATCH, n)) for n in LENGTHS]
    with torch.no_grad():
        start = time.perf_counter()
        for ids in inputs:
            compiled(input_ids=ids)
        total = time.perf_counter() - start
        # steady-state call overhead: one more pass after compiling
        start = time.perf_counter()
        for ids in inputs:
            compiled(input_ids=ids)
        warm = time.perf_counter() - start
        start = time.perf_counter()
        for ids in inputs:
            model(input_ids=ids)
        eager = time.perf_counter() - start
    return int(counters["stats"]["unique_graphs"]), total - warm, (warm - eager) / len(inputs)


def main() -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(2)
    model = build_model()
    print(f"GPT2 (2 layers, 64 wide), batch {BATCH}, {len(LENGTHS)} sequence lengths")
    print(f"{'policy':<28}{'traces':>8}{'trace s':>10}{'guard us':>10}")
    for policy in ("static", "automatic", "dynamic"):
        traces, seconds, guard_us = ember_sweep(model, policy)
        print(f"{'ember fakes, ' + policy:<28}{traces:>8}{seconds:>10.2f}{guard_us:>10.1f}")
    graphs, seconds, _ = torch_sweep(model)
    print(f"{'torch.compile dynamic=None':<28}{graphs:>8}{seconds:>10.2f}")


if __name__ == "__main__":
    main()
