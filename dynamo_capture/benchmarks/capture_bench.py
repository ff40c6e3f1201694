"""Capture time per model: dynamo_capture next to torch.compile(backend="eager").

    python dynamo_capture/benchmarks/capture_bench.py

For each model: the first call (capture + the eager backend + one run), the
steady-state time per call, and the same for torch.compile with its eager
backend, plus plain eager. Both sides run the captured graph with the eager
backend, so the difference is the front end: bytecode capture and guards.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch

import dynamo_capture


def eager_backend(gm, example_inputs):
    return gm.forward


def models():
    import transformers

    transformers.logging.set_verbosity_error()
    ids = torch.randint(0, 100, (2, 16))
    yield (
        "gpt2",
        transformers.GPT2LMHeadModel(
            transformers.GPT2Config(n_embd=64, n_layer=4, n_head=4, vocab_size=100, n_positions=64)
        ),
        {"input_ids": ids, "use_cache": False},
    )
    yield (
        "bert",
        transformers.BertModel(
            transformers.BertConfig(
                hidden_size=64,
                num_hidden_layers=4,
                num_attention_heads=4,
                intermediate_size=128,
                vocab_size=100,
            )
        ),
        {"input_ids": ids},
    )
    yield (
        "llama",
        transformers.LlamaForCausalLM(
            transformers.LlamaConfig(
                hidden_size=64,
                num_hidden_layers=4,
                num_attention_heads=4,
                num_key_value_heads=2,
                intermediate_size=128,
                vocab_size=100,
            )
        ),
        {"input_ids": ids, "use_cache": False},
    )
    yield (
        "t5",
        transformers.T5ForConditionalGeneration(
            transformers.T5Config(
                d_model=64, d_ff=128, num_layers=4, num_heads=4, d_kv=16, vocab_size=100
            )
        ),
        {"input_ids": ids, "decoder_input_ids": ids[:, :8], "use_cache": False},
    )


def per_call(fn, kwargs, repeats=30):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(**kwargs)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def first_call(fn, kwargs):
    start = time.perf_counter()
    fn(**kwargs)
    return time.perf_counter() - start


def main():
    torch.manual_seed(0)
    rows = []
    for name, model, kwargs in models():
        model.eval()
        with torch.no_grad():
            eager_time = per_call(model, kwargs)
            ours = dynamo_capture.optimize(
                copy.deepcopy(model), backend=eager_backend, fullgraph=True
            )
            ours_first = first_call(ours, kwargs)
            ours_call = per_call(ours, kwargs)
            theirs = torch.compile(copy.deepcopy(model), backend="eager", fullgraph=True)
            theirs_first = first_call(theirs, kwargs)
            theirs_call = per_call(theirs, kwargs)
        rows.append((name, ours_first, theirs_first, eager_time, ours_call, theirs_call))
    print(
        f"{'model':8} {'ember capture':>14} {'torch capture':>14} {'eager/call':>11} "
        f"{'ember/call':>11} {'torch/call':>11}"
    )
    for name, a, b, c, d, e in rows:
        print(
            f"{name:8} {a * 1e3:12.0f}ms {b * 1e3:12.0f}ms {c * 1e3:9.2f}ms {d * 1e3:9.2f}ms {e * 1e3:9.2f}ms"
        )


if __name__ == "__main__":
    main()
