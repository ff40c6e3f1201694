"""Data-parallel training: eager DDP vs torch.compile vs ember.compile, in one run.

    python benchmarks/ddp_bench.py [--models gpt2,resnet50] [--world 2] [--steps 20]
                                   [--backends torch,ember,ember_inner] [--amp]

Spawns `--world` processes on localhost (NCCL with one GPU each where there are
enough GPUs, else gloo on the CPU with the small CPU configs of models.py). Each
process builds the same model (random weights, seeded), wraps it as each row says
and trains it with SGD on its own data for `--steps` timed steps after warm-up:

    eager        DDP(model)
    torch        torch.compile(DDP(model))     (torch's DDP optimizer cuts the graph
                                                at bucket boundaries)
    ember        ember.compile(DDP(model))     (cut at buckets: all-reduce overlaps
                                                the backward)
    ember_inner  DDP(ember.compile(model))

Per row: the median step time (CUDA-synchronised, or wall time on the CPU), the
speedup over eager DDP, the first step's time (capture and compile), and the
accuracy check: the first step (float32, from the same weights on the same data)
gives a loss and a global norm of the gradients (after all-reduce) that must be
within 1e-3 relative of eager DDP's, else the row prints FAIL. `--amp` times the
steps after it under bf16 autocast.

Rank 0 prints the table (markdown) and writes ddp_bench.json into $OUT (or the
current folder).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))

BACKENDS = ("eager", "torch", "ember", "ember_inner")
TOLERANCE = 1e-3  # relative, on the float32 loss and gradient norm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(name: str, cuda: bool):
    """(model, inputs, loss_fn): full-size GPU configs on CUDA, small ones on the CPU;
    dropout off, so that every row computes the same step."""
    import models

    torch.manual_seed(0)
    if cuda:
        make, _ = models.GPU_MODELS[name]
        model, inputs = make()
        loss = models._logits_loss
    else:
        case = models.MODELS[name]()
        model, inputs, loss = case.model, case.inputs, case.loss
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model, inputs, loss


def _wrap(backend: str, model: torch.nn.Module, device: torch.device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [device.index] if device.type == "cuda" else None
    if backend == "eager":
        return DDP(model, device_ids=ids)
    if backend == "torch":
        return torch.compile(DDP(model, device_ids=ids))
    import ember

    if backend == "ember":
        return ember.compile(DDP(model, device_ids=ids))
    if backend == "ember_inner":
        return DDP(ember.compile(model), device_ids=ids)
    raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")


def _step(model, inputs, loss_fn, optimizer, amp: bool, device) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device.type, torch.bfloat16, enabled=amp):
        loss = loss_fn(model(*inputs))
    loss.backward()
    optimizer.step()
    return loss.detach()


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _grad_norm(model) -> float:
    grads = [p.grad.float() for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))


@contextlib.contextmanager
def _exact_float32():
    """TF32 off for convolutions and matmuls (cuDNN allows it by default): the accuracy
    step compares float32 with float32."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _reference(name, backend, device, inputs) -> tuple[float, float]:
    """Loss and gradient norm of one float32 step from the seeded weights (no update)."""
    model, _, loss_fn = _model(name, device.type == "cuda")
    wrapped = _wrap(backend, model.to(device), device)
    with _exact_float32():
        loss = loss_fn(wrapped(*inputs))
        loss.backward()
        _sync(device)
    return float(loss.detach()), _grad_norm(model)


def _worker(rank: int, world: int, port: int, args, out: str) -> None:
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    rows = []
    try:
        for name in args.models.split(","):
            _, inputs, _ = _model(name, cuda)
            torch.manual_seed(1000 + rank)  # each rank its own data
            inputs = tuple(
                (torch.randint_like(t, 0, int(t.max()) + 1) if not t.is_floating_point()
                 else torch.randn_like(t)).to(device)
                for t in inputs
            )  # fmt: skip
            ref_loss, ref_norm = _reference(name, "eager", device, inputs)
            for backend in ["eager", *args.backends.split(",")]:
                row = {"model": name, "backend": backend, "world": world, "device": str(device)}
                try:
                    model, _, loss_fn = _model(name, cuda)
                    model = model.to(device)
                    wrapped = _wrap(backend, model, device)
                    _sync(device)
                    start = time.perf_counter()
                    with _exact_float32():
                        loss = loss_fn(wrapped(*inputs))  # first call: capture and compile
                        loss.backward()
                        _sync(device)
                    row["first_s"] = time.perf_counter() - start
                    loss, norm = float(loss.detach()), _grad_norm(model)
                    err = max(
                        abs(loss - ref_loss) / max(abs(ref_loss), 1e-12),
                        abs(norm - ref_norm) / max(abs(ref_norm), 1e-12),
                    )
                    row["error"] = err
                    row["accuracy"] = "ok" if err <= TOLERANCE else "FAIL"
                    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
                    for _ in range(3):
                        _step(wrapped, inputs, loss_fn, optimizer, args.amp, device)
                    times = []
                    for _ in range(args.steps):
                        _sync(device)
                        start = time.perf_counter()
                        _step(wrapped, inputs, loss_fn, optimizer, args.amp, device)
                        _sync(device)
                        times.append(time.perf_counter() - start)
                    row["step_ms"] = 1e3 * statistics.median(times)
                    del wrapped, model, optimizer
                except Exception as e:  # a failing row is reported, the run goes on
                    row["failed"] = f"{type(e).__name__}: {e}"[:300]
                    if rank == 0:
                        traceback.print_exc()
                rows.append(row)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "ddp_bench.json").write_text(json.dumps(rows, indent=1))
        print(_table(rows, args.amp))


def _table(rows: list[dict], amp: bool) -> str:
    lines = [
        f"world {rows[0]['world']}, {rows[0]['device'].split(':')[0]}, "
        f"{'AMP bf16' if amp else 'float32'}",
        "",
        "| model | backend | step ms | over eager DDP | first step s | error | accuracy |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    eager = {r["model"]: r.get("step_ms") for r in rows if r["backend"] == "eager"}
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['model']} | {r['backend']} | failed: {r['failed'][:80]} ||||")
            continue
        speed = eager[r["model"]] / r["step_ms"] if eager.get(r["model"]) else float("nan")
        lines.append(
            f"| {r['model']} | {r['backend']} | {r['step_ms']:.2f} | {speed:.2f}x | "
            f"{r['first_s']:.1f} | {r['error']:.1e} | {r['accuracy']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="gpt2")
    parser.add_argument("--backends", default="torch,ember,ember_inner")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--amp", action="store_true")
    args = parser.parse_args()
    out = os.environ.get("OUT", ".")
    mp.spawn(_worker, args=(args.world, _free_port(), args, out), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
