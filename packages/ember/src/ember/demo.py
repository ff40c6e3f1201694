"""The main job: compile a small transformer model with ember, run it, and compare
with eager PyTorch.

    python -m ember.demo [--backend NAME] [--steps N]

It prints, for each backend tried, whether the result matches eager, the compile
time and the per-call time, and what the compiler made (graphs, guards, code)
where that stage is present. A stage that is not available is reported as such:
nothing pretends to have compiled.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import ember


class TinyTransformer(torch.nn.Module):
    """Embedding, one pre-norm attention + MLP block, and a vocabulary head."""

    def __init__(self, vocab: int = 128, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.norm1 = torch.nn.LayerNorm(width)
        self.attn = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
        )
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return self.head(x)


def _time_calls(fn, tokens: torch.Tensor, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        fn(tokens)
    return (time.perf_counter() - start) / steps


def run_backend(
    model: torch.nn.Module, tokens: torch.Tensor, backend: str, steps: int, show: bool
) -> bool:
    """Compile `model` with `backend`, check it against eager, and print what happened."""
    print(f"\n== backend {backend!r}")
    compiled = ember.compile(model, backend=backend)
    start = time.perf_counter()
    with torch.no_grad():
        result = compiled(tokens)
    compile_seconds = time.perf_counter() - start
    with torch.no_grad():
        expected = model(tokens)
        torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-4)
        _time_calls(model, tokens, 2)  # warm up both before timing
        _time_calls(compiled, tokens, 2)
        eager = _time_calls(model, tokens, steps)
        fast = _time_calls(compiled, tokens, steps)
    print(f"   matches eager: yes (max abs diff {(result - expected).abs().max().item():.2e})")
    print(f"   first call (compile + run): {compile_seconds * 1e3:.1f} ms")
    print(f"   per call: eager {eager * 1e6:.0f} us, ember {fast * 1e6:.0f} us")
    artifacts = ember.last_artifacts(compiled)
    entry = ember.api.compiled_callable_of(compiled).entries[-1]
    operations = sum(node.op.startswith("call") for node in entry.graph_module.graph.nodes)
    checks = len(entry.guards.guards)
    print(
        f"   captured one graph of {operations} operations in "
        f"{artifacts.capture_seconds * 1e3:.0f} ms; backend {artifacts.backend_seconds * 1e3:.0f} ms; "
        f"guard function of {checks} checks"
    )
    if show:
        print(artifacts.graph_code)
        print(artifacts.guard_code)
        print(artifacts.entry_code)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", help="backend(s) to try (default: all)")
    parser.add_argument("--steps", type=int, default=20, help="timed calls per backend")
    parser.add_argument("--show", action="store_true", help="print the graph, guards and code")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = TinyTransformer().eval()
    tokens = torch.randint(0, 128, (4, 32))
    print(f"ember {ember.__version__}, torch {torch.__version__}")
    print("backends:", ", ".join(ember.list_backends()))
    backends = args.backend or ["eager", "aot_eager", "inductor"]
    worked = [b for b in backends if run_backend(model, tokens, b, args.steps, args.show)]
    print(f"\n{len(worked)} of {len(backends)} backends compiled and matched eager:", worked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
