"""Broadcast attention masks get a dense copy so that a fused CUDA attention kernel can run."""

from __future__ import annotations

import pytest
import torch
from torch import fx

import guards
from aot_autograd import aot_graph
from aot_autograd.attention import dense_attention_masks

F = torch.nn.functional


def _graph(by_position: bool = False) -> fx.GraphModule:
    def fn(q, k, v, mask):
        if by_position:
            return F.scaled_dot_product_attention(q, k, v, mask)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.25)

    return fx.symbolic_trace(fn)


def _with_values(gm: fx.GraphModule, values: list) -> fx.GraphModule:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, values):
        node.meta["val"] = value
    return gm


def _fakes(device: str, mask_keys: int = 1, length: int = 8, head: int = 16):
    """Fakes standing for q, k, v and a mask on `device` (no such device needed); the mask
    is broadcast along the keys when `mask_keys` is 1."""
    mode = guards.FakeTensorMode()
    device = torch.device(device)

    def fake(meta: torch.Tensor) -> torch.Tensor:
        return guards.FakeTensor(mode, meta, device)

    qkv = [torch.empty(2, 4, length, head, device="meta", dtype=torch.bfloat16) for _ in range(3)]
    mask = torch.ones(2, 1, length, mask_keys, dtype=torch.bool, device="meta")
    return [*map(fake, qkv), fake(mask.expand(2, 1, length, length))]


def _masks(gm: fx.GraphModule) -> list:
    (call,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    return [call.kwargs.get("attn_mask", call.args[3] if len(call.args) > 3 else None)]


@pytest.mark.parametrize("by_position", [False, True])
def test_a_cuda_mask_broadcast_along_keys_is_made_dense(by_position):
    gm = _with_values(_graph(by_position), _fakes("cuda:0"))
    assert dense_attention_masks(gm) == 1
    (mask,) = _masks(gm)
    assert mask.op == "call_method" and mask.target == "contiguous"
    assert mask.meta["val"].stride() == (64, 64, 8, 1)
    assert mask.meta["val"].device.type == "cuda"
    assert "contiguous" in gm.code


def test_dense_masks_cpu_masks_and_graphs_without_values_are_left_alone():
    dense = _with_values(_graph(), _fakes("cuda:0", mask_keys=8))
    cpu = _with_values(_graph(), _fakes("cpu"))
    bare = _graph()
    for gm in (dense, cpu, bare):
        before = gm.code
        assert dense_attention_masks(gm) == 0
        assert gm.code == before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_broadcast_mask_takes_a_fused_kernel_and_matches_eager():
    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    # As transformers builds it with no padding: every key allowed, the key dim broadcast.
    mask = torch.ones(2, 1, 128, 1, dtype=torch.bool, device="cuda").expand(2, 1, 128, 128)
    seen: list[str] = []

    def record(graph, example_inputs):
        seen.extend(str(n.target) for n in graph.graph.nodes if n.op == "call_function")
        return graph

    gm = _with_values(_graph(), _fakes("cuda:0", length=128, head=64))
    compiled = aot_graph(gm, [q, k, v, mask], fw_compiler=record)
    # A fused bf16 kernel against a float32 reference: bf16 rounding, not eager's math path.
    upcast = (t.float() for t in (q, k, v))
    want = F.scaled_dot_product_attention(*upcast, attn_mask=mask, scale=0.25)
    got = compiled(q, k, v, mask).float()
    assert float((got - want).norm() / want.norm()) < 1e-2
    assert not any("bmm" in target for target in seen), seen


def test_rewrites_before_tracing_leave_the_callers_graph_as_given():
    # The caller keeps its graph (capture's record, the warm-start key): rewrites that
    # apply (a dropout dropping nothing, a broadcast CUDA mask) act on a copy.
    def fn(q, k, v, mask, x):
        attention = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return attention, F.dropout(x, 0.0, True, False) * 2

    gm = _with_values(fx.symbolic_trace(fn), [*_fakes("cuda:0"), None])
    before, graph_before = gm.code, [(n.op, n.target, n.args) for n in gm.graph.nodes]
    seen: list[str] = []

    def record(graph, example_inputs):
        seen.append(graph.code)
        return graph

    q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
    mask = torch.ones(2, 1, 8, 1, dtype=torch.bool).expand(2, 1, 8, 8)
    x = torch.randn(3, 5)
    run = aot_graph(gm, [q, k, v, mask, x], fw_compiler=record)
    attention, doubled = run(q, k, v, mask, x)
    assert gm.code == before
    assert [(n.op, n.target, n.args) for n in gm.graph.nodes] == graph_before
    assert "dropout" not in seen[0]
    torch.testing.assert_close(doubled, x * 2)
    torch.testing.assert_close(attention, F.scaled_dot_product_attention(q, k, v, mask))
