"""GPT2's vocabulary head (4096 x 768 @ 768 x 50257, bf16) with and without padding.

    python tools/device/matmul_pad.py [--torch-code]

Times cuBLAS on the unaligned product, on a padded weight into a padded output,
and on a padded weight read through its (M, N) window into a contiguous output;
with --torch-code also prints torch.compile's generated code for the head and the
strides of what it returns.
"""

from __future__ import annotations

import sys

import torch
from triton.testing import do_bench


def main(argv: list[str]) -> None:
    m, k, n, n_pad = 4096, 768, 50257, 50264
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    w_pad = torch.zeros(n_pad, k, device="cuda", dtype=torch.bfloat16)
    w_pad[:n] = w
    out_pad = torch.empty(m, n_pad, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    cases = {
        "a @ w.t() (unaligned)": lambda: a @ w.t(),
        "mm(a, w_pad.t()) -> padded out": lambda: torch.mm(a, w_pad.t(), out=out_pad),
        "mm(a, w_pad[:n].t()) -> contiguous out": lambda: torch.mm(a, w_pad[:n].t(), out=out),
        "mm(a, w_pad.t()) then copy to contiguous": lambda: out.copy_(
            torch.mm(a, w_pad.t(), out=out_pad)[:, :n]
        ),
    }
    for name, fn in cases.items():
        ms = do_bench(fn, warmup=10, rep=50, return_mode="median")
        print(f"{name:45s} {ms * 1000:8.1f} us")
    torch.testing.assert_close(torch.mm(a, w_pad[:n].t()), a @ w.t())
    if "--torch-code" in argv:
        import logging

        torch._logging.set_logs(output_code=True)
        logging.getLogger("torch._inductor").setLevel(logging.INFO)

        def head(x, weight):
            return (x @ weight.t()).view(8, 512, -1)

        result = torch.compile(head)(a, w)
        print("torch.compile result strides", result.stride())


if __name__ == "__main__":
    main(sys.argv[1:])
