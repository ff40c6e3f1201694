"""Online logsumexp over long rows: forward kernel variants on the GPU.

The row kernel of cross-entropy's forward (log_softmax over a 50k vocabulary) reads
each row once for its maximum m and its sum of exponentials. The variants here
compute m and logsumexp = log(sum(exp(x - c))) + c, c = where(isinf(m), 0, m), of
bf16 logits [4096, 50257] as Triton kernels of the shape the Triton generator prints:

* `lane_flags`: the earlier form: per lane a NaN-aware maximum, a finite maximum f,
  a sum rescaled by exp(f - f_new) (two exps an element) and NaN/inf flags.
* `row_max`: the current form (`TritonKernel._online_logsumexp`): one row maximum a
  step (tl.max along the block), the lanes' sums rescaled by one exp a row, one exp
  (libdevice) an element, no flags.
* `row_max_ex2`: `row_max` with tl.exp (ex2.approx) for the exp of each element.
* `lane_one_exp`: a lane maximum and one exp an element (exp(-|x - m|), the sum
  rescaled when x is a new maximum); finite rows only.

Each is timed with triton.testing.do_bench (median), beside torch's amax (the bytes
alone) and eager logsumexp, and checked against torch.logsumexp in float64; the
variants that keep eager's non-finite results are checked on rows of NaN, +-inf.

    python benchmarks/long_row_bench.py            # about 30 s on an H100
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

ROWS, VOCAB = 4096, 50257


@triton.jit
def lane_flags(
    x_ptr, m_ptr, lse_ptr, n, NCOLS: tl.constexpr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr
):
    row = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    rmask = row < n
    m = tl.full([XBLOCK, RBLOCK], float("-inf"), tl.float32)
    f = tl.full([XBLOCK, RBLOCK], float("-inf"), tl.float32)
    s = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    k = tl.zeros([XBLOCK, RBLOCK], tl.int8)
    for off in range(0, NCOLS, RBLOCK):
        col = off + tl.arange(0, RBLOCK)[None, :]
        mask = rmask & (col < NCOLS)
        v = tl.load(x_ptr + NCOLS * row + col, mask, other=0).to(tl.float32)
        w = tl.where(mask, v, float("-inf"))
        m = tl.where((m > w) | (m != m), m, w)
        finite = mask & (tl.abs(v) < float("inf"))
        f_new = tl.maximum(f, tl.where(finite, v, float("-inf")))
        scale = tl.where(f == f_new, 1.0, libdevice.exp(f - f_new))
        s = s * scale + tl.where(finite, libdevice.exp(v - f_new), 0.0)
        f = f_new
        nonfinite = tl.where(v != v, 1, tl.where(v > 0, 2, 4))
        k = k | tl.where(mask & ~finite, nonfinite, 0).to(tl.int8)
    m_row = tl.max(m, 1)[:, None]
    m_row = tl.where((tl.max((m != m).to(tl.int8), 1) != 0)[:, None], float("nan"), m_row)
    c = tl.where(tl.abs(m_row) == float("inf"), 0.0, m_row)
    s_row = tl.sum(tl.where(f == float("-inf"), 0.0, s * libdevice.exp(f - c)), 1)[:, None]
    s_row += tl.where((tl.max(k & 1, 1) != 0)[:, None], float("nan"), 0.0)
    s_row += tl.where((tl.max(k & 2, 1) != 0)[:, None], libdevice.exp(float("inf") - c), 0.0)
    s_row += tl.where((tl.max(k & 4, 1) != 0)[:, None], libdevice.exp(float("-inf") - c), 0.0)
    tl.store(m_ptr + row, m_row, rmask)
    tl.store(lse_ptr + row, libdevice.log(s_row) + c, rmask)


@triton.jit
def row_max(
    x_ptr,
    m_ptr,
    lse_ptr,
    n,
    NCOLS: tl.constexpr,
    XBLOCK: tl.constexpr,
    RBLOCK: tl.constexpr,
    FAST_EXP: tl.constexpr,
):
    row = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    rmask = row < n
    m = tl.full([XBLOCK, 1], float("-inf"), tl.float32)
    ref = tl.full([XBLOCK, 1], -3.4028234663852886e38, tl.float32)
    s = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    for off in range(0, NCOLS, RBLOCK):
        col = off + tl.arange(0, RBLOCK)[None, :]
        mask = rmask & (col < NCOLS)
        v = tl.load(x_ptr + NCOLS * row + col, mask, other=0).to(tl.float32)
        w = tl.where(mask, v, float("-inf"))
        m = tl.maximum(m, tl.max(w, 1)[:, None])
        ref_new = tl.minimum(tl.maximum(m, -3.4028234663852886e38), 3.4028234663852886e38)
        if FAST_EXP:
            s = s * libdevice.exp(ref - ref_new) + tl.exp(w - ref_new)
        else:
            s = s * libdevice.exp(ref - ref_new) + libdevice.exp(w - ref_new)
        ref = ref_new
    s_row = tl.sum(s, 1)[:, None]
    m = tl.where(s_row != s_row, float("nan"), m)
    c = tl.where(tl.abs(m) == float("inf"), 0.0, m)
    tl.store(m_ptr + row, m, rmask)
    tl.store(lse_ptr + row, libdevice.log(s_row * libdevice.exp(ref - c)) + c, rmask)


@triton.jit
def lane_one_exp(
    x_ptr, m_ptr, lse_ptr, n, NCOLS: tl.constexpr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr
):
    row = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    rmask = row < n
    m = tl.full([XBLOCK, RBLOCK], -3.4028234663852886e38, tl.float32)
    s = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    for off in range(0, NCOLS, RBLOCK):
        col = off + tl.arange(0, RBLOCK)[None, :]
        mask = rmask & (col < NCOLS)
        v = tl.load(x_ptr + NCOLS * row + col, mask, other=0).to(tl.float32)
        w = tl.where(mask, v, -3.4028234663852886e38)
        e = libdevice.exp(-tl.abs(w - m))
        grows = w > m
        s = tl.where(grows, s * e + 1.0, s + tl.where(mask, e, 0.0))
        m = tl.maximum(m, w)
    m_row = tl.max(m, 1)[:, None]
    s_row = tl.sum(s * libdevice.exp(m - m_row), 1)[:, None]
    tl.store(m_ptr + row, m_row, rmask)
    tl.store(lse_ptr + row, libdevice.log(s_row) + m_row, rmask)


def launch(kernel, x, xblock, rblock, warps, **constants):
    n, vocab = x.shape
    m = torch.empty(n, device=x.device, dtype=torch.float32)
    lse = torch.empty_like(m)
    grid = (triton.cdiv(n, xblock),)
    kernel[grid](x, m, lse, n, vocab, XBLOCK=xblock, RBLOCK=rblock, num_warps=warps, **constants)
    return m, lse


VARIANTS = {
    "lane_flags": (lane_flags, {}, True),
    "row_max": (row_max, {"FAST_EXP": False}, True),
    "row_max_ex2": (row_max, {"FAST_EXP": True}, True),
    "lane_one_exp": (lane_one_exp, {}, False),
}
CONFIGS = [(1, 2048, 8), (1, 4096, 16), (2, 1024, 8)]  # (XBLOCK, RBLOCK, warps)


def special_rows(device):
    x = torch.randn(8, VOCAB, device=device)
    x[0, 10], x[0, 40000] = float("inf"), float("nan")
    x[1, 7] = float("nan")
    x[2, 5], x[2, 45000] = float("inf"), float("inf")
    x[3] = float("-inf")
    x[4] = float("-inf")
    x[4, VOCAB - 1] = float("inf")
    x[5, 30000:] = float("-inf")
    x[6] = float("-inf")
    x[6, 1234] = -3.0e38
    x[7] = float("inf")
    return x.bfloat16()


def main():
    torch.manual_seed(0)
    x = (torch.randn(ROWS, VOCAB, device="cuda") * 4).bfloat16()
    exact = torch.logsumexp(x.double(), 1)
    top = x.float().amax(1)
    special = special_rows("cuda")
    special_lse = torch.logsumexp(special.float(), 1)
    gb = x.numel() * x.element_size() / 1e9
    amax_ms = triton.testing.do_bench(lambda: x.amax(1), return_mode="median")
    eager_ms = triton.testing.do_bench(lambda: torch.logsumexp(x.float(), 1), return_mode="median")
    print(f"torch amax (bytes alone)   {amax_ms * 1e3:7.0f} us  {gb / amax_ms * 1e3:5.2f} TB/s")
    print(f"torch logsumexp (eager)    {eager_ms * 1e3:7.0f} us")
    for name, (kernel, constants, non_finite) in VARIANTS.items():
        for xblock, rblock, warps in CONFIGS:
            run = functools.partial(launch, kernel, x, xblock, rblock, warps, **constants)
            m, lse = run()
            error = (lse.double() - exact).abs().max().item()
            same_max = torch.equal(m, top)
            ms = triton.testing.do_bench(run, return_mode="median")
            note = ""
            if non_finite:
                sm, slse = launch(kernel, special, xblock, rblock, warps, **constants)
                ok = torch.allclose(slse, special_lse, equal_nan=True) and torch.equal(
                    sm.isnan(), special.float().amax(1).isnan()
                )
                note = "non-finite rows as eager" if ok else "NON-FINITE ROWS DIFFER"
            print(
                f"{name:13s} ({xblock},{rblock:4d},{warps:2d})  {ms * 1e3:7.0f} us  "
                f"{gb / ms * 1e3:5.2f} TB/s  max|lse err| {error:.1e}  "
                f"max {'exact' if same_max else 'DIFFERS'}  {note}"
            )


if __name__ == "__main__":
    main()
