"""Per-call time of a regional compile against the whole graph, in one process.

    python benchmarks/regional_step_bench.py                 # decode, inference, training
    python benchmarks/regional_step_bench.py --cases decode --rounds 60

A stack of 12 GPT-style blocks (width 64, one CPU thread) compiled twice with the
inductor backend: the default (the blocks one region, compiled once) and
`options={"regional": False}` (the whole graph). The cases:
- decode: no_grad, batch 4, one token at position 8, every block writing and reading
  its own slice of one KV cache tensor `[12, 2, 4, 16, 64]` at its index;
- inference: no_grad, batch 4 of 16 tokens, blocks without a cache;
- training: the same with a backward of `out.square().mean()`.
The two take turns, `--inner` calls each a round; the table gives the median and the
least per-call time of `--rounds` rounds, the median of the per-round ratios (steady
under a shared machine's drifting load), and Python function calls a call under
cProfile (independent of load). Outputs are checked against eager (assert_close).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import torch

import ember

WIDTH, DEPTH = 64, 12


class Block(torch.nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.qkv, self.proj = torch.nn.Linear(WIDTH, 3 * WIDTH), torch.nn.Linear(WIDTH, WIDTH)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(), torch.nn.Linear(4 * WIDTH, WIDTH)
        )

    def forward(self, x, cache=None, position=None):
        if cache is None:
            x = x + self.proj(self.qkv(self.ln_1(x))[..., :WIDTH])
            return x + self.mlp(self.ln_2(x))
        q, k, v = self.qkv(self.ln_1(x)).split(WIDTH, dim=-1)
        cache[self.index, 0, :, position] = k[:, 0]
        cache[self.index, 1, :, position] = v[:, 0]
        keys = cache[self.index, 0, :, : position + 1]
        values = cache[self.index, 1, :, : position + 1]
        weights = torch.softmax(q @ keys.transpose(-1, -2) / WIDTH**0.5, dim=-1)
        x = x + self.proj(weights @ values)
        return x + self.mlp(self.ln_2(x))


class Decoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(1000, WIDTH)
        self.blocks = torch.nn.ModuleList(Block(i) for i in range(DEPTH))
        self.head = torch.nn.Linear(WIDTH, 1000)

    def forward(self, ids, cache=None, position=None):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, cache, position)
        return self.head(x)


def _step(case: str, model: torch.nn.Module, fn):
    """A call of `fn` for `case` (its output, and the cache it wrote for decode)."""
    torch.manual_seed(1)
    if case == "decode":
        ids, prefilled = torch.randint(0, 1000, (4, 1)), torch.randn(DEPTH, 2, 4, 16, WIDTH)

        def step():
            cache = prefilled.clone()
            with torch.no_grad():
                return fn(ids, cache, 8), cache

        return step
    train = case == "training"
    model.train(train)
    ids = torch.randint(0, 1000, (4, 16))

    def step():
        with torch.set_grad_enabled(train):
            out = fn(ids)
            if train:
                out.square().mean().backward()
        return out.detach()

    return step


def run_case(case: str, rounds: int, inner: int) -> None:
    torch.manual_seed(0)
    model = Decoder().eval()
    steps = {
        "regional": ember.compile(model, backend="inductor"),
        "whole": ember.compile(model, backend="inductor", options={"regional": False}),
    }
    steps = {name: _step(case, model, fn) for name, fn in steps.items()}
    expected = _step(case, model, model)()
    for step in steps.values():
        torch.testing.assert_close(step(), expected, rtol=1e-4, atol=1e-4)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(inner):
                step()
            times[name].append((time.perf_counter() - start) / inner * 1e3)
    for name, step in steps.items():
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(10):
            step()
        profile.disable()
        calls = pstats.Stats(profile).total_calls / 10
        median, least = statistics.median(times[name]), min(times[name])
        print(f"| {case} | {name} | {median:.2f} | {least:.2f} | {calls:.0f} |", end="")
        if name == "regional":
            pairs = zip(times["regional"], times["whole"], strict=True)
            print(f" {statistics.median(a / b for a, b in pairs):.3f} |")
        else:
            print(" |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cases = ("decode", "inference", "training")
    parser.add_argument("--cases", nargs="+", default=list(cases), choices=cases)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--inner", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{DEPTH} blocks, width {WIDTH}, 1 thread, {args.rounds} rounds of {args.inner} calls")
    print("| case | compile | step ms (median) | step ms (least) | Python calls a step "
          "| regional / whole (median of rounds) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for case in args.cases:
        run_case(case, args.rounds, args.inner)


if __name__ == "__main__":
    main()
