"""Layer norm backward's split column partials (dw, db): what the per-row loads cost.

    python tools/device/column_variants.py

The kernel ember generates for the partial sums of dy * xhat and dy over chunks of
rows ([65536, 768] bf16, 32 chunks of 2048 rows), where each row's mean and rstd are
loaded as full [XBLOCK, RBLOCK] tiles (every output of the tile repeats them), next to
the same kernel loading them once per tile row ([1, RBLOCK], the tile's outputs all in
one chunk), and a bias gradient's partials (one input, no per-row loads); each at a
few block sizes, with GB/s of the bytes read.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

ROWS, COLS, CHUNK = 65536, 768, 2048
_OUTPUTS, _COLS, _CHUNK = (
    tl.constexpr(ROWS // CHUNK * COLS),
    tl.constexpr(COLS),
    tl.constexpr(CHUNK),
)


@triton.jit
def partials(dy_ptr, x_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr,
             XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, ROW_LOADS: tl.constexpr):  # fmt: skip
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < _OUTPUTS
    chunk = xindex // _COLS
    column = xindex % _COLS
    first = (tl.program_id(0) * XBLOCK) // _COLS  # the chunk of every output of the tile
    acc_w = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    acc_b = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    for offset in range(0, _CHUNK, RBLOCK):
        r = offset + tl.arange(0, RBLOCK)[None, :]
        rmask = r < _CHUNK
        row = r + chunk * _CHUNK
        dy = tl.load(dy_ptr + row * _COLS + column, xmask & rmask, other=0).to(tl.float32)
        x = tl.load(x_ptr + row * _COLS + column, xmask & rmask, other=0).to(tl.float32)
        if ROW_LOADS == 0:  # as generated: per-row values as full tiles
            mean = tl.load(mean_ptr + row, xmask & rmask, other=0)
            rstd = tl.load(rstd_ptr + row, xmask & rmask, other=0)
        else:  # once per tile row, broadcast over the tile's outputs
            mean = tl.load(mean_ptr + r + first * _CHUNK, rmask, other=0)
            rstd = tl.load(rstd_ptr + r + first * _CHUNK, rmask, other=0)
        acc_w += tl.where(xmask & rmask, dy * ((x - mean) * rstd), 0)
        acc_b += tl.where(xmask & rmask, dy, 0)
    tl.store(dw_ptr + xindex, tl.sum(acc_w, 1)[:, None], xmask)
    tl.store(db_ptr + xindex, tl.sum(acc_b, 1)[:, None], xmask)


def main() -> None:
    dy = torch.randn(ROWS, COLS, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(ROWS, COLS, device="cuda", dtype=torch.bfloat16)
    mean = x.float().mean(-1)
    rstd = torch.rsqrt(x.float().var(-1, unbiased=False) + 1e-5)
    dw = torch.empty(ROWS // CHUNK, COLS, device="cuda")
    db = torch.empty_like(dw)
    xhat = (x.float() - mean[:, None]) * rstd[:, None]
    want_w = (dy.float() * xhat).view(-1, CHUNK, COLS).sum(1)
    want_b = dy.float().view(-1, CHUNK, COLS).sum(1)
    nbytes = 2 * dy.numel() * dy.element_size()
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = do_bench(lambda: dst.copy_(src), return_mode="median")
    print(f"copy of as many bytes (read + write): {nbytes / copy_ms / 1e6:.0f} GB/s")
    for row_loads in (0, 1):
        for xblock, rblock, warps in ((64, 64, 8), (64, 128, 4), (64, 32, 4), (128, 32, 8)):
            grid = (-(-(ROWS // CHUNK) * COLS // xblock),)

            def run(g=grid, a=(xblock, rblock, warps, row_loads)):
                partials[g](dy, x, mean, rstd, dw, db, XBLOCK=a[0], RBLOCK=a[1],
                            ROW_LOADS=a[3], num_warps=a[2])  # fmt: skip

            run()
            torch.testing.assert_close(dw, want_w, atol=1e-1, rtol=1e-3)
            torch.testing.assert_close(db, want_b, atol=1e-1, rtol=1e-3)
            ms = do_bench(run, return_mode="median")
            label = "per-row loads as tiles" if row_loads == 0 else "per-row loads once   "
            print(
                f"{label} {xblock}x{rblock} w{warps}: {ms * 1000:7.1f} us, "
                f"{nbytes / ms / 1e6:5.0f} GB/s ({nbytes / ms * copy_ms / nbytes:4.0%} of copy)"
            )


if __name__ == "__main__":
    main()
