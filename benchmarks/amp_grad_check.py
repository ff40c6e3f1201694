"""AMP training gradients of a Llama-style model, per parameter, against an fp32 reference.

    python benchmarks/amp_grad_check.py                       # hidden 2048, 8 layers, bs 4, seq 512 (GPU)
    python benchmarks/amp_grad_check.py --tiny --device cpu   # a small config on the CPU

One training step (forward, loss, backward) under bf16 autocast, for eager, ember
and torch.compile, from the same weights and tokens. Each parameter's gradient is
compared with eager's float32 gradient (autocast off) by ||g - ref|| / ||ref||; a
backend passes when, for the loss and for every parameter, its error is at most
3x eager-bf16's error on it + 2e-3 (benchmarks/accuracy.py's rule, applied per
parameter). Prints one row per backend: the loss error, the global gradient-norm
error, the worst parameter and the verdict.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy  # noqa: E402


def build(tiny: bool, device: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    if tiny:
        config = LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=1024,
        )  # fmt: skip
        batch, length = 2, 64
    else:
        config = LlamaConfig(
            hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=16,
            num_key_value_heads=4, vocab_size=32000, max_position_embeddings=1024,
        )  # fmt: skip
        batch, length = 4, 512
    config.use_cache = False
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device)
    tokens = torch.randint(0, config.vocab_size, (batch, length), device=device)
    return model, tokens


def step(model, tokens, amp: bool, device: str):
    model.zero_grad(set_to_none=True)
    with torch.autocast(device, torch.bfloat16, enabled=amp):
        loss = model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    grads = {
        name.replace("_orig_mod.", ""): p.grad.detach().float().clone()
        for name, p in model.named_parameters()
        if p.grad is not None
    }
    return float(loss), grads


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).double().norm() / want.double().norm().clamp_min(1e-30))


def compare(name, loss, grads, reference, eager):
    ref_loss, ref_grads = reference
    eager_loss, eager_grads = eager
    missing = set(ref_grads) ^ set(grads)
    loss_error = accuracy.scalar_error(loss, ref_loss)
    ok = not missing and accuracy.within_rule(
        loss_error, accuracy.scalar_error(eager_loss, ref_loss)
    )
    worst, worst_margin = (0.0, 0.0, "-"), -float("inf")
    for param in ref_grads:
        if param not in grads:
            continue
        error = relative(grads[param], ref_grads[param])
        eager_error = relative(eager_grads[param], ref_grads[param])
        ok = ok and accuracy.within_rule(error, eager_error)
        margin = error - accuracy.SLACK * eager_error  # the parameter closest to failing
        if margin > worst_margin:
            worst, worst_margin = (error, eager_error, param), margin
    norm_error = accuracy.scalar_error(
        accuracy.global_grad_norm(list(grads.values())),
        accuracy.global_grad_norm(list(ref_grads.values())),
    )
    verdict = "ok" if ok else "FAIL"
    print(
        f"{name:14s} loss err {loss_error:.2e}  grad-norm err {norm_error:.2e}  worst param "
        f"{worst[2]} err {worst[0]:.2e} (eager {worst[1]:.2e})  missing {len(missing)}  {verdict}"
    )
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backends", default="ember,torch.compile")
    args = parser.parse_args(argv)
    model, tokens = build(args.tiny, args.device)
    reference = step(model, tokens, False, args.device)
    eager = step(model, tokens, True, args.device)
    print(f"device {torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}")
    compare("eager bf16", *eager, reference, eager)
    ok = True
    for backend in args.backends.split(","):
        if backend == "ember":
            import ember

            compiled = ember.compile(model)
        else:
            compiled = torch.compile(model)
        start = time.perf_counter()
        result = step(compiled, tokens, True, args.device)
        print(f"{backend}: first step {time.perf_counter() - start:.1f} s")
        ok = compare(backend, *result, reference, eager) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
