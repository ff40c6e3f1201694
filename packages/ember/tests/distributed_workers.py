"""Workers of the distributed tests: each rank runs every scenario and writes its results.

Run by test_distributed.py through torch.multiprocessing.spawn, with a gloo process
group on localhost. A scenario trains a small model for a few steps with a compiled
DDP model next to an eager DDP model (same weights, same data) and checks that
gradients and weights agree; it returns what the test asserts on (graph counts).
"""

from __future__ import annotations

import copy
import json
import os
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 2


class CountingBackend:
    """Counts graphs, then compiles them with `inner` (an ember backend name)."""

    def __init__(self, inner: str) -> None:
        from ember.backends import lookup_backend
        from ember.config import resolve_options

        self.graphs = 0
        self.inner = lookup_backend(inner, resolve_options(None, None, inner))

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs += 1
        return self.inner(gm, example_inputs)


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 4),
    )  # fmt: skip


def train_side_by_side(rank: int, compiled: torch.nn.Module, eager: torch.nn.Module) -> None:
    """STEPS of SGD on both; gradients and weights must agree at every step."""
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (compiled, eager)]
    torch.manual_seed(100 + rank)  # each rank its own data: all-reduce matters
    for _ in range(STEPS):
        x = torch.randn(6, 8)
        for model, optimizer in zip((compiled, eager), optimizers, strict=True):
            optimizer.zero_grad()
            model(x).pow(2).sum().backward()
        for p, q in zip(compiled.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
        for optimizer in optimizers:
            optimizer.step()
    for p, q in zip(compiled.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p, q)


def compile_ddp(rank: int, backend_name: str, bucket_cap_mb: float = 25) -> dict[str, Any]:
    """ember.compile(DDP(model)): DDP's forward eager, the wrapped module compiled (cut
    at DDP's buckets when it holds more than one bucket of parameters)."""
    import ember
    from ember.api import compiled_callable_of

    model = make_model()
    eager = DDP(copy.deepcopy(model), bucket_cap_mb=bucket_cap_mb)
    backend = CountingBackend(backend_name)
    compiled = ember.compile(DDP(model, bucket_cap_mb=bucket_cap_mb), backend=backend)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        train_side_by_side(rank, compiled, eager)
    runner = compiled_callable_of(compiled)
    return {
        "graphs": backend.graphs,
        "eager_frames": [str(f) for f in runner.eager_frames],
        "warnings": [str(w.message) for w in record if "ember" in str(w.message)],
    }


def ddp_of_compiled(rank: int, backend_name: str, bucket_cap_mb: float = 25) -> dict[str, Any]:
    """DDP(ember.compile(model)): DDP calls the compiled module, whose graph is cut at
    DDP's buckets (captured while DDP's forward runs)."""
    import ember

    model = make_model()
    eager = DDP(copy.deepcopy(model), bucket_cap_mb=bucket_cap_mb)
    backend = CountingBackend(backend_name)
    compiled = DDP(ember.compile(model, backend=backend), bucket_cap_mb=bucket_cap_mb)
    train_side_by_side(rank, compiled, eager)
    return {"graphs": backend.graphs}


def shard(model: torch.nn.Module) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def local_gradients(model: torch.nn.Module) -> list[torch.Tensor]:
    """This rank's shard of every gradient: each rank checks its own shard, so together the
    ranks check every element, without a collective (DTensor's `full_tensor` all-gather
    over gloo crashes the process under torch 2.11)."""
    return [p.grad.to_local() for p in model.parameters()]


def fsdp2(rank: int, backend_name: str, compile_first: bool) -> dict[str, Any]:
    """fully_shard before or after ember.compile: FSDP's hooks eager, forwards compiled."""
    import ember

    eager = shard(make_model())
    backend = CountingBackend(backend_name)
    model = make_model()
    if compile_first:
        compiled = ember.compile(model, backend=backend)
        shard(model)
    else:
        compiled = ember.compile(shard(model), backend=backend)
    torch.manual_seed(100 + rank)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(STEPS):
            x = torch.randn(6, 8)
            for module in (compiled, eager):
                module.zero_grad()
                module(x).pow(2).sum().backward()
            for p, q in zip(local_gradients(compiled), local_gradients(eager), strict=True):
                torch.testing.assert_close(p, q)
    return {
        "graphs": backend.graphs,
        "warnings": [str(w.message) for w in record if "ember" in str(w.message)],
    }


SCENARIOS: dict[str, Callable[[int], dict[str, Any]]] = {
    "compile_ddp_aot_eager": lambda rank: compile_ddp(rank, "aot_eager"),
    "compile_ddp_inductor": lambda rank: compile_ddp(rank, "inductor"),
    # buckets of 3 KiB: Linear(32, 4) and Linear(32, 32) fill one, Linear(8, 32) another
    "compile_ddp_buckets_aot_eager": lambda rank: compile_ddp(rank, "aot_eager", 0.003),
    "ddp_of_compiled_aot_eager": lambda rank: ddp_of_compiled(rank, "aot_eager"),
    "ddp_of_compiled_buckets_aot_eager": lambda rank: ddp_of_compiled(rank, "aot_eager", 0.003),
    "fsdp2_after_aot_eager": lambda rank: fsdp2(rank, "aot_eager", compile_first=False),
    "fsdp2_before_aot_eager": lambda rank: fsdp2(rank, "aot_eager", compile_first=True),
}


def run(rank: int, world_size: int, port: int, out_dir: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    results: dict[str, Any] = {}
    try:
        for name, scenario in SCENARIOS.items():
            try:
                results[name] = scenario(rank)
            except Exception:  # noqa: BLE001 - reported by the test that reads it
                results[name] = {"error": traceback.format_exc()}
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as file:
            json.dump(results, file)
        # no rank tears its process group down while the other may still use it (gloo
        # aborts the process when a peer's pair closes under a pending operation)
        dist.barrier()
    finally:
        dist.destroy_process_group()
