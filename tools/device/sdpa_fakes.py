"""Why a captured model's attention takes another SDPA kernel than eager: its fakes' metadata.

    python tools/device/sdpa_fakes.py

For one-layer BERT and a q/k/v-projection module: the metadata of the
arguments of each captured `scaled_dot_product_attention` call, the choice
`torch._fused_sdp_choice` makes on real tensors of that layout, and the SDPA
backend flags at compile time.
"""

from __future__ import annotations

import torch

import ember

F = torch.nn.functional


def describe(value) -> str:
    if not isinstance(value, torch.Tensor):
        return repr(value)
    return (
        f"{type(value).__name__}{tuple(value.shape)} stride={value.stride()} {value.dtype} "
        f"{value.device} grad={value.requires_grad} offset={value.storage_offset()}"
    )


def backend(gm, example_inputs):
    flags = {
        name: getattr(torch.backends.cuda, name)()
        for name in (
            "flash_sdp_enabled",
            "mem_efficient_sdp_enabled",
            "cudnn_sdp_enabled",
            "math_sdp_enabled",
        )
    }
    print("  grad enabled:", torch.is_grad_enabled(), flags)
    for node in gm.graph.nodes:
        if "scaled_dot_product" not in str(node.target):
            continue
        args = [a.meta.get("val") if hasattr(a, "meta") else a for a in node.args]
        kwargs = {k: v.meta.get("val") if hasattr(v, "meta") else v for k, v in node.kwargs.items()}
        for a in [*args, *kwargs.values()]:
            print("  arg", describe(a))

        def real(a):
            if not isinstance(a, torch.Tensor):
                return a
            base = torch.zeros(
                a.untyped_storage().nbytes() // a.element_size() + 64, device="cuda", dtype=a.dtype
            )
            return base.as_strided(a.shape, a.stride())

        real_kwargs = {k: real(v) for k, v in kwargs.items()}
        print("  real choice:", torch._fused_sdp_choice(*map(real, args), **real_kwargs))
        if kwargs.get("attn_mask") is not None:
            mask = kwargs["attn_mask"]
            dense = torch.zeros(mask.shape, device="cuda", dtype=mask.dtype)
            print(
                "  real choice, dense mask:",
                torch._fused_sdp_choice(*map(real, args), **{**real_kwargs, "attn_mask": dense}),
            )
            as_float = torch.zeros(mask.shape, device="cuda", dtype=args[0].dtype)
            print(
                "  real choice, dense float mask:",
                torch._fused_sdp_choice(*map(real, args), **{**real_kwargs, "attn_mask": as_float}),
            )
        fake_mode = args[0].fake_mode if hasattr(args[0], "fake_mode") else None
        if fake_mode is not None:
            with fake_mode:
                print("  fake choice:", torch._fused_sdp_choice(*args, **kwargs))
    return gm.forward


class Projected(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(768, 768) for _ in range(3))

    def forward(self, x):
        def heads(t):
            return t.view(t.shape[0], t.shape[1], -1, 64).transpose(1, 2)

        return F.scaled_dot_product_attention(
            heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), scale=0.125
        )


def main() -> None:
    from transformers import BertConfig, BertModel

    config = BertConfig(num_hidden_layers=1, hidden_dropout_prob=0.0)
    config.attention_probs_dropout_prob = 0.0
    bert = BertModel(config).cuda().to(torch.bfloat16).eval()
    projected = Projected().cuda().to(torch.bfloat16)
    cases = {
        "projected": (projected, torch.randn(8, 128, 768, device="cuda", dtype=torch.bfloat16)),
        "bert": (bert, torch.randint(0, 1000, (8, 128), device="cuda")),
    }
    for name, (model, x) in cases.items():
        print(f"== {name}")
        with torch.no_grad():
            ember.compile(model, backend=backend)(x)


if __name__ == "__main__":
    main()
