"""Inference peak memory of one compiled call: eager vs ember vs torch.compile.

    python benchmarks/inference_memory_bench.py                    every model, bf16, CPU
    python benchmarks/inference_memory_bench.py gpt2 llama         some of them
    EMBER_BENCH_DTYPE=float32 python benchmarks/inference_memory_bench.py
    EMBER_BENCH_DEVICE=cuda python benchmarks/inference_memory_bench.py   on a GPU

The peak is of the bytes allocated during one warm no_grad call and alive at once,
counted from the call's start (parameters and inputs excluded, the output included):
on the CPU from the profiler's allocation events (`torch.profiler`,
profile_memory=True: every allocation and free of the CPU allocator, in order), on a
GPU as `torch.cuda.max_memory_allocated()` less what was allocated before the call.
Each backend is measured with nothing of another backend's call alive.

Models: gpt2, bert (masked LM) and llama at small sizes with an 8000-token vocabulary
(the logits dominate, as at full size; EMBER_BENCH_VOCAB, EMBER_BENCH_LENGTH tokens of
2 sequences, default 64), and `transpose` (benchmarks/models.py).
Backends: eager, ember (inductor; regional compile, the CPU default), ember_whole
(regional off, as on a GPU) and torch (torch.compile; skipped with --no-torch).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from models import Transpose, _tokens, transformers_model  # noqa: E402

VOCAB = int(os.environ.get("EMBER_BENCH_VOCAB", "8000"))
LENGTH = int(os.environ.get("EMBER_BENCH_LENGTH", "64"))


def _gpt2():
    return transformers_model(
        "GPT2LMHeadModel", "GPT2Config", n_layer=2, n_head=4, n_embd=128, vocab_size=VOCAB,
        n_positions=max(128, LENGTH), use_cache=False, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip


def _bert():
    return transformers_model(
        "BertForMaskedLM", "BertConfig", num_hidden_layers=2, num_attention_heads=4,
        hidden_size=128, intermediate_size=512, vocab_size=VOCAB, max_position_embeddings=max(128, LENGTH),
    )  # fmt: skip


def _llama():
    return transformers_model(
        "LlamaForCausalLM", "LlamaConfig", num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, hidden_size=128, intermediate_size=344, vocab_size=VOCAB,
        max_position_embeddings=max(128, LENGTH), use_cache=False, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip


def _case(name: str, dtype: torch.dtype, device: str):
    torch.manual_seed(0)
    if name == "transpose":
        return Transpose(), (torch.randn(4, 256, 512, dtype=dtype, device=device),)
    model = {"gpt2": _gpt2, "bert": _bert, "llama": _llama}[name]()
    return model.eval().to(device, dtype), (_tokens(VOCAB, 2, LENGTH).to(device),)


MODELS = ("gpt2", "bert", "llama", "transpose")


def _first_tensor(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out


def _cpu_peak(call) -> int:
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = call()
    del result
    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.tag == _EventType.Allocation:
            events.append((event.start_time_ns, event.extra_fields.alloc_size))
        stack.extend(event.children)
    live = peak = 0
    for _, size in sorted(events):
        live += size
        peak = max(peak, live)
    return peak


def _cuda_peak(call) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    result = call()
    torch.cuda.synchronize()
    del result
    return torch.cuda.max_memory_allocated() - start


def _compiled(backend: str, model):
    if backend == "eager":
        return model
    if backend == "torch":
        torch._dynamo.reset()
        return torch.compile(model)
    import ember

    ember.reset()
    options = {"regional": False} if backend == "ember_whole" else None
    return ember.compile(model, backend="inductor", options=options)


def measure(name: str, backends: list[str], dtype: torch.dtype, device: str) -> dict:
    model, inputs = _case(name, dtype, device)
    peak = _cuda_peak if device == "cuda" else _cpu_peak
    with torch.no_grad():
        expected = _first_tensor(model(*inputs))
    row = {}
    for backend in backends:
        fn = _compiled(backend, model)

        def call(fn=fn):
            with torch.no_grad():
                return _first_tensor(fn(*inputs))

        torch.testing.assert_close(call(), expected, atol=2e-2, rtol=2e-2)
        call()  # warm
        row[backend] = peak(call)
    return row


def main(argv: list[str]) -> int:
    names = [a for a in argv if not a.startswith("--")] or list(MODELS)
    dtype = getattr(torch, os.environ.get("EMBER_BENCH_DTYPE", "bfloat16"))
    device = os.environ.get("EMBER_BENCH_DEVICE", "cpu")
    backends = ["eager", "ember", "ember_whole"] + ([] if "--no-torch" in argv else ["torch"])
    print(f"peak KiB of one no_grad call ({dtype}, {device})")
    print("| model | " + " | ".join(backends) + " |")
    print("|---|" + "---:|" * len(backends))
    for name in names:
        row = measure(name, backends, dtype, device)
        print(f"| {name} | " + " | ".join(f"{row[b] / 1024:.0f}" for b in backends) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
