"""Which ops specialize symbolic sizes under this torch (run on each torch version)."""

import traceback

import sympy
import torch

from guards import LocalSource, ShapeEnv
from guards import shape_env as shape_env_module
from guards.fake_tensor import FakeTensorMode

_record = shape_env_module.ShapeEnv.record
hits: list[str] = []


def record(self, condition, where=""):
    if isinstance(condition, sympy.Eq) and condition.rhs.is_number:
        hits.append(str(condition) + "\n" + "".join(traceback.format_stack(limit=8)))
    return _record(self, condition, where)


shape_env_module.ShapeEnv.record = record

OPS = {
    "matmul3d": lambda q: q @ q.transpose(-1, -2),
    "bmm": lambda q: torch.bmm(q, q.transpose(-1, -2)),
    "matmul3d_2d": lambda q: q @ torch.ones(8, 4),
    "truediv": lambda q: q / 2.0,
    "view": lambda q: q.view(q.size(0) * q.size(1), 8),
    "reshape_t": lambda q: q.transpose(0, 1).reshape(-1, 8),
    "softmax": lambda q: q.softmax(-1),
    "linear": lambda q: torch.nn.functional.linear(q, torch.ones(4, 8)),
    "sdpa": lambda q: torch.nn.functional.scaled_dot_product_attention(q, q, q),
}
for name, op in OPS.items():
    hits.clear()
    mode = FakeTensorMode(shape_env=ShapeEnv())
    q = mode.from_real(torch.randn(2, 3, 8), LocalSource("q"), dynamic_dims=range(3))
    try:
        with mode:
            op(q)
        status = "ok" if not hits else "SPECIALIZED"
    except Exception as error:  # noqa: BLE001
        status = f"error {type(error).__name__}: {str(error)[:200]}"
    print(f"{name:12s} {status}")
    if hits:
        print(hits[0])
