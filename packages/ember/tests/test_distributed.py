"""Distributed training with torch.distributed on CPU: DDP and FSDP2 over gloo, 2 processes.

`ember.compile(DDP(model))` runs DDP's forward eagerly and compiles the module it
wraps, its graph cut at DDP's gradient buckets (ddp_buckets); `DDP(ember.compile(model))` has DDP call the compiled module. Both train
with the same gradients and weights as eager DDP. With FSDP2's `fully_shard`
(before or after compiling), FSDP's hooks run eagerly and the forwards of the
sharded modules are compiled; gradients equal eager FSDP2's. distributed_workers.py
runs the scenarios on every rank; the tests read each rank's results.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo"
)

WORLD_SIZE = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every scenario's results, per rank (one spawn of WORLD_SIZE processes in all)."""
    sys.path.insert(0, os.path.dirname(__file__))
    import distributed_workers

    out_dir = str(tmp_path_factory.mktemp("ddp"))
    torch.multiprocessing.spawn(
        distributed_workers.run, args=(WORLD_SIZE, _free_port(), out_dir), nprocs=WORLD_SIZE
    )
    ranks = []
    for rank in range(WORLD_SIZE):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as file:
            ranks.append(json.load(file))
    return ranks


def scenario(results, name):
    for rank in results:
        assert "error" not in rank[name], rank[name].get("error")
    return results[0][name]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_ddp_trains_as_eager_ddp_with_module_compiled(results, backend):
    found = scenario(results, f"compile_ddp_{backend}")
    assert found["graphs"] == 1  # the wrapped module's forward, one graph
    assert found["eager_frames"] == [] and found["warnings"] == []


def test_compiled_ddp_graph_cut_at_buckets_trains_as_eager_ddp(results):
    found = scenario(results, "compile_ddp_buckets_aot_eager")
    assert found["graphs"] == 2  # one piece per bucket, each compiled
    assert found["eager_frames"] == [] and found["warnings"] == []


def test_ddp_of_compiled_module_trains_as_eager_ddp(results):
    found = scenario(results, "ddp_of_compiled_aot_eager")
    assert found["graphs"] == 1


@pytest.mark.parametrize("when", ["after", "before"])
def test_fully_shard_runs_hooks_eagerly_and_forwards_compiled(results, when):
    found = scenario(results, f"fsdp2_{when}_aot_eager")
    # the 3 sharded Linears' forwards; the 2 ReLUs between them are torch's own modules
    # called from a frame that runs eagerly, which stay eager (as torch.compile leaves them)
    assert found["graphs"] == 3
    assert found["warnings"] == []


def test_ddp_of_compiled_module_cut_at_buckets_trains_as_eager_ddp(results):
    found = scenario(results, "ddp_of_compiled_buckets_aot_eager")
    assert found["graphs"] == 2
