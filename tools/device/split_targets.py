"""Split column reductions under other program targets: device time of bandwidth patterns.

    python tools/device/split_targets.py [--targets 512,1024,2048,4096]

For layer norm's backward and a bias gradient (benchmarks/bandwidth_bench.py, model
and large sizes), compiles ember once per `SplitPolicy.target_column_programs` and
prints the device time per call (the profiler's kernel times) and the split kernels'
shares, next to torch.compile's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bandwidth_bench  # noqa: E402


def _short(kernels: dict) -> str:
    return ", ".join(f"{name[:24]} {us:.1f}" for name, us in kernels.items())


def main() -> None:
    import ember
    from inductor_codegen.lowering.split import SplitPolicy, split_reductions

    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", default="512,1024,2048,4096")
    parser.add_argument("--patterns", default="layer_norm_backward,bias_grad")
    args = parser.parse_args()
    for name in args.patterns.split(","):
        fn = bandwidth_bench.PATTERNS[name]
        for size in ("model", "large"):
            inputs = bandwidth_bench._inputs(name, size)
            reference = bandwidth_bench.compiled("torch", fn)
            us, kernels = bandwidth_bench.device_us(lambda f=reference, a=inputs: f(*a))
            print(f"{name:20s} {size:5s} torch          {us:8.1f} us {_short(kernels)}")
            for target in (int(t) for t in args.targets.split(",")):
                ember.reset()
                compiled = ember.compile(fn, backend="inductor")
                with split_reductions(SplitPolicy(target_column_programs=target)):
                    compiled(*inputs)
                us, kernels = bandwidth_bench.device_us(lambda f=compiled, a=inputs: f(*a))
                print(f"{name:20s} {size:5s} ember {target:5d}   {us:8.1f} us {_short(kernels)}")


if __name__ == "__main__":
    main()
