"""Launching matmul templates: the template kernel or the ATen call, whichever is faster.

`MatmulTemplateKernel(*args)` takes the template's arguments (operand views,
epilogue inputs, scalars, outputs). With mode "auto" on a GPU, the first call
times the ATen way (the mm/addmm/bmm call, then the epilogue kernel) and the
template with each of `matmul_configs`, printing a line per candidate to
stderr, and keeps the fastest. The choice is stored under
`<cache>/triton/autotune/` (keyed by both kernels' source, the device and the
Triton version), so later processes skip the measurement. Without a GPU (the
interpreter) "auto" runs the template with its first configuration.
"""

from __future__ import annotations

import hashlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from guards import artifact_logger
from guards.cache_root import cache_folder, discard, load_record, store_record
from inductor_codegen.codegen.triton.heuristics import next_power_of_2
from inductor_codegen.codegen.triton.runtime import Launcher, interpreting
from inductor_codegen.codegen.triton.templates import MatmulTemplateSource
from inductor_codegen.errors import InductorError
from inductor_codegen.runtime import ensure_layout

__all__ = ["MatmulConfig", "MatmulTemplateKernel", "matmul_configs"]

SCHEMA_VERSION = 1
# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) for 16-bit inputs; float32 takes half the BLOCK_K.
BASE_CONFIGS = (
    (128, 128, 64, 8, 3),
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (64, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 64, 64, 4, 4),
)
GROUP_M = 8


@dataclass(frozen=True, slots=True)
class MatmulConfig:
    """Block sizes, warps and software-pipeline stages of one template launch."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int

    def describe(self) -> str:
        return (
            f"BLOCK_M={self.block_m}, BLOCK_N={self.block_n}, BLOCK_K={self.block_k}, "
            f"num_warps={self.num_warps}, num_stages={self.num_stages}"
        )


def _fit(block: int, size: int) -> int:
    """A block no wider than the dimension needs (tl.dot takes 16 at least)."""
    return max(16, min(block, next_power_of_2(size)))


def matmul_configs(source: MatmulTemplateSource) -> list[MatmulConfig]:
    """The configurations worth timing for these sizes, the default first."""
    configs = []
    for bm, bn, bk, warps, stages in BASE_CONFIGS:
        if source.dtype == torch.float32:
            bk //= 2
        bm, bn, bk = _fit(bm, source.m), _fit(bn, source.n), _fit(bk, source.k)
        configs.append(MatmulConfig(bm, bn, bk, warps if bm * bn >= 128 * 128 else 4, stages))
    return list(dict.fromkeys(configs))


def _constexprs(config: MatmulConfig, k: int) -> dict:
    """The template's constexpr parameters, in the order the kernel declares them."""
    return {
        "BLOCK_M": config.block_m,
        "BLOCK_N": config.block_n,
        "BLOCK_K": config.block_k,
        "GROUP_M": GROUP_M,
        "EVEN_K": k % config.block_k == 0,
    }


