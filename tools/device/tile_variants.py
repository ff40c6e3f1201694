"""What a bias + GELU row-tile kernel loses to a flat one: hand-written variants, timed.

    python tools/device/tile_variants.py

The kernel ember generates for `gelu(x + b)` on [8192, 3072] bf16 (row tiles, masks on
both dims), the same without masks, a flat kernel with the bias index taken modulo the
row (masked and not), each timed with triton's do_bench at its best block size; GB/s
of the bytes moved (x read, out written) and the copy of as many bytes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.testing import do_bench

ROWS, COLS = 8192, 3072


@triton.jit
def _gelu(v):
    inner = (v + v * v * v * 0.044715) * 0.7978845608028654
    return v * 0.5 * (libdevice.tanh(inner) + 1.0)


@triton.jit
def tiles(x_ptr, b_ptr, out_ptr, XBLOCK: tl.constexpr, YBLOCK: tl.constexpr, MASK: tl.constexpr):
    yindex = tl.program_id(1) * YBLOCK + tl.arange(0, YBLOCK)[:, None]
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    if MASK:
        mask = (yindex < 8192) & (xindex < 3072)
        v = tl.load(x_ptr + 3072 * yindex + xindex, mask, other=0).to(tl.float32)
        b = tl.load(b_ptr + xindex, mask, other=0).to(tl.float32)
        tl.store(out_ptr + 3072 * yindex + xindex, _gelu(v + b).to(tl.bfloat16), mask)
    else:
        v = tl.load(x_ptr + 3072 * yindex + xindex).to(tl.float32)
        b = tl.load(b_ptr + xindex).to(tl.float32)
        tl.store(out_ptr + 3072 * yindex + xindex, _gelu(v + b).to(tl.bfloat16))


@triton.jit
def flat(x_ptr, b_ptr, out_ptr, XBLOCK: tl.constexpr, MASK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    column = xindex % 3072
    if MASK:
        mask = xindex < 8192 * 3072
        v = tl.load(x_ptr + xindex, mask, other=0).to(tl.float32)
        b = tl.load(b_ptr + column, mask, other=0, eviction_policy="evict_last").to(tl.float32)
        tl.store(out_ptr + xindex, _gelu(v + b).to(tl.bfloat16), mask)
    else:
        v = tl.load(x_ptr + xindex).to(tl.float32)
        b = tl.load(b_ptr + column, eviction_policy="evict_last").to(tl.float32)
        tl.store(out_ptr + xindex, _gelu(v + b).to(tl.bfloat16))


def main() -> None:
    x = torch.randn(ROWS, COLS, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(COLS, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    expected = torch.nn.functional.gelu(x.float() + b.float(), approximate="tanh").bfloat16()
    nbytes = 2 * x.numel() * x.element_size()
    copy_ms = do_bench(lambda: out.copy_(x), return_mode="median")
    print(f"copy: {nbytes / copy_ms / 1e6:.0f} GB/s")
    variants = {}
    for mask in (True, False):
        for xblock, yblock, warps in ((1024, 4, 4), (1024, 2, 4), (512, 8, 4), (1024, 8, 8)):
            grid = (COLS // xblock, ROWS // yblock)
            variants[f"tiles {xblock}x{yblock} w{warps} mask={mask}"] = (
                lambda g=grid, a=(xblock, yblock, mask, warps): tiles[g](
                    x, b, out, XBLOCK=a[0], YBLOCK=a[1], MASK=a[2], num_warps=a[3]
                )
            )
        for xblock, warps in ((1024, 4), (2048, 8), (4096, 8)):
            grid = (ROWS * COLS // xblock,)
            variants[f"flat {xblock} w{warps} mask={mask}"] = (
                lambda g=grid, a=(xblock, mask, warps): flat[g](
                    x, b, out, XBLOCK=a[0], MASK=a[1], num_warps=a[2]
                )
            )
    for name, run in variants.items():
        run()
        torch.testing.assert_close(out.float(), expected.float(), atol=2e-2, rtol=2e-2)
        ms = do_bench(run, return_mode="median")
        gbps = nbytes / ms / 1e6
        print(
            f"{name:34s} {ms * 1000:7.1f} us {gbps:6.0f} GB/s {gbps * copy_ms / nbytes * 1e6:4.0%}"
        )


if __name__ == "__main__":
    main()
