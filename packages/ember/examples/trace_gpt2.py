"""Trace a compile of GPT-2 (a tiny config, random weights) for the compile report.

    python packages/ember/examples/trace_gpt2.py ember_trace
    python -m ember.report ember_trace -o report.html

A wrapper prints between the model and the softmax (a graph break), and a second
sequence length makes it recompile; one training step compiles the backward too.
"""

from __future__ import annotations

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import ember


class LogitsThenPrint(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.model(ids).logits
        print("logits ready")  # a graph break: the softmax is compiled in a part of its own
        return logits.softmax(-1)


def main(folder: str) -> None:
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=64,
        bos_token_id=0, eos_token_id=0, use_cache=False,
    )  # fmt: skip
    model = LogitsThenPrint(GPT2LMHeadModel(config))
    compiled = ember.compile(model)
    with ember.trace(folder) as path:
        for length in (16, 16, 24):  # a cache hit, then a recompile for the new length
            ids = torch.randint(0, config.vocab_size, (2, length))
            compiled(ids).sum().backward()
    print(f"trace written to {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ember_trace")