class MatmulTemplateKernel:
    """A launcher for one template step; `mode` is "auto", "template" or "aten" (see options)."""

    def __init__(self, fn, source: MatmulTemplateSource, epilogue, *, mode: str, folder: Path):
        if mode not in ("auto", "template", "aten"):
            raise InductorError(
                f"unknown matmul_templates mode {mode!r}; choose auto, template or aten"
            )
        self.fn = fn
        self.source = source
        self.epilogue = epilogue  # a TritonKernel for the epilogue alone, or None
        self.mode = mode
        self.folder = folder
        self.operand_count = 3 if source.op == "addmm" else 2
        self.config: MatmulConfig | None = None
        self.use_aten = mode == "aten"
        self.launchers: dict[MatmulConfig, Launcher] = {}

    def __call__(self, *args) -> None:
        if self.use_aten:
            return self.aten(args)
        config = self.config or self._choose(args)
        if config is None:
            return self.aten(args)
        self.launch(config, args)

    def launch(self, config: MatmulConfig, args) -> None:
        """Run the template kernel with `config`."""
        launcher = self.launchers.get(config)
        if launcher is None:
            s = self.source
            grid = (-(-s.m // config.block_m) * -(-s.n // config.block_n), s.batch, 1)
            options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
            launcher = Launcher(self.fn, grid, _constexprs(config, s.k), options)
            self.launchers[config] = launcher
        launcher(args)

    def aten(self, args) -> None:
        """The ATen way: mm/addmm/bmm (cuBLAS), then the epilogue kernel on the product."""
        s = self.source
        operands, rest = args[: self.operand_count], args[self.operand_count :]
        a, b = operands[0], operands[1]
        if self.epilogue is None:
            out = rest[-1]
            if s.op == "addmm":
                torch.addmm(operands[2], a, b, beta=s.beta, alpha=s.alpha, out=out)
            else:
                (torch.mm if s.op == "mm" else torch.bmm)(a, b, out=out)
            return
        if s.op == "addmm":
            product = torch.addmm(operands[2], a, b, beta=s.beta, alpha=s.alpha)
        else:
            product = (torch.mm if s.op == "mm" else torch.bmm)(a, b)
        layout = s.product_layout
        product = ensure_layout(
            product, tuple(int(x) for x in layout.size), tuple(int(x) for x in layout.stride)
        )
        by_name = {arg.name: value for arg, value in zip(s.args[self.operand_count :], rest)}
        by_name[s.product] = product
        self.epilogue(*[by_name[arg.name] for arg in self.epilogue.source.args])

    # ---------------------------------------------------------- choosing

    def _choose(self, args) -> MatmulConfig | None:
        configs = matmul_configs(self.source)
        device = args[0].device
        if self.mode == "template" or device.type != "cuda" or interpreting():
            self.config = configs[0]
            return self.config
        path = cache_folder("autotune", root=self.folder) / f"{self._cache_key(device)}.json"
        stored = load_record(path)
        if isinstance(stored, dict) and stored.get("schema") == SCHEMA_VERSION:
            try:
                return self._take(stored.get("config"))
            except (KeyError, TypeError, ValueError) as error:
                discard(path, f"{type(error).__name__}: {error}")
        best = self._benchmark(configs, args)
        record = {
            "schema": SCHEMA_VERSION,
            "kernel": self.source.name,
            "config": None if best is None else asdict(best),
        }
        store_record(path, record)
        return self._take(record["config"])

    def _take(self, stored: dict | None) -> MatmulConfig | None:
        if stored is None:
            self.use_aten = True
            return None
        self.config = MatmulConfig(**stored)
        return self.config

    def _benchmark(self, configs: list[MatmulConfig], args) -> MatmulConfig | None:
        """None when the ATen call (and the epilogue kernel) is the fastest."""
        from triton.testing import do_bench

        log = artifact_logger("perf_hints")
        name = self.source.name
        self._precompile(configs)
        count = len(configs) + 1
        timings: dict = {None: do_bench(lambda: self.aten(args), warmup=5, rep=20)}
        print(f"autotune {name} [1/{count}] aten: {timings[None] * 1000:.1f} us", file=sys.stderr)
        for k, config in enumerate(configs):
            try:
                timings[config] = do_bench(lambda c=config: self.launch(c, args), warmup=5, rep=20)
            except Exception as error:  # a configuration that does not compile is skipped
                log.info("autotune %s: %s failed: %s", name, config.describe(), error)
                continue
            print(
                f"autotune {name} [{k + 2}/{count}] {config.describe()}: "
                f"{timings[config] * 1000:.1f} us",
                file=sys.stderr,
            )
        best = min(timings, key=timings.get)
        chosen = "aten" if best is None else best.describe()
        print(f"autotune {name}: {chosen}", file=sys.stderr)
        log.info("autotune %s: best %s", name, chosen)
        return best

    def _precompile(self, configs: list[MatmulConfig]) -> None:
        """Compile every configuration at once (Triton's async compile mode), where it exists."""
        if any(a.kind == "scalar" for a in self.source.args):
            return
        try:
            from triton.runtime._async_compile import AsyncCompileMode
        except ImportError:
            return
        from inductor_codegen.codegen.triton.ops import TRITON_DTYPES

        torch_dtype = {text: dtype for dtype, text in TRITON_DTYPES.items()}
        mock = [torch_dtype[a.ctype] for a in self.source.args]
        try:
            with (
                ThreadPoolExecutor(max_workers=min(len(configs), os.cpu_count() or 4)) as pool,
                AsyncCompileMode(pool),
            ):
                for c in configs:
                    self.fn.warmup(
                        *mock,
                        grid=(1,),
                        **_constexprs(c, self.source.k),
                        num_warps=c.num_warps,
                        num_stages=c.num_stages,
                    )
        except Exception as error:  # each configuration still compiles at its first launch
            artifact_logger("perf_hints").info("parallel template compile failed: %s", error)

    def _cache_key(self, device) -> str:
        import triton

        parts = [
            ("schema", str(SCHEMA_VERSION)),
            ("source", self.source.source),
            ("epilogue", self.epilogue.source.source if self.epilogue else ""),
            ("device", torch.cuda.get_device_name(device)),
            ("triton", triton.__version__),
        ]
        digest = hashlib.sha256()
        for key, value in parts:
            digest.update(f"{key}={value}\n".encode())
        return f"matmul_{self.source.op}_{digest.hexdigest()[:24]}"
