"""Which attention kernel SDPA picks on the GPU: eager, and in ember's ATen graph."""

from __future__ import annotations

import torch

import aot_autograd
import ember

F = torch.nn.functional


def heads(x):  # [B, T, H*D] -> [B, H, T, D], as transformers' attention layers view it
    return x.view(x.shape[0], x.shape[1], 12, 64).transpose(1, 2)


CASES = {
    "contiguous": (
        lambda x: x.view(8, 12, 128, 64),
        lambda q: F.scaled_dot_product_attention(q, q, q),
    ),
    "transposed": (
        lambda x: x,
        lambda x: F.scaled_dot_product_attention(heads(x), heads(x), heads(x)),
    ),
    "transposed_scale": (
        lambda x: x,
        lambda x: F.scaled_dot_product_attention(heads(x), heads(x), heads(x), scale=0.125),
    ),
}


class Projected(torch.nn.Module):
    """q, k, v from Linear layers (parameters that require grad), as in BERT."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(768, 768) for _ in range(3))

    def forward(self, x):
        return F.scaled_dot_product_attention(
            heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), scale=0.125
        )


def bert_layer():
    from transformers import BertConfig, BertModel

    config = BertConfig(num_hidden_layers=1, hidden_dropout_prob=0.0)
    config.attention_probs_dropout_prob = 0.0
    return BertModel(config).cuda().to(torch.bfloat16).eval()


projected = Projected().cuda().to(torch.bfloat16)
CASES["linear_projections"] = (lambda x: x, projected)
CASES["linear_projections_frozen"] = (
    lambda x: x,
    Projected().cuda().to(torch.bfloat16).requires_grad_(False),
)
bert = bert_layer()
CASES["bert_one_layer"] = (lambda x: torch.randint(0, 1000, (8, 128), device="cuda"), bert)
x = torch.randn(8, 128, 768, device="cuda", dtype=torch.bfloat16)
for name, (prepare, fn) in CASES.items():
    arg = prepare(x)
    seen: list[str] = []

    def record(gm, example_inputs, seen=seen):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    def aot_backend(gm, example_inputs, record=record):
        return aot_autograd.aot_graph(gm, example_inputs, fw_compiler=record)

    with torch.no_grad():
        ember.compile(fn, backend=aot_backend)(arg)
        with torch.profiler.profile() as prof:
            fn(arg)
    eager = sorted({e.name for e in prof.events() if "attention" in e.name or "sdpa" in e.name})
    ops = sorted({s for s in seen if "attention" in s or "bmm" in s})
    print(f"{name:18s} eager {eager[:2]}\n{'':18s} ember {ops}")
