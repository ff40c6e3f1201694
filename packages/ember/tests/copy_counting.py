"""A TorchFunctionMode that records the shapes of the tensors `copy_` writes.

Copy-backs of mutated inputs are `Tensor.copy_` calls, or one `torch._foreach_copy_`
for a group; tests use the shapes to tell a whole-cache copy from none.
"""

from __future__ import annotations

import torch


class CopyShapes(torch.overrides.TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.copy_:
            self.shapes.append(tuple(args[0].shape))
        elif func is torch._foreach_copy_:  # copy-backs grouped in one call
            self.shapes.extend(tuple(t.shape) for t in args[0])
        return func(*args, **(kwargs or {}))
