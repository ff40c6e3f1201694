"""Host microseconds of one ATen call by each path a wrapper can take, on tiny CUDA tensors.

    python tools/device/call_costs.py

For a convolution, an addmm and an add: the OpOverload's C++ callable (what ember's
wrappers call), the public torch function, and the public function with `out=`
(torch.compile's `extern_kernels`); each over 3000 calls back to back, best of 5.
"""

from __future__ import annotations

import functools
import time

import torch


def _us(fn, calls: int = 3000) -> float:
    for _ in range(200):
        fn()
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    aten = torch.ops.aten
    cuda = {"device": "cuda", "dtype": torch.bfloat16}
    x = torch.randn(1, 8, 4, 4, **cuda).to(memory_format=torch.channels_last)
    w = torch.randn(8, 8, 1, 1, **cuda).to(memory_format=torch.channels_last)
    conv_args = (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    conv_op = aten.convolution.default._op
    a, b, bias = torch.randn(8, 8, **cuda), torch.randn(8, 8, **cuda), torch.randn(8, **cuda)
    out = torch.empty(8, 8, **cuda)
    addmm_op = aten.addmm.default._op
    add_op = aten.add.Tensor._op
    bound = functools.partial(torch.empty_strided, device="cuda")
    try:  # torch.compile's allocator, for reference only
        from torch._C._dynamo.guards import _empty_strided_cuda as dynamo_empty
    except ImportError:
        dynamo_empty = bound
    rows = {
        "convolution: OpOverload._op": lambda: conv_op(*conv_args),
        "convolution: torch.convolution": lambda: torch.convolution(*conv_args),
        "addmm: OpOverload._op": lambda: addmm_op(bias, a, b),
        "addmm: torch.addmm": lambda: torch.addmm(bias, a, b),
        "addmm: torch.addmm(out=)": lambda: torch.addmm(bias, a, b, out=out),
        "add: OpOverload._op": lambda: add_op(a, b),
        "add: torch.add": lambda: torch.add(a, b),
        "empty_strided": lambda: torch.empty_strided((8, 8), (8, 1), **cuda),
        "partial(empty_strided, device)(dtype=)": lambda: bound(
            (8, 8), (8, 1), dtype=torch.bfloat16
        ),
        "empty (contiguous)": lambda: torch.empty((8, 8), **cuda),
        "tensor.new_empty_strided": lambda: a.new_empty_strided((8, 8), (8, 1)),
        "tensor.new_empty (contiguous)": lambda: a.new_empty((8, 8)),
        "torch._C._dynamo _empty_strided_cuda (reference)": lambda: dynamo_empty(
            (8, 8), (8, 1), torch.bfloat16
        ),
        "tensor.data_ptr()": lambda: a.data_ptr(),
        "tensor.stride() == tuple": lambda: a.stride() == (8, 1),
    }
    for name, fn in rows.items():
        print(f"{name:36s} {_us(fn):7.2f} us")


if __name__ == "__main__":
    main()
