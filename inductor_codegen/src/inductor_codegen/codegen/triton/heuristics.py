"""Launch configurations: one chosen from sizes, and a few candidates for autotuning."""

from __future__ import annotations

from dataclasses import dataclass

from inductor_codegen.codegen.triton.kernel import TritonKernelSource

__all__ = ["LaunchConfig", "autotune_configs", "default_config", "next_power_of_2"]

# Elements one program handles at most in a reduction.
PROGRAM_ELEMENTS = 4096
# Elements a program of a persistent reduction handles by default: one row of 1024 (a
# layer norm over 768 or 1024) with 4 warps, as torch.compile picks. On an H100, 4 rows
# by 1024 with 8 warps took 85 us against its 68 us for a [65536, 768] bf16 layer norm;
# one row was also the fastest of the sweep at 8192 rows (benchmarks/RESULTS.md).
PERSISTENT_PROGRAM_ELEMENTS = 1024
# (XBLOCK, RBLOCK) of a column reduction: 64 contiguous outputs (256 bytes of float32,
# 128 of bf16) by 64 rows a step, 8 warps. The autotuned winner for batch norm's partial
# sums over bf16 NHWC data on an H200 (24 us against 40 us for 64 x 16: more bytes in
# flight per program); see benchmarks/RESULTS.md.
COLUMN_TILE = (64, 64)
# A looped reduction along rows contiguous in memory: elements a step, and warps (as
# torch.compile; the fastest of a sweep over a [2048, 50257] bf16 logsumexp on an H100:
# 177 us, against 205 us with 4 warps).
ROW_STEP = 2048
ROW_STEP_WARPS = 8
# Elements of a row tile: XBLOCK contiguous elements (at most 1024) of each of YBLOCK rows,
# with 4 warps. Half of it is not better everywhere (benchmarks/RESULTS.md, row tiles, and
# ab_variants.py row_tile_4096): bias + GELU over [8192, 3072] bf16 ran at 95% of copy
# as 1024 x 2 tiles against 86% as 1024 x 4 on an H100, but GPT2 training's two largest
# row-tile kernels (casts over 50264-wide logits rows) took 4-5% longer on an H200.
ROW_TILE_ELEMENTS = 4096
# (XBLOCK, YBLOCK) of a transposing 2D tile (see default_config).
TILE = (64, 64)
# XBLOCK of a flat pointwise kernel: 1024 with 4 warps (8 elements a thread), as
# torch.compile picks; 2048 with 4 warps for a kernel calling a software-evaluated math
# function (erf, tanh, ...) over at least MATH_MIN_NUMEL elements. Such a kernel is bound
# by instructions, not bytes: the erf GELU over ViT's [25216, 3072] bf16 activations took
# 33.4 us at 1024 and 30.8 us at 2048 on an H200 (eager's kernel 29.8, a copy 23.5;
# benchmarks/RESULTS.md), and GPT2's tanh GELU 20.9 against 19.8 us; kernels
# of cheaper math (SiLU times up-projection) lose 0-2% at 2048.
POINTWISE_XBLOCK = 1024
MATH_XBLOCK = 2048
MATH_MIN_NUMEL = 1 << 20


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """Block sizes (XBLOCK and one RBLOCK per inner loop group) and warps per program."""

    xblock: int
    rblocks: tuple[int, ...]
    num_warps: int
    yblock: int = 0  # 2D-tiled pointwise kernels only

    def constexprs(self) -> dict[str, int]:
        values = {"XBLOCK": self.xblock}
        if self.yblock:
            values["YBLOCK"] = self.yblock
        values.update({f"R{g}BLOCK": r for g, r in enumerate(self.rblocks)})
        return values

    def describe(self) -> str:
        blocks = ", ".join(f"{k}={v}" for k, v in self.constexprs().items())
        return f"{blocks}, num_warps={self.num_warps}"


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _row_block(length: int) -> int:
    """XBLOCK of a row tile: the widest of 1024 down to 128 leaving at most 1/16 of the
    lanes of a row idle (768: 256; 50257: 1024), else the one leaving the fewest."""
    blocks = (1024, 512, 256, 128)

    def idle(block: int) -> int:
        return -(-length // block) * block - length

    return next((b for b in blocks if idle(b) * 16 <= length), min(blocks, key=idle))


def _warps(elements: int) -> int:
    if elements >= 8192:
        return 16
    if elements >= 4096:
        return 8
    if elements >= 1024:
        return 4
    return 2 if elements >= 256 else 1


def _config(kernel: TritonKernelSource, xblock: int, looped_rblock: int) -> LaunchConfig:
    rblocks = tuple(
        next_power_of_2(g.numel) if g.persistent else looped_rblock for g in kernel.groups
    )
    # A persistent row next to a looped one: the tile of the widest row still fits a program.
    widest = max(rblocks, default=1)
    xblock = max(1, min(xblock, next_power_of_2(kernel.xnumel), max(1, PROGRAM_ELEMENTS // widest)))
    if kernel.rows_per_program:  # row blocks: XBLOCK rows at a time of a program's rows
        xblock = min(xblock, next_power_of_2(kernel.rows_per_program))
    return LaunchConfig(xblock, rblocks, _warps(xblock * max(rblocks, default=1)))


def _tile(kernel: TritonKernelSource, xblock: int, yblock: int) -> LaunchConfig:
    xblock = min(xblock, next_power_of_2(kernel.xnumel))
    # The grid's second dimension holds at most 65535 programs.
    yblock = max(
        min(yblock, next_power_of_2(kernel.ynumel)), next_power_of_2(-(-kernel.ynumel // 65535))
    )
    elements = xblock * yblock
    if kernel.row_tiles:  # contiguous rows: as many warps as a flat kernel of that size
        return LaunchConfig(xblock, (), min(_warps(elements), 4), yblock)
    return LaunchConfig(xblock, (), 4 if elements >= 1024 else 2, yblock)


def default_config(kernel: TritonKernelSource) -> LaunchConfig:
    """A configuration from the kernel's sizes alone."""
    if kernel.row_tiles:
        xblock = _row_block(kernel.xnumel)
        return _tile(kernel, xblock, max(1, ROW_TILE_ELEMENTS // xblock))
    if kernel.ynumel:
        # A transpose: 64 x 64 tiles, unless the transposed reads run contiguous for
        # fewer rows (yrun); then fewer, wider rows of as many elements, for the straight
        # stores (T5's position bias broadcast over heads, yrun 8: 13.3 us as 256 x 16
        # against 15.5 us as 64 x 64 on an H200, a copy of as many bytes 14.0 us).
        yblock = min(TILE[1], max(16, next_power_of_2(kernel.yrun))) if kernel.yrun else TILE[1]
        return _tile(kernel, TILE[0] * TILE[1] // yblock, yblock)
    if not kernel.groups:
        heavy = kernel.math_calls and kernel.xnumel >= MATH_MIN_NUMEL
        return _config(kernel, MATH_XBLOCK if heavy else POINTWISE_XBLOCK, 1)
    widest = max(next_power_of_2(g.numel) if g.persistent else 1024 for g in kernel.groups)
    if all(g.persistent for g in kernel.groups):
        # Short columns (a few rows by many contiguous outputs) keep the wide tile.
        elements = PROGRAM_ELEMENTS if kernel.column_reduction else PERSISTENT_PROGRAM_ELEMENTS
        return _config(kernel, max(1, elements // widest), 1)
    if kernel.column_reduction:
        # Loads run along the outputs: XBLOCK contiguous outputs by RBLOCK rows per step.
        return _config(kernel, COLUMN_TILE[0], COLUMN_TILE[1])
    if kernel.contiguous_x:
        # Rows run across memory: a wide tile of rows, a short step along the reduction.
        return _config(kernel, 64, 16)
    # Rows along memory, longer than a program holds: one row a program.
    config = _config(kernel, 1, ROW_STEP)
    return LaunchConfig(config.xblock, config.rblocks, ROW_STEP_WARPS)


def autotune_configs(kernel: TritonKernelSource) -> list[LaunchConfig]:
    """A small set of configurations worth benchmarking, the default first."""
    candidates = [default_config(kernel)]
    if kernel.ynumel:
        tiles = ((32, 32), (128, 32), (32, 128), (128, 128), (256, 16))
        if kernel.row_tiles:
            tiles = ((512, 8), (1024, 2), (2048, 2), (256, 16), (64, 64))
        for xblock, yblock in tiles:
            candidates.append(_tile(kernel, xblock, yblock))
    elif not kernel.groups:
        for xblock in (256, 512, 1024, 2048):
            for warps in (4, 8):
                candidates.append(
                    LaunchConfig(min(xblock, next_power_of_2(kernel.xnumel)), (), warps)
                )
    elif all(g.persistent for g in kernel.groups):
        base = default_config(kernel)
        for scale in (0.25, 0.5, 2, 4):
            xblock = max(1, int(base.xblock * scale))
            config = _config(kernel, xblock, 1)
            candidates.append(config)
            candidates.append(
                LaunchConfig(config.xblock, config.rblocks, max(1, config.num_warps // 2))
            )
    else:
        looped = ((1, 512), (1, 1024), (2, 1024), (8, 128), (32, 32), (64, 8))
        if kernel.column_reduction:
            looped = ((32, 32), (32, 128), (64, 8), (64, 32), (64, 64), (64, 128), (128, 8))
        for xblock, rblock in looped:
            candidates.append(_config(kernel, xblock, rblock))
    return list(dict.fromkeys(candidates))
