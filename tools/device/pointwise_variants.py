"""Where an erf GELU over ViT's MLP activations loses to a copy: hand-written variants.

    python tools/device/pointwise_variants.py

The kernel ember generates for `gelu(x)` on [128 * 197, 3072] bf16 (the division by
sqrt(2), the product rounded to bf16 before the store's cast), the same with a product
by 1/sqrt(2), without the extra rounding, a Triton copy, eager's gelu and torch.compile's,
each at several block sizes; device time from triton's do_bench (L2 flushed), GB/s of the
bytes moved and the share of a copy of as many bytes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

NUMEL = tl.constexpr(128 * 197 * 768)


@triton.jit
def gelu_kernel(
    in_ptr, out_ptr, XBLOCK: tl.constexpr, DIVIDE: tl.constexpr, ROUND: tl.constexpr,
    COPY: tl.constexpr,
):  # fmt: skip
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = xindex < NUMEL
    v = tl.load(in_ptr + xindex, mask, other=0).to(tl.float32)
    if COPY:
        y = v
    else:
        if DIVIDE:
            scaled = v / 1.4142135623730951
        else:
            scaled = v * 0.7071067811865476
        y = (v * 0.5) * (tl.erf(scaled) + 1.0)
    if ROUND:
        y = y.to(tl.bfloat16).to(tl.float32)
    tl.store(out_ptr + xindex, y.to(tl.bfloat16), mask)


def main() -> None:
    x = torch.randn(NUMEL, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    expected = torch.nn.functional.gelu(x)
    nbytes = 2 * x.numel() * x.element_size()
    copy_ms = do_bench(lambda: out.copy_(x), return_mode="median")
    print(f"copy_: {copy_ms * 1000:.1f} us, {nbytes / copy_ms / 1e6:.0f} GB/s")
    variants = {
        "eager F.gelu": lambda: torch.nn.functional.gelu(x),
    }
    compiled = torch.compile(torch.nn.functional.gelu)
    compiled(x)
    variants["torch.compile F.gelu"] = lambda: compiled(x)
    for name, flags in (
        ("ember (divide, round)", (True, True, False)),
        ("multiply, round", (False, True, False)),
        ("multiply", (False, False, False)),
        ("triton copy", (False, False, True)),
    ):
        for xblock, warps in ((1024, 4), (2048, 4), (2048, 8), (4096, 8)):
            grid = (triton.cdiv(NUMEL, xblock),)
            variants[f"{name} {xblock} w{warps}"] = lambda g=grid, f=flags, a=(xblock, warps): (
                gelu_kernel[g](
                    x, out, XBLOCK=a[0], DIVIDE=f[0], ROUND=f[1], COPY=f[2], num_warps=a[1]
                )
            )
    for name, run in variants.items():
        result = run()
        if "copy" not in name:
            got = result if isinstance(result, torch.Tensor) else out
            torch.testing.assert_close(got.float(), expected.float(), atol=2e-2, rtol=2e-2)
        ms = do_bench(run, return_mode="median")
        print(
            f"{name:34s} {ms * 1000:7.1f} us {nbytes / ms / 1e6:6.0f} GB/s "
            f"{copy_ms / ms:4.0%} of copy"
        )


if __name__ == "__main__":
    main()
