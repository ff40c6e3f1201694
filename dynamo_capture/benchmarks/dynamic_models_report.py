"""Graphs per transformers model over several sequence lengths, with dynamic=True.

    python dynamo_capture/benchmarks/dynamic_models_report.py [--backend aot_eager] [--train]
        [--automatic] [--lengths 8 13 21 30] [--models gpt2 bert llama t5]

Each model of benchmarks/models.py with token inputs (gpt2, bert, llama, t5) is
compiled with `ember.compile(model, backend=..., dynamic=True)` and run in
inference (with --train: forward and backward, grads compared) at each sequence length (T5: encoder and decoder lengths both vary).
Reports the compiled entries (graphs) of the top frame, those that run eagerly,
the graph breaks, whether every result equals eager, and the compile time. Run with
EMBER_LOGS=dynamic to see why a compile fell back to static sizes.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import time
from typing import Any

import torch

import ember
from ember.api import compiled_callable_of

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ("gpt2", "bert", "llama", "t5")


def _models_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_models", ROOT / "benchmarks/models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _inputs(name: str, vocab: int, length: int) -> tuple[Any, ...]:
    generator = torch.Generator().manual_seed(length)
    ids = torch.randint(0, vocab, (2, length), generator=generator)
    if name == "t5":
        decoder = torch.randint(0, vocab, (2, max(2, length // 2)), generator=generator)
        return (ids, None, decoder)
    return (ids,)


def _main_output(output: Any) -> torch.Tensor:
    for field in ("logits", "last_hidden_state"):
        if hasattr(output, field):
            return getattr(output, field)
    return output


def _grads(model: torch.nn.Module, output: Any) -> list[torch.Tensor]:
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(_main_output(output).sin().mean(), params, allow_unused=True)
    return [g for g in grads if g is not None]


def _close(got: list[torch.Tensor], expected: list[torch.Tensor]) -> bool:
    return len(got) == len(expected) and all(
        torch.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(got, expected)
    )


def sweep(
    name: str, backend: str, lengths: list[int], train: bool = False, dynamic: bool | None = True
) -> dict[str, Any]:
    """Compile one model with `dynamic` and run it at every length."""
    case = getattr(_models_module(), name)()
    model = case.model.train(False)  # dropout off: results comparable with eager
    compiled = ember.compile(model, backend=backend, dynamic=dynamic)
    same = True
    start = time.perf_counter()
    with torch.set_grad_enabled(train):
        for length in lengths:
            args = _inputs(name, 1000, length)
            got_output, expected_output = compiled(*args), model(*args)
            got, expected = _main_output(got_output), _main_output(expected_output)
            same = same and torch.allclose(got, expected, rtol=1e-4, atol=1e-4)
            if train:
                same = same and _close(_grads(model, got_output), _grads(model, expected_output))
    seconds = time.perf_counter() - start
    runner = compiled_callable_of(compiled)
    entries = [runner.entries, *(part.entries for part in runner.parts)]
    return {
        "model": name,
        "graphs": sum(len(e) for e in entries),
        "eager": sum(entry.eager for e in entries for entry in e),
        "breaks": len(runner.graph_breaks),
        "same": same,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--lengths", type=int, nargs="+", default=[8, 13, 21, 30])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--train", action="store_true")
    parser.add_argument(
        "--automatic", action="store_true", help="dynamic=None (automatic dynamic) instead of True"
    )
    options = parser.parse_args()
    dynamic = None if options.automatic else True
    print(
        f"backend={options.backend} lengths={options.lengths} train={options.train} "
        f"dynamic={dynamic}"
    )
    print(f"{'model':8} {'graphs':>6} {'eager':>5} {'breaks':>6} {'== eager':>8} {'seconds':>8}")
    for name in options.models:
        row = sweep(name, options.backend, options.lengths, options.train, dynamic)
        print(
            f"{row['model']:8} {row['graphs']:>6} {row['eager']:>5} {row['breaks']:>6} "
            f"{'yes' if row['same'] else 'NO':>8} {row['seconds']:>8.1f}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
