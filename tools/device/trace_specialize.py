"""Print the Python stack wherever a size symbol is specialized to a constant."""

import traceback

import sympy
import torch

import dynamo_capture
from guards import shape_env as shape_env_module

_record = shape_env_module.ShapeEnv.record


def record(self, condition, where=""):
    if isinstance(condition, sympy.Eq) and condition.rhs.is_number:
        print("SPECIALIZE", condition)
        traceback.print_stack(limit=14)
    return _record(self, condition, where)


shape_env_module.ShapeEnv.record = record


def scores(q):
    return (q @ q.transpose(-1, -2)) / (q.size(-1) ** 0.5)


def plain(q):
    return q @ q.transpose(-1, -2)


class Backend:
    supports_dynamic_shapes = True

    def __call__(self, gm, example_inputs):
        return gm.forward


for fn in (plain, scores):
    compiled = dynamo_capture.optimize(fn, backend=Backend(), dynamic=True)
    for length in (3, 5):
        compiled(torch.randn(2, length, 8))
    print(fn.__name__, "entries", len(compiled.entries))
